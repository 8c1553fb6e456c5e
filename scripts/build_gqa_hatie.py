"""Build the HATIE-style query set from GQA scene graphs and images (queryset=gqa_hatie).

    make data NAME=gqa_hatie
    python scripts/build_gqa_hatie.py --scene-graphs datasets/gqa_hatie/downloads/train_sceneGraphs.json \
        --images datasets/gqa_hatie/downloads/images --out datasets/gqa_hatie [--per-type 7000] [--workers 2]

The detector check and CLIP background ranking are off here (no segmenter / CLIP argument on the command line);
use `benchmark.querysets.gqa.Materializer(mask_fn=..., scorer=...)` from Python to turn them on.
"""

import argparse
import json
import sys
from pathlib import Path

from benchmark.querysets.gqa import BuildConfig, GQAFormatError, build


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scene-graphs", type=Path, required=True, help="GQA *_sceneGraphs.json")
    ap.add_argument("--images", type=Path, required=True, help="folder of <image_id>.jpg")
    ap.add_argument("--out", type=Path, default=Path("datasets/gqa_hatie"))
    ap.add_argument("--per-type", type=int, default=None, help="queries per edit type (balanced over classes)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--max-images", type=int, default=None, help="scan only the first N images")
    args = ap.parse_args()
    cfg = BuildConfig(seed=args.seed, queries_per_type=args.per_type, workers=args.workers, max_images=args.max_images)
    try:
        meta = build(args.scene_graphs, args.out, images_dir=args.images, cfg=cfg)
    except (GQAFormatError, ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print((args.out / "summary.md").read_text())
    print(json.dumps({k: meta[k] for k in ("content_hash", "counts", "filters", "timings")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
