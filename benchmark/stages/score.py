"""Score stage: one row per query with every metric's raw value, written as Parquet parts (resumable).

Rows live in `<run dir>/scores/<metric signature>/part-<time ns>-<host>-<pid>-<n>.parquet` (names sort in write
order and never collide between shards running at once, on one host or several). Beside them, `queries.json` lists the *full* query set (ids, edit
types, classes, whether the metrics score each query) so aggregation can say how complete a run is.

A rerun reuses a row only when its status is unchanged and, for an ok row, when the sha256 of the edit PNG it
scored (`edit_sha256`) equals that of the PNG there now; it scores only the rest, so killing the stage loses at
most one part. Every part is validated when read (`benchmark.io.score_cache`); a bad one is moved into
`quarantine/` with a warning, and its rows are recomputed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.io.console import reason_group, shorten
from benchmark.io.fileio import atomic_path, atomic_write_text
from benchmark.io.hashing import canonical_json
from benchmark.io.imageio import ImageInputError, load_mask, load_rgb, to_float_tensor
from benchmark.io.score_cache import (
    ROW_KEYS,
    SCORES_DIR,
    SESSION_COLUMNS,
    QueryIndex,
    read_query_index,
    read_valid_parts,
    write_query_index,
)
from benchmark.io.types import Query
from benchmark.metrics.base import NEED_EDIT_MASK, NEED_TARGET_IMAGE, PairwiseMetric, ScoreBatch
from benchmark.metrics.sizes import fit_to_source
from benchmark.querysets.io import QuerySet
from benchmark.stages.edit import (
    EDITS_DIR,
    FAILURES_LOG,
    FailureLog,
    edit_path,
    failure_summary,
    latest_records,
)

PART_ROWS = 512  # rows per Parquet part: the most a kill can cost

__all__ = ["ROW_KEYS", "SCORES_DIR", "ScoreStats", "read_scores", "run_score_stage", "run_suite_stage", "scores_dir"]


@dataclass(frozen=True)
class ScoreStats:
    total: int  # queries of the selection the metrics score (excluded ones left out)
    computed: int
    reused: int
    seconds: float
    model_seconds: float
    failed: int = 0  # rows this call wrote as failed because scoring itself failed
    failed_total: int = 0  # queries of the selection whose current row is failed (this call's and earlier ones)
    edit_failed: int = 0  # of those, the ones whose edit failed (scoring had nothing to score)
    reasons: tuple[tuple[str, int], ...] = ()  # (reason, count) over the failed rows, most common first
    failures_log: str = ""  # where their tracebacks are
    by_others: int = 0  # queries another worker on this run folder scored while this call ran
    missing: int = 0  # queries of the selection without an edit and without a failed edit (the leaderboard's missing)

    @property
    def attempted(self) -> int:
        """The queries scored or failed: `total` less `missing` (the failed share's denominator)."""
        return self.total - self.missing

    def failure_summary(self, top: int = 3) -> str:
        """'6 of 14 failed: 6 x ...; tracebacks in <log>' (empty when nothing failed)."""
        return failure_summary(self.failed_total, self.attempted, self.reasons, self.failures_log, top)


def part_name(n: int) -> str:
    """Unique, chronologically sortable part file name (shards of one run may write concurrently)."""
    from benchmark.io.fileio import _host

    # the host too: shards on several machines (Slurm) share the folder, and their pids may coincide
    return f"part-{time.time_ns():020d}-{_host()}-{os.getpid()}-{n:05d}.parquet"


def scores_dir(run_dir: Path, metric_sig: str) -> Path:
    return run_dir / SCORES_DIR / metric_sig


def read_scores(run_dir: Path, metric_sig: str, columns: Sequence[str] | None = None,
                valid_ids: frozenset[str] | None = None):
    """All score rows of a run for one metric signature (last part wins per query), as a DataFrame.

    Every part is validated first (see `score_cache.check_part`); a bad one is quarantined with a warning and its
    rows are absent here. `valid_ids` are the ids of the run's query set (default: those of `queries.json`, when
    there is one). `columns` limits what is read (e.g. skip the per-row FID features when only statuses are
    needed)."""
    import pandas as pd

    folder = scores_dir(run_dir, metric_sig)
    if valid_ids is None:
        index = read_query_index(folder)
        valid_ids = index.ids if index is not None else None
    frames = read_valid_parts(folder, valid_ids, columns)
    if not frames:
        return pd.DataFrame(columns=list(columns or ROW_KEYS))
    df = pd.concat(frames, ignore_index=True)
    return df.drop_duplicates("query_id", keep="last").reset_index(drop=True)


def edit_hashes(run_dir: Path, queries: Sequence[Query]) -> dict[str, str]:
    """sha256 of the edit PNG of each of `queries` that has one (stat-cached: `benchmark.io.filehash`, so a rerun reads
    only edits written since). An edit that vanishes or cannot be read gets `unreadable: <why>`, which matches no
    stored row; the loader then records the failure with its reason."""
    from benchmark.io.filehash import digests
    from benchmark.io.hashing import file_sha256

    folder = run_dir / EDITS_DIR
    stats: dict[str, os.stat_result] = {}
    out: dict[str, str] = {}
    for q in queries:
        try:
            stats[q.id] = edit_path(run_dir, q.id).stat()
        except OSError as err:
            out[q.id] = f"unreadable: {err.strerror}"
    try:
        shas = digests(folder, [(f"{qid}.png", st) for qid, st in stats.items()])
        return out | {qid: shas[f"{qid}.png"] for qid in stats}
    except OSError:  # one vanished or unreadable after its stat: hash one by one to name it
        pass
    for qid in stats:
        try:
            out[qid] = file_sha256(str(edit_path(run_dir, qid)))
        except OSError as err:
            out[qid] = f"unreadable: {err.strerror}"
    return out


@dataclass
class _Sample:
    query: Query
    source: Any = None
    edit: Any = None
    edit_mask: Any = None
    target: Any = None
    error: str = ""


class _Samples:
    """Map-style dataset loading everything one query's metrics may need."""

    def __init__(self, queryset: QuerySet, queries: Sequence[Query], run_dir: Path, needs: frozenset[str]):
        self.queryset, self.queries, self.run_dir, self.needs = queryset, queries, run_dir, needs

    def __len__(self) -> int:
        return len(self.queries)

    def __getitem__(self, i: int) -> _Sample:
        import torch

        q = self.queries[i]
        s = _Sample(q)
        try:
            source = load_rgb(self.queryset.path(q.image))
            # an edit of another size: resized to the source's (bicubic), or refused when that would stretch it
            edit = fit_to_source(load_rgb(edit_path(self.run_dir, q.id)), source.size)
            s.source, s.edit = to_float_tensor(source), to_float_tensor(edit)
            if NEED_EDIT_MASK in self.needs and q.edit_mask:
                s.edit_mask = torch.from_numpy(load_mask(self.queryset.path(q.edit_mask), source.size))
            if NEED_TARGET_IMAGE in self.needs and q.target_image:
                target = load_rgb(self.queryset.path(q.target_image))
                if target.size != source.size:
                    raise ImageInputError(f"ground-truth target is {target.size}, source is {source.size}")
                s.target = to_float_tensor(target)
        except ImageInputError as err:
            s.error = str(err)
        return s


def _collate(samples: list[_Sample]) -> ScoreBatch:
    import torch

    def stack_optional(values: list[Any], like: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        present = torch.tensor([v is not None for v in values])
        if not present.any():
            return None, present
        return torch.stack([v if v is not None else torch.zeros_like(like) for v in values]), present

    src = torch.stack([s.source for s in samples])
    mask, has_mask = stack_optional([s.edit_mask for s in samples], torch.zeros(src.shape[-2:], dtype=torch.bool))
    target, has_target = stack_optional([s.target for s in samples], src[0])
    return ScoreBatch(
        queries=[s.query for s in samples], source=src, edit=torch.stack([s.edit for s in samples]),
        edit_mask=mask, has_edit_mask=has_mask, target=target, has_target=has_target,
    )


def _base_row(q: Query, status: str, reason: str = "", edit_sha256: str = "") -> dict[str, Any]:
    """The keys of every row of `q`; a query of a multi-turn session adds its `session` and `turn`."""
    row = {"query_id": q.id, "image_id": q.image_id, "edit_type": q.edit_type, "object_class": q.object_class,
           "status": status, "reason": reason, "edit_sha256": edit_sha256}
    if q.session is not None:
        row |= {"session": q.session, "turn": int(q.turn or 0)}
    return row


Item = tuple[Query, str, str]  # a query with no up-to-date row: (query, status it gets now, reason)


def _up_to_date(old: tuple[str, str, str] | None, status: str, reason: str, sha: str) -> bool:
    """A stored (status, reason, edit sha256) row stands: an ok row must have scored these bytes; any other row must
    state the current reason (a retried edit may have failed differently)."""
    return old is not None and old[0] == status and (old[2] == sha if status == "ok" else old[1] == reason)


def _pending(queryset: QuerySet, run_dir: Path, metric_sig: str, index: QueryIndex,
             excluded: Callable[[Query], str] | None = None) -> tuple[list[Item], dict[str, str]]:
    """(queries without an up-to-date row, in selection order, with the status each gets now; sha256 of every edit
    PNG of the selection). Status ok: to score; any other: a row stating why it cannot be scored.

    A query is skipped when its stored row already has the status it would get now and, for an ok row, was
    computed from an edit file with the same sha256 (for any other row: states the same reason) (`edit_hashes`: only PNGs new since the last run are read).
    `excluded(q)` returns a reason when a suite does not score `q` at all (status `excluded`).
    """
    edits = latest_records(run_dir)
    existing = read_scores(run_dir, metric_sig, columns=("query_id", "status", "reason", "edit_sha256"),
                           valid_ids=index.ids)
    have = ({qid: (st, why, sha) for qid, st, why, sha in zip(existing["query_id"], existing["status"],
                                                               existing["reason"], existing["edit_sha256"], strict=True)}
            if len(existing) else {})
    state: list[Item] = []
    for q in queryset.queries:
        rec = edits.get(q.id)
        why_excluded = excluded(q) if excluded else ""
        if why_excluded:
            state.append((q, "excluded", why_excluded))
        elif edit_path(run_dir, q.id).is_file():
            state.append((q, "ok", ""))
        else:
            reason = rec.get("reason", "") if rec else "no edit (edit stage not run for this query)"
            state.append((q, "failed" if rec else "missing", reason))
    hashes = edit_hashes(run_dir, [q for q, status, _ in state if status == "ok"])
    return [(q, st, why) for q, st, why in state if not _up_to_date(have.get(q.id), st, why, hashes.get(q.id, ""))], hashes


def _index_for(queryset: QuerySet, full_set: QuerySet | None, out_dir: Path,
               excluded: Callable[[Query], str] | None = None) -> QueryIndex:
    """Write (if changed) and return the index of the full query set this selection belongs to."""
    full = full_set if full_set is not None else queryset
    index = write_query_index(out_dir, full, excluded)
    stray = [q.id for q in queryset.queries if q.id not in index.ids]
    if stray:  # a programming error, not bad input: the selection must come from the set it is counted against
        raise ValueError(f"{len(stray)} selected queries (e.g. {stray[:3]}) are not in the full set {full.name}")
    return index


def metric_meta(metrics: Mapping[str, PairwiseMetric]) -> dict[str, dict[str, Any]]:
    """name -> {version, higher_is_better, description} of pairwise metrics (metrics.json, run.json's `metrics`)."""
    return {name: {"version": m.info.version, "higher_is_better": m.info.higher_is_better,
                   "description": m.info.description} for name, m in metrics.items()}


def _begin(queryset: QuerySet, run_dir: Path, metric_sig: str, full_set: QuerySet | None, metrics_meta: dict,
           excluded: Callable[[Query], str] | None = None) -> tuple[Path, QueryIndex, list[Item], dict[str, str], set[str]]:
    """Start of both score stages: write `metrics.json` and the query index, then find what is pending.

    Returns (scores folder, query index, items without an up-to-date row, edit sha256 by query id, names of the
    parts read: a part not among them was written by another worker since)."""
    out_dir = scores_dir(run_dir, metric_sig)
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out_dir / "metrics.json", canonical_json(metrics_meta))
    index = _index_for(queryset, full_set, out_dir, excluded)
    seen = {p.name for p in out_dir.glob("part-*.parquet")}  # before reading: a part written later is read again
    items, hashes = _pending(queryset, run_dir, metric_sig, index, excluded)
    return out_dir, index, items, hashes, seen


def _claimed(run_dir: Path, metric_sig: str, items: list[Item], hashes: dict[str, str], seen: set[str],
             index: QueryIndex, counts: dict[str, int]) -> Iterator[list[Item]]:
    """The pending items in chunks of PART_ROWS that this worker claimed (`benchmark.io.locking.Claims`), less those
    another worker wrote an up-to-date row for meanwhile (counted in `counts["by_others"]`). The caller writes each
    chunk's rows as parts before asking for the next one: only then are its claims released, so another worker
    finds the rows. A chunk another worker holds is put off and taken up once its claims go (that worker finished
    it, or was killed and left it here)."""
    from benchmark.io.locking import Claims
    from benchmark.stages.edit import claims_dir

    claims = Claims(claims_dir(run_dir, f"score-{metric_sig}"))
    claims.remove_stale()  # a killed worker's files: they claim nothing, and a person would think the run stuck
    size = max(1, PART_ROWS)
    pending = [items[k:k + size] for k in range(0, len(items), size)]
    fresh: dict[str, tuple[str, str, str]] = {}  # rows of the parts written since `_begin` read them
    try:
        while pending:
            deferred = []
            for chunk in pending:
                ids = [q.id for q, *_ in chunk]
                if not claims.try_claim(ids):
                    deferred.append(chunk)
                    continue
                fresh |= _rows_since(scores_dir(run_dir, metric_sig), seen, index)
                still = [it for it in chunk if not _up_to_date(fresh.get(it[0].id), it[1], it[2], hashes.get(it[0].id, ""))]
                counts["by_others"] += len(chunk) - len(still)
                if still:
                    yield still
                claims.release(ids)
            if deferred:
                claims.wait([q.id for q, *_ in deferred[0]])
            pending = deferred
    finally:
        claims.release_all()


def _rows_since(folder: Path, seen: set[str], index: QueryIndex) -> dict[str, tuple[str, str, str]]:
    """(status, reason, edit sha256) by query id of the rows in parts not in `seen` (which it extends)."""
    from benchmark.io.score_cache import BadCacheFile, check_part, quarantine

    out: dict[str, tuple[str, str, str]] = {}
    for path in sorted(folder.glob("part-*.parquet")):
        if path.name in seen:
            continue
        seen.add(path.name)
        try:
            df = check_part(path, index.ids, ("query_id", "status", "reason", "edit_sha256"))
        except BadCacheFile as err:
            quarantine(path, str(err))
            continue
        out.update({qid: (st, why, sha) for qid, st, why, sha in zip(df["query_id"], df["status"], df["reason"],
                                                                      df["edit_sha256"], strict=True)})
    return out


EDIT_FAILED = "edit failed: "  # prefix of a failed row's reason, in the counts, when the edit failed


def _score_stats(queryset: QuerySet, run_dir: Path, metric_sig: str, *, computed: int, reused: int, failed: int,
                 start: float, model_seconds: float, by_others: int = 0) -> ScoreStats:
    """The stage's counts from the rows now on disk: every failed row of the selection counts, whichever call wrote
    it, as the leaderboard's `n_failed` does; a row without `edit_sha256` failed because its edit did."""
    from collections import Counter

    ids = {q.id for q in queryset.queries}
    rows = read_scores(run_dir, metric_sig, columns=("query_id", "status", "reason", "edit_sha256"))
    rows = rows[rows["query_id"].isin(ids)]
    reasons: Counter[str] = Counter()
    edit_failed = 0
    for status, reason, sha in zip(rows["status"], rows["reason"], rows["edit_sha256"], strict=True):
        if status != "failed":
            continue
        no_edit = not isinstance(sha, str) or not sha
        edit_failed += no_edit
        text = (EDIT_FAILED if no_edit else "") + (reason if isinstance(reason, str) and reason else "unknown")
        reasons[shorten(reason_group(text))] += 1  # grouped by cause: temporary names and addresses out
    total = len(ids) - int((rows["status"] == "excluded").sum())
    return ScoreStats(total, computed, reused, time.perf_counter() - start, model_seconds, failed=failed,
                      failed_total=sum(reasons.values()), edit_failed=edit_failed, reasons=tuple(reasons.most_common()),
                      failures_log=str(run_dir / FAILURES_LOG), by_others=by_others,
                      missing=int((rows["status"] == "missing").sum()))


class _PartWriter:
    """Buffers rows and writes them as Parquet parts of PART_ROWS rows (atomically; a kill loses one part)."""

    def __init__(self, out_dir: Path, rows: list[dict[str, Any]], columns: Sequence[str] | None = None) -> None:
        self.out_dir, self.rows, self.columns, self.parts = out_dir, list(rows), columns, 0

    def add(self, rows: list[dict[str, Any]]) -> None:
        self.rows.extend(rows)
        self.flush()

    def flush(self, final: bool = False) -> None:
        import pandas as pd

        while self.rows and (final or len(self.rows) >= PART_ROWS):
            chunk, self.rows = self.rows[:PART_ROWS], self.rows[PART_ROWS:]
            # a part with a session's rows keeps their session and turn (the fixed columns would drop them)
            columns = ([*self.columns, *[c for c in SESSION_COLUMNS if any(c in r for r in chunk)]]
                       if self.columns else None)
            frame = pd.DataFrame(chunk, columns=columns)
            if "turn" in frame:  # whole numbers, null on a row of no session (a set mixing both)
                frame["turn"] = frame["turn"].astype("Int64")
            with atomic_path(self.out_dir / part_name(self.parts)) as tmp:
                frame.to_parquet(tmp, index=False)
            self.parts += 1


def run_score_stage(
    queryset: QuerySet,
    run_dir: Path,
    metrics: Mapping[str, PairwiseMetric],
    metric_sig: str,
    *,
    batch_size: int = 8,
    num_workers: int = 0,
    progress: bool = True,
    full_set: QuerySet | None = None,
    run_id: str = "",
    label: str = "",
    fail_fast: bool = False,
) -> ScoreStats:
    """Score every query of `queryset` for which no up-to-date row exists.

    `full_set` is the whole query set `queryset` was selected from (shard / limit); default `queryset` itself.
    A query whose inputs cannot be loaded, or on which a metric raises, gets a failed row with the reason, and an
    entry (with the traceback, when there is one) in the run's failures log, labelled `score <label>`; with
    `fail_fast` the first such error is raised instead.
    """
    from torch.utils.data import DataLoader
    from tqdm import tqdm

    start = time.perf_counter()
    out_dir, index, items, hashes, seen = _begin(queryset, run_dir, metric_sig, full_set, metric_meta(metrics))
    names = list(metrics)
    writer = _PartWriter(out_dir, [], list(ROW_KEYS) + names)

    needs = frozenset().union(*(m.info.needs for m in metrics.values())) if metrics else frozenset()
    model_seconds = 0.0
    failed = 0
    buckets: dict[tuple[int, ...], list[_Sample]] = {}
    flog = FailureLog(run_dir / FAILURES_LOG, run_id, f"score {label}".rstrip())

    def fail(sample: _Sample, reason: str, err: BaseException | None) -> None:
        nonlocal failed
        failed += 1
        flog.add(sample.query.id, err, reason)
        writer.rows.append(_base_row(sample.query, "failed", reason, hashes[sample.query.id]) | {n: np.nan for n in names})

    def score_bucket(samples: list[_Sample]) -> None:
        nonlocal model_seconds
        t0 = time.perf_counter()
        try:
            values = _metric_values(metrics, _collate(samples), len(samples))
        except _MetricError as err:
            if fail_fast:
                raise err.__cause__ from None
            error: _MetricError | None = err
        else:
            error = None
        model_seconds += time.perf_counter() - t0
        if error is not None:
            if len(samples) == 1:
                fail(samples[0], str(error), error.__cause__)
                return
            for s in samples:  # retried alone (outside the except block), so one bad query cannot sink the others
                score_bucket([s])
            return
        for i, s in enumerate(samples):
            writer.rows.append(_base_row(s.query, "ok", "", hashes[s.query.id]) | {n: float(values[n][i]) for n in names})

    counts = {"by_others": 0}
    computed = 0
    bar = tqdm(total=sum(st == "ok" for _, st, _ in items), desc="score", unit="img", disable=not progress, leave=False)
    for chunk in _claimed(run_dir, metric_sig, items, hashes, seen, index, counts):
        writer.rows += [_base_row(q, st, why) for q, st, why in chunk if st != "ok"]
        todo = [q for q, st, _ in chunk if st == "ok"]
        computed += len(todo)
        loader = DataLoader(_Samples(queryset, todo, run_dir, needs), batch_size=None, shuffle=False,
                            num_workers=num_workers)
        for sample in loader if todo else []:
            if sample.error:
                if fail_fast:
                    raise ImageInputError(f"{sample.query.id}: {sample.error}")
                fail(sample, sample.error, None)
            else:
                key = tuple(sample.source.shape)
                buckets.setdefault(key, []).append(sample)
                if len(buckets[key]) >= batch_size:
                    score_bucket(buckets.pop(key))
            bar.update(1)
        for key in list(buckets):
            score_bucket(buckets.pop(key))
        writer.flush(final=True)  # before the chunk's claims go: another worker then finds its rows
    bar.close()
    return _score_stats(queryset, run_dir, metric_sig, computed=computed, reused=len(queryset) - len(items),
                        failed=failed, start=start, model_seconds=model_seconds, by_others=counts["by_others"])


class _MetricError(RuntimeError):
    """A metric raised on a batch (its cause) or returned the wrong shape; the message names the metric."""


def _metric_values(metrics: Mapping[str, PairwiseMetric], batch: ScoreBatch, n: int) -> dict[str, np.ndarray]:
    """Every metric's values on one batch; any error becomes a _MetricError naming the metric."""
    import torch

    values = {}
    with torch.no_grad():
        for name, metric in metrics.items():
            try:
                v = metric.score(batch)
                if v.shape != (n,):
                    raise ValueError(f"returned shape {tuple(v.shape)} for a batch of {n}")
                values[name] = v.double().numpy()
            except Exception as err:  # noqa: BLE001 - any metric error becomes that query's recorded failure
                raise _MetricError(f"{type(err).__name__} in metric {name}: {err}") from err
    return values


def run_suite_stage(
    queryset: QuerySet,
    run_dir: Path,
    suite: Any,
    metric_sig: str,
    *,
    prompt_kind: str,
    num_workers: int = 0,
    progress: bool = True,
    full_set: QuerySet | None = None,
    run_id: str = "",
    label: str = "",
    fail_fast: bool = False,
) -> ScoreStats:
    """Like `run_score_stage`, for a query-level suite (HATIE) that needs the whole query, not an image pair.

    Queries the suite does not apply to (obj_remove for description-based editors) get status `excluded`. A failed
    row the suite returns is counted and logged with its reason (suites report reasons, not tracebacks); with
    `fail_fast` the first one raises.
    """
    start = time.perf_counter()
    by_id = {q.id: q for q in queryset.queries}

    def excluded(q: Query) -> str:
        if suite.applies_to(q, prompt_kind):
            return ""
        return f"{suite.info.name} does not score {q.edit_type} for {prompt_kind}-based editors"

    out_dir, index, items, hashes, seen = _begin(queryset, run_dir, metric_sig, full_set, {
        "suite": suite.info.name, "version": suite.info.version, "components": suite.components(),
        "columns": list(suite.columns),
    }, excluded)
    writer = _PartWriter(out_dir, [])  # columns vary by task: parts keep whatever the rows carry
    flog = FailureLog(run_dir / FAILURES_LOG, run_id, f"score {label}".rstrip())
    failed = computed = 0
    counts = {"by_others": 0}
    for chunk in _claimed(run_dir, metric_sig, items, hashes, seen, index, counts):
        writer.rows += [_base_row(q, st, why) for q, st, why in chunk if st != "ok"]
        todo = [q for q, st, _ in chunk if st == "ok"]
        computed += len(todo)
        for batch in suite.score_queries(queryset, todo, [edit_path(run_dir, q.id) for q in todo], work_dir=run_dir,
                                         num_workers=num_workers, progress=progress) if todo else []:
            rows = [_base_row(by_id[qid := r.pop("query_id")], r.pop("status"), r.pop("reason"), hashes[qid]) | r
                    for r in batch]
            for row in rows:
                if row["status"] == "failed":
                    if fail_fast:
                        raise RuntimeError(f"{suite.info.name} failed on {row['query_id']}: {row['reason']}")
                    failed += 1
                    flog.add(row["query_id"], None, row["reason"])
            writer.add(rows)
        writer.flush(final=True)  # before the chunk's claims go: another worker then finds its rows
    model_seconds = sum(suite.model_seconds().values()) if hasattr(suite, "model_seconds") else 0.0
    return _score_stats(queryset, run_dir, metric_sig, computed=computed, reused=len(queryset) - len(items),
                        failed=failed, start=start, model_seconds=model_seconds, by_others=counts["by_others"])


def is_suite(metric: Any) -> bool:
    """A query-level suite (HATIE) rather than a pairwise image metric."""
    return hasattr(metric, "score_queries")
