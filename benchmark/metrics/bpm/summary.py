"""The paper's BPM for one leaderboard group (docs/bpm.md, "Normalisation").

BPM = w * S_semantic + (1 - w) * S_region with S_semantic = Norm(S_modify) + Norm(S_preserve), Norm being min-max
over the evaluated set. That makes BPM a set-level quantity: it is computed here, from the group's ok rows after
every shard's parts are merged (the aggregate stage reads them all), never per row or per shard. Its standard
error comes from a bootstrap that re-normalises every resample.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

N_RESAMPLES = 1000


def _minmax(x: np.ndarray) -> np.ndarray | None:
    lo, hi = float(x.min()), float(x.max())
    return None if hi <= lo else (x - lo) / (hi - lo)


def bpm_values(mod: np.ndarray, pre: np.ndarray, region: np.ndarray, w: float) -> tuple[float, float]:
    """(mean S_semantic, mean BPM) of one set; NaN when a term has fewer than two distinct values."""
    nm, npre = _minmax(mod), _minmax(pre)
    if nm is None or npre is None:
        return math.nan, math.nan
    sem = nm + npre
    return float(sem.mean()), float((w * sem + (1 - w) * region).mean())


def summarize(ok: Any, means: Mapping[str, float], ses: Mapping[str, float], *, overall: bool,
              seed: int = 0) -> dict[str, Any]:
    """BPM, BPM_se, BPM_n and S_semantic over the group's ok rows with finite terms."""
    out: dict[str, Any] = {"BPM": math.nan, "BPM_se": math.nan, "BPM_n": 0, "S_semantic": math.nan}
    need = ("S_modify", "S_preserve", "S_region", "semantic_weight")
    if not len(ok) or any(c not in ok for c in need):
        return out
    arr = {c: ok[c].to_numpy(dtype=np.float64) for c in need}
    keep = np.all([np.isfinite(v) for v in arr.values()], axis=0)
    mod, pre, reg, ws = (arr[c][keep] for c in need)
    if not len(mod):
        return out
    if np.ptp(ws) > 0:
        raise ValueError(f"BPM rows mix semantic weights {sorted(set(ws.tolist()))}: they belong to different runs")
    w = float(ws[0])
    sem, bpm = bpm_values(mod, pre, reg, w)
    out.update({"BPM": bpm, "BPM_n": int(len(mod)), "S_semantic": sem})
    if math.isfinite(bpm) and len(mod) > 1:
        rng = np.random.default_rng(seed)
        boots = []
        for _ in range(N_RESAMPLES):
            i = rng.integers(0, len(mod), len(mod))
            b = bpm_values(mod[i], pre[i], reg[i], w)[1]
            if math.isfinite(b):
                boots.append(b)
        out["BPM_se"] = float(np.std(boots, ddof=1)) if len(boots) > 1 else math.nan
    return out
