"""How much TIGER's strict ranking accuracy moves with the sort's tie order (docs/metaeval.md, "Strict ranking
accuracy"). The authors rank a group's edits with numpy's default `np.argsort(scores)[::-1]`, which is not stable:
on a CPU with AVX-512 numpy sorts with SIMD code that orders equal scores another way than the scalar code. editmeter
sorts stably (`kind="stable"`), the order the scalar code gives. This script scores the same simulated judge both
ways on groups of four edits, the size of EditReward-Bench's 4-pair file (148 groups), and prints both figures.

    python scripts/tools/argsort_ties.py [--groups 148] [--seed 0] [--repeats 20]
"""

from __future__ import annotations

import argparse

import numpy as np


def strict_accuracy(scores: np.ndarray, people: np.ndarray, kind: str | None) -> float:
    """Share of groups whose judge order (`argsort(scores)[::-1]`, with `kind`) equals people's order."""
    orders = [np.argsort(s, kind=kind)[::-1] if kind else np.argsort(s)[::-1] for s in scores]
    return float(np.mean([np.array_equal(o, p) for o, p in zip(orders, people, strict=True)]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", type=int, default=148)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=20, help="judges simulated (seeds seed, seed + 1, ...)")
    args = ap.parse_args()
    diffs = [one(args.groups, args.seed + k) for k in range(args.repeats)]
    print(f"over {args.repeats} simulated judges: |difference| mean {np.mean(np.abs(diffs)):.3f}, "
          f"max {np.max(np.abs(diffs)):.3f}; numpy {np.__version__}")


def one(groups: int, seed: int) -> float:
    """One simulated judge on `groups` groups: prints both figures, returns default minus stable."""
    rng = np.random.default_rng(seed)
    people = np.array([rng.permutation(4) for _ in range(groups)])  # best first
    # a judge that mostly agrees with people, on a 0..10 integer scale (ties are common, as with VIEScore replies)
    quality = np.empty((groups, 4))
    for g, order in enumerate(people):
        quality[g, order] = [8.0, 6.5, 5.0, 3.5]
    scores = np.clip(np.rint(quality + rng.normal(0, 1.2, quality.shape)), 0, 10)
    tied = float(np.mean([len(set(s)) < 4 for s in scores]))
    default, stable = strict_accuracy(scores, people, None), strict_accuracy(scores, people, "stable")
    print(f"seed {seed}: {groups} groups of 4, {tied:.3f} with a judge tie; strict ranking accuracy: numpy "
          f"default sort {default:.3f}, stable sort {stable:.3f} (difference {default - stable:+.3f})")
    return default - stable


if __name__ == "__main__":
    main()
