"""Incremental aggregation: each (run folder, metric set)'s leaderboard rows cached under a key of their inputs.

Rebuilding the leaderboards bootstraps every metric of every group of every run (10,000 resamples by default); a
run's rows depend only on that run's files, so they are cached in `results/.aggregate-cache/` and recomputed only
when an input changed. The key is a sha256 over everything the rows depend on:

- the run.json view of that metric set (`leaderboard.scorings`: identity, metrics, suite, provenance, selection,
  editor config and info; only `updated_at` and `edit_work`, which no table shows, are left out),
- the stat (name, size, mtime_ns, ctime_ns, inode, device) of every score part, of `queries.json` and of every
  edit PNG of the run (parts are written by rename, so a rewrite changes the inode and ctime; a user cannot set
  ctime back; a replaced edit makes the rows recompute, which marks them STALE when its hash changed),
- the names of the quarantined parts (a partial row's mark names them),
- the bootstrap resamples and seed, the table layout, `AGGREGATE_VERSION`, the numpy / pandas / scipy versions
  and a hash of the source of the whole `benchmark` package (the aggregation, the suite summaries and everything
  they import), so a code change recomputes every entry without anyone having to bump a number.

An entry is data read back from disk, never trusted blindly: it is used only when it is a JSON object of this
format whose key equals the key of the inputs now, whose run folder and metric signature are the ones asked for,
whose rows are lists of flat records of scalars for exactly the three tables, and whose checksum matches its rows.
Anything else is recomputed and rewritten (a damaged entry with a warning naming it). Rows computed while the
inputs changed under the reader (a shard writing a part) are not stored. Entries of run folders or metric sets
that no longer exist are deleted by the next full rebuild.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from benchmark.io.hashing import stable_hash

CACHE_DIR = ".aggregate-cache"  # under results/
FORMAT = 1
# Bump when the rows change meaning in a way the code hash cannot see (it already covers every source change).
AGGREGATE_VERSION = 1
_ENTRY_NAME = re.compile(r"[0-9a-f]{32}\.json")
# run.json fields no table shows: a rewrite of only these keeps the entry (`edit_work` gains an entry with every
# invocation that edits, a rerun that edits nothing included: docs/results.md, "Counting the work")
_VOLATILE = ("updated_at", "edit_work")


@dataclass
class CacheStats:
    """What one aggregation did: entries reused, rows computed (cache miss or cache off), entries rejected as
    damaged, entries deleted because their run is gone."""

    reused: int = 0
    computed: int = 0
    damaged: int = 0
    pruned: int = 0
    computed_runs: list[str] = field(default_factory=list)


LAST_STATS = CacheStats()  # what the latest `summarise` in this process did (for logs and tests)


@lru_cache(maxsize=1)
def code_version() -> str:
    """Hash of the source of every module of the `benchmark` package (the aggregation, the suite summaries and all
    they import from this checkout) and of the versions of the libraries whose numerics the rows depend on.

    The whole package rather than the aggregation's import closure: hashing 70 files' bytes takes about 10 ms, while
    finding the closure means parsing them (0.3 s per process); an edit elsewhere in the package costs one rebuild."""
    import hashlib
    from importlib.metadata import PackageNotFoundError, version

    from benchmark.io.provenance import PROJECT_ROOT

    def lib(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return ""

    package = PROJECT_ROOT / "benchmark"
    code = {p.relative_to(package).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(package.rglob("*.py"))}
    return stable_hash({"code": code, "libraries": {k: lib(k) for k in ("numpy", "pandas", "scipy", "pyarrow")},
                        "version": AGGREGATE_VERSION}, 64)


def _stat(path: Path) -> list[int] | None:
    from benchmark.io.filehash import stat_key

    try:
        return stat_key(path.stat())
    except OSError:
        return None


def listing(folder: Path) -> dict[str, Any]:
    """What the rows of the scores `folder` are computed from: the stat of its query index, of each of its score
    parts and of each edit PNG of the run (a replaced edit makes its scores stale), and the names of the
    quarantined parts (the mark of a partial row names them)."""
    from benchmark.io.score_cache import INDEX_FILE, QUARANTINE_DIR

    parts = []
    for p in sorted(folder.glob("part-*.parquet")):
        st = _stat(p)
        if st is not None:
            parts.append([p.name, *st])
    qdir = folder / QUARANTINE_DIR
    quarantined = sorted(p.name for p in qdir.iterdir()) if qdir.is_dir() else []
    return {"index": _stat(folder / INDEX_FILE), "parts": parts, "edits": edit_stats(folder.parent.parent),
            "quarantine": quarantined}


def edit_stats(run_dir: Path) -> str:
    """A digest of the (name, size, mtime_ns, ctime_ns, inode, device) of every edit PNG of `run_dir`: one stat per
    edit, enough to suspect a replaced edit (the rows are then recomputed, and its hash decides whether it changed).
    A digest rather than the list keeps the key cheap at 50k edits; '' when the run has no edits folder."""
    import hashlib
    import os

    from benchmark.stages.edit import EDITS_DIR

    try:
        with os.scandir(run_dir / EDITS_DIR) as it:
            entries = sorted((e for e in it if e.name.endswith(".png")), key=lambda e: e.name)
    except OSError:  # no edits folder (scores only)
        return ""
    h = hashlib.sha256()
    for e in entries:
        try:
            st = e.stat()
        except OSError:  # vanished meanwhile
            continue
        h.update(f"{e.name}/{st.st_size}/{st.st_mtime_ns}/{st.st_ctime_ns}/{st.st_ino}/{st.st_dev}\n".encode())
    return h.hexdigest()


def input_key(view: dict[str, Any], files: dict[str, Any], n_resamples: int, seed: int) -> str:
    """The cache key of one (run folder, metric set): `view` from `leaderboard.scorings`, `files` from `listing`."""
    from benchmark.tables.leaderboard import TABLES

    return stable_hash({"format": FORMAT, "code": code_version(), "tables": TABLES, "n_resamples": int(n_resamples),
                        "seed": int(seed), "view": {k: v for k, v in view.items() if k not in _VOLATILE},
                        "files": files}, 64)


def entry_path(results: Path, run_dir: Path, metric_sig: str) -> Path:
    """Where the entry of (run folder, metric set) lives: one slot per pair, overwritten when its inputs change."""
    return results / CACHE_DIR / f"{stable_hash([run_dir.relative_to(results).as_posix(), metric_sig], 32)}.json"


def _checksum(rows: Any) -> str:
    return stable_hash(rows, 64)


def _is_scalar(v: Any) -> bool:
    return v is None or isinstance(v, (str, bool, int, float))


def check_entry(entry: Any, key: str, run: str, metric_sig: str) -> dict[str, list[dict[str, Any]]]:
    """The rows of a cache entry read back from disk, or ValueError saying why it cannot be used ('stale' when its
    inputs changed: expected, not damage)."""
    from benchmark.tables.leaderboard import ROW_TABLES

    if not isinstance(entry, dict) or entry.get("format") != FORMAT:
        raise ValueError(f"not an entry of format {FORMAT}")
    if entry.get("run") != run or entry.get("metric_sig") != metric_sig:
        raise ValueError(f"entry of another run ({entry.get('run')!r}, {entry.get('metric_sig')!r})")
    if entry.get("key") != key:
        raise LookupError("stale")
    rows = entry.get("rows")
    if not isinstance(rows, dict) or sorted(rows) != sorted(ROW_TABLES):
        raise ValueError(f"rows must be a table name -> rows mapping of {sorted(ROW_TABLES)}")
    for name, table in rows.items():
        if not isinstance(table, list) or not all(
                isinstance(r, dict) and r.get("metric_sig") == metric_sig
                and all(isinstance(k, str) and _is_scalar(v) for k, v in r.items()) for r in table):
            raise ValueError(f"{name}: rows must be flat records of scalars of metric set {metric_sig}")
    if entry.get("checksum") != _checksum(rows):
        raise ValueError("checksum does not match the rows")
    return rows


def _read(path: Path, key: str, run: str, metric_sig: str, stats: CacheStats) -> dict[str, list] | None:
    from benchmark.io.score_cache import warn

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as err:
        why = f"unreadable ({type(err).__name__}: {err})"
    else:
        try:
            return check_entry(json.loads(text), key, run, metric_sig)
        except LookupError:  # its inputs changed since: the normal way an entry goes out of date
            return None
        except (ValueError, RecursionError) as err:  # json.JSONDecodeError is a ValueError
            why = str(err)
    stats.damaged += 1
    warn(f"{path}: aggregate cache entry not used ({why}); its rows are recomputed and the entry rewritten")
    return None


def _roundtrip(rows: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """`rows` as read back from their JSON: fresh and cached rows then take one path, so tables built from the
    cache are byte-identical to a full rebuild (JSON keeps key order, and Python writes floats exactly)."""
    return json.loads(json.dumps(rows, allow_nan=True, separators=(",", ":")))


def _write(path: Path, entry: dict[str, Any]) -> None:
    from benchmark.io.fileio import atomic_write_text
    from benchmark.io.score_cache import warn

    try:
        atomic_write_text(path, json.dumps(entry, allow_nan=True, separators=(",", ":")) + "\n")
    except OSError as err:  # a read-only results folder still gets its tables computed, just not cached
        warn(f"{path}: could not write the aggregate cache entry ({err}); tables are computed without it")


def summarise(results: Path, metric_sig: str | None, n_resamples: int, seed: int, *, cache: bool = True
              ) -> tuple[list[Any], CacheStats]:
    """Every (run folder, metric set)'s rows (`leaderboard.RunSummary`, in folder order) and what the cache did.

    With `cache` False nothing is read from or written to the cache (a full rebuild)."""
    from benchmark.io.fileio import remove_stale_tmp
    from benchmark.stages.score import scores_dir
    from benchmark.tables.leaderboard import (
        RunSummary,
        collect_run,
        iter_scorings,
        run_rows,
        warn_unknown_suites,
    )

    started = time.time()
    stats = CacheStats()
    out: list[RunSummary] = []
    seen: set[str] = set()
    for meta_path, view in iter_scorings(results, metric_sig):
        run_dir, sig = meta_path.parent, view["metric_sig"]
        folder = scores_dir(run_dir, sig)
        if not folder.is_dir():
            continue
        rel = run_dir.relative_to(results).as_posix()
        path = entry_path(results, run_dir, sig)
        seen.add(path.name)
        before = listing(folder)
        key = input_key(view, before, n_resamples, seed)
        rows = _read(path, key, rel, sig, stats) if cache else None
        if rows is not None:
            stats.reused += 1
            out.append(RunSummary(view, run_dir, rows))
            continue
        run = collect_run(meta_path, view)  # a run without valid rows still gets its PARTIAL 0/n rows
        if run is None:
            continue
        rows = _roundtrip(run_rows(run, n_resamples, seed))
        stats.computed += 1
        stats.computed_runs.append(f"{rel} [{sig}]")
        out.append(RunSummary(view, run_dir, rows))
        after = listing(folder)
        # store only when the rows are of the files there now: reading may quarantine a bad part (a removal, fine),
        # but a part added or rewritten meanwhile (a shard still scoring) means the rows may not be its rows
        before_parts = {tuple(p) for p in before["parts"]}
        if (cache and after["index"] == before["index"] and after["edits"] == before["edits"]
                and all(tuple(p) in before_parts for p in after["parts"])):
            entry = {"format": FORMAT, "run": rel, "metric_sig": sig, "key": input_key(view, after, n_resamples, seed),
                     "checksum": _checksum(rows), "rows": rows}
            _write(path, entry)
    warn_unknown_suites([(s.meta, s.path) for s in out])
    if cache and metric_sig is None:
        stats.pruned = _prune(results / CACHE_DIR, seen)
        if (results / CACHE_DIR).is_dir():  # temp files of writers killed before their rename
            remove_stale_tmp(results / CACHE_DIR, started, recursive=False)
    global LAST_STATS
    LAST_STATS = stats
    return out, stats


def _prune(folder: Path, keep: set[str]) -> int:
    """Delete the entries of (run folder, metric set) pairs that no longer exist; returns how many."""
    n = 0
    if not folder.is_dir():
        return 0
    for p in folder.iterdir():
        if _ENTRY_NAME.fullmatch(p.name) and p.name not in keep:
            try:
                p.unlink()
                n += 1
            except OSError:
                pass
    return n


def describe(stats: CacheStats, n_runs: int, seconds: float) -> str:
    """One line for logs: how many run summaries were reused and computed."""
    damaged = f", {stats.damaged} damaged entries replaced" if stats.damaged else ""
    return f"{n_runs} run summaries: {stats.reused} from the cache, {stats.computed} computed{damaged} in {seconds:.2f} s"
