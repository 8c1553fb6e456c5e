"""Capacity on paper: measure per-query edit and score cost here (tiny profile, CPU), then project the wall time of a
full query set (HATIE: 49,840 queries) on 1 and N GPUs from per-query GPU costs given as parameters.

    python scripts/tools/capacity.py                                   # measure (CPU, tiny) + print the formula
    python scripts/tools/capacity.py --gpu-edit-s 6.0 --gpu-score-s 0.5 --gpus 1 8 --skip-measure

The projection (docs/scale.md states its assumptions):

    wall(N) = T_start + ceil(Q / N) * (e + s) + T_agg(Q)

with Q queries, N shards (one per GPU), e and s the per-query edit and score seconds of one GPU at the batch size
used, T_start the slowest worker's start (process, weights to the GPU) and T_agg the single aggregate at the end
(bootstrap SEs and FID/IQ over Q rows; measured here on CPU with `--agg`).
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
HATIE_QUERIES = 49_840


def measure(editors: list[str], queryset: str, first: int | None, threads: int) -> list[dict]:
    """Per-query seconds of the edit stage (per editor) and of the score stage (basic, hatie) on this CPU."""
    import torch

    from benchmark.commands.run import compose, run_pipeline

    torch.set_num_threads(threads)
    rows = []
    with tempfile.TemporaryDirectory(prefix="capacity-") as tmp:
        # warm-up (not reported): first imports, first backbone loads, allocator growth
        for metrics in ("basic", "hatie"):
            cfg, choices = compose(["editor=identity", "queryset=demo_mini", "queryset.first=2", "profile=tiny",
                                    f"metrics={metrics}", f"paths.results={tmp}/warmup", "progress=false",
                                    "preflight=false", "stages=[edit,score]"])
            run_pipeline(cfg, choices["editor"])
        for editor in editors:
            for metrics, stages in (("basic", "[edit,score]"), ("hatie", "[score]")):
                over = [f"editor={editor}", f"queryset={queryset}", "profile=tiny", f"metrics={metrics}",
                        f"paths.results={tmp}", "progress=false", "preflight=false", f"stages={stages}"]
                if first:
                    over.append(f"queryset.first={first}")
                cfg, choices = compose(over)
                t0 = time.perf_counter()
                summary = run_pipeline(cfg, choices["editor"])
                wall = time.perf_counter() - t0
                n = summary["score"].total
                t = summary["timings"]
                if "edit" in t:
                    rows.append({"what": f"edit {editor}", "queries": n, "load_s": t.get("load editor", 0.0),
                                 "per_query_s": t["edit"] / n, "wall_s": wall})
                rows.append({"what": f"score {metrics} ({editor} edits)", "queries": n,
                             "load_s": t.get("load editor", 0.0), "per_query_s": t["score"] / n, "wall_s": wall})
        shutil.rmtree(tmp, ignore_errors=True)
    return rows


def measure_aggregate(dim: int = 2048, rows: int = 2000, boot_rows: int = 5000) -> dict[str, float]:
    """Unit costs of the final aggregate, timed separately so that load noise does not mix them:
    `row_s` feature statistics per row (2048-d), `fd_s` one Fréchet distance (fixed per resample), `sqrt_s` the
    reference covariance's square root (once), `boot_s` one bootstrap SE per row (10,000 resamples)."""
    import numpy as np

    from benchmark.metrics.fid import FeatureStats, _sqrt_psd, frechet_distance
    from benchmark.tables.leaderboard import bootstrap_se

    rng = np.random.default_rng(0)
    x = rng.gamma(2.0, 0.2, (rows, dim)).astype(np.float32)
    t0 = time.perf_counter()
    st = FeatureStats.of(x)
    row_s = (time.perf_counter() - t0) / rows
    mu, cov = st.mean_cov()
    cov = cov + np.eye(dim) * 1e-3
    t0 = time.perf_counter()
    r1 = _sqrt_psd(cov)
    sqrt_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    frechet_distance(mu, cov, mu + 0.01, cov * 1.01, r1)
    fd_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    bootstrap_se(rng.normal(size=boot_rows), 10_000, 0)
    boot_s = (time.perf_counter() - t0) / boot_rows
    return {"row_s": row_s, "fd_s": fd_s, "sqrt_s": sqrt_s, "boot_s": boot_s}


def aggregate_seconds(unit: dict[str, float], q: int, n_metrics: int, resamples: int = 30) -> float:
    """T_agg(Q): bootstrap SEs of `n_metrics` columns over Q rows in 3 tables (overall, by type, by class: each
    partitions the rows) + FID/IQ: the statistics of the edits and sources (<= 2 Q rows), `resamples` resamples
    (each touches ~63% of the Q rows: rows drawn 0 times are skipped), one square root and resamples + 1 distances."""
    boot = 3 * n_metrics * q * unit["boot_s"]
    fid = unit["sqrt_s"] + (resamples + 1) * unit["fd_s"] + (2 + resamples * 0.632) * q * unit["row_s"]
    return boot + fid


def projection(q: int, n_gpus: int, edit_s: float, score_s: float, start_s: float, agg_s: float) -> float:
    """wall(N) = T_start + ceil(Q / N) * (e + s) + T_agg, in seconds."""
    return start_s + math.ceil(q / n_gpus) * (edit_s + score_s) + agg_s


def _hms(s: float) -> str:
    return f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.1f} min" if s >= 60 else f"{s:.1f} s"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--editors", nargs="+", default=["identity", "ip2p"], help="editors to time (tiny profile)")
    ap.add_argument("--queryset", default="demo_mini")
    ap.add_argument("--first", type=int, default=None, help="only the first N queries of the set")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--skip-measure", action="store_true", help="only the projection")
    ap.add_argument("--agg", action="store_true", help="also time FID + IQ resamples at pool3 size (2048-d)")
    ap.add_argument("--queries", type=int, default=HATIE_QUERIES, help="Q (default: the full HATIE set)")
    ap.add_argument("--gpus", type=int, nargs="+", default=[1, 8], help="N values to project")
    ap.add_argument("--gpu-edit-s", type=float, default=None, help="e: edit seconds per query on one GPU (assumed)")
    ap.add_argument("--gpu-score-s", type=float, default=None, help="s: score seconds per query on one GPU (assumed)")
    ap.add_argument("--start-s", type=float, default=60.0, help="T_start: a worker's start, weights to the GPU")
    ap.add_argument("--agg-s", type=float, default=None, help="T_agg: the final aggregate (default: from --agg, else 0)")
    ap.add_argument("--hatie-columns", type=int, default=None,
                    help="bootstrapped metric columns of a HATIE row (default: its criteria OF, BF, OC, BC)")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.hatie_columns is None:
        from benchmark.metrics.hatie.weights import CRITERIA

        args.hatie_columns = len(CRITERIA)

    print(f"machine: {os.cpu_count()} CPU cores, load average {os.getloadavg()[0]:.2f} (1 min) at start")
    if not args.skip_measure:
        rows = measure(args.editors, args.queryset, args.first, args.threads)
        print(f"\nmeasured on this CPU, profile=tiny, {args.threads} torch thread(s) (random weights: pipeline cost, "
              "not real-model cost)")
        print(f"{'stage':<34}{'queries':>8}{'load s':>9}{'s/query':>10}")
        for r in rows:
            print(f"{r['what']:<34}{r['queries']:>8}{r['load_s']:>9.2f}{r['per_query_s']:>10.3f}")
        print(f"load average {os.getloadavg()[0]:.2f} at the end")
    agg_s = args.agg_s
    if args.agg:
        unit = measure_aggregate()
        print(f"\naggregate unit costs (CPU, {os.cpu_count()} cores): feature statistics {unit['row_s'] * 1e3:.3f} ms "
              f"per 2048-d row, Fréchet distance {unit['fd_s']:.2f} s each (31 per IQ), covariance square root "
              f"{unit['sqrt_s']:.2f} s, bootstrap SE {unit['boot_s'] * 1e6:.1f} us per row and column "
              f"(10,000 resamples); {args.hatie_columns} HATIE columns")
        t_agg = aggregate_seconds(unit, args.queries, args.hatie_columns)
        print(f"T_agg(Q = {args.queries:,}) = {_hms(t_agg)}")
        if agg_s is None:
            agg_s = t_agg
    agg_s = agg_s or 0.0
    q = args.queries
    print(f"\nprojection: wall(N) = T_start + ceil(Q / N) * (e + s) + T_agg, Q = {q:,}")
    if args.gpu_edit_s is None or args.gpu_score_s is None:
        print("  (pass --gpu-edit-s and --gpu-score-s: per-query GPU seconds measured on the target GPU)")
        return 0
    print(f"  e = {args.gpu_edit_s} s, s = {args.gpu_score_s} s, T_start = {args.start_s} s, T_agg = {agg_s:.0f} s")
    for n in args.gpus:
        print(f"  N = {n}: {_hms(projection(q, n, args.gpu_edit_s, args.gpu_score_s, args.start_s, agg_s))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
