"""Regenerate the bundled demo query sets (datasets/demo/ and its sessions, datasets/demo_sessions/)
deterministically.

    python scripts/make_demo.py [--out datasets/demo] [--sessions-out datasets/demo_sessions]
"""

import argparse
import shutil
from pathlib import Path

from benchmark.querysets import demo_sessions
from benchmark.querysets.demo import DEMO_IMAGES, DEMO_SEED, DEMO_SIZE, build


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "datasets" / "demo")
    ap.add_argument("--images", type=int, default=DEMO_IMAGES)
    ap.add_argument("--size", type=int, default=DEMO_SIZE)
    ap.add_argument("--seed", type=int, default=DEMO_SEED)
    ap.add_argument("--sessions-out", type=Path,
                    default=Path(__file__).resolve().parents[1] / "datasets" / "demo_sessions")
    args = ap.parse_args()
    for sub in ("images", "masks", "targets", "edit_masks"):
        shutil.rmtree(args.out / sub, ignore_errors=True)
    build(args.out, n_images=args.images, size=args.size, seed=args.seed)
    print(f"wrote {args.out}")
    for sub in ("images", "targets", "edit_masks"):
        shutil.rmtree(args.sessions_out / sub, ignore_errors=True)
    demo_sessions.build(args.sessions_out, args.out)
    print(f"wrote {args.sessions_out}")


if __name__ == "__main__":
    main()
