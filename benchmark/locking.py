"""Advisory file locks for read-modify-write of files that several shards of one run share (run.json, edits.jsonl).

Shards of a run write into one run folder, on one machine (joblib) or on several over a shared file system (Slurm).
Files each shard writes alone need no lock (edits, score parts: unique names, atomic renames); a file that several
update needs its read and its write to happen under one lock, or one shard's update is lost. `fcntl.flock` is
honoured between processes of a host and, on Linux NFS clients, between hosts (the kernel maps it to NFS locks).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def lock_path(path: Path) -> Path:
    """The lock file that guards `path` (a hidden sibling; it is never removed, so every holder locks one inode)."""
    return path.with_name(f".{path.name}.lock")


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `path`'s lock file for the block (blocks until it is free)."""
    import fcntl

    lock = lock_path(path)
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock
