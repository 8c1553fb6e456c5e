"""UNet evaluations per query of the inversion-based editors, inverting per query ("before") and sharing one
inversion per source ("after"): exact counts, the same on any machine (the tiny profile on the CPU by default).

Three workloads, each through the edit stage (`run_edit_stage`) as a run does it:
- demo: the demo set, 7 queries per source;
- hatie-shaped: demo queries picked so a source has 2.73 queries on average (HATIE: 49,840 queries on 18,226
  images), 3 or 2 per scene;
- tau sweep: the hatie-shaped sample edited at 3 values of an editing-only setting (P2P's tau,
  `self_replace_steps`), one editor per value as a sweep builds them, into one results folder.
A count is a UNet sample evaluation: one latent row through the UNet once (forward; forward + backward where the
optimisation backpropagates). An editor without `reuse_inversions` has only the "before" row.

    OMP_NUM_THREADS=1 python scripts/bench/bench_inversion_reuse.py [--editors p2p ledits diffedit] [--workloads ...]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORKLOADS = ("demo", "hatie-shaped", "tau-sweep")
SWEEP = {"p2p": ("self_replace_steps", (0.2, 0.5, 0.8)), "ledits": ("edit_guidance_scale", (3.0, 5.0, 7.0)),
         "diffedit": ("mask_thresholding_ratio", (2.0, 3.0, 4.0))}


def hatie_shaped(queryset):
    """Demo queries with 2.73 per source on average: the first 3 of each scene, the first 2 of every fourth."""
    from benchmark.querysets.io import selected_set

    by_scene: dict[str, list] = {}
    for q in queryset.queries:
        by_scene.setdefault(q.image, []).append(q)
    picked = []
    for k, qs in enumerate(by_scene.values()):
        picked += qs[: 2 if k % 4 == 3 else 3]
    return selected_set(queryset, picked, "demo-hatie-shaped")


def build_editor(name: str, reuse: bool | None, results: Path, extra: list[str]):
    from hydra.utils import instantiate

    from benchmark.plan.config import compose

    overrides = [f"editor={name}", "profile=tiny", *extra]
    cfg, _ = compose(overrides)
    if reuse is not None:
        cfg, _ = compose([*overrides, f"editor.reuse_inversions={str(reuse).lower()}"])
    editor = instantiate(cfg.editor)
    if reuse:
        from benchmark.editing.inversion_store import INVERSIONS_DIR, InversionStore

        editor.inversion_store = InversionStore(results / INVERSIONS_DIR)
    return editor, "reuse_inversions" in cfg.editor


def run(queryset, name: str, reuse: bool | None, results: Path, extra: list[str], batch_size: int) -> dict:
    """Edit `queryset` with a new editor into a new run folder under `results`; the stage's counted work."""
    from benchmark.stages.edit import run_edit_stage

    editor, _ = build_editor(name, reuse, results, extra)
    run_dir = Path(tempfile.mkdtemp(prefix="run-", dir=results))
    st = run_edit_stage(queryset, editor, run_dir, seed=0, batch_size=batch_size, progress=False)
    assert st.failed == 0, st.failure_summary()
    return {"queries": st.computed, **st.work}


def row(editor: str, workload: str, mode: str, n_sources: int, work: dict) -> str:
    q = work["queries"]
    fwd, fb = work.get("unet_forward", 0) / q, work.get("unet_forward_backward", 0) / q
    return (f"| {editor} | {workload} | {mode} | {q} | {n_sources} | {fwd:,.1f} | {fb:,.1f} | "
            f"{work.get('inversions_computed', 0)} | {work.get('inversions_reused', 0)} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--editors", nargs="+", default=["p2p", "ledits", "diffedit"])
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    ap.add_argument("--batch-size", type=int, default=8)
    args = ap.parse_args()

    from benchmark.querysets.io import load_queryset

    demo = load_queryset(ROOT / "datasets" / "demo")
    shaped = hatie_shaped(demo)
    print("| editor | workload | inversions | queries | sources | UNet forward / query | forward+backward / query "
          "| inversions computed | inversions reused |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.editors:
        with tempfile.TemporaryDirectory() as tmp:
            _, shares = build_editor(name, None, Path(tmp), [])
        modes = [("per query", False), ("shared", True)] if shares else [("per query", None)]
        for workload in args.workloads:
            qs = demo if workload == "demo" else shaped
            n_sources = len({(q.image, q.source_caption) for q in qs.queries})
            for label, reuse in modes:
                with tempfile.TemporaryDirectory() as tmp:
                    if workload == "tau-sweep":
                        key, values = SWEEP[name]
                        works = [run(qs, name, reuse, Path(tmp), [f"editor.{key}={v}"], args.batch_size)
                                 for v in values]
                        work = {k: sum(w.get(k, 0) for w in works) for k in set().union(*works)}
                        label = f"{label}, {key} x {len(values)}"
                    else:
                        work = run(qs, name, reuse, Path(tmp), [], args.batch_size)
                print(row(name, workload, label, n_sources, work), flush=True)


if __name__ == "__main__":
    main()
