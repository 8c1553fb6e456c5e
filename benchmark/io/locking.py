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


class Claims:
    """Per-query work claims in one folder, so concurrent workers on one run folder never do the same work twice.

    A claim is `<folder>/<query id>.claim` with an exclusive `flock` held by the claiming process while it works on
    the query. The kernel drops the lock when the process dies, `kill -9` included, so a dead worker's claims are
    free at once: a stale file without a lock claims nothing. The holder removes the file while still holding the
    lock; a claimer that locked a file removed meanwhile sees its inode gone and claims the new file instead.
    Thread-safe: the edit stage claims on its reader thread and releases on its writer thread.
    """

    def __init__(self, folder: Path) -> None:
        import threading

        self.folder = folder
        self._held: dict[str, int] = {}
        self._lock = threading.Lock()

    def try_claim(self, ids: list[str]) -> bool:
        """Claim every id of `ids` or none (non-blocking): False when another worker holds one of them."""
        got: list[str] = []
        for qid in ids:
            fd = self._acquire(qid, block=False)
            if fd is None:
                self.release(got)
                return False
            with self._lock:
                self._held[qid] = fd
            got.append(qid)
        return True

    def wait(self, ids: list[str]) -> None:
        """Block until no other worker holds any of `ids` (each is claimed, then released at once)."""
        for qid in ids:
            fd = self._acquire(qid, block=True)
            if fd is not None:
                self._drop(qid, fd)

    def release(self, ids: list[str]) -> None:
        """Give up this worker's claims on `ids` (ids it does not hold are ignored)."""
        for qid in ids:
            with self._lock:
                fd = self._held.pop(qid, None)
            if fd is not None:
                self._drop(qid, fd)

    def release_all(self) -> None:
        with self._lock:
            held = list(self._held)
        self.release(held)

    def remove_stale(self) -> list[str]:
        """Remove the claim files no process holds (left by a killed worker: harmless, a stale file claims nothing,
        but a person looking for a stuck run should not find them). Each is locked without blocking and removed
        while locked, as a holder removes its own; a file a live worker holds is left alone. Returns their ids."""
        import fcntl

        removed = []
        try:
            names = sorted(p.name for p in self.folder.glob("*.claim"))
        except OSError:
            return removed
        for name in names:
            qid = name.removesuffix(".claim")
            with self._lock:
                if qid in self._held:
                    continue
            try:
                fd = os.open(self.folder / name, os.O_RDWR)
            except OSError:  # gone meanwhile, or not a file this process may lock
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            try:
                if os.stat(self.folder / name).st_ino == os.fstat(fd).st_ino:
                    os.unlink(self.folder / name)
                    removed.append(qid)
            except FileNotFoundError:
                pass
            finally:
                os.close(fd)
        return removed

    def _path(self, qid: str) -> Path:
        return self.folder / f"{qid}.claim"

    def _acquire(self, qid: str, *, block: bool) -> int | None:
        import fcntl
        import socket

        path = self._path(qid)
        self.folder.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if block else fcntl.LOCK_NB))
            except BlockingIOError:
                os.close(fd)
                return None
            try:
                current = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                current = False
            if current:
                os.ftruncate(fd, 0)  # the holder, for a person looking at a stuck run: host and pid
                os.write(fd, f"{socket.gethostname()} {os.getpid()}\n".encode())
                return fd
            os.close(fd)  # its holder released and removed it after we opened it: claim the new file

    def _drop(self, qid: str, fd: int) -> None:
        try:
            os.unlink(self._path(qid))  # while the lock is held, so no claimer can hold this inode meanwhile
        except FileNotFoundError:
            pass
        os.close(fd)
