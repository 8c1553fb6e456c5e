"""Benchmark the GQA -> HATIE builder on a generated GQA-format scene-graph file (wall time, peak RSS).

    python scripts/bench/bench_gqa_builder.py [--images 100000] [--per-type 7120] [--workers 2]

Generates a synthetic `train_sceneGraphs.json` of `--images` images (~16 KB of JSON each, like GQA's) in a temp
folder, then runs the full builder (scan, propose, balanced sample, materialize with synthetic 512 x 512 image
inputs) in a child process and reports its wall time and peak RSS (main process, and the largest worker). The temp
folder (several GB) is deleted afterwards unless --keep is given.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r"""
import json, resource, sys, time
from pathlib import Path
import numpy as np
from PIL import Image
from benchmark.querysets.gqa import BuildConfig, Materializer, build

work, per_type, workers = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
sizes = json.loads((work / "sizes.json").read_text())
_base = {}

def open_image(image_id):
    w, h = sizes[image_id]
    if (w, h) not in _base:  # smooth gradient + mild noise: PNG cost close to a photo's
        yy, xx = np.mgrid[0:h, 0:w]
        rng = np.random.default_rng(w * h)
        g = np.stack([xx * 255 // max(w - 1, 1), yy * 255 // max(h - 1, 1), (xx + yy) * 127 // max(w + h, 1)], axis=2)
        _base[(w, h)] = np.clip(g + rng.integers(-6, 7, size=g.shape), 0, 255).astype(np.uint8)
    shift = int(image_id) % 64
    return Image.fromarray(np.roll(_base[(w, h)], shift, axis=1))

t0 = time.perf_counter()
m = Materializer(out_dir=work / "out", images_dir=None, open_image=open_image)
meta = build(work / "train_sceneGraphs.json", work / "out", cfg=BuildConfig(queries_per_type=per_type, workers=workers),
             materializer=m)
wall = time.perf_counter() - t0
print(json.dumps({"wall_s": round(wall, 1),
                  "peak_rss_main_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                  "peak_rss_worker_mb": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1),
                  "timings": meta["timings"], "counts": meta["counts"], "filters": meta["filters"]}))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=100_000)
    ap.add_argument("--per-type", type=int, default=7120, help="HATIE has 49,840 queries = 7 x 7,120")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--tmp", type=Path, default=None, help="parent of the temp folder (default: system temp)")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    from benchmark.querysets.gqa_synthetic import iter_graphs

    work = Path(tempfile.mkdtemp(prefix="bench_gqa_", dir=args.tmp))
    try:
        t = time.perf_counter()
        sizes = {}
        path = work / "train_sceneGraphs.json"
        with path.open("w", encoding="utf-8") as fh:  # streamed, like gqa_synthetic.write_scene_graphs
            fh.write("{")
            for i, (image_id, g) in enumerate(iter_graphs(args.images, seed=0, objects=(14, 26))):
                sizes[image_id] = (g["width"], g["height"])
                fh.write(("," if i else "") + json.dumps(image_id) + ": " + json.dumps(g, separators=(", ", ": ")))
            fh.write("}")
        (work / "sizes.json").write_text(json.dumps(sizes))
        del sizes
        gen_s = time.perf_counter() - t
        size_gb = path.stat().st_size / 1e9
        print(f"[bench] generated {args.images} scene graphs, {size_gb:.2f} GB, in {gen_s:.0f} s", file=sys.stderr)
        proc = subprocess.run([sys.executable, "-c", CHILD, str(work), str(args.per_type), str(args.workers)],
                              capture_output=True, text=True, env=os.environ | {"PYTHONUNBUFFERED": "1"})
        sys.stderr.write(proc.stderr[-3000:])
        if proc.returncode != 0:
            print(f"[bench] builder failed with exit code {proc.returncode}", file=sys.stderr)
            return proc.returncode
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        out_gb = sum(f.stat().st_size for f in (work / "out").rglob("*") if f.is_file()) / 1e9
        result |= {"images_in_file": args.images, "json_gb": round(size_gb, 2), "workers": args.workers,
                   "per_type": args.per_type, "output_gb": round(out_gb, 2), "cpus": os.cpu_count(),
                   "bench_parent_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
        print(json.dumps(result, indent=2))
    finally:
        if args.keep:
            print(f"[bench] kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
