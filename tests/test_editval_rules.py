"""EditVal's six rules over hand-built boxes: a pass and a fail case per rule, and one regression test per defect
of the release (spec/editval.md), each built so the release's reading would give the other answer."""

import math

import pytest

from benchmark.io import editval_rules as R
from benchmark.io.editval_rules import CLASS_EDIT, CLASS_ORIG, NEW_EDIT, RuleSettings
from benchmark.io.types import EDITVAL_TYPES, ObjectRef, Query

S = RuleSettings()


def q(edit_type, name="bench", **kw):
    return Query(id="q", image="x.png", edit_type=edit_type, instruction="x", target=ObjectRef("1", name), **kw)


# -- per rule: pass and fail ------------------------------------------------------------------------------------

def test_object_addition_needs_both_objects_in_the_edit():
    bench, ball = (0, 0, 100, 100), (120, 0, 160, 40)
    assert R.object_addition(ball, bench)
    assert not R.object_addition(None, bench)          # nothing added
    assert not R.object_addition(ball, None)           # the original object is gone: that is a replacement


def test_object_replacement_needs_the_new_object_and_not_the_old():
    assert R.object_replacement((0, 0, 10, 10), None)
    assert not R.object_replacement((0, 0, 10, 10), (50, 50, 90, 90))
    assert not R.object_replacement(None, None)


def test_alter_parts_needs_the_part_centre_inside_the_class_box():
    pizza = (100, 100, 300, 300)
    assert R.alter_parts((150, 150, 200, 200), pizza)
    assert not R.alter_parts((310, 150, 350, 200), pizza)   # beside the pizza
    assert not R.alter_parts(None, pizza) and not R.alter_parts((150, 150, 200, 200), None)
    # a deviation from the release (docs/editval.md): a centre exactly on the class box's edge is inside here
    x0 = pizza[0]
    assert R.alter_parts((x0 - 20, 150, x0 + 20, 200), pizza)
    assert not R.alter_parts((x0 - 22, 150, x0 + 18, 200), pizza)


@pytest.mark.parametrize(("relation", "added", "ok"), [
    ("left", (0, 100, 40, 140), True), ("left", (300, 100, 340, 140), False),
    ("right", (300, 100, 340, 140), True), ("right", (0, 100, 40, 140), False),
    ("below", (120, 300, 160, 340), True), ("below", (120, 0, 160, 40), False),
    ("on top", (120, 0, 160, 40), True), ("on top", (120, 300, 160, 340), False),
])
def test_positional_addition_compares_box_centres(relation, added, ok):
    assert R.positional_addition(added, (100, 100, 200, 200), relation) is ok


def test_positional_addition_needs_both_and_a_known_side():
    assert not R.positional_addition(None, (0, 0, 1, 1), "left")
    with pytest.raises(ValueError, match="behind"):
        R.positional_addition((0, 0, 1, 1), (0, 0, 1, 1), "behind")


def test_position_replacement_left_right_center():
    w = 512.0
    orig = (200, 100, 312, 200)                                   # centre x 256
    assert R.position_replacement(orig, (0, 100, 112, 200), "left", w, 0.25)       # centre 56: moved 200 > 128
    assert not R.position_replacement(orig, (120, 100, 232, 200), "left", w, 0.25)  # moved 80 < 128
    assert R.position_replacement(orig, (400, 100, 512, 200), "right", w, 0.25)
    assert not R.position_replacement(orig, (0, 100, 112, 200), "right", w, 0.25)   # moved the wrong way
    left = (0, 0, 100, 100)                                      # centre 50
    assert R.position_replacement(left, (200, 0, 300, 100), "center", w, 0.25)     # centre 250: 6 px off centre
    assert not R.position_replacement(left, (0, 0, 100, 100), "center", w, 0.25)   # stayed 206 px away
    assert not R.position_replacement(None, orig, "left", w, 0.25)


def test_size_relative_margin():
    orig = (0, 0, 100, 100)                                      # area 10,000
    assert R.size(orig, (0, 0, 110, 110), "enlarge", 0.1)        # 12,100 > 11,000
    assert not R.size(orig, (0, 0, 104, 104), "enlarge", 0.1)    # 10,816: within the margin
    assert R.size(orig, (0, 0, 90, 90), "shrink", 0.1)           # 8,100 < 9,000
    assert not R.size(orig, (0, 0, 96, 96), "shrink", 0.1)
    assert not R.size(orig, None, "shrink", 0.1)


# -- regression tests: the release's defects --------------------------------------------------------------------

def test_defect1_corner_boxes_centre_and_area():
    """The release read [x0, y0, x1, y1] as centre/size: its centre was (x0, y0) and its area x1 * y1."""
    assert R.center((100, 100, 200, 300)) == (150, 200)
    assert R.area((100, 100, 200, 300)) == 100 * 200
    # a part whose centre is inside the pizza but whose top-left corner is not: passes here (and in the release
    # too, side by side on the same boxes: its corner-read boxes happen to agree on this one)
    assert R.alter_parts((90, 90, 130, 130), (100, 100, 200, 200))
    # a part whose top-left corner is inside but whose centre is not: fails here, passed there
    assert not R.alter_parts((190, 190, 300, 300), (100, 100, 200, 200))
    # shrunk and moved: area 6,400 < 10,000, while x1 * y1 = 52,900 read as "larger"
    assert R.size((0, 0, 100, 100), (150, 150, 230, 230), "shrink", 0.1)
    assert not R.size((0, 0, 100, 100), (150, 150, 230, 230), "enlarge", 0.1)


def test_defect2_y_grows_downward():
    bench = (100, 100, 200, 200)
    lower = (130, 250, 170, 290)   # larger y: lower in the image
    assert R.positional_addition(lower, bench, "below")
    assert not R.positional_addition(lower, bench, "on top")
    assert R.positional_addition((130, 10, 170, 50), bench, "on top")
    assert not R.positional_addition((130, 10, 170, 50), bench, "below")


def test_defect3_delta_is_a_fraction_of_the_width():
    orig, moved = (400, 0, 500, 100), (300, 0, 400, 100)         # 100 px to the left
    assert R.position_replacement(orig, moved, "left", 256, 0.25)      # 100 > 64 at 256 px
    assert not R.position_replacement(orig, moved, "left", 1024, 0.25)  # 100 < 256 at 1024 px
    # the same move in proportion passes at every resolution
    for scale in (0.5, 1, 4):
        o = tuple(v * scale for v in (300, 0, 400, 100))
        m = tuple(v * scale for v in (100, 0, 200, 100))
        assert R.position_replacement(o, m, "left", 512 * scale, 0.25)


def test_defect4_whole_natural_language_names():
    assert R.text_query("wine glass") == "a photo of a wine glass"
    assert R.text_query("stop_sign") == "a photo of a stop sign"
    assert R.text_query("potted_plant") == "a photo of a potted plant"
    assert R.part_name("add tomato toppings") == "tomato toppings"
    reqs = R.requests(q("object_replacement", "stop_sign", new_class="fire_hydrant"), S)
    assert reqs == {CLASS_EDIT: ("edit", "stop sign"), NEW_EDIT: ("edit", "fire hydrant")}
    reqs = R.requests(q("alter_parts", "pizza", attribute_after="add tomato toppings"), S)
    assert reqs[NEW_EDIT] == ("edit", "tomato toppings")


def test_defect5_best_scoring_box_not_the_last():
    boxes = [(0, 0, 10, 10), (50, 50, 90, 90), (20, 20, 30, 30)]
    assert R.best_box(boxes, [0.2, 0.9, 0.3]) == (0.9, (50.0, 50.0, 90.0, 90.0))
    assert R.best_box(boxes, [0.5, 0.5, 0.1])[1] == (0.0, 0.0, 10.0, 10.0)   # ties: the first
    assert R.best_box([], []) == (0.0, None)


def test_defect6_every_type_gives_a_value_or_nan_never_a_crash():
    """The release crashed or had stubs for size, positional addition and shape."""
    boxes = {CLASS_EDIT: (0, 0, 50, 50), NEW_EDIT: (60, 0, 80, 20), CLASS_ORIG: (0, 0, 40, 40)}
    fields = {"new_class": "ball", "relation": "left", "size_change": "enlarge", "attribute_after": "add wheels",
              "background": "beach", "style": "cubism"}
    for t in EDITVAL_TYPES:
        kw = dict(fields, relation="right" if t == "position_replacement" else "left")
        value = R.judge(q(t, **kw), boxes, 512, S)
        if t in R.RULE_TYPES:
            assert value in (0.0, 1.0), t
        else:
            assert math.isnan(value) and R.requests(q(t, **kw), S) == {}, t
    assert R.judge(q("size", size_change="enlarge"), boxes, 512, S) == 1.0
    # a positional relation with no 2-D side is undefined, not a failure
    assert math.isnan(R.judge(q("positional_addition", new_class="ball", relation="behind"), boxes, 512, S))


# -- judge / requests ------------------------------------------------------------------------------------------

def test_requests_name_the_images_each_rule_reads():
    assert set(R.requests(q("size", size_change="shrink"), S).values()) == {("original", "bench"), ("edit", "bench")}
    pos = q("positional_addition", new_class="bag", relation="below")
    assert R.requests(pos, S) == {CLASS_EDIT: ("edit", "bench"), NEW_EDIT: ("edit", "bag")}
    orig = RuleSettings(positional_reference="original")
    assert R.requests(pos, orig) == {CLASS_ORIG: ("original", "bench"), NEW_EDIT: ("edit", "bag")}
    assert R.judge(pos, {CLASS_ORIG: (0, 0, 10, 10), NEW_EDIT: (0, 20, 10, 30)}, 100, orig) == 1.0


def test_relation_words():
    assert [R.relation_key(r) for r in ("to the left of", "on top of", "below", "right", "center", "in front")] == \
        ["left", "on top", "below", "right", "center", "in front"]


def test_settings_are_checked():
    with pytest.raises(ValueError, match="positional_reference"):
        RuleSettings(positional_reference="both")
    with pytest.raises(ValueError, match="position_delta"):
        RuleSettings(position_delta=200)   # pixels are not a fraction
    with pytest.raises(ValueError, match="corner box"):
        R.check_box((10, 10, 5, 20))
