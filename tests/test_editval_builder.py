"""EditVal builder on a hand-made object.json and COCO-format annotations (pycocotools)."""

import json

import numpy as np
import pytest
from PIL import Image

from benchmark.io.imageio import load_mask
from benchmark.io.types import EDITVAL_TYPES
from benchmark.querysets.editval import EditValFormatError, build, parse_position
from benchmark.querysets.io import load_queryset

EDITS = {
    "object_addition": {"from": [""], "to": ["bag", "cup"]},
    "object_replacement": {"from": ["bench"], "to": ["chair"]},
    "positional_addition": {"from": [""], "to": ["bag below", "ball on top", "cup to left"]},
    "size": {"from": [""], "to": ["small", "large"]},
    "position_replacement": {"from": ["center"], "to": ["left", "right"]},
    "alter_parts": {"from": [""], "to": ["add a cushion"]},
    "background": {"from": ["park"], "to": ["beach"]},
    "texture": {"from": [""], "to": ["wooden"]},
    "style": {"from": [""], "to": ["Van Gogh painting"]},
    "color": {"from": [""], "to": ["brown"]},
    "shape": {"from": [""], "to": ["circle"]},
    "action": {"from": ["standing"], "to": ["sitting"]},
    "viewpoint": {"from": ["front"], "to": ["top view"]},
}


def fixture(tmp_path, spec=None):
    spec = spec if spec is not None else {"bench": {"100166": EDITS}, "stop_sign": {"200": {"color": {"from": [""], "to": ["blue"]}}}}
    coco = {
        "images": [{"id": 100166, "file_name": "000000100166.jpg", "width": 64, "height": 48},
                   {"id": 200, "file_name": "000000000200.jpg", "width": 40, "height": 40}],
        "categories": [{"id": 15, "name": "bench", "supercategory": "outdoor"},
                       {"id": 13, "name": "stop sign", "supercategory": "outdoor"}],
        "annotations": [
            # a small and a large bench: the large one is the target; COCO boxes are [x, y, w, h]
            {"id": 1, "image_id": 100166, "category_id": 15, "iscrowd": 0, "area": 16.0, "bbox": [2, 2, 4, 4],
             "segmentation": [[2, 2, 6, 2, 6, 6, 2, 6]]},
            {"id": 2, "image_id": 100166, "category_id": 15, "iscrowd": 0, "area": 600.0, "bbox": [10, 8, 30, 20],
             "segmentation": [[10, 8, 40, 8, 40, 28, 10, 28]]},
            {"id": 3, "image_id": 200, "category_id": 13, "iscrowd": 0, "area": 100.0, "bbox": [5, 5, 10, 10],
             "segmentation": [[5, 5, 15, 5, 15, 15, 5, 15]]},
        ],
    }
    (tmp_path / "object.json").write_text(json.dumps(spec))
    (tmp_path / "instances_train2017.json").write_text(json.dumps(coco))
    images = tmp_path / "train2017"
    images.mkdir(exist_ok=True)
    for im in coco["images"]:
        Image.new("RGB", (im["width"], im["height"]), (90, 90, 90)).save(images / im["file_name"])
    return tmp_path / "object.json", tmp_path / "instances_train2017.json", images


def test_all_13_types_with_prompts_masks_and_corner_boxes(tmp_path):
    ev, ann, images = fixture(tmp_path)
    meta = build(ev, ann, tmp_path / "out", images_dir=images, progress=False)
    qs = load_queryset(tmp_path / "out")
    assert qs.hash == meta["content_hash"]
    assert {q.edit_type for q in qs} == set(EDITVAL_TYPES)
    assert len(qs) == 19
    bench = [q for q in qs if q.image_id == "100166"]
    assert {q.target.id for q in bench} == {"2"}  # the largest instance
    assert bench[0].target.bbox == (10.0, 8.0, 40.0, 28.0)  # corners, not centre/size
    m = load_mask(qs.path(bench[0].target.mask), size=(64, 48))
    assert m[15, 20] and not m[3, 3]
    by = {(q.edit_type, q.id.rsplit("-", 1)[1]): q for q in bench}
    assert by[("object_addition", "0")].instruction == "Add a bag to the bench"
    assert by[("object_addition", "0")].target_caption == "A bag along with the bench"
    assert by[("color", "0")].instruction == "Change the color of the bench to brown"
    assert by[("color", "0")].target_caption == "A brown bench"
    pos = [by[("positional_addition", k)] for k in "012"]
    assert [(q.new_class, q.relation) for q in pos] == [("bag", "below"), ("ball", "on top"), ("cup", "left")]
    assert pos[2].instruction == "Add a cup to the left of the bench"
    assert [by[("size", k)].size_change for k in "01"] == ["shrink", "enlarge"]
    assert by[("action", "0")].attribute_before == "standing" and by[("action", "0")].attribute_after == "sitting"
    assert by[("alter_parts", "0")].target_caption == "A bench with a cushion"
    stop = [q for q in qs if q.image_id == "200"][0]
    assert stop.target.name == "stop sign" and "stop sign" in stop.instruction and "_" not in stop.instruction


def test_position_parsing():
    assert parse_position("bag below", "x") == ("bag", "below")
    assert parse_position("wine glass to the right", "x") == ("wine glass", "right")
    with pytest.raises(EditValFormatError, match="does not end in one of"):
        parse_position("bag somewhere", "x")


@pytest.mark.parametrize(("spec", "reason"), [
    ({"bench": {"999": {"color": {"from": [""], "to": ["red"]}}}}, "image id not in"),
    ({"bench": {"100166": {"teleport": {"from": [""], "to": ["x"]}}}}, "unknown edit type"),
    ({"unicorn": {"100166": {"color": {"from": [""], "to": ["x"]}}}}, "is not a COCO class"),
    ({"stop_sign": {"100166": {"color": {"from": [""], "to": ["x"]}}}}, "has no 'stop sign' annotation"),
])
def test_bad_input_names_class_image_and_type(tmp_path, spec, reason):
    ev, ann, images = fixture(tmp_path, spec)
    with pytest.raises(EditValFormatError, match=reason):
        build(ev, ann, tmp_path / "out", images_dir=images, progress=False)


def test_missing_images_say_how_to_get_them(tmp_path):
    ev, ann, _ = fixture(tmp_path)
    with pytest.raises(EditValFormatError, match="--download-images"):
        build(ev, ann, tmp_path / "out", images_dir=tmp_path / "nowhere", progress=False)
    assert np is not None
