"""The `oracle` segmenter: exact segmentations of exact renders of the bundled demo world (tests, `make
bench-hatie`).

It is a test double for Mask R-CNN, not a segmenter. It recognises an image only when its pixels equal the
segmenter input (`segmenter_input`, the 512 px resize) of a demo source image or of the ground-truth target of a
demo query (the exact render of its intended edit). It then answers from that image's scene graph: per class,
score 1.0 and the visible mask of the largest object of that class, upsampled to 512 px as the ground-truth masks
are. So the workflows reach their `detected` branches (crops, structure tests, pyramids) as they do for a good
editor and a good segmenter, which random-weight Mask R-CNN never gives. Any other image raises: a segmentation is
never invented.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.models.segmenter import Segmentation, bbox_from_mask

ORACLE_SIGNATURE = "oracle-demo-render"


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
    """

    signature = ORACLE_SIGNATURE

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self._index: dict[str, tuple[str, Any]] | None = None
        self._graphs: dict[str, Any] = {}

    def _build(self) -> dict[str, tuple[str, Any]]:
        from benchmark.metrics.hatie.suite import segmenter_input
        from benchmark.querysets.demo import render_index

        self._graphs, index = render_index(self.root, segmenter_input, who="oracle segmenter",
                                           instead="use a real segmenter, metrics.hatie.segmenter.backend=auto, elsewhere")
        return index

    def segment(self, images: Sequence[np.ndarray]) -> list[Segmentation]:
        """uint8 (H, W, 3) segmenter inputs -> one selection per image (every visible class, best instance)."""
        from benchmark.querysets import demo

        if self._index is None:
            self._index = self._build()
        out = []
        for i, img in enumerate(images):
            hit = self._index.get(demo.pixels_key(np.asarray(img)))
            if hit is None:
                raise ValueError(f"oracle segmenter: image {i} of the batch is not an exact render of a demo source "
                                 f"or ground-truth target under {self.root}; the oracle reads only those (use a "
                                 "real segmenter for other edits)")
            image_id, q = hit
            graph = self._graphs[image_id]
            out.append(graph_segmentation(graph if q is None else demo.apply_edit(graph, q)[0], img.shape[0]))
        return out


def load_oracle_segmenter(root: str, device: str = "cpu") -> OracleSegmenter:
    """Factory with the signature of the other segmenters (`device` is unused: no model)."""
    return OracleSegmenter(root)
