"""Time the scoring stage of any metric set on the demo set: the same figures for every suite.

    python scripts/bench/bench_suites.py [--metrics conventional,editval_oracle,augclip,bpm,hatie_oracle]
                                   [--profile random] [--per-type 2] [--device cpu] [--precision fp32] [--repeat 2]
                                   [--prefetch] [--load-threads N] [--num-workers N]
    (or: make bench-suites ARGS="--metrics conventional --profile tiny")

Edits are the demo set's ground-truth targets (every suite scores them as it would an editor's edits). Each metric
set runs in its own process (peak RSS is its own); a first pass loads the models, then `--repeat` passes run from
cold feature caches and the fastest is kept. Per set it prints queries/s, the share of wall time inside backbone forward passes (what the suite's
`model_seconds` counts), the non-forward time in ms per query split by the steps the suite times (`load images`:
waiting for decoded queries; `cache keys`, `batch assembly`: the shared feature cache; the suite's own steps) and
`untimed` (wall minus forward minus the steps), and peak RSS. `--profile random` (default) gives the real-size
architectures with random weights (the real cost; on a CPU, minutes per set), `tiny` the test models.
`--prefetch`, `--load-threads` and `--num-workers` set every suite's loading as a run's
`metrics.<suite>.prefetch` / `load_threads` and `num_workers` do (speed only).
scripts/bench/bench_hatie.py adds HATIE's batched-vs-per-query comparison and its finer step split.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_SETS = "conventional,editval_oracle,augclip,bpm,hatie_oracle"


def worker(metric_set: str, args: argparse.Namespace) -> dict:
    """Score the demo queries with every suite of `metric_set`; the figures of the fastest pass."""
    sys.path.insert(0, str(ROOT))
    from hydra.utils import instantiate

    from benchmark.commands.run import compose
    from benchmark.metrics.features import shared_cache
    from benchmark.querysets.io import load_queryset

    overrides = [f"metrics={metric_set}", f"profile={args.profile}", "queryset=demo", f"device={args.device}"]
    cfg, _ = compose(overrides)
    qs = load_queryset(ROOT / "datasets" / "demo")
    out: dict = {"metric_set": metric_set, "suites": {}}
    for name, node in cfg.metrics.items():
        if args.precision != "fp32" and "precision" in node:
            node.precision = args.precision
        if "prefetch" in node:  # every suite that loads queries (the pairwise pixel metrics load nothing)
            node.prefetch, node.load_threads = args.prefetch, args.load_threads
        suite = instantiate(node)
        if not hasattr(suite, "score_queries"):
            continue  # a pairwise metric (basic's pixel statistics): no backbone, nothing to time here
        by_type: dict[str, list] = {}
        for q in qs.queries:
            if q.target_image and suite.applies_to(q, "instruction") and len(by_type.get(q.edit_type, [])) < args.per_type:
                by_type.setdefault(q.edit_type, []).append(q)
        queries = [q for group in by_type.values() for q in group]
        edits = [qs.path(q.target_image) for q in queries]
        best = None
        with tempfile.TemporaryDirectory() as work:
            for i in range(args.repeat + 1):  # pass 0 loads the models (lazily, on first use): not timed
                shared_cache().clear()
                suite.timings.clear()
                t0 = time.perf_counter()
                rows = [r for batch in suite.score_queries(qs, queries, edits, work_dir=Path(work), progress=False,
                                                           num_workers=args.num_workers) for r in batch]
                wall = time.perf_counter() - t0
                if i > 0 and (best is None or wall < best["wall_s"]):
                    best = {"wall_s": wall, "forward_s": sum(suite.model_seconds().values()),
                            "steps": dict(suite.step_seconds()) if hasattr(suite, "step_seconds") else {},
                            "ahead": dict(suite.ahead_seconds()) if hasattr(suite, "ahead_seconds") else {},
                            "n": len(queries), "failed": sum(r["status"] != "ok" for r in rows),
                            "types": len(by_type)}
        out["suites"][name] = best
    out["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    return out


def report(result: dict) -> None:
    for name, r in result["suites"].items():
        n, wall, fwd = r["n"], r["wall_s"], r["forward_s"]
        steps = {k: v for k, v in r["steps"].items() if v > 0}
        untimed = wall - fwd - sum(steps.values())
        print(f"\n== {result['metric_set']} / {name}: {n} queries ({r['types']} edit types, {r['failed']} failed), "
              f"{n / wall:.3f} queries/s, {100 * fwd / wall:.0f}% of wall in forward passes, "
              f"peak RSS {result['peak_rss_gb']:.2f} GB")
        print(f"   non-forward: {1000 * (wall - fwd) / n:.1f} ms/query = "
              + ", ".join(f"{k} {1000 * v / n:.1f}" for k, v in sorted(steps.items(), key=lambda kv: -kv[1]))
              + f", untimed {1000 * untimed / n:.1f}")
        ahead = {k: v for k, v in r.get("ahead", {}).items() if v > 0}
        if ahead:  # HATIE's plans (and inputs, with prefetch) made on other threads, inside the waits above
            print("   done ahead on other threads (summed over threads, ms/query): "
                  + ", ".join(f"{k} {1000 * v / n:.1f}" for k, v in ahead.items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--metrics", default=DEFAULT_SETS, help="metric sets (configs/metrics), comma-separated")
    ap.add_argument("--profile", default="random", choices=("random", "tiny", "pretrained"))
    ap.add_argument("--per-type", type=int, default=2, help="queries per edit type the suite scores")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--precision", default="fp32", help="every suite's `precision` (fp32, tf32 on CUDA, bf16)")
    ap.add_argument("--repeat", type=int, default=2, help="scoring passes per set (cold caches); the fastest is kept")
    ap.add_argument("--prefetch", action="store_true", help="every suite loads its next chunk while one is scored")
    ap.add_argument("--load-threads", type=int, default=None, help="loader threads (default: one per core, at most 4)")
    ap.add_argument("--num-workers", type=int, default=0, help="DataLoader worker processes instead of loader threads")
    ap.add_argument("--json", action="store_true",
                    help="also print every set's figures as one line `JSON {...}` at the end (for other scripts)")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    from benchmark.commands.gpucheck import device_unavailable

    why = device_unavailable(args.device)
    if why:
        print(why, file=sys.stderr)
        sys.exit(2)
    if args.worker:
        print(json.dumps(worker(args.worker, args)))
        return
    loading = (f"{args.num_workers} DataLoader workers" if args.num_workers else
               f"{args.load_threads or 'default'} loader threads, {'prefetch' if args.prefetch else 'no prefetch'}")
    print(f"bench-suites: profile={args.profile} device={args.device} precision={args.precision}, "
          f"{args.per_type} demo queries per edit type; loading: {loading}")
    results = {}
    failed = []
    for metric_set in args.metrics.split(","):
        cmd = [sys.executable, __file__, "--worker", metric_set, "--profile", args.profile, "--per-type",
               str(args.per_type), "--device", args.device, "--precision", args.precision, "--repeat", str(args.repeat),
               "--num-workers", str(args.num_workers), *(["--prefetch"] if args.prefetch else []),
               *(["--load-threads", str(args.load_threads)] if args.load_threads else [])]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        if proc.returncode != 0:
            print(f"\n== {metric_set}: FAILED (exit {proc.returncode})\n{proc.stderr[-2000:]}")
            failed.append(metric_set)
            continue
        results[metric_set] = json.loads(proc.stdout.strip().splitlines()[-1])
        report(results[metric_set])
    if args.json:  # a set that failed is absent
        print("JSON " + json.dumps({"device": args.device, "precision": args.precision, "sets": results}))
    if failed:  # a run with a failed set is not a whole measurement: say so in the exit status too
        print(f"bench-suites: {len(failed)} of {len(failed) + len(results)} metric set(s) FAILED: {', '.join(failed)}",
              file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
