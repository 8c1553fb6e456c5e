"""Query set files: JSONL reader/writer with strict validation, and the content hash used in provenance.

On disk a query set is a folder with `queryset.json` (name, schema version, description, license) and
`queries.jsonl` (one `Query` per line). Paths inside records are relative to that folder. Every rule and limit is
listed in docs/inputs.md; the set's hash covers the records and the bytes of every file they name.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
import stat
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.io.types import EDIT_TYPES, HATIE_TYPES, REQUIRED_FIELDS, SCHEMA_VERSION, ObjectRef, Query
from benchmark.querysets.json_stream import json_reason, lone_surrogate_in

QUERIES_FILE = "queries.jsonl"
META_FILE = "queryset.json"

# Query ids become file names: keep them to one safe path component.
_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")  # used with fullmatch: `$` would accept a trailing newline
_QUERY_FIELDS = {f.name: f for f in dataclasses.fields(Query)}
_OBJECT_FIELDS = {f.name for f in dataclasses.fields(ObjectRef)}
_PATH_FIELDS = ("image", "edit_mask", "target_image", "reference_image")
_STR_FIELDS = (
    "instruction", "source_caption", "target_caption", "image_id", "new_class", "relation",
    "attribute_before", "attribute_after", "background", "style", "language", "instruction_en", "instruction_zh",
    "blended_word", "explanation",
)
# `language`: a BCP 47 primary language subtag ("en", "zh"); `instruction_<lang>` fields exist for these two
_LANGUAGE_RE = re.compile(r"[a-z]{2,3}")
_PER_LANGUAGE = {"en": "instruction_en", "zh": "instruction_zh"}
# One record is a few KB even with many editable objects; a line over this is not a query (and would cost memory
# and time in every later step). Prompt length has its own, per-query limit (`limits.max_prompt_chars`).
MAX_LINE_BYTES = 1 << 20
# Shown in a missing / refused files error (the rest are counted).
MAX_LISTED_FILES = 5
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


class QuerySetError(ValueError):
    """A query set file is malformed; the message names the file, line and reason."""


def check_id(value: str, what: str = "query id", why: str = "ids become file names") -> str:
    """Return `value` if it is safe as a single file-name component, else raise ValueError (`why` ends the
    message)."""
    if not isinstance(value, str) or not _ID_RE.fullmatch(value) or ".." in value:
        raise ValueError(
            f"{what} {value!r} is not allowed: use 1-128 characters from [A-Za-z0-9_.-], starting with a letter or "
            f"digit, without '..' ({why})"
        )
    return value


def check_text(value: str, what: str) -> str:
    """Return `value` unless it holds a NUL character, which ids refuse too: C libraries, tokenizers' native code and
    terminals end the text there, so a prompt would reach an editor cut short."""
    if "\x00" in value:
        raise ValueError(f"{what} {value[:60]!r} holds a NUL character (U+0000, escaped \\u0000) at character "
                         f"{value.index(chr(0)) + 1}: no text field may hold one; remove it")
    return value


def read_keyed_json(path: Path, error: type[Exception], keyed_by: str) -> dict[str, Any]:
    """A release's JSON file holding one non-empty object {key: entry} (PIE-Bench's mapping file, ImgEdit-Bench's
    edit list), read under the release rules (`benchmark.querysets.release.read_json`: bounded numbers and depth,
    a key that appears twice refused, no lone surrogate). Every problem raises `error` naming the file (and the
    line of a JSON syntax error); `keyed_by` says what the keys are."""
    from benchmark.querysets.release import read_json

    raw = read_json(path, error, what="file")
    if not isinstance(raw, dict) or not raw:
        raise error(f"{path}: must hold a non-empty JSON object keyed by {keyed_by}")
    return raw


def check_query(q: Query, where: str = "") -> None:
    """Refuse `q` unless `read_queries` would load its canonical line: the loader's own rules (line size, UTF-8,
    NUL, ids, fields), applied when a set is built so that a build that succeeds always loads."""
    label = where or f"query {q.id!r}"
    try:
        raw = canonical_line(q).encode("utf-8")
    except UnicodeEncodeError:
        raise QuerySetError(f"{label}: a text field holds a lone UTF-16 surrogate; it cannot be written as UTF-8"
                            ) from None
    obj = parse_json_line(raw, label)
    try:
        query_from_dict(obj)
    except (ValueError, TypeError) as err:
        raise QuerySetError(f"{label}: {err}") from None


def check_relpath(value: str, what: str) -> str:
    """Return `value` if it is a relative path that stays inside the query set folder."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} must be a non-empty relative path, got {value!r}")
    check_text(value, what)
    if value.startswith("/") or "\\" in value or ".." in value.split("/"):
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
        check_text(d[key], f"{what}.{key}")
    mask = d.get("mask")
    if mask is not None:
        check_relpath(mask, f"{what}.mask")
    bbox = d.get("bbox")
    if bbox is not None:
        if not (isinstance(bbox, list | tuple) and len(bbox) == 4
                and all(isinstance(v, int | float) and not isinstance(v, bool) for v in bbox)):
            raise ValueError(f"{what}.bbox must be [x0, y0, x1, y1] of numbers, got {bbox!r}")
        if not all(math.isfinite(v) for v in bbox):
            raise ValueError(f"{what}.bbox {bbox!r} must hold finite numbers (no NaN or Infinity)")
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
        if d.get(key) is not None:
            check_text(d[key], key)
    if d.get("size_change") not in (None, "enlarge", "shrink"):
        raise ValueError(f"size_change must be 'enlarge' or 'shrink', got {d['size_change']!r}")
    _check_languages(d)
    kwargs = dict(d)
    subsets = kwargs.get("subsets", [])
    if not isinstance(subsets, list | tuple) or not all(isinstance(s, str) for s in subsets):
        raise ValueError(f"subsets must be a list of subset names, got {subsets!r}")
    for s in subsets:
        check_id(s, "subset name", why="subset names label result tables")
    kwargs["subsets"] = tuple(subsets)
    kwargs["judge_hints"] = _hints_from(kwargs.get("judge_hints", {}))
    _check_session(d)
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


def _hints_from(value: Any) -> tuple[tuple[str, str], ...]:
    """`judge_hints` as stored ({name: text}; a tuple of pairs in memory) -> sorted (name, text) pairs."""
    pairs = list(value.items()) if isinstance(value, dict) else value
    if not isinstance(pairs, list | tuple) or not all(isinstance(p, list | tuple) and len(p) == 2 for p in pairs):
        raise ValueError(f"judge_hints must be an object {{name: text}}, got {value!r}")
    names = [p[0] for p in pairs]
    dup = sorted(n for n, c in Counter(names).items() if c > 1)
    if dup:
        raise ValueError(f"judge_hints names {dup} more than once")
    for name, text in pairs:
        check_id(name, "judge hint name", why="hint names are result columns' keys")
        if not isinstance(text, str):
            raise ValueError(f"judge_hints[{name!r}] must be text, got {type(text).__name__}")
        check_text(text, f"judge_hints[{name!r}]")
    return tuple(sorted((str(n), t) for n, t in pairs))


def _check_session(d: dict[str, Any]) -> None:
    """`session` and `turn` come together: a safe id and a 1-based turn index."""
    session, turn = d.get("session"), d.get("turn")
    if session is None and turn is None:
        return
    if session is None or turn is None:
        raise ValueError("session and turn come together: a query of a multi-turn session needs both")
    check_id(session, "session id", why="session ids name result folders")
    if isinstance(turn, bool) or not isinstance(turn, int) or turn < 1:
        raise ValueError(f"turn must be a whole number from 1 (the session's first turn), got {turn!r}")


def check_sessions(queries: list[Query]) -> None:
    """Each session's turns are 1..n, each once; raises QuerySetError naming the session."""
    turns: dict[str, list[int]] = {}
    for q in queries:
        if q.session is not None:
            turns.setdefault(q.session, []).append(int(q.turn or 0))
    for session, seen in sorted(turns.items()):
        if sorted(seen) != list(range(1, len(seen) + 1)):
            raise QuerySetError(
                f"session {session!r} has turns {sorted(seen)}; a session's turns must be 1..n, each once")


def _check_languages(d: dict[str, Any]) -> None:
    """`language` is a language subtag; the instruction in a language with its own field equals that field."""
    lang = d.get("language")
    if lang is None:
        return
    if not _LANGUAGE_RE.fullmatch(lang):
        raise ValueError(f"language {lang!r} must be a lower-case BCP 47 language subtag such as 'en' or 'zh'")
    own = _PER_LANGUAGE.get(lang)
    if own and d.get(own) is not None and d.get(own) != d.get("instruction"):
        raise ValueError(f"instruction must equal {own} for a query in language {lang!r}")


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
        elif name == "subsets":
            value = list(value)
        elif name == "judge_hints":
            value = dict(value)
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


def parse_json_line(raw: bytes, where: str) -> Any:
    """Decode one JSONL line strictly; every defect raises QuerySetError prefixed with `where` (file:line)."""
    if len(raw) > MAX_LINE_BYTES:
        raise QuerySetError(f"{where}: line is over the limit of {MAX_LINE_BYTES:,} bytes for one record")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise QuerySetError(f"{where}: not valid UTF-8 (byte 0x{raw[err.start]:02x} at byte {err.start + 1}); "
                            "save the file as UTF-8") from None
    # the line's own terminator off (JSON whitespace either way): an error at its end is then at the end of this
    # line, not at column 1 of the next
    text = text.rstrip("\r\n")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as err:
        at = "the end of the line" if err.pos >= len(text) else f"column {err.pos + 1}"
        raise QuerySetError(f"{where}: not valid JSON: {json_reason(err, at)}") from None
    except RecursionError:
        raise QuerySetError(f"{where}: JSON nested too deeply to be a query") from None
    # A lone surrogate can only come from a `\\ud800`-`\\udfff` escape (strict UTF-8 decoding refuses the raw bytes)
    bad = lone_surrogate_in(obj) if _SURROGATE_ESCAPE.search(raw) else None
    if bad is not None:
        raise QuerySetError(f"{where}: string {bad[:40]!r} holds a lone UTF-16 surrogate (an unpaired \\ud800-"
                            "\\udfff escape); it is not text and cannot be written as UTF-8")
    return obj


def read_queries(path: str | os.PathLike[str]) -> list[Query]:
    """Read and validate a JSONL query file. Any bad line raises QuerySetError naming file, line and reason."""
    path = Path(path)
    if not path.is_file():
        raise QuerySetError(f"{path}: query file not found")
    queries: list[Query] = []
    seen: dict[str, int] = {}
    with path.open("rb") as fh:
        # readline with a bound: a multi-gigabyte "line" is refused after reading just over the limit
        for lineno, line in enumerate(iter(lambda: fh.readline(MAX_LINE_BYTES + 1), b""), start=1):
            if len(line) > MAX_LINE_BYTES:
                raise QuerySetError(f"{path}:{lineno}: line is over the limit of {MAX_LINE_BYTES:,} bytes for one "
                                    "record")
            if not line.strip():
                continue
            obj = parse_json_line(line, f"{path}:{lineno}")
            try:
                q = query_from_dict(obj)
            except (ValueError, TypeError, RecursionError) as err:
                raise QuerySetError(f"{path}:{lineno}: {err}") from None
            if q.id in seen:
                raise QuerySetError(f"{path}:{lineno}: duplicate query id {q.id!r} (first on line {seen[q.id]})")
            seen[q.id] = lineno
            queries.append(q)
    if not queries:
        raise QuerySetError(f"{path}: no queries")
    try:
        check_sessions(queries)
    except QuerySetError as err:
        raise QuerySetError(f"{path}: {err}") from None
    return queries


def write_queries(path: str | os.PathLike[str], queries: Iterable[Query]) -> None:
    """Write queries as canonical JSONL (atomically)."""
    from benchmark.io.fileio import atomic_write_text

    atomic_write_text(Path(path), "".join(canonical_line(q) + "\n" for q in queries))


def records_hash(queries: Sequence[Query]) -> str:
    """sha256 of the canonical records only, order-independent."""
    h = hashlib.sha256()
    for line in sorted(canonical_line(q) for q in queries):
        h.update(line.encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


def content_hash(queries: Sequence[Query], files: Mapping[str, str]) -> str:
    """The query set's hash: sha256 over the canonical records (order-independent) and, for every referenced
    file, its relative path and the sha256 of its bytes (`files`, from `file_digests`)."""
    h = hashlib.sha256()
    h.update(records_hash(queries).encode())
    h.update(b"\nfiles\n")
    for rel in sorted(files):
        h.update(f"{rel}\t{files[rel]}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def referenced_files(queries: Iterable[Query]) -> dict[str, str]:
    """Every path the records name (image, edit_mask, target_image, reference_image, object masks) -> the first
    query naming it."""
    out: dict[str, str] = {}
    for q in queries:
        objs = [o for o in (q.target, q.anchor, *q.editable_objects) if o is not None]
        for rel in (q.image, q.edit_mask, q.target_image, q.reference_image, *(o.mask for o in objs)):
            if rel and rel not in out:
                out[rel] = q.id
    return out


def _inside(path: str, roots: Sequence[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def _linked_roots(root: Path, meta: Mapping[str, Any]) -> list[str]:
    """Resolved targets of the top-level folder links a builder declared in queryset.json (`linked_folders`)."""
    names = meta.get("linked_folders") or []
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise QuerySetError(f"{root / META_FILE}: linked_folders must be a list of folder names, got {names!r}")
    out = []
    for name in names:
        if "/" in name or name in ("", ".", "..") or not (root / name).is_symlink():
            raise QuerySetError(f"{root / META_FILE}: linked_folders names {name!r}, which is not a link in {root}")
        out.append(os.path.realpath(root / name))
    return out


def file_digests(root: Path, queries: Sequence[Query], meta: Mapping[str, Any] | None = None) -> dict[str, str]:
    """sha256 of every referenced file (stat-cached, `benchmark.io.filehash`). Raises one QuerySetError listing the
    first missing files, non-files, or files that resolve outside the set folder through a symlink (only the
    top-level folder links declared in `linked_folders` may point elsewhere)."""
    from benchmark.io.filehash import digests

    root = Path(root).resolve()
    allowed = [str(root), *_linked_roots(root, meta or {})]
    dirs: dict[str, bool] = {str(root): True}

    def dir_inside(d: str) -> bool:
        """`d` (lexically under root: check_relpath refuses '..') resolves inside an allowed folder: one lstat per
        folder, a realpath only where a folder is a link."""
        if d not in dirs:
            try:
                link = stat.S_ISLNK(os.lstat(d).st_mode)
            except OSError:
                link = False  # a missing folder: its files are reported missing
            dirs[d] = dir_inside(os.path.dirname(d)) and (not link or _inside(os.path.realpath(d), allowed))
        return dirs[d]

    stats: list[tuple[str, os.stat_result]] = []
    missing: list[str] = []
    refused: list[str] = []
    refs = referenced_files(queries)
    for rel, qid in refs.items():
        full = f"{root}/{rel}"
        parent = os.path.dirname(full)
        try:
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode) or not dir_inside(parent):
                real = os.path.realpath(full)
                if not _inside(real, allowed):
                    refused.append(f"{rel} (query {qid}) -> {real}")
                    continue
                st = os.stat(real)
        except FileNotFoundError:
            missing.append(f"{rel} (query {qid})")
            continue
        except OSError as err:
            refused.append(f"{rel} (query {qid}): {err.strerror}")
            continue
        if not stat.S_ISREG(st.st_mode):
            refused.append(f"{rel} (query {qid}): not a regular file")
            continue
        stats.append((rel, st))
    problems = []
    for what, items in (("missing", missing), ("refused (symlink out of the set folder, or not a file)", refused)):
        if items:
            more = f", and {len(items) - MAX_LISTED_FILES} more" if len(items) > MAX_LISTED_FILES else ""
            problems.append(f"{len(items)} referenced file(s) {what}: {'; '.join(items[:MAX_LISTED_FILES])}{more}")
    if problems:
        raise QuerySetError(f"query set {root}: {'. '.join(problems)}. Every image, mask and target a record "
                            "names must be a file inside the set folder: rebuild the set or fix queries.jsonl")
    return digests(root, stats)


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


def summary_table(queries: Sequence[Query]) -> str:
    """Markdown tables: queries per type, and per class (rows) x type (columns)."""
    by_type = Counter(q.edit_type for q in queries)
    types = [t for t in HATIE_TYPES if by_type[t]] + sorted(t for t in by_type if t not in HATIE_TYPES)
    lines = ["| edit type | queries |", "|---|---|"] + [f"| {t} | {by_type[t]} |" for t in types]
    lines += [f"| total | {len(queries)} |", "", "| class | " + " | ".join(types) + " | total |",
              "|---|" + "---|" * (len(types) + 1)]
    by_class: dict[str, Counter] = defaultdict(Counter)
    for q in queries:
        by_class[q.object_class][q.edit_type] += 1
    for cls in sorted(by_class, key=lambda c: (-sum(by_class[c].values()), c)):
        row = by_class[cls]
        lines.append(f"| {cls} | " + " | ".join(str(row[t]) for t in types) + f" | {sum(row.values())} |")
    return "\n".join(lines) + "\n"


class QuerySetNotBuiltError(QuerySetError):
    """A query set built from downloaded data has not been built yet; the message says how to build it."""


def write_built_queryset(out: Path, queries: Sequence[Query], *, name: str, counts: dict[str, Any] | None = None,
                         error: type[Exception] = QuerySetError, **fields: Any) -> dict[str, Any]:
    """Write a builder's output, queries in the given order: `queries.jsonl`, `summary.md` (queries per type and
    class) and `queryset.json` with name, schema version, content hash, image and query counts (plus `counts`) and
    the builder's own `fields` (description, license, provenance). Returns the metadata. Every query is first
    checked with the loader's own rules (`check_query`; ids once each): a refusal raises `error` and writes
    nothing."""
    from benchmark.io.fileio import atomic_write_text

    if not queries:
        raise error(f"{out}: the build made no query")
    seen: set[str] = set()
    for q in queries:
        try:
            check_query(q)
        except QuerySetError as err:
            raise error(str(err)) from None
        if q.id in seen:
            raise error(f"query id {q.id!r} is made twice; ids must be unique")
        seen.add(q.id)
    write_queries(out / QUERIES_FILE, queries)
    atomic_write_text(out / "summary.md", summary_table(queries))
    # A builder may link a top-level folder to data kept elsewhere (the HATIE importer's images/): declare it, so
    # loading accepts files behind that link and nothing else that leaves the folder.
    linked = sorted(p.name for p in out.iterdir() if p.is_symlink() and p.is_dir())
    if linked:
        fields = {"linked_folders": linked, **fields}
    try:
        files = file_digests(out, queries, {"linked_folders": linked})
    except QuerySetError as err:
        raise error(str(err)) from None
    meta = {"name": name, "schema_version": SCHEMA_VERSION, "content_hash": content_hash(queries, files), **fields,
            "counts": {"images": len({q.image_id for q in queries}), "queries": len(queries),
                       "by_type": dict(Counter(q.edit_type for q in queries)), **(counts or {})}}
    atomic_write_text(out / META_FILE, json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return meta


def load_queryset(root: str | os.PathLike[str], name: str | None = None, build: str | None = None,
                  first: int | None = None, sample: int | float | None = None, sample_seed: int = 0,
                  sample_types: Any = None, per_source: int | None = None) -> QuerySet:
    """Load a query set folder (queryset.json + queries.jsonl).

    `build` is the command that creates the folder (configs of downloaded sets give it); when the folder is not
    built, the error names the set and that command. `first` makes a named set of the file's first N queries (e.g.
    `demo_mini`): a set of its own, with its own name and hash, so its runs are complete at N queries, unlike a
    `limit`, which is a partial run of the whole set. `sample` (with `sample_seed`, `sample_types`) makes a set of
    a seeded stratified sample of them the same way (`benchmark.querysets.sample`). `per_source` keeps the first N
    queries of each source image (a set of its own too), e.g. to give the demo HATIE's few queries per source.
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
        raise QuerySetError(f"{meta_path}:{err.lineno}: not valid JSON: {json_reason(err, f'column {err.colno}')}"
                            ) from None
    except (UnicodeDecodeError, RecursionError) as err:
        raise QuerySetError(f"{meta_path}: not a UTF-8 JSON object ({type(err).__name__})") from None
    if not isinstance(meta, dict):
        raise QuerySetError(f"{meta_path}: must hold a JSON object, got {type(meta).__name__}")
    version = meta.get("schema_version")
    if version != SCHEMA_VERSION:
        raise QuerySetError(f"{meta_path}: schema_version {version!r} is not supported (this editmeter reads {SCHEMA_VERSION})")
    queries = read_queries(root / QUERIES_FILE)
    if first is not None:
        if isinstance(first, bool) or not isinstance(first, int) or first < 1:
            raise QuerySetError(f"first={first!r}: must be a positive number of queries")
        if first > len(queries):
            raise QuerySetError(f"first={first}: {root / QUERIES_FILE} has only {len(queries)} queries")
        if not name:
            raise QuerySetError("first= defines a set of its own: give it a name (e.g. name: demo_mini)")
        queries = queries[:first]
    if per_source is not None:
        if isinstance(per_source, bool) or not isinstance(per_source, int) or per_source < 1:
            raise QuerySetError(f"per_source={per_source!r}: must be a positive number of queries")
        if not name:
            raise QuerySetError("per_source= defines a set of its own: give it a name (e.g. name: demo_per_source_3)")
        seen: Counter[str] = Counter()
        kept = []
        for q in queries:
            seen[q.image] += 1
            if seen[q.image] <= per_source:
                kept.append(q)
        queries = kept
    name = name or meta.get("name", root.name)
    if sample is not None:
        queries, name, meta = _sampled(queries, name, meta, sample, sample_seed, sample_types)
    return QuerySet(
        name=name,
        root=root,
        queries=tuple(queries),
        hash=content_hash(queries, file_digests(root, queries, meta)),
        meta=meta,
    )


def selected_set(parent: QuerySet, queries: Sequence[Query], name: str, *, meta: dict[str, Any] | None = None,
                 sample: int | float | None = None, sample_seed: int = 0, sample_types: Any = None) -> QuerySet:
    """A set of its own made of some of `parent`'s queries (e.g. one language of GEdit-Bench): its own `name` and
    hash, `meta` (default the parent's), and optionally a seeded stratified sample of them as `load_queryset` draws."""
    queries = list(queries)
    if not queries:
        raise QuerySetError(f"query set {name}: the selection from {parent.root} holds no query")
    meta = dict(parent.meta if meta is None else meta)
    if sample is not None:
        queries, name, meta = _sampled(queries, name, meta, sample, sample_seed, sample_types)
    return QuerySet(name=name, root=parent.root, queries=tuple(queries),
                    hash=content_hash(queries, file_digests(parent.root, queries, meta)), meta=meta)


def _sampled(queries: list[Query], name: str, meta: dict[str, Any], request: Any, seed: int,
             types: Any) -> tuple[list[Query], str, dict[str, Any]]:
    """The sample's queries, name and metadata (`sample`: its size, seed, strata and the set it was drawn from)."""
    from benchmark.querysets.sample import SampleError, draw_sample, sample_name

    try:
        picked, info = draw_sample(queries, request, seed=seed, types=types)
    except SampleError as err:
        raise QuerySetError(f"query set {name}: {err}") from None
    info = {**info, "parent": name, "parent_records_hash": records_hash(queries)}
    return picked, sample_name(name, info["n"], seed), {**meta, "sample": info}


def sample_set(queryset: QuerySet, request: Any = None, seed: int = 0, types: Any = None) -> QuerySet:
    """`queryset` itself when `request` is None, else its sample as a query set of its own: its queries, its name
    (`sample_name`), its hash over them and their files, and `meta["sample"]` (the draw and the set it came from), as
    `load_queryset(..., sample=...)` makes it. A request it cannot honour is a QuerySetError naming the set."""
    if request is None:
        return queryset
    picked, name, meta = _sampled(list(queryset.queries), queryset.name, dict(queryset.meta), request, seed, types)
    return QuerySet(name=name, root=queryset.root, queries=tuple(picked),
                    hash=content_hash(picked, file_digests(queryset.root, picked, meta)), meta=meta)


def load_sampled(loader: str, sample: int | float | None = None, sample_seed: int = 0, sample_types: Any = None,
                 **kwargs: Any) -> QuerySet:
    """A query-set config's `_target_` for a set whose loader takes no sample keys (e.g. `demo_editval`): load it
    with `loader` (the dotted name of its function, called with `kwargs`), then draw `queryset.sample=N` from it
    (`sample_set`), so every query-set config takes the same sample keys."""
    return sample_set(_loader_function(loader)(**kwargs), sample, sample_seed, sample_types)


def _loader_function(dotted: str) -> Any:
    """The function a config's `loader` names (`package.module.function`); a QuerySetError naming it otherwise."""
    import importlib

    module_name, _, name = str(dotted).rpartition(".")
    try:
        function = getattr(importlib.import_module(module_name), name) if module_name else None
    except (ImportError, AttributeError) as exc:
        raise QuerySetError(f"query-set loader {dotted!r}: cannot be imported ({exc}); give the dotted name of a "
                            "function, e.g. benchmark.querysets.demo.load_editval_demo") from None
    if not callable(function):
        raise QuerySetError(f"query-set loader {dotted!r} is not a function; give the dotted name of one, e.g. "
                            "benchmark.querysets.demo.load_editval_demo")
    return function
