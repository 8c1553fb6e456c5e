"""Capacity on paper: measure per-query edit and score cost here (tiny profile, CPU), then project the wall time of a
full query set (HATIE: 49,840 queries) on 1 and N GPUs from per-query GPU costs given as parameters.

    python scripts/capacity.py                                   # measure (CPU, tiny) + print the formula
    python scripts/capacity.py --gpu-edit-s 6.0 --gpu-score-s 0.5 --gpus 1 8 --skip-measure

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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
HATIE_QUERIES = 49_840


def measure(editors: list[str], queryset: str, first: int | None, threads: int) -> list[dict]:
    """Per-query seconds of the edit stage (per editor) and of the score stage (basic, hatie) on this CPU."""
    import torch

    from benchmark.run import compose, run_pipeline

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


def measure_aggregate(dim: int, sizes: tuple[int, ...], resamples: int) -> list[tuple[int, float]]:
    """Seconds of FID + IQ with its resamples (the part of the aggregate that grows fastest with Q) by set size."""
    import numpy as np

    from benchmark.metrics.fid import image_quality_with_error

    rng = np.random.default_rng(0)
    out = []
    for n in sizes:
        ref = rng.gamma(2.0, 0.2, (n, dim)).astype(np.float32)
        gen = (ref + rng.normal(0, 0.05, ref.shape)).astype(np.float32)
        t0 = time.perf_counter()
        image_quality_with_error(ref, gen, resamples=resamples)
        out.append((n, time.perf_counter() - t0))
    return out


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
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

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
        timed = measure_aggregate(2048, (256, 512), 30)
        (n1, t1), (n2, t2) = timed
        slope = (t2 - t1) / (n2 - n1)
        fixed = t1 - slope * n1
        print("\nFID + IQ (30 resamples), 2048-d: " + ", ".join(f"n={n}: {t:.1f} s" for n, t in timed)
              + f" -> {fixed:.1f} s + {slope * 1000:.2f} ms per edited row")
        if agg_s is None:
            agg_s = fixed + slope * args.queries
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
