"""Build the ImgEdit-Bench Basic query set (queryset=imgedit) from the release's basic_edit.json and the sources.

    make data NAME=imgedit           # fetches basic_edit.json and prompts.json (pinned), unpacks Benchmark.tar
    python scripts/build_imgedit.py --edits datasets/imgedit/downloads/basic_edit.json \
        --images datasets/imgedit/downloads --out datasets/imgedit

--images is the unpacked archive: the folder that holds the sources' category folders (animal/, style/, ...), or a
folder at most three levels above it.
"""

import argparse
import json
import sys
from pathlib import Path

from benchmark.querysets.imgedit import ImgEditFormatError, build


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--edits", type=Path, required=True, help="Benchmark/Basic/basic_edit.json of the release")
    ap.add_argument("--images", type=Path, required=True, help="the unpacked Benchmark.tar (the sources' root)")
    ap.add_argument("--out", type=Path, default=Path("datasets/imgedit"))
    args = ap.parse_args()
    try:
        meta = build(args.edits, args.images, args.out)
    except ImgEditFormatError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(json.dumps({k: meta[k] for k in ("content_hash", "full_release", "counts")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
