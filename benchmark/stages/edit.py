"""Edit stage: run an editor over a query set into a content-addressed folder, resumably.

Layout of one run folder (`results/runs/<queryset>-<hash>/<editor>-<signature>/`):
    edits/<query id>.png   one image per successful query, written atomically (the PNG is the commit point)
    edits.jsonl            one record per attempt: status, seed, seconds, reason, error type, run id
    failures.log           one entry per failed attempt: time, run id, query id, exception and its traceback

A rerun skips queries whose PNG exists and, unless `retry_failed`, queries recorded as failed. A PNG whose record
was lost (killed between rename and log append) gets a `recovered` record, never a recomputation; a PNG whose
worker still holds its claim is not lost, it is being logged, so it gets no record here (one record per query).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from PIL import Image

from benchmark.editing.editor import Editor, query_seed
from benchmark.io.console import reason_group, shorten
from benchmark.io.fileio import append_jsonl, read_jsonl_tolerant
from benchmark.io.imageio import LIMITS, ImageInputError, load_rgb, save_png
from benchmark.io.types import EditRecord, Query
from benchmark.querysets.io import QuerySet
from benchmark.stages.turn_keys import TurnEditRecord, pixel_sha256, png_input_sha256, save_keyed_png

log = logging.getLogger(__name__)
T = TypeVar("T")

EDITS_DIR = "edits"
EDITS_LOG = "edits.jsonl"
FAILURES_LOG = "failures.log"
# zlib level for edited images. Measured on tiny-model outputs (256 px): level 6 (PIL's default) 17.6 ms per image,
# level 1 3.6 ms for 17% larger files. The writer thread overlaps encoding with the next model call, but the last
# batch's writes are not overlapped and the encoder contends for the GIL. Lossless either way.
EDIT_PNG_LEVEL = 1


@dataclass(frozen=True)
class EditStats:
    total: int
    computed: int
    skipped: int  # queries with an edit from before this call (neither missing nor a failure left as it is)
    failed: int  # failed in this call
    seconds: float
    failed_total: int = 0  # queries of the set whose latest record is a failure (this call's and earlier ones)
    reasons: tuple[tuple[str, int], ...] = ()  # (reason, count) over those, most common first
    failures_log: str = ""  # where their tracebacks are
    by_others: int = 0  # queries another worker on this run folder edited or failed while this call ran
    # the editor's counted work in this call (`Editor.work_counts()` after minus before; {} for an editor that
    # counts nothing): UNet sample evaluations, inversions computed / reused (docs/results.md, "Counting the work")
    work: dict[str, int] = field(default_factory=dict)
    # queries the editor has no output for by design (`Editor.missing`: a folder of edits covering part of the set):
    # never attempted, so neither failed nor in the failed share's denominator; the leaderboard counts them missing
    missing: int = 0
    failed_before: int = 0  # queries whose earlier failure this call left as it is (retry_failed=false)

    @property
    def attempted(self) -> int:
        """Queries of the set the editor has (or had) an output for: `total` less `missing`."""
        return self.total - self.missing

    def failure_summary(self, top: int = 3) -> str:
        """'16 of 16 failed: 16 x RuntimeError: ...; tracebacks in <log>' (empty when nothing failed)."""
        return failure_summary(self.failed_total, self.attempted, self.reasons, self.failures_log, top)

    def work_per_query(self) -> dict[str, float]:
        """`work` divided by the queries computed (edited or failed) in this call; {} when none was."""
        return {k: v / self.computed for k, v in self.work.items()} if self.computed else {}

    def work_summary(self) -> str:
        """'UNet per query: 24 forward, 6 forward+backward; inversions: 1 computed, 3 reused' ('' when the editor
        counts nothing; totals instead of per-query figures when no query was computed)."""
        return work_summary(self.work, self.computed)


_UNET_LABELS = {"unet_forward": "forward", "unet_forward_backward": "forward+backward"}
_TRANSFORMER_LABELS = {"transformer_forward": "forward", "transformer_forward_backward": "forward+backward"}
_INVERSION_LABELS = {"inversions_computed": "computed", "inversions_reused": "reused"}


def _number(x: float) -> str:
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:,.1f}"


def work_summary(work: dict[str, int], computed: int) -> str:
    """The console's words for an edit stage's counted work: UNet evaluations per query computed (totals when no
    query was), inversions and any other counter as totals; only the keys present ('' for none)."""
    parts = []
    for model, labels in (("UNet", _UNET_LABELS), ("transformer", _TRANSFORMER_LABELS)):
        counted = [(label, work[k]) for k, label in labels.items() if k in work]
        if counted:
            what = f"{model} per query" if computed else model
            parts.append(f"{what}: " + ", ".join(f"{_number(v / computed if computed else v)} {label}"
                                                for label, v in counted))
    inversions = [(label, work[k]) for k, label in _INVERSION_LABELS.items() if k in work]
    if inversions:
        parts.append("inversions: " + ", ".join(f"{_number(v)} {label}" for label, v in inversions))
    named = {**_UNET_LABELS, **_TRANSFORMER_LABELS, **_INVERSION_LABELS}
    parts += [f"{k}: {_number(v)}" for k, v in work.items() if k not in named]
    return "; ".join(parts)


def failure_summary(failed_total: int, total: int, reasons: Sequence[tuple[str, int]], failures_log: str,
                    top: int = 3) -> str:
    """The console's line on a stage's failures (shared by the edit and the score stages; '' when none)."""
    if not failed_total:
        return ""
    shown = "; ".join(f"{n} x {reason}" for reason, n in reasons[:top])
    more = f"; {len(reasons) - top} other reason(s)" if len(reasons) > top else ""
    return f"{failed_total} of {total} failed: {shown}{more}; tracebacks in {failures_log}"


class FailureLog:
    """Appends one entry per failed query to `<run dir>/failures.log`: UTC time, run id, query id, the stage when it
    is not the edit stage, the exception and its traceback. Thread-safe: the reader, the main thread and the writer
    all report failures. Appends are whole entries under the file lock, so concurrent workers never interleave."""

    def __init__(self, path: Path, run_id: str, stage: str = "") -> None:
        self.path, self.run_id, self.stage, self._lock = path, run_id, stage, threading.Lock()

    def add(self, query_id: str, err: BaseException | None, reason: str) -> None:
        from benchmark.io.locking import locked

        stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
        tb = "".join(traceback.format_exception(err)).rstrip() if err is not None else "(no traceback) " + reason
        where = f" stage={self.stage}" if self.stage else ""
        entry = f"--- {stamp} run_id={self.run_id} query={query_id}{where}\n{tb}\n\n"
        with self._lock, locked(self.path), open(self.path, "a", encoding="utf-8") as fh:
            fh.write(entry)


@dataclass(frozen=True)
class _Failed:
    """A source that could not be read or prepared: travels through the reader as data, not as an exception."""

    error_type: str
    reason: str


class InvalidOutput(ValueError):
    """An editor returned something that is not a usable edit for its query."""


def edit_path(run_dir: Path, query_id: str) -> Path:
    return run_dir / EDITS_DIR / f"{query_id}.png"


def latest_records(run_dir: Path) -> dict[str, dict]:
    """Last record per query id from `edits.jsonl`; a malformed log is a `CorruptRunFile` naming it and the fix
    (a torn last line, from a killed writer, is dropped)."""
    from benchmark.io.errors import CorruptRunFile

    path = run_dir / EDITS_LOG
    fix = (f"Move {path} aside and rerun: existing edits are recorded again as recovered, the other queries are "
           "edited again (earlier failures are retried)")
    try:
        records = read_jsonl_tolerant(path)
    except (ValueError, UnicodeDecodeError) as err:
        raise CorruptRunFile(f"{err}. {fix}") from None
    out: dict[str, dict] = {}
    for i, rec in enumerate(records):
        if not (isinstance(rec, dict) and isinstance(rec.get("query_id"), str) and rec.get("status") in ("ok", "failed")):
            raise CorruptRunFile(f"{path}: record {i + 1} is not an edit record ({{query_id, status: ok|failed, ...}}). "
                                 f"{fix}")
        out[rec["query_id"]] = rec
    return out


def is_all_black(image: Image.Image) -> bool:
    """Every channel of every pixel is 0 (`getextrema` scans in C, no array copy)."""
    extrema = image.getextrema()
    return all(hi == 0 for _, hi in (extrema if isinstance(extrema[0], tuple) else [extrema]))


def validate_output(image: object, expected_size: tuple[int, int] | None, source_all_black: bool = False) -> Image.Image:
    """Return a usable RGB image or raise InvalidOutput naming the defect. An all-black output is a defect only
    when the source is not all black (identity on a black source is a correct edit). `expected_size` None: any size
    (an editor with `any_output_size`, whose edits the metric suites fit by their own rule)."""
    if isinstance(image, np.ndarray):
        if np.issubdtype(image.dtype, np.floating) and not np.isfinite(image).all():
            raise InvalidOutput("output contains NaN or infinite values")
        raise InvalidOutput(f"editor returned a numpy array {image.shape}; the Editor contract asks for PIL images")
    if not isinstance(image, Image.Image):
        raise InvalidOutput(f"editor returned {type(image).__name__}, expected PIL.Image.Image")
    if image.mode != "RGB":
        raise InvalidOutput(f"editor returned mode {image.mode}, expected RGB")
    if expected_size is not None and image.size != expected_size:
        raise InvalidOutput(f"output is {image.size[0]}x{image.size[1]}, source is {expected_size[0]}x{expected_size[1]}")
    if not source_all_black and is_all_black(image):
        raise InvalidOutput("all-black output from a source that is not all black (a NaN in the model, or a safety "
                            "checker blanking it)")
    return image


@dataclass(frozen=True)
class TurnInputs:
    """Where each query's input comes from when it is not its own `image` (protocol=multi_turn): query id -> the
    file it is edited from, and query id -> the query whose edit that file is. Its edits are keyed by their input
    (benchmark.stages.turn_keys)."""

    paths: dict[str, Path]
    previous: dict[str, str]


class _SourceImages:
    """Map-style dataset: index -> (index, image or error message). Errors travel as data, not exceptions."""

    def __init__(self, queryset: QuerySet, queries: Sequence[Query], sources: dict[str, Path] | None = None):
        self.queryset, self.queries, self.sources = queryset, queries, sources
        # the run's limits travel with the dataset, so DataLoader workers apply them however they are started
        self.max_pixels, self.min_side = LIMITS.max_pixels, LIMITS.min_source_side

    def __len__(self) -> int:
        return len(self.queries)

    def __getitem__(self, i: int) -> tuple[int, Image.Image | str]:
        try:  # the pixel limit is checked from the header before decoding; tiny sources are refused too
            q = self.queries[i]
            path = self.sources.get(q.id) if self.sources is not None else None
            return i, load_rgb(path or self.queryset.path(q.image), min_side=self.min_side,
                               max_pixels=self.max_pixels)
        except ImageInputError as err:
            return i, str(err)


def _batches(dataset: _SourceImages, slots: list[list[int]], num_workers: int):
    from torch.utils.data import DataLoader

    return DataLoader(dataset, batch_sampler=slots, num_workers=num_workers, collate_fn=list)


_END = object()


def _read_ahead(iterable: Iterable[T]) -> Iterator[T]:
    """Yield from `iterable` while a background thread already fetches the next item (decoding PNGs and resizing
    release the GIL, so the next batch's sources load while this one is edited)."""
    it = iter(iterable)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="edit-reader") as reader:
        upcoming = reader.submit(next, it, _END)
        while (item := upcoming.result()) is not _END:
            upcoming = reader.submit(next, it, _END)
            yield item


def _with_prepared(editor: Editor, batches: Iterable[list[tuple[int, Image.Image | str]]], ids: Sequence[str],
                   flog: FailureLog, fail_fast: bool = False):
    """Add `editor.prepare(image)` to every loaded source: (index, image or _Failed, prepared or None). A source that
    cannot be read or prepared becomes a `_Failed` (logged), or with `fail_fast` raises."""
    for items in batches:
        out: list[tuple[int, Image.Image | _Failed, Any]] = []
        for i, image in items:
            prepared = None
            if isinstance(image, str):  # _SourceImages caught an ImageInputError
                if fail_fast:
                    raise ImageInputError(f"{ids[i]}: {image}")
                flog.add(ids[i], None, image)
                out.append((i, _Failed("ImageInputError", image), None))
                continue
            try:
                prepared = editor.prepare(image)
            except Exception as err:  # noqa: BLE001 - any editor error becomes a recorded failure
                if fail_fast:
                    raise
                reason = f"{type(err).__name__} in {type(editor).__name__}.prepare: {err}"
                flog.add(ids[i], err, reason)
                out.append((i, _Failed(type(err).__name__, reason), None))
                continue
            out.append((i, image, prepared))
        yield out


@dataclass(frozen=True)
class _Unfinished:
    """An edit whose model call is done; its finisher (resize, quantise) and PNG write happen on the writer."""

    query: Query
    seed: int
    seconds: float
    source_size: tuple[int, int]
    finish: Callable[[], Image.Image]
    source_all_black: bool = False  # inputs helper: an all-black edit of an all-black source is not a failure
    any_size: bool = False  # the editor's `any_output_size`: an output of another size than the source is kept
    rewritten: str | None = None  # the text it was edited with, by an editor that rewrites instructions
    input_sha256: str | None = None  # multi_turn: the key of the input it was edited from (turn_keys)
    input_from: str | None = None  # multi_turn: the query whose edit that input was


def run_edit_stage(
    queryset: QuerySet,
    editor: Editor,
    run_dir: Path,
    *,
    seed: int,
    batch_size: int = 8,
    num_workers: int = 0,
    retry_failed: bool = False,
    run_id: str = "",
    progress: bool = True,
    fail_fast: bool = False,
    turn_inputs: TurnInputs | None = None,
) -> EditStats:
    """Edit every query that has no finished output yet; returns counts, the failures and wall time.

    A failure becomes a `failed` record (with `error_type` and `reason`) and a traceback in `failures.log`; with
    `fail_fast` the first failure is raised instead, with its traceback, and not recorded.

    Workers running at once on one run folder (two identical runs, shards whose selections overlap) claim each batch
    slot's queries before editing them (`benchmark.io.locking.Claims`), so no query is edited twice: a slot another
    worker holds is put off, and taken up once its claims are released, when whatever that worker did not finish
    (it was killed) is edited here. The stage returns when every query of the selection is edited or failed.

    `turn_inputs` (protocol=multi_turn, benchmark.stages.turns): each query is edited from the file it names, and
    its PNG and record carry the key of that input."""
    from tqdm import tqdm

    from benchmark.editing.work_counter import difference
    from benchmark.io.locking import Claims
    from benchmark.stages.invert import run_inversion_pass

    start = time.perf_counter()
    work_before = _work_counts(editor)
    log_path = run_dir / EDITS_LOG
    offset = log_path.stat().st_size if log_path.is_file() else 0  # before reading: a later append is seen as new
    records = latest_records(run_dir)
    unlogged, todo = [], []
    # queries the editor has no output for by design: left out, neither edited nor recorded (missing, not failed)
    absent = frozenset(_missing(editor, [q.id for q in queryset.queries if not edit_path(run_dir, q.id).is_file()]))
    for q in queryset.queries:
        done = edit_path(run_dir, q.id).is_file()
        rec = records.get(q.id)
        if done:
            if rec is None or rec["status"] != "ok":
                unlogged.append(q)
            continue
        if q.id in absent or (rec is not None and rec["status"] == "failed" and not retry_failed):
            continue
        todo.append(q)
    claims = Claims(claims_dir(run_dir, "edit"))
    claims.remove_stale()  # a killed worker's files: they claim nothing, and a person would think the run stuck
    tail = _LogTail(log_path, offset)

    def recovered_record(q: Query) -> EditRecord:
        if turn_inputs is not None:  # its PNG carries the key of the input it was made from
            return TurnEditRecord(q.id, "ok", query_seed(seed, q.id), run_id=run_id, recovered=True,
                                  input_sha256=png_input_sha256(edit_path(run_dir, q.id)),
                                  input_from=turn_inputs.previous.get(q.id))
        return EditRecord(q.id, "ok", query_seed(seed, q.id), run_id=run_id, recovered=True)

    # a PNG without its record is either lost (its worker was killed before logging it) or still being logged by a
    # worker that holds its claim: only a worker holding the claim may tell the two apart and record it
    unlogged = _recover_unlogged(unlogged, claims, tail, run_dir, recovered_record)
    failed_before = sum(1 for q in queryset.queries if not edit_path(run_dir, q.id).is_file() and q.id not in absent
                        and (rec := records.get(q.id)) is not None and rec["status"] == "failed" and not retry_failed)
    skipped = len(queryset) - len(todo) - len(absent) - failed_before  # a missing or failed edit is not done
    retried = frozenset(q.id for q in todo if q.id in records and records[q.id]["status"] == "failed")
    # edits brought in from a smaller nested sample (benchmark.stages.reuse) never ride along as passengers: they
    # ran in another run's batches, and re-editing them would undo the reuse
    # (edits carried over from an earlier run after a verified sample, benchmark.stages.carry, likewise)
    reused = frozenset(qid for qid, rec in records.items() if rec.get("reused_from") or rec.get("carried_from"))
    todo_ids = {q.id for q in todo}
    n = len(queryset.queries)
    slots = [list(range(k, min(k + batch_size, n))) for k in range(0, n, batch_size)
             if any(q.id in todo_ids for q in queryset.queries[k:k + batch_size])]
    (run_dir / EDITS_DIR).mkdir(parents=True, exist_ok=True)
    if callable(getattr(editor, "use_queryset", None)):  # Editor.query_file: the files a query names
        editor.use_queryset(queryset)
    if hasattr(editor, "run_seed"):  # an editor that draws its inversions per source seeds them from the run's seed
        editor.run_seed = int(seed)
    # an editor that shares inversions inverts each distinct source of the slots once, batch_size sources at a time
    run_inversion_pass(queryset, editor, [queryset.queries[i] for slot in slots for i in slot], seed=seed,
                       batch_size=batch_size, progress=progress, fail_fast=fail_fast)
    bar = tqdm(total=len(todo), desc=f"edit {type(editor).__name__}", unit="img", disable=not progress, leave=False)
    flog = FailureLog(run_dir / FAILURES_LOG, run_id)
    logged: list[EditRecord] = []
    by_others = 0
    try:
        while slots:
            plan = _SlotPlan(queryset.queries, slots, todo_ids, retried, run_dir, claims, tail, recovered_record,
                             reused)
            logged += _edit_pass(queryset, editor, run_dir, plan, seed=seed, num_workers=num_workers, run_id=run_id,
                                 flog=flog, fail_fast=fail_fast, bar=bar, turn_inputs=turn_inputs)
            by_others += plan.by_others
            bar.update(plan.by_others)
            if plan.deferred:  # another worker holds them: wait for its first claim to go, then try them all again
                claims.wait([queryset.queries[i].id for i in plan.deferred[0] if queryset.queries[i].id in todo_ids])
            slots = plan.deferred
        while unlogged:  # held by other workers at the start: once one's claim goes, its record is on disk or lost
            claims.wait([unlogged[0].id])
            unlogged = _recover_unlogged(unlogged, claims, tail, run_dir, recovered_record)
    finally:
        claims.release_all()
        bar.close()
    n_failed = sum(r.status == "failed" for r in logged)
    failed_total, reasons = _failures(queryset, run_dir)
    return EditStats(len(queryset), len(logged), skipped, n_failed, time.perf_counter() - start,
                     failed_total=failed_total, reasons=reasons, failures_log=str(run_dir / FAILURES_LOG),
                     by_others=by_others, work=difference(_work_counts(editor), work_before), missing=len(absent),
                     failed_before=failed_before)


CLAIMS_DIR = "claims"  # <run dir>/claims/<stage>/<query id>.claim: held by the worker working on that query


def claims_dir(run_dir: Path, stage: str) -> Path:
    return run_dir / CLAIMS_DIR / stage


class _LogTail:
    """Ids of the records appended to an edit log since `offset` (whole lines only): what other workers did."""

    def __init__(self, path: Path, offset: int) -> None:
        self.path, self.offset, self.ids = path, offset, set()

    def refresh(self) -> set[str]:
        import json

        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return self.ids
        data = data[:data.rfind(b"\n") + 1]  # a line being written is read next time
        self.offset += len(data)
        for line in data.splitlines():
            try:
                rec = json.loads(line)
            except ValueError:  # torn by a killed writer; latest_records judges the log itself
                continue
            if isinstance(rec, dict) and isinstance(rec.get("query_id"), str):
                self.ids.add(rec["query_id"])
        return self.ids


def _recover_unlogged(queries: list[Query], claims: Any, tail: _LogTail, run_dir: Path,
                      recovered: Callable[[Query], EditRecord]) -> list[Query]:
    """Log a `recovered` record for each query of `queries` (its PNG exists, the log had no ok record for it when the
    stage began) whose claim this worker gets and that no other worker logged since; returns the queries another
    worker holds, left for later. A holder writes a batch's PNGs first and logs them, then drops its claims, so
    once the claim is ours any record of its is in the log, and a PNG still unrecorded was left by a killed worker."""
    held: list[Query] = []
    mine: list[Query] = []
    for q in queries:
        (mine if claims.try_claim([q.id]) else held).append(q)
    try:
        logged = tail.refresh()
        append_jsonl(run_dir / EDITS_LOG, [record_json(recovered(q)) for q in mine if q.id not in logged])
    finally:
        claims.release([q.id for q in mine])
    return held


class _SlotPlan:
    """The batch sampler of one pass: yields each slot whose queries it could claim, composed as `fixed_batches`
    composes it, and puts off (`deferred`) the slots another worker holds. After claiming, a query another worker
    finished meanwhile is dropped (counted in `by_others`; a PNG without a record, left by a killed worker, gets
    its `recovered` record here) and may ride along as a passenger."""

    def __init__(self, queries: Sequence[Query], slots: list[list[int]], todo: set[str], retried: frozenset[str],
                 run_dir: Path, claims: Any, tail: _LogTail, recovered: Callable[[Query], EditRecord],
                 reused: frozenset[str] = frozenset()) -> None:
        self.queries, self.slots, self.todo, self.retried, self.reused = queries, slots, todo, retried, reused
        self.run_dir, self.claims, self.tail, self.recovered = run_dir, claims, tail, recovered
        self.by_id = {q.id: q for q in queries}
        self.passenger: set[str] = set()
        self.deferred: list[list[int]] = []
        self.by_others = 0

    def __len__(self) -> int:
        return len(self.slots)

    def __iter__(self) -> Iterator[list[int]]:
        position = {q.id: i for i, q in enumerate(self.queries)}
        for slot in self.slots:
            wanted = [self.queries[i].id for i in slot if self.queries[i].id in self.todo]
            if not self.claims.try_claim(wanted):
                self.deferred.append(slot)
                continue
            still = self._still_todo(wanted)
            self.claims.release([qid for qid in wanted if qid not in still])
            if not still:
                continue
            work, _, passengers = fixed_batches([self.queries[i] for i in slot], still, len(slot),
                                                lambda q: q.id not in self.reused
                                                and edit_path(self.run_dir, q.id).is_file(), self.retried)
            self.passenger |= passengers
            yield [position[q.id] for q in work]

    def _still_todo(self, claimed: list[str]) -> set[str]:
        """Of the queries just claimed, those no other worker edited or failed since this stage began."""
        others = self.tail.refresh()
        still, recovered = set(), []
        for qid in claimed:
            if edit_path(self.run_dir, qid).is_file():
                if qid not in others:  # its worker was killed between writing the PNG and logging it
                    recovered.append(record_json(self.recovered(self.by_id[qid])))
                self.by_others += 1
            elif qid in others:
                self.by_others += 1
            else:
                still.add(qid)
        append_jsonl(self.run_dir / EDITS_LOG, recovered)
        return still


def _edit_pass(queryset: QuerySet, editor: Editor, run_dir: Path, plan: _SlotPlan, *, seed: int, num_workers: int,
               run_id: str, flog: FailureLog, fail_fast: bool, bar: Any,
               turn_inputs: TurnInputs | None = None) -> list[EditRecord]:
    """Edit the slots `plan` claims; returns the records logged."""
    logged: list[EditRecord] = []
    # The main thread only runs the model. Finishing the outputs (resize, quantise), checking them, encoding and
    # writing PNGs, then logging the batch's records happen on a writer thread while the next batch is edited; the
    # writer is at most one batch behind, so memory stays bounded. A record is logged only after its PNG exists:
    # the PNG stays the commit point, and the batch's claims are released only after that.
    work = queryset.queries
    batches = _batches(_SourceImages(queryset, work, turn_inputs.paths if turn_inputs else None), plan, num_workers)
    last = len(plan) - 1
    ids = [q.id for q in work]
    passenger = plan.passenger
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="edit-writer") as writer:
        in_flight: Future | None = None
        for k, items in enumerate(_read_ahead(_with_prepared(editor, batches, ids, flog, fail_fast))):
            failed: list[EditRecord] = []
            ready: list[tuple[Query, Image.Image, Any]] = []
            for i, image, prepared in items:
                q = work[i]
                if isinstance(image, _Failed):
                    failed.append(EditRecord(q.id, "failed", query_seed(seed, q.id), reason=image.reason,
                                             error_type=image.error_type, run_id=run_id))
                else:
                    ready.append((q, image, prepared))
            unfinished: list[_Unfinished] = []
            if ready:
                failed_here, unfinished = _edit_batch(editor, ready, seed=seed, run_id=run_id, flog=flog,
                                                      fail_fast=fail_fast)
                failed += failed_here
                if turn_inputs is not None:  # the key of the pixels each edit was made from (its PNG carries it)
                    keys = {q.id: pixel_sha256(image) for q, image, _ in ready}
                    unfinished = [dataclasses.replace(u, input_sha256=keys[u.query.id],
                                                      input_from=turn_inputs.previous.get(u.query.id))
                                  for u in unfinished]
            # passengers only keep the batch as the uninterrupted run had it: their outputs exist already
            failed = [r for r in failed if r.query_id not in passenger]
            unfinished = [u for u in unfinished if u.query.id not in passenger]
            order = [work[i].id for i, *_ in items if work[i].id not in passenger]
            if in_flight is not None:
                logged += in_flight.result()
            # Nothing overlaps the last batch's writes, so they get two threads (PIL's encoder releases the GIL).
            in_flight = writer.submit(_write_and_release, plan.claims, run_dir, unfinished, failed, order,
                                      run_id=run_id, threads=2 if k == last else 1, flog=flog, fail_fast=fail_fast)
            bar.update(len(order))
        if in_flight is not None:
            logged += in_flight.result()
    return logged


def _write_and_release(claims: Any, run_dir: Path, unfinished: list[_Unfinished], records: list[EditRecord],
                       order: list[str], **kw: Any) -> list[EditRecord]:
    """`_finish_and_write`, then give up the batch's claims: its PNGs and records are on disk."""
    try:
        return _finish_and_write(run_dir, unfinished, records, order, **kw)
    finally:
        claims.release(order)


def _missing(editor: Any, query_ids: list[str]) -> list[str]:
    """`editor.missing(query_ids)`, or none for an editor that only has the required members."""
    missing = getattr(editor, "missing", None)
    return list(missing(query_ids)) if callable(missing) and query_ids else []


def _work_counts(editor: Any) -> dict[str, int]:
    """`editor.work_counts()`, or nothing counted for an editor that only has the required members (a plug-in that
    implements the contract without subclassing `Editor`)."""
    counts = getattr(editor, "work_counts", None)
    return counts() if callable(counts) else {}


def fixed_batches(queries: Sequence[Query], todo: set[str], batch_size: int, done: Callable[[Query], bool],
                  retried: frozenset[str] = frozenset()) -> tuple[list[Query], list[list[int]], set[str]]:
    """The queries to load, their batches (index lists into them) fixed by position in the selection, and the
    passengers.

    A batch-dependent editor (batched CPU/GPU kernels sum in another order) can change a pixel by one level with the
    batch a query runs in. So a resumed run edits the same batches an uninterrupted run would: every batch slot
    `[k * batch_size, (k + 1) * batch_size)` of the selection that still holds a query to edit is run whole. Its
    members whose PNG already exists ride along as passengers: edited again (deterministically, the same pixels),
    never written or logged (`done` is false for edits reused from a smaller sample: they stay out too). Members
    recorded as failed and not retried stay out, as a failed source does. A slot
    whose only work is `retried` failures (retry_failed=true) takes no passengers: that batch failed before, so there
    is no uninterrupted composition to reproduce, and passengers would multiply the cost of scattered retries.
    """
    work: list[Query] = []
    batches: list[list[int]] = []
    passenger: set[str] = set()
    for start in range(0, len(queries), batch_size):
        slot = queries[start:start + batch_size]
        if not any(q.id in todo for q in slot):
            continue
        fresh = any(q.id in todo and q.id not in retried for q in slot)
        batch = []
        for q in slot:
            if q.id in todo or (fresh and done(q)):
                batch.append(len(work))
                work.append(q)
                if q.id not in todo:
                    passenger.add(q.id)
        batches.append(batch)
    return work, batches, passenger


def _failures(queryset: QuerySet, run_dir: Path) -> tuple[int, tuple[tuple[str, int], ...]]:
    """Queries of the set left failed (latest record failed, no image), and their reasons counted."""
    records = latest_records(run_dir)
    reasons: Counter[str] = Counter()
    for q in queryset.queries:
        rec = records.get(q.id)
        if rec is not None and rec["status"] == "failed" and not edit_path(run_dir, q.id).is_file():
            # grouped by cause: temporary names and addresses out (the full message is in failures.log)
            reasons[shorten(reason_group(rec.get("reason") or rec.get("error_type") or "unknown"))] += 1
    return sum(reasons.values()), tuple(reasons.most_common())


def _finish_and_write(run_dir: Path, unfinished: list[_Unfinished], records: list[EditRecord], order: list[str], *,
                      run_id: str, threads: int = 1, flog: FailureLog | None = None,
                      fail_fast: bool = False) -> list[EditRecord]:
    """Finish, check and save each edit, then log the batch's records in query order."""
    finish = functools.partial(_finish_one, run_dir, run_id=run_id, flog=flog, fail_fast=fail_fast)
    if threads > 1 and len(unfinished) > 1:
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="edit-finisher") as pool:
            done = list(pool.map(finish, unfinished))
    else:
        done = [finish(u) for u in unfinished]
    position = {qid: k for k, qid in enumerate(order)}
    records = sorted([*records, *done], key=lambda r: position[r.query_id])
    append_jsonl(run_dir / EDITS_LOG, [record_json(r) for r in records])
    return records


def record_json(record: EditRecord) -> dict[str, Any]:
    """One line of edits.jsonl: the record's fields, `rewritten` only where an editor rewrote the instruction (the
    records of every other editor keep their old form)."""
    out = asdict(record)
    for key in ("rewritten", "input_sha256", "input_from"):  # absent unless set: other records keep their old form
        if out.get(key) is None:
            out.pop(key, None)
    return out


def rewrites_instruction(editor: Any) -> bool:
    """The editor's declaration that it rewrites instructions before editing (`Editor.rewrites_instruction`;
    False for a plug-in that implements the contract without subclassing `Editor`)."""
    return bool(getattr(editor, "rewrites_instruction", False))


def _finish_one(run_dir: Path, u: _Unfinished, *, run_id: str, flog: FailureLog | None = None,
                fail_fast: bool = False) -> EditRecord:
    """A finisher error or an unusable output is that query's failure; a write error propagates (a full disk is
    not the editor's fault, and the run must stop)."""
    t0 = time.perf_counter()
    try:
        image = validate_output(u.finish(), None if u.any_size else u.source_size, u.source_all_black)
    except Exception as err:  # noqa: BLE001 - any editor error becomes a recorded failure
        if fail_fast:
            raise
        return _failure(u.query.id, u.seed, err, flog, run_id=run_id, seconds=u.seconds + time.perf_counter() - t0)
    seconds = u.seconds + time.perf_counter() - t0
    if u.input_sha256 is not None:  # multi_turn: the PNG and the record carry the key of the input
        save_keyed_png(image, edit_path(run_dir, u.query.id), EDIT_PNG_LEVEL, u.input_sha256)
        return TurnEditRecord(u.query.id, "ok", u.seed, seconds=seconds, run_id=run_id, rewritten=u.rewritten,
                              input_sha256=u.input_sha256, input_from=u.input_from)
    save_png(image, edit_path(run_dir, u.query.id), EDIT_PNG_LEVEL)
    return EditRecord(u.query.id, "ok", u.seed, seconds=seconds, run_id=run_id, rewritten=u.rewritten)


def _failure(query_id: str, seed: int, err: BaseException, flog: FailureLog | None, *, run_id: str,
             seconds: float | None = None) -> EditRecord:
    """The failed record of one query; its traceback goes to the failures log."""
    reason = f"{type(err).__name__}: {err}"
    log.warning("edit failed for %s: %s", query_id, reason)
    if flog is not None:
        flog.add(query_id, err, reason)
    return EditRecord(query_id, "failed", seed, seconds=seconds, reason=reason, error_type=type(err).__name__,
                      run_id=run_id)


def _edit_batch(editor: Editor, ready: list[tuple[Query, Image.Image, Any]], *, seed: int, run_id: str,
                flog: FailureLog | None = None, fail_fast: bool = False) -> tuple[list[EditRecord], list[_Unfinished]]:
    """Run the model on a batch: (failure records, edits left to finish). If the batch call fails, each query is
    retried alone so one bad query cannot sink the others."""
    queries = [q for q, *_ in ready]
    seeds = [query_seed(seed, q.id) for q in queries]
    t0 = time.perf_counter()
    try:
        editor.check_prompts(queries)
        finishers = editor.edit_deferred(queries, [im for _, im, _ in ready], seeds=seeds,
                                         prepared=[p for *_, p in ready])
        if not isinstance(finishers, list | tuple) or len(finishers) != len(queries):
            n = len(finishers) if isinstance(finishers, list | tuple) else type(finishers).__name__
            raise InvalidOutput(f"editor returned {n} outputs for {len(queries)} queries")
    except Exception as err:  # noqa: BLE001 - any editor error becomes a recorded failure
        if fail_fast and len(ready) == 1:
            raise
        batch_error: Exception | None = err
    else:
        batch_error = None
    if batch_error is not None:
        if rewrites_instruction(editor):  # texts a failed call recorded belong to no edit: the retries record theirs
            editor.take_rewrites([q.id for q in queries])
        if len(ready) == 1:
            return [_failure(queries[0].id, seeds[0], batch_error, flog, run_id=run_id)], []
        # retried outside the `except` block, so a query's own traceback is not chained to the batch's
        failed: list[EditRecord] = []
        unfinished: list[_Unfinished] = []
        for item in ready:
            f, u = _edit_batch(editor, [item], seed=seed, run_id=run_id, flog=flog, fail_fast=fail_fast)
            failed += f
            unfinished += u
        return failed, unfinished
    per_item = (time.perf_counter() - t0) / len(queries)
    any_size = bool(getattr(editor, "any_output_size", False))
    rewrites = editor.take_rewrites([q.id for q in queries]) if rewrites_instruction(editor) else None
    failed: list[EditRecord] = []
    unfinished = []
    for (q, source, _), s, finish in zip(ready, seeds, finishers, strict=True):
        if rewrites is not None and not isinstance(rewrites.get(q.id), str):
            # the declaration promises the text: an edit whose prompt is unknown cannot be marked, so it fails
            err = InvalidOutput(f"editor {type(editor).__name__} declares rewrites_instruction but recorded no "
                                f"rewritten instruction for query {q.id} (call self.record_rewrite(query.id, text) "
                                "in edit)")
            if fail_fast:
                raise err
            failed.append(_failure(q.id, s, err, flog, run_id=run_id))
            continue
        unfinished.append(_Unfinished(q, s, per_item, source.size, finish, is_all_black(source), any_size,
                                      rewrites.get(q.id) if rewrites is not None else None))
    return failed, unfinished
