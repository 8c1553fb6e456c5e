"""Build the PIE-Bench query set (queryset=pie) from the authors' release folder.

    make data NAME=pie               # prints how to get the release (the authors' form) and checks the files
    python scripts/build_pie.py --data datasets/pie/downloads --out datasets/pie

--data is the release's `data` folder: mapping_file.json and annotation_images/.
"""

import argparse
import json
import sys
from pathlib import Path

from benchmark.querysets.pie import PieFormatError, build


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True, help="folder holding mapping_file.json and annotation_images/")
    ap.add_argument("--out", type=Path, default=Path("datasets/pie"))
    args = ap.parse_args()
    try:
        meta = build(args.data, args.out)
    except PieFormatError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(json.dumps({k: meta[k] for k in ("content_hash", "full_release", "counts")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
