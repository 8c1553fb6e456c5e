"""Aggregation: bootstrap errors, failure accounting, missing values."""

import numpy as np
import pandas as pd
import pytest

from benchmark.leaderboard import bootstrap_se, summarize


def test_bootstrap_se_of_constant_data_is_zero():
    assert bootstrap_se(np.full(50, 0.7), 1000, 0) == 0.0


def test_bootstrap_se_matches_the_analytic_standard_error():
    x = np.random.default_rng(0).normal(size=400)
    analytic = x.std(ddof=0) / np.sqrt(len(x))
    assert bootstrap_se(x, 4000, 1) == pytest.approx(analytic, rel=0.08)


def test_bootstrap_se_is_deterministic_and_ignores_nan():
    x = np.array([0.1, 0.5, np.nan, 0.9, 0.3])
    assert bootstrap_se(x, 500, 3) == bootstrap_se(x[np.isfinite(x)], 500, 3)
    assert np.isnan(bootstrap_se(np.array([1.0]), 500, 3))


def test_summarize_excludes_failures_and_counts_missing_values():
    df = pd.DataFrame({
        "status": ["ok", "ok", "ok", "failed"],
        "m": [1.0, 3.0, np.nan, np.nan],
    })
    row = summarize(df, ["m"], 200, 0, "k")
    assert (row["n_selected"], row["n_ok"], row["n_failed"], row["m_n"]) == (4, 3, 1, 2)
    assert row["m"] == 2.0 and row["complete"]


def test_summarize_counts_what_is_missing_against_the_full_set():
    df = pd.DataFrame({"status": ["ok", "failed", "missing", "excluded"], "m": [1.0, np.nan, np.nan, np.nan]})
    row = summarize(df, ["m"], 200, 0, "k", n_total=10)
    assert (row["n_selected"], row["n_total"], row["n_ok"], row["n_failed"], row["n_missing"]) == (3, 10, 1, 1, 8)
    assert not row["complete"] and row["mark"] == "PARTIAL 2/10"


def test_bootstrap_se_depends_on_order_so_callers_sort():
    # why the leaderboard sorts rows by query id: the same values in another order resample differently
    x = np.random.default_rng(2).normal(size=50)
    assert bootstrap_se(x, 300, 0) != bootstrap_se(x[::-1], 300, 0)
