"""Build the RISEBench query set (queryset=rise) from a local copy of either release.

    make data NAME=rise      # RISEBench-360: datav2_total_w_subtask.json and data.zip (unpacked) of PhoenixZ/RISEBench
    python scripts/build_rise.py --data datasets/rise/downloads/datav2_total_w_subtask.json --out datasets/rise

    # RISEBench-64, the repository's subset: data/data_total.json of a PhoenixZ810/RISEBench checkout
    python scripts/build_rise.py --data path/to/RISEBench/data/data_total.json --out datasets/rise64

--images is the folder that holds <category>_images/; by default the JSON file's folder or its data/ subfolder.
"""

import argparse
import json
import sys
from pathlib import Path

from benchmark.querysets.rise import RiseFormatError, build


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True, help="the release's JSON list of samples")
    ap.add_argument("--images", type=Path, default=None, help="the folder holding <category>_images/")
    ap.add_argument("--out", type=Path, default=Path("datasets/rise"))
    ap.add_argument("--name", default="rise", help="the query set's name")
    args = ap.parse_args()
    try:
        meta = build(args.data, args.out, images=args.images, name=args.name)
    except RiseFormatError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(json.dumps({k: meta[k] for k in ("content_hash", "release", "counts")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
