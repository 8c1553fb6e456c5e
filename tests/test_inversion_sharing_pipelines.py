"""LEDITS++ and DiffEdit share one inversion per source (benchmark.editing.source_inversions): its noise is drawn
from a generator seeded from the source, so the queries of a source, and a sweep of an editing-only setting, read
one stored inversion, with PNGs byte-identical to every query inverting its own source."""

from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("single_thread_torch")

# an editing-only setting of each editor, at a value other than its default
SWEPT = {"ledits": "editor.edit_guidance_scale=7.0", "diffedit": "editor.mask_thresholding_ratio=2.0"}


def _run(results, editor, *extra):
    """The first 3 demo_mini queries (one source), batch size 1 (both ways run the same kernels): (stats, PNGs)."""
    from conftest import run_demo

    summary = run_demo(results, editor, "queryset=demo_mini", "limit=3", "stages=[edit]", "batch_size=1", *extra)
    pngs = {p.name: p.read_bytes() for p in sorted(Path(summary["run_dir"]).glob("edits/*.png"))}
    return summary["edit"], pngs


@pytest.mark.parametrize("editor, dtype", [
    ("ledits", "fp32"), ("ledits", "bf16"), ("diffedit", "fp32"),
    pytest.param("diffedit", "bf16", marks=pytest.mark.slow),  # ~1 min per run on a CPU
])
def test_one_inversion_per_source_and_sweeps_equal_one_inversion_per_query_byte_for_byte(tmp_path, editor, dtype):
    """A sweep value inverts the source once for its 3 queries; the default setting then inverts nothing (a fresh
    editor reads the stored inversion), and its PNGs are those of each query inverting its own source."""
    own, own_pngs = _run(tmp_path / "own", editor, "editor.reuse_inversions=false", f"editor.dtype={dtype}")
    assert own.work["inversions_computed"] == 3 and own.work["inversions_reused"] == 0
    swept, _ = _run(tmp_path / "shared", editor, SWEPT[editor], f"editor.dtype={dtype}")
    assert (swept.work["inversions_computed"], swept.work["inversions_reused"]) == (1, 3)
    assert len(list((tmp_path / "shared" / "inversions").rglob("*.safetensors"))) == 1
    shared, shared_pngs = _run(tmp_path / "shared", editor, f"editor.dtype={dtype}")
    assert shared.computed == 3 and (shared.work["inversions_computed"], shared.work["inversions_reused"]) == (0, 3)
    assert len(own_pngs) == 3 and shared_pngs == own_pngs


def test_ledits_draws_its_inversion_per_source_from_the_run_seed(demo_qs):
    """Queries of one source invert with one noise (per query, their edits at one target caption would differ), and
    another run seed draws another."""
    import dataclasses

    import numpy as np
    from hydra.utils import instantiate

    from benchmark.commands.run import compose
    from benchmark.editing.editor import query_seed
    from benchmark.io.imageio import load_rgb

    cfg, _ = compose(["editor=ledits", "queryset=demo", "profile=tiny"])
    ed = instantiate(cfg.editor)
    first = demo_qs.queries[0]
    same = [dataclasses.replace(q, target_caption=first.target_caption) for q in demo_qs.queries[:3]]
    assert {q.image for q in same} == {first.image}
    src = load_rgb(demo_qs.path(first.image))

    def edit(q):
        return np.asarray(ed.edit([q], [src], seeds=[query_seed(0, q.id)])[0])

    outs = [edit(q) for q in same]
    assert all(np.array_equal(outs[0], o) for o in outs[1:])
    ed.run_seed = 1
    assert not np.array_equal(outs[0], edit(same[0]))
