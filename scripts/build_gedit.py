"""Build the GEdit-Bench query set (queryset=gedit) from a saved Hugging Face dataset (or a hub id).

    make data NAME=gedit             # saves the train split to datasets/gedit/downloads/train
    python scripts/build_gedit.py --dataset datasets/gedit/downloads/train --out datasets/gedit \
        [--image input_image_raw]
"""

import argparse
import json
import sys
from pathlib import Path

from benchmark.io.download import HUB_ID, require_inputs
from benchmark.querysets.gedit import GEditFormatError, build


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", required=True, help="folder written by save_to_disk, or a hub id")
    ap.add_argument("--split", default="train", help="the release has one split, train (its test samples)")
    ap.add_argument("--revision", default=None, help="hub commit when --dataset is a hub id (recorded)")
    ap.add_argument("--image", choices=("input_image", "input_image_raw"), default="input_image",
                    help="source image: the release's resized one (what its scorer compares with) or the raw upload")
    ap.add_argument("--out", type=Path, default=Path("datasets/gedit"))
    args = ap.parse_args()
    try:
        if not HUB_ID.match(args.dataset):  # a hub id is read from the hub, a folder must exist
            require_inputs("gedit", args.dataset)
        meta = build(args.dataset, args.out, split=args.split, image=args.image, revision=args.revision)
    except (GEditFormatError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(json.dumps({k: meta[k] for k in ("content_hash", "counts")}, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
