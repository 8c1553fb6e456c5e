"""Aggregation: bootstrap errors, failure accounting, missing values."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from benchmark.tables.leaderboard import bootstrap_se, format_table, summarize


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


def test_tables_hold_every_metric_set_of_a_run_whatever_the_command_order(tmp_path):
    """A run folder scored with two metric sets appears under both, and the tables do not depend on which came last."""
    import json

    from benchmark.commands.run import compose, run_pipeline

    def run(results, metrics):
        cfg, _ = compose(["editor=overedit", "queryset=demo_mini", "profile=tiny", f"metrics={metrics}",
                          f"paths.results={results}", "progress=false", "aggregate.bootstrap_resamples=100"])
        return run_pipeline(cfg, "overedit")

    first, second = tmp_path / "basic-then-hatie", tmp_path / "hatie-then-basic"
    for results, order in ((first, ("basic", "hatie")), (second, ("hatie", "basic"))):
        for metrics in order:
            summary = run(results, metrics)
        scored = json.loads((Path(summary["run_dir"]) / "run.json").read_text())["scored"]
        assert sorted(v["metric_set"] for v in scored.values()) == ["basic", "hatie"]
    provenance = ["git_sha", "versions", "device"]
    for name in ("leaderboard.csv", "leaderboard_by_type.csv", "leaderboard_by_class.csv"):
        a, b = (pd.read_csv(r / name).drop(columns=provenance) for r in (first, second))
        assert list(a["metric_set"].unique()) == ["basic", "hatie"] and a["complete"].all()
        pd.testing.assert_frame_equal(a, b)
    metrics = pd.read_csv(first / "leaderboard_metrics.csv").set_index("metric")["metric_set"]
    assert metrics["psnr"] == "basic" and metrics["Total"] == "hatie"
    shown = format_table(first)
    assert "metrics=basic" in shown and "metrics=hatie" in shown
    hatie_section = shown[shown.index("metrics=hatie"):]
    assert "Total↑" in hatie_section and "psnr↑" not in hatie_section  # each set shows its own columns
