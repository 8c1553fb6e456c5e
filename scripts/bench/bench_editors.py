"""Harness overhead and batch-size scaling of the diffusion editors (tiny profile on CPU by default; `--profile
random` on a GPU gives the real-size architectures with random weights and the real settings).

For each batch size, images per second of
- bare: the plain diffusers pipeline called in a loop on in-memory inputs already at model resolution, same batch
  size, steps and per-query generators;
- editor: `editor.edit` on the in-memory source images (adds prompt checks, resizing in and out, quantisation);
- stage: the edit stage `run_edit_stage` (adds reading the PNGs, writing PNGs atomically, the fsync'ed log);
- no-png: the same stage with PNG encoding and writing replaced by a no-op, to separate the cost of the files
  from the harness's own logic.
All four run in one process, interleaved, and the median of `--repeats` runs is reported; overheads are relative
to bare. The stage's wall overhead is also given paired (each repeat against the bare loop run just before it:
median and range) and best-of-N (fastest stage run against fastest bare run), since one run on a VM varies by
several percent. Throughput is given by wall clock and by process CPU time: on a shared machine the wall clock also
measures the neighbours, CPU time (all threads of this process, incl. the PNG writer thread) measures only our work.

    OMP_NUM_THREADS=1 python scripts/bench/bench_editors.py [--editors ip2p sdedit] [--queries 112] [--batch-sizes 1 2 4 8]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def bare_call(editor, name: str, images, prompts, seeds) -> None:
    """One call of the plain diffusers pipeline with the editor's settings (what a user script would write)."""
    from benchmark.editing.editor import generators

    gens = generators(seeds)
    if name in ("ip2p", "magicbrush"):
        editor.pipe(prompt=prompts, image=images, num_inference_steps=editor.steps,
                    guidance_scale=editor.guidance_scale, image_guidance_scale=editor.image_guidance_scale,
                    generator=gens, output_type="pil")
    elif name == "sdedit":
        editor.img2img(prompt=prompts, image=images, strength=editor.strength, num_inference_steps=editor.steps,
                       guidance_scale=editor.guidance_scale, generator=gens, output_type="pil")
    else:
        raise SystemExit(f"no bare-pipeline baseline for {name} (its loop is editmeter's own code)")


def measure(editor, name: str, qs, sources, images, text, seeds, bs: int, repeats: int,
            num_workers: int = 0) -> dict[str, list]:
    """(wall img/s, CPU img/s) per repeat for bare / editor / stage, interleaved."""
    import time

    from benchmark.stages.edit import run_edit_stage

    n = len(images)

    def bare_loop(_out: Path) -> None:
        for i in range(0, n, bs):
            bare_call(editor, name, images[i : i + bs], text[i : i + bs], seeds[i : i + bs])

    def editor_loop(_out: Path) -> None:
        for i in range(0, n, bs):
            editor.edit(qs.queries[i : i + bs], sources[i : i + bs], seeds=seeds[i : i + bs])

    def stage(out: Path) -> None:
        stats = run_edit_stage(qs, editor, out, seed=0, batch_size=bs, num_workers=num_workers, progress=False)
        assert stats.failed == 0, stats

    def stage_without_png(out: Path) -> None:
        import benchmark.stages.edit as edit_stage

        real = edit_stage.save_png
        edit_stage.save_png = lambda *args, **kwargs: None
        try:
            stage(out)
        finally:
            edit_stage.save_png = real

    runs: dict[str, list[tuple[float, float]]] = {"bare": [], "editor": [], "stage": [], "no-png": []}
    for _ in range(repeats):
        for kind, fn in (("bare", bare_loop), ("editor", editor_loop), ("stage", stage), ("no-png", stage_without_png)):
            # The run folder is made before and deleted after the clock: deleting 100 fresh PNGs on this ext4
            # (mounted with `discard`) takes ~0.2 s, which is the file system's time, not the harness's.
            with tempfile.TemporaryDirectory() as tmp:
                w0, c0 = time.perf_counter(), time.process_time()
                fn(Path(tmp))
                runs[kind].append((n / (time.perf_counter() - w0), n / (time.process_time() - c0)))
    return runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--editors", nargs="+", default=["ip2p", "sdedit"])
    ap.add_argument("--queries", type=int, default=112, help="the first N demo queries (112: all)")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--num-workers", type=int, default=0, help="the stage's DataLoader workers reading sources")
    ap.add_argument("--profile", default="tiny", choices=("tiny", "random"),
                    help="tiny: small random models, small settings; random: real size (a GPU; about 4 GB per model)")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("EDITMETER_CACHE", str(ROOT / ".cache"))

    import torch
    from hydra.utils import instantiate

    from benchmark.commands.run import compose
    from benchmark.editing.editor import query_seed
    from benchmark.io.imageio import load_rgb
    from benchmark.querysets.io import load_queryset

    qs = load_queryset(ROOT / "datasets" / "demo").subset(args.queries)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU thread(s), {len(qs)} demo queries, profile={args.profile}")
    header = (f"{'editor':<10} {'batch':>5} | wall img/s: {'bare':>6} {'editor':>7} {'stage':>6} {'no-png':>6} | "
              f"CPU img/s: {'bare':>6} {'editor':>7} {'stage':>6} {'no-png':>6} | "
              f"wall overhead: {'stage':>6} {'paired (min-max)':>20} {'best':>6} | "
              f"CPU overhead: {'editor':>7} {'stage':>6} {'no-png':>6}")
    rows = []
    for name in args.editors:
        cfg, _ = compose([f"editor={name}", "queryset=demo", f"profile={args.profile}"])
        editor = instantiate(cfg.editor)
        text = [q.instruction if editor.prompt_kind == "instruction" else q.target_caption for q in qs.queries]
        sources = [load_rgb(qs.path(q.image)) for q in qs.queries]
        images = [editor.prepare(im) for im in sources]
        seeds = [query_seed(0, q.id) for q in qs.queries]
        bare_call(editor, name, images[:2], text[:2], seeds[:2])  # warm-up (first-call allocations)
        for bs in args.batch_sizes:
            runs = measure(editor, name, qs, sources, images, text, seeds, bs, args.repeats, args.num_workers)
            wall = {k: statistics.median(r[0] for r in v) for k, v in runs.items()}
            cpu = {k: statistics.median(r[1] for r in v) for k, v in runs.items()}
            # each repeat's stage against the bare loop run just before it: drift of the machine cancels out
            paired = sorted(100 * (1 - st[0] / b[0]) for st, b in zip(runs["stage"], runs["bare"], strict=True))
            spread = f"{statistics.median(paired):.1f}% ({paired[0]:.1f} to {paired[-1]:.1f})"
            best = 100 * (1 - max(r[0] for r in runs["stage"]) / max(r[0] for r in runs["bare"]))

            def over(d: dict[str, float], kind: str) -> str:
                return f"{100 * (1 - d[kind] / d['bare']):>5.1f}%"

            rows.append(f"{name:<10} {bs:>5} | {'':>11} {wall['bare']:>6.1f} {wall['editor']:>7.1f} "
                        f"{wall['stage']:>6.1f} {wall['no-png']:>6.1f} | {'':>10} {cpu['bare']:>6.1f} "
                        f"{cpu['editor']:>7.1f} {cpu['stage']:>6.1f} {cpu['no-png']:>6.1f} | {'':>14} "
                        f"{over(wall, 'stage')} {spread:>20} {best:>5.1f}% | {'':>13} {over(cpu, 'editor'):>7} {over(cpu, 'stage'):>6} "
                        f"{over(cpu, 'no-png'):>6}")
            print(rows[-1] if len(rows) > 1 else header + "\n" + rows[-1], flush=True)
    print("\n" + header + "\n" + "\n".join(rows))


if __name__ == "__main__":
    main()
