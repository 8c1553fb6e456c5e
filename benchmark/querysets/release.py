"""Reading a third party's release: the one validated layer every importer and judge-set reader goes through.

A release (PIE-Bench's folder, ImgEdit's JSON, a GEdit / MagicBrush dataset, a judge meta-evaluation set) is data
to validate, never trusted. This module holds the rules they all apply (docs/querysets.md, "What an importer
refuses"):

- JSON (`read_json`): a regular file of bounded size, UTF-8, numbers of at most `MAX_NUMBER_CHARS` characters, no
  NaN / Infinity, nesting at most `MAX_DEPTH` deep, no key twice in one object, no lone UTF-16 surrogate.
- text (`release_text`): a string, without NUL or lone surrogates, within `MAX_TEXT_CHARS`.
- paths (`release_file`): relative, without `..`, resolving (symlinks followed) inside the release folder, to a
  regular file (never a FIFO, a device or a folder).
- images (`release_image`): `benchmark.io.imageio.load_rgb`'s rules: the pixel limit from the header, 16-bit scaled
  to 8 bits, real transparency refused.
- output (`staged_output`): the set is built in a staging folder inside `--out` and moved into place only when the
  whole build succeeded, so a refused build leaves nothing behind and a previous build untouched; `--out` and the
  folders a build writes are never symlinks.

Every refusal raises the caller's error type (a ValueError) naming the entry and the field.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# A number literal longer than this is not a count, an index or a coordinate (python's int() refuses 4300 digits
# with a ValueError; a float of 400 digits is silently inf).
MAX_NUMBER_CHARS = 100
# The releases nest 3-4 levels; 64 leaves room and stays far below python's recursion limit.
MAX_DEPTH = 64
# The largest JSON file a release holds is a few MB (PIE's mapping file: 3.5 MB); 2 GiB bounds a hostile one.
MAX_JSON_BYTES = 2 << 30
# A prompt, instruction or caption; the loader refuses a record line over 1 MiB (io.MAX_LINE_BYTES) anyway.
MAX_TEXT_CHARS = 64 * 1024
# An encoded image in a release; a bigger file is refused before it is read.
MAX_IMAGE_BYTES = 256 << 20
STAGING_PREFIX = ".editmeter-build-"


class ReleaseError(ValueError):
    """Default error type of this module's checks (callers pass their own, e.g. PieFormatError)."""


class _Refused(Exception):
    """Internal: raised inside json's hooks, turned into the caller's error with the file named."""


def number_hooks(error: type[Exception]) -> dict[str, Any]:
    """json's `parse_int`, `parse_float` and `parse_constant` under this module's number rules (at most
    MAX_NUMBER_CHARS characters, no NaN / Infinity), raising `error`: for `json.loads` and `json.JSONDecoder`
    (benchmark.querysets.json_stream uses them too)."""
    def number(kind: type) -> Any:
        def parse(text: str) -> Any:
            if len(text) > MAX_NUMBER_CHARS:
                raise error(f"a number of {len(text):,} characters ({text[:20]}...); numbers are at most "
                            f"{MAX_NUMBER_CHARS} characters")
            return kind(text)
        return parse

    def constant(name: str) -> Any:
        raise error(f"{name} is not a JSON number (write a finite number)")

    return {"parse_int": number(int), "parse_float": number(float), "parse_constant": constant}


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Refused(f"duplicate key(s) [{key[:60]!r}] in one JSON object; each must appear once (JSON readers "
                           "keep the last one silently)")
        out[key] = value
    return out


def check_tree(obj: Any, max_depth: int = MAX_DEPTH) -> str | None:
    """Why a decoded JSON value is refused (nested over `max_depth`, or a string holding a lone surrogate), or
    None; iterative, so any depth is safe to check."""
    stack: list[tuple[Any, int]] = [(obj, 0)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, str):
            if not _is_text(v):
                return f"string {v[:40]!r} holds a lone UTF-16 surrogate (an unpaired \\ud800-\\udfff escape)"
        elif isinstance(v, dict | list):
            if depth >= max_depth:
                return f"values nested more than {max_depth} deep"
            items = [*v.keys(), *v.values()] if isinstance(v, dict) else v
            stack.extend((x, depth + 1) for x in items)
    return None


def _is_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse_json(text: str, where: str, error: type[Exception] = ReleaseError) -> Any:
    """Decode `text` under the module's JSON rules; `where` (a file name) starts every error."""
    try:
        obj = json.loads(text, **number_hooks(_Refused), object_pairs_hook=_pairs)
    except _Refused as err:
        raise error(f"{where}: {err}") from None
    except json.JSONDecodeError as err:
        raise error(f"{where}:{err.lineno}: not valid JSON ({err.msg} at line {err.lineno} column {err.colno})"
                    ) from None
    except RecursionError:
        raise error(f"{where}: JSON nested too deeply (at most {MAX_DEPTH} levels)") from None
    why = check_tree(obj)
    if why:
        raise error(f"{where}: {why}")
    return obj


def read_json(path: str | os.PathLike[str], error: type[Exception] = ReleaseError, what: str = "JSON file") -> Any:
    """A release's JSON file, read under the module's rules (a regular file of at most `MAX_JSON_BYTES`)."""
    path = Path(path)
    _regular(path, f"{what} {path}", error)
    size = path.stat().st_size
    if size > MAX_JSON_BYTES:
        raise error(f"{path}: {size:,} bytes, over the {MAX_JSON_BYTES:,} a release's JSON file may have")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise error(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    except OSError as err:
        raise error(f"{path}: cannot be read ({err.strerror})") from None
    return parse_json(text, str(path), error)


def release_text(value: Any, where: str, field: str, error: type[Exception] = ReleaseError, *,
                 allow_empty: bool = False, max_chars: int = MAX_TEXT_CHARS) -> str:
    """`value` if it is text the loader accepts (a string, no NUL, no lone surrogate, at most `max_chars`
    characters, not blank unless `allow_empty`), else `error` naming `where` and `field`."""
    if not isinstance(value, str):
        raise error(f"{where}: {field} must be text, got {'null' if value is None else type(value).__name__}"
                    f"{'' if value is None else f' {str(value)[:40]!r}'}")
    if not allow_empty and not value.strip():
        raise error(f"{where}: {field} must be a non-empty string, got {value!r}")
    if not _is_text(value):
        raise error(f"{where}: {field} {value[:40]!r} holds a lone UTF-16 surrogate (an unpaired \\ud800-\\udfff "
                    "escape); it is not text and cannot be written as UTF-8")
    if "\x00" in value:
        raise error(f"{where}: {field} {value[:40]!r} holds a NUL character (U+0000) at character "
                    f"{value.index(chr(0)) + 1}; no text field may hold one")
    if len(value) > max_chars:
        raise error(f"{where}: {field} is {len(value):,} characters, over the limit of {max_chars:,}")
    return value


def release_int(value: Any, where: str, field: str, error: type[Exception] = ReleaseError, *,
                minimum: int | None = None) -> int:
    """`value` if it is an integer (not a bool, not 2.7, not "2"), at least `minimum`, else `error`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise error(f"{where}: {field} must be an integer, got {type(value).__name__} {str(value)[:40]!r}")
    if minimum is not None and value < minimum:
        raise error(f"{where}: {field} is {value}; it must be at least {minimum}")
    return value


def _regular(path: Path, what: str, error: type[Exception]) -> os.stat_result:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise error(f"{what} not found") from None
    except OSError as err:
        raise error(f"{what} cannot be read ({err.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise error(f"{what} is not a regular file (a folder, FIFO or device is never read)")
    return st


regular_file = _regular  # for the other release readers (hub_split): `error` unless a regular file


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def release_file(root: str | os.PathLike[str], rel: Any, where: str, field: str,
                 error: type[Exception] = ReleaseError, dirs: dict[str, str] | None = None) -> Path:
    """The regular file `rel` names inside the release folder `root`: `rel` relative, without `..` or a
    backslash, and resolving (symlinks followed) inside `root`; else `error` naming `where` and `field`. `dirs`
    (a dict the caller keeps for one read of one release) caches each folder's real path, so many files in few
    folders cost one `lstat` each."""
    rel = release_text(rel, where, field, error)
    if rel.startswith("/") or "\\" in rel or ".." in rel.split("/"):
        raise error(f"{where}: {field} {rel!r} must be a path relative to {root}, without '..'")
    cache = {} if dirs is None else dirs
    base = _cached_realpath(os.fspath(root), cache)
    head, name = os.path.split(rel)
    real_dir = _cached_realpath(os.path.join(base, head), cache) if head else base
    full = os.path.join(real_dir, name)
    try:
        link = stat.S_ISLNK(os.lstat(full).st_mode)
    except OSError:
        link = False  # missing: reported by `_regular` below
    real = os.path.realpath(full) if link else full
    if not _inside(real, base):
        raise error(f"{where}: {field} {rel!r} resolves to {real}, outside the release folder {base} (through a "
                    "symlink); copy the file into the release instead")
    _regular(Path(real), f"{where}: {field} {real}", error)
    return Path(real)


def _cached_realpath(path: str, cache: dict[str, str]) -> str:
    if path not in cache:
        cache[path] = os.path.realpath(path)
    return cache[path]


def read_release_bytes(path: Path, where: str, field: str, error: type[Exception] = ReleaseError,
                       max_bytes: int = MAX_IMAGE_BYTES) -> bytes:
    """The bytes of a regular file of at most `max_bytes` (checked before reading)."""
    st = _regular(path, f"{where}: {field} {path}", error)
    if st.st_size > max_bytes:
        raise error(f"{where}: {field} {path} is {st.st_size:,} bytes, over the limit of {max_bytes:,}")
    with open(path, "rb") as fh:
        return fh.read(max_bytes + 1)


def release_image(data: bytes | Path, where: str, field: str, error: type[Exception] = ReleaseError) -> Any:
    """An 8-bit RGB PIL image under `load_rgb`'s rules (pixel limit from the header, 16-bit scaled, real
    transparency refused), from encoded bytes or a file (`release_file` checked it); `error` names the entry."""
    from benchmark.io.imageio import ImageInputError, load_rgb

    if isinstance(data, Path):
        data = read_release_bytes(data, where, field, error)
    if not isinstance(data, bytes | bytearray) or not data:
        raise error(f"{where}: {field} is not a readable image (it holds no bytes)")
    try:
        return load_rgb(field, bytes(data))
    except ImageInputError as err:
        raise error(f"{where}: {field} is not a readable image (not usable: {str(err).removeprefix(f'{field}: ')})") from None


def check_output(out: str | os.PathLike[str], error: type[Exception] = ReleaseError) -> Path:
    """`out` if it is a folder (or nothing yet), never a symlink or a file."""
    out = Path(out)
    if out.is_symlink():
        raise error(f"--out {out} is a symlink; give a real folder (a build never writes through a link)")
    if out.exists() and not out.is_dir():
        raise error(f"--out {out} exists and is not a folder")
    return out


@contextmanager
def staged_output(out: str | os.PathLike[str], error: type[Exception] = ReleaseError) -> Iterator[Path]:
    """A fresh staging folder inside `out` to build the set into. When the block ends without an error, every
    entry of the staging folder replaces the one of that name in `out` (`queryset.json` last, so no half-moved
    set loads); when it raises, the staging folder is removed (and `out`, if this call created it and it is
    empty), so a refused build leaves nothing behind and a previous build as it was."""
    out = check_output(out, error)
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    stage = out / f"{STAGING_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}"
    stage.mkdir()
    try:
        yield stage
        names = sorted(os.listdir(stage), key=lambda n: n == "queryset.json")
        for name in names:
            if (out / name).is_symlink():
                raise error(f"{out / name} is a symlink; remove it (a build never writes through a link)")
        trash = stage / f".old-{uuid.uuid4().hex[:8]}"
        trash.mkdir()
        meta = out / "queryset.json"
        if meta.exists():  # the old set stops loading before any of its files moves
            os.replace(meta, trash / "queryset.json")
        for name in names:
            if os.path.lexists(out / name) and name != "queryset.json":
                os.replace(out / name, trash / name)
            os.replace(stage / name, out / name)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        if created:
            try:
                out.rmdir()
            except OSError:
                pass
        raise
    shutil.rmtree(stage, ignore_errors=True)
    _forget_hash_cache(stage)


def _forget_hash_cache(stage: Path) -> None:
    """The stat cache the staging folder's hashing wrote (keyed by its path, which no longer exists)."""
    try:
        from benchmark.io.filehash import cache_file_for

        cache_file_for(stage.resolve()).unlink(missing_ok=True)
    except (OSError, ImportError):
        pass



def cell_bytes(cell: Any, where: str, field: str, error: type[Exception] = ReleaseError,
               folder: str | os.PathLike[str] | None = None) -> bytes:
    """The encoded bytes of a Hugging Face `Image` cell ({'bytes', 'path'}) read undecoded: its bytes, or, for a
    cell without bytes, the file its path names when `folder` (the saved dataset) is given and the path is a
    regular file inside it (`release_file`); anything else is `error` naming `where` and `field`."""
    if not isinstance(cell, dict):
        raise error(f"{where}: {field} must be an image cell {{bytes, path}}, got "
                    f"{'null' if cell is None else type(cell).__name__}")
    raw = cell.get("bytes")
    if raw is not None:
        if not isinstance(raw, bytes | bytearray) or not raw:
            raise error(f"{where}: {field} holds no image bytes")
        return bytes(raw)
    if not cell.get("path"):
        raise error(f"{where}: {field} is empty (no bytes, no path); the row needs an image")
    if folder is None:
        raise error(f"{where}: {field} names a file ({str(cell['path'])[:80]!r}) but holds no bytes, and there is "
                    "no release folder to read it from")
    path = release_file(folder, cell["path"], where, f"{field}.path", error)
    return read_release_bytes(path, where, field, error)
