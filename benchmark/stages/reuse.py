"""Extending a sample reuses the edits of the smaller samples it contains (docs/querysets.md#samples).

A sample of N (`queryset.sample=N`) contains every smaller sample of the same set, seed and types (nested draw,
`benchmark.querysets.sample`), but it is a query set of its own, so its run folder starts empty. Before the edit
stage, `reuse_nested_edits` looks for finished runs of such a smaller sample by the same editor signature (same
editor config, editor info, code, seed and profile: `<editor>-<signature>` is the folder name) and brings their
edits in, instead of editing those queries again:

- a source run is used only when its run.json records a sample of the same parent set (name and records hash),
  seed, types and pool, smaller than this one, and when it is finished: its edit log has a record for every query
  of that sample. Its query set is then checked, not trusted: the hash of this set's queries with those ids (records
  and files, computed now) must equal the hash the source run recorded, so the smaller sample is nested in this one
  and its queries, images and masks are the ones edited here.
- per query: the source's latest record is `ok` with this query's seed, its PNG exists and passes the edit stage's
  own output check (`validate_output`: RGB, the source image's size, not all black from a source that is not). The
  PNG is hard-linked (copied across file systems) under a temporary name and renamed into place, then logged with
  `reused_from` (the source run folder relative to the results folder, its query set and hash, its run id). A
  failed source edit is not reused: it is edited again here.
- nothing is read as code, and no score is reused: the score stage scores every query of this set itself, because
  a suite's set-level metrics (FID, hence IQ and Total) depend on the whole set, and scoring is cheap next to editing.

Determinism: each query's noise comes from its own generator seeded by (seed, query id), so an edit depends on the
other queries only through batch composition (a batched diffusion editor's PNG can differ by one 8-bit level with
the batch it ran in: the tolerance of any rerun at another batch size). A reused edit ran in the smaller run's
batches; the new queries run in batches of new queries only (reused edits are not re-edited as passengers, see
`benchmark.stages.edit.fixed_batches`). Weight-free editors give exactly the rows of a from-scratch run.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image

from benchmark.editing.editor import query_seed
from benchmark.io.fileio import append_jsonl, atomic_path
from benchmark.io.imageio import LIMITS, ImageInputError, load_rgb
from benchmark.io.types import EditRecord
from benchmark.stages.edit import (
    EDITS_LOG,
    InvalidOutput,
    edit_path,
    is_all_black,
    latest_records,
    record_json,
    validate_output,
)

# the fields of two samples' metadata that must agree for one to be nested in the other (`n` apart)
SAME_DRAW = ("parent", "parent_records_hash", "seed", "types", "pool", "set_size")
REUSED_KEY = "reused_from"  # the edit record's field naming where a reused edit came from


@dataclass
class ReuseStats:
    """What `reuse_nested_edits` brought in: `reused` edits, per source run folder (relative to the results folder),
    and the source runs it looked at but did not use, with why."""

    reused: int = 0
    sources: dict[str, dict[str, Any]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Source:
    run_dir: Path
    rel: str
    queryset: str
    queryset_hash: str
    records: dict[str, dict]


def nested_runs(results: Path, full: Any, run_dir: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    """(run folder, its run.json) of every run by this run folder's editor signature on a smaller sample of the same
    draw as `full` (largest sample first). Only run.json's fields are matched here; `_source` checks the rest."""
    info = full.meta.get("sample")
    if not isinstance(info, dict):
        return
    found = []
    for meta_path in (results / "runs").glob(f"*/{run_dir.name}/run.json"):
        if meta_path.parent.resolve() == run_dir.resolve():
            continue
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # unreadable: not a source; its own run reports it
        other = meta.get("sample") if isinstance(meta, dict) else None
        if not isinstance(other, dict) or not isinstance(other.get("n"), int):
            continue
        if other["n"] < info["n"] and all(other.get(k) == info.get(k) for k in SAME_DRAW):
            found.append((other["n"], meta_path.parent, meta))
    for _, path, meta in sorted(found, key=lambda f: -f[0]):
        yield path, meta


def _source(results: Path, full: Any, src: Path, meta: dict[str, Any]) -> tuple[_Source | None, str]:
    """The source run when it is finished and its query set is, checked now, nested in `full`; else (None, why)."""
    from benchmark.querysets.io import content_hash, file_digests

    rel = src.relative_to(results).as_posix()
    try:
        records = latest_records(src)
    except Exception as err:  # noqa: BLE001 - a corrupt log is that run's error to report; here it is no source
        return None, f"{rel}: edit log unreadable ({err})"
    n = meta["sample"]["n"]
    if len(records) != n:
        return None, f"{rel}: not finished ({len(records)} of {n} queries edited)"
    by_id = {q.id: q for q in full.queries}
    if not set(records) <= set(by_id):
        return None, f"{rel}: its queries are not all in {full.name}"
    queries = [q for q in full.queries if q.id in records]  # the parent's file order, as the sample keeps it
    if content_hash(queries, file_digests(full.root, queries, full.meta)) != meta.get("queryset_hash"):
        return None, f"{rel}: its query set hash differs from these queries' now (records or files changed)"
    return _Source(src, rel, str(meta.get("queryset")), str(meta.get("queryset_hash")), records), ""


def _valid_png(path: Path, size: tuple[int, int], source_all_black: bool) -> bool:
    """The edit stage's output check on a stored edit: the header's size first (nothing large is decoded), then the
    decoded image as `validate_output` checks the editor's."""
    try:
        with Image.open(path) as im:
            if im.size != size or im.format != "PNG":
                return False
            im.load()
            validate_output(im, size, source_all_black)
    except (OSError, ValueError, InvalidOutput, Image.DecompressionBombError):
        return False
    return True


def _same_file(a: Path, b: Path) -> bool:
    """One file (a hard link) or equal bytes."""
    try:
        return os.path.samefile(a, b) or a.read_bytes() == b.read_bytes()
    except OSError:
        return False


def reuse_summary(run_dir: Path) -> dict[str, dict[str, Any]]:
    """run.json's `reused_from`: per source run folder, its query set and hash and how many of this run's current
    edits came from it (read from the edit log, so shards and reruns add up); {} when none."""
    out: dict[str, dict[str, Any]] = {}
    if not (run_dir / EDITS_LOG).is_file():
        return out
    for rec in latest_records(run_dir).values():
        where = rec.get(REUSED_KEY)
        if rec.get("status") == "ok" and isinstance(where, dict) and isinstance(where.get("run"), str):
            entry = out.setdefault(where["run"], {"queryset": where.get("queryset"),
                                                  "queryset_hash": where.get("queryset_hash"), "edits": 0})
            entry["edits"] += 1
    return out


def _place(src: Path, dst: Path) -> None:
    """Hard-link `src` at `dst` (a copy across file systems), atomically: a temporary name, then a rename."""
    with atomic_path(dst) as tmp:
        tmp.unlink()
        try:
            os.link(src, tmp)
        except OSError:
            shutil.copyfile(src, tmp)


def reuse_nested_edits(queryset: Any, full: Any, results: Path, run_dir: Path, *, seed: int,
                       run_id: str = "") -> ReuseStats:
    """Bring into `run_dir` the validated edits of finished runs of smaller nested samples (module docstring) for the
    queries of `queryset` (this process's selection of the sample `full`) that have no edit here yet."""
    stats = ReuseStats()
    if not isinstance(full.meta.get("sample"), dict):
        return stats
    here = latest_records(run_dir) if (run_dir / EDITS_LOG).is_file() else {}
    # no record here: not edited, or a reused PNG whose record a kill lost (it is logged again below, not re-placed)
    wanted = [q for q in queryset.queries if q.id not in here]
    for src_dir, meta in nested_runs(results, full, run_dir):
        if not wanted:
            break
        source, why = _source(results, full, src_dir, meta)
        if source is None:
            stats.skipped.append(why)
            continue
        records, left = [], []
        for q in wanted:
            rec = source.records.get(q.id)
            png = edit_path(src_dir, q.id)
            if rec is None or rec.get("status") != "ok" or rec.get("seed") != query_seed(seed, q.id) \
                    or not png.is_file():
                left.append(q)
                continue
            try:  # the source's size and blackness, read as the edit stage reads them
                image = load_rgb(queryset.path(q.image), min_side=LIMITS.min_source_side, max_pixels=LIMITS.max_pixels)
            except ImageInputError:
                left.append(q)  # the edit stage records this query's failure itself
                continue
            if not _valid_png(png, image.size, is_all_black(image)):
                left.append(q)
                continue
            mine = edit_path(run_dir, q.id)
            if mine.is_file():
                if not _same_file(png, mine):
                    left.append(q)  # this run's own edit without its record: the edit stage recovers it
                    continue
            else:
                _place(png, mine)
            where = {"run": source.rel, "queryset": source.queryset, "queryset_hash": source.queryset_hash,
                     "run_id": rec.get("run_id", "")}
            reused = EditRecord(q.id, "ok", rec["seed"], seconds=rec.get("seconds"), run_id=run_id,
                                rewritten=rec.get("rewritten") if isinstance(rec.get("rewritten"), str) else None)
            records.append({**record_json(reused), REUSED_KEY: where})
        append_jsonl(run_dir / EDITS_LOG, records)  # after the PNGs: the PNG stays the commit point
        if records:
            stats.reused += len(records)
            stats.sources[source.rel] = {"queryset": source.queryset, "queryset_hash": source.queryset_hash,
                                         "edits": len(records)}
        wanted = left
    return stats
