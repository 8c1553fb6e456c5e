"""Aggregation: per-sample score rows -> leaderboard tables with completeness, failures, bootstrap SE, provenance.

    python -m benchmark.tables.leaderboard show [--results results] [--queryset demo] [--by type|class] [--sort COL]

Every row says what it covers: `n_total` queries of the full set (those its metrics score), `n_selected` of them
ever selected into the run (shards, limit), `n_ok`, `n_failed` (edit failed or unscorable), `n_missing` (not edited
or not scored yet, selected or not) and `complete` (nothing missing, every score current). `mark` says what a row
is short of (`coverage_mark`): `PARTIAL <ok+failed>/<total>` (and the quarantined parts' reason), `FAILED
<failed>/<failed>` when no query succeeded, `STALE <k>/<ok>` when scored edits were replaced since, `JUDGE FAILED
<k>/<ok+failed> (<split by kind>)` when a judged suite's judge call failed, was refused or did not parse for k rows
(`judge_failure_mark`; those rows are failed rows, never scores); partial and stale rows sort after the complete
rows of its section.

Failed edits are excluded from every mean and counted in `n_failed`; a metric that is undefined for a sample (NaN,
e.g. the outside-mask PSNR of a full-image style edit) is excluded from that metric's mean and `<metric>_n` says how
many samples it covers. Rows are sorted by query id before any resampling, so no value depends on the order or the
split of the Parquet parts (shards, interruptions).

Nothing under results/ is executed: suite summaries come from `benchmark.tables.summaries`; run.json, the query index
and every score part are validated, and a bad file is skipped or quarantined with a warning naming it.

The aggregate stage (`benchmark.stages.aggregate.write_leaderboards`) writes the tables; each run's rows are
cached by `benchmark.tables.aggregate_cache` under a key of their inputs (adding one run computes one);
editor settings that differ among one editor's rows become `set.<key>` columns (`benchmark.io.settings`) and feed
`leaderboard_sweeps.csv`; `show` is rendered by `benchmark.tables.show`.
"""

from __future__ import annotations

import argparse
import inspect
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.io.hashing import stable_hash
from benchmark.io.provenance import PROJECT_ROOT
from benchmark.io.score_cache import SCORES_DIR, BadCacheFile, QueryIndex, warn
from benchmark.io.turns import ProtocolError, protocol_of
from benchmark.metrics.base import SUMMARY_NOTE

BOOTSTRAP_CHUNK = 500  # resamples drawn at once (bounds memory at chunk * n indices)
RUN_META = "run.json"
FLOAT_FORMAT = "%.6g"  # the CSVs' precision
TABLES = {"leaderboard.csv": (), "leaderboard_by_type.csv": ("edit_type",), "leaderboard_by_class.csv": ("object_class",)}
# MagicBrush's final_turn / all_turn figures of the runs of sets with multi-turn sessions (`benchmark.io.turns`)
TURNS_TABLE = "leaderboard_turns.csv"
ROW_TABLES = (*TABLES, TURNS_TABLE)  # the tables each run's cached rows hold
TURN_COLUMNS = ("protocol", "setting", "n_sessions")
ID_COLUMNS = ("queryset", "queryset_hash", "metric_set", "editor", "editor_sig", "prompt_kind", "profile", "seed")
# a row's queries of the set that its metrics leave out for this editor family (`excluded_note`): not in n_total
EXCLUDED_COLUMN = "excluded"
COUNT_COLUMNS = ("n_selected", "n_total", "n_ok", "n_failed", "n_missing", "complete", "mark")
PROVENANCE_COLUMNS = ("metric_sig", "git_sha", "versions", "device")
# True on the rows of an editor that rewrites each instruction before editing (`Editor.rewrites_instruction`): its
# scores are not those of the instruction as the set gives it; `show` and the report mark the rows
REWRITE_COLUMN = "rewrites_instruction"
# single_turn or multi_turn (`benchmark.io.turns.protocol_of`: run.json's `protocol`, else the one its editor declares,
# else single_turn): how a multi-turn session's turns got their input images (benchmark.io.protocols)
PROTOCOL_COLUMN = "protocol"
SAMPLE_COLUMNS = ("sample_of", "sample_seed")  # a sampled set's rows: the full set's size and the draw's seed
# run.json fields aggregation uses, with their types (anything else in run.json is informational)
RUN_FIELDS: dict[str, type | tuple[type, ...]] = {
    "queryset": str, "queryset_hash": str, "queryset_size": int, "editor": str, "editor_sig": str,
    "prompt_kind": str, "profile": str, "seed": int, "metric_sig": str, "metrics": dict, "git_sha": str,
    "versions": dict, "device": str,
}


def bootstrap_se(values: np.ndarray, n_resamples: int, seed: int) -> float:
    """Bootstrap standard error of the mean of the finite `values` (NaN when fewer than 2).
    The result depends on the order of `values`: callers pass them in query-id order."""
    x = np.asarray(values, dtype=np.float64)
    x = x[np.isfinite(x)]
    n = len(x)
    if n < 2 or n_resamples < 2:
        return float("nan")
    rng = np.random.default_rng(seed)
    x = x - x.mean()  # centred: the SE is shift-invariant, and constant data gives exactly 0
    means = np.empty(n_resamples)
    for start in range(0, n_resamples, BOOTSTRAP_CHUNK):
        k = min(BOOTSTRAP_CHUNK, n_resamples - start)
        means[start : start + k] = x[rng.integers(0, n, size=(k, n))].mean(axis=1)
    return float(means.std(ddof=1))


def coverage_mark(n_total: int, n_ok: int, n_failed: int, n_stale: int = 0) -> str:
    """A row's mark: '' for a complete and current row, else each reason it is not, joined by '; '.
    `PARTIAL done/total`: queries not ok or failed yet; `FAILED failed/done`: no query succeeded (every metric is
    NaN); `STALE changed/ok`: scored edits whose PNG was replaced since it was scored."""
    done = n_ok + n_failed
    marks = [f"PARTIAL {done}/{n_total}" if done < n_total else "",
             f"FAILED {n_failed}/{done}" if n_failed and not n_ok else "",
             f"STALE {n_stale}/{n_ok}" if n_stale else ""]
    return join_marks(*marks)


def join_marks(*marks: str) -> str:
    """Non-empty marks joined by '; ' (a row can be partial, failed, stale and lack a summary at once)."""
    return "; ".join(m for m in marks if m)


def completeness(df, n_total: int | None = None, n_stale: int = 0) -> dict[str, Any]:
    """Counts of one group: its score rows `df` (any status) against the `n_total` queries it should cover, of
    whose ok rows `n_stale` were scored on an edit that has been replaced since (not current: never complete)."""
    status = df["status"]
    n_ok, n_failed = int((status == "ok").sum()), int((status == "failed").sum())
    # not `isin`: on Arrow-backed strings it costs ~30 ms per call at 50k rows, once per group
    n_selected = n_ok + n_failed + int((status == "missing").sum())
    n_total = n_selected if n_total is None else n_total
    n_missing = n_total - n_ok - n_failed
    complete = n_missing == 0 and not n_stale
    return {"n_selected": n_selected, "n_total": n_total, "n_ok": n_ok, "n_failed": n_failed, "n_missing": n_missing,
            "complete": complete, "mark": join_marks(coverage_mark(n_total, n_ok, n_failed, n_stale),
                                                     judge_failure_mark(df, n_ok + n_failed))}


JUDGE_FAILURE_WORDS = {"call_failed": "call failed", "refused": "refused", "unparseable": "unparseable"}


def judge_failure_mark(df, done: int) -> str:
    """`JUDGE FAILED k/done (a call failed, b refused, c unparseable)` for the failure rows of a judged suite whose
    judge call failed, was refused or did not parse (`judge_failure`), else ''. Those rows are in `n_failed` too:
    never a score. Rescoring (the same command again) asks the judge again for exactly them."""
    if "judge_failure" not in df or not done:
        return ""
    kinds = df.loc[df["status"] == "failed", "judge_failure"]
    counts = kinds[kinds.map(lambda k: isinstance(k, str) and bool(k))].value_counts()
    if not counts.sum():
        return ""
    split = ", ".join(f"{int(counts[k])} {w}" for k, w in JUDGE_FAILURE_WORDS.items() if k in counts)
    return f"JUDGE FAILED {int(counts.sum())}/{done} ({split})"


def summarize(df, metric_names: Sequence[str], n_resamples: int, seed: int, key: Any,
              n_total: int | None = None, n_stale: int = 0) -> dict[str, Any]:
    """One table row for the score rows `df` of one group (in query-id order), out of `n_total` queries, `n_stale`
    of its ok rows scored on an edit replaced since."""
    ok = df[df["status"] == "ok"]
    row = completeness(df, n_total, n_stale)
    for m in metric_names:
        vals = ok[m].to_numpy(dtype=np.float64) if m in ok else np.array([])
        finite = vals[np.isfinite(vals)]
        row[m] = float(finite.mean()) if len(finite) else float("nan")
        # seed from the group key so a group's SE does not depend on which other groups exist; the key names the
        # editor, not its signature, so edits carried over to a new key keep their SEs
        row[f"{m}_se"] = bootstrap_se(finite, n_resamples, int(stable_hash([seed, key, m], 8), 16))
        row[f"{m}_n"] = len(finite)
    return row


@dataclass
class Run:
    """One run folder's validated metadata, query index and score rows (sorted by query id)."""

    meta: dict[str, Any]
    index: QueryIndex
    scores: Any
    path: Path
    stale: frozenset[str] = frozenset()  # ok rows whose edit PNG was replaced since it was scored
    quarantined: str = ""  # why rows may be missing: the run's quarantined score parts ('' when none)


def check_run_meta(meta: Any) -> dict[str, Any]:
    """`meta` if it has every field aggregation uses, with the right types; else BadCacheFile naming them."""
    if not isinstance(meta, dict):
        raise BadCacheFile("not a JSON object")
    problems = [f"{k} (want {t.__name__})" for k, t in RUN_FIELDS.items()
                if not isinstance(meta.get(k), t) or (t is int and isinstance(meta.get(k), bool))]
    for k in ("metric_order", "column_order"):
        v = meta.get(k)
        if v is not None and not (isinstance(v, list) and all(isinstance(x, str) for x in v)):
            problems.append(f"{k} (want a list of names)")
    metrics = meta.get("metrics")
    if isinstance(metrics, dict):
        if not all(isinstance(v, dict) and isinstance(v.get("higher_is_better"), bool) for v in metrics.values()):
            problems.append("metrics (want name -> {higher_is_better, version, description})")
        else:
            unknown = [n for n in (meta.get("column_order") or []) if n not in metrics]
            if unknown:
                problems.append(f"column_order names {unknown[:3]} missing from metrics")
    suite = meta.get("suite")
    if suite is not None and not (isinstance(suite, dict) and isinstance(suite.get("name"), str)
                                  and isinstance(suite.get("components"), dict)):
        problems.append("suite (want null or {name, components})")
    if not isinstance(meta.get("metric_set", ""), str):
        problems.append("metric_set (want str)")
    try:
        protocol_of(meta)
    except ProtocolError as err:
        problems.append(f"protocol ({err})")
    scored = meta.get("scored")
    if scored is not None and not (isinstance(scored, dict) and all(isinstance(k, str) and isinstance(v, dict)
                                                                    for k, v in scored.items())):
        problems.append("scored (want metric signature -> {metric_order, column_order, metrics, suite, metric_set})")
    if problems:
        raise BadCacheFile("missing or malformed fields: " + ", ".join(problems))
    return meta


def load_run_meta(path: Path) -> dict[str, Any]:
    """Read and validate a run.json; BadCacheFile says why it cannot be used."""
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
        raise BadCacheFile(f"not readable JSON ({type(err).__name__}: {err})") from None
    return check_run_meta(meta)


def scorings(meta: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """metric signature -> run.json view for that metric set: every set the run folder was scored with (`scored`),
    or, for a run.json written before `scored` existed, its one top-level set."""
    keys = ("metric_order", "column_order", "metrics", "suite", "metric_set")
    entries = meta.get("scored") or {meta["metric_sig"]: {k: meta[k] for k in keys if k in meta}}
    return {sig: {**meta, **entry, "metric_sig": sig} for sig, entry in sorted(entries.items())}


def iter_scorings(results: Path, metric_sig: str | None = None) -> Iterator[tuple[Path, dict[str, Any]]]:
    """(run.json path, validated view) of every (run folder, metric set) under `results/runs`, for `metric_sig` only
    when given; a bad run.json or `scored` entry is skipped with a warning naming the file."""
    for meta_path in sorted((results / "runs").glob(f"*/*/{RUN_META}")):
        try:
            meta = load_run_meta(meta_path)
        except BadCacheFile as err:
            warn(f"{meta_path}: {err}; this run is skipped (rerun its configuration to rewrite it)")
            continue
        for sig, view in scorings(meta).items():
            if metric_sig is not None and sig != metric_sig:
                continue
            try:
                check_run_meta(view)
            except BadCacheFile as err:
                warn(f"{meta_path}: metric set {sig}: {err}; skipped (rescore it to rewrite the entry)")
                continue
            yield meta_path, view


def collect_runs(results: Path, metric_sig: str | None = None, *, per_query_only: bool = False) -> list[Run]:
    """Every (run folder, metric set) under `results/runs` with valid scores, for `metric_sig` only when given
    (default: every metric set each run folder was scored with, so the tables do not depend on command order).

    A run whose run.json or query index is bad is skipped with a warning naming the file; bad score parts are
    quarantined (their rows then count as missing). A run without any valid score row is left out here (a paired
    comparison has nothing to pair); the leaderboard (`aggregate_cache.summarise`) keeps it as a PARTIAL row."""
    runs = (collect_run(meta_path, view, per_query_only=per_query_only)
            for meta_path, view in iter_scorings(results, metric_sig))
    return [run for run in runs if run is not None and len(run.scores)]


def collect_run(meta_path: Path, meta: dict[str, Any], *, per_query_only: bool = False) -> Run | None:
    """One run folder's scores for the metric set `meta` describes (a validated view from `iter_scorings`), or
    None when it has no scores (a bad query index: with a warning). `per_query_only` reads only the row keys and
    the per-query metric columns (not e.g. HATIE's per-row FID features: hundreds of MB per run at full scale)."""
    from benchmark.io.score_cache import INDEX_FILE, read_query_index
    from benchmark.stages.score import ROW_KEYS, read_scores, scores_dir

    sig = meta["metric_sig"]
    folder = scores_dir(meta_path.parent, sig)
    if not folder.is_dir():
        return None
    index = read_query_index(folder)
    why = ("no valid " + INDEX_FILE if index is None else
           f"{INDEX_FILE} is for query set {index.queryset_hash[:10]}, run.json for {meta['queryset_hash'][:10]}"
           if index.queryset_hash != meta["queryset_hash"] else
           f"{INDEX_FILE} lists {len(index.rows)} queries, run.json's queryset_size is {meta['queryset_size']}"
           if len(index.rows) != meta["queryset_size"] else "")
    if why:
        warn(f"{folder}: {why}; this run is skipped (rerun its score stage)")
        return None
    columns = [*ROW_KEYS, *(meta.get("metric_order") or meta["metrics"])] if per_query_only else None
    scores = read_scores(meta_path.parent, sig, columns=columns, valid_ids=index.ids)
    # a run without a valid row (its only part quarantined, or none written yet) stays on the board as PARTIAL 0/n
    scores = scores.sort_values("query_id", kind="stable").reset_index(drop=True)
    return Run(meta, index, scores, meta_path.parent, changed_edits(meta_path.parent, scores),
               quarantine_note(folder))


def changed_edits(run_dir: Path, scores) -> frozenset[str]:
    """Ids of the ok rows of `scores` whose edit PNG now holds other bytes than the ones scored (`edit_sha256`).

    The hashes come from the stat-keyed cache the score stage fills (`benchmark.io.filehash`): a stat per edit, and
    only an edit whose size, mtime, ctime or inode changed is read again to confirm. An edit that is gone is not
    counted: no newer bytes replaced the scored ones."""
    import os

    from benchmark.io.filehash import digests
    from benchmark.stages.edit import EDITS_DIR

    ok = scores[scores["status"] == "ok"] if len(scores) else scores
    if not len(ok):
        return frozenset()
    folder = run_dir / EDITS_DIR
    recorded = dict(zip(ok["query_id"], ok["edit_sha256"].fillna(""), strict=True))
    files = []
    for qid in recorded:
        try:
            files.append((f"{qid}.png", os.stat(folder / f"{qid}.png")))
        except OSError:
            continue
    try:
        now = digests(folder, files)
    except OSError as err:  # vanished or unreadable after its stat: its scores cannot be called current
        warn(f"{folder}: could not hash the edits to check their scores are current ({err}); marked stale")
        return frozenset(recorded)
    return frozenset(name[:-4] for name, sha in now.items() if sha != recorded[name[:-4]])


def quarantine_note(folder: Path) -> str:
    """'' or why rows of this metric set may be missing: how many of its score parts are quarantined, and the
    first one's reason (from its `.reason.txt`)."""
    from benchmark.io.score_cache import QUARANTINE_DIR

    reasons = sorted((folder / QUARANTINE_DIR).glob("*.reason.txt"))
    if not reasons:
        return ""
    try:
        first = reasons[0].read_text(encoding="utf-8", errors="replace").strip().splitlines()[0][:300]
    except (OSError, IndexError):
        first = "reason unreadable"
    name = reasons[0].name[: -len(".reason.txt")]
    return (f"{len(reasons)} score part(s) quarantined in {SCORES_DIR}/{folder.name}/{QUARANTINE_DIR}/, "
            f"e.g. {name}: {first}")


_collect_run = collect_run  # the name before it was public (kept for callers written against it)


def plain(value: Any) -> Any:
    """A table cell as a plain Python scalar (numpy scalars unwrapped), so fresh and cached rows are identical."""
    return value.item() if isinstance(value, np.generic) else value


def run_rows(run: Run, n_resamples: int, seed: int) -> dict[str, list[dict[str, Any]]]:
    """One run's rows of every table (file name -> rows): what the aggregate cache stores per run and metric set."""
    rows = {fname: [{k: plain(v) for k, v in row.items()} for row in _run_rows(run, group_cols, fname, n_resamples, seed)]
            for fname, group_cols in TABLES.items()}
    return rows | {TURNS_TABLE: [{k: plain(v) for k, v in row.items()} for row in turn_rows(run, n_resamples, seed)]}


def _identity(meta: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(identity columns, provenance columns) of one run's rows."""
    ident = {c: meta.get(c, "") if c == "metric_set" else meta[c] for c in ID_COLUMNS}
    prov = {"metric_sig": meta["metric_sig"], "git_sha": meta["git_sha"],
            "versions": json.dumps(meta["versions"], sort_keys=True), "device": meta["device"]}
    return ident, prov | sample_columns(meta) | carried_columns(meta)


def turn_rows(run: Run, n_resamples: int, seed: int) -> list[dict[str, Any]]:
    """The run's rows of `leaderboard_turns.csv`; none when its query set has no sessions. First MagicBrush's figure
    for its protocol (`final_turn` for a multi_turn run, `all_turn` for a single_turn one; `benchmark.io.turns`): the
    per-query metric means over the queries that figure pairs, with their SE, counts and mark; `n_total` counts the
    sessions (final_turn) or the turns (all_turn) the figure owes, `n_sessions` the sessions. Then one row per turn
    index (`turn_1`, `turn_2`, ...: that turn of every session that has it; editmeter's own breakdown, which the
    script does not report), where a multi-turn run's errors show as they accumulate."""
    from benchmark.io.turns import SETTINGS, ProtocolError, owed_queries, protocol_of

    meta = run.meta
    if not run.index.sessions:
        return []
    try:
        protocol = protocol_of(meta)
    except ProtocolError as err:
        warn(f"{run.path / RUN_META}: {err}; no {TURNS_TABLE} row for it (rerun its configuration to rewrite it)")
        return []
    idx = run.index.frame()
    in_scope = set(idx.loc[idx["excluded"] == "", "query_id"].to_numpy(dtype=object))
    setting = SETTINGS[protocol]
    owed, n_sessions = owed_queries(run.index.sessions, setting, in_scope)
    rows = [_turns_row(run, protocol, setting, owed, n_sessions, n_resamples, seed)]
    by_turn: dict[int, list[str]] = {}
    for qid, _, turn in run.index.sessions:
        if qid in in_scope:
            by_turn.setdefault(int(turn), []).append(qid)
    for turn, qids in sorted(by_turn.items()):
        rows.append(_turns_row(run, protocol, f"turn_{turn}", sorted(qids), len(qids), n_resamples, seed))
    return rows


def _turns_row(run: Run, protocol: str, setting: str, owed: list[str], n_sessions: int, n_resamples: int,
               seed: int) -> dict[str, Any]:
    """One row of `leaderboard_turns.csv`: the run's per-query metric means over the `owed` queries."""
    meta = run.meta
    wanted = set(owed)
    qids = run.scores["query_id"].to_numpy(dtype=object)
    keep = np.fromiter((q in wanted for q in qids), dtype=bool, count=len(qids))
    part = run.scores[keep & (run.scores["status"] != "excluded").to_numpy()]
    n_stale = sum(1 for q in part.loc[part["status"] == "ok", "query_id"] if q in run.stale) if run.stale else 0
    metric_names = meta.get("metric_order") or list(meta["metrics"])
    gkey = [meta["editor"], meta["queryset_hash"], TURNS_TABLE, setting]
    stats = summarize(part, metric_names, n_resamples, seed, gkey, len(owed), n_stale)
    if stats["n_missing"] and run.quarantined:
        stats["mark"] = join_marks(stats["mark"], run.quarantined)
    ident, prov = _identity(meta)
    return (ident | {REWRITE_COLUMN: rewrites_instruction(meta), "protocol": protocol, "setting": setting,
                     "n_sessions": n_sessions} | stats | prov)


def rewrites_instruction(meta: dict[str, Any]) -> bool:
    """Whether the run's editor rewrote each instruction before editing (run.json `rewrites_instruction`; a run.json
    written before the declaration existed: False)."""
    return meta.get(REWRITE_COLUMN) is True


CARRIED_COLUMN = "carried_from"


def carried_columns(meta: dict[str, Any]) -> dict[str, Any]:
    """`carried_from` of a run holding edits carried over from an earlier run of its setting after a verified sample
    (benchmark.stages.carry; run.json `carried_from`): per earlier run, its folder, the edits, the check's verdict
    and the git sha that checked it, e.g. `identity-2819345737d0: 6 edits, verified 8/8 identical at 38c7b69398a3`;
    {} for a run that carried nothing."""
    carried = meta.get("carried_from")
    if not isinstance(carried, dict) or not carried:
        return {}
    parts = []
    for run, entry in sorted(carried.items()):
        if not isinstance(entry, dict):
            continue
        tol = f" (tolerance {entry.get('tolerance')} level(s))" if entry.get("tolerance") else ""
        parts.append(f"{str(run).rsplit('/', 1)[-1]}: {entry.get('edits')} edits, verified {entry.get('verified')}"
                     f"{tol} at {str(entry.get('git_sha'))[:12]}")
    return {CARRIED_COLUMN: "; ".join(parts)} if parts else {}


def sample_columns(meta: dict[str, Any]) -> dict[str, Any]:
    """`sample_of` (the full set's size) and `sample_seed` of a run of a sampled set (queryset.sample), else {}."""
    sample = meta.get("sample")
    if not isinstance(sample, dict) or not isinstance(sample.get("set_size"), int):
        return {}
    return {"sample_of": sample["set_size"], "sample_seed": sample.get("seed")}


def _run_rows(run: Run, group_cols: tuple[str, ...], fname: str, n_resamples: int, seed: int) -> list[dict]:
    from benchmark.tables.summaries import suite_summary

    meta = run.meta
    idx = run.index.frame()
    left_out = idx[idx["excluded"] != ""]  # said in each row's `excluded`, so a count below the set's is explained
    idx = idx[idx["excluded"] == ""]  # queries the metrics do not score for this editor family are not owed
    in_scope = set(idx["query_id"].to_numpy(dtype=object))
    # a set lookup per row, not `isin`: on Arrow-backed strings `isin` boxes every value (0.9 s at 50k ids)
    qids = run.scores["query_id"].to_numpy(dtype=object)
    scoped = np.fromiter((q in in_scope for q in qids), dtype=bool, count=len(qids))
    # group membership from the index (the query set), so groups nobody selected yet still show up as missing
    scores = run.scores[scoped & (run.scores["status"] != "excluded").to_numpy()]
    scores = scores.drop(columns=[c for c in group_cols if c in scores]).merge(
        idx[["query_id", *group_cols]], on="query_id", how="left", sort=False) if group_cols else scores
    metric_names = meta.get("metric_order") or list(meta["metrics"])
    suite = meta.get("suite")
    summary_fn = suite_summary(suite["name"]) if suite else None
    ident, prov = _identity(meta)
    if group_cols:
        totals = idx.groupby(list(group_cols), sort=True).size()
        groups = [(k if isinstance(k, tuple) else (k,), int(n)) for k, n in totals.items()]
    else:
        groups = [((), len(idx))]
    rows = []
    for key, n_total in groups:
        part = scores
        for col, v in zip(group_cols, key, strict=True):
            part = part[part[col] == v]
        gkey = [meta["editor"], meta["queryset_hash"], fname, *key]
        out = left_out
        for col, v in zip(group_cols, key, strict=True):
            out = out[out[col] == v]
        n_stale = sum(1 for q in part.loc[part["status"] == "ok", "query_id"] if q in run.stale) if run.stale else 0
        stats = summarize(part, metric_names, n_resamples, seed, gkey, n_total, n_stale)
        if stats["n_missing"] and run.quarantined:
            stats["mark"] = join_marks(stats["mark"], run.quarantined)
        if suite is not None:
            if summary_fn is not None:
                ok = part[part["status"] == "ok"]
                # metaeval: the suite's recorded components (e.g. HATIE's weight profile), for summaries taking them
                extra = ({"components": suite["components"]}
                         if "components" in inspect.signature(summary_fn).parameters else {})
                summary = summary_fn(ok, {m: stats[m] for m in metric_names},
                                     {m: stats[f"{m}_se"] for m in metric_names}, overall=not group_cols,
                                     seed=int(stable_hash([seed, gkey, "suite"], 8), 16), **extra)
                # a summary says why a value of its is NaN under SUMMARY_NOTE (e.g. HATIE's Total without IQ)
                note = summary.pop(SUMMARY_NOTE, "")
                stats |= summary
                stats["mark"] = join_marks(stats["mark"], note)
            else:
                stats["mark"] = join_marks(stats["mark"], f"UNKNOWN SUITE {suite['name']!r}: no summary")
            stats["components"] = json.dumps(suite["components"], sort_keys=True)
        rows.append(ident | {REWRITE_COLUMN: rewrites_instruction(meta), PROTOCOL_COLUMN: protocol_of(meta)}
                    | dict(zip(group_cols, key, strict=True))
                    | stats | {EXCLUDED_COLUMN: excluded_note(out["excluded"])} | prov)
    return rows


def excluded_note(reasons: Any) -> str:
    """A row's `excluded`: how many of the set's queries its metrics do not score for this editor and why, e.g.
    `2 not scored: hatie does not score obj_remove for description-based editors`; '' when none are left out."""
    counts = reasons.value_counts(sort=False)
    if not len(counts):
        return ""
    why = "; ".join(f"{why}" if len(counts) == 1 else f"{int(n)} x {why}" for why, n in counts.items())
    return f"{int(counts.sum())} not scored: {why}"


@dataclass
class RunSummary:
    """One (run folder, metric set): its run.json view (`scorings`), folder and rows of every table (`run_rows`)."""

    meta: dict[str, Any]
    path: Path
    rows: dict[str, list[dict[str, Any]]]


def warn_unknown_suites(metas: Sequence[tuple[dict[str, Any], Path]]) -> None:
    from benchmark.tables.summaries import known_suites

    for meta, path in metas:
        suite = meta.get("suite")
        if suite and suite["name"] not in known_suites():
            warn(f"{path / RUN_META}: unknown suite {suite['name']!r} (known: {known_suites()}); its rows get no "
                 "model-level summary and are marked")


def build_tables(runs: list[Run], n_resamples: int, seed: int) -> dict[str, Any]:
    """The three leaderboard DataFrames (overall, per edit type, per object class); complete rows first."""
    warn_unknown_suites([(run.meta, run.path) for run in runs])
    return tables_from_summaries([RunSummary(run.meta, run.path, run_rows(run, n_resamples, seed)) for run in runs])


def run_settings(meta: dict[str, Any]) -> dict[str, Any]:
    """The flat editor settings of a run (`benchmark.io.settings.flat_settings` of its info and config)."""
    from benchmark.io.settings import flat_settings

    info, config = meta.get("editor_info"), meta.get("editor_config")
    return flat_settings(info if isinstance(info, dict) else {}, config if isinstance(config, dict) else {})


def setting_columns(summaries: Sequence[RunSummary]) -> tuple[list[str], list[dict[str, Any]], dict[int, list[str]]]:
    """(setting keys that become columns, each summary's flat settings, summary index -> the keys that vary within
    its editor's rows). Rows are compared within one query set, metric set, profile and editor: settings that differ
    only across those are already told apart by the identity columns."""
    from benchmark.io.settings import varying_settings

    flat = [run_settings(s.meta) for s in summaries]
    groups: dict[tuple, list[int]] = {}
    for i, s in enumerate(summaries):
        key = (s.meta["queryset"], s.meta.get("metric_set", ""), s.meta["profile"], s.meta["editor"])
        groups.setdefault(key, []).append(i)
    varying: dict[int, list[str]] = {}
    for members in groups.values():
        keys = varying_settings([flat[i] for i in members]) if len(members) > 1 else []
        for i in members:
            varying[i] = keys
    return sorted({k for keys in varying.values() for k in keys}), flat, varying


def tables_from_summaries(summaries: Sequence[RunSummary]) -> dict[str, Any]:
    """The three leaderboard DataFrames from per-run rows, with a `set.<key>` column for every editor setting that
    differs among rows of one editor; sorted so the order of `summaries` does not matter, complete rows first."""
    import pandas as pd

    from benchmark.io.settings import column

    keys, flat, _ = setting_columns(summaries)
    tables: dict[str, Any] = {}
    for fname, group_cols in TABLES.items():
        rows = []
        for s, settings in zip(summaries, flat, strict=True):
            extra = {column(k): settings.get(k) for k in keys}
            for row in s.rows[fname]:
                ident = {c: row[c] for c in ID_COLUMNS}
                rows.append(ident | extra | {k: v for k, v in row.items() if k not in ident})
        df = pd.DataFrame(rows)
        if len(df):
            df["_partial"] = ~df["complete"].astype(bool)
            df = df.sort_values(["queryset", "metric_set", "prompt_kind", "_partial", "editor", "editor_sig", *group_cols],
                                kind="stable").drop(columns="_partial").reset_index(drop=True)
        tables[fname] = df
    return tables


def turns_table(summaries: Sequence[RunSummary]):
    """`leaderboard_turns.csv`: every run's `turn_rows`, with the same `set.<key>` columns as the other tables,
    sorted so the order of `summaries` does not matter; the identity and count columns alone when no run has one."""
    import pandas as pd

    from benchmark.io.settings import column

    keys, flat, _ = setting_columns(summaries)
    rows = []
    for s, settings in zip(summaries, flat, strict=True):
        for row in s.rows.get(TURNS_TABLE, []):
            head = {c: row[c] for c in (*ID_COLUMNS, *TURN_COLUMNS[:2])}
            rows.append(head | {column(k): settings.get(k) for k in keys}
                        | {k: v for k, v in row.items() if k not in head})
    if not rows:
        return pd.DataFrame(columns=[*ID_COLUMNS, *TURN_COLUMNS, *COUNT_COLUMNS, *PROVENANCE_COLUMNS])
    df = pd.DataFrame(rows)
    return df.sort_values(["queryset", "metric_set", "prompt_kind", "profile", "editor", "protocol", "editor_sig"],
                          kind="stable").reset_index(drop=True)


def metric_table(runs: Sequence[Run | RunSummary]):
    """Metric metadata (metric_set, version, higher_is_better, description, summary) of every metric in the
    tables, one row per (metric set, column), in each metric set's display order; `summary` marks a suite's
    model-level columns (HATIE's Total, IQ, FID, score), which are not per-query means. Keyed by the pair: two
    suites may share a column name (`l1_out` is basic's and conventional's), and each keeps its own row."""
    import pandas as pd

    seen: dict[tuple[str, str], dict] = {}
    for run in runs:
        meta = run.meta
        mset = meta.get("metric_set", "")
        per_query = set(meta.get("metric_order") or meta["metrics"])
        for name in meta.get("column_order") or meta["metrics"]:
            seen.setdefault((mset, name), {"metric": name, "metric_set": mset} | meta["metrics"][name]
                            | {"summary": name not in per_query})
    return pd.DataFrame(list(seen.values()))


SWEEP_TABLES = {"leaderboard.csv": None, "leaderboard_by_type.csv": "edit_type"}
SWEEP_FILE = "leaderboard_sweeps.csv"


def _order_key(value: Any) -> tuple:
    """Sort key of a setting value: numbers by value, then text, then missing (mixed types never compare)."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return (2, 0.0, "")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, float(value), "")
    return (1, 0.0, str(value))


def sweep_table(summaries: Sequence[RunSummary], tables: dict[str, Any]):
    """Score-vs-setting data (HATIE Fig. 6 style): for each editor whose rows differ in settings, one row per
    setting combination, edit type ('' = all) and metric, with value, se, n and completeness."""
    import pandas as pd

    from benchmark.io.settings import column

    keys, flat, varying = setting_columns(summaries)
    metrics = metric_table(summaries)
    def ident(r: dict) -> tuple:
        return tuple(str(r[c]) for c in ("queryset_hash", "editor", "editor_sig", "metric_sig"))

    by_ident = {ident(s.meta): i for i, s in enumerate(summaries)}
    out = []
    for fname, group_col in SWEEP_TABLES.items():
        for row in tables[fname].to_dict("records") if len(tables[fname]) else []:
            i = by_ident[ident(row)]
            if not varying[i]:
                continue
            names = [m for m, mset in zip(metrics["metric"], metrics["metric_set"], strict=True)
                     if mset == row["metric_set"] and m in row and pd.notna(row[m])] if len(metrics) else []
            for m in names:
                out.append({c: row[c] for c in ("queryset", "metric_set", "prompt_kind", "profile", "editor")}
                           | {"varying": ";".join(varying[i])} | {column(k): flat[i].get(k) for k in keys}
                           | {"edit_type": row[group_col] if group_col else "", "metric": m, "value": row[m],
                              "se": row.get(f"{m}_se", float("nan")), "n": row.get(f"{m}_n", float("nan")),
                              "complete": row["complete"], "mark": row["mark"], "editor_sig": row["editor_sig"],
                              "seed": row["seed"], "_i": i})
    cols = ["queryset", "metric_set", "prompt_kind", "profile", "editor", "varying", *[column(k) for k in keys],
            "edit_type", "metric", "value", "se", "n", "complete", "mark", "editor_sig", "seed"]

    def order(r: dict) -> tuple:
        return (r["queryset"], r["metric_set"], r["prompt_kind"], r["profile"], r["editor"], r["metric"],
                r["edit_type"], *[_order_key(flat[r["_i"]].get(k)) for k in varying[r["_i"]]], r["editor_sig"])

    out.sort(key=order)
    return pd.DataFrame([{c: r[c] for c in cols} for r in out], columns=cols)


def format_table(results: Path, queryset: str | None = None, **options: Any) -> str:
    """A readable view of the leaderboard (`benchmark.tables.show.render`: `by`, `sort`, `columns`, `digits`): means with
    SE, arrows for the better direction; partial rows in their own block after the complete ones, each with its
    `PARTIAL done/total` mark."""
    from benchmark.tables.show import render
    from benchmark.tables.show_turns import render_turns

    text = render(results, queryset, **options)
    if options.get("by") is None:  # MagicBrush's two settings side by side, where a run of each is there
        turns = render_turns(results, queryset, columns=options.get("columns"), digits=options.get("digits", 3))
        text += f"\n{turns}" if turns else ""
    return text


def main(argv: Sequence[str] | None = None) -> int:
    """`editmeter show` (also `python -m benchmark.tables.leaderboard show`): print the leaderboard."""
    import sys

    from benchmark.tables.show import ShowError

    ap = argparse.ArgumentParser(prog="editmeter show", description="Print the leaderboard: means ± bootstrap SE, "
                                 "arrows for the better direction, one section per editor family.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    show = sub.add_parser("show", prog="editmeter show", help="print results/leaderboard.csv readably",
                          description="Print the leaderboard: mean±SE per metric, arrows for the better direction, "
                          "one section per query set, metric set, editor family and profile; partial rows last.")
    # the folder runs write to by default (paths.results), wherever the command is started from
    show.add_argument("--results", type=Path, default=PROJECT_ROOT / "results",
                      help="results folder (default: <checkout>/results, the default paths.results)")
    show.add_argument("--queryset", default=None, help="only this query set")
    show.add_argument("--by", choices=("type", "class"), default=None,
                      help="the per edit type or per object class table instead of the overall one")
    show.add_argument("--sort", default=None, metavar="COLUMN",
                      help="sort each section by this column, best first for a metric (default: the headline "
                           "column, e.g. HATIE's Total or score, else the metric set's first metric)")
    show.add_argument("--columns", default=None, metavar="A,B,C",
                      help="show only these metric / setting / count columns (editor, sig and coverage always show)")
    show.add_argument("--digits", type=int, default=None, metavar="N",
                      help="significant digits of the means (default 3; SEs get 2, one below display precision is ±0)")
    show.add_argument("--arena", action="store_true",
                      help="only the arenas' ratings (editmeter arena; docs/arena.md), no leaderboard needed")
    args = ap.parse_args(argv)
    from benchmark.metrics.arena.tables import arena_tables

    if args.arena:
        print(arena_tables(args.results, args.queryset) or f"no arena under {args.results}/arena"
              + (f" for {args.queryset}" if args.queryset else "") + ": editmeter arena queryset=NAME")
        return 0
    options = {"by": args.by, "sort": args.sort, "digits": args.digits,
               "columns": [c.strip() for c in args.columns.split(",") if c.strip()] if args.columns else None}
    try:
        print(format_table(args.results, args.queryset, **{k: v for k, v in options.items() if v is not None}))
        arenas = arena_tables(args.results, args.queryset)
        if arenas:
            print("\n" + arenas)
    except ShowError as err:
        print(f"editmeter show: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    main()
