"""`external`: edits made elsewhere, read from a folder by query id, so any model can be benchmarked.

File names: `<query id>.<ext>`, or HATIE's `<prefix>_<query id>.<ext>` (shared/spec/hatie.md section 8).
A query without a file fails with a message naming the folder; `python -m benchmark.score_edits` reports every
missing id before scoring.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from PIL import Image

from benchmark.editor import Editor
from benchmark.types import Query

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".webp", ".bmp")


class AmbiguousEditError(ValueError):
    """Several files in the folder match one query id."""


class ExternalEdits(Editor):
    """Returns the image of each query from `folder` instead of generating one.

    Args:
        folder: the edited images, named by query id (see the module docstring).
        prompt_kind: the family of the model that made them (instruction or description).
        label: a name for the leaderboard.
    """

    def __init__(self, folder: str, prompt_kind: str = "instruction", label: str = "external") -> None:
        if prompt_kind not in ("instruction", "description"):
            raise ValueError(f"prompt_kind must be instruction or description, not {prompt_kind!r}")
        self.folder = Path(folder)
        if not self.folder.is_dir():
            raise FileNotFoundError(f"edits folder {self.folder} does not exist (EDITS=<folder of edited images>)")
        self.prompt_kind = prompt_kind  # type: ignore[misc]  # per instance: the folder's model family
        self.label = label
        self._exact: dict[str, Path] = {}
        self._suffix: dict[str, list[Path]] = {}
        listing = []
        for p in sorted(self.folder.iterdir()):
            if p.suffix.lower() not in IMAGE_EXTENSIONS or not p.is_file():
                continue
            listing.append((p.name, p.stat().st_size))
            self._exact.setdefault(p.stem, p)
            parts = p.stem.split("_")
            for k in range(1, len(parts)):  # every `<prefix>_` split: HATIE's naming
                self._suffix.setdefault("_".join(parts[k:]), []).append(p)
        self._listing_hash = hashlib.sha256(repr(listing).encode()).hexdigest()[:16]

    def find(self, query_id: str) -> Path | None:
        """The file of one query: an exact stem match wins, else a unique `<prefix>_<id>` match."""
        if query_id in self._exact:
            return self._exact[query_id]
        hits = self._suffix.get(query_id, [])
        if len(hits) > 1:
            raise AmbiguousEditError(f"query {query_id}: several files match in {self.folder}: "
                                     f"{', '.join(p.name for p in hits[:5])}")
        return hits[0] if hits else None

    def missing(self, query_ids: Sequence[str]) -> list[str]:
        """The ids among `query_ids` that have no file in the folder."""
        return [q for q in query_ids if self.find(q) is None]

    def edit(self, queries: Sequence[Query], images: Sequence[Image.Image], *, seeds: Sequence[int]) -> list[Image.Image]:
        out = []
        for q in queries:
            path = self.find(q.id)
            if path is None:
                raise FileNotFoundError(f"no edited image for query {q.id} in {self.folder}")
            with Image.open(path) as im:
                out.append(im.convert("RGB"))
        return out

    def info(self) -> dict[str, Any]:
        # the listing (names and sizes) stands for the content: hashing every image would read the whole folder
        return {"name": "external", "label": self.label, "folder": str(self.folder), "listing": self._listing_hash,
                "prompt_kind": self.prompt_kind}
