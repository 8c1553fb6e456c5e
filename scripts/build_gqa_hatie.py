"""Build the HATIE-style query set from GQA scene graphs and images (queryset=gqa_hatie).

    make data NAME=gqa_hatie
    python scripts/build_gqa_hatie.py --scene-graphs datasets/gqa_hatie/downloads/train_sceneGraphs.json \
        --images datasets/gqa_hatie/downloads/images --out datasets/gqa_hatie [--per-type 7000] [--workers 2]

The detector check, the CLIP background ranking and the occlusion VQA filter are off unless given as
`module:function` callables (see benchmark/querysets/gqa.py for their signatures). The scoring suite's models:
    --mask-fn benchmark.models.segmenter:detector_masks     (IoU >= 0.5 between GQA box and segmenter mask)
    --scorer  benchmark.models.clip:background_scores        (bg_chg: the half least CLIP-aligned backgrounds)
    --vqa-fn  benchmark.models.vqa:occlusion_vqa             (App. A occlusion filter)
They load real weights; EDITMETER_WEIGHTS=tiny uses the random stand-ins (tests).
"""

import argparse
import importlib
import json
import sys
from pathlib import Path

from benchmark.io.download import require_inputs
from benchmark.querysets.gqa import BuildConfig, GQAFormatError, Materializer, build


def load_callable(spec: str | None):
    """'package.module:function' -> the function (None stays None)."""
    if not spec:
        return None
    module, _, name = spec.partition(":")
    if not name:
        raise ValueError(f"{spec!r}: expected 'module:function'")
    return getattr(importlib.import_module(module), name)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scene-graphs", type=Path, required=True, help="GQA *_sceneGraphs.json")
    ap.add_argument("--images", type=Path, required=True, help="folder of <image_id>.jpg")
    ap.add_argument("--out", type=Path, default=Path("datasets/gqa_hatie"))
    ap.add_argument("--per-type", type=int, default=None, help="queries per edit type (balanced over classes)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--max-images", type=int, default=None, help="scan only the first N images")
    ap.add_argument("--mask-fn", help="detector check: module:function(image, boxes, classes) -> masks")
    ap.add_argument("--scorer", help="background ranking: module:function(image, texts) -> scores")
    ap.add_argument("--vqa-fn", help="occlusion filter: module:function(image, question) -> P(yes)")
    args = ap.parse_args()
    cfg = BuildConfig(seed=args.seed, queries_per_type=args.per_type, workers=args.workers, max_images=args.max_images)
    try:
        require_inputs("gqa_hatie", args.scene_graphs, args.images)
        m = Materializer(out_dir=args.out, images_dir=args.images, seed=args.seed, mask_fn=load_callable(args.mask_fn),
                         scorer=load_callable(args.scorer), vqa_fn=load_callable(args.vqa_fn))
        meta = build(args.scene_graphs, args.out, cfg=cfg, materializer=m)
    except (GQAFormatError, ValueError, FileNotFoundError, ImportError, AttributeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print((args.out / "summary.md").read_text())
    print(json.dumps({k: meta[k] for k in ("content_hash", "counts", "filters", "timings")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
