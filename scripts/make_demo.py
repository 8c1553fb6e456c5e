"""Regenerate the bundled demo query set (datasets/demo/) deterministically.

    python scripts/make_demo.py [--out datasets/demo]
"""

import argparse
import shutil
from pathlib import Path

from benchmark.querysets.demo import DEMO_IMAGES, DEMO_SEED, DEMO_SIZE, build


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "datasets" / "demo")
    ap.add_argument("--images", type=int, default=DEMO_IMAGES)
    ap.add_argument("--size", type=int, default=DEMO_SIZE)
    ap.add_argument("--seed", type=int, default=DEMO_SEED)
    args = ap.parse_args()
    for sub in ("images", "masks", "targets", "edit_masks"):
        shutil.rmtree(args.out / sub, ignore_errors=True)
    build(args.out, n_images=args.images, size=args.size, seed=args.seed)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
