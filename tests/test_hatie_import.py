"""Importer of the released HATIE set: fixture pickles in the release's shape, and a malicious pickle."""

import json
import os
import pickle

import numpy as np
import pytest
from PIL import Image

from benchmark.io.imageio import load_mask
from benchmark.io.safe_pickle import UnsafePickleError
from benchmark.querysets.hatie import HatieFormatError, import_release
from benchmark.querysets.io import load_queryset


def box_mask(x0, y0, x1, y1):
    m = np.zeros((512, 512), dtype=bool)
    m[y0:y1 + 1, x0:x1 + 1] = True
    return m


def release(tmp_path, queries=None, masks=None):
    """Write query / mask pickles and images shaped like the release (its README and score.py)."""
    queries = queries if queries is not None else {
        "2370421": [
            {"type": "obj_rep", "original": ["3143517", "person"], "target": "cup", "id": 23847,
             "original_caption": "a young person stands on snowshoes.", "target_caption": "A cup stands on its snowshoes.",
             "instruction": "Replace the person with a cup."},
            {"type": "obj_add", "anchor": ["3143517", "person"], "target": "dog", "location": "left", "id": 23848,
             "original_caption": "a person.", "target_caption": "a dog to the left of a person.", "instruction": "Add a dog to the left of the person."},
            {"type": "attr_chg", "target": ["3143520", "bench"], "after": "red", "before": "brown", "id": 23849,
             "original_caption": "a brown bench.", "target_caption": "a red bench.", "instruction": "Change the color of the bench to red."},
            {"type": "obj_resize", "target": ["3143520", "bench"], "subtype": "shrink", "id": 23850,
             "original_caption": "a bench.", "target_caption": "a small bench.", "instruction": "Make the bench smaller."},
            {"type": "bg_chg", "target": "beach", "editable_objs": ["person", "bench"], "id": 23851,
             "original_caption": "a person and a bench.", "target_caption": "a person and a bench on a beach.", "instruction": "Change the background to a beach."},
        ],
        "2401110": [
            {"type": "obj_remove", "target": ["77", "cat"], "id": 3, "original_caption": "a cat.", "target_caption": "nothing.",
             "instruction": "Remove the cat."},
            {"type": "style_chg", "target": "oil painting", "id": 4, "original_caption": "a cat.",
             "target_caption": "an oil painting of a cat.", "instruction": "Make it an oil painting."},
        ],
    }
    masks = masks if masks is not None else [
        {"image": "2370421", "editable_objs": {"3143517": {"mask": box_mask(100, 50, 200, 400), "bbox": [100, 50, 200, 400]},
                                              "3143520": {"mask": box_mask(300, 300, 450, 380).astype(np.uint8), "bbox": [300, 300, 450, 380]}}},
        {"image": "2401110", "editable_objs": {"77": {"mask": box_mask(10, 10, 60, 90).astype(np.float32), "bbox": [10, 10, 60, 90]}}},
    ]
    (tmp_path / "q.pkl").write_bytes(pickle.dumps(queries))
    (tmp_path / "m.pkl").write_bytes(pickle.dumps(masks))
    images = tmp_path / "images"
    images.mkdir(exist_ok=True)
    for image_id in queries:
        Image.new("RGB", (512, 512), (120, 80, 40)).save(images / f"{image_id}.jpg")
    return tmp_path / "q.pkl", tmp_path / "m.pkl", images


def test_import_converts_every_type_with_loadable_masks(tmp_path):
    q, m, images = release(tmp_path)
    meta = import_release(q, m, images, tmp_path / "out")
    qs = load_queryset(tmp_path / "out")
    assert meta["content_hash"] == qs.hash and len(qs) == 7
    by_id = {x.id: x for x in qs}
    rep = by_id["23847"]
    assert rep.edit_type == "obj_rep" and rep.target.id == "3143517" and rep.target.name == "person" and rep.new_class == "cup"
    assert rep.target.bbox == (100.0, 50.0, 200.0, 400.0)
    assert np.array_equal(load_mask(qs.path(rep.target.mask), size=(512, 512)), box_mask(100, 50, 200, 400))
    add = by_id["23848"]
    assert add.anchor.name == "person" and add.new_class == "dog" and add.relation == "left"
    attr = by_id["23849"]
    assert (attr.attribute_before, attr.attribute_after) == ("brown", "red")
    assert by_id["23850"].size_change == "shrink"
    bg = by_id["23851"]
    assert bg.background == "beach" and {o.name for o in bg.editable_objects} == {"person", "bench"}
    for o in bg.editable_objects:  # every mask the scorer needs loads from the query set
        assert load_mask(qs.path(o.mask), size=(512, 512)).any()
    assert by_id["4"].style == "oil painting" and by_id["3"].target.name == "cat"
    assert qs.path(rep.image).is_file() and os.path.islink(tmp_path / "out" / "images")
    assert rep.instruction == "Replace the person with a cup." and rep.source_caption.startswith("a young person")
    assert json.loads((tmp_path / "out" / "queryset.json").read_text())["license"].startswith("CC0")


def test_malicious_pickle_is_refused_and_nothing_is_written(tmp_path):
    class Payload:
        def __reduce__(self):
            return (os.system, ("touch " + str(tmp_path / "pwned"),))

    q, m, images = release(tmp_path)
    q.write_bytes(pickle.dumps({"2370421": [Payload()]}))
    with pytest.raises(UnsafePickleError, match="refused to load global"):
        import_release(q, m, images, tmp_path / "out")
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "out" / "queries.jsonl").exists()


@pytest.mark.parametrize(("queries", "reason"), [
    ({"2370421": [{"type": "obj_explode", "id": 1}]}, "type 'obj_explode' is not one of"),
    ({"2370421": [{"type": "obj_remove", "target": ["999", "dog"], "id": 1, "instruction": "x"}]}, "object '999' has no mask"),
    ({"2370421": [{"type": "obj_remove", "target": "dog", "id": 1, "instruction": "x"}]}, r"expected \[object_id, class name\]"),
    ({"2370421": [{"type": "obj_resize", "target": ["3143517", "person"], "subtype": "huge", "id": 1, "instruction": "x"}]},
     "size_change must be"),
    # an absent or null released field is reported missing, never imported as the string "None"
    ({"2370421": [{"type": "obj_rep", "original": ["3143517", "person"], "id": 1, "instruction": "x"}]},
     r"query 1.*needs field\(s\) \['new_class'\]"),
    ({"2370421": [{"type": "obj_add", "anchor": ["3143517", "person"], "target": "dog", "location": None, "id": 1,
                   "instruction": "x"}]}, r"needs field\(s\) \['relation'\]"),
    ({"2370421": [{"type": "attr_chg", "target": ["3143520", "bench"], "after": None, "id": 1, "instruction": "x"}]},
     r"needs field\(s\) \['attribute_after'\]"),
    ({"2370421": [{"type": "style_chg", "target": None, "id": 1, "instruction": "x"}]}, r"needs field\(s\) \['style'\]"),
])
def test_bad_records_name_file_record_and_field(tmp_path, queries, reason):
    q, m, images = release(tmp_path, queries=queries)
    with pytest.raises(HatieFormatError, match=reason):
        import_release(q, m, images, tmp_path / "out")


def test_missing_images_are_reported(tmp_path):
    q, m, images = release(tmp_path)
    (images / "2401110.jpg").unlink()
    with pytest.raises(HatieFormatError, match="1 image\\(s\\) of the query file are missing"):
        import_release(q, m, images, tmp_path / "out")


def test_object_named_only_by_bg_chg_is_matched_when_unambiguous(tmp_path):
    queries = {"1": [
        {"type": "obj_remove", "target": ["10", "cat"], "id": 1, "instruction": "Remove the cat."},
        {"type": "bg_chg", "target": "zoo", "editable_objs": ["cat", "dog"], "id": 2, "instruction": "Change the background to a zoo."},
    ]}
    masks = [{"image": "1", "editable_objs": {"10": {"mask": box_mask(5, 5, 50, 50)}, "11": {"mask": box_mask(100, 100, 200, 200)}}}]
    q, m, images = release(tmp_path, queries=queries, masks=masks)
    import_release(q, m, images, tmp_path / "out")
    bg = {x.id: x for x in load_queryset(tmp_path / "out")}["2"]
    assert {(o.id, o.name) for o in bg.editable_objects} == {("10", "cat"), ("11", "dog")}


BAD_IDS = ["../../escaped", "/tmp/abs", "a/b", "..", ".hidden", "x\x00y", "12\n", "a\\b", "-rf", "x" * 200]


@pytest.mark.parametrize("bad", BAD_IDS)
@pytest.mark.parametrize("where", ["mask object id", "mask image id", "query image id", "query object id",
                                   "query id"])
def test_ids_that_are_not_one_safe_path_component_are_refused(tmp_path, where, bad):
    queries = {"1": [{"type": "obj_remove", "target": ["10", "cat"], "id": 5, "instruction": "Remove the cat."}]}
    masks = [{"image": "1", "editable_objs": {"10": {"mask": box_mask(5, 5, 50, 50)}}}]
    if where == "mask object id":
        masks[0]["editable_objs"] = {bad: {"mask": box_mask(5, 5, 50, 50)}}
    elif where == "mask image id":
        masks[0]["image"] = bad
    elif where == "query image id":
        queries = {bad: queries["1"]}
    elif where == "query object id":
        queries["1"][0]["target"] = [bad, "cat"]
    else:
        queries["1"][0]["id"] = bad
    q, m, images = release(tmp_path, queries={"1": []}, masks=masks)  # images for "1" only
    q.write_bytes(pickle.dumps(queries))
    before = {p for p in tmp_path.parent.rglob("*")}
    with pytest.raises(HatieFormatError, match="is not a safe id|must be a string"):
        import_release(q, m, images, tmp_path / "out")
    written = {p for p in tmp_path.parent.rglob("*")} - before
    assert all(p.is_relative_to(tmp_path / "out") for p in written), written  # nothing outside --out


def test_writes_through_a_symlinked_folder_out_of_the_output_are_refused(tmp_path):
    q, m, images = release(tmp_path)
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / "masks").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(HatieFormatError, match="outside the output folder"):
        import_release(q, m, images, out)
    assert not any(elsewhere.iterdir())


def test_bytearray_bomb_in_the_query_file_is_refused_without_allocating(tmp_path):
    class Bomb:
        def __reduce__(self):
            return (bytearray, (3_000_000_000,))

    q, m, images = release(tmp_path)
    q.write_bytes(pickle.dumps({"2370421": [Bomb()]}))
    assert q.stat().st_size < 100
    with pytest.raises(UnsafePickleError, match="bytearray"):
        import_release(q, m, images, tmp_path / "out")


def test_unsafe_image_extension_is_refused(tmp_path):
    q, m, images = release(tmp_path)
    with pytest.raises(HatieFormatError, match="image_ext"):
        import_release(q, m, images, tmp_path / "out", image_ext="/../../x")
