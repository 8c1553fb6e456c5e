"""Stable content hashes for configs and records."""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def stable_hash(obj: Any, length: int = 12) -> str:
    """sha256 of the canonical JSON of `obj`, truncated to `length` hex digits."""
    return hashlib.sha256(canonical_json(obj).encode("utf-8")).hexdigest()[:length]


def file_sha256(path: str | os.PathLike[str]) -> str:
    """sha256 of a file's bytes, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
