"""Validation of the score cache: Parquet parts and the query index are data from disk, checked before use.

A part is used only when it is a readable Parquet file whose schema has the required columns with the right
types (ids, statuses and reasons are strings; metric and raw columns numeric; `_`-prefixed feature columns lists
of numbers), whose query ids are unique and belong to the run's query set, and whose statuses are known. A part
that fails is moved into `quarantine/` beside it with a `.reason.txt`, a warning names it, and its rows are
absent (so the next score run recomputes them and the leaderboard counts them as missing meanwhile).
"""

from __future__ import annotations

import json
import os
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from benchmark.io.fileio import atomic_write_text, not_a_regular_file

ROW_KEYS = ("query_id", "image_id", "edit_type", "object_class", "status", "reason", "edit_sha256")
STRING_COLUMNS = frozenset(ROW_KEYS) | {"branch"}  # `branch`: HATIE's detection branch
STRING_COLUMNS |= {"clip_t_text", "dir_note"}  # the conventional suite's CLIP-T text field and why clip_dir is NaN
STRING_COLUMNS |= {"bg_note", "clip_note"}  # the PIE-Bench suite's reasons for NaN background / CLIP columns
# the GEdit-Bench protocol's judge replies (kept, parsed or not), the scores it read (JSON lists), the language
STRING_COLUMNS |= {"sc_reply", "pq_reply", "sc_scores", "pq_scores", "language"}
STRING_COLUMNS |= {"ie_reply", "ie_scores"}  # the ImgEdit-Bench protocol's judge reply and the scores it read
# the KRIS-Bench protocol's three judge replies (kept, parsed or not) and the scores it read (a JSON object)
STRING_COLUMNS |= {"vc_reply", "if_reply", "vq_reply", "k_scores"}
# the RISEBench protocol's judge replies per dimension (kept, parsed or not; "" where not asked) and the subtask
STRING_COLUMNS |= {"rise_reply_consistency", "rise_reply_reasoning", "rise_reply_plausibility", "rise_subtask"}
# EditScore's judge replies and the scores read from them, per pass (JSON lists)
STRING_COLUMNS |= {"es_sc_replies", "es_pq_replies", "es_sc_scores", "es_pq_scores"}
# a judged suite's provenance per row and the kind of judge failure of a failure row (benchmark.models.judge_reply)
STRING_COLUMNS |= {"judge_model", "judge_answered_by", "judge_fingerprint", "judge_version", "judge_failure"}
# a multi-turn session's id; its row's `turn` (1-based) is numeric. Both absent for a query of no session
STRING_COLUMNS |= {"session"}
SESSION_COLUMNS = ("session", "turn")
NOT_NULL = ("query_id", "status")
STATUSES = frozenset({"ok", "failed", "missing", "excluded"})
SCORES_DIR = "scores"  # <run dir>/scores/<metric signature>/: the parts and the index below
INDEX_FILE = "queries.json"
INDEX_FORMAT = 1
INDEX_COLUMNS = ["query_id", "image_id", "edit_type", "object_class", "excluded"]
QUARANTINE_DIR = "quarantine"
_SHA256 = re.compile(r"[0-9a-f]{64}")


class ResultsWarning(UserWarning):
    """A file under results/ was not trusted (moved aside or skipped); the message names it."""


class BadCacheFile(ValueError):
    """A cache file failed validation; the message says why."""


def warn(message: str) -> None:
    warnings.warn(message, ResultsWarning, stacklevel=3)


# -- the full query set of a run ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class QueryIndex:
    """The full query set a run's selections are drawn from: id, image, type, class and, per query, the reason
    the metrics do not score it ('' = scored). Completeness is counted against it."""

    queryset: str
    queryset_hash: str
    rows: tuple[tuple[str, str | None, str | None, str | None, str], ...]
    # (query id, session, turn) of every query of a multi-turn session (Query.session / turn); () when none has one
    sessions: tuple[tuple[str, str, int], ...] = ()

    @cached_property  # built once: callers test membership per query (a property rebuilt it each time, O(n^2))
    def ids(self) -> frozenset[str]:
        return frozenset(r[0] for r in self.rows)

    def frame(self):
        import pandas as pd

        return pd.DataFrame(list(self.rows), columns=INDEX_COLUMNS)


def write_query_index(out_dir: Path, full: Any, excluded: Callable[[Any], str] | None = None) -> QueryIndex:
    """Write `out_dir/queries.json` for the full query set `full` (skipped when the bytes would not change)."""
    rows = tuple((q.id, q.image_id, q.edit_type, q.object_class, (excluded(q) if excluded else "") or "")
                 for q in full.queries)
    sessions = tuple((q.id, q.session, int(q.turn)) for q in full.queries
                     if getattr(q, "session", None) is not None)
    index = QueryIndex(full.name, full.hash, rows, sessions)
    data = {"format": INDEX_FORMAT, "queryset": full.name, "queryset_hash": full.hash,
            "n_total": len(rows), "columns": INDEX_COLUMNS, "rows": [list(r) for r in rows]}
    if sessions:  # only then: the index of a set without sessions keeps its bytes
        data["sessions"] = [list(s) for s in sessions]
    text = json.dumps(data, separators=(",", ":")) + "\n"
    path = out_dir / INDEX_FILE
    try:
        same = path.read_text(encoding="utf-8") == text
    except (OSError, UnicodeDecodeError):
        same = False
    if not same:
        atomic_write_text(path, text)
    return index


def load_query_index(path: Path) -> QueryIndex:
    """Parse and validate a `queries.json`; raises BadCacheFile naming the defect."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
        raise BadCacheFile(f"not readable JSON ({type(err).__name__}: {err})") from None
    if not isinstance(data, dict) or data.get("format") != INDEX_FORMAT or data.get("columns") != INDEX_COLUMNS:
        raise BadCacheFile(f"not a query index of format {INDEX_FORMAT} with columns {INDEX_COLUMNS}")
    name, qhash, n, rows = data.get("queryset"), data.get("queryset_hash"), data.get("n_total"), data.get("rows")
    if not (isinstance(name, str) and isinstance(qhash, str) and type(n) is int and isinstance(rows, list)):
        raise BadCacheFile("queryset / queryset_hash / n_total / rows missing or of the wrong type")
    if len(rows) != n:
        raise BadCacheFile(f"n_total is {n} but {len(rows)} rows are listed")
    out = []
    for i, r in enumerate(rows):
        if (not isinstance(r, list) or len(r) != len(INDEX_COLUMNS) or not isinstance(r[0], str) or not r[0]
                or not all(v is None or isinstance(v, str) for v in r[1:4]) or not isinstance(r[4], str)):
            raise BadCacheFile(f"row {i} is not [id, image_id, edit_type, object_class, excluded] of strings")
        out.append(tuple(r))
    if len({r[0] for r in out}) != len(out):
        raise BadCacheFile("duplicate query ids")
    return QueryIndex(name, qhash, tuple(out), _index_sessions(data.get("sessions"), {r[0] for r in out}))


def _index_sessions(value: Any, ids: set[str]) -> tuple[tuple[str, str, int], ...]:
    """The index's optional `sessions` ([query id, session, turn] per query of a session), validated: ids of the
    index, each once, turns whole numbers from 1 and each session's turns 1..n."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise BadCacheFile("sessions is not a list of [query id, session, turn]")
    out: list[tuple[str, str, int]] = []
    turns: dict[str, list[int]] = {}
    for i, r in enumerate(value):
        if (not isinstance(r, list) or len(r) != 3 or not isinstance(r[0], str) or not isinstance(r[1], str)
                or not r[1] or type(r[2]) is not int or r[2] < 1):
            raise BadCacheFile(f"sessions row {i} is not [query id, session, turn from 1]")
        if r[0] not in ids:
            raise BadCacheFile(f"sessions row {i} names query {r[0]!r}, which is not in the index")
        out.append((r[0], r[1], r[2]))
        turns.setdefault(r[1], []).append(r[2])
    if len({r[0] for r in out}) != len(out):
        raise BadCacheFile("sessions names a query twice")
    for session, seen in turns.items():
        if sorted(seen) != list(range(1, len(seen) + 1)):
            raise BadCacheFile(f"session {session!r} has turns {sorted(seen)}, not 1..n")
    return tuple(out)


def read_query_index(out_dir: Path) -> QueryIndex | None:
    """The validated index in `out_dir`, or None (with a warning when the file exists but is bad)."""
    path = out_dir / INDEX_FILE
    if not path.is_file():
        return None
    try:
        return load_query_index(path)
    except BadCacheFile as err:
        warn(f"{path}: {err}; ignored (the next score run of this run folder rewrites it)")
        return None


# -- Parquet parts ------------------------------------------------------------------------------------------------

def _type_ok(name: str, t: Any) -> bool:
    import pyarrow as pa

    if pa.types.is_null(t):
        return name not in NOT_NULL
    if name in STRING_COLUMNS:
        return pa.types.is_string(t) or pa.types.is_large_string(t)
    if name.startswith("_"):  # per-row feature vectors (HATIE's FID features)
        is_list = pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)
        return is_list and (pa.types.is_floating(t.value_type) or pa.types.is_integer(t.value_type))
    return pa.types.is_floating(t) or pa.types.is_integer(t) or pa.types.is_boolean(t)


def check_part(path: Path, valid_ids: frozenset[str] | None, columns: Sequence[str] | None = None):
    """The rows of one part as a DataFrame (only `columns` when given), or BadCacheFile naming the defect."""
    import pyarrow.parquet as pq

    odd = not_a_regular_file(path)  # a FIFO would block the read below, a symlink point outside the run
    if odd:
        raise BadCacheFile(odd)
    try:
        pf = pq.ParquetFile(path)
        schema = pf.schema_arrow
    except Exception as err:  # pyarrow raises several types for garbage / truncated files
        raise BadCacheFile(f"not a readable Parquet file ({type(err).__name__}: {err})") from None
    names = list(schema.names)
    if len(set(names)) != len(names):
        raise BadCacheFile("duplicate column names")
    missing = [c for c in ROW_KEYS if c not in names]
    if missing:
        raise BadCacheFile(f"missing required columns {missing}")
    wrong = [f"{n}: {schema.field(n).type}" for n in names if not _type_ok(n, schema.field(n).type)]
    if wrong:
        raise BadCacheFile(f"columns of the wrong type ({', '.join(wrong[:5])}); expected strings for "
                           f"{sorted(STRING_COLUMNS)}, lists of numbers for _-prefixed features, numbers otherwise")
    want = None if columns is None else list(dict.fromkeys([*NOT_NULL, "edit_sha256", *[c for c in columns if c in names]]))
    try:
        df = pf.read(columns=want).to_pandas(ignore_metadata=True)  # no pandas metadata: plain columns only
    except Exception as err:
        raise BadCacheFile(f"unreadable data ({type(err).__name__}: {err})") from None
    if df["query_id"].isna().any() or df["status"].isna().any():
        raise BadCacheFile("null query_id or status")
    if df["query_id"].duplicated().any():
        raise BadCacheFile(f"duplicate query ids, e.g. {df.loc[df['query_id'].duplicated(), 'query_id'].iloc[0]!r}")
    bad_status = sorted(set(df["status"]) - STATUSES)
    if bad_status:
        raise BadCacheFile(f"unknown status values {bad_status[:5]} (valid: {sorted(STATUSES)})")
    if valid_ids is not None:
        foreign = sorted(set(df["query_id"]) - valid_ids)
        if foreign:
            raise BadCacheFile(f"{len(foreign)} query ids not in this run's query set, e.g. {foreign[:3]}")
    _check_sessions(df, names)
    ok_sha = df.loc[df["status"] == "ok", "edit_sha256"]
    if not ok_sha.map(lambda v: isinstance(v, str) and _SHA256.fullmatch(v) is not None).all():
        raise BadCacheFile("an ok row without the sha256 of the edit it scored (edit_sha256)")
    return df if columns is None else df[[c for c in columns if c in df.columns]]


def _check_sessions(df: Any, names: Sequence[str]) -> None:
    """`session` and `turn` come together, on the same rows: a turn is a whole number from 1 where a session is
    named, and absent where none is (a query of no session)."""
    present = [c for c in SESSION_COLUMNS if c in names]
    if not present:
        return
    if len(present) == 1:
        raise BadCacheFile(f"column {present[0]!r} without {({*SESSION_COLUMNS} - {*present}).pop()!r}: a "
                           "multi-turn row names its session and its turn")
    if not all(c in df for c in SESSION_COLUMNS):  # a read of other columns only
        return
    import numpy as np

    named = df["session"].map(lambda v: isinstance(v, str) and bool(v)).to_numpy(dtype=bool)
    turn = df["turn"].to_numpy(dtype=np.float64, na_value=np.nan)
    if (df["session"].notna().to_numpy() & ~named).any():
        raise BadCacheFile("an empty session id (a row of no session leaves it null)")
    whole = np.isfinite(turn) & (turn >= 1) & (turn == np.floor(turn))
    if (named & ~whole).any():
        raise BadCacheFile("a row of a session without a whole turn number from 1")
    if (~named & np.isfinite(turn)).any():
        raise BadCacheFile("a turn on a row of no session")


def quarantine(path: Path, reason: str, then: str = "its rows will be recomputed by the next score run"
               ) -> Path | None:
    """Move a bad cache file into `quarantine/` beside it with a reason file; warn naming both and `then`."""
    qdir = path.parent / QUARANTINE_DIR
    dest = qdir / path.name
    try:
        qdir.mkdir(exist_ok=True)
        n = 1
        while os.path.lexists(dest):  # a dangling symlink quarantined before counts too
            dest, n = qdir / f"{path.name}.{n}", n + 1
        os.replace(path, dest)
        (qdir / f"{dest.name}.reason.txt").write_text(reason + "\n", encoding="utf-8")
    except FileNotFoundError:  # a concurrent shard moved it first
        return None
    except OSError as err:
        warn(f"{path}: {reason}; NOT used (could not move it aside: {err})")
        return None
    warn(f"{path}: {reason}; moved to {dest}, {then}")
    return dest


def read_valid_parts(folder: Path, valid_ids: frozenset[str] | None, columns: Sequence[str] | None = None
                     ) -> list[Any]:
    """DataFrames of every valid part in `folder`, in write order; bad parts are quarantined."""
    frames = []
    for p in sorted(folder.glob("part-*.parquet")):
        try:
            frames.append(check_part(p, valid_ids, columns))
        except BadCacheFile as err:
            quarantine(p, str(err))
    return frames
