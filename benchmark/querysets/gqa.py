"""HATIE-style query set built from GQA scene graphs and images (HATIE paper Sec. 3.1-3.2, App. A-B).

Three phases, so the 1.2 GB scene-graph file is read once and never held whole:

1. `scan` streams the scene graphs (`json_stream`), collects dataset statistics (relations between COCO classes
   consolidated to HATIE's 9 relations, attributes per class, state co-occurrence, class co-occurrence) and keeps a
   compact record of every image that has editable objects (App. A filters: COCO class, box area >= 0.5 % of the
   image, box not touching the border, no image with two instances of a class).
2. `propose` turns each record into candidate queries of the 7 types by the rules of App. B.1, and
   `balanced_sample` picks them per type round-robin over object classes with a seed.
3. `materialize` crops/resizes each chosen image to 512 x 512 without cutting an editable object, runs the
   optional detector / occlusion checks, writes image, object masks and edit masks, and captions the queries.

Choices where the paper leaves room are named constants below, each with the reason.
"""

from __future__ import annotations

import hashlib
import math
import os
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.io.types import HATIE_TYPES, ObjectRef, Query
from benchmark.querysets.captions import (
    RELATION_PHRASES,
    Captioner,
    CaptionObject,
    EditSpec,
    Scene,
    TemplateCaptioner,
    article,
)
from benchmark.querysets.coco_classes import to_coco_class

SIZE = 512
MIN_AREA_FRAC = 0.005  # App. A: drop objects whose box is smaller than 0.5% of the image
BORDER_PX = 1  # App. A: a box within this many pixels of the image edge "touches" it (may be cropped)
DUPLICATE_IOU = 0.7  # GQA often labels one thing twice ("man" + "person"); same-class boxes this close are one
OCCUPIER_MAX_FRAC = 0.25  # non-COCO boxes larger than this are surfaces (sky, ground, wall), not occupiers
DETECTOR_IOU = 0.5  # App. A: keep objects whose GQA box and detected mask's box have IoU >= 0.5
OCCLUSION_MIN_DESIRED = 4  # App. A: keep objects with >= 4 of 6 desired VQA answers
ADD_SCALE = 0.6  # an added object's box is this fraction of the anchor's width / height
ADD_MIN_SIDE = 24  # ... but at least this many pixels (at 512), so the addition is visible
ADD_MARGIN = 8  # the placement box stays this far inside the image (App. B.1 "large enough margin")
ADD_MAX_OVERLAP = 0.1  # fraction of the placement box another object may cover
RESIZE_SMALL = 0.05  # box area fraction below which an object is only enlarged (App. B.1)
RESIZE_LARGE = 0.25  # ... above which it is only shrunk
RESIZE_FACTOR = 1.6  # edit-mask extent for enlarge (HATIE's size score saturates at sqrt area ratio 1.6)
MIN_RELATION_COUNT = 5  # a (new class, relation, anchor class) triple must be seen this often to be proposed
MIN_COOCCURRENCE = 5  # a replacement class must co-occur this often with every other class in the image
MIN_ATTRIBUTE_COUNT = 5  # an attribute must be seen on a class this often to be a replacement option

# HATIE's 9 relations (Sec. 3.2) and the GQA relation phrases consolidated into each.
RELATIONS: tuple[str, ...] = ("under", "above", "in", "on", "left", "right", "next to", "front", "behind")
GQA_RELATIONS: dict[str, str] = {
    "to the left of": "left", "to the right of": "right", "in front of": "front", "behind": "behind",
    "under": "under", "below": "under", "beneath": "under", "underneath": "under", "above": "above",
    "over": "above", "on": "on", "on top of": "on", "sitting on": "on", "standing on": "on", "lying on": "on",
    "resting on": "on", "parked on": "on", "in": "in", "inside": "in", "inside of": "in", "sitting in": "in",
    "standing in": "in", "next to": "next to", "beside": "next to", "near": "next to", "by": "next to",
    "close to": "next to",
}

# Attribute groups (Sec. 3.2). Color, material and action swap within the group; states only with their data-driven
# partner (App. B.1: 'wet' may become 'dry', never 'rusted').
COLORS = frozenset({"white", "black", "blue", "green", "red", "brown", "yellow", "gray", "grey", "orange", "pink",
                    "purple", "silver", "gold", "beige", "tan", "dark brown", "light blue", "dark blue", "maroon"})
MATERIALS = frozenset({"wood", "wooden", "metal", "metallic", "plastic", "glass", "leather", "stone", "brick",
                       "concrete", "ceramic", "porcelain", "paper", "cardboard", "wicker", "steel", "cloth", "denim"})
ACTIONS = frozenset({"standing", "sitting", "walking", "running", "lying", "flying", "eating", "jumping", "playing",
                     "sleeping", "swimming", "grazing", "riding", "looking", "smiling", "laying", "skiing",
                     "surfing", "skateboarding", "resting", "drinking"})
# Candidate state pairs; the data decides per class which ones are offered (see `DatasetStats.state_partners`).
STATE_PAIRS: tuple[tuple[str, str], ...] = (
    ("wet", "dry"), ("open", "closed"), ("empty", "full"), ("on", "off"), ("clean", "dirty"), ("new", "old"),
    ("cooked", "raw"), ("sliced", "whole"), ("lit", "unlit"), ("parked", "moving"), ("folded", "unfolded"),
    ("ripe", "unripe"), ("broken", "intact"), ("melted", "frozen"),
)
STATES = frozenset(s for pair in STATE_PAIRS for s in pair)

# App. B.1: 27 backgrounds and 10 styles.
BACKGROUNDS: tuple[str, ...] = (
    "beach", "pine forest", "urban city", "desert", "snow field", "country side farm", "tropical jungle", "vineyard",
    "lake side", "mountain top", "living room", "cave", "art gallery", "ancient ruins", "space station",
    "grass field", "train station", "library", "restaurant", "airport", "hospital", "gym", "zoo", "aquarium",
    "museum", "concert hall", "stadium",
)
STYLES: tuple[str, ...] = (
    "watercolor painting", "Van Gogh art", "oil painting", "cartoon", "gray scale", "pencil sketch", "mosaic art",
    "pop art", "graffiti art", "ancient Egyptian art",
)

# `mask_fn(image, boxes, class_names) -> [mask or None]`: the scoring suite's segmenter plugs in here
# (benchmark/models/segmenter.py); None turns the detector check off and object masks are the GQA boxes.
MaskFn = Callable[[Any, Sequence[tuple[float, float, float, float]], Sequence[str]], Sequence[Any]]
# `image_text_scorer(image, texts) -> [score]` (e.g. CLIP); ranks backgrounds for bg_chg.
ImageTextScorer = Callable[[Any, Sequence[str]], Sequence[float]]
# `vqa_fn(image, question) -> P(yes)`; optional occlusion filter of App. A (off by default).
VqaFn = Callable[[Any, str], float]

OCCLUSION_QUESTIONS: tuple[tuple[str, bool], ...] = (
    ("Is the {o} hidden behind another object?", False),
    ("Is part of the {o} covered by another object?", False),
    ("Is the {o} partially outside the image frame?", False),
    ("Is part of the {o} blocked by something else in the scene?", False),
    ("Are parts of the {o} visible?", True),
    ("Is the {o} fully in view without anything blocking it?", True),
)


class GQAFormatError(ValueError):
    """A scene graph does not have GQA's shape; the message names the file, the image and the field."""


Box = tuple[float, float, float, float]  # x0, y0, x1, y1


@dataclass(frozen=True)
class Obj:
    oid: str
    name: str  # COCO class
    box: Box  # in the 512 x 512 output frame
    attributes: tuple[str, ...]


@dataclass(frozen=True)
class ImageRecord:
    """What phases 2-3 need of one image (compact: the scene graph itself is not kept)."""

    image_id: str
    width: int
    height: int
    crop: tuple[int, int, int]  # x, y, side of the square crop in source pixels
    location: str | None
    objects: tuple[Obj, ...]  # editable objects, 512 frame
    occupiers: tuple[Box, ...]  # other objects that occupy space, 512 frame
    present: frozenset[str]  # every COCO class in the image (editable or not)
    context: frozenset[str]  # words of the location and all object names (background-ranking fallback)


@dataclass
class DatasetStats:
    """Counts over the whole scene-graph file (App. B.1's data-driven options)."""

    relations: Counter = field(default_factory=Counter)  # (subject class, relation, object class) -> n
    attributes: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))  # class -> attr -> n
    state_pairs_seen: set = field(default_factory=set)  # (state a, state b) on one object
    cooccurrence: Counter = field(default_factory=Counter)  # (class a, class b), a != b -> images
    class_images: Counter = field(default_factory=Counter)  # class -> images
    filters: Counter = field(default_factory=Counter)  # reason -> images / objects dropped

    def add_options(self, anchor_cls: str, min_count: int) -> list[tuple[str, str]]:
        """(new class, relation) pairs seen with `anchor_cls` at least `min_count` times (cached per build)."""
        cache = self.__dict__.setdefault("_add_cache", {})
        if min_count not in cache:
            index: dict[str, list[tuple[str, str]]] = defaultdict(list)
            for (subj, rel, obj), n in sorted(self.relations.items()):
                if n >= min_count:
                    index[obj].append((subj, rel))
            cache[min_count] = index
        return cache[min_count].get(anchor_cls, [])

    def state_partners(self, cls: str, state: str, min_count: int) -> list[str]:
        """Data-driven partners of `state` for `cls`: paired candidates both seen on the class, never together."""
        out = []
        for a, b in STATE_PAIRS:
            other = b if a == state else a if b == state else None
            if other is None:
                continue
            if self.attributes[cls][state] >= min_count and self.attributes[cls][other] >= min_count \
                    and (state, other) not in self.state_pairs_seen and (other, state) not in self.state_pairs_seen:
                out.append(other)
        return out


@dataclass(frozen=True)
class BuildConfig:
    """Builder parameters (all recorded in queryset.json)."""

    seed: int = 0
    queries_per_type: int | None = None  # None: every candidate
    min_relation_count: int = MIN_RELATION_COUNT
    min_cooccurrence: int = MIN_COOCCURRENCE
    min_attribute_count: int = MIN_ATTRIBUTE_COUNT
    types: tuple[str, ...] = HATIE_TYPES
    max_images: int | None = None  # stop scanning after this many images (quick looks)
    workers: int = 1


# ------------------------------------------------------------------------------------------------ phase 1: scan


def _box(obj: dict[str, Any], where: str) -> Box:
    try:
        x, y, w, h = (float(obj[k]) for k in ("x", "y", "w", "h"))
    except (KeyError, TypeError, ValueError):
        raise GQAFormatError(f"{where}: needs numeric x, y, w, h (GQA boxes are top-left + size)") from None
    return (x, y, x + w, y + h)


def _iou(a: Box, b: Box) -> float:
    iw = min(a[2], b[2]) - max(a[0], b[0])
    ih = min(a[3], b[3]) - max(a[1], b[1])
    if iw <= 0 or ih <= 0:
        return 0.0
    inter = iw * ih
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def _area(b: Box) -> float:
    return max(0.0, b[2] - b[0]) * max(0.0, b[3] - b[1])


def choose_crop(width: int, height: int, boxes: Sequence[Box]) -> tuple[tuple[int, int, int], list[int]]:
    """Square crop (x, y, side) of side min(W, H) keeping as many `boxes` whole (not touching the crop edge) as
    possible; ties go to the window centred closest on them. Returns the crop and the indices of the kept boxes."""
    side = min(width, height)
    horizontal = width >= height
    lo = [b[0] if horizontal else b[1] for b in boxes]
    hi = [b[2] if horizontal else b[3] for b in boxes]
    span = (width if horizontal else height) - side
    centre = (min(lo) + max(hi)) / 2 if boxes else (width if horizontal else height) / 2
    options = {0, span, int(min(max(round(centre - side / 2), 0), span))}
    for a, b in zip(lo, hi, strict=True):
        options.add(int(min(max(math.floor(a) - BORDER_PX - 1, 0), span)))
        options.add(int(min(max(math.ceil(b) + BORDER_PX + 1 - side, 0), span)))

    def kept(o: int) -> list[int]:
        return [i for i, (a, b) in enumerate(zip(lo, hi, strict=True)) if a > o + BORDER_PX and b < o + side - 1 - BORDER_PX]

    best = max(sorted(options), key=lambda o: (len(kept(o)), -abs(o + side / 2 - centre)))
    crop = (best, 0, side) if horizontal else (0, best, side)
    return crop, kept(best)


def _to_frame(b: Box, crop: tuple[int, int, int]) -> Box:
    x, y, side = crop
    s = SIZE / side
    return (round((b[0] - x) * s, 2), round((b[1] - y) * s, 2), round((b[2] - x) * s, 2), round((b[3] - y) * s, 2))


def scan(path: str | os.PathLike[str], cfg: BuildConfig = BuildConfig(), progress: bool = True) -> tuple[DatasetStats, list[ImageRecord]]:
    """Phase 1: stream the scene graphs once; return dataset statistics and the records of usable images."""
    from benchmark.querysets.json_stream import iter_object_entries

    stats = DatasetStats()
    records: list[ImageRecord] = []
    t0 = time.perf_counter()
    n = 0
    for n, (image_id, graph) in enumerate(iter_object_entries(path), start=1):
        record = _scan_image(str(path), image_id, graph, stats)
        if record is not None:
            records.append(record)
        if progress and n % 20000 == 0:
            print(f"[gqa] scanned {n} images, {len(records)} usable ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
        if cfg.max_images is not None and n >= cfg.max_images:
            break
    stats.filters["images scanned"] = n
    stats.filters["images usable"] = len(records)
    return stats, records


def _scan_image(path: str, image_id: str, graph: dict[str, Any], stats: DatasetStats) -> ImageRecord | None:
    where = f"{path}: image {image_id!r}"
    try:
        width, height = int(graph["width"]), int(graph["height"])
        objects = graph["objects"]
    except (KeyError, TypeError, ValueError):
        raise GQAFormatError(f"{where}: needs 'width', 'height' and 'objects' (GQA scene-graph format)") from None
    if not isinstance(objects, dict):
        raise GQAFormatError(f"{where}: 'objects' must map object ids to objects")
    classes: dict[str, str] = {}
    boxes: dict[str, Box] = {}
    for oid, obj in objects.items():
        cls = to_coco_class(str(obj.get("name", "")))
        boxes[oid] = _box(obj, f"{where}, object {oid!r}")
        if cls is None:
            continue
        classes[oid] = cls
        attrs = obj.get("attributes") or []
        counter = stats.attributes[cls]
        for a in attrs:
            counter[a] += 1
        states = [a for a in attrs if a in STATES]
        for i, a in enumerate(states):
            for b in states[i + 1:]:
                stats.state_pairs_seen.add((a, b))
    for oid, cls in classes.items():
        for rel in objects[oid].get("relations") or []:
            other = classes.get(str(rel.get("object")))
            r = GQA_RELATIONS.get(str(rel.get("name", "")).strip().lower())
            if other is not None and r is not None and other != cls:
                stats.relations[(cls, r, other)] += 1
    # Instances per class, counting near-identical same-class boxes once (GQA double labels).
    instances: dict[str, list[Box]] = defaultdict(list)
    for oid, cls in classes.items():
        if not any(_iou(boxes[oid], b) >= DUPLICATE_IOU for b in instances[cls]):
            instances[cls].append(boxes[oid])
    present = frozenset(instances)
    for a in present:
        stats.class_images[a] += 1
        for b in present:
            if a != b:
                stats.cooccurrence[(a, b)] += 1
    if not classes:
        stats.filters["image: no COCO object"] += 1
        return None
    if any(len(v) > 1 for v in instances.values()):
        stats.filters["image: two or more instances of a class"] += 1
        return None
    image_area = float(width * height)
    editable: list[str] = []
    seen_cls: set[str] = set()
    for oid in sorted(classes, key=lambda k: (classes[k], k)):
        b = boxes[oid]
        if classes[oid] in seen_cls:  # the double label of an object already taken
            continue
        if _area(b) < MIN_AREA_FRAC * image_area:
            stats.filters["object: box < 0.5% of image"] += 1
            continue
        if b[0] <= BORDER_PX or b[1] <= BORDER_PX or b[2] >= width - 1 - BORDER_PX or b[3] >= height - 1 - BORDER_PX:
            stats.filters["object: box touches the border"] += 1
            continue
        editable.append(oid)
        seen_cls.add(classes[oid])
    if not editable:
        stats.filters["image: no editable object"] += 1
        return None
    crop, kept = choose_crop(width, height, [boxes[o] for o in editable])
    if len(kept) < len(editable):
        stats.filters["object: outside the square crop"] += len(editable) - len(kept)
    if not kept:
        stats.filters["image: no editable object fits a square crop"] += 1
        return None
    keep_ids = [editable[i] for i in kept]
    objs = tuple(Obj(oid, classes[oid], _to_frame(boxes[oid], crop),
                     tuple(a for a in (objects[oid].get("attributes") or []) if isinstance(a, str)))
                 for oid in keep_ids)
    kept_set = set(keep_ids)
    occupiers = tuple(
        _to_frame(b, crop) for oid, b in boxes.items()
        if oid not in kept_set and (oid in classes or _area(b) <= OCCUPIER_MAX_FRAC * image_area)
    )
    words = set(str(graph.get("location") or "").lower().split())
    for obj in objects.values():
        words.update(str(obj.get("name", "")).lower().split())
    return ImageRecord(image_id=image_id, width=width, height=height, crop=crop,
                       location=graph.get("location") or None, objects=objs, occupiers=occupiers,
                       present=present, context=frozenset(words))


# ------------------------------------------------------------------------------------------------ phase 2: propose


@dataclass(frozen=True)
class Candidate:
    """A query before materialization (no paths, captions or background yet)."""

    image_id: str
    edit_type: str
    group: str  # class used for balancing
    fields: tuple[tuple[str, Any], ...]

    def get(self, key: str, default: Any = None) -> Any:
        return dict(self.fields).get(key, default)


def _rng(seed: int, *parts: str) -> np.random.Generator:
    digest = hashlib.sha256("\x1f".join((str(seed), *parts)).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def placement_box(anchor: Box, relation: str) -> list[Box]:
    """Where an added object goes relative to `anchor` (512 frame); 'next to' offers left and right."""
    x0, y0, x1, y1 = anchor
    w, h = x1 - x0, y1 - y0
    nw, nh = max(ADD_MIN_SIDE, ADD_SCALE * w), max(ADD_MIN_SIDE, ADD_SCALE * h)
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    gap = 0.05 * max(w, h)
    if relation == "left":
        return [(x0 - gap - nw, cy - nh / 2, x0 - gap, cy + nh / 2)]
    if relation == "right":
        return [(x1 + gap, cy - nh / 2, x1 + gap + nw, cy + nh / 2)]
    if relation == "above":
        return [(cx - nw / 2, y0 - gap - nh, cx + nw / 2, y0 - gap)]
    if relation == "under":
        return [(cx - nw / 2, y1 + gap, cx + nw / 2, y1 + gap + nh)]
    if relation == "next to":
        return placement_box(anchor, "left") + placement_box(anchor, "right")
    if relation == "on":
        return [(cx - nw / 2, y0 + 0.25 * h - nh, cx + nw / 2, y0 + 0.25 * h)]
    if relation == "in":
        return [(cx - w / 4, cy - h / 4, cx + w / 4, cy + h / 4)]
    if relation == "front":
        return [(cx - nw / 2, cy + 0.25 * h - nh / 2, cx + nw / 2, cy + 0.25 * h + nh / 2)]
    if relation == "behind":
        return [(cx - nw / 2, cy - 0.25 * h - nh / 2, cx + nw / 2, cy - 0.25 * h + nh / 2)]
    raise ValueError(f"unknown relation {relation!r}; known: {RELATIONS}")


def _free(box: Box, rec: ImageRecord, anchor_id: str) -> bool:
    """App. B.1: the placement is inside the image with a margin and not occupied by other objects."""
    if box[0] < ADD_MARGIN or box[1] < ADD_MARGIN or box[2] > SIZE - ADD_MARGIN or box[3] > SIZE - ADD_MARGIN:
        return False
    area = _area(box)
    others = [o.box for o in rec.objects if o.oid != anchor_id] + list(rec.occupiers)
    for b in others:
        iw = min(box[2], b[2]) - max(box[0], b[0])
        ih = min(box[3], b[3]) - max(box[1], b[1])
        if iw > 0 and ih > 0 and iw * ih > ADD_MAX_OVERLAP * area:
            return False
    return True


def propose(rec: ImageRecord, stats: DatasetStats, cfg: BuildConfig) -> list[Candidate]:
    """Phase 2: candidate queries of one image (at most one per type and editable object)."""
    rng = _rng(cfg.seed, "propose", rec.image_id)
    out: list[Candidate] = []
    all_classes = sorted(stats.class_images)
    types = set(cfg.types)

    def add(edit_type: str, group: str, **fields: Any) -> None:
        if edit_type in types:
            out.append(Candidate(rec.image_id, edit_type, group, tuple(sorted(fields.items()))))

    for obj in rec.objects:
        add("obj_remove", obj.name, target=obj.oid)
        # obj_add: (new class, relation) seen with this anchor class, new class absent, placement free
        options = []
        places: dict[str, Box | None] = {}
        for cls, r in stats.add_options(obj.name, cfg.min_relation_count):
            if cls in rec.present:
                continue
            if r not in places:
                places[r] = next((b for b in placement_box(obj.box, r) if _free(b, rec, obj.oid)), None)
            if places[r] is not None:
                options.append((cls, r, places[r]))
        if options:
            classes = sorted({o[0] for o in options})
            cls = classes[int(rng.integers(len(classes)))]  # uniform over classes first: class balance
            rels = [o for o in options if o[0] == cls]
            cls, r, place = rels[int(rng.integers(len(rels)))]
            add("obj_add", cls, anchor=obj.oid, new_class=cls, relation=r, placement=tuple(round(v, 2) for v in place))
        # obj_rep: a class plausible with every other class in the image (App. B.1)
        others = [c for c in rec.present if c != obj.name]
        reps = [c for c in all_classes if c not in rec.present and (
            all(stats.cooccurrence[(c, p)] >= cfg.min_cooccurrence for p in others) if others
            else stats.cooccurrence[(c, obj.name)] >= cfg.min_cooccurrence)]
        if reps:
            add("obj_rep", obj.name, target=obj.oid, new_class=reps[int(rng.integers(len(reps)))])
        # attr_chg: swap within the attribute's group; states only with their data-driven partner
        swaps = []
        counts = stats.attributes[obj.name]
        for a in obj.attributes:
            if a in STATES:
                swaps += [("state", a, b) for b in stats.state_partners(obj.name, a, cfg.min_attribute_count)]
                continue
            group = COLORS if a in COLORS else MATERIALS if a in MATERIALS else ACTIONS if a in ACTIONS else None
            if group is None:
                continue
            kind = "color" if group is COLORS else "material" if group is MATERIALS else "action"
            swaps += [(kind, a, b) for b in sorted(group) if b not in obj.attributes and counts[b] >= cfg.min_attribute_count]
        if swaps:
            kind, a, b = swaps[int(rng.integers(len(swaps)))]
            add("attr_chg", obj.name, target=obj.oid, attribute_before=a, attribute_after=b, attribute_kind=kind)
        # obj_resize: direction from relative size
        frac = _area(obj.box) / (SIZE * SIZE)
        mode = "enlarge" if frac < RESIZE_SMALL else "shrink" if frac > RESIZE_LARGE else ("enlarge", "shrink")[int(rng.integers(2))]
        add("obj_resize", obj.name, target=obj.oid, size_change=mode)
    add("bg_chg", "whole image")
    add("style_chg", "whole image", style=STYLES[int(rng.integers(len(STYLES)))])
    return out


def balanced_sample(candidates: Iterable[Candidate], per_type: int | None, seed: int) -> list[Candidate]:
    """Per type, take candidates round-robin over their classes (seeded order) until `per_type` are chosen.

    Round-robin gives every class the same count until the rarer ones run out (App. B.4's balanced classes).
    bg_chg and style_chg (any image will do) are drawn last and prefer images already chosen for an object task,
    so queries share images (HATIE has 2.7 queries per image) and fewer images need writing; object tasks are not
    steered, which would crowd them onto the few images with many editable objects.
    """
    by_type: dict[str, dict[str, list[Candidate]]] = defaultdict(lambda: defaultdict(list))
    for c in candidates:
        by_type[c.edit_type][c.group].append(c)
    chosen: list[Candidate] = []
    images: set[str] = set()
    # object types first, whole-image types (one candidate per image, any image will do) last
    for edit_type in sorted(by_type, key=lambda t: (t in ("bg_chg", "style_chg"), t)):
        groups = by_type[edit_type]
        if per_type is None:
            chosen += [c for g in sorted(groups) for c in groups[g]]
            continue
        rng = _rng(seed, "sample", edit_type)
        queues = []
        for g in sorted(groups):
            items = sorted(groups[g], key=lambda c: (c.image_id, c.fields))
            order = [items[i] for i in rng.permutation(len(items))]
            if edit_type in ("bg_chg", "style_chg"):
                order = [c for c in order if c.image_id in images] + [c for c in order if c.image_id not in images]
            queues.append(order)
        picked = 0
        depth = 0
        while picked < per_type and any(depth < len(q) for q in queues):
            for q in queues:
                if depth < len(q) and picked < per_type:
                    chosen.append(q[depth])
                    images.add(q[depth].image_id)
                    picked += 1
            depth += 1
    return chosen


# ------------------------------------------------------------------------------------------------ phase 3: materialize


def rank_backgrounds_fallback(rec: ImageRecord) -> list[str]:
    """Deterministic stand-in for CLIP ranking: backgrounds sharing words with the scene graph's location and object
    names rank as most aligned; ties are ordered by a hash of (image, background)."""
    def key(b: str) -> tuple[int, str]:
        overlap = len(set(b.lower().split()) & rec.context)
        return (overlap, hashlib.sha256(f"{rec.image_id}\x1f{b}".encode()).hexdigest())

    return sorted(BACKGROUNDS, key=key, reverse=True)  # most aligned first


def choose_background(rec: ImageRecord, image: Any, scorer: ImageTextScorer | None, seed: int) -> str:
    """App. B.1: a background from the half of the 27 least aligned with the image."""
    if scorer is not None:
        scores = list(scorer(image, [f"a photo of {article(b)} {b}" for b in BACKGROUNDS]))
        ranked = [b for _, b in sorted(zip(scores, BACKGROUNDS, strict=True), reverse=True)]
    else:
        ranked = rank_backgrounds_fallback(rec)
    least = ranked[len(ranked) - len(ranked) // 2:]
    return least[int(_rng(seed, "bg", rec.image_id).integers(len(least)))]


def _box_mask(box: Box) -> np.ndarray:
    m = np.zeros((SIZE, SIZE), dtype=bool)
    x0, y0 = max(0, int(math.floor(box[0]))), max(0, int(math.floor(box[1])))
    x1, y1 = min(SIZE, int(math.ceil(box[2]))), min(SIZE, int(math.ceil(box[3])))
    m[y0:y1, x0:x1] = True
    return m


def _mask_box(mask: np.ndarray) -> Box | None:
    ys, xs = np.nonzero(mask)
    if len(xs) == 0:
        return None
    return (float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1))


@dataclass
class Materializer:
    """Phase 3 for one image at a time; holds the optional models and the output folder."""

    out_dir: Path
    images_dir: Path | None
    seed: int = 0
    open_image: Callable[[str], Any] | None = None  # image_id -> PIL image; default images_dir/<id>.jpg
    mask_fn: MaskFn | None = None
    vqa_fn: VqaFn | None = None
    scorer: ImageTextScorer | None = None
    captioner: Captioner = field(default_factory=TemplateCaptioner)

    def _open(self, rec: ImageRecord) -> Any:
        from benchmark.io.imageio import ImageInputError, load_rgb

        if self.open_image is not None:
            im = self.open_image(rec.image_id)
        else:
            if self.images_dir is None:
                raise ValueError("no images folder given (images_dir) and no open_image callable")
            im = load_rgb(self.images_dir / f"{rec.image_id}.jpg")
        if im.size != (rec.width, rec.height):
            raise ImageInputError(f"image {rec.image_id}: is {im.size[0]}x{im.size[1]} but its scene graph says "
                                  f"{rec.width}x{rec.height}; the images and scene graphs are from different releases")
        return im

    def run(self, rec: ImageRecord, cands: Sequence[Candidate]) -> tuple[list[Query], Counter]:
        """Write the image, masks and edit masks of `rec`; return its finished queries and dropped-object counts."""
        from PIL import Image

        from benchmark.io.imageio import save_bitmask, save_jpeg

        dropped: Counter = Counter()
        x, y, side = rec.crop
        im = self._open(rec).crop((x, y, x + side, y + side)).resize((SIZE, SIZE), Image.Resampling.BICUBIC)
        masks: dict[str, np.ndarray] = {o.oid: _box_mask(o.box) for o in rec.objects}
        keep = {o.oid for o in rec.objects}
        if self.mask_fn is not None:
            found = list(self.mask_fn(im, [o.box for o in rec.objects], [o.name for o in rec.objects]))
            for o, m in zip(rec.objects, found, strict=True):
                mb = None if m is None else _mask_box(np.asarray(m, dtype=bool))
                if mb is None or _iou(mb, o.box) < DETECTOR_IOU:
                    keep.discard(o.oid)
                    dropped["object: detector IoU < 0.5"] += 1
                else:
                    masks[o.oid] = np.asarray(m, dtype=bool)
        if self.vqa_fn is not None:
            for o in rec.objects:
                if o.oid in keep:
                    desired = sum((self.vqa_fn(im, q.format(o=o.name)) >= 0.5) == want for q, want in OCCLUSION_QUESTIONS)
                    if desired < OCCLUSION_MIN_DESIRED:
                        keep.discard(o.oid)
                        dropped["object: occluded (VQA)"] += 1
        objs = [o for o in rec.objects if o.oid in keep]
        if not objs:
            return [], dropped
        rid = rec.image_id
        save_jpeg(im, self.out_dir / "images" / f"{rid}.jpg")  # JPEG like the sources and HATIE's release
        refs = {}
        for o in objs:
            rel = f"masks/{rid}/{o.oid}.png"
            save_bitmask(masks[o.oid], self.out_dir / rel)
            refs[o.oid] = ObjectRef(id=o.oid, name=o.name, mask=rel, bbox=o.box)
        scene = Scene(tuple(CaptionObject(o.oid, o.name, _caption_attrs(o.attributes)) for o in objs), rec.location)
        by_id = {o.oid: o for o in objs}
        queries = []
        for c in cands:
            f = dict(c.fields)
            target = by_id.get(f.get("target", ""))
            anchor = by_id.get(f.get("anchor", ""))
            if ("target" in f and target is None) or ("anchor" in f and anchor is None):
                continue  # its object failed the detector / occlusion check
            qid = f"{rid}-{c.edit_type}" + (f"-{(target or anchor).oid}" if (target or anchor) else "")
            if c.edit_type == "bg_chg":
                f["background"] = choose_background(rec, im, self.scorer, self.seed)
            region = self._edit_region(c.edit_type, f, target, masks, objs)
            save_bitmask(region, self.out_dir / "edit_masks" / f"{qid}.png")
            attr_scene = scene
            if c.edit_type == "attr_chg" and target is not None:
                # the caption must show the attribute being changed, whatever else it shows
                attr_scene = Scene(tuple(
                    CaptionObject(o.oid, o.name, (f["attribute_before"],) if o.oid == target.oid else o.attributes)
                    for o in scene.objects), scene.location)
            spec = EditSpec(c.edit_type, target=target.oid if target else None, new_class=f.get("new_class"),
                            anchor=anchor.oid if anchor else None, relation=f.get("relation"),
                            attribute_before=f.get("attribute_before"), attribute_after=f.get("attribute_after"),
                            size_change=f.get("size_change"), background=f.get("background"), style=f.get("style"))
            src, tgt = self.captioner.captions(attr_scene, spec)
            queries.append(Query(
                id=qid, image=f"images/{rid}.jpg", image_id=rid, edit_type=c.edit_type,
                instruction=instruction(c.edit_type, f, target, anchor), source_caption=src, target_caption=tgt,
                target=refs[target.oid] if target else None, anchor=refs[anchor.oid] if anchor else None,
                new_class=f.get("new_class"), relation=f.get("relation"), attribute_before=f.get("attribute_before"),
                attribute_after=f.get("attribute_after"), size_change=f.get("size_change"),
                background=f.get("background"), style=f.get("style"),
                editable_objects=tuple(refs[o.oid] for o in objs), edit_mask=f"edit_masks/{qid}.png",
            ))
        return queries, dropped

    @staticmethod
    def _edit_region(edit_type: str, f: dict[str, Any], target: Obj | None, masks: dict[str, np.ndarray],
                     objs: Sequence[Obj]) -> np.ndarray:
        """Pixels the edit may change: the object (and where it grows to), the placement box, or the background."""
        if edit_type == "obj_add":
            return _box_mask(f["placement"])
        if edit_type == "style_chg":
            return np.ones((SIZE, SIZE), dtype=bool)
        if edit_type == "bg_chg":
            region = np.ones((SIZE, SIZE), dtype=bool)
            for o in objs:
                region &= ~masks[o.oid]
            return region
        assert target is not None
        region = masks[target.oid].copy()
        if edit_type in ("obj_rep", "obj_resize"):
            x0, y0, x1, y1 = target.box
            k = RESIZE_FACTOR if edit_type == "obj_resize" and f.get("size_change") == "enlarge" else 1.0
            cx, cy, hw, hh = (x0 + x1) / 2, (y0 + y1) / 2, k * (x1 - x0) / 2, k * (y1 - y0) / 2
            region |= _box_mask((cx - hw, cy - hh, cx + hw, cy + hh))
        return region


def _caption_attrs(attrs: Sequence[str]) -> tuple[str, ...]:
    """At most one colour and one other grouped attribute, so captions stay short (HATIE asks for < 60 words)."""
    color = [a for a in attrs if a in COLORS][:1]
    other = [a for a in attrs if a in STATES or a in MATERIALS][:1]
    return tuple(other + color)


def instruction(edit_type: str, f: dict[str, Any], target: Obj | None, anchor: Obj | None) -> str:
    """Instruction templates (App. B.3)."""
    if edit_type == "obj_add":
        new = f["new_class"]
        return f"Add {article(new)} {new} {RELATION_PHRASES[f['relation']]} the {anchor.name}."  # type: ignore[union-attr]
    if edit_type == "bg_chg":
        return f"Change the background to {article(f['background'])} {f['background']}."
    if edit_type == "style_chg":
        return f"Change the image style to {f['style']}."
    assert target is not None
    o = target.name
    if edit_type == "obj_remove":
        return f"Remove the {o}."
    if edit_type == "obj_rep":
        return f"Replace the {o} with {article(f['new_class'])} {f['new_class']}."
    if edit_type == "obj_resize":
        return f"Make the {o} {'bigger' if f['size_change'] == 'enlarge' else 'smaller'}."
    if edit_type == "attr_chg":
        a, b, kind = f["attribute_before"], f["attribute_after"], f.get("attribute_kind")
        if kind in ("color", "material"):
            return f"Change the {kind} of the {o} from {a} to {b}."
        return f"Change the {o} from {a} to {b}."
    raise ValueError(f"no instruction template for {edit_type!r}")


# ------------------------------------------------------------------------------------------------ driver


_WORKER: dict[str, Any] = {}


def _work(item: tuple[ImageRecord, list[Candidate]]) -> tuple[list[Query], Counter]:
    return _WORKER["m"].run(*item)


def build(scene_graphs: str | os.PathLike[str], out_dir: str | os.PathLike[str], *, images_dir: str | os.PathLike[str] | None = None,
          cfg: BuildConfig = BuildConfig(), materializer: Materializer | None = None, name: str = "gqa_hatie",
          progress: bool = True) -> dict[str, Any]:
    """Build the query set into `out_dir` (queryset.json, queries.jsonl, images/, masks/, edit_masks/, summary.md).

    Returns the metadata written to queryset.json (counts, filters, content hash, timings).
    """
    from benchmark.querysets.io import write_built_queryset

    out = Path(out_dir)
    timings: dict[str, float] = {}
    t = time.perf_counter()
    stats, records = scan(scene_graphs, cfg, progress=progress)
    timings["scan_s"] = round(time.perf_counter() - t, 2)
    t = time.perf_counter()
    candidates = [c for rec in records for c in propose(rec, stats, cfg)]
    chosen = balanced_sample(candidates, cfg.queries_per_type, cfg.seed)
    timings["propose_sample_s"] = round(time.perf_counter() - t, 2)
    per_image: dict[str, list[Candidate]] = defaultdict(list)
    for c in chosen:
        per_image[c.image_id].append(c)
    rec_by_id = {r.image_id: r for r in records if r.image_id in per_image}
    n_candidates = len(candidates)
    del candidates, records  # only the chosen images are needed from here on
    m = materializer or Materializer(out_dir=out, images_dir=Path(images_dir) if images_dir else None, seed=cfg.seed)
    m.out_dir = out
    items = [(rec_by_id[i], per_image[i]) for i in sorted(per_image)]
    t = time.perf_counter()
    queries: list[Query] = []
    dropped: Counter = Counter()
    workers = cfg.workers if (m.mask_fn is None and m.vqa_fn is None and m.scorer is None) else 1
    _WORKER["m"] = m
    try:
        if workers > 1:
            import multiprocessing as mp

            with mp.get_context("fork").Pool(workers) as pool:  # fork: children inherit the materializer
                results = pool.imap(_work, items, chunksize=16)
                for i, (qs, d) in enumerate(results, start=1):
                    queries += qs
                    dropped.update(d)
                    if progress and i % 2000 == 0:
                        print(f"[gqa] materialized {i}/{len(items)} images", file=sys.stderr)
        else:
            for i, item in enumerate(items, start=1):
                qs, d = _work(item)
                queries += qs
                dropped.update(d)
                if progress and i % 2000 == 0:
                    print(f"[gqa] materialized {i}/{len(items)} images", file=sys.stderr)
    finally:
        _WORKER.clear()
    timings["materialize_s"] = round(time.perf_counter() - t, 2)
    if not queries:
        raise ValueError(f"{scene_graphs}: no query survived the filters ({dict(stats.filters | dropped)}); lower "
                         "the min_* thresholds for small inputs")
    queries.sort(key=lambda q: q.id)
    captioner = m.captioner
    return write_built_queryset(
        out, queries, name=name,
        description="HATIE-style query set built from GQA scene graphs by editmeter (HATIE paper Sec. 3.1-3.2, "
                    "App. A-B); see README 'Query sets'.",
        license="GQA / Visual Genome: CC BY 4.0 (images and scene graphs); queries generated by editmeter",
        generator={"module": "benchmark.querysets.gqa", "scene_graphs": Path(scene_graphs).name,
                   **{k: (list(v) if isinstance(v, tuple) else v) for k, v in cfg.__dict__.items()}},
        mask_source="segmenter (mask_fn)" if m.mask_fn is not None else "GQA boxes (no segmenter given)",
        detector_check=m.mask_fn is not None,
        occlusion_vqa_filter=m.vqa_fn is not None,
        background_ranking="image_text_scorer" if m.scorer is not None else "word-overlap fallback (no CLIP scorer given)",
        captioner=getattr(captioner, "name", type(captioner).__name__),
        caption_fallbacks=getattr(captioner, "fallbacks", 0),
        counts={"candidates": n_candidates},
        filters=dict(stats.filters + dropped),
        timings=timings)
