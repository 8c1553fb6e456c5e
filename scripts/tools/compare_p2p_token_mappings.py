"""How far P2P's `token_mapping: aligned` (editmeter's earlier rules) is from the default `reference` (the authors'
code): on every query of a set, which mode `auto` picks and whether the cross-attention mapping differs inside the
caption and in the padding; then, with `--edit N`, the first N queries edited both ways with the tiny profile (8-bit
levels of difference between the two PNGs).

    OMP_NUM_THREADS=1 python scripts/tools/compare_p2p_token_mappings.py [--queryset demo] [--edit 14]
"""

from __future__ import annotations

import argparse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def differs(a, b, positions) -> bool:
    """Whether two TokenEdits map any of `positions` of the target differently."""
    import torch

    if a.mode != b.mode:
        return True
    if a.mode == "replace":
        return not torch.equal(a.mapper[:, positions], b.mapper[:, positions])
    return not (torch.equal(a.mapper[positions], b.mapper[positions])
                and torch.equal(a.alphas[positions], b.alphas[positions]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queryset", default="demo")
    ap.add_argument("--edit", type=int, default=0, help="edit the first N queries both ways (tiny profile)")
    args = ap.parse_args()

    from benchmark.editing.attention import build_token_edit
    from benchmark.editing.token_maps import token_ids
    from benchmark.models.tokenizer import build_clip_tokenizer
    from benchmark.querysets.io import load_queryset

    tok = build_clip_tokenizer()
    qs = load_queryset(ROOT / "datasets" / args.queryset)
    pairs = [(q.source_caption, q.target_caption) for q in qs.queries if q.source_caption and q.target_caption]
    mode = inside = padding = 0
    for src, tgt in pairs:
        ref = build_token_edit(tok, src, tgt, mode="auto")
        old = build_token_edit(tok, src, tgt, mode="auto", token_mapping="aligned")
        n = len(token_ids(tok, tgt))
        mode += ref.mode != old.mode
        inside += differs(ref, old, list(range(n)))
        padding += differs(ref, old, list(range(n, tok.model_max_length)))
    print(f"{args.queryset}: {len(pairs)} caption pairs; auto picks another mode for {mode}; the mapping differs "
          f"inside the caption for {inside}, in the padding for {padding}")
    if args.edit:
        edit_both(qs, args.edit)


def edit_both(qs, n: int) -> None:
    import numpy as np
    from hydra.utils import instantiate

    from benchmark.editing.editor import query_seed
    from benchmark.io.imageio import load_rgb
    from benchmark.plan.config import compose

    queries = list(qs.queries[:n])
    images = [load_rgb(qs.path(q.image)) for q in queries]
    seeds = [query_seed(0, q.id) for q in queries]
    out = {}
    for mapping in ("reference", "aligned"):
        cfg, _ = compose(["editor=p2p", "profile=tiny", f"editor.token_mapping={mapping}"])
        editor = instantiate(cfg.editor)
        out[mapping] = [np.asarray(im, dtype=np.int16) for im in editor.edit(queries, images, seeds=seeds)]
    diffs = [np.abs(a - b) for a, b in zip(out["reference"], out["aligned"], strict=True)]
    changed = sum(bool(d.any()) for d in diffs)
    print(f"tiny p2p on the first {n} queries: {changed} of {n} PNGs differ; mean |difference| "
          f"{np.mean([d.mean() for d in diffs]):.2f} levels, largest {max(int(d.max()) for d in diffs)} (of 255)")


if __name__ == "__main__":
    main()
