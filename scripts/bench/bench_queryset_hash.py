"""Time loading a HATIE-scale query set (49,840 queries) with its content hash, cold and warm stat cache.

    python scripts/bench/bench_queryset_hash.py --out /tmp/qs-hash-bench [--images 18226 --queries 49840 --size 128]

Builds (once) a synthetic set shaped like the imported HATIE release: `--images` random JPEG sources,
`--masks-per-image` object masks each (1-bit PNG), and `--queries` records spread over the images, each naming its
source and a target object mask. Then it times `load_queryset` three ways: records only (`read_queries`), cold
(no stat cache: every referenced file is read and hashed) and warm (stat cache present: one stat per file).
"Cold" here means an empty stat cache; the files themselves may be in the OS page cache.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def build(out: Path, n_images: int, n_queries: int, masks_per_image: int, size: int) -> None:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    (out / "images").mkdir(parents=True, exist_ok=True)
    for i in range(n_images):
        arr = rng.integers(0, 255, (size, size, 3), dtype=np.uint8)
        Image.fromarray(arr).save(out / "images" / f"{i:07d}.jpg", quality=90)
        mdir = out / "masks" / f"{i:07d}"
        mdir.mkdir(parents=True, exist_ok=True)
        for k in range(masks_per_image):
            m = np.zeros((size, size), bool)
            m[k * 4: k * 4 + size // 4, 8: 8 + size // 3] = True
            Image.fromarray(m).save(mdir / f"{k}.png")
    with open(out / "queries.jsonl", "w", encoding="utf-8") as fh:
        for q in range(n_queries):
            i, k = q % n_images, q % masks_per_image
            rec = {"id": f"{i:07d}_{q}", "image": f"images/{i:07d}.jpg", "image_id": f"{i:07d}",
                   "edit_type": "obj_remove", "instruction": "Remove the cup.",
                   "target": {"id": str(k), "name": "cup", "mask": f"masks/{i:07d}/{k}.png",
                              "bbox": [8, k * 4, 8 + size // 3, k * 4 + size // 4]}}
            fh.write(json.dumps(rec) + "\n")
    (out / "queryset.json").write_text(json.dumps({"name": "hashbench", "schema_version": 1}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for the synthetic set (built once, reused)")
    ap.add_argument("--images", type=int, default=18226)
    ap.add_argument("--queries", type=int, default=49840)
    ap.add_argument("--masks-per-image", type=int, default=2)
    ap.add_argument("--size", type=int, default=128, help="side of each synthetic image in pixels")
    args = ap.parse_args()
    if not (args.out / "queryset.json").is_file():
        t = time.perf_counter()
        build(args.out, args.images, args.queries, args.masks_per_image, args.size)
        print(f"built {args.out} in {time.perf_counter() - t:.1f} s")
    os.environ["EDITMETER_CACHE"] = tempfile.mkdtemp(prefix="qs-hash-cache-")
    from benchmark.io.filehash import cache_file_for
    from benchmark.querysets.io import load_queryset, read_queries, referenced_files

    t = time.perf_counter()
    queries = read_queries(args.out / "queries.jsonl")
    records = time.perf_counter() - t
    n_files = len(referenced_files(queries))
    size = sum((args.out / rel).stat().st_size for rel in referenced_files(queries))
    times = {}
    for label in ("cold", "warm", "warm again"):
        t = time.perf_counter()
        qs = load_queryset(args.out)
        times[label] = time.perf_counter() - t
    cache = cache_file_for(args.out.resolve())
    print(f"{len(qs)} queries, {n_files} referenced files ({size / 1e6:.0f} MB), stat cache "
          f"{cache.stat().st_size / 1e6:.1f} MB")
    print(f"records only (read_queries): {records:.2f} s")
    for label, sec in times.items():
        print(f"load_queryset {label:<10}: {sec:.2f} s")
    print(f"hash {qs.hash}")
    shutil.rmtree(os.environ["EDITMETER_CACHE"], ignore_errors=True)


if __name__ == "__main__":
    main()
