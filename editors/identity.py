"""`identity`: returns the source image unchanged, the "excessively preserved" anchor of every benchmark."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from PIL import Image

from benchmark.editing.editor import Editor
from benchmark.io.types import Query


class IdentityEditor(Editor):
    """Returns a copy of each source image. No arguments, no weights, no randomness."""

    prompt_kind: ClassVar[Literal["instruction", "description"]] = "instruction"

    def edit(self, queries: Sequence[Query], images: Sequence[Image.Image], *, seeds: Sequence[int]) -> list[Image.Image]:
        return [im.convert("RGB").copy() for im in images]

    def info(self) -> dict[str, Any]:
        return {"name": "identity", "weights": None}
