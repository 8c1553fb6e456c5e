"""The demo world's multi-turn sessions: bundled files equal a fresh build, and each turn starts where the previous
turn's ground truth ended (MagicBrush's shape)."""

import filecmp

import numpy as np
from conftest import ROOT

from benchmark.io.imageio import load_mask, load_rgb
from benchmark.querysets import demo_sessions
from benchmark.querysets.io import load_queryset

BUNDLED = ROOT / "datasets" / "demo_sessions"


def test_fresh_build_reproduces_bundled_files(tmp_path):
    demo_sessions.build(tmp_path, ROOT / "datasets" / "demo")
    bundled = sorted(p.relative_to(BUNDLED) for p in BUNDLED.rglob("*") if p.is_file())
    fresh = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert bundled == fresh
    mismatch = [str(p) for p in bundled if not filecmp.cmp(BUNDLED / p, tmp_path / p, shallow=False)]
    assert not mismatch, f"regenerate with `editmeter data build demo`: {mismatch[:5]}"


def test_sessions_of_two_or_three_turns_each_starting_from_the_previous_ground_truth():
    qs = load_queryset(BUNDLED)
    by_session: dict[str, list] = {}
    for q in qs:
        by_session.setdefault(q.session, []).append(q)
    assert sorted(len(v) for v in by_session.values()) == [2, 2, 3, 3]
    demo = load_queryset(ROOT / "datasets" / "demo")
    sources = {q.image_id: q.image for q in demo}
    for turns in by_session.values():
        turns.sort(key=lambda q: q.turn)
        assert [q.turn for q in turns] == list(range(1, len(turns) + 1))
        first = turns[0]
        assert np.array_equal(np.asarray(load_rgb(qs.path(first.image))),
                              np.asarray(load_rgb(demo.path(sources[first.image_id]))))
        for prev, q in zip(turns, turns[1:], strict=False):
            assert np.array_equal(np.asarray(load_rgb(qs.path(q.image))), np.asarray(load_rgb(qs.path(prev.target_image))))
            assert q.source_caption == prev.target_caption
        for q in turns:
            src, tgt = np.asarray(load_rgb(qs.path(q.image)), int), np.asarray(load_rgb(qs.path(q.target_image)), int)
            changed = (src != tgt).any(axis=2)
            assert changed.any() and not (changed & ~load_mask(qs.path(q.edit_mask))).any(), q.id
            assert q.edit_type == "free_form" and q.instruction
