"""Import the released HATIE set (queryset=hatie) from its pickles, through the restricted unpickler.

    make data NAME=hatie   # the files are placed by hand; the command checks they are there
    python scripts/import_hatie.py --queries datasets/hatie/downloads/queries_w_remove.pkl \
        --masks datasets/hatie/downloads/editable_objs_mask.pkl --images datasets/hatie/downloads/images \
        --out datasets/hatie
"""

import argparse
import json
import sys
from pathlib import Path

from benchmark.io.download import require_inputs
from benchmark.io.safe_pickle import UnsafePickleError
from benchmark.querysets.hatie import HatieFormatError, import_release


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=Path, required=True, help="queries_w_remove.pkl or queries_wo_remove.pkl")
    ap.add_argument("--masks", type=Path, required=True, help="editable_objs_mask.pkl")
    ap.add_argument("--images", type=Path, required=True, help="folder of <image_id>.jpg from the release")
    ap.add_argument("--out", type=Path, default=Path("datasets/hatie"))
    args = ap.parse_args()
    try:
        require_inputs("hatie", args.queries, args.masks, args.images)
        meta = import_release(args.queries, args.masks, args.images, args.out)
    except (HatieFormatError, UnsafePickleError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(json.dumps({k: meta[k] for k in ("content_hash", "counts")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
