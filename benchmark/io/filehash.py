"""sha256 of many files, with a stat cache so that hashing a large query set or edits folder again is cheap.

The cache maps a file's path (relative to a scope folder) and its stat key (size, mtime_ns, ctime_ns, inode,
device) to the sha256 of its bytes. Any change of the key means the file is read again: rewriting a file in place
changes mtime and ctime, replacing it changes the inode, and ctime cannot be set back by a user, so a stale digest
is never reused. The cache is a JSON file under `$EDITMETER_CACHE/filehash/` (never inside the data folder, which
may be read-only or shared); one that is unreadable or malformed is ignored and rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

log = logging.getLogger(__name__)

CACHE_VERSION = 1
_SHA_RE = re.compile(r"[0-9a-f]{64}")
# Reading and hashing release the GIL (hashlib does for buffers over 2 KiB): a few threads overlap file I/O on
# cold caches.
HASH_THREADS = 4


def stat_key(st: os.stat_result) -> list[int]:
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def sha256_file(path: str | os.PathLike[str]) -> str:
    """One file's sha256 (`benchmark.io.hashing.file_sha256`; a module-level name so tests can count the reads)."""
    from benchmark.io.hashing import file_sha256

    return file_sha256(path)


def cache_file_for(scope: Path) -> Path:
    """The cache file of one scope folder (keyed by its resolved path)."""
    from benchmark.io.model_cache import cache_root

    key = hashlib.sha256(str(scope).encode("utf-8", "surrogateescape")).hexdigest()[:24]
    return cache_root() / "filehash" / f"{key}.json"


def _load(cache: Path, scope: Path) -> dict[str, list]:
    try:
        data = json.loads(cache.read_text(encoding="utf-8"))
        if not (isinstance(data, dict) and data.get("version") == CACHE_VERSION and data.get("scope") == str(scope)):
            raise ValueError("wrong version or scope")
        files = data["files"]
        if not isinstance(files, dict):
            raise ValueError("files is not an object")
        return files  # entries are checked where used (`_valid`): a malformed one is a miss
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, KeyError, RecursionError) as err:  # corrupt: ignore it, it is rebuilt below
        log.warning("ignoring the file-hash cache %s (%s); rebuilding it", cache, err)
        return {}


def _valid(entry: object, key: list[int]) -> bool:
    return (isinstance(entry, list) and len(entry) == 6 and entry[:5] == key and isinstance(entry[5], str)
            and _SHA_RE.fullmatch(entry[5]) is not None)


def digests(scope: Path, files: Iterable[tuple[str, os.stat_result]], cache: Path | None = None) -> dict[str, str]:
    """sha256 of each `(path relative to scope, its os.stat)`; files whose stat key is cached are not read."""
    cache = cache_file_for(scope) if cache is None else cache
    known = _load(cache, scope)
    out: dict[str, str] = {}
    todo: list[tuple[str, list[int]]] = []
    for rel, st in files:
        key = stat_key(st)
        entry = known.get(rel)
        if _valid(entry, key):
            out[rel] = entry[5]  # type: ignore[index]
        else:
            todo.append((rel, key))
    if todo:
        with ThreadPoolExecutor(HASH_THREADS, thread_name_prefix="filehash") as pool:
            shas = list(pool.map(lambda item: sha256_file(os.path.join(scope, item[0])), todo))
        for (rel, key), sha in zip(todo, shas, strict=True):
            out[rel] = sha
            known[rel] = [*key, sha]
        _save(cache, scope, known)
    return out


_SCOPE_RE = re.compile(r'^\{"version":\d+,"scope":("(?:[^"\\]|\\.)*")')


def _prune(folder: Path, keep: Path) -> None:
    """Delete the caches of folders that no longer exist (test runs and moved sets would otherwise accumulate).
    Only the head of each file is read: `_save` writes the scope first."""
    for other in folder.glob("*.json"):
        if other == keep:
            continue
        try:
            with open(other, encoding="utf-8", errors="replace") as fh:
                m = _SCOPE_RE.match(fh.read(8192))
            if m is None or not os.path.isdir(json.loads(m.group(1))):
                other.unlink(missing_ok=True)
        except (OSError, ValueError):
            continue


def _save(cache: Path, scope: Path, files: dict[str, list]) -> None:
    from benchmark.io.fileio import atomic_write_text

    if not cache.exists() and cache.parent.is_dir():  # a new scope: the moment to drop caches of vanished ones
        _prune(cache.parent, cache)
    try:
        atomic_write_text(cache, json.dumps({"version": CACHE_VERSION, "scope": str(scope), "files": files},
                                            separators=(",", ":")))
    except OSError as err:  # a read-only cache only costs speed
        log.warning("cannot write the file-hash cache %s (%s); the next load hashes again", cache, err)
