"""Thumbnails for the report's image grid: small JPEGs named by the sha256 of the image they show.

A thumbnail's name is its source's content hash, so a rebuild reuses every thumbnail whose image did not change
(the hashes themselves come from the stat-keyed cache of `benchmark.io.filehash`, so an unchanged file is not even
read), and an image that changed gets a new one. Full-size images are linked, never copied.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

THUMB_DIR = "thumbs"
THUMB_SIDE = 128  # longest side in pixels; never upscaled
THUMB_QUALITY = 80
KEY_CHARS = 24  # 96 bits of the sha256: ample to name distinct images


def thumb_rel(sha: str) -> str:
    """Path of the thumbnail of the image with this sha256, relative to the report folder."""
    key = sha[:KEY_CHARS]
    return f"{THUMB_DIR}/{key[:2]}/{key}.jpg"


def make_thumbnail(src: str, dest: str, side: int = THUMB_SIDE) -> str:
    """Write a JPEG thumbnail of `src` to `dest` atomically; returns '' or why it could not be made."""
    from PIL import Image

    tmp = f"{dest}.{os.getpid()}.tmp"
    try:
        with Image.open(src) as im:
            im.draft("RGB", (side, side))  # JPEG sources decode at a reduced scale
            im = im.convert("RGB")
            im.thumbnail((side, side), Image.Resampling.BILINEAR, reducing_gap=2.0)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            im.save(tmp, "JPEG", quality=THUMB_QUALITY, optimize=False)
        os.replace(tmp, dest)
        return ""
    except Exception as err:  # an unreadable image is shown as such in the grid, it does not stop the report
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return f"{type(err).__name__}: {err}"


def _batch(items: list[tuple[str, str]]) -> list[str]:
    return [make_thumbnail(s, d) for s, d in items]


def existing_thumbnails(out: Path) -> set[str]:
    """Relative paths of the thumbnails already under `out` (one directory listing per prefix, not one stat each)."""
    have: set[str] = set()
    root = out / THUMB_DIR
    if root.is_dir():
        for sub in os.scandir(root):
            if sub.is_dir():
                have.update(f"{THUMB_DIR}/{sub.name}/{e.name}" for e in os.scandir(sub.path) if e.name.endswith(".jpg"))
    return have


def ensure_thumbnails(out: Path, wanted: Iterable[tuple[str, str | Path]], workers: int = 0) -> dict[str, object]:
    """Make the thumbnails of `(sha256, image path)` pairs under `out` that do not exist yet.

    Returns counts (`made`, `reused`) and `failed`: sha -> reason for images that could not be read."""
    todo: dict[str, tuple[str, str]] = {}
    reused = 0
    seen: set[str] = set()
    have = existing_thumbnails(out)
    base = str(out)
    for sha, path in wanted:
        if sha in seen:
            continue
        seen.add(sha)
        rel = thumb_rel(sha)
        if rel in have:
            reused += 1
        else:
            todo[sha] = (str(path), os.path.join(base, rel))
    failed: dict[str, str] = {}
    items = list(todo.items())
    workers = workers or min(8, os.cpu_count() or 1)
    if workers > 1 and len(items) > 200:
        size = 256
        chunks = [items[i:i + size] for i in range(0, len(items), size)]
        import multiprocessing

        # spawn: the parent may hold torch's threads (score readers import it); the children need only PIL
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            for chunk, errors in zip(chunks, pool.map(_batch, [[v for _, v in c] for c in chunks]), strict=True):
                failed.update({sha: e for (sha, _), e in zip(chunk, errors, strict=True) if e})
    else:
        for sha, (src, dest) in items:
            err = make_thumbnail(src, dest)
            if err:
                failed[sha] = err
    return {"made": len(items) - len(failed), "reused": reused, "failed": failed}
