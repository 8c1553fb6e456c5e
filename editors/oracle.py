"""`oracle`: renders the intended edit exactly. Demo query set only (it re-renders the demo world's scene graphs)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

from PIL import Image

from benchmark.editing.editor import Editor
from benchmark.io.hashing import file_sha256
from benchmark.io.types import Query


class OracleEditor(Editor):
    """Applies each query to the demo scene graph and renders the result.

    Args:
        scene_graphs: path of the demo set's `scene_graphs.json`.
    """

    prompt_kind: ClassVar[Literal["instruction", "description"]] = "instruction"

    def __init__(self, scene_graphs: str) -> None:
        from benchmark.querysets import demo

        self._demo = demo
        self.path = Path(scene_graphs)
        if not self.path.is_file():
            raise FileNotFoundError(f"oracle editor: scene graphs {self.path} not found (the oracle works on queryset=demo only)")
        self.graphs = demo.load_scene_graphs(self.path)
        self._sha = file_sha256(str(self.path))

    def edit(self, queries: Sequence[Query], images: Sequence[Image.Image], *, seeds: Sequence[int]) -> list[Image.Image]:
        out = []
        for q in queries:
            graph = self.graphs.get(q.image_id)
            if graph is None:
                raise KeyError(f"oracle editor: image {q.image_id!r} of query {q.id} is not in {self.path}; use queryset=demo")
            edited, style = self._demo.apply_edit(graph, q)
            out.append(Image.fromarray(self._demo.render(edited, style)))
        return out

    def info(self) -> dict[str, Any]:
        return {"name": "oracle", "weights": None, "scene_graphs_sha256": self._sha}
