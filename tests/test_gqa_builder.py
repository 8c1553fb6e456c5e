"""GQA -> HATIE builder: App. A filters, App. B.1 query rules, streaming, and an end-to-end build on fixtures."""

import json
from collections import Counter

import numpy as np
import pytest
from PIL import Image

from benchmark.io.imageio import load_mask
from benchmark.querysets import gqa
from benchmark.querysets.captions import LLMCaptioner, TemplateCaptioner
from benchmark.querysets.coco_classes import COCO_CLASSES, GQA_SYNONYMS, natural_name, to_coco_class
from benchmark.querysets.gqa_synthetic import iter_graphs, write_scene_graphs
from benchmark.querysets.io import load_queryset
from benchmark.querysets.json_stream import JSONStreamError, iter_object_entries


def obj(name, x, y, w, h, attrs=(), rels=()):
    return {"name": name, "x": x, "y": y, "w": w, "h": h, "attributes": list(attrs),
            "relations": [{"name": r, "object": o} for r, o in rels]}


def scan_one(graph, stats=None):
    stats = stats or gqa.DatasetStats()
    return gqa._scan_image("fixture.json", "img", graph, stats), stats


# ------------------------------------------------------------------ COCO mapping


def test_coco_mapping_table():
    assert len(COCO_CLASSES) == 80 and len(set(COCO_CLASSES)) == 80
    assert all(v in COCO_CLASSES for v in GQA_SYNONYMS.values())
    assert all(to_coco_class(c) == c for c in COCO_CLASSES)
    assert to_coco_class(" Man ") == "person" and to_coco_class("kitten") == "cat"
    assert to_coco_class("television") == "tv" and to_coco_class("sofa") == "couch"
    for ambiguous in ("table", "glass", "board", "shirt", "tree", "sky"):
        assert to_coco_class(ambiguous) is None, ambiguous
    assert natural_name("stop_sign") == "stop sign"


# ------------------------------------------------------------------ App. A filters


def test_area_border_and_non_coco_filters():
    graph = {"width": 640, "height": 480, "objects": {
        "1": obj("dog", 200, 150, 120, 100),  # editable
        "2": obj("cup", 400, 300, 10, 10),  # 100 px^2 < 0.5% of 307200
        "3": obj("car", 0, 100, 150, 100),  # touches the left border
        "4": obj("tree", 50, 50, 100, 300),  # not a COCO class
        "5": obj("laptop", 520, 100, 100, 379),  # bottom edge at 479 = height - 1
    }}
    rec, stats = scan_one(graph)
    assert [o.oid for o in rec.objects] == ["1"]
    assert stats.filters["object: box < 0.5% of image"] == 1
    assert stats.filters["object: box touches the border"] == 2
    assert rec.present == {"dog", "cup", "car", "laptop"}


def test_two_instances_of_a_class_exclude_the_image_but_double_labels_do_not():
    two = {"width": 640, "height": 480, "objects": {"1": obj("man", 100, 100, 80, 200), "2": obj("woman", 400, 100, 80, 200)}}
    rec, stats = scan_one(two)
    assert rec is None and stats.filters["image: two or more instances of a class"] == 1
    double = {"width": 640, "height": 480, "objects": {"1": obj("man", 100, 100, 80, 200), "2": obj("person", 101, 100, 80, 200)}}
    rec, _ = scan_one(double)
    assert rec is not None and len(rec.objects) == 1 and rec.objects[0].name == "person"


def test_square_crop_never_cuts_an_editable_object():
    # 640 x 480: a square crop of side 480 cannot hold objects at both ends; the one outside is dropped.
    graph = {"width": 640, "height": 480, "objects": {
        "1": obj("dog", 20, 100, 100, 100), "2": obj("cat", 40, 250, 80, 80), "3": obj("car", 520, 100, 100, 100)}}
    rec, stats = scan_one(graph)
    assert sorted(o.oid for o in rec.objects) == ["1", "2"]
    assert stats.filters["object: outside the square crop"] == 1
    x, y, side = rec.crop
    assert side == 480 and y == 0 and 0 <= x <= 160
    for o in rec.objects:  # whole and off the edge in the 512 frame
        assert 0 < o.box[0] < o.box[2] < gqa.SIZE and 0 < o.box[1] < o.box[3] < gqa.SIZE


def test_malformed_scene_graph_names_file_image_and_field():
    with pytest.raises(gqa.GQAFormatError, match="fixture.json: image 'img', object '1': needs numeric x, y, w, h"):
        scan_one({"width": 10, "height": 10, "objects": {"1": {"name": "dog", "x": 1}}})
    with pytest.raises(gqa.GQAFormatError, match="needs 'width', 'height' and 'objects'"):
        scan_one({"objects": {}})


# ------------------------------------------------------------------ App. B.1 query rules


def _record(**kw):
    base = dict(image_id="img", width=512, height=512, crop=(0, 0, 512), location="beach",
                objects=(gqa.Obj("1", "dog", (200.0, 200.0, 300.0, 300.0), ("wet", "brown", "standing")),),
                occupiers=(), present=frozenset({"dog"}), context=frozenset({"beach", "dog", "sand"}))
    return gqa.ImageRecord(**(base | kw))


def _stats():
    s = gqa.DatasetStats()
    s.class_images.update({"dog": 50, "frisbee": 20, "cat": 20, "car": 20, "person": 40})
    s.relations[("frisbee", "left", "dog")] = 9  # frequent: proposed
    s.relations[("car", "on", "dog")] = 1  # rare: never proposed
    s.relations[("person", "next to", "dog")] = 10  # frequent, but a person is present in test below
    s.attributes["dog"].update({"wet": 10, "dry": 10, "brown": 30, "black": 20, "white": 1, "standing": 9,
                                "sitting": 9, "rusted": 10})
    s.cooccurrence.update({("cat", "dog"): 9, ("car", "dog"): 1, ("frisbee", "dog"): 9, ("person", "dog"): 30})
    return s


def test_obj_add_uses_relation_statistics_free_space_and_absent_classes():
    cfg = gqa.BuildConfig(min_relation_count=5, min_cooccurrence=5, min_attribute_count=5)
    adds = [c for c in gqa.propose(_record(present=frozenset({"dog", "person"})), _stats(), cfg) if c.edit_type == "obj_add"]
    assert len(adds) == 1
    f = dict(adds[0].fields)
    assert (f["new_class"], f["relation"], f["anchor"]) == ("frisbee", "left", "1")
    x0, y0, x1, y1 = f["placement"]
    assert x1 <= 200 and gqa.ADD_MARGIN <= x0  # left of the anchor, inside the image
    # the left side occupied by another object: no addition is possible
    blocked = _record(occupiers=((60.0, 150.0, 199.0, 350.0),), present=frozenset({"dog", "person"}))
    assert not [c for c in gqa.propose(blocked, _stats(), cfg) if c.edit_type == "obj_add"]
    # an anchor at the image edge leaves no margin for "left"
    edge = _record(objects=(gqa.Obj("1", "dog", (10.0, 200.0, 110.0, 300.0), ()),), present=frozenset({"dog", "person"}))
    assert not [c for c in gqa.propose(edge, _stats(), cfg) if c.edit_type == "obj_add"]


def test_obj_rep_attr_chg_resize_and_whole_image_rules():
    cfg = gqa.BuildConfig(min_relation_count=5, min_cooccurrence=5, min_attribute_count=5, seed=3)
    seen = Counter()
    for seed in range(30):
        for c in gqa.propose(_record(image_id=f"img{seed}"), _stats(), gqa.BuildConfig(**(cfg.__dict__ | {"seed": seed}))):
            f = dict(c.fields)
            if c.edit_type == "obj_rep":
                assert f["new_class"] in {"cat", "frisbee", "person"}  # car co-occurs too rarely, dog is present
            if c.edit_type == "attr_chg":
                pair = (f["attribute_before"], f["attribute_after"])
                assert pair in {("wet", "dry"), ("brown", "black"), ("standing", "sitting")}, pair  # never wet->rusted
                seen[f["attribute_kind"]] += 1
            if c.edit_type == "obj_resize":
                assert f["size_change"] in ("enlarge", "shrink")
            if c.edit_type == "style_chg":
                assert f["style"] in gqa.STYLES
    assert set(seen) == {"state", "color", "action"}
    tiny = _record(objects=(gqa.Obj("1", "dog", (200.0, 200.0, 220.0, 220.0), ()),))
    assert dict(next(c for c in gqa.propose(tiny, _stats(), cfg) if c.edit_type == "obj_resize").fields)["size_change"] == "enlarge"
    huge = _record(objects=(gqa.Obj("1", "dog", (20.0, 20.0, 490.0, 490.0), ()),))
    assert dict(next(c for c in gqa.propose(huge, _stats(), cfg) if c.edit_type == "obj_resize").fields)["size_change"] == "shrink"


def test_state_partner_needs_both_states_and_never_together():
    s = _stats()
    assert s.state_partners("dog", "wet", 5) == ["dry"]
    s.state_pairs_seen.add(("dry", "wet"))  # seen together on one object: not opposites for this data
    assert s.state_partners("dog", "wet", 5) == []


def test_background_from_least_aligned_half():
    rec = _record()
    for seed in range(20):
        assert gqa.choose_background(rec, None, None, seed) != "beach"
    ranked = gqa.rank_backgrounds_fallback(rec)
    assert ranked[0] == "beach" and len(ranked) == 27

    def scorer(image, texts):  # an injected image-text scorer decides the ranking
        return [1.0 if "museum" in t else 0.0 for t in texts]

    assert all(gqa.choose_background(rec, None, scorer, s) != "museum" for s in range(20))


def test_balanced_sampling_is_round_robin_over_classes_and_seeded():
    cands = [gqa.Candidate(f"i{i}", "obj_remove", cls, (("target", str(i)),))
             for i, cls in enumerate(["person"] * 50 + ["dog"] * 3 + ["cat"] * 3)]
    picked = gqa.balanced_sample(cands, 9, seed=0)
    assert Counter(c.group for c in picked) == {"person": 3, "dog": 3, "cat": 3}
    assert picked == gqa.balanced_sample(list(reversed(cands)), 9, seed=0)
    assert picked != gqa.balanced_sample(cands, 9, seed=1)


# ------------------------------------------------------------------ streaming


def test_streaming_reader_matches_json_load(tmp_path):
    path = write_scene_graphs(tmp_path / "sg.json", 20, seed=1)
    whole = json.loads(path.read_text())
    assert dict(iter_object_entries(path, chunk_chars=97)) == whole
    path.write_text(path.read_text()[:-50])
    with pytest.raises(JSONStreamError, match="sg.json: invalid JSON"):
        list(iter_object_entries(path, chunk_chars=97))


# ------------------------------------------------------------------ end to end


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("gqa")
    sg = write_scene_graphs(root / "train_sceneGraphs.json", 120, seed=5)
    images = root / "images"
    images.mkdir()
    for image_id, g in iter_graphs(120, seed=5):
        arr = np.full((g["height"], g["width"], 3), 90, dtype=np.uint8)
        arr[:, : g["width"] // 2] = 160
        Image.fromarray(arr).save(images / f"{image_id}.jpg", quality=90)
    cfg = gqa.BuildConfig(queries_per_type=6, seed=0, min_relation_count=2)
    meta = gqa.build(sg, root / "out", images_dir=images, cfg=cfg, progress=False)
    return root, meta, cfg


def test_build_writes_a_loadable_query_set_with_masks(built):
    root, meta, _ = built
    qs = load_queryset(root / "out")
    assert qs.hash == meta["content_hash"]
    assert {q.edit_type for q in qs} == set(gqa.HATIE_TYPES)
    assert all(n <= 6 for n in meta["counts"]["by_type"].values())
    assert meta["background_ranking"].startswith("word-overlap") and meta["mask_source"].startswith("GQA boxes")
    for q in qs:
        with Image.open(qs.path(q.image)) as im:
            assert im.size == (512, 512)
        for ref in (q.target, q.anchor, *q.editable_objects):
            if ref is not None:
                m = load_mask(qs.path(ref.mask), size=(512, 512))
                assert m.any()
        assert load_mask(qs.path(q.edit_mask), size=(512, 512)).any()
        assert q.instruction and q.source_caption and q.target_caption
        if q.edit_type == "obj_add":
            assert q.new_class not in {o.name for o in q.editable_objects}
            assert q.relation in gqa.RELATIONS and q.anchor is not None
            # the relation names the anchor, not the new class again (a defect of the HATIE release)
            assert q.instruction.endswith(f" the {q.anchor.name}.") and f"the {q.anchor.name}" in q.target_caption
    table = (root / "out" / "summary.md").read_text()
    assert "| edit type | queries |" in table and "| whole image |" in table


def test_build_is_deterministic(built, tmp_path):
    root, meta, cfg = built
    again = gqa.build(root / "train_sceneGraphs.json", tmp_path / "again", images_dir=root / "images", cfg=cfg, progress=False)
    assert again["content_hash"] == meta["content_hash"]


def test_detector_check_drops_objects_and_keeps_segmenter_masks(built, tmp_path):
    root, _, cfg = built
    calls = []

    def mask_fn(image, boxes, names):
        calls.append(names)
        out = []
        for i, b in enumerate(boxes):
            if i == 0:
                out.append(None)  # the first object of every image is "not detected"
                continue
            m = np.zeros((512, 512), dtype=bool)
            m[int(b[1]) + 1: int(b[3]) - 1, int(b[0]) + 1: int(b[2]) - 1] = True
            out.append(m)
        return out

    m = gqa.Materializer(out_dir=tmp_path, images_dir=root / "images", mask_fn=mask_fn)
    meta = gqa.build(root / "train_sceneGraphs.json", tmp_path / "det", cfg=cfg, materializer=m, progress=False)
    assert calls and meta["detector_check"] and meta["filters"]["object: detector IoU < 0.5"] > 0
    qs = load_queryset(tmp_path / "det")
    for q in qs:
        if q.target is not None:
            mask = load_mask(qs.path(q.target.mask))
            x0, y0, x1, y1 = q.target.bbox
            assert not mask[int(y0), int(x0)]  # the segmenter's (inset) mask, not the box


def test_image_size_mismatch_is_an_error(built, tmp_path):
    root, _, cfg = built
    m = gqa.Materializer(out_dir=tmp_path, images_dir=None, open_image=lambda i: Image.new("RGB", (10, 10)))
    with pytest.raises(ValueError, match="is 10x10 but its scene graph says"):
        gqa.build(root / "train_sceneGraphs.json", tmp_path / "bad", cfg=cfg, materializer=m, progress=False)


def test_llm_captioner_keeps_names_or_falls_back():
    from benchmark.querysets.captions import CaptionObject, EditSpec, Scene

    scene = Scene((CaptionObject("1", "dog", ("brown",)),), "park")
    edit = EditSpec("obj_rep", target="1", new_class="cat")
    good = LLMCaptioner(lambda p: "A brown dog runs in a park." if "Rewrite" not in p else "A cat runs in a park.")
    assert good.captions(scene, edit) == ("A brown dog runs in a park.", "A cat runs in a park.")
    bad = LLMCaptioner(lambda p: "Something else entirely.", max_tries=2)
    assert bad.captions(scene, edit) == TemplateCaptioner().captions(scene, edit) and bad.fallbacks == 1


def test_bitmask_png_round_trip(tmp_path):
    from benchmark.io.imageio import save_bitmask

    m = np.zeros((20, 30), dtype=bool)
    m[3:7, 5:9] = True
    save_bitmask(m, tmp_path / "m.png")
    assert np.array_equal(load_mask(tmp_path / "m.png", size=(30, 20)), m)


def test_whole_image_types_reuse_images_of_object_tasks():
    cands = [gqa.Candidate("i3", "obj_remove", "dog", (("target", "1"),))]
    cands += [gqa.Candidate(f"i{i}", "bg_chg", "whole image", ()) for i in range(6)]
    picked = gqa.balanced_sample(cands, 1, seed=0)
    assert [(c.edit_type, c.image_id) for c in picked] == [("obj_remove", "i3"), ("bg_chg", "i3")]
