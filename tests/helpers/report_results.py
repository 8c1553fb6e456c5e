"""A small results folder for the report tests, made by the real pipeline on demo_mini (14 queries) with the
basic metrics: a complete run, a partial run (limit) and a run with failed queries. Built once per session.
(HATIE scoring of the same set takes 10-20 s on this machine; the report's HATIE sections are tested on
leaderboard frames built in tests/test_report.py.)"""

from __future__ import annotations

from pathlib import Path

_BUILT: dict[str, Path] = {}


def _run(results: Path, *overrides: str) -> dict:
    from benchmark.commands.run import compose, run_pipeline

    cfg, choices = compose(["queryset=demo_mini", "profile=tiny", f"paths.results={results}", "progress=false",
                            "aggregate.bootstrap_resamples=50", *overrides])
    return run_pipeline(cfg, choices["editor"])


def report_results(base: Path) -> Path:
    """The results folder (under `base`, the session's temporary folder), built on first use."""
    if "results" in _BUILT:
        return _BUILT["results"]
    results = base / "report-results"
    _run(results, "editor=identity", "metrics=basic")
    _run(results, "editor=overedit", "metrics=basic", "limit=10")  # PARTIAL 10/14
    _run(results, "editor=identity", "editor._target_=failing_editor.FailsEvery", "+editor.every=4",
         "metrics=basic", "max_failed_fraction=1", "batch_size=1")  # 4 of 14 failed, with tracebacks
    _BUILT["results"] = results
    return results
