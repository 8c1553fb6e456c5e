"""The key of a multi-turn edit: the sha256 of the pixels of the image the editor received, kept in the edit's PNG.

Under protocol=multi_turn the input of turn t is the editor's own edit of turn t-1, so an edit is valid only for the
input it was made from. Its PNG carries that key in a text chunk (`KEY_CHUNK`) and its edit record in
`input_sha256`. The PNG is the edit stage's commit point, so the key is on disk exactly when the edit is, even when
a kill lost the record. The editor signature and the seed need no place in the key: they name the run folder.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from benchmark.io.types import EditRecord

KEY_CHUNK = "editmeter:input_sha256"


@dataclass(frozen=True)
class TurnEditRecord(EditRecord):
    """The edit record of a multi-turn edit: an `EditRecord` with the sha256 of the pixels the editor received and
    the query whose edit that input was (None for a session's turn 1). Kept here, not in `benchmark.io.types`, whose
    source editors' signatures hash."""

    input_sha256: str | None = None
    input_from: str | None = None


def pixel_sha256(image: Image.Image) -> str:
    """sha256 of an RGB image's size and pixel bytes: what the editor sees, whatever file format held it."""
    rgb = image if image.mode == "RGB" else image.convert("RGB")
    h = hashlib.sha256(f"RGB {rgb.size[0]}x{rgb.size[1]}\n".encode())
    h.update(rgb.tobytes())
    return h.hexdigest()


def save_keyed_png(image: Image.Image, path: Path, compress_level: int, input_sha256: str) -> None:
    """Save atomically as PNG with the input's key in a text chunk (deterministic bytes for the same pixels, level
    and key)."""
    from PIL.PngImagePlugin import PngInfo

    from benchmark.io.fileio import atomic_path

    info = PngInfo()
    info.add_text(KEY_CHUNK, input_sha256)
    with atomic_path(path) as tmp:
        image.save(tmp, format="PNG", compress_level=compress_level, pnginfo=info)


def png_input_sha256(path: Path) -> str | None:
    """The input key a multi-turn edit's PNG carries, or None (no key, or not a readable PNG: either way the edit
    cannot be shown to belong to its input). Reads the chunks before the pixel data only."""
    try:
        with Image.open(path) as im:
            key = im.text.get(KEY_CHUNK) if hasattr(im, "text") else None
    except (OSError, SyntaxError, ValueError):
        return None
    return key if isinstance(key, str) and len(key) == 64 else None
