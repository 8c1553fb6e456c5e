"""Queries per second of the AugCLIP and BPM suites on CPU, with tiny and real-size random weights.

Each suite scores identity edits (edit = source) of the demo set's object queries through its own
`score_queries` (image loading, attribute extraction / parsing, detector + SAM, CLIP, SVM / rules), exactly as a
run does. Models are loaded and one chunk is scored before timing (warm-up), so the numbers are steady-state
throughput. Real-size random models (CLIP ViT-B/16, Grounding DINO Swin-T, SAM ViT-B) are built once into
`--cache` (about 1.5 GB; kept out of the shared tiny-model cache).

    OMP_NUM_THREADS=1 python scripts/bench/bench_augbpm.py [--sizes tiny random] [--queries 16] [--real-queries 4]
                                                     [--threads 1] [--out results/bench_augbpm.json]

One torch thread by default: on a shared machine, two OpenMP threads spin at their barriers while a neighbour holds
a core, which made the same tiny run 20-100x slower (measured here) and the numbers meaningless.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def suites(weights: str) -> dict[str, Any]:
    """The two suites as configs/metrics/{augclip,bpm}.yaml build them, with `weights` for every model."""
    import functools

    from benchmark.metrics.augclip.attributes import StructuredExtractor
    from benchmark.metrics.augclip.suite import AugClipSuite
    from benchmark.metrics.bpm.suite import BpmSuite
    from benchmark.models.clip import load_clip
    from benchmark.models.grounding import build_locator, load_detector, load_sam

    clip = functools.partial(load_clip, weights=weights, arch="ViT-B-16-quickgelu", tag="openai")
    locator = functools.partial(build_locator, detector=functools.partial(load_detector, kind="grounding-dino",
                                                                          weights=weights),
                                segmenter=functools.partial(load_sam, weights=weights))
    return {"augclip": AugClipSuite(clip=clip, extractor=functools.partial(StructuredExtractor), device="cpu",
                                    chunk_size=8),
            "bpm": BpmSuite(clip=clip, locator=locator, device="cpu", chunk_size=8)}


def measure(suite: Any, qs: Any, warm: list, queries: list, work: Path) -> dict[str, float]:
    """Load the models and score `warm` (other queries: no cached text reaches the timed ones), then time
    `queries` end to end; returns queries/s, seconds in model forwards and the failed-row count."""
    for _ in suite.score_queries(qs, warm, [qs.path(q.image) for q in warm], work_dir=work, progress=False):
        pass
    paths = [qs.path(q.image) for q in queries]  # identity edits
    suite.timings.clear()
    t0 = time.perf_counter()
    rows = [r for batch in suite.score_queries(qs, queries, paths, work_dir=work, progress=False) for r in batch]
    sec = time.perf_counter() - t0
    failed = sum(r["status"] != "ok" for r in rows)
    forward = sum(v for k, v in suite.timings.items() if "forward" in k)
    return {"queries": len(rows), "seconds": sec, "queries_per_s": len(rows) / sec, "failed": failed,
            "model_forward_s": forward, "breakdown_s": {k: round(v, 3) for k, v in suite.timings.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", default=["tiny", "random"], choices=["tiny", "random"])
    ap.add_argument("--queries", type=int, default=16, help="queries timed with tiny models")
    ap.add_argument("--real-queries", type=int, default=4, help="queries timed with real-size random models")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (see the module docstring)")
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "editmeter-bench-augbpm-cache",
                    help="where real-size random models are built (tiny ones use $EDITMETER_CACHE)")
    ap.add_argument("--out", type=Path, default=None, help="write the numbers as JSON here")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from benchmark.io.types import WHOLE_IMAGE_TYPES
    from benchmark.querysets.io import load_queryset

    torch.set_num_threads(args.threads)
    qs = load_queryset(ROOT / "datasets" / "demo")
    objects = [q for q in qs.queries if q.edit_type not in WHOLE_IMAGE_TYPES]
    results = []
    tiny_cache = os.environ.get("EDITMETER_CACHE")
    for size in args.sizes:
        if size == "random":
            os.environ["EDITMETER_CACHE"] = str(args.cache)
        elif tiny_cache:
            os.environ["EDITMETER_CACHE"] = tiny_cache
        n = args.queries if size == "tiny" else args.real_queries
        for name, suite in suites(size).items():
            with tempfile.TemporaryDirectory() as work:
                t0 = time.perf_counter()
                warm, timed = objects[-2:], objects[:n]  # different source images
                r = measure(suite, qs, warm, timed, Path(work))
                r |= {"suite": name, "weights": size, "threads": args.threads,
                      "wall_incl_load_s": time.perf_counter() - t0}
            results.append(r)
            print(f"{name:8s} {size:7s} {r['queries']:3d} queries  {r['queries_per_s']:8.2f} queries/s  "
                  f"({r['seconds']:.1f} s, model forward {r['model_forward_s']:.1f} s, {r['failed']} failed rows)",
                  flush=True)
            print("         " + ", ".join(f"{k} {v:.2f} s" for k, v in r["breakdown_s"].items()), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"device": "cpu", "torch_threads": args.threads, "results": results},
                                       indent=1) + "\n")


if __name__ == "__main__":
    main()
