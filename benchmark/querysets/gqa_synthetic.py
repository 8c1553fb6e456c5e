"""Synthetic scene graphs in GQA's JSON format, for tests and the builder benchmark (no GQA download needed).

The shape follows GQA's released `*_sceneGraphs.json`: `{image_id: {"width", "height", "location"?, "objects":
{object_id: {"name", "x", "y", "w", "h", "attributes": [...], "relations": [{"name", "object"}]}}}}` with boxes as
top-left corner plus size. Object names mix COCO-mappable names ("man", "dog", "cup") with GQA's many non-COCO
names ("shirt", "window", "sky"), and relation lists are long, so one image is about as large as a real one
(~16 KB of JSON). The file is written one image at a time.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

COCO_NAMES = ("man", "woman", "person", "dog", "cat", "car", "bus", "cup", "chair", "laptop", "pizza", "clock",
              "bench", "bicycle", "horse", "umbrella", "bottle", "vase", "book", "bowl", "kite", "sheep", "boat",
              "train", "couch", "tv", "toilet", "sink", "banana", "cake", "surfboard", "skateboard", "giraffe")
OTHER_NAMES = ("shirt", "window", "sky", "tree", "building", "grass", "wall", "table", "leg", "hand", "head",
               "hair", "pole", "sign", "road", "floor", "cloud", "water", "ground", "plate", "door", "line",
               "leaf", "fence", "shadow", "jacket", "ear", "eye", "wheel", "light")
ATTRIBUTES = ("white", "black", "blue", "green", "red", "brown", "yellow", "gray", "orange", "wooden", "metal",
              "plastic", "glass", "standing", "sitting", "walking", "running", "wet", "dry", "open", "closed",
              "empty", "full", "clean", "dirty", "large", "small", "tall", "short", "young", "bright", "dark")
RELATIONS = ("to the left of", "to the right of", "on", "near", "in front of", "behind", "above", "under",
             "next to", "wearing", "holding", "on top of", "in", "beside", "sitting on", "of", "with")
LOCATIONS = ("street", "beach", "kitchen", "living room", "park", "field", "city", "restaurant", None, None)
SIZES = ((640, 480), (500, 375), (480, 640), (800, 600), (500, 333), (375, 500), (1024, 768))


def synth_graph(rng: random.Random, n_objects: int, next_id: int) -> dict[str, Any]:
    """One random scene graph; object ids continue from `next_id` (ids are unique across a file, as in GQA)."""
    w, h = rng.choice(SIZES)
    objects: dict[str, Any] = {}
    ids = [str(next_id + i) for i in range(n_objects)]
    boxes = {}
    for oid in ids:
        coco = rng.random() < 0.3
        name = rng.choice(COCO_NAMES if coco else OTHER_NAMES)
        bw = rng.randint(max(8, w // 20), max(9, w // 2))
        bh = rng.randint(max(8, h // 20), max(9, h // 2))
        x = rng.randint(0, w - bw)
        y = rng.randint(0, h - bh)
        boxes[oid] = (x, y, bw, bh)
        attrs = rng.sample(ATTRIBUTES, rng.randint(0, 3))
        objects[oid] = {"name": name, "x": x, "y": y, "w": bw, "h": bh, "attributes": attrs, "relations": []}
    for oid in ids:
        others = [o for o in ids if o != oid]
        for other in rng.sample(others, min(len(others), rng.randint(8, 24))):
            (x, _, bw, _), (ox, _, obw, _) = boxes[oid], boxes[other]
            dx = (x + bw / 2) - (ox + obw / 2)
            if rng.random() < 0.5:
                rel = "to the left of" if dx < 0 else "to the right of"
            else:
                rel = rng.choice(RELATIONS)
            objects[oid]["relations"].append({"object": other, "name": rel})
    graph: dict[str, Any] = {"width": w, "height": h, "objects": objects}
    loc = rng.choice(LOCATIONS)
    if loc:
        graph["location"] = loc
    return graph


def iter_graphs(n_images: int, seed: int = 0, objects: tuple[int, int] = (12, 24)) -> Iterator[tuple[str, dict[str, Any]]]:
    rng = random.Random(seed)
    next_id = 1000000
    for i in range(n_images):
        n = rng.randint(*objects)
        yield str(2300000 + i), synth_graph(rng, n, next_id)
        next_id += n


def write_scene_graphs(path: str | Path, n_images: int, seed: int = 0, objects: tuple[int, int] = (12, 24)) -> Path:
    """Write `n_images` synthetic scene graphs to `path` as one JSON object, streaming (constant memory)."""
    path = Path(path)
    with path.open("w", encoding="utf-8") as fh:
        fh.write("{")
        for i, (image_id, graph) in enumerate(iter_graphs(n_images, seed, objects)):
            fh.write(("," if i else "") + json.dumps(image_id) + ": " + json.dumps(graph, separators=(", ", ": ")))
        fh.write("}")
    return path
