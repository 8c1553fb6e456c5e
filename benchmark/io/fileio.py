"""Atomic file writes and tolerant JSONL appends: `kill -9` at any moment never leaves a file a rerun trusts."""

from __future__ import annotations

import json
import os
import re
import socket
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path in the same folder; rename it over `path` only if the block succeeds."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # the owner (host, pid) in the name lets a later run tell a killed writer's leftover from a live one's
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{_owner()}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write(path: Path, write: Callable[[IO[bytes]], Any]) -> None:
    """Write through `write(fh)` into a temp file, fsync, then rename over `path`."""
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda fh: fh.write(text.encode("utf-8")))


def append_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    """Append records, one line each, in a single write (lines stay whole under O_APPEND)."""
    if not records:
        return
    from benchmark.io.locking import locked

    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(json.dumps(r, sort_keys=True) + "\n" for r in records).encode("utf-8")
    # shards of a run append to one log: without the lock, one shard's torn-tail check could truncate another's
    # write in progress
    with locked(path):
        drop_torn_tail(path)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)


def drop_torn_tail(path: Path) -> None:
    """Truncate a final line without its newline: the writer was killed mid-write, so it is not a record."""
    if not path.is_file() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as fh:
        fh.seek(-1, os.SEEK_END)
        if fh.read(1) == b"\n":
            return
        data = fh.seek(0) or fh.read()
        fh.truncate(data.rfind(b"\n") + 1)


def read_jsonl_tolerant(path: Path) -> list[dict[str, Any]]:
    """Read a JSONL log; a torn *last* line (from a killed writer) is ignored, a bad line elsewhere raises."""
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    out = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                break
            raise ValueError(f"{path}:{i + 1}: corrupt log line (not the last one, so not an interrupted write)") from None
    return out


# `atomic_path`'s temporary names: "." + final name + "." + host-pid + "." + mkstemp's 8 random characters + ".tmp"
# (files from before the owner was recorded have no host-pid part)
TMP_NAME = re.compile(r"\..+\.[a-z0-9_]{8}\.tmp")
_TMP_OWNER = re.compile(r"\..+\.(?P<host>[A-Za-z0-9-]+)-(?P<pid>[0-9]+)\.[a-z0-9_]{8}\.tmp")
TMP_GRACE_S = 60.0  # a temp file this much older than the run start is certainly not a concurrent writer's


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname()) or "host"


def _owner() -> str:
    return f"{_host()}-{os.getpid()}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def _is_stale(name: str, mtime: float, started: float, grace_s: float) -> bool:
    if mtime >= started:  # written since this run began: possibly its own
        return False
    if mtime < started - grace_s:
        return True
    m = _TMP_OWNER.fullmatch(name)
    if m is None or m["host"] != _host():  # another machine's writer (shared folder): only the grace rule applies
        return False
    pid = int(m["pid"])
    return pid == os.getpid() or not _pid_alive(pid)  # ours from before this run, or its writer is gone


def remove_stale_tmp(folder: Path, started: float, grace_s: float = TMP_GRACE_S, recursive: bool = True) -> list[Path]:
    """Delete `atomic_path` leftovers (a writer killed before its rename) under `folder`: only names matching
    `TMP_NAME`, modified before `started`, and either written by a process of this host that no longer runs or
    older than `started - grace_s` (so a shard writing concurrently, here or on another host, keeps its own)."""
    removed = []
    for root, dirs, files in os.walk(folder):
        if not recursive:
            dirs.clear()
        for name in files:
            if not TMP_NAME.fullmatch(name):
                continue
            p = Path(root) / name
            try:
                if p.is_file() and not p.is_symlink() and _is_stale(name, p.stat().st_mtime, started, grace_s):
                    p.unlink()
                    removed.append(p)
            except FileNotFoundError:
                continue
    return sorted(removed)


def not_a_regular_file(path: Path) -> str | None:
    """None when `path` is a regular file (not a symlink to one), else why it is not a usable cache file ('a
    directory', 'a FIFO', ...). Raises FileNotFoundError when nothing is there."""
    import os
    import stat

    mode = os.lstat(path).st_mode
    if stat.S_ISREG(mode):
        return None
    kinds = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
             (stat.S_ISSOCK, "a socket"), (stat.S_ISBLK, "a block device"), (stat.S_ISCHR, "a character device"))
    what = next((name for test, name in kinds if test(mode)), f"a file of mode {stat.filemode(mode)}")
    return f"not a regular file ({what}; a cache file is only ever written as one)"
