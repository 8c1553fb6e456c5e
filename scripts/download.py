"""Download the raw files of one query-set source (resumable, checksum-verified): `make data NAME=<set>`.

    python scripts/download.py gqa_hatie|hatie|editval|magicbrush [--only FILE ...]

Files land in datasets/<set>/downloads/ (git-ignored). The command that builds the query set afterwards is printed.
"""

import argparse
import sys
from pathlib import Path

from benchmark.download import DownloadError, fetch_manifest, load_manifest

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("name", help="manifest name (datasets/manifests/<name>.json)")
    ap.add_argument("--only", nargs="*", default=(), help="fetch only these file names from the manifest")
    ap.add_argument("--dest", type=Path, help="download folder (default datasets/<name>/downloads)")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args()
    try:
        manifest = load_manifest(args.name)
        dest = args.dest or ROOT / "datasets" / manifest.name / "downloads"
        print(f"[download] {manifest.name}: {manifest.description}\n[download] license: {manifest.license}")
        paths = fetch_manifest(manifest, dest, only=args.only, progress=not args.no_progress)
    except DownloadError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    for p in paths:
        print(f"[download] ok {p}")
    print(f"[download] next, build the query set:\n  {manifest.build}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
