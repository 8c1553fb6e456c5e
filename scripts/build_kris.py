"""Build the KRIS-Bench query set (queryset=kris) from a local copy of the release's KRIS_Bench/ folder.

    huggingface-cli download --repo-type dataset Liang0223/KRIS_Bench --local-dir datasets/kris/downloads
    python scripts/build_kris.py --release datasets/kris/downloads/KRIS_Bench --out datasets/kris
"""

import argparse
import json
import sys
from pathlib import Path

from benchmark.io.download import require_inputs
from benchmark.querysets.kris import KrisFormatError, build


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--release", required=True, help="the release's KRIS_Bench/ folder (one folder per task)")
    ap.add_argument("--out", type=Path, default=Path("datasets/kris"))
    args = ap.parse_args()
    try:
        require_inputs("kris", args.release)
        meta = build(args.release, args.out)
    except (KrisFormatError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for task, n in meta["counts"]["skipped"].items():
        print(f"skipped {n} entries of {task}: {meta['counts']['skipped_reason'][task]}", file=sys.stderr)
    print(json.dumps({k: meta[k] for k in ("content_hash", "counts")}, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
