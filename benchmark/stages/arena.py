"""The arena: editors' edits judged in pairs by GenArena's protocol, rated by Bradley-Terry (docs/arena.md).

`run_arena` takes the entrants (one run folder per editor, all of one query set), the judge backbone, the pinned
prompt and the sampling settings, and returns the ratings and tables. What it guarantees:

- Each judge call is keyed by content: the judge's identity, the prompt's sha256, the instruction and the pixel
  digests of the source and of the two edits in the order shown. Its reply is kept in an append-only call log
  (`calls*.jsonl` in the arena folder), one line per call with the sha256 of its content, checked on read (a line
  cut by a kill, altered, or of another shape is skipped and asked again). An editor added later is judged only in
  its new pairs; a rerun asks nothing; a kill -9 loses at most the calls in flight.
- A pair is judged only on queries both editors edited (edit record `ok` and the file present); failed and missing
  edits are counted per pair, never battled. Runs of different query sets are refused.
- Shards (`shard=(i, n)`, full sampling only) judge every n-th planned battle and write their own log file; the
  unsharded command then reads every shard's log, asks nothing and rates: the result is the single run's.
- Adaptive sampling as GenArena runs it (`benchmark.metrics.arena.sampling`): each pair starts with `min_battles`
  battles, then all unfinished pairs get `batch` more per round, up to `max_battles`, until the widest 95%
  interval among the fitted (not anchored) editors is at most `target_ci` Elo. Queries are taken per pair in a
  seeded order that depends only on the seed and the two names, so adding an editor changes no other pair.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmark.metrics.arena import protocol as P
from benchmark.metrics.arena import ratings as R
from benchmark.metrics.arena.tables import ArenaError, arena_drift, arena_tables, format_drift, format_summary

__all__ = ["ArenaError", "arena_drift", "arena_tables", "format_drift", "format_summary"]

CALL_LOG = "calls.jsonl"
EXAMPLES_PER_PAIR = 3  # battles per pair kept in ratings.json for the report
LOG_GLOB = "calls*.jsonl"
SAMPLING_MODES = ("adaptive", "full")


@dataclass(frozen=True)
class Sampling:
    """mode: adaptive (GenArena's loop) or full (every shared query of every pair, capped at max_battles).
    min_battles, batch, max_battles: battles per pair at the start, per round, at most. target_ci: the widest 95%
    interval (Elo, full width) at which adaptive sampling stops. resamples, seed: the bootstrap's."""

    mode: str = "adaptive"
    min_battles: int = 100
    batch: int = 100
    max_battles: int = 1500
    target_ci: float = 15.0
    resamples: int = 100
    seed: int = 0

    def __post_init__(self) -> None:
        if self.mode not in SAMPLING_MODES:
            raise ArenaError(f"arena.sampling.mode must be one of {', '.join(SAMPLING_MODES)}, not {self.mode!r}")
        for key in ("min_battles", "batch", "max_battles", "resamples"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ArenaError(f"arena.sampling.{key} must be a positive integer, not {v!r}")
        if self.max_battles < self.min_battles:
            raise ArenaError(f"arena.sampling.max_battles ({self.max_battles}) must be >= min_battles "
                             f"({self.min_battles})")
        if isinstance(self.target_ci, bool) or not isinstance(self.target_ci, int | float) or self.target_ci <= 0:
            raise ArenaError(f"arena.sampling.target_ci must be a positive number of Elo, not {self.target_ci!r}")


@dataclass
class Entrant:
    """One editor in the arena: its run folder, its query set and its usable edits (query id -> file)."""

    name: str
    run_dir: Path
    queryset: str
    queryset_hash: str
    ok: dict[str, Path]
    failed: set[str] = field(default_factory=set)


def find_entrants(results: Path, queryset: str, names: Sequence[str] | None = None) -> list[Entrant]:
    """The run folders of `queryset` under `results`/runs, one per editor (named by its editor, or by its folder
    when one editor has several). `names` picks some (editor or folder names). Refuses runs of other query-set
    contents among those picked, and names that match nothing."""
    from benchmark.io.score_cache import BadCacheFile
    from benchmark.stages.edit import EDITS_DIR, latest_records
    from benchmark.tables.leaderboard import load_run_meta

    found: list[tuple[str, str, Path, dict[str, Any]]] = []
    for meta_path in sorted((results / "runs").glob("*/*/run.json")):
        try:
            meta = load_run_meta(meta_path)
        except BadCacheFile:
            continue
        if meta.get("queryset") == queryset and meta.get("protocol", "single_turn") == "single_turn":
            found.append((meta["editor"], meta_path.parent.name, meta_path.parent, meta))
    by_editor: dict[str, int] = {}
    for editor, *_ in found:
        by_editor[editor] = by_editor.get(editor, 0) + 1
    named = [(editor if by_editor[editor] == 1 else folder, folder, d, m) for editor, folder, d, m in found]
    if names:
        picked = []
        for n in names:
            hits = [x for x in named if n in (x[0], x[1])]
            if not hits:
                raise ArenaError(f"no run of query set {queryset} under {results}/runs is named {n!r}; there are: "
                                 f"{', '.join(x[0] for x in named) or 'none'}")
            picked += [h for h in hits if h not in picked]
        named = picked
    hashes = {m["queryset_hash"] for *_, m in named}
    if len(hashes) > 1:
        listing = "; ".join(f"{x[0]}: {x[3]['queryset_hash'][:12]}" for x in named)
        raise ArenaError(f"the runs were made on different contents of query set {queryset} ({listing}): battles "
                         "need the same queries; pick runs of one content (arena.editors=[...]), or rerun the older ones")
    out = []
    for name, _folder, run_dir, meta in named:
        records = latest_records(run_dir)
        ok = {q: run_dir / EDITS_DIR / f"{q}.png" for q, r in records.items() if r["status"] == "ok"}
        ok = {q: p for q, p in ok.items() if p.is_file()}
        failed = {q for q, r in records.items() if r["status"] == "failed"}
        out.append(Entrant(name, run_dir, queryset, meta["queryset_hash"], ok, failed))
    if len(out) < 2:
        raise ArenaError(f"an arena needs at least two editors' runs of query set {queryset} under {results}/runs; "
                         f"found {len(out)}")
    return sorted(out, key=lambda e: e.name)


def pixel_digest(path: Path) -> str:
    """sha256 of an image's pixels as RGB (mode, size, bytes): two files of the same pixels are one image."""
    from PIL import Image

    with Image.open(path) as im:
        rgb = im.convert("RGB")
    h = hashlib.sha256(f"{rgb.mode}|{rgb.width}x{rgb.height}|".encode())
    h.update(rgb.tobytes())
    return h.hexdigest()


# -- the call log ------------------------------------------------------------------------------------------------------
RECORD_KEYS = {"key": str, "query_id": str, "first": str, "second": str, "failure": str, "error": str,
               "judge": str, "answered_by": str, "cache_key": str}


def record_digest(rec: dict[str, Any]) -> str:
    """sha256 of a call record's content (everything but its digest), as written."""
    body = {k: v for k, v in rec.items() if k != "digest"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


class CallLog:
    """The judge calls made so far, by call key, read from every `calls*.jsonl` of `folder` (the last valid record
    of a key wins); `add` appends to this process's file (`name`) in one write per batch."""

    def __init__(self, folder: Path, name: str = CALL_LOG) -> None:
        self.folder, self.path = folder, folder / name
        self.calls: dict[str, dict[str, Any]] = {}
        self.skipped = 0
        for path in sorted(folder.glob(LOG_GLOB)) if folder.is_dir() else ():
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                rec = self._valid(line)
                if rec is None:
                    self.skipped += bool(line.strip())
                else:
                    self.calls[rec["key"]] = rec

    @staticmethod
    def _valid(line: str) -> dict[str, Any] | None:
        try:
            rec = json.loads(line)
        except ValueError:
            return None
        if not isinstance(rec, dict) or not all(isinstance(rec.get(k), t) for k, t in RECORD_KEYS.items()):
            return None
        if not (rec.get("reply") is None or isinstance(rec.get("reply"), str)):
            return None
        return rec if rec.get("digest") == record_digest(rec) else None

    def add(self, records: list[dict[str, Any]]) -> None:
        from benchmark.io.fileio import append_jsonl

        records = [{**r, "digest": record_digest(r)} for r in records]
        append_jsonl(self.path, records)
        for r in records:
            self.calls[r["key"]] = r


def call_key(judge_identity: str, prompt_sha256: str, instruction: str, source: str, first: str, second: str) -> str:
    """The key of one call: judge, prompt, instruction and the pixel digests of the source and the two edits in
    the order shown (first = A)."""
    return hashlib.sha256(json.dumps([judge_identity, prompt_sha256, instruction, source, first, second])
                          .encode()).hexdigest()


# -- the run ---------------------------------------------------------------------------------------------------------
@dataclass
class PairPlan:
    """One pair's shared queries in its seeded order, how many battles it is due, and what it lacks."""

    x: str
    y: str
    order: list[str]
    target: int = 0
    missing: int = 0  # queries of the set one of the two did not edit (failed or absent)


@dataclass
class ArenaResult:
    """The ratings, per-pair tables, what was asked and reused, and the battles (x, y, query, verdict)."""

    boot: R.Bootstrap
    battles: list[tuple[str, str, str, P.Verdict]]
    pairs: dict[tuple[str, str], PairPlan]
    asked: int = 0
    reused: int = 0
    rounds: int = 0
    widest_by_round: list[float] = field(default_factory=list)  # adaptive: the widest fitted interval after each round
    dropped: int = 0
    stopped: str = ""
    anchors: dict[str, float] = field(default_factory=dict)
    log_skipped: int = 0
    predicted: int = 0
    seen: set[str] = field(default_factory=set, repr=False)  # call keys counted by this invocation
    # per pair "x|y": a few battles with their images and both calls' verdicts (the report shows them)
    examples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def _order(seed: int, x: str, y: str, shared: Sequence[str]) -> list[str]:
    rng = random.Random(hashlib.sha256(json.dumps([seed, x, y]).encode()).hexdigest())
    out = sorted(shared)
    rng.shuffle(out)
    return out


def plan_pairs(entrants: Sequence[Entrant], all_queries: Sequence[str], sampling: Sampling) -> dict[tuple[str, str], PairPlan]:
    plans = {}
    for a, b in itertools.combinations(sorted(entrants, key=lambda e: e.name), 2):
        shared = set(a.ok) & set(b.ok)
        plans[(a.name, b.name)] = PairPlan(a.name, b.name, _order(sampling.seed, a.name, b.name, shared),
                                           missing=len(all_queries) - len(shared))
    return plans


def run_arena(entrants: Sequence[Entrant], queries: dict[str, Any], source_path: Callable[[Any], Path], backbone: Any,
              prompt: P.ArenaPrompt, sampling: Sampling, folder: Path, *, anchors: dict[str, float] | None = None,
              drop_failed: bool = False, retry_failed: bool = False, shard: tuple[int, int] | None = None,
              chunk: int = 32, say: Callable[[str], None] = print, dry_run: bool = False) -> ArenaResult | None:
    """Judge the battles the sampling asks for (reusing the call log), then rate (see the module). `queries`: query
    id -> Query of the set; `source_path(query)`: its source image. Returns None for a shard or a dry run (no
    ratings: a shard's battles are a part)."""
    from PIL import Image

    names = [e.name for e in entrants]
    if len(set(names)) != len(names):
        raise ArenaError(f"two entrants share a name: {names}")
    if shard is not None and sampling.mode != "full":
        raise ArenaError("shards need arena.sampling.mode=full (adaptive sampling decides each round from all the "
                         "battles so far); run adaptive sampling unsharded")
    by_name = {e.name: e for e in entrants}
    for e in entrants:
        stray = sorted(set(e.ok) - set(queries))[:3]
        if stray:
            raise ArenaError(f"{e.run_dir}: edits of queries not in the query set ({', '.join(stray)}): the run is "
                             "of another query set content")
    anchors = {m: v for m, v in (anchors or {}).items() if m in by_name}
    free = [n for n in names if n not in anchors]
    if anchors and not free:
        raise ArenaError("every editor is anchored: nothing to fit (leave out arena.anchor to refit jointly)")
    pairs = plan_pairs(entrants, sorted(queries), sampling)
    if anchors:  # as GenArena: battles between two anchored editors are not judged (their ratings are fixed)
        pairs = {k: v for k, v in pairs.items() if k[0] in free or k[1] in free}
    identity = backbone.identity
    log_name = CALL_LOG if shard is None else f"calls.shard{shard[0]}of{shard[1]}.jsonl"
    log = CallLog(folder, log_name)
    digests: dict[Path, str] = {}

    def digest(path: Path) -> str:
        if path not in digests:
            digests[path] = pixel_digest(path)
        return digests[path]

    def keys(x: str, y: str, qid: str) -> tuple[str, str]:
        q = queries[qid]
        src, dx, dy = digest(source_path(q)), digest(by_name[x].ok[qid]), digest(by_name[y].ok[qid])
        return (call_key(identity, prompt.sha256, q.instruction, src, dx, dy),
                call_key(identity, prompt.sha256, q.instruction, src, dy, dx))

    def usable(rec: dict[str, Any] | None) -> bool:
        return rec is not None and not (retry_failed and (rec["failure"] or _unparsed(rec)))

    result = ArenaResult(R.Bootstrap({}, {}, {}, {}, {}, 0, 0), [], pairs, anchors=anchors, log_skipped=log.skipped)
    if log.skipped:
        say(f"[arena] {log.skipped} line(s) of the call log did not check (cut by a kill or altered): those calls are "
            "asked again")
    for p in pairs.values():
        p.target = min(len(p.order), sampling.min_battles if sampling.mode == "adaptive" else sampling.max_battles)
    while True:
        result.rounds += 1
        todo: list[tuple[str, str, str, int, str]] = []  # (x, y, qid, which call, key)
        seen = result.seen
        planned = [(p.x, p.y, qid) for p in pairs.values() for qid in p.order[:p.target]]
        if shard is not None:
            planned = planned[shard[0]::shard[1]]
        for x, y, qid in planned:
            for n, key in enumerate(keys(x, y, qid)):
                if key in seen:
                    continue
                seen.add(key)
                if usable(log.calls.get(key)):
                    result.reused += 1
                else:
                    todo.append((x, y, qid, n, key))
        if result.rounds == 1:
            result.predicted = len(todo)
            extra = ""
            if sampling.mode == "adaptive":
                ceiling = sum(2 * min(len(p.order), sampling.max_battles) for p in pairs.values())
                extra = f"; adaptive sampling may ask up to {max(0, ceiling - result.reused - len(todo))} more"
            say(f"[arena] budget: {len(pairs)} pairs, {len(planned)} battles in the first round: {len(todo)} judge "
                f"calls to make, {result.reused} reused from the call log{extra}")
            if dry_run:
                return None
        for start in range(0, len(todo), chunk):
            part = todo[start:start + chunk]
            requests = []
            for x, y, qid, n, _ in part:
                q = queries[qid]
                first, second = (x, y) if n == 0 else (y, x)
                ims = [Image.open(source_path(q)).convert("RGB"), Image.open(by_name[first].ok[qid]).convert("RGB"),
                       Image.open(by_name[second].ok[qid]).convert("RGB")]
                requests.append((ims, prompt.request(q.instruction, 1)))
            for *_, key in part:
                old = log.calls.get(key)
                if old is not None and old.get("cache_key") and hasattr(backbone, "reject"):
                    backbone.reject(_Reply(old["cache_key"]), "asked again (arena retry_failed)")
            replies = backbone.generate(requests)
            if len(replies) != len(requests):
                raise ArenaError(f"the judge {backbone.name} answered {len(replies)} of {len(requests)} requests")
            records = []
            for (x, y, qid, n, key), reply in zip(part, replies, strict=True):
                failure = str(getattr(reply, "failure", "") or "")
                records.append({"key": key, "query_id": qid, "first": x if n == 0 else y, "second": y if n == 0 else x,
                                "reply": None if failure else str(reply), "failure": failure,
                                "error": str(getattr(reply, "error", "") or ""), "judge": str(backbone.name),
                                "answered_by": str(getattr(reply, "answered_by", "") or ""),
                                "cache_key": str(getattr(reply, "cache_key", "") or "")})
            log.add(records)
            result.asked += len(part)
            say(f"[arena] round {result.rounds}: {min(start + chunk, len(todo))}/{len(todo)} calls")
        if shard is not None:
            say(f"[arena] shard {shard[0]}/{shard[1]}: {len(planned)} battles judged or reused ({result.asked} calls "
                "made); rerun without the shard setting to rate all shards' battles together")
            return None
        result.battles = []
        for p in pairs.values():
            for qid in p.order[:p.target]:
                k1, k2 = keys(p.x, p.y, qid)
                r1, r2 = log.calls[k1], log.calls[k2]
                result.battles.append((p.x, p.y, qid, P.verdict(r1["reply"], r2["reply"])))
        result.boot = _rate(result, sampling, drop_failed, names)
        result.examples = {}
        for x, y, qid, v in result.battles:
            shown = result.examples.setdefault(f"{x}|{y}", [])
            if len(shown) < EXAMPLES_PER_PAIR:
                shown.append({"query_id": qid, "instruction": queries[qid].instruction,
                              "source": str(source_path(queries[qid])), "a_edit": str(by_name[x].ok[qid]),
                              "b_edit": str(by_name[y].ok[qid]), "first_call": v.sides[0], "second_call": v.sides[1],
                              "outcome": v.outcome, "consistent": v.consistent, "failed_calls": v.failed_calls})
        if sampling.mode == "full":
            result.stopped = "full: every shared query of every pair (capped at max_battles)"
            break
        widths = {m: result.boot.width(m) for m in free if m in result.boot.low}
        widest = max(widths.values()) if widths else 0.0
        result.widest_by_round.append(widest)
        if widest <= sampling.target_ci:
            result.stopped = (f"the widest 95% interval of the fitted editors is {widest:.1f} <= target_ci "
                              f"{sampling.target_ci:g} Elo")
            break
        grow = [p for p in pairs.values() if p.target < min(len(p.order), sampling.max_battles)]
        if not grow:
            result.stopped = (f"every pair reached max_battles ({sampling.max_battles}) or ran out of shared queries, "
                              f"the widest interval still {widest:.1f} > {sampling.target_ci:g} Elo")
            break
        for p in grow:
            p.target = min(p.target + sampling.batch, len(p.order), sampling.max_battles)
    return result


class _Reply(str):
    def __new__(cls, cache_key: str) -> _Reply:
        out = super().__new__(cls, "")
        out.cache_key = cache_key  # type: ignore[attr-defined]
        return out


def _unparsed(rec: dict[str, Any]) -> bool:
    if rec["reply"] is None:
        return True
    try:
        P.parse_reply(rec["reply"])
    except P.ReplyError:
        return True
    return False


def _rate(result: ArenaResult, sampling: Sampling, drop_failed: bool, names: list[str]) -> R.Bootstrap:
    kept = [(x, y, v.outcome) for x, y, _q, v in result.battles if not (drop_failed and v.failed_calls)]
    result.dropped = len(result.battles) - len(kept)
    # a canonical order (pair, then query), so that shards and reruns give the same bootstrap draws
    kept_sorted = [b for _, b in sorted(zip([(x, y, q) for x, y, q, v in result.battles
                                              if not (drop_failed and v.failed_calls)], kept, strict=True))]
    if result.anchors:  # GenArena fits the battles after its milestone: here, those with a fitted editor
        free = set(names) - set(result.anchors)
        kept_sorted = [b for b in kept_sorted if b[0] in free or b[1] in free]
    return R.bootstrap(kept_sorted, n_resamples=sampling.resamples, seed=sampling.seed, models=names,
                       fixed=result.anchors or None)


# -- tables ----------------------------------------------------------------------------------------------------------
def summary(result: ArenaResult) -> dict[str, Any]:
    """Everything `editmeter arena` prints and writes: per editor, per pair, the win-rate matrix."""
    boot = result.boot
    battles = [(x, y, v.outcome) for x, y, _q, v in result.battles]
    tables = R.pair_tables(battles, [v.failed_calls for *_, v in result.battles],
                           [v.consistent for *_, v in result.battles])
    calls_failed: dict[str, int] = {}
    for x, y, _q, v in result.battles:
        for m in (x, y):
            calls_failed[m] = calls_failed.get(m, 0) + v.failed_calls
    editors = []
    for m in sorted(boot.rating, key=lambda k: -boot.rating[k]):
        w = sum(t["wins_first"] if x == m else t["wins_second"] for (x, y), t in tables.items() if m in (x, y))
        lo = sum(t["wins_second"] if x == m else t["wins_first"] for (x, y), t in tables.items() if m in (x, y))
        ties = sum(t["ties"] for (x, y), t in tables.items() if m in (x, y))
        editors.append({"editor": m, "rating": boot.rating[m], "ci_low": boot.low[m], "ci_high": boot.high[m],
                        "point": boot.point[m], "anchored": m in result.anchors, "battles": w + lo + ties,
                        "wins": w, "losses": lo, "ties": ties, "failed_calls": calls_failed.get(m, 0),
                        "no_points": w + lo + ties > 0 and w == 0 and ties == 0})
    pairs = []
    for (x, y), p in result.pairs.items():
        t = tables.get((x, y), {"battles": 0, "wins_first": 0, "wins_second": 0, "ties": 0, "consistent": 0,
                                "with_failed_call": 0})
        pairs.append({"a": x, "b": y, **t, "consistency": t["consistent"] / t["battles"] if t["battles"] else None,
                      "shared_queries": len(p.order), "missing_or_failed": p.missing})
    matrix = {m: {} for m in boot.rating}
    for row in pairs:
        n = row["battles"]
        if n:
            matrix[row["a"]][row["b"]] = (row["wins_first"] + 0.5 * row["ties"]) / n
            matrix[row["b"]][row["a"]] = (row["wins_second"] + 0.5 * row["ties"]) / n
    return {"editors": editors, "pairs": pairs, "win_rate": matrix, "battles": len(result.battles),
            "dropped_battles_with_failed_call": result.dropped, "calls_asked": result.asked,
            "calls_reused": result.reused, "calls_predicted": result.predicted, "rounds": result.rounds,
            "widest_ci_by_round": result.widest_by_round, "stopped": result.stopped, "resamples": boot.n_resamples, "anchors": result.anchors,
            "log_lines_skipped": result.log_skipped, "examples": result.examples}


# -- battles outside a run (metaeval: people's pairs) ----------------------------------------------------------------
def image_digest(img: Any) -> str:
    """sha256 of a PIL image's pixels as RGB (mode, size, bytes), as `pixel_digest` of a file."""
    rgb = img.convert("RGB")
    h = hashlib.sha256(f"{rgb.mode}|{rgb.width}x{rgb.height}|".encode())
    h.update(rgb.tobytes())
    return h.hexdigest()


def judge_battles(items: Sequence[tuple[str, Any, Any, Any]], backbone: Any, prompt: P.ArenaPrompt, folder: Path, *,
                  chunk: int = 32, retry_failed: bool = False) -> tuple[list[P.Verdict], int, int]:
    """One battle per (instruction, source, first edit, second edit) (PIL images; the first edit is model_a),
    through the call log in `folder` (calls keyed as in a run: asked once, reused after). Returns the verdicts in
    order, the calls made and the calls reused."""
    log = CallLog(folder)
    identity = backbone.identity
    keyed = []
    for instruction, src, a, b in items:
        s, da, db = image_digest(src), image_digest(a), image_digest(b)
        keyed.append((call_key(identity, prompt.sha256, instruction, s, da, db),
                      call_key(identity, prompt.sha256, instruction, s, db, da)))
    todo, seen = [], set()
    for n, (k1, k2) in enumerate(keyed):
        for which, key in ((0, k1), (1, k2)):
            rec = log.calls.get(key)
            if key in seen or (rec is not None and not (retry_failed and (rec["failure"] or _unparsed(rec)))):
                continue
            seen.add(key)
            todo.append((n, which, key))
    for start in range(0, len(todo), chunk):
        part = todo[start:start + chunk]
        requests = []
        for n, which, _ in part:
            instruction, src, a, b = items[n]
            first, second = (a, b) if which == 0 else (b, a)
            requests.append(([src.convert("RGB"), first.convert("RGB"), second.convert("RGB")],
                             prompt.request(instruction, 1)))
        replies = backbone.generate(requests)
        if len(replies) != len(requests):
            raise ArenaError(f"the judge {backbone.name} answered {len(replies)} of {len(requests)} requests")
        records = []
        for (n, which, key), reply in zip(part, replies, strict=True):
            failure = str(getattr(reply, "failure", "") or "")
            records.append({"key": key, "query_id": f"item{n}", "first": "a" if which == 0 else "b",
                            "second": "b" if which == 0 else "a", "reply": None if failure else str(reply),
                            "failure": failure, "error": str(getattr(reply, "error", "") or ""),
                            "judge": str(backbone.name), "answered_by": str(getattr(reply, "answered_by", "") or ""),
                            "cache_key": str(getattr(reply, "cache_key", "") or "")})
        log.add(records)
    verdicts = [P.verdict(log.calls[k1]["reply"], log.calls[k2]["reply"]) for k1, k2 in keyed]
    return verdicts, len(todo), 2 * len(keyed) - len(todo)
