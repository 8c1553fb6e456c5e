"""The cost of computing inversions one source at a time (what the inversion store does) against one batch of
sources (what it did before: a source's values then depended on its batch-mates).

For each editor, the first `--sources` distinct sources of the demo set are inverted both ways in one process,
interleaved, best of `--reps` wall times; the model rows each way come from the editor's work counter (the same
rows either way: only the calls are smaller). The tiny profile on the CPU by default (one torch thread).

    OMP_NUM_THREADS=1 python scripts/bench/bench_inversion_alone.py [--sources 2] [--reps 3] [--editors p2p diffedit ...]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EDITORS = ("p2p", "diffedit", "ledits", "rf_solver", "fireflow", "rf_inversion")


def main() -> None:
    import torch
    from hydra.utils import instantiate

    from benchmark.editing.base import Item
    from benchmark.io.imageio import load_rgb
    from benchmark.plan.config import compose
    from benchmark.querysets.io import load_queryset

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sources", type=int, default=2, help="distinct demo sources inverted (2: demo_mini's)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--editors", nargs="+", default=list(EDITORS))
    ap.add_argument("--profile", default="tiny")
    args = ap.parse_args()
    torch.set_num_threads(1)
    qs = load_queryset(ROOT / "datasets" / "demo")
    first: dict[str, object] = {}
    for q in qs.queries:
        first.setdefault(q.image, q)
    sources = list(first.values())[: args.sources]
    for name in args.editors:
        cfg, _ = compose([f"editor={name}", f"profile={args.profile}"])
        editor = instantiate(cfg.editor)
        items = [Item(q, editor.prepare(load_rgb(qs.path(q.image))), 0) for q in sources]
        best: dict[str, tuple[float, dict[str, int]]] = {}
        for _ in range(args.reps):
            for how, compute in (("batched", editor._compute_inversions), ("alone", editor._compute_each)):
                before = dict(editor.work_counts())
                t0 = time.perf_counter()
                compute(items)
                seconds = time.perf_counter() - t0
                rows = {k: v - before.get(k, 0) for k, v in editor.work_counts().items()
                        if "forward" in k and v != before.get(k, 0)}
                best[how] = (min(seconds, best.get(how, (float("inf"), {}))[0]), rows)
        (b, b_rows), (a, a_rows) = best["batched"], best["alone"]
        print(f"{name}: {len(items)} sources; batched {b:.2f} s {b_rows}; one at a time {a:.2f} s {a_rows}; "
              f"x{a / b:.2f}", flush=True)


if __name__ == "__main__":
    main()
