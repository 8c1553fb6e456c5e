"""The aggregate stage: the leaderboard CSVs of every run under a results folder.

Each run's rows are computed by `benchmark.tables.leaderboard` (`run_rows`) and cached by `benchmark.tables.aggregate_cache`;
this module writes the tables from them. It sits above both (the cache reads the leaderboard's rows).
"""

from __future__ import annotations

import time
from pathlib import Path

from benchmark.io.fileio import atomic_write_text
from benchmark.tables.aggregate_cache import describe, summarise
from benchmark.tables.leaderboard import (
    FLOAT_FORMAT,
    SWEEP_FILE,
    TURNS_TABLE,
    metric_table,
    sweep_table,
    tables_from_summaries,
    turns_table,
)


def write_leaderboards(results: Path, metric_sig: str | None, n_resamples: int, seed: int, *,
                       cache: bool = True) -> dict[str, Path]:
    """Rebuild the leaderboard CSVs from every run under `results`: one row per run folder and metric set it was
    scored with (`metric_sig` None), so the tables never depend on which command ran last; or only `metric_sig`.

    Each run's rows come from the aggregate cache (`benchmark.tables.aggregate_cache`) when none of their inputs changed,
    so adding one run recomputes one; `cache=False` recomputes every run. Either way the files are the same bytes."""
    t0 = time.perf_counter()
    summaries, stats = summarise(results, metric_sig, n_resamples, seed, cache=cache)
    tables = tables_from_summaries(summaries)
    written = {}
    for fname, df in tables.items():
        path = results / fname
        atomic_write_text(path, df.to_csv(index=False, float_format=FLOAT_FORMAT))
        written[fname] = path
    path = results / "leaderboard_metrics.csv"
    atomic_write_text(path, metric_table(summaries).to_csv(index=False))
    written["leaderboard_metrics.csv"] = path
    path = results / SWEEP_FILE  # always written (header only when no editor has a sweep): never a stale one
    atomic_write_text(path, sweep_table(summaries, tables).to_csv(index=False, float_format=FLOAT_FORMAT))
    written[SWEEP_FILE] = path
    path = results / TURNS_TABLE  # always written too (header only without multi-turn sessions)
    atomic_write_text(path, turns_table(summaries).to_csv(index=False, float_format=FLOAT_FORMAT))
    written[TURNS_TABLE] = path
    print(f"[editmeter] aggregate: {describe(stats, len(summaries), time.perf_counter() - t0)}")
    return written
