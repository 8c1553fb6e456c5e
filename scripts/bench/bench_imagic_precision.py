"""How far Imagic's bf16-autocast optimisation (`editor.optimisation_precision=bf16_autocast`) drifts from fp32.

    python scripts/bench/bench_imagic_precision.py [--queries 2] [--embedding-steps 500] [--finetune-steps 1000]
                                             [--steps N] [--device cpu] [--dtype fp32] [--threads 1]
                                             [--profile tiny]

At the tiny profile (random weights, 32 px, 3 sampling steps) or another (`--profile pretrained`: SD v1.4 at 512 px
and 50 steps, needs its weights and, in practice, a GPU), for each of the first `--queries` demo queries, runs the
editor once with `optimisation_precision=fp32` and once with `bf16_autocast` (same seed, same sampling dtype), and
prints the largest and mean absolute difference of the optimised embedding, of the fine-tuned UNet weights (next
to how far the fp32 optimisation moved each from its start, for scale) and of the final edit in 8-bit levels, and
each mode's edit wall time. The optimisation steps default to the real 500 + 1000; drift depends on the weights, so only a
pretrained run at 512 px measures the real one.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODES = ("fp32", "bf16_autocast")


def run(mode: str, args: argparse.Namespace) -> tuple[list[dict], int]:
    """Per query: the edit (uint8), the optimised embedding, the fine-tuned UNet state, the target embedding, the
    base UNet state, and the edit's seconds, with `optimisation_precision=mode`; and the sampling steps."""
    import numpy as np
    import torch
    from hydra.utils import instantiate

    from benchmark.commands.run import compose
    from benchmark.editing import imagic
    from benchmark.editing import inversion as inv
    from benchmark.editing.base import Item
    from benchmark.editing.editor import query_seed
    from benchmark.io.imageio import load_rgb
    from benchmark.querysets.io import load_queryset

    steps = [] if args.steps is None else [f"editor.steps={args.steps}"]
    cfg, _ = compose(["editor=imagic", "queryset=demo", f"profile={args.profile}", "editor.cache_size=1",
                      f"editor.optimisation_precision={mode}", f"editor.embedding_steps={args.embedding_steps}",
                      f"editor.finetune_steps={args.finetune_steps}", *steps,
                      f"editor.device={args.device}", f"editor.dtype={args.dtype}"])
    editor = instantiate(cfg.editor)
    qs = load_queryset(ROOT / "datasets" / "demo")
    out = []
    for q in qs.queries[: args.queries]:
        src, seed = load_rgb(qs.path(q.image)), query_seed(0, q.id)
        imagic.FINETUNES.entries.clear()
        t0 = time.perf_counter()
        edit = np.asarray(editor.edit([q], [src], seeds=[seed])[0])
        seconds = time.perf_counter() - t0
        e_opt, state = imagic.FINETUNES.entries[editor.key(Item(q, editor.prepare(src), seed))]
        e_tgt = inv.encode_text(editor.pipe, [q.target_caption]).float().cpu()
        out.append({"edit": edit, "e_opt": e_opt.float(), "e_tgt": e_tgt, "seconds": seconds,
                    "unet": torch.cat([v.float().flatten() for v in state.values()]),
                    "base": torch.cat([editor.base_state[k].float().cpu().flatten() for k in state])})
    return out, int(cfg.editor.steps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--queries", type=int, default=2, help="the first N demo queries")
    ap.add_argument("--embedding-steps", type=int, default=500)
    ap.add_argument("--finetune-steps", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=None, help="DDIM sampling steps (default: the profile's)")
    ap.add_argument("--profile", default="tiny", help="tiny (default) or pretrained")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="fp32", help="the sampling dtype, the same in both modes")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    import numpy as np
    import torch

    from benchmark.io.console import quiet_third_party

    quiet_third_party(progress=True)  # diffusers' and transformers' loading bars off; the run has none of its own
    torch.set_num_threads(args.threads)
    runs = {m: run(m, args) for m in MODES}
    results, steps = {m: r[0] for m, r in runs.items()}, runs["fp32"][1]
    print(f"Imagic optimisation, bf16 autocast vs fp32: {args.profile} profile, {args.queries} demo queries, "
          f"{args.embedding_steps} + {args.finetune_steps} steps, {steps} sampling steps, device {args.device}, "
          f"sampling dtype {args.dtype}, torch {torch.__version__}")
    print("query | embedding |diff| max / mean (fp32 moved max / mean) | UNet weights |diff| max / mean "
          "(fp32 moved max / mean) | edit 8-bit |diff| max / mean | s fp32 / bf16_autocast")
    for i, (a, b) in enumerate(zip(results["fp32"], results["bf16_autocast"], strict=True)):
        de, me = (a["e_opt"] - b["e_opt"]).abs(), (a["e_opt"] - a["e_tgt"]).abs()
        dw, mw = (a["unet"] - b["unet"]).abs(), (a["unet"] - a["base"]).abs()
        di = np.abs(a["edit"].astype(np.int16) - b["edit"].astype(np.int16))
        print(f"{i} | {de.max():.3g} / {de.mean():.3g} ({me.max():.3g} / {me.mean():.3g}) | "
              f"{dw.max():.3g} / {dw.mean():.3g} ({mw.max():.3g} / {mw.mean():.3g}) | "
              f"{di.max()} / {di.mean():.3g} | {a['seconds']:.1f} / {b['seconds']:.1f}")


if __name__ == "__main__":
    main()
