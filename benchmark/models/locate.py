"""How BPM finds objects: a locator has `detect(images, names)` (best box per image for its name, or None) and
`segment(images, boxes)` (a mask per box), and a `signature`. The real one is an open-vocabulary detector plus a
box-prompted mask model (`benchmark.models.grounding`); `OracleLocator` returns known masks (tests, and sets that
ship masks of their edits)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

# a box [x0, y0, x1, y1] in pixels (image y grows downwards); BPM's rules speak it too
Box = tuple[float, float, float, float]


class Locator(Protocol):
    signature: str

    def detect(self, images: Sequence[np.ndarray], names: Sequence[str]) -> list[tuple[Box, float] | None]: ...

    def segment(self, images: Sequence[np.ndarray], boxes: Sequence[Box]) -> list[np.ndarray]: ...


def box_of(mask: np.ndarray) -> Box | None:
    """[x0, y0, x1, y1] (x1 / y1 exclusive) of a bool mask's pixels, None when it is empty."""
    ys, xs = np.nonzero(mask)
    if not len(xs):
        return None
    return float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1)


def image_key(image: np.ndarray) -> str:
    a = np.ascontiguousarray(image)
    return hashlib.sha1(a.tobytes() + str(a.shape).encode()).hexdigest()


class OracleLocator:
    """Returns registered ground-truth masks: `register(image, name, mask)`; an unregistered (image, name) is not
    found. A test double for the metric logic, never a stand-in for the real models."""

    signature = "oracle"

    def __init__(self) -> None:
        self.masks: dict[tuple[str, str], np.ndarray] = {}
        self.calls = 0

    def register(self, image: np.ndarray, name: str, mask: Any) -> None:
        self.masks[(image_key(image), name)] = np.asarray(mask, dtype=bool)

    def detect(self, images: Sequence[np.ndarray], names: Sequence[str]) -> list[tuple[Box, float] | None]:
        self.calls += 1
        out: list[tuple[Box, float] | None] = []
        for img, name in zip(images, names, strict=True):
            m = self.masks.get((image_key(img), name))
            box = box_of(m) if m is not None else None
            out.append((box, 1.0) if box is not None else None)
        return out

    def segment(self, images: Sequence[np.ndarray], boxes: Sequence[Box]) -> list[np.ndarray]:
        out = []
        for img, box in zip(images, boxes, strict=True):
            key = image_key(img)
            hit = next((m for (k, _), m in self.masks.items() if k == key and box_of(m) == tuple(box)), None)
            out.append(hit if hit is not None else box_mask(box, img.shape[:2]))
        return out


def box_mask(box: Box, shape: tuple[int, int]) -> np.ndarray:
    """The filled box as a mask (what a locator without a mask model returns)."""
    m = np.zeros(shape, dtype=bool)
    x0, y0, x1, y1 = (round(v) for v in box)
    m[max(0, y0):max(0, y1), max(0, x0):max(0, x1)] = True
    return m
