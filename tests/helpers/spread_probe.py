"""pytest plugin: how close each tolerance check of the tests came to failing, per call site, on this machine.

    PYTHONPATH=$PWD:tests/helpers python -m pytest -p spread_probe -n 2 tests/test_conventional.py ...
    cat /tmp/spread.jsonl.*    # one line per check: site, max |a - b|, and the share of the tolerance it used

It wraps np.allclose, np.isclose, torch.allclose, torch.testing.assert_close and math.isclose (their results are
unchanged). The tolerance comments in tests/ that say "measured here (tests/helpers/spread_probe.py, ...)" come
from it; rerun it on a machine whose kernels round differently to see how the spread moves. SPREAD_OUT sets the
file prefix.
"""
import json
import math
import os
import traceback

import numpy as np
import torch

RECORDS = []

def _site():
    for fr in reversed(traceback.extract_stack()[:-2]):
        if "/tests/" in fr.filename and "spread_probe" not in fr.filename:
            return f"{os.path.basename(fr.filename)}:{fr.lineno}"
    return "?"

def _ratio(a, b, rtol, atol):
    try:
        a = np.asarray(a.detach().cpu().double() if isinstance(a, torch.Tensor) else a, dtype=float)
        b = np.asarray(b.detach().cpu().double() if isinstance(b, torch.Tensor) else b, dtype=float)
        a, b = np.broadcast_arrays(a, b)
        ok = np.isfinite(a) & np.isfinite(b)
        if not ok.any():
            return 0.0, 0.0
        d = np.abs(a[ok] - b[ok])
        allow = atol + rtol * np.abs(b[ok])
        r = np.where(allow > 0, d / np.where(allow > 0, allow, 1), np.where(d > 0, np.inf, 0))
        return float(d.max()), float(r.max())
    except Exception:
        return float("nan"), float("nan")

def _rec(kind, a, b, rtol, atol):
    d, r = _ratio(a, b, rtol, atol)
    RECORDS.append({"site": _site(), "kind": kind, "maxdiff": d, "ratio": r, "rtol": rtol, "atol": atol,
                    "test": os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]})


_np_allclose, _np_isclose, _t_allclose = np.allclose, np.isclose, torch.allclose
_t_ac, _m_isclose = torch.testing.assert_close, math.isclose


def np_allclose(a, b, rtol=1e-5, atol=1e-8, equal_nan=False):
    _rec("np.allclose", a, b, rtol, atol)
    return _np_allclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)


def np_isclose(a, b, rtol=1e-5, atol=1e-8, equal_nan=False):
    _rec("np.isclose", a, b, rtol, atol)
    return _np_isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)


def t_allclose(a, b, rtol=1e-5, atol=1e-8, equal_nan=False):
    _rec("torch.allclose", a, b, rtol, atol)
    return _t_allclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)


def t_ac(actual, expected, *args, rtol=None, atol=None, **kw):
    # unset tolerances: assert_close's float32 defaults
    _rec("assert_close", actual, expected, 1.3e-6 if rtol is None else rtol, 1e-5 if atol is None else atol)
    return _t_ac(actual, expected, *args, rtol=rtol, atol=atol, **kw)


def m_isclose(a, b, *, rel_tol=1e-9, abs_tol=0.0):
    _rec("math.isclose", a, b, rel_tol, abs_tol)
    return _m_isclose(a, b, rel_tol=rel_tol, abs_tol=abs_tol)


np.allclose, np.isclose, torch.allclose = np_allclose, np_isclose, t_allclose
torch.testing.assert_close, math.isclose = t_ac, m_isclose


def pytest_sessionfinish(session):
    out = os.environ.get("SPREAD_OUT", "/tmp/spread.jsonl")
    wid = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(f"{out}.{wid}", "w") as f:
        for r in RECORDS:
            f.write(json.dumps(r) + "\n")
