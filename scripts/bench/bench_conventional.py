"""Time the conventional suite's scoring on the demo set: tiny and real-size random-weight encoders (CLIP ViT-B/32,
DINO ViT-B/16 and ViT-S/16, LPIPS-alex), batched (encoder batches of 32, 64 queries per round, the process-wide
feature cache on) vs per query (batch size 1, one query per round, feature cache off: every query re-encodes its
source). Each (weights, mode) runs in its own process, so model loads, caches and peak RSS are its own.

    python scripts/bench/bench_conventional.py [--queries 56] [--weights tiny,random] [--device cpu]

Edits are the demo set's ground-truth targets (256 px), so every column is defined and non-trivial.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODES = {
    "batched": {"batch_size": 32, "chunk_size": 64, "cache_mb": "512"},
    "per-query": {"batch_size": 1, "chunk_size": 1, "cache_mb": "0"},
}


def worker(weights: str, mode: str, n_queries: int, device: str) -> dict:
    sys.path.insert(0, str(ROOT))
    import torch

    from benchmark.metrics.conventional.suite import ConventionalSuite
    from benchmark.metrics.features import shared_cache
    from benchmark.models.clip import load_clip
    from benchmark.models.dino_v1 import load_dino_v1
    from benchmark.models.perceptual import load_lpips
    from benchmark.querysets.io import load_queryset

    m = MODES[mode]
    qs = load_queryset(ROOT / "datasets" / "demo")
    queries = list(qs.queries)[:n_queries]
    suite = ConventionalSuite(
        clip=partial(load_clip, weights=weights),
        dino_ev=partial(load_dino_v1, weights=weights, model_id="facebook/dino-vitb16", recipe="resize224"),
        dino_mb=partial(load_dino_v1, weights=weights, model_id="facebook/dino-vits16", recipe="resize256-crop224"),
        lpips=partial(load_lpips, weights=weights), device=device, batch_size=m["batch_size"],
        chunk_size=m["chunk_size"])
    t0 = time.perf_counter()
    for name in ("clip", "dino_ev", "dino_mb", "lpips"):
        suite._get(name)
    load_s = time.perf_counter() - t0
    n = 0
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    for rows in suite.score_queries(qs, queries, [qs.path(q.target_image) for q in queries], work_dir=ROOT,
                                    progress=False):
        n += sum(r["status"] == "ok" for r in rows)
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0  # on a shared machine wall >> CPU: both are reported
    forward = suite.model_seconds()
    stats = shared_cache().stats()
    return {"weights": weights, "mode": mode, "queries": n, "images": len({q.image for q in queries}),
            "wall_s": wall, "cpu_s": cpu, "load_s": load_s, "queries_per_s": n / wall, "queries_per_cpu_s": n / cpu, "forward_s": forward,
            "encoded": sum(stats["forward_items"].values()), "peak_rss_gb": resource.getrusage(
                resource.RUSAGE_SELF).ru_maxrss / 1024**2, "device": device, "threads": torch.get_num_threads()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", type=int, default=56, help="first N demo queries (7 per source image)")
    ap.add_argument("--weights", default="tiny,random", help="tiny and/or random (real-size random weights)")
    ap.add_argument("--modes", default="batched,per-query")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--worker", nargs=2, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print("RESULT " + json.dumps(worker(*args.worker, args.queries, args.device)))
        return
    results = []
    for weights in args.weights.split(","):
        for mode in args.modes.split(","):
            env = os.environ | {"HF_HUB_OFFLINE": "1", "EDITMETER_FEATURE_CACHE_MB": MODES[mode]["cache_mb"]}
            out = subprocess.run([sys.executable, __file__, "--worker", weights, mode, "--queries", str(args.queries),
                                  "--device", args.device], capture_output=True, text=True, check=False, env=env)
            line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
            if out.returncode or not line:
                sys.exit(f"{weights}/{mode} failed:\n{out.stderr[-3000:]}")
            results.append(json.loads(line[0][7:]))
    for r in results:
        print(f"\n== {r['weights']} / {r['mode']}: {r['queries']} queries on {r['images']} images, {r['device']} "
              f"({r['threads']} threads)")
        print(f"  {r['queries_per_s']:.2f} queries/s, wall {r['wall_s']:.1f} s (+ model load {r['load_s']:.1f} s), "
              f"CPU {r['cpu_s']:.1f} s ({r['queries_per_cpu_s']:.2f} queries per CPU second), "
              f"{r['encoded']} encoder inputs, peak RSS {r['peak_rss_gb']:.2f} GB")
        print("  forward seconds: " + ", ".join(f"{k} {v:.2f}" for k, v in r["forward_s"].items()))
    by = {(r["weights"], r["mode"]): r["queries_per_s"] for r in results}
    for w in args.weights.split(","):
        if (w, "batched") in by and (w, "per-query") in by:
            print(f"\n{w}: batched / per-query throughput {by[(w, 'batched')] / by[(w, 'per-query')]:.2f}x")
    print("JSON " + json.dumps(results))


if __name__ == "__main__":
    main()
