"""MagicBrush conversion from a local dataset built with `datasets.Dataset` and saved to disk."""

import numpy as np
import pytest
from PIL import Image

from benchmark.io.imageio import load_mask, load_rgb
from benchmark.querysets.io import load_queryset
from benchmark.querysets.magicbrush import MagicBrushFormatError, build, edit_region


def mb_dataset(tmp_path, rows=None, split="dev"):
    import datasets

    def img(color, size=(32, 32)):
        return Image.new("RGB", size, color)

    def mask(box, size=(32, 32)):
        m = Image.new("RGB", size, (0, 0, 0))
        m.paste((255, 255, 255), box)
        return m

    rows = rows if rows is not None else [
        ("327726", 1, img((10, 20, 30)), mask((4, 4, 12, 12)), "put a hat on the dog", img((200, 20, 30))),
        ("327726", 2, img((200, 20, 30)), mask((0, 0, 8, 8)), "make it snow", img((250, 250, 250))),
        ("242679", 1, img((50, 60, 70)), mask((10, 10, 20, 30)), "  turn the  car red ", img((90, 60, 70))),
    ]
    features = datasets.Features({
        "img_id": datasets.Value("string"), "turn_index": datasets.Value("int32"), "source_img": datasets.Image(),
        "mask_img": datasets.Image(), "instruction": datasets.Value("string"), "target_img": datasets.Image()})
    cols = {k: [r[i] for r in rows] for i, k in enumerate(features)}
    ds = datasets.DatasetDict({split: datasets.Dataset.from_dict(cols, features=features)})
    ds.save_to_disk(str(tmp_path / "mb"))
    return tmp_path / "mb"


def test_first_turn_by_default_with_ground_truth_and_mask(tmp_path):
    path = mb_dataset(tmp_path)
    meta = build(path, tmp_path / "out", split="dev")
    qs = load_queryset(tmp_path / "out")
    assert qs.hash == meta["content_hash"] and [q.id for q in qs] == ["mb-dev-242679-t1", "mb-dev-327726-t1"]
    q = {x.id: x for x in qs}["mb-dev-327726-t1"]
    assert q.edit_type == "free_form" and q.instruction == "put a hat on the dog" and q.object_class == "free-form"
    assert load_rgb(qs.path(q.target_image)).getpixel((0, 0)) == (200, 20, 30)
    assert load_rgb(qs.path(q.image)).getpixel((0, 0)) == (10, 20, 30)
    m = load_mask(qs.path(q.edit_mask), size=(32, 32))
    assert m.sum() == 64 and m[5, 5] and not m[20, 20]
    assert {x.id: x for x in qs}["mb-dev-242679-t1"].instruction == "turn the car red"


def test_all_turns_is_optional(tmp_path):
    meta = build(mb_dataset(tmp_path), tmp_path / "out", split="dev", turns="all")
    assert meta["counts"]["queries"] == 3 and meta["counts"]["turns"] == {"1": 2, "2": 1}


def test_all_turns_form_sessions_and_the_first_turn_stays_outside_them(tmp_path):
    build(mb_dataset(tmp_path), tmp_path / "all", split="dev", turns="all")
    assert [(q.id, q.session, q.turn) for q in load_queryset(tmp_path / "all")] == [
        ("mb-dev-242679-t1", "mb-dev-242679", 1), ("mb-dev-327726-t1", "mb-dev-327726", 1),
        ("mb-dev-327726-t2", "mb-dev-327726", 2)]
    build(mb_dataset(tmp_path), tmp_path / "first", split="dev")
    assert {(q.session, q.turn) for q in load_queryset(tmp_path / "first")} == {(None, None)}


def test_a_session_with_a_missing_turn_is_refused(tmp_path):
    img, m = Image.new("RGB", (32, 32), (1, 2, 3)), Image.new("RGB", (32, 32), (255, 255, 255))
    rows = [("327726", 1, img, m, "a", img), ("327726", 3, img, m, "b", img)]
    with pytest.raises(MagicBrushFormatError, match=r"session 'mb-dev-327726' has turns \[1, 3\]"):
        build(mb_dataset(tmp_path, rows), tmp_path / "out", split="dev", turns="all")


def test_transparent_mask_marks_the_edit_region():
    m = Image.new("RGBA", (8, 8), (0, 0, 0, 255))
    m.putpixel((2, 3), (0, 0, 0, 0))
    region = edit_region(m)
    assert region.sum() == 1 and region[3, 2]
    assert np.array_equal(edit_region(Image.new("RGB", (4, 4), (255, 255, 255))), np.ones((4, 4), bool))


def test_errors_name_the_row_and_the_split(tmp_path):
    path = mb_dataset(tmp_path)
    with pytest.raises(MagicBrushFormatError, match="no split 'test'; it has \\['dev'\\]"):
        build(path, tmp_path / "out", split="test")
    small = Image.new("RGB", (16, 16))
    bad = mb_dataset(tmp_path / "b", rows=[("1", 1, Image.new("RGB", (32, 32)), small, "x", Image.new("RGB", (32, 32)))])
    with pytest.raises(MagicBrushFormatError, match="row 0 \\(img_id '1', turn 1\\).*differ in size"):
        build(bad, tmp_path / "out2", split="dev")


def test_test_split_captions_become_source_and_target_captions(tmp_path):
    """global_descriptions.json (the test split's; MagicBrush's CLIP-T compares with the ground truth's caption):
    turn 1's source caption is the input image's, turn t's is output t-1's, its target caption output t's."""
    import json

    caps = {"327726": {"327726-input.png": "a dog", "327726-output1.png": "a dog  in a hat",
                       "327726-output2.png": "a dog in a hat in snow"},
            "242679": {"242679-input.png": "a blue car", "242679-output1.png": "a red car"}}
    (tmp_path / "global_descriptions.json").write_text(json.dumps(caps))
    build(mb_dataset(tmp_path), tmp_path / "out", split="dev", turns="all",
          captions=tmp_path / "global_descriptions.json")
    got = {q.id: (q.source_caption, q.target_caption) for q in load_queryset(tmp_path / "out")}
    assert got == {"mb-dev-327726-t1": ("a dog", "a dog in a hat"),
                   "mb-dev-327726-t2": ("a dog in a hat", "a dog in a hat in snow"),
                   "mb-dev-242679-t1": ("a blue car", "a red car")}
    del caps["327726"]["327726-output2.png"]
    (tmp_path / "partial.json").write_text(json.dumps(caps))
    with pytest.raises(MagicBrushFormatError, match=r"turn 2\).*no caption for 327726-output2\.png"):
        build(mb_dataset(tmp_path / "p"), tmp_path / "out2", split="dev", turns="all", captions=tmp_path / "partial.json")
    (tmp_path / "bad.json").write_text(json.dumps(["a dog"]))
    with pytest.raises(MagicBrushFormatError, match="expected \\{img_id"):
        build(mb_dataset(tmp_path / "b"), tmp_path / "out3", split="dev", captions=tmp_path / "bad.json")
