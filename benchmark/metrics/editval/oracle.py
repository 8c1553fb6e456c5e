"""The `oracle` detector: exact boxes for exact renders of the bundled demo world (tests and `make demo`).

It is a test double for OWL-ViT, not a detector: it recognises an image only when its pixels equal a demo source
image or the ground-truth target of one of the demo set's queries (the exact render of its intended edit, which is
what the `oracle` editor produces). It then answers from that graph: for each name, score 1.0 and the box of the
largest visible object of that name, or score 0.0 and no box. Any other image (a diffusion edit, a perturbed
render) is unreadable: `detect` returns None for it and the suite records the query as failed with the reason,
rather than inventing boxes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

Detection = tuple[float, "tuple[float, float, float, float] | None"]


def graph_boxes(graph: dict[str, Any]) -> dict[str, Detection]:
    """name -> (1.0, corner box (x, y, x + w, y + h)) of the largest visible object of each name in `graph`."""
    from benchmark.querysets.demo import largest_visible

    out: dict[str, Detection] = {}
    for name, (oid, _) in largest_visible(graph).items():
        o = graph["objects"][oid]
        out[name] = (1.0, (float(o["x"]), float(o["y"]), float(o["x"] + o["w"]), float(o["y"] + o["h"])))
    return out


class OracleDetector:
    """Boxes from the scene graph whose exact render an image is (see the module docstring).

    Args:
        root: the demo query set folder (queryset.json, queries.jsonl, scene_graphs.json).
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self._index: dict[str, tuple[str, Any]] | None = None
        self._graphs: dict[str, Any] = {}
        self._boxes_cache: dict[str, dict[str, Detection]] = {}

    @property
    def signature(self) -> str:
        return "oracle-demo-render"

    def _build(self) -> dict[str, tuple[str, Any]]:
        """pixel key -> (image id, query or None for the source) of every source image and ground-truth target
        of the set. The bundled targets are the renders of the queries' exact edits (the demo generator's tests
        check them against fresh renders); decoding them is much cheaper than rendering every graph."""
        from benchmark.querysets.demo import render_index

        self._graphs, index = render_index(self.root, np.asarray, who="oracle detector",
                                           instead="use the OWL-ViT detector (metrics=editval) for other query sets")
        return index

    def _boxes(self, key: str) -> dict[str, Detection] | None:
        from benchmark.querysets import demo

        hit = self._index.get(key) if self._index is not None else None
        if hit is None:
            return None
        if key not in self._boxes_cache:
            image_id, q = hit
            graph = self._graphs[image_id]
            self._boxes_cache[key] = graph_boxes(graph if q is None else demo.apply_edit(graph, q)[0])
        return self._boxes_cache[key]

    def detect(self, images: list[Any], names: list[list[str]]) -> list[dict[str, Detection] | None]:
        """Per image: name -> (score, box) for the asked names, or None when the image is not an exact render."""
        from benchmark.querysets.demo import pixels_key

        if self._index is None:
            self._index = self._build()
        out: list[dict[str, Detection] | None] = []
        for img, asked in zip(images, names, strict=True):
            found = self._boxes(pixels_key(np.asarray(img.convert("RGB"))))
            out.append(None if found is None else {n: found.get(n, (0.0, None)) for n in asked})
        return out


def load_oracle_detector(root: str, device: str = "cpu") -> OracleDetector:
    """Factory with the signature of the other detectors (`device` is unused: no model)."""
    return OracleDetector(root)
