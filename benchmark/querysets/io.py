"""Query set files: JSONL reader/writer with strict validation, and the content hash used in provenance.

On disk a query set is a folder with `queryset.json` (name, schema version, description, license) and
`queries.jsonl` (one `Query` per line). Paths inside records are relative to that folder.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from benchmark.types import EDIT_TYPES, REQUIRED_FIELDS, SCHEMA_VERSION, ObjectRef, Query

QUERIES_FILE = "queries.jsonl"
META_FILE = "queryset.json"

# Query ids become file names: keep them to one safe path component.
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_QUERY_FIELDS = {f.name: f for f in dataclasses.fields(Query)}
_OBJECT_FIELDS = {f.name for f in dataclasses.fields(ObjectRef)}
_PATH_FIELDS = ("image", "edit_mask", "target_image")
_STR_FIELDS = (
    "instruction", "source_caption", "target_caption", "image_id", "new_class", "relation",
    "attribute_before", "attribute_after", "background", "style",
)


class QuerySetError(ValueError):
    """A query set file is malformed; the message names the file, line and reason."""


def check_id(value: str, what: str = "query id") -> str:
    """Return `value` if it is safe as a single file-name component, else raise ValueError."""
    if not isinstance(value, str) or not _ID_RE.match(value) or ".." in value:
        raise ValueError(
            f"{what} {value!r} is not allowed: use 1-128 characters from [A-Za-z0-9_.-], starting with a letter or "
            "digit, without '..' (ids become file names)"
        )
    return value


def check_relpath(value: str, what: str) -> str:
    """Return `value` if it is a relative path that stays inside the query set folder."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} must be a non-empty relative path, got {value!r}")
    p = PurePosixPath(value)
    if p.is_absolute() or "\\" in value or any(part == ".." for part in p.parts):
        raise ValueError(f"{what} {value!r} must be relative to the query set folder and must not contain '..'")
    return value


def _object_from_dict(d: Any, what: str) -> ObjectRef:
    if not isinstance(d, dict):
        raise ValueError(f"{what} must be an object, got {type(d).__name__}")
    unknown = set(d) - _OBJECT_FIELDS
    if unknown:
        raise ValueError(f"unknown field(s) in {what}: {sorted(unknown)}; allowed: {sorted(_OBJECT_FIELDS)}")
    for key in ("id", "name"):
        if not isinstance(d.get(key), str) or not d.get(key):
            raise ValueError(f"{what}.{key} must be a non-empty string")
    mask = d.get("mask")
    if mask is not None:
        check_relpath(mask, f"{what}.mask")
    bbox = d.get("bbox")
    if bbox is not None:
        if not (isinstance(bbox, list | tuple) and len(bbox) == 4 and all(isinstance(v, int | float) for v in bbox)):
            raise ValueError(f"{what}.bbox must be [x0, y0, x1, y1], got {bbox!r}")
        x0, y0, x1, y1 = (float(v) for v in bbox)
        if x1 < x0 or y1 < y0:
            raise ValueError(f"{what}.bbox {bbox!r} must be corners [x0, y0, x1, y1] with x1 >= x0 and y1 >= y0")
        bbox = (x0, y0, x1, y1)
    return ObjectRef(id=d["id"], name=d["name"], mask=mask, bbox=bbox)


def query_from_dict(d: dict[str, Any]) -> Query:
    """Build a validated `Query` from a JSON object; raises ValueError with the reason."""
    if not isinstance(d, dict):
        raise ValueError(f"a query must be a JSON object, got {type(d).__name__}")
    unknown = set(d) - set(_QUERY_FIELDS)
    if unknown:
        raise ValueError(f"unknown field(s) {sorted(unknown)}; allowed: {sorted(_QUERY_FIELDS)}")
    for key in ("id", "image", "edit_type"):
        if key not in d:
            raise ValueError(f"missing required field {key!r}")
    check_id(d["id"])
    edit_type = d["edit_type"]
    if edit_type not in EDIT_TYPES:
        raise ValueError(f"edit_type {edit_type!r} is not one of {list(EDIT_TYPES)}")
    for key in _PATH_FIELDS:
        if d.get(key) is not None:
            check_relpath(d[key], key)
    for key in _STR_FIELDS:
        if d.get(key) is not None and not isinstance(d[key], str):
            raise ValueError(f"{key} must be a string, got {type(d[key]).__name__}")
    if d.get("size_change") not in (None, "enlarge", "shrink"):
        raise ValueError(f"size_change must be 'enlarge' or 'shrink', got {d['size_change']!r}")
    kwargs = dict(d)
    for key in ("target", "anchor"):
        if kwargs.get(key) is not None:
            kwargs[key] = _object_from_dict(kwargs[key], key)
    objs = kwargs.get("editable_objects", [])
    if not isinstance(objs, list | tuple):
        raise ValueError("editable_objects must be a list")
    kwargs["editable_objects"] = tuple(_object_from_dict(o, f"editable_objects[{i}]") for i, o in enumerate(objs))
    missing = [k for k in REQUIRED_FIELDS[edit_type] if kwargs.get(k) in (None, "")]
    if missing:
        raise ValueError(f"edit_type {edit_type!r} needs field(s) {missing}")
    if not kwargs.get("instruction") and not (kwargs.get("source_caption") and kwargs.get("target_caption")):
        raise ValueError("a query needs an instruction, or both source_caption and target_caption")
    return Query(**kwargs)


def query_to_dict(q: Query) -> dict[str, Any]:
    """JSON-ready dict with defaults omitted (so files stay small and hashes stable under new optional fields)."""
    out: dict[str, Any] = {}
    for name, f in _QUERY_FIELDS.items():
        value = getattr(q, name)
        if f.default is not dataclasses.MISSING and value == f.default:
            continue
        if f.default_factory is not dataclasses.MISSING and value == f.default_factory():
            continue
        if isinstance(value, ObjectRef):
            value = _object_to_dict(value)
        elif name == "editable_objects":
            value = [_object_to_dict(o) for o in value]
        out[name] = value
    return out


def _object_to_dict(o: ObjectRef) -> dict[str, Any]:
    d: dict[str, Any] = {"id": o.id, "name": o.name}
    if o.mask is not None:
        d["mask"] = o.mask
    if o.bbox is not None:
        d["bbox"] = list(o.bbox)
    return d


def canonical_line(q: Query) -> str:
    return json.dumps(query_to_dict(q), sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def read_queries(path: str | os.PathLike[str]) -> list[Query]:
    """Read and validate a JSONL query file. Any bad line raises QuerySetError naming file, line and reason."""
    path = Path(path)
    if not path.is_file():
        raise QuerySetError(f"{path}: query file not found")
    queries: list[Query] = []
    seen: dict[str, int] = {}
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as err:
                raise QuerySetError(f"{path}:{lineno}: not valid JSON ({err.msg} at column {err.colno})") from None
            try:
                q = query_from_dict(obj)
            except (ValueError, TypeError) as err:
                raise QuerySetError(f"{path}:{lineno}: {err}") from None
            if q.id in seen:
                raise QuerySetError(f"{path}:{lineno}: duplicate query id {q.id!r} (first on line {seen[q.id]})")
            seen[q.id] = lineno
            queries.append(q)
    if not queries:
        raise QuerySetError(f"{path}: no queries")
    return queries


def write_queries(path: str | os.PathLike[str], queries: Iterable[Query]) -> None:
    """Write queries as canonical JSONL (atomically)."""
    from benchmark.fileio import atomic_write_text

    atomic_write_text(Path(path), "".join(canonical_line(q) + "\n" for q in queries))


def content_hash(queries: Sequence[Query]) -> str:
    """sha256 of the canonical records, order-independent. Image bytes are covered by builders' own checks."""
    h = hashlib.sha256()
    for line in sorted(canonical_line(q) for q in queries):
        h.update(line.encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


@dataclass(frozen=True)
class QuerySet:
    """A loaded query set: its folder, metadata, queries and content hash."""

    name: str
    root: Path
    queries: tuple[Query, ...]
    hash: str
    meta: dict[str, Any]

    def __len__(self) -> int:
        return len(self.queries)

    def __iter__(self) -> Iterator[Query]:
        return iter(self.queries)

    def path(self, rel: str) -> Path:
        """Absolute path of a record's relative path."""
        return self.root / rel

    @property
    def short_hash(self) -> str:
        return self.hash[:10]

    def shard(self, index: int, count: int) -> QuerySet:
        """Deterministic slice: queries whose position in id order is congruent to `index` mod `count`."""
        if count < 1 or not 0 <= index < count:
            raise ValueError(f"shard index {index} / count {count}: need count >= 1 and 0 <= index < count")
        if count == 1:
            return self
        ordered = sorted(self.queries, key=lambda q: q.id)
        picked = tuple(q for i, q in enumerate(ordered) if i % count == index)
        return dataclasses.replace(self, queries=picked)

    def subset(self, limit: int | None) -> QuerySet:
        if limit is None or limit >= len(self.queries):
            return self
        return dataclasses.replace(self, queries=self.queries[:limit])


class QuerySetNotBuiltError(QuerySetError):
    """A query set built from downloaded data has not been built yet; the message says how to build it."""


def write_built_queryset(out: Path, queries: Sequence[Query], *, name: str, counts: dict[str, Any] | None = None,
                         **fields: Any) -> dict[str, Any]:
    """Write a builder's output, queries in the given order: `queries.jsonl`, `summary.md` (queries per type and
    class) and `queryset.json` with name, schema version, content hash, image and query counts (plus `counts`) and
    the builder's own `fields` (description, license, provenance). Returns the metadata."""
    from collections import Counter

    from benchmark.fileio import atomic_write_text
    from benchmark.querysets.gqa import summary_table
    from benchmark.types import SCHEMA_VERSION

    write_queries(out / QUERIES_FILE, queries)
    atomic_write_text(out / "summary.md", summary_table(queries))
    meta = {"name": name, "schema_version": SCHEMA_VERSION, "content_hash": content_hash(queries), **fields,
            "counts": {"images": len({q.image_id for q in queries}), "queries": len(queries),
                       "by_type": dict(Counter(q.edit_type for q in queries)), **(counts or {})}}
    atomic_write_text(out / META_FILE, json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return meta


def load_queryset(root: str | os.PathLike[str], name: str | None = None, build: str | None = None) -> QuerySet:
    """Load a query set folder (queryset.json + queries.jsonl).

    `build` is the command that creates the folder (configs of downloaded sets give it); when the folder is not
    built, the error names the set and that command.
    """
    root = Path(root).resolve()
    meta_path = root / META_FILE
    if not meta_path.is_file() and build:
        raise QuerySetNotBuiltError(
            f"query set {name or root.name!r} is not built yet ({meta_path} not found). Build it with: {build}"
        )
    if not meta_path.is_file():
        raise QuerySetError(
            f"{meta_path}: not found. A query set folder needs {META_FILE} and {QUERIES_FILE}; "
            "sets built from downloaded data must be built first (see datasets/README.md)"
        )
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise QuerySetError(f"{meta_path}:{err.lineno}: not valid JSON ({err.msg})") from None
    version = meta.get("schema_version")
    if version != SCHEMA_VERSION:
        raise QuerySetError(f"{meta_path}: schema_version {version!r} is not supported (this editmeter reads {SCHEMA_VERSION})")
    queries = read_queries(root / QUERIES_FILE)
    return QuerySet(
        name=name or meta.get("name", root.name),
        root=root,
        queries=tuple(queries),
        hash=content_hash(queries),
        meta=meta,
    )
