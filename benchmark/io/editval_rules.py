"""EditVal's six automatic accuracy rules as pure functions over detected boxes (docs/editval.md).

A box is `(x0, y0, x1, y1)`: corners in pixels of one image frame, x to the right, **y downward** (image
convention). `None` stands for "not detected above the threshold". Nothing here runs a model: the suite detects,
turns the best box per name into these arguments and calls `judge`.

The release's defects that these functions must not repeat (spec/editval.md), each pinned by a regression test in
tests/test_editval_rules.py: boxes are corners, not centre/size (its "centre" was the top-left corner and its
"area" x1 * y1); "below" means a larger y; the position delta is a fraction of the image width, not 200 px; names
are whole natural-language phrases ("wine glass", "stop sign"); the best-scoring box is used, not the last one;
size and positional addition are real rules, and a type without a rule is undefined (NaN), never a crash.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from benchmark.io.types import Query

Box = tuple[float, float, float, float]

# The six types with an automatic rule (EditVal paper, Appendix C); the other seven are scored NaN.
RULE_TYPES: tuple[str, ...] = ("object_addition", "object_replacement", "alter_parts", "positional_addition",
                               "position_replacement", "size")
# positional_addition relations and the side of the reference box centre the added box centre must be on.
SIDES: dict[str, tuple[int, int]] = {"left": (0, -1), "right": (0, 1), "below": (1, 1), "on top": (1, -1),
                                     "above": (1, -1)}
POSITIONS = ("left", "right", "center")  # position_replacement targets
# Roles of the detections a rule reads: which image, which name.
CLASS_EDIT, NEW_EDIT, CLASS_ORIG = "class_edit", "new_edit", "class_orig"


@dataclass(frozen=True)
class RuleSettings:
    """Every threshold of the rules (configs/metrics/editval.yaml)."""

    threshold: float = 0.1          # detector score a name must exceed to count as present
    position_delta: float = 0.25    # position_replacement: fraction of the image width the centre must move
    size_margin: float = 0.1        # size: relative change of the box area required
    positional_reference: str = "edit"  # positional_addition: the class box of the edit (or the original)

    def __post_init__(self) -> None:
        if self.positional_reference not in ("edit", "original"):
            raise ValueError(f"positional_reference must be 'edit' or 'original', not {self.positional_reference!r}")
        for name in ("threshold", "position_delta", "size_margin"):
            v = getattr(self, name)
            if not (isinstance(v, int | float) and 0 <= v < 1):
                raise ValueError(f"{name} must be a number in [0, 1), not {v!r}")


# -- boxes --------------------------------------------------------------------------------------------------------

def check_box(box: Sequence[float]) -> Box:
    """`box` as a corner box of floats; ValueError when it is not 4 finite numbers with x0 <= x1 and y0 <= y1."""
    if len(box) != 4:
        raise ValueError(f"a box is (x0, y0, x1, y1), got {len(box)} numbers")
    x0, y0, x1, y1 = (float(v) for v in box)
    if not all(math.isfinite(v) for v in (x0, y0, x1, y1)) or x1 < x0 or y1 < y0:
        raise ValueError(f"not a corner box (x0 <= x1, y0 <= y1, finite): {tuple(box)}")
    return x0, y0, x1, y1


def center(box: Box) -> tuple[float, float]:
    """Centre of a corner box (not its top-left corner: release defect 1)."""
    x0, y0, x1, y1 = box
    return (x0 + x1) / 2, (y0 + y1) / 2


def area(box: Box) -> float:
    """Width * height of a corner box (not x1 * y1: release defect 1)."""
    x0, y0, x1, y1 = box
    return (x1 - x0) * (y1 - y0)


def best_box(boxes: Sequence[Sequence[float]], scores: Sequence[float]) -> tuple[float, Box | None]:
    """(score, box) of the highest-scoring box (the first of equals), or (0.0, None) when there is none. The
    release kept the last box above the threshold (defect 5)."""
    if len(boxes) != len(scores):
        raise ValueError(f"{len(boxes)} boxes but {len(scores)} scores")
    if not len(boxes):
        return 0.0, None
    i = max(range(len(scores)), key=lambda k: (float(scores[k]), -k))
    return float(scores[i]), check_box(boxes[i])


def scale_box(box: Box | None, sx: float, sy: float) -> Box | None:
    """A box moved into another frame of the same image (e.g. an edit's pixels into the original's)."""
    if box is None:
        return None
    x0, y0, x1, y1 = box
    return x0 * sx, y0 * sy, x1 * sx, y1 * sy


# -- names --------------------------------------------------------------------------------------------------------

def natural(name: str) -> str:
    """A class key or object phrase as words: underscores become spaces, case and spacing normalised; a
    multi-word name stays whole ("wine glass", never "wine": release defect 4)."""
    return " ".join(name.replace("_", " ").lower().split())


def text_query(name: str) -> str:
    """The detector prompt for a name: "a photo of a <natural name>" (the paper's template)."""
    return f"a photo of a {natural(name)}"


def part_name(attribute_after: str) -> str:
    """The part an alter_parts value adds: "add tomato toppings" -> "tomato toppings"."""
    words = natural(attribute_after).split()
    if words and words[0] == "add":
        words = words[1:]
    if words and words[0] in ("a", "an", "the", "some"):
        words = words[1:]
    return " ".join(words)


def relation_key(relation: str | None) -> str:
    """The relation word of a positional / position query ("to the left" -> "left", "on top of" -> "on top")."""
    text = natural(relation or "")
    for key in ("on top", "left", "right", "below", "above", "center", "centre"):
        if key in text.split() or text.startswith(key):
            return "center" if key == "centre" else key
    return text


# -- rules --------------------------------------------------------------------------------------------------------

def object_addition(new_edit: Box | None, class_edit: Box | None) -> bool:
    """The new object and the original class are both in the edit."""
    return new_edit is not None and class_edit is not None


def object_replacement(new_edit: Box | None, class_edit: Box | None) -> bool:
    """The new object is in the edit and the original class is not."""
    return new_edit is not None and class_edit is None


def alter_parts(part_edit: Box | None, class_edit: Box | None) -> bool:
    """The part and the class are in the edit and the part's box centre lies inside the class box."""
    if part_edit is None or class_edit is None:
        return False
    cx, cy = center(part_edit)
    x0, y0, x1, y1 = class_edit
    return x0 <= cx <= x1 and y0 <= cy <= y1


def positional_addition(added: Box | None, reference: Box | None, relation: str) -> bool:
    """Both are present and the added box centre is on the requested side of the reference box centre: below =
    larger y (y grows downward: release defect 2), on top / above = smaller y, left = smaller x, right = larger
    x. ValueError for a relation without a side (behind, in front): `judge` scores those NaN."""
    if relation not in SIDES:
        raise ValueError(f"positional_addition has no rule for relation {relation!r}; known: {sorted(SIDES)}")
    if added is None or reference is None:
        return False
    axis, sign = SIDES[relation]
    return sign * (center(added)[axis] - center(reference)[axis]) > 0


def position_replacement(original: Box | None, edit: Box | None, relation: str, image_width: float,
                         delta: float) -> bool:
    """The class is in the original and the edit, and its centre moved by more than `delta * image_width`
    toward `relation` (left / right); for "center" it ends within that distance of the image's vertical centre
    line. `delta` is a fraction of the width, not pixels (release defect 3)."""
    if relation not in POSITIONS:
        raise ValueError(f"position_replacement has no rule for {relation!r}; known: {POSITIONS}")
    if original is None or edit is None:
        return False
    d = delta * image_width
    before, after = center(original)[0], center(edit)[0]
    if relation == "left":
        return after < before - d
    if relation == "right":
        return after > before + d
    return abs(after - image_width / 2) <= d


def size(original: Box | None, edit: Box | None, size_change: str, margin: float) -> bool:
    """The class is in both and its box area grew (enlarge) or shrank (shrink) by more than `margin` relative to
    the original's area."""
    if size_change not in ("enlarge", "shrink"):
        raise ValueError(f"size_change must be 'enlarge' or 'shrink', not {size_change!r}")
    if original is None or edit is None:
        return False
    a0, a1 = area(original), area(edit)
    return a1 > a0 * (1 + margin) if size_change == "enlarge" else a1 < a0 * (1 - margin)


# -- per query ----------------------------------------------------------------------------------------------------

def has_rule(query: Query) -> bool:
    """Whether the query's accuracy is defined: one of the six types, with a relation the rule can judge."""
    if query.edit_type not in RULE_TYPES or query.target is None:
        return False
    if query.edit_type == "positional_addition":
        return relation_key(query.relation) in SIDES
    if query.edit_type == "position_replacement":
        return relation_key(query.relation) in POSITIONS
    return True


def requests(query: Query, settings: RuleSettings) -> dict[str, tuple[str, str]]:
    """role -> (image, name) the rule of `query` reads; image is "edit" or "original". {} without a rule."""
    if not has_rule(query) or query.target is None:  # (has_rule checks target; repeated for the type checker)
        return {}
    cls = natural(query.target.name)
    t = query.edit_type
    if t in ("object_addition", "object_replacement", "positional_addition"):
        out = {CLASS_EDIT: ("edit", cls), NEW_EDIT: ("edit", natural(query.new_class or ""))}
        if t == "positional_addition" and settings.positional_reference == "original":
            out = {CLASS_ORIG: ("original", cls), NEW_EDIT: out[NEW_EDIT]}
        return out
    if t == "alter_parts":
        return {CLASS_EDIT: ("edit", cls), NEW_EDIT: ("edit", part_name(query.attribute_after or ""))}
    return {CLASS_ORIG: ("original", cls), CLASS_EDIT: ("edit", cls)}  # position_replacement, size


def judge(query: Query, boxes: Mapping[str, Box | None], image_width: float, settings: RuleSettings) -> float:
    """1.0 / 0.0 for a query with a rule, NaN without one. `boxes` maps each role of `requests(query)` to its
    best box above the threshold (None when absent), all in the original image's pixel frame."""
    if not has_rule(query):
        return math.nan
    t = query.edit_type
    if t == "object_addition":
        ok = object_addition(boxes[NEW_EDIT], boxes[CLASS_EDIT])
    elif t == "object_replacement":
        ok = object_replacement(boxes[NEW_EDIT], boxes[CLASS_EDIT])
    elif t == "alter_parts":
        ok = alter_parts(boxes[NEW_EDIT], boxes[CLASS_EDIT])
    elif t == "positional_addition":
        ref = boxes[CLASS_ORIG] if settings.positional_reference == "original" else boxes[CLASS_EDIT]
        ok = positional_addition(boxes[NEW_EDIT], ref, relation_key(query.relation))
    elif t == "position_replacement":
        ok = position_replacement(boxes[CLASS_ORIG], boxes[CLASS_EDIT], relation_key(query.relation), image_width,
                                  settings.position_delta)
    else:
        ok = size(boxes[CLASS_ORIG], boxes[CLASS_EDIT], query.size_change or "", settings.size_margin)
    return 1.0 if ok else 0.0
