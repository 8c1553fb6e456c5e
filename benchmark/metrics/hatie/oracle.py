"""The `oracle` segmenter: exact segmentations of exact renders of the bundled demo world (tests, `make
bench-hatie`).

It is a test double for Mask R-CNN, not a segmenter. It recognises an image only when its pixels equal the
segmenter input (`segmenter_input`, the 512 px resize) of a demo source image or of the ground-truth target of a
demo query (the exact render of its intended edit). It then answers from that image's scene graph: per class,
score 1.0 and the visible mask of the largest object of that class, upsampled to 512 px as the ground-truth masks
are. So the workflows reach their `detected` branches (crops, structure tests, pyramids) as they do for a good
editor and a good segmenter, which random-weight Mask R-CNN never gives. Any other image raises: a segmentation is
never invented.

With a `fallback` segmenter (the demo's `metrics=hatie_oracle`), the images it does not know go to that segmenter
instead of raising; the fallback's signature is part of the oracle's (`oracle-demo-render|else:<fallback>`), so
scores made with and without one never share a metric signature, and the first fallback of a process is printed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.models.segmenter import Segmentation, bbox_from_mask

ORACLE_SIGNATURE = "oracle-demo-render"
_ANNOUNCED: set[str] = set()  # signatures whose first fallback this process has printed (one line, not one per batch)


def graph_segmentation(graph: dict[str, Any], size: int) -> Segmentation:
    """class -> Detection (score 1.0) of the largest visible object of each class in `graph`, masks at `size` px
    (nearest-neighbour upsampling, as the suite resizes the ground-truth masks)."""
    import torch
    import torch.nn.functional as F

    from benchmark.models.segmenter import Detection
    from benchmark.querysets.demo import largest_visible

    out: Segmentation = {}
    for name, (_, mask) in largest_visible(graph).items():
        m = F.interpolate(torch.from_numpy(mask).float()[None, None], size=(size, size), mode="nearest")[0, 0]
        big = m.numpy().astype(bool)
        out[name] = Detection(name, 1.0, bbox_from_mask(big), big)
    return out


class OracleSegmenter:
    """Segmentations read from the scene graph whose exact render an image is (see the module docstring).

    Args:
        root: the demo query set folder (queryset.json, queries.jsonl, scene_graphs.json).
        fallback: segmenter for images that are not exact renders (None: those raise), with its `signature`.
    """

    def __init__(self, root: str | Path, fallback: Any | None = None) -> None:
        self.root = Path(root)
        self.fallback = fallback
        self.signature = ORACLE_SIGNATURE if fallback is None else f"{ORACLE_SIGNATURE}|else:{fallback.signature}"
        self.counts = {"oracle": 0, "fallback": 0}  # images answered each way (tests, the fallback notice)
        self._index: dict[str, tuple[str, Any]] | None = None
        self._graphs: dict[str, Any] = {}

    def _build(self) -> dict[str, tuple[str, Any]]:
        from benchmark.metrics.hatie.suite import segmenter_input
        from benchmark.querysets.demo import render_index

        self._graphs, index = render_index(self.root, segmenter_input, who="oracle segmenter",
                                           instead="use a real segmenter, metrics.hatie.segmenter.backend=auto, elsewhere")
        return index

    def _known(self, img: np.ndarray) -> Segmentation | None:
        """The exact segmentation of `img` when it is a render this oracle knows, else None."""
        from benchmark.querysets import demo

        if self._index is None:
            self._index = self._build()
        hit = self._index.get(demo.pixels_key(np.asarray(img)))
        if hit is None:
            return None
        image_id, q = hit
        graph = self._graphs[image_id]
        return graph_segmentation(graph if q is None else demo.apply_edit(graph, q)[0], img.shape[0])

    def segment(self, images: Sequence[np.ndarray]) -> list[Segmentation]:
        """uint8 (H, W, 3) segmenter inputs -> one selection per image (every visible class, best instance); images
        that are not exact renders go to the fallback in one batch, or raise when there is none."""
        out: list[Segmentation | None] = [self._known(img) for img in images]
        unknown = [i for i, seg in enumerate(out) if seg is None]
        if unknown and self.fallback is None:
            raise ValueError(f"oracle segmenter: image {unknown[0]} of the batch is not an exact render of a demo "
                             f"source or ground-truth target under {self.root}; the oracle reads only those (use a "
                             "real segmenter for other edits, or give the oracle a fallback segmenter)")
        if unknown:
            self._announce()
            for i, seg in zip(unknown, self.fallback.segment([images[i] for i in unknown]), strict=True):
                out[i] = seg
        self.counts["oracle"] += len(images) - len(unknown)
        self.counts["fallback"] += len(unknown)
        return [seg for seg in out if seg is not None]

    def _announce(self) -> None:
        """Say once per process that some images were not exact renders and who segmented them instead."""
        if self.signature in _ANNOUNCED:
            return
        _ANNOUNCED.add(self.signature)
        print(f"[editmeter] oracle segmenter: edits that are not exact renders of the demo world are segmented by "
              f"the fallback {self.fallback.signature} (named in the metric signature: {self.signature})", flush=True)


def fallback_signature(factory: Callable[..., Any]) -> str | None:
    """The signature a `build_segmenter` partial will build, resolved without loading weights; None otherwise."""
    from benchmark.models.segmenter import build_segmenter, resolve_segmenter

    if getattr(factory, "func", None) is not build_segmenter:
        return None
    kw = {k: v for k, v in factory.keywords.items() if k in ("backend", "weights", "threshold")}  # type: ignore[attr-defined]
    return resolve_segmenter(*factory.args, **kw).signature  # type: ignore[attr-defined]


class _LazySegmenter:
    """A segmenter built on first use: a run whose edits are all exact renders never loads the fallback model."""

    def __init__(self, factory: Callable[..., Any], signature: str, device: str) -> None:
        self._factory, self.signature, self._device = factory, signature, device
        self._model: Any = None

    def segment(self, images: Sequence[np.ndarray]) -> list[Segmentation]:
        if self._model is None:
            self._model = self._factory(device=self._device)
            if self._model.signature != self.signature:  # the run was keyed by the resolved identity
                raise RuntimeError(f"the fallback segmenter loaded as {self._model.signature!r}, not the resolved "
                                   f"{self.signature!r}; scores would be filed under the wrong signature")
        return self._model.segment(images)


def load_oracle_segmenter(root: str, device: str = "cpu", fallback: Callable[..., Any] | None = None) -> OracleSegmenter:
    """Factory with the signature of the other segmenters (`device` goes to the fallback; the oracle has no model).
    `fallback`: a segmenter factory (e.g. a `build_segmenter` partial) for images that are not exact renders."""
    if fallback is None:
        return OracleSegmenter(root)
    sig = fallback_signature(fallback)
    model = _LazySegmenter(fallback, sig, device) if sig is not None else fallback(device=device)
    return OracleSegmenter(root, fallback=model)
