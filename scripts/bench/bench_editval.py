"""Time the EditVal suite (OWL-ViT rules, DINO ViT-B/16 context, Inception FID features) on the demo set's
EditVal-type queries: tiny and real-size random weights, batched vs. per query (every batch, chunk and cache of
size 1: one image per forward pass and no reuse of an original's detections / features). Each (weights, mode)
runs in its own process so its peak RSS and warm-up are its own.

    python scripts/bench/bench_editval.py [--weights tiny,random] [--modes batched,per-query] [--repeat 1] [--device cpu]

Edits are the demo's ground-truth targets (the oracle editor's output); `--repeat N` scores the 21 queries N times
over (distinct query objects, same images) to lengthen the timed run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import replace
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODES = {
    "batched": {"batch_size": 16, "chunk_size": 32, "cache_size": 1024, "det_batch": 8},
    "per-query": {"batch_size": 1, "chunk_size": 1, "cache_size": 0, "det_batch": 1},
}


def worker(weights: str, mode: str, repeat: int, device: str) -> dict:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.path.insert(0, str(ROOT))
    import torch

    from benchmark.metrics.editval.suite import EditValSuite
    from benchmark.models.dino_v1 import load_dino_v1
    from benchmark.models.inception import load_fid_extractor
    from benchmark.models.owlvit import load_owlvit
    from benchmark.querysets.demo import load_editval_demo

    m = MODES[mode]
    qs = load_editval_demo(str(ROOT / "datasets" / "demo"))
    queries = [replace(q, id=f"{q.id}-r{r}") for r in range(repeat) for q in qs.queries]
    suite = EditValSuite(detector=partial(load_owlvit, weights=weights, batch_size=m["det_batch"]),
                         dino=partial(load_dino_v1, weights=weights), fid=partial(load_fid_extractor, weights=weights),
                         device=device, batch_size=m["batch_size"], chunk_size=m["chunk_size"],
                         cache_size=m["cache_size"])
    t0 = time.perf_counter()
    for name in ("detector", "dino", "fid"):
        suite._get(name)
    load_s = time.perf_counter() - t0
    paths = [qs.path(q.target_image) for q in queries]
    t0 = time.perf_counter()
    n = sum(len(rows) for rows in suite.score_queries(qs, queries, paths, work_dir=ROOT, progress=False))
    wall = time.perf_counter() - t0
    forward = suite.model_seconds()
    return {"weights": weights, "mode": mode, "queries": n, "wall_s": wall, "load_s": load_s,
            "queries_per_s": n / wall, "forward_s": forward, "forward_share": sum(forward.values()) / wall,
            "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2, "device": device,
            "threads": torch.get_num_threads()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", default="tiny,random")
    ap.add_argument("--modes", default="batched,per-query")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--worker", nargs=2, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print("RESULT " + json.dumps(worker(*args.worker, args.repeat, args.device)))
        return
    results = []
    for weights in args.weights.split(","):
        for mode in args.modes.split(","):
            out = subprocess.run([sys.executable, __file__, "--worker", weights, mode, "--repeat", str(args.repeat),
                                  "--device", args.device], capture_output=True, text=True, check=False)
            line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
            if out.returncode or not line:
                sys.exit(f"{weights}/{mode} failed:\n{out.stderr[-3000:]}")
            r = json.loads(line[0][7:])
            results.append(r)
            print(f"{weights:>6} {mode:>9}: {r['queries']} queries, {r['queries_per_s']:.3f} queries/s "
                  f"(wall {r['wall_s']:.1f} s + load {r['load_s']:.1f} s; {100 * r['forward_share']:.0f}% in forward: "
                  + ", ".join(f"{k} {v:.1f} s" for k, v in r["forward_s"].items())
                  + f"), peak RSS {r['peak_rss_gb']:.2f} GB, {r['threads']} threads on {r['device']}", flush=True)
    by = {(r["weights"], r["mode"]): r["queries_per_s"] for r in results}
    for weights in args.weights.split(","):
        if (weights, "batched") in by and (weights, "per-query") in by:
            print(f"{weights}: batched / per-query throughput {by[weights, 'batched'] / by[weights, 'per-query']:.2f}x")
    print("JSON " + json.dumps(results))


if __name__ == "__main__":
    main()
