"""Carry-over: an upgrade whose code changes no pixel re-edits a sample, not the whole run (docs/results.md#carry-over).

An edit's key (`benchmark.plan.config.editor_signature`) is a hash of the editor's setting (config, weights, seed,
profile) and of the content of the code that makes its pixels. When the code part changes, the run folder is new and
empty. Before editing, `carry_over` looks for an earlier run in the same query-set folder whose setting is this
run's (scheme 1 runs included: their setting is computed from their run.json), and then:

1. draws a stratified sample of whole batch slots (`stratified_slots`: slots whose queries cover both ends of this
   selection, every edit type, every source-size class, the first and last turn of sessions, then more slots until
   they hold `sample` queries the earlier run edited),
2. edits the sample here, with the new code, in those slots, as an uninterrupted run batches them (so a
   batch-dependent editor's pixels are comparable): these are this run's own edits, whatever the verdict,
3. compares each with the earlier run's PNG, pixel by pixel. When every one is identical (or within `tolerance`
   levels, an option recorded wherever it was used), the earlier run's other edits are adopted: hard-linked here and
   logged with `carried_from`. When one differs, nothing is adopted and the edit stage edits everything; the console
   names the query and the difference.

Under protocol=multi_turn (a run that chains turns, benchmark.stages.turns) the slots follow the waves: each turn's
queries chunked by batch size, as the turns stage batches them (`protocol_slots`), and the sample is re-edited wave
by wave, each later turn from the earlier run's PNG of its previous turn (`reedit_sample`; a turn whose previous
turn has no usable edit there is in no slot). Adopted edits keep their input key (`input_sha256`, `input_from`), so
the turns stage that follows finds every adopted turn's input unchanged and edits nothing; after a difference, a
sampled later turn whose input is not this run's own previous turn is stale there, and the turns stage edits it
again.

`carry.json` in the run folder keeps the verdict with a content digest (checked on read), so a resumed run neither
verifies twice nor adopts after a difference. `reuse=strict` turns carry-over off.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from benchmark.editing.editor import query_seed
from benchmark.io.fileio import append_jsonl, atomic_write_text
from benchmark.io.hashing import canonical_json, stable_hash
from benchmark.io.imageio import LIMITS, ImageInputError, load_rgb
from benchmark.io.protocols import MULTI_TURN
from benchmark.io.types import EditRecord
from benchmark.stages.edit import EDITS_LOG, TurnInputs, edit_path, is_all_black, latest_records, record_json
from benchmark.stages.reuse import _place, _same_file, _valid_png
from benchmark.stages.turn_keys import TurnEditRecord, png_input_sha256

CARRY_FILE = "carry.json"
CARRIED_KEY = "carried_from"  # the edit record's field naming the run an adopted edit came from
CARRY_FORMAT = "editmeter-carry/1"
# the longer side of a source, in pixels: the size classes a sample covers (an editor's sizing differs by class)
SIZE_EDGES = (384, 640, 1024)


@dataclass(frozen=True)
class PixelDiff:
    """How one re-edit differs from the stored edit: levels of 255 and the share of pixels that differ."""

    query: str
    identical: bool
    max_level: int
    mean_level: float
    share: float
    note: str = ""

    def line(self) -> str:
        if self.note:
            return f"{self.query}: {self.note}"
        return (f"{self.query}: max {self.max_level} level(s), mean {self.mean_level:.4f}, "
                f"{self.share:.2%} of pixels differ")


def compare_pngs(query: str, stored: Path, new: Path) -> PixelDiff:
    """The pixel difference of two edits of one query (decoded RGB, uint8)."""
    try:
        with Image.open(stored) as a, Image.open(new) as b:
            x = np.asarray(a.convert("RGB"), dtype=np.int16)
            y = np.asarray(b.convert("RGB"), dtype=np.int16)
    except (OSError, ValueError, Image.DecompressionBombError) as err:
        return PixelDiff(query, False, 255, float("nan"), 1.0, f"unreadable ({type(err).__name__}: {err})")
    if x.shape != y.shape:
        return PixelDiff(query, False, 255, float("nan"), 1.0, f"size {y.shape[1]}x{y.shape[0]}, stored "
                                                                f"{x.shape[1]}x{x.shape[0]}")
    d = np.abs(x - y)
    differs = d.max(axis=-1) > 0
    return PixelDiff(query, not differs.any(), int(d.max()), float(d.mean()), float(differs.mean()))


def size_class(width: int, height: int) -> str:
    """A source's size class: the bucket of its longer side (`SIZE_EDGES`) and its orientation."""
    side = max(width, height)
    bucket = sum(side > e for e in SIZE_EDGES)
    shape = "square" if width == height else ("landscape" if width > height else "portrait")
    return f"{bucket}-{shape}"


def _spread(query_id: str) -> str:
    """A deterministic order that spreads a sample over the selection (not the first N)."""
    return hashlib.sha256(query_id.encode("utf-8")).hexdigest()


def _strata(pool: Sequence[Any], sizes: dict[str, tuple[int, int]]) -> dict[str, set[str]]:
    """query id -> the strata it stands for: its edit type, its source's size class and (sets with sessions) the
    first, a later and the last turn of a session."""
    last: dict[Any, int] = {}
    for q in pool:
        if q.session is not None and q.turn is not None:
            last[q.session] = max(last.get(q.session, 0), int(q.turn))
    out: dict[str, set[str]] = {}
    for q in pool:
        keys = {f"type:{q.edit_type}"}
        if q.id in sizes:
            keys.add(f"size:{size_class(*sizes[q.id])}")
        if q.session is not None and q.turn is not None:
            keys.add("turn:first" if q.turn == 1 else "turn:later")
            if int(q.turn) == last[q.session]:
                keys.add("turn:last")
        out[q.id] = keys
    return out


def batch_slots(queries: Sequence[Any], batch_size: int) -> list[list[Any]]:
    """The edit stage's batch slots of a selection: `[k * batch_size, (k + 1) * batch_size)` in its order."""
    step = max(1, int(batch_size))
    return [list(queries[i:i + step]) for i in range(0, len(queries), step)]


def protocol_slots(queries: Sequence[Any], batch_size: int, protocol: str = "single_turn",
                   ready: Callable[[str], bool] | None = None) -> list[list[Any]]:
    """The batch slots a run of `protocol` edits `queries` in. single_turn: `batch_slots`. multi_turn: wave by wave
    (benchmark.stages.turns.waves), each wave's queries chunked by `batch_size` as the turns stage batches them:
    turn 1 of every session, then the later turns whose previous turn has an edit (`ready(previous id)`; a later
    turn without one is in no slot, so never in a sample)."""
    if protocol != MULTI_TURN:
        return batch_slots(queries, batch_size)
    from benchmark.stages.turns import sessions, waves

    out: list[list[Any]] = []
    for wave, previous in waves(sessions(queries)):
        out += batch_slots([q for q in wave if q.id not in previous or ready is None or ready(previous[q.id].id)],
                           batch_size)
    return out


def reedit_sample(queryset: Any, chosen: Sequence[Any], edit: Callable[..., Any], *, protocol: str = "single_turn",
                  inputs: Path | None = None) -> list[Any]:
    """Re-edit `chosen` (whole slots of `protocol_slots`) with `edit(sub_queryset[, turn_inputs=...])`, in the
    batches the run made them in; returns each call's EditStats. single_turn: one call, each query from its own
    image. multi_turn: one call per wave, in turn order, turn 1 from its own image and each later turn from the PNG
    of its previous turn in the folder `inputs` (the earlier run's for carry-over, the run's own for verify), so its
    edit and record carry that input's key."""
    if protocol != MULTI_TURN:
        return [edit(dataclasses.replace(queryset, queries=tuple(chosen)))]
    from benchmark.stages.turns import sessions, waves

    assert inputs is not None, "multi_turn: a later turn is re-edited from a folder's PNG of its previous turn"
    picked = {q.id for q in chosen}
    out = []
    for wave, previous in waves(sessions(queryset.queries)):
        batch = [q for q in wave if q.id in picked]
        if not batch:
            continue
        paths = {q.id: edit_path(inputs, previous[q.id].id) if q.id in previous else queryset.path(q.image)
                 for q in batch}
        out.append(edit(dataclasses.replace(queryset, queries=tuple(batch)),
                        turn_inputs=TurnInputs(paths, {q.id: previous[q.id].id for q in batch if q.id in previous})))
    return out


def merged_stats(parts: Sequence[Any]) -> Any:
    """One EditStats for the calls of `reedit_sample` (counts and work summed; the last call's failure totals)."""
    if len(parts) <= 1:
        return parts[0] if parts else None
    work: dict[str, int] = {}
    for st in parts:
        for k, v in st.work.items():
            work[k] = work.get(k, 0) + v
    sums = {k: sum(getattr(st, k) for st in parts) for k in
            ("total", "computed", "skipped", "failed", "seconds", "by_others", "missing", "failed_before")}
    return dataclasses.replace(parts[-1], work=work, **sums)


def stratified_slots(slots: Sequence[Sequence[Any]], candidates: set[str], n: int,
                     sizes: dict[str, tuple[int, int]], ends: Iterable[str] = ()) -> list[Any]:
    """The queries to re-edit: whole batch slots (a batch-dependent editor's re-edit is comparable only in the batch
    an uninterrupted run made it in), chosen so that their `candidates` cover both ends of the selection (and the
    ids in `ends`, e.g. every shard's), every edit type, every source-size class and the first and last turn of
    sessions, then more slots in a fixed spread order until they hold `n` candidates. The strata come first, so the
    sample can exceed `n` when they need it; a slot's other queries ride along. Returned in selection order."""
    pool = [q for slot in slots for q in slot if q.id in candidates]
    if not pool or n <= 0:
        return []
    strata = _strata(pool, sizes)
    need = {pool[0].id, pool[-1].id} | (set(ends) & candidates)
    chosen: set[int] = {i for i, slot in enumerate(slots) if any(q.id in need for q in slot)}

    def covers(i: int) -> set[str]:
        return set().union(*(strata.get(q.id, set()) for q in slots[i]))

    def order(i: int) -> str:
        return _spread(slots[i][0].id)

    open_strata = set().union(*strata.values()) - set().union(*(covers(i) for i in chosen))
    rest = sorted((i for i in range(len(slots)) if i not in chosen), key=order)
    while open_strata and rest:
        best = max(rest, key=lambda i: len(covers(i) & open_strata))  # the first in spread order among the best
        if not covers(best) & open_strata:
            break
        chosen.add(best)
        rest.remove(best)
        open_strata -= covers(best)
    count = sum(q.id in candidates for i in chosen for q in slots[i])
    for i in rest:
        if count >= n:
            break
        if any(q.id in candidates for q in slots[i]):
            chosen.add(i)
            count += sum(q.id in candidates for q in slots[i])
    return [q for i in sorted(chosen) for q in slots[i]]


@dataclass
class CarryStats:
    """What carry-over did: the earlier run, the re-edited sample and its verdict, the edits adopted."""

    source: str = ""  # the earlier run folder, relative to the results folder ("" when there is none)
    source_sig: str = ""
    sample: list[str] = field(default_factory=list)
    diffs: list[PixelDiff] = field(default_factory=list)
    verdict: str = "none"  # none | identical | within_tolerance | different | strict
    adopted: int = 0
    tolerance: int = 0
    resumed: bool = False  # the verdict came from carry.json (an earlier invocation of this run)
    edit_stats: Any = None  # the sample's EditStats (its edits are this run's own)

    @property
    def compared(self) -> int:
        return len(self.diffs)

    @property
    def identical(self) -> int:
        return sum(d.identical for d in self.diffs)

    def verified(self) -> str:
        """"k/k identical" (or "k/n identical, m within t levels")."""
        within = sum(not d.identical and not d.note and d.max_level <= self.tolerance for d in self.diffs)
        text = f"{self.identical}/{self.compared} identical"
        return text + (f", {within} within {self.tolerance} level(s)" if within else "")

    def line(self) -> str:
        """The console line."""
        if self.verdict in ("none", "strict"):
            return ""
        head = f"[editmeter] carry-over from {self.source}: the code changed, the setting did not; "
        if self.verdict == "different":
            worst = sorted((d for d in self.diffs if not d.identical), key=lambda d: (-d.max_level, d.query))
            shown = "; ".join(d.line() for d in worst[:3]) + (f"; {len(worst) - 3} more" if len(worst) > 3 else "")
            return (head + f"re-edited a sample of {self.compared}: {len(worst)} differ ({shown}), so every query is "
                    "edited again (carry.json lists them)")
        again = " (verified earlier in this run folder)" if self.resumed else ""
        rest = (f"adopted the other {self.adopted} edits (reuse=strict would edit them instead)" if self.adopted
                else "no other edit to adopt (the sample was every query left to do)")
        return head + f"verified {self.verified()} on a re-edited sample{again}; {rest}"


def _digest(payload: dict[str, Any]) -> str:
    return stable_hash(payload, 64)


def write_verdict(run_dir: Path, payload: dict[str, Any]) -> None:
    """carry.json: the verdict, with a digest of its content."""
    body = {"format": CARRY_FORMAT, **payload}
    atomic_write_text(run_dir / CARRY_FILE, canonical_json({**body, "digest": _digest(body)}) + "\n")


def read_verdict(run_dir: Path) -> dict[str, Any] | None:
    """carry.json's content when it is well formed and its digest matches; None otherwise (absent, edited, torn):
    the sample is then verified again."""
    path = run_dir / CARRY_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("format") != CARRY_FORMAT:
        return None
    digest = data.pop("digest", None)
    return data if digest == _digest(data) else None


def find_source(run_dir: Path, setting: str, queryset_hash: str,
                setting_of_run: Callable[[dict[str, Any]], str | None]) -> tuple[Path, dict[str, Any]] | None:
    """The earlier run of this setting on this query set (another folder beside `run_dir`) with the most ok edits,
    or None; `setting_of_run(run.json)` is the setting an earlier run recorded (benchmark.plan.config.setting_of_run).
    Only run.json is read here; the edits are checked one by one when adopted."""
    best: tuple[int, str, Path, dict[str, Any]] | None = None
    for meta_path in sorted(run_dir.parent.glob("*/run.json")):
        if meta_path.parent.resolve() == run_dir.resolve():
            continue
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError):
            continue  # unreadable: not a source; its own run reports it
        if not isinstance(meta, dict) or meta.get("queryset_hash") != queryset_hash:
            continue
        if setting_of_run(meta) != setting:
            continue
        try:
            ok = sum(r.get("status") == "ok" for r in latest_records(meta_path.parent).values())
        except Exception:  # noqa: BLE001 - a corrupt log: that run's error to report; here it is no source
            continue
        rank = (ok, str(meta.get("updated_at", "")), meta_path.parent, meta)
        if ok and (best is None or rank[:2] > best[:2]):
            best = rank
    return None if best is None else (best[2], best[3])


def _usable(queryset: Any, src: Path, records: dict[str, dict], q: Any, seed: int) -> bool:
    """The earlier run's edit of `q` is ok, of this seed, and its PNG passes the edit stage's output check."""
    rec = records.get(q.id)
    png = edit_path(src, q.id)
    if rec is None or rec.get("status") != "ok" or rec.get("seed") != query_seed(seed, q.id) or not png.is_file():
        return False
    try:
        image = load_rgb(queryset.path(q.image), min_side=LIMITS.min_source_side, max_pixels=LIMITS.max_pixels)
    except ImageInputError:
        return False
    return _valid_png(png, image.size, is_all_black(image))


def _source_sizes(queryset: Any, queries: Sequence[Any]) -> dict[str, tuple[int, int]]:
    """Each query's source size from its header (nothing decoded); unreadable ones are left out."""
    sizes = {}
    for q in queries:
        try:
            with Image.open(queryset.path(q.image)) as im:
                sizes[q.id] = im.size
        except (OSError, ValueError, Image.DecompressionBombError):
            continue
    return sizes


def carry_over(queryset: Any, run_dir: Path, results: Path, *, setting: str,
               setting_of_run: Callable[[dict[str, Any]], str | None], seed: int, batch_size: int, sample: int,
               tolerance: int, run_id: str, edit: Callable[..., Any], git_sha: str,
               protocol: str = "single_turn") -> CarryStats:
    """Carry an earlier run's edits into `run_dir` when a re-edited sample shows the new code makes the same pixels
    (module docstring). `edit(sub_queryset)` runs the edit stage on a selection and returns its EditStats; under
    protocol=multi_turn it is called wave by wave with `turn_inputs=` (`reedit_sample`)."""
    stats = CarryStats(tolerance=int(tolerance))
    here = latest_records(run_dir) if (run_dir / EDITS_LOG).is_file() else {}
    wanted = [q for q in queryset.queries if q.id not in here]
    if not wanted:  # every query has its record here: nothing to carry
        return stats
    verdict = read_verdict(run_dir)
    found = find_source(run_dir, setting, queryset.hash, setting_of_run)
    if found is None:
        return stats
    src, meta = found
    stats.source = src.relative_to(results).as_posix()
    stats.source_sig = str(meta.get("editor_sig", ""))
    records = latest_records(src)
    checked_usable: dict[str, bool] = {}

    def usable(q: Any) -> bool:  # each earlier edit checked once (multi_turn asks for previous turns too)
        if q.id not in checked_usable:
            checked_usable[q.id] = _usable(queryset, src, records, q, seed)
        return checked_usable[q.id]

    if verdict is not None and verdict.get("source") == stats.source:
        stats.resumed = True
        stats.sample = list(verdict.get("sample", []))
        stats.diffs = [PixelDiff(**d) for d in verdict.get("compared", [])]
        stats.verdict = str(verdict.get("verdict"))
        stats.tolerance = int(verdict.get("tolerance", 0))
    else:
        ok_ids = {q.id for q in wanted if (r := records.get(q.id)) is not None and r.get("status") == "ok"}
        by_id = {q.id: q for q in queryset.queries}
        slots = protocol_slots(queryset.queries, batch_size, protocol, lambda qid: usable(by_id[qid]))
        checked = stratified_slots(slots, ok_ids, sample, _source_sizes(queryset, wanted))
        stats.sample = [q.id for q in checked if q.id in ok_ids]
        if not stats.sample:
            return stats
        stats.edit_stats = merged_stats(reedit_sample(queryset, checked, edit, protocol=protocol, inputs=src))
        new = latest_records(run_dir)
        for q in checked:
            rec, png = new.get(q.id), edit_path(run_dir, q.id)
            if rec is None or rec.get("status") != "ok" or not usable(q):
                continue  # failed here, or nothing to compare with there
            if protocol == MULTI_TURN and png_input_sha256(png) != png_input_sha256(edit_path(src, q.id)):
                continue  # the earlier edit was made from other pixels than its folder's previous turn: no measure
            stats.diffs.append(compare_pngs(q.id, edit_path(src, q.id), png))
        bad = [d for d in stats.diffs if not d.identical and (d.note or d.max_level > tolerance)]
        stats.verdict = ("different" if bad or not stats.diffs else
                         "identical" if stats.identical == stats.compared else "within_tolerance")
        write_verdict(run_dir, {"source": stats.source, "source_editor_sig": stats.source_sig,
                                "sample": stats.sample, "tolerance": stats.tolerance, "verdict": stats.verdict,
                                "compared": [dataclasses.asdict(d) for d in stats.diffs], "run_id": run_id,
                                "git_sha": git_sha,
                                "checked_at": datetime.now(timezone.utc).isoformat(timespec="seconds")})
    if stats.verdict not in ("identical", "within_tolerance"):
        return stats
    where = {"run": stats.source, "editor_sig": stats.source_sig, "verified": stats.verified(),
             "sample": len(stats.sample), "tolerance": stats.tolerance, "git_sha": git_sha, "check": CARRY_FILE}
    here = latest_records(run_dir) if (run_dir / EDITS_LOG).is_file() else {}
    adopted = []
    for q in queryset.queries:
        if q.id in here or not usable(q):
            continue
        png, mine = edit_path(src, q.id), edit_path(run_dir, q.id)
        if mine.is_file():
            if not _same_file(png, mine):
                continue  # this run's own edit without its record: the edit stage recovers it
        else:
            _place(png, mine)
        rec = records[q.id]
        rewritten = rec.get("rewritten") if isinstance(rec.get("rewritten"), str) else None
        if protocol == MULTI_TURN:  # the key of the input it was made from travels with it (benchmark.stages.turns)
            carried: EditRecord = TurnEditRecord(
                q.id, "ok", rec["seed"], seconds=rec.get("seconds"), run_id=run_id, rewritten=rewritten,
                input_sha256=rec.get("input_sha256") or png_input_sha256(mine), input_from=rec.get("input_from"))
        else:
            carried = EditRecord(q.id, "ok", rec["seed"], seconds=rec.get("seconds"), run_id=run_id,
                                 rewritten=rewritten)
        adopted.append({**record_json(carried), CARRIED_KEY: {**where, "run_id": rec.get("run_id", "")}})
    append_jsonl(run_dir / EDITS_LOG, adopted)  # after the PNGs: the PNG stays the commit point
    stats.adopted = len(adopted)
    return stats


def carry_summary(run_dir: Path) -> dict[str, dict[str, Any]]:
    """run.json's `carried_from`: per earlier run folder, its signature, the check and how many of this run's
    current edits came from it (read from the edit log, so shards and reruns add up); {} when none."""
    out: dict[str, dict[str, Any]] = {}
    if not (run_dir / EDITS_LOG).is_file():
        return out
    for rec in latest_records(run_dir).values():
        where = rec.get(CARRIED_KEY)
        if rec.get("status") == "ok" and isinstance(where, dict) and isinstance(where.get("run"), str):
            entry = out.setdefault(where["run"], {k: where.get(k) for k in
                                                  ("editor_sig", "verified", "sample", "tolerance", "git_sha")}
                                   | {"edits": 0})
            entry["edits"] += 1
    return out
