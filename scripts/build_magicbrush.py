"""Build the MagicBrush query set (queryset=magicbrush) from a saved Hugging Face dataset (or a hub id).

    make data NAME=magicbrush        # saves the dev split to datasets/magicbrush/downloads/dev
    python scripts/build_magicbrush.py --dataset datasets/magicbrush/downloads/dev --split dev \
        --out datasets/magicbrush [--turns all] [--captions <split folder>/global_descriptions.json]
"""

import argparse
import json
import sys
from pathlib import Path

from benchmark.io.download import HUB_ID, require_inputs
from benchmark.querysets.magicbrush import MagicBrushFormatError, build


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", required=True, help="folder written by save_to_disk, or a hub id")
    ap.add_argument("--split", default="dev", help="dev or test (test: a local dataset with the same features)")
    ap.add_argument("--turns", choices=("first", "all"), default="first")
    ap.add_argument("--captions", type=Path, default=None,
                    help="global_descriptions.json of the split (the test split has one): source and target captions, "
                         "the text MagicBrush's CLIP-T uses")
    ap.add_argument("--out", type=Path, default=Path("datasets/magicbrush"))
    args = ap.parse_args()
    try:
        if not HUB_ID.match(args.dataset):  # a hub id is read from the hub, a folder must exist
            require_inputs("magicbrush", args.dataset)
        meta = build(args.dataset, args.out, split=args.split, turns=args.turns, captions=args.captions)
    except (MagicBrushFormatError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(json.dumps({k: meta[k] for k in ("content_hash", "counts")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
