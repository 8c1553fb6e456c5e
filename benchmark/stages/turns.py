"""Edit stage under protocol=multi_turn: turn t of a session is edited from the editor's own edit of turn t-1.

This is the iterative setting of MagicBrush's `edit_cli_single_multi_turn.py` (docs/running.md, "Multi-turn
editing"): a session's turn 1 is edited from its own `image` (the dataset's input), every later turn from the
previous turn's output. A query outside any session is a session of one turn.

The stage runs in waves: turn 1 of every session, then turn 2 of every session that has one, and so on, each wave
through the ordinary edit stage (`run_edit_stage` with `TurnInputs`), so batches stay full, claims, fixed batch
slots, passengers, recovery and failure records work as for any run, and batch size 1 gives the PNGs of batch size
4. Content addressing across turns:

- each edit's PNG carries the sha256 of the pixels it was made from (`turn_keys`), and so does its record;
- before wave t, an existing edit of turn t whose key is not that of the current edit of turn t-1 is stale (turn
  t-1 was edited again and came out different): it is deleted and edited again, and so, wave by wave, is every
  later turn of that session that its new output changes; nothing else is touched;
- a turn whose previous turn has no edit (it failed, or the editor has none) gets a failed record naming that turn
  and its reason (`PreviousTurnFailed`), never a silent skip; with retry_failed=true both are attempted again.

A kill at any point resumes at the wave it stopped in: the earlier waves are done (their PNGs exist and their keys
match), and the wave's own slots resume as any edit stage does.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmark.editing.editor import Editor, query_seed
from benchmark.io.fileio import append_jsonl
from benchmark.io.types import Query
from benchmark.querysets.io import QuerySet
from benchmark.stages.edit import (
    EDITS_LOG,
    FAILURES_LOG,
    EditStats,
    FailureLog,
    TurnInputs,
    _failures,
    edit_path,
    latest_records,
    record_json,
    run_edit_stage,
)
from benchmark.stages.turn_keys import TurnEditRecord, pixel_sha256, png_input_sha256

PREVIOUS_TURN_FAILED = "PreviousTurnFailed"


class SessionSelectionError(ValueError):
    """The selection holds a turn of a session without the turns before it, so it has no input to be edited from."""


def sessions(queries: Sequence[Query]) -> list[list[Query]]:
    """The selection's sessions in order of first appearance, each its queries by turn; a query outside any session
    is a session of its own. SessionSelectionError when a session's selected turns are not 1..k (a turn without the
    turns before it: a selection that cut a session in the middle)."""
    grouped: dict[str, list[Query]] = {}
    for q in queries:
        grouped.setdefault(q.session if q.session is not None else f"\0{q.id}", []).append(q)
    out = []
    for key, turns in grouped.items():
        turns.sort(key=lambda q: q.turn or 1)
        got = [q.turn or 1 for q in turns]
        if got != list(range(1, len(turns) + 1)):
            raise SessionSelectionError(
                f"protocol=multi_turn: the selection holds turns {got} of session {key!r}; turn t is edited from "
                "turn t-1's edit, so a selection must hold each session's turns 1..k. Shards and samples keep "
                "sessions whole; a `limit` keeps the first queries of the file, so list a session's turns in order "
                "(or drop the limit)")
        out.append(turns)
    return out


def waves(chains: Sequence[Sequence[Query]]) -> list[tuple[list[Query], dict[str, Query]]]:
    """The waves of `sessions(...)`: for t = 1, 2, ..., (turn t of every session that has one, in session order;
    query id -> its previous turn, {} for wave 1)."""
    out = []
    for t in range(1, max((len(c) for c in chains), default=0) + 1):
        out.append(([c[t - 1] for c in chains if len(c) >= t],
                    {c[t - 1].id: c[t - 2] for c in chains if len(c) >= t and t > 1}))
    return out


def run_turns_stage(queryset: QuerySet, editor: Editor, run_dir: Path, *, seed: int, batch_size: int = 8,
                    num_workers: int = 0, retry_failed: bool = False, run_id: str = "", progress: bool = True,
                    fail_fast: bool = False) -> EditStats:
    """Edit every turn of every session of `queryset` from the previous turn's edit, wave by wave (module
    docstring); returns the stage's counts over all waves, as `run_edit_stage` returns them for one."""
    from benchmark.io.protocols import MULTI_TURN, ProtocolSettingError, chains_turns

    if not chains_turns(MULTI_TURN, editor):
        raise ProtocolSettingError(f"editor {type(editor).__name__} takes edits made elsewhere: nothing here gives "
                                   "its turns their inputs, so its multi-turn files are read as they are (the "
                                   "ordinary edit stage), never chained here")
    start = time.perf_counter()
    chains = sessions(queryset.queries)
    flog = FailureLog(run_dir / FAILURES_LOG, run_id)
    (run_dir / "edits").mkdir(parents=True, exist_ok=True)
    done: list[EditStats] = []
    blocked_new = blocked_before = 0
    for wave, previous in waves(chains):
        paths, blocked = _inputs(queryset, run_dir, wave, previous)
        new, before = _fail_blocked(blocked, run_dir, flog, seed=seed, run_id=run_id, retry_failed=retry_failed,
                                    fail_fast=fail_fast)
        blocked_new, blocked_before = blocked_new + new, blocked_before + before
        ready = [q for q in wave if q.id in paths]
        if not ready:
            continue
        done.append(run_edit_stage(
            dataclasses.replace(queryset, queries=tuple(ready)), editor, run_dir, seed=seed, batch_size=batch_size,
            num_workers=num_workers, retry_failed=retry_failed, run_id=run_id, progress=progress,
            fail_fast=fail_fast, turn_inputs=TurnInputs(paths, {k: p.id for k, p in previous.items()})))
    failed_total, reasons = _failures(queryset, run_dir)
    work: Counter[str] = Counter()
    for st in done:
        work.update(st.work)
    return EditStats(
        len(queryset), sum(st.computed for st in done) + blocked_new, sum(st.skipped for st in done),
        sum(st.failed for st in done) + blocked_new, time.perf_counter() - start, failed_total=failed_total,
        reasons=reasons, failures_log=str(run_dir / FAILURES_LOG), by_others=sum(st.by_others for st in done),
        work=dict(work), missing=sum(st.missing for st in done),
        failed_before=sum(st.failed_before for st in done) + blocked_before)


def edit_stage(protocol: str, editor: Any) -> Callable[..., EditStats]:
    """The edit stage of a run: `run_turns_stage` when it chains turns (`benchmark.io.protocols.chains_turns`: multi_turn
    with an editor that makes its edits here), else `run_edit_stage`; both take the same arguments."""
    from benchmark.io.protocols import chains_turns

    return run_turns_stage if chains_turns(protocol, editor) else run_edit_stage


def _inputs(queryset: QuerySet, run_dir: Path, wave: list[Query],
            previous: dict[str, Query]) -> tuple[dict[str, Path], list[tuple[Query, Query]]]:
    """(query id -> the file it is edited from, [(query, previous turn) whose previous turn has no edit]). Turn 1 is
    edited from its own image (its bytes are in the query-set hash, hence in the run folder's name); a later turn
    from the previous turn's PNG, and an existing edit of it made from other pixels is deleted (stale)."""
    from benchmark.io.imageio import ImageInputError, load_rgb

    paths: dict[str, Path] = {}
    blocked = []
    for q in wave:
        prev = previous.get(q.id)
        if prev is None:
            paths[q.id] = queryset.path(q.image)
            continue
        src = edit_path(run_dir, prev.id)
        if not src.is_file():
            blocked.append((q, prev))
            continue
        paths[q.id] = src
        mine = edit_path(run_dir, q.id)
        if mine.is_file():
            try:
                current = pixel_sha256(load_rgb(src))
            except ImageInputError:  # its own wave reports the unreadable input as this turn's failure
                current = None
            if current is None or png_input_sha256(mine) != current:
                mine.unlink(missing_ok=True)  # made from another input: edited again in this wave
    return paths, blocked


def _fail_blocked(blocked: list[tuple[Query, Query]], run_dir: Path, flog: FailureLog, *, seed: int, run_id: str,
                  retry_failed: bool, fail_fast: bool) -> tuple[int, int]:
    """A failed record for each turn whose previous turn has no edit, naming that turn and its reason; a stale edit
    of it is deleted. A turn already recorded as failed is left as it is unless `retry_failed`. Returns (recorded
    now, left as failed before)."""
    if not blocked:
        return 0, 0
    records = latest_records(run_dir)
    out: list[TurnEditRecord] = []
    before = 0
    for q, prev in blocked:
        rec = records.get(q.id)
        if rec is not None and rec["status"] == "failed" and not retry_failed and not edit_path(run_dir, q.id).is_file():
            before += 1
            continue
        edit_path(run_dir, q.id).unlink(missing_ok=True)
        why = records.get(prev.id)
        cause = (why.get("reason") or why.get("error_type") or "failed") if why and why["status"] == "failed" \
            else "it has no edit"
        reason = (f"{PREVIOUS_TURN_FAILED}: turn {prev.turn or 1} of session {q.session!r} (query {prev.id}) has no "
                  f"edit to continue from: {cause}")
        if fail_fast:
            raise RuntimeError(f"{q.id}: {reason}")
        flog.add(q.id, None, reason)
        out.append(TurnEditRecord(q.id, "failed", query_seed(seed, q.id), reason=reason,
                                  error_type=PREVIOUS_TURN_FAILED, run_id=run_id, input_from=prev.id))
    append_jsonl(run_dir / EDITS_LOG, [record_json(r) for r in out])
    return len(out), before
