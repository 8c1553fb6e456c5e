"""Build the EditVal query set (queryset=editval) from object.json and COCO train2017 annotations.

    make data NAME=editval
    python scripts/build_editval.py --editval datasets/editval/downloads/object.json \
        --coco-annotations datasets/editval/downloads/annotations/instances_train2017.json \
        --download-images --out datasets/editval      # or --images /path/to/coco/train2017
"""

import argparse
import json
import sys
from pathlib import Path

from benchmark.io.download import DownloadError, load_manifest, require_inputs
from benchmark.querysets.editval import EditValFormatError, build


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--editval", type=Path, required=True, help="EditVal object.json")
    ap.add_argument("--coco-annotations", type=Path, required=True, help="instances_train2017.json")
    ap.add_argument("--images", type=Path, default=None, help="COCO train2017 image folder (files are copied)")
    ap.add_argument("--download-images", action="store_true", help="fetch the ~92 images from the COCO server")
    ap.add_argument("--out", type=Path, default=Path("datasets/editval"))
    args = ap.parse_args()
    url = load_manifest("editval").image_url if args.download_images else None
    try:
        require_inputs("editval", args.editval, args.coco_annotations, *([args.images] if args.images else []))
        meta = build(args.editval, args.coco_annotations, args.out, images_dir=args.images, image_url=url)
    except (EditValFormatError, DownloadError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print((args.out / "summary.md").read_text())
    print(json.dumps({k: meta[k] for k in ("content_hash", "counts")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
