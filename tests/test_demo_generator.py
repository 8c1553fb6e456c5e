"""The bundled demo set is exactly what the generator produces, and its edits are exact."""

import filecmp

import numpy as np
from conftest import ROOT

from benchmark.io.imageio import load_mask, load_rgb
from benchmark.querysets import demo

BUNDLED = ROOT / "datasets" / "demo"


def test_fresh_build_reproduces_bundled_files(tmp_path):
    demo.build(tmp_path)
    bundled = sorted(p.relative_to(BUNDLED) for p in BUNDLED.rglob("*") if p.is_file())
    fresh = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert bundled == fresh
    mismatch = [str(p) for p in bundled if not filecmp.cmp(BUNDLED / p, tmp_path / p, shallow=False)]
    assert not mismatch, f"regenerate with `editmeter data build demo`: {mismatch[:5]}"


def test_edit_masks_cover_every_changed_pixel(demo_qs):
    for q in demo_qs.queries:
        src = np.asarray(load_rgb(demo_qs.path(q.image)), dtype=int)
        tgt = np.asarray(load_rgb(demo_qs.path(q.target_image)), dtype=int)
        changed = (src != tgt).any(axis=2)
        mask = load_mask(demo_qs.path(q.edit_mask))
        assert not (changed & ~mask).any(), q.id
        assert changed.any(), q.id


def test_scene_graphs_are_gqa_shaped_with_coco_names(demo_qs):
    graphs = demo.load_scene_graphs(BUNDLED / "scene_graphs.json")
    coco_names = set(demo.CLASSES)
    for graph in graphs.values():
        assert {"width", "height", "objects"} <= set(graph)
        for obj in graph["objects"].values():
            assert {"name", "x", "y", "w", "h", "attributes", "relations"} <= set(obj)
            assert obj["name"] in coco_names
            for rel in obj["relations"]:
                assert rel["object"] in graph["objects"]


def test_object_masks_match_bboxes(demo_qs):
    for q in demo_qs.queries[:20]:
        for obj in q.editable_objects:
            m = load_mask(demo_qs.path(obj.mask))
            ys, xs = np.nonzero(m)
            x0, y0, x1, y1 = obj.bbox
            assert xs.min() >= x0 and xs.max() <= x1 and ys.min() >= y0 and ys.max() <= y1


def test_resize_factors_follow_hatie_thresholds(demo_qs):
    """Enlarged objects clear HATIE's r1 = 1.6 and shrunk ones its r2 = 0.6 (sqrt of the area ratio)."""
    graphs = demo.load_scene_graphs(BUNDLED / "scene_graphs.json")
    for q in (q for q in demo_qs.queries if q.edit_type == "obj_resize"):
        g = graphs[q.image_id]
        edited, _ = demo.apply_edit(g, q)
        before = demo.object_masks(g)[q.target.id].sum()
        after = demo.object_masks(edited)[q.target.id].sum()
        r = (after / before) ** 0.5
        assert (r > 1.6) if q.size_change == "enlarge" else (r <= 0.62), (q.id, r)
