"""The bundled demo world: procedurally generated scenes in GQA scene-graph form, rendered exactly.

Each image is a GQA-style scene graph (`width`, `height`, `location`, `objects` with `name`, `x`, `y`, `w`, `h`,
`attributes`, `relations`) whose object names are COCO classes. `render(graph)` is a pure function of the graph:
a textured background chosen by `location`, then each object as a flat shape per class, coloured by its colour
attribute. Because `apply_edit(graph, query)` changes the graph the way a query asks, the intended edit of every
query can be rendered exactly (that is what the `oracle` editor does), along with its edit-region mask.

Rendering uses integer and basic IEEE arithmetic only (no sin/exp), so the pixels are identical on every platform
and the bundled files can be checked against a fresh render.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.io.types import ObjectRef, Query

# class -> (shape, width/height aspect, default colour for newly added objects)
CLASSES: dict[str, tuple[str, float, str]] = {
    "sports ball": ("circle", 1.0, "orange"),
    "frisbee": ("ellipse", 1.6, "yellow"),
    "tv": ("rect", 1.4, "black"),
    "bottle": ("rect", 0.5, "green"),
    "pizza": ("triangle", 1.0, "orange"),
    "kite": ("diamond", 0.75, "red"),
    "stop sign": ("octagon", 1.0, "red"),
    "cake": ("rounded", 1.0, "white"),
}
# Parts that EditVal-type alter_parts queries add inside an object (not COCO classes: never sampled into scenes).
PARTS: dict[str, tuple[str, float, str]] = {
    "button": ("circle", 1.0, "white"),
    "label": ("rect", 1.6, "white"),
}
COLORS: dict[str, tuple[int, int, int]] = {
    "red": (200, 40, 40),
    "green": (40, 160, 60),
    "blue": (40, 70, 200),
    "yellow": (230, 200, 40),
    "purple": (130, 50, 160),
    "orange": (235, 130, 30),
    "white": (235, 235, 235),
    "black": (35, 35, 35),
}
# location -> (colour a, colour b, stripe period in px, stripe direction (dx, dy))
BACKGROUNDS: dict[str, tuple[tuple[int, int, int], tuple[int, int, int], int, tuple[int, int]]] = {
    "grass field": ((70, 140, 60), (110, 170, 80), 24, (0, 1)),
    "sandy beach": ((220, 200, 150), (240, 225, 180), 40, (1, 1)),
    "snowy field": ((225, 230, 240), (250, 250, 255), 32, (1, 0)),
    "night sky": ((15, 20, 60), (45, 50, 100), 48, (1, 2)),
    "brick wall": ((150, 60, 45), (185, 95, 70), 16, (2, 1)),
    "ocean": ((30, 90, 150), (60, 130, 190), 20, (1, -1)),
}
STYLES = ("pencil sketch", "pixel art", "sepia photograph", "pop art", "film negative")
RELATIONS = {"left": "to the left of", "right": "to the right of", "above": "above", "below": "below"}
RESIZE_FACTOR = {"enlarge": 1.7, "shrink": 0.6}
ADD_GAP = 0.25  # gap between an added object and its anchor, as a fraction of the anchor's size

DEMO_SIZE = 256
DEMO_IMAGES = 16
DEMO_SEED = 20261122


@dataclass(frozen=True)
class Box:
    x: int
    y: int
    w: int
    h: int

    def overlaps(self, other: Box, margin: int = 0) -> bool:
        return not (
            self.x + self.w + margin <= other.x
            or other.x + other.w + margin <= self.x
            or self.y + self.h + margin <= other.y
            or other.y + other.h + margin <= self.y
        )

    def inside(self, size: int, margin: int) -> bool:
        return self.x >= margin and self.y >= margin and self.x + self.w <= size - margin and self.y + self.h <= size - margin


def _obj_box(obj: dict[str, Any]) -> Box:
    return Box(int(obj["x"]), int(obj["y"]), int(obj["w"]), int(obj["h"]))


def _shape_of(name: str) -> str:
    return (CLASSES.get(name) or PARTS[name])[0]


def _color_of(obj: dict[str, Any]) -> str:
    return next(a for a in obj["attributes"] if a in COLORS)


# ----------------------------------------------------------------------------------------------- rendering


def _background(location: str, size_w: int, size_h: int) -> np.ndarray:
    a, b, period, (dx, dy) = BACKGROUNDS[location]
    yy, xx = np.mgrid[0:size_h, 0:size_w]
    phase = (xx * dx + yy * dy) % period
    tri = np.abs(2 * phase - period)  # triangle wave 0..period
    vert = yy * 40 // max(size_h - 1, 1)  # gentle vertical shading 0..40
    a_arr = np.array(a, dtype=np.int64)
    b_arr = np.array(b, dtype=np.int64)
    img = (a_arr * tri[..., None] + b_arr * (period - tri[..., None])) // period
    img = img - vert[..., None] // 2
    return np.clip(img, 0, 255).astype(np.uint8)


def _shape_mask(shape: str, box: Box, size_w: int, size_h: int) -> np.ndarray:
    yy, xx = np.mgrid[0:size_h, 0:size_w]
    # pixel centres in box-normalised coordinates, u, v in [-1, 1] across the box
    u = (2.0 * (xx - box.x) + 1.0) / box.w - 1.0
    v = (2.0 * (yy - box.y) + 1.0) / box.h - 1.0
    au, av = np.abs(u), np.abs(v)
    inside_box = (au <= 1.0) & (av <= 1.0)
    if shape in ("circle", "ellipse"):
        m = u * u + v * v <= 1.0
    elif shape == "rect":
        m = inside_box
    elif shape == "triangle":
        m = inside_box & (au <= (v + 1.0) / 2.0)
    elif shape == "diamond":
        m = au + av <= 1.0
    elif shape == "octagon":
        m = inside_box & (au + av <= 1.45)
    elif shape == "rounded":
        m = inside_box & (au + av <= 1.8)
    else:
        raise ValueError(f"unknown shape {shape!r}")
    return m


def object_masks(graph: dict[str, Any]) -> dict[str, np.ndarray]:
    """Visible mask of every object (later objects, in id order, occlude earlier ones)."""
    w, h = graph["width"], graph["height"]
    masks: dict[str, np.ndarray] = {}
    for oid in sorted(graph["objects"], key=int):
        obj = graph["objects"][oid]
        m = _shape_mask(_shape_of(obj["name"]), _obj_box(obj), w, h)
        for other in masks.values():
            other &= ~m
        masks[oid] = m
    return masks


def largest_visible(graph: dict[str, Any]) -> dict[str, tuple[str, np.ndarray]]:
    """name -> (object id, visible mask) of the object of that name with the most visible pixels (the first one on a
    tie); fully hidden objects are left out. What the oracle test doubles report for a class."""
    best: dict[str, tuple[int, str, np.ndarray]] = {}
    for oid, mask in object_masks(graph).items():
        visible = int(mask.sum())
        name = graph["objects"][oid]["name"]
        if visible and (name not in best or visible > best[name][0]):
            best[name] = (visible, oid, mask)
    return {name: (oid, mask) for name, (_, oid, mask) in best.items()}


def render(graph: dict[str, Any], style: str | None = None) -> np.ndarray:
    """Render a scene graph to an (H, W, 3) uint8 array; `style` applies one of `STYLES` afterwards."""
    w, h = graph["width"], graph["height"]
    img = _background(graph["location"], w, h).astype(np.int64)
    yy = np.mgrid[0:h, 0:w][0]
    for oid, m in object_masks(graph).items():
        obj = graph["objects"][oid]
        box = _obj_box(obj)
        base = np.array(COLORS[_color_of(obj)], dtype=np.int64)
        # top-lit shading: 100% at the top edge of the box down to 70% at the bottom
        shade = 100 - 30 * np.clip(yy - box.y, 0, box.h) // max(box.h, 1)
        img[m] = (base[None, :] * shade[m][:, None]) // 100
    img = np.clip(img, 0, 255).astype(np.uint8)
    return apply_style(img, style) if style else img


def apply_style(img: np.ndarray, style: str) -> np.ndarray:
    """Deterministic integer image filters standing in for artistic styles."""
    x = img.astype(np.int64)
    if style == "pencil sketch":
        gray = x.sum(axis=2) // 3
        gx = np.zeros_like(gray)
        gy = np.zeros_like(gray)
        gx[:, 1:] = np.abs(gray[:, 1:] - gray[:, :-1])
        gy[1:, :] = np.abs(gray[1:, :] - gray[:-1, :])
        out = 255 - np.clip((gx + gy) * 4, 0, 255)
        return np.repeat(out[..., None], 3, axis=2).astype(np.uint8)
    if style == "pixel art":
        b = 16
        h, w = x.shape[:2]
        hb, wb = h // b * b, w // b * b
        blocks = x[:hb, :wb].reshape(hb // b, b, wb // b, b, 3).sum(axis=(1, 3)) // (b * b)
        out = x.copy()
        out[:hb, :wb] = np.repeat(np.repeat(blocks, b, axis=0), b, axis=1)
        return out.astype(np.uint8)
    if style == "sepia photograph":
        r, g, bl = x[..., 0], x[..., 1], x[..., 2]
        out = np.stack(
            [(393 * r + 769 * g + 189 * bl) // 1000, (349 * r + 686 * g + 168 * bl) // 1000, (272 * r + 534 * g + 131 * bl) // 1000],
            axis=2,
        )
        return np.clip(out, 0, 255).astype(np.uint8)
    if style == "pop art":
        return (np.clip(x // 86, 0, 2) * 127).astype(np.uint8)
    if style == "film negative":
        return (255 - x).astype(np.uint8)
    raise ValueError(f"unknown style {style!r}; known: {STYLES}")


# ----------------------------------------------------------------------------------------------- edits


def _placed_box(anchor: Box, relation: str, w: int, h: int) -> Box:
    gap = max(2, int(ADD_GAP * max(anchor.w, anchor.h)))
    cx = anchor.x + anchor.w // 2
    cy = anchor.y + anchor.h // 2
    if relation == "left":
        return Box(anchor.x - gap - w, cy - h // 2, w, h)
    if relation == "right":
        return Box(anchor.x + anchor.w + gap, cy - h // 2, w, h)
    if relation == "above":
        return Box(cx - w // 2, anchor.y - gap - h, w, h)
    if relation == "below":
        return Box(cx - w // 2, anchor.y + anchor.h + gap, w, h)
    raise ValueError(f"unknown relation {relation!r}")


def _box_for_class(name: str, size: int) -> tuple[int, int]:
    aspect = CLASSES[name][1]
    if aspect >= 1:
        return size, max(4, int(size / aspect))
    return max(4, int(size * aspect)), size


def _resized(box: Box, factor: float) -> Box:
    # factor scales the side lengths, so sqrt(area ratio) == factor (HATIE's size score uses sqrt of area).
    w, h = max(2, round(box.w * factor)), max(2, round(box.h * factor))
    return Box(box.x + box.w // 2 - w // 2, box.y + box.h // 2 - h // 2, w, h)


def _relation_key(phrase: str) -> str:
    for key, text in RELATIONS.items():
        if phrase in (key, text):
            return key
    raise ValueError(f"unknown relation {phrase!r}")


def apply_edit(graph: dict[str, Any], query: Query) -> tuple[dict[str, Any], str | None]:
    """Return (edited graph, style) for a demo query of one of HATIE's seven types or of `EDITVAL_DEMO_TYPES`."""
    g = copy.deepcopy(graph)
    objs = g["objects"]
    t = query.edit_type
    style = None
    if t == "obj_add":
        assert query.anchor is not None and query.new_class and query.relation
        anchor = _obj_box(objs[query.anchor.id])
        w, h = _box_for_class(query.new_class, max(anchor.w, anchor.h))
        box = _placed_box(anchor, _relation_key(query.relation), w, h)
        new_id = str(max(int(k) for k in objs) + 1)
        objs[new_id] = {
            "name": query.new_class, "x": box.x, "y": box.y, "w": box.w, "h": box.h,
            "attributes": [CLASSES[query.new_class][2]], "relations": [],
        }
    elif t == "obj_remove":
        assert query.target is not None
        del objs[query.target.id]
    elif t == "obj_rep":
        assert query.target is not None and query.new_class
        obj = objs[query.target.id]
        old = _obj_box(obj)
        w, h = _box_for_class(query.new_class, max(old.w, old.h))
        obj.update(name=query.new_class, x=old.x + old.w // 2 - w // 2, y=old.y + old.h // 2 - h // 2, w=w, h=h)
    elif t == "attr_chg":
        assert query.target is not None and query.attribute_after
        obj = objs[query.target.id]
        obj["attributes"] = [query.attribute_after if a in COLORS else a for a in obj["attributes"]]
    elif t == "obj_resize":
        assert query.target is not None and query.size_change
        obj = objs[query.target.id]
        box = _resized(_obj_box(obj), RESIZE_FACTOR[query.size_change])
        obj.update(x=box.x, y=box.y, w=box.w, h=box.h)
    elif t == "bg_chg":
        g["location"] = query.background
    elif t == "style_chg":
        style = query.style
    elif t in EDITVAL_DEMO_TYPES:
        style = _apply_editval(g, query)
    else:
        raise ValueError(f"the demo world cannot render edit type {t!r}")
    g["objects"] = objs
    _update_relations(g)
    return g, style


def edit_region(graph: dict[str, Any], edited: dict[str, Any], query: Query) -> np.ndarray:
    """Pixels the intended edit may change: the touched objects before and after, the background, or everything."""
    h, w = graph["height"], graph["width"]
    if query.edit_type in ("style_chg", "style"):
        return np.ones((h, w), dtype=bool)
    before, after = object_masks(graph), object_masks(edited)
    if query.edit_type in ("bg_chg", "background"):
        objects = np.zeros((h, w), dtype=bool)
        for m in before.values():
            objects |= m
        return ~objects
    region = np.zeros((h, w), dtype=bool)
    for oid in set(before) | set(after):
        b, a = before.get(oid), after.get(oid)
        if b is None or a is None or not np.array_equal(b, a) or _looks(graph, oid) != _looks(edited, oid):
            region |= (b if b is not None else False) | (a if a is not None else False)
    return region


def _looks(graph: dict[str, Any], oid: str) -> tuple[Any, ...] | None:
    """What of an object shows in the render (relations do not)."""
    obj = graph["objects"].get(oid)
    return None if obj is None else (obj["name"], obj["x"], obj["y"], obj["w"], obj["h"], tuple(obj["attributes"]))


# ----------------------------------------------------------------------------------------------- EditVal-type edits

# EditVal types the demo world renders exactly (spec/editval.md): the six with an automatic rule, and three without
# one (their accuracy is NaN; DINO and FID still apply). Appended after the HATIE queries, so ids and demo_mini stay.
EDITVAL_DEMO_TYPES = ("object_addition", "object_replacement", "positional_addition", "size", "position_replacement",
                      "alter_parts", "color", "background", "style")
# type -> the variants the demo set holds, one query each on distinct scenes (two or more per type: FID needs them)
EDITVAL_PLAN: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("object_addition", ("", "")), ("object_replacement", ("", "")),
    ("positional_addition", ("left", "right", "below", "on top")), ("size", ("enlarge", "shrink")),
    ("position_replacement", ("left", "right", "center")), ("alter_parts", ("button", "label")),
    ("color", ("", "")), ("background", ("", "")), ("style", ("", "")),
)
EDITVAL_SEED = DEMO_SEED + 1  # its own stream: the HATIE queries' draws are untouched
PLACE_ORDER = ("right", "left", "below", "above")  # object_addition puts the new object at the first that fits
POSITION_X = {"left": 0.15, "right": 0.85, "center": 0.5}  # position_replacement: target centre, fraction of width
POSITION_DELTA = 0.25  # EditVal's default delta (fraction of the width); demo moves clear it by POSITION_SLACK px
POSITION_SLACK = 4
PART_SIDE = 0.4  # part box side as a fraction of the object box's shorter side
EDITVAL_SIZE_WORDS = {"enlarge": "large", "shrink": "small"}


def _new_id(objs: dict[str, Any]) -> str:
    return str(max(int(k) for k in objs) + 1)


def _part_box(obj: dict[str, Any], part: str) -> Box:
    b = _obj_box(obj)
    side = max(4, int(PART_SIDE * min(b.w, b.h)))
    w, h = _box_for_class_or_part(part, side)
    return Box(b.x + b.w // 2 - w // 2, b.y + b.h // 2 - h // 2, w, h)


def _box_for_class_or_part(name: str, size: int) -> tuple[int, int]:
    aspect = (CLASSES.get(name) or PARTS[name])[1]
    if aspect >= 1:
        return size, max(4, int(size / aspect))
    return max(4, int(size * aspect)), size


def _part_color(obj: dict[str, Any]) -> str:
    return next(c for c in ("white", "black", "yellow") if c != _color_of(obj))


def _moved_box(box: Box, relation: str, width: int) -> Box:
    cx = round(POSITION_X[relation] * width)
    return Box(min(max(3, cx - box.w // 2), width - box.w - 3), box.y, box.w, box.h)


def _apply_editval(g: dict[str, Any], query: Query) -> str | None:
    """Apply an EditVal-type demo query to the graph `g` in place; returns the style (or None). Every choice is a
    function of the graph and the query, so the oracle editor renders exactly the bundled target."""
    from benchmark.io.editval_rules import part_name, relation_key

    objs = g["objects"]
    t = query.edit_type
    if t in ("background", "style"):
        if t == "background":
            g["location"] = query.background
        return query.style if t == "style" else None
    assert query.target is not None
    obj = objs[query.target.id]
    if t in ("object_addition", "positional_addition"):
        assert query.new_class
        anchor = _obj_box(obj)
        w, h = _box_for_class(query.new_class, max(anchor.w, anchor.h))
        rels = ("above" if relation_key(query.relation) == "on top" else relation_key(query.relation),) \
            if t == "positional_addition" else PLACE_ORDER
        for rel in rels:
            box = _placed_box(anchor, rel, w, h)
            trial = {**objs, "new": {"name": query.new_class, "x": box.x, "y": box.y, "w": box.w, "h": box.h}}
            if _fits(g, {**g, "objects": trial}, "new") or rel == rels[-1]:
                break
        objs[_new_id(objs)] = {"name": query.new_class, "x": box.x, "y": box.y, "w": box.w, "h": box.h,
                               "attributes": [CLASSES[query.new_class][2]], "relations": []}
    elif t == "object_replacement":
        assert query.new_class
        old = _obj_box(obj)
        w, h = _box_for_class(query.new_class, max(old.w, old.h))
        obj.update(name=query.new_class, x=old.x + old.w // 2 - w // 2, y=old.y + old.h // 2 - h // 2, w=w, h=h)
    elif t == "size":
        assert query.size_change
        box = _resized(_obj_box(obj), RESIZE_FACTOR[query.size_change])
        obj.update(x=box.x, y=box.y, w=box.w, h=box.h)
    elif t == "position_replacement":
        box = _moved_box(_obj_box(obj), relation_key(query.relation), g["width"])
        obj.update(x=box.x, y=box.y)
    elif t == "alter_parts":
        part = part_name(query.attribute_after or "")
        box = _part_box(obj, part)
        objs[_new_id(objs)] = {"name": part, "x": box.x, "y": box.y, "w": box.w, "h": box.h,
                               "attributes": [_part_color(obj)], "relations": []}
    elif t == "color":
        obj["attributes"] = [query.attribute_after if a in COLORS else a for a in obj["attributes"]]
    return None


def _where(box: Box, width: int) -> str:
    cx = box.x + box.w / 2
    return "left" if cx < width / 3 else "right" if cx > 2 * width / 3 else "center"


def _editval_query(image_id: str, graph: dict[str, Any], t: str, variant: str,
                   rng: np.random.Generator) -> Query | None:
    """One EditVal-type query of type `t` on this scene whose exact edit fits (None when none does)."""
    from benchmark.querysets.editval import prompts

    objs = graph["objects"]
    size = graph["width"]
    present = {o["name"] for o in objs.values()}
    absent = [c for c in CLASSES if c not in present]
    for oid in [sorted(objs, key=int)[int(i)] for i in rng.permutation(len(objs))]:
        obj, ref = objs[oid], _object_ref(image_id, oid, objs[oid])
        cls = obj["name"]
        kw: dict[str, Any] = {"target": ref}
        frm, to = "", ""
        if t in ("object_addition", "object_replacement", "positional_addition"):
            to = absent[int(rng.integers(len(absent)))]
            kw["new_class"] = to
            if t == "positional_addition":
                kw["relation"] = variant
                to = f"{to}\x1f{variant}"
        elif t == "size":
            kw.update(size_change=variant, attribute_after=EDITVAL_SIZE_WORDS[variant])
            to = EDITVAL_SIZE_WORDS[variant]
        elif t == "position_replacement":
            frm, to = _where(_obj_box(obj), size), variant
            kw.update(relation=variant, attribute_before=frm)
        elif t == "alter_parts":
            to = f"add {_article(variant)} {variant}"
            kw["attribute_after"] = to
        elif t == "color":
            before = _color_of(obj)
            to = [c for c in COLORS if c != before][int(rng.integers(len(COLORS) - 1))]
            kw.update(attribute_before=before, attribute_after=to)
        elif t == "background":
            to = [b for b in BACKGROUNDS if b != graph["location"]][int(rng.integers(len(BACKGROUNDS) - 1))]
            kw["background"] = to
        elif t == "style":
            to = STYLES[int(rng.integers(len(STYLES)))]
            kw["style"] = to
        instruction, _ = prompts(t, cls, frm, to)
        q = Query(id=f"{image_id}-ev-{t}", image=f"images/{image_id}.png", image_id=image_id, edit_type=t,
                  instruction=instruction, editable_objects=tuple(_object_ref(image_id, k, objs[k])
                                                                  for k in sorted(objs, key=int)), **kw)
        edited, style = apply_edit(graph, q)
        if not _editval_fits(graph, edited, q):
            continue
        q = replace(q, edit_mask=f"edit_masks/{q.id}.png", target_image=f"targets/{q.id}.png",
                    source_caption=_caption(graph), target_caption=_caption(edited, style))
        return q
    return None


def _editval_fits(graph: dict[str, Any], edited: dict[str, Any], q: Query) -> bool:
    """The exact edit stays inside the image, overlaps nothing, and clears its rule with a margin (so the oracle
    passes it and an unchanged image fails it)."""
    t, size = q.edit_type, graph["width"]
    if t in ("color", "background", "style"):
        return True
    assert q.target is not None
    if t in ("object_addition", "positional_addition", "alter_parts"):
        changed = _new_id(graph["objects"])
        return t == "alter_parts" or _fits(graph, edited, changed)
    if t == "object_replacement":
        return _fits(graph, edited, q.target.id)
    if t == "size":
        return _fits(graph, edited, q.target.id)
    before, after = _obj_box(graph["objects"][q.target.id]), _obj_box(edited["objects"][q.target.id])
    cx0, cx1 = before.x + before.w / 2, after.x + after.w / 2
    d = POSITION_DELTA * size + POSITION_SLACK
    moved = {"left": cx1 < cx0 - d, "right": cx1 > cx0 + d,
             "center": abs(cx1 - size / 2) < POSITION_DELTA * size - POSITION_SLACK and abs(cx0 - size / 2) > d}
    return moved[q.relation or ""] and _fits(graph, edited, q.target.id)


def editval_queries(graphs: dict[str, Any], seed: int = EDITVAL_SEED) -> list[Query]:
    """The EditVal-type demo queries (`EDITVAL_PLAN`): each variant on the next scene (from a random start) where
    it fits, one query per type and scene."""
    rng = np.random.default_rng(seed)
    ids = sorted(graphs)
    out: list[Query] = []
    for t, variants in EDITVAL_PLAN:
        used: set[str] = set()
        start = int(rng.integers(len(ids)))
        for v in variants:
            for k in range(len(ids)):
                image_id = ids[(start + k) % len(ids)]
                if image_id in used:
                    continue
                q = _editval_query(image_id, graphs[image_id], t, v, rng)
                if q is not None:
                    used.add(image_id)
                    out.append(q)
                    break
            else:
                raise RuntimeError(f"demo: no scene fits an EditVal {t} ({v or 'any'}) edit")
    return out


def load_editval_demo(root: str, name: str = "demo_editval") -> Any:
    """The demo set's EditVal-type queries as a query set of their own (own name and hash)."""
    from benchmark.querysets.io import QuerySet, content_hash, file_digests, load_queryset

    full = load_queryset(root)
    queries = tuple(q for q in full.queries if q.edit_type in EDITVAL_DEMO_TYPES)
    if not queries:
        from benchmark.querysets.io import QuerySetError

        raise QuerySetError(f"{root}: no EditVal-type queries; regenerate the demo set (editmeter data build demo)")
    return QuerySet(name=name, root=full.root, queries=queries,
                    hash=content_hash(queries, file_digests(full.root, queries, full.meta)), meta=full.meta)


# ----------------------------------------------------------------------------------------------- scene graphs


def _update_relations(graph: dict[str, Any]) -> None:
    """GQA-style spatial relations between every pair of objects, from their box centres."""
    objs = graph["objects"]
    for oid, obj in objs.items():
        rels = []
        bo = _obj_box(obj)
        for pid, other in sorted(objs.items(), key=lambda kv: int(kv[0])):
            if pid == oid:
                continue
            bp = _obj_box(other)
            dx = (bo.x + bo.w / 2) - (bp.x + bp.w / 2)
            dy = (bo.y + bo.h / 2) - (bp.y + bp.h / 2)
            if abs(dx) >= abs(dy):
                rels.append({"name": "to the left of" if dx < 0 else "to the right of", "object": pid})
            else:
                rels.append({"name": "above" if dy < 0 else "below", "object": pid})
        obj["relations"] = rels


def _sample_scene(rng: np.random.Generator, size: int) -> dict[str, Any]:
    names = list(CLASSES)
    n = int(rng.integers(2, 4))
    chosen = [names[i] for i in rng.choice(len(names), size=n, replace=False)]
    objects: dict[str, Any] = {}
    boxes: list[Box] = []
    for i, name in enumerate(chosen):
        for _ in range(200):
            s = int(rng.integers(size // 8, size // 5))
            w, h = _box_for_class(name, s)
            box = Box(int(rng.integers(4, size - w - 4)), int(rng.integers(4, size - h - 4)), w, h)
            # leave room to enlarge by 1.7x without touching anything
            grown = _resized(box, RESIZE_FACTOR["enlarge"])
            if grown.inside(size, 2) and not any(grown.overlaps(b, margin=6) for b in boxes):
                break
        else:
            continue
        boxes.append(box)
        color = list(COLORS)[int(rng.integers(len(COLORS)))]
        objects[str(i + 1)] = {"name": name, "x": box.x, "y": box.y, "w": box.w, "h": box.h, "attributes": [color], "relations": []}
    location = list(BACKGROUNDS)[int(rng.integers(len(BACKGROUNDS)))]
    graph = {"width": size, "height": size, "location": location, "objects": objects}
    _update_relations(graph)
    return graph


def _caption(graph: dict[str, Any], style: str | None = None) -> str:
    objs = [graph["objects"][k] for k in sorted(graph["objects"], key=int)]
    parts = [f"{_article(_color_of(o))} {_color_of(o)} {o['name']}" for o in objs]
    things = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    text = f"{things} on a {graph['location']}" if parts else f"an empty {graph['location']}"
    return f"{text}, as {_article(style)} {style}" if style else text


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def _fits(graph: dict[str, Any], edited: dict[str, Any], changed: str) -> bool:
    size = graph["width"]
    b = _obj_box(edited["objects"][changed])
    others = [_obj_box(o) for k, o in edited["objects"].items() if k != changed]
    return b.inside(size, 2) and not any(b.overlaps(o, margin=4) for o in others)


def _object_ref(image_id: str, oid: str, obj: dict[str, Any]) -> ObjectRef:
    b = _obj_box(obj)
    return ObjectRef(id=oid, name=obj["name"], mask=f"masks/{image_id}/{oid}.png", bbox=(b.x, b.y, b.x + b.w - 1, b.y + b.h - 1))


def _queries_for(image_id: str, graph: dict[str, Any], rng: np.random.Generator) -> list[Query]:
    objs = graph["objects"]
    ids = sorted(objs, key=int)
    refs = {oid: _object_ref(image_id, oid, objs[oid]) for oid in ids}
    common = {"image": f"images/{image_id}.png", "image_id": image_id, "editable_objects": tuple(refs.values())}
    out: list[Query] = []

    def add(kind: str, **kw: Any) -> None:
        qid = f"{image_id}-{kind}"
        out.append(Query(id=qid, edit_type=kind, edit_mask=f"edit_masks/{qid}.png", target_image=f"targets/{qid}.png", **common, **kw))

    present = {objs[k]["name"] for k in ids}
    absent = [c for c in CLASSES if c not in present]
    # obj_add: first (anchor, relation) that fits
    new_class = absent[int(rng.integers(len(absent)))]
    for oid in [ids[int(i)] for i in rng.permutation(len(ids))]:
        done = False
        for rel in [list(RELATIONS)[int(i)] for i in rng.permutation(len(RELATIONS))]:
            trial = Query(id="probe", image="x", edit_type="obj_add", instruction="x", new_class=new_class, anchor=refs[oid], relation=RELATIONS[rel])
            edited, _ = apply_edit(graph, trial)
            new_id = str(max(int(k) for k in edited["objects"]))
            if _fits(graph, edited, new_id):
                a = objs[oid]["name"]
                add("obj_add", new_class=new_class, anchor=refs[oid], relation=RELATIONS[rel],
                    instruction=f"Add {_article(new_class)} {new_class} {RELATIONS[rel]} the {a}.")
                done = True
                break
        if done:
            break
    target = ids[int(rng.integers(len(ids)))]
    tname = objs[target]["name"]
    add("obj_remove", target=refs[target], instruction=f"Remove the {tname}.")
    rep = absent[int(rng.integers(len(absent)))]
    add("obj_rep", target=refs[target], new_class=rep, instruction=f"Replace the {tname} with {_article(rep)} {rep}.")
    before = _color_of(objs[target])
    after = [c for c in COLORS if c != before][int(rng.integers(len(COLORS) - 1))]
    add("attr_chg", target=refs[target], attribute_before=before, attribute_after=after,
        instruction=f"Change the color of the {tname} to {after}.")
    mode = "enlarge" if rng.integers(2) == 0 else "shrink"
    add("obj_resize", target=refs[target], size_change=mode,
        instruction=f"Make the {tname} {'bigger' if mode == 'enlarge' else 'smaller'}.")
    bg = [b for b in BACKGROUNDS if b != graph["location"]][int(rng.integers(len(BACKGROUNDS) - 1))]
    add("bg_chg", background=bg, instruction=f"Change the background to a {bg}.")
    style = STYLES[int(rng.integers(len(STYLES)))]
    add("style_chg", style=style, instruction=f"Make it look like {_article(style)} {style}.")

    captioned = []
    src_caption = _caption(graph)
    for q in out:
        edited, st = apply_edit(graph, q)
        captioned.append(replace(q, source_caption=src_caption, target_caption=_caption(edited, st)))
    return captioned


def build(out_dir: Path, n_images: int = DEMO_IMAGES, size: int = DEMO_SIZE, seed: int = DEMO_SEED,
          editval: bool = True) -> Path:
    """Generate the demo query set into `out_dir` (images, masks, scene graphs, queries, targets).

    `editval=False` leaves out the EditVal-type queries (small custom worlds may have no scene that fits every
    EditVal variant, which is an error when they are asked for)."""
    from PIL import Image

    from benchmark.io.fileio import atomic_write_text
    from benchmark.io.imageio import save_mask, save_png
    from benchmark.io.types import SCHEMA_VERSION
    from benchmark.querysets.io import META_FILE, write_queries

    out_dir = Path(out_dir)
    rng = np.random.default_rng(seed)
    graphs: dict[str, Any] = {}
    queries: list[Query] = []
    for i in range(n_images):
        image_id = f"demo{i:03d}"
        graph = _sample_scene(rng, size)
        graphs[image_id] = graph
        save_png(Image.fromarray(render(graph)), out_dir / "images" / f"{image_id}.png")
        for oid, m in object_masks(graph).items():
            save_mask(m, out_dir / "masks" / image_id / f"{oid}.png")
        for q in _queries_for(image_id, graph, rng):
            edited, style = apply_edit(graph, q)
            save_png(Image.fromarray(render(edited, style)), out_dir / "targets" / f"{q.id}.png")
            save_mask(edit_region(graph, edited, q), out_dir / "edit_masks" / f"{q.id}.png")
            queries.append(q)
    for q in editval_queries(graphs) if editval else []:  # after every HATIE query: their ids, order and bytes are unchanged
        edited, style = apply_edit(graphs[q.image_id], q)
        save_png(Image.fromarray(render(edited, style)), out_dir / "targets" / f"{q.id}.png")
        save_mask(edit_region(graphs[q.image_id], edited, q), out_dir / "edit_masks" / f"{q.id}.png")
        queries.append(q)
    atomic_write_text(out_dir / "scene_graphs.json", json.dumps(graphs, indent=1, sort_keys=True) + "\n")
    write_queries(out_dir / "queries.jsonl", queries)
    meta = {
        "name": "demo",
        "schema_version": SCHEMA_VERSION,
        "description": "Procedurally generated demo world (COCO class names, GQA-form scene graphs, exact "
        "ground-truth edits). Regenerate with `editmeter data build demo`.",
        "license": "CC0-1.0 (generated by editmeter)",
        "generator": {"module": "benchmark.querysets.demo", "seed": seed, "n_images": n_images, "size": size,
                      **({} if editval else {"editval": False})},
        "scene_graphs": "scene_graphs.json",
    }
    atomic_write_text(out_dir / META_FILE, json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return out_dir


def load_scene_graphs(path: Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def pixels_key(arr: np.ndarray) -> str:
    """Content key of a uint8 image array (its bytes and shape)."""
    import hashlib

    arr = np.ascontiguousarray(arr, dtype=np.uint8)
    return hashlib.blake2b(arr.tobytes() + repr(arr.shape).encode(), digest_size=16).hexdigest()


def render_index(root: Path, pixels: Any, *, who: str, instead: str) -> tuple[dict[str, Any], dict[str, tuple]]:
    """The demo world's exact renders, for the oracle test doubles: (scene graphs, pixel key -> (image id, query or
    None for the source)) over every source image and ground-truth target of the set in `root`, each keyed as
    `pixels(PIL image)` makes it (the array the oracle will be shown). `who` and `instead` word the error for a set
    without scene graphs."""
    from benchmark.io.imageio import load_rgb
    from benchmark.querysets.io import load_queryset

    root = Path(root)
    qs = load_queryset(root)
    graphs_file = qs.meta.get("scene_graphs")
    if not graphs_file or not (root / graphs_file).is_file():
        raise FileNotFoundError(f"{who}: {root} has no scene graphs (it reads the demo world only; {instead})")
    graphs = load_scene_graphs(root / graphs_file)
    index: dict[str, tuple] = {}
    for q in qs.queries:
        if q.image_id not in graphs:
            continue
        index.setdefault(pixels_key(pixels(load_rgb(qs.path(q.image)))), (q.image_id, None))
        if q.target_image:
            index.setdefault(pixels_key(pixels(load_rgb(qs.path(q.target_image)))), (q.image_id, q))
    return graphs, index
