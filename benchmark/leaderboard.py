"""Aggregation: per-sample score rows -> leaderboard tables with completeness, failures, bootstrap SE, provenance.

    python -m benchmark.leaderboard show [--results results] [--queryset demo]

Every row says what it covers: `n_total` queries of the full set (those its metrics score), `n_selected` of them
ever selected into the run (shards, limit), `n_ok`, `n_failed` (edit failed or unscorable), `n_missing` (not edited
or not scored yet, selected or not) and `complete` (nothing missing). A partial row carries `mark` =
`PARTIAL <ok+failed>/<total>` and sorts after the complete rows of its section.

Failed edits are excluded from every mean and counted in `n_failed`; a metric that is undefined for a sample (NaN,
e.g. the outside-mask PSNR of a full-image style edit) is excluded from that metric's mean and `<metric>_n` says how
many samples it covers. Rows are sorted by query id before any resampling, so no value depends on the order or the
split of the Parquet parts (shards, interruptions).

Nothing under results/ is executed: suite summaries come from `benchmark.summaries`; run.json, the query index
and every score part are validated, and a bad file is skipped or quarantined with a warning naming it.
"""

from __future__ import annotations

import argparse
import inspect
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.hashing import stable_hash
from benchmark.provenance import PROJECT_ROOT
from benchmark.stages.score_cache import SCORES_DIR, BadCacheFile, QueryIndex, warn

BOOTSTRAP_CHUNK = 500  # resamples drawn at once (bounds memory at chunk * n indices)
RUN_META = "run.json"
TABLES = {"leaderboard.csv": (), "leaderboard_by_type.csv": ("edit_type",), "leaderboard_by_class.csv": ("object_class",)}
ID_COLUMNS = ("queryset", "queryset_hash", "metric_set", "editor", "editor_sig", "prompt_kind", "profile", "seed")
COUNT_COLUMNS = ("n_selected", "n_total", "n_ok", "n_failed", "n_missing", "complete", "mark")
PROVENANCE_COLUMNS = ("metric_sig", "git_sha", "versions", "device")
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


def completeness(df, n_total: int | None = None) -> dict[str, Any]:
    """Counts of one group: its score rows `df` (any status) against the `n_total` queries it should cover."""
    status = df["status"]
    n_ok, n_failed = int((status == "ok").sum()), int((status == "failed").sum())
    n_selected = int(status.isin(("ok", "failed", "missing")).sum())
    n_total = n_selected if n_total is None else n_total
    n_missing = n_total - n_ok - n_failed
    complete = n_missing == 0
    return {"n_selected": n_selected, "n_total": n_total, "n_ok": n_ok, "n_failed": n_failed, "n_missing": n_missing,
            "complete": complete, "mark": "" if complete else f"PARTIAL {n_ok + n_failed}/{n_total}"}


def summarize(df, metric_names: Sequence[str], n_resamples: int, seed: int, key: Any,
              n_total: int | None = None) -> dict[str, Any]:
    """One table row for the score rows `df` of one group (in query-id order), out of `n_total` queries."""
    ok = df[df["status"] == "ok"]
    row = completeness(df, n_total)
    for m in metric_names:
        vals = ok[m].to_numpy(dtype=np.float64) if m in ok else np.array([])
        finite = vals[np.isfinite(vals)]
        row[m] = float(finite.mean()) if len(finite) else float("nan")
        # seed from the group key so a group's SE does not depend on which other groups exist
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


def collect_runs(results: Path, metric_sig: str | None = None) -> list[Run]:
    """Every (run folder, metric set) under `results/runs` with valid scores, for `metric_sig` only when given
    (default: every metric set each run folder was scored with, so the tables do not depend on command order).

    A run whose run.json or query index is bad is skipped with a warning naming the file; bad score parts are
    quarantined (their rows then count as missing)."""
    out = []
    for meta_path in sorted((results / "runs").glob(f"*/*/{RUN_META}")):
        try:
            meta = load_run_meta(meta_path)
        except BadCacheFile as err:
            warn(f"{meta_path}: {err}; this run is skipped (rerun its configuration to rewrite it)")
            continue
        for sig, view in scorings(meta).items():
            if metric_sig is not None and sig != metric_sig:
                continue
            run = _collect_run(meta_path, view)
            if run is not None:
                out.append(run)
    return out


def _collect_run(meta_path: Path, meta: dict[str, Any]) -> Run | None:
    """One run folder's scores for the metric set `meta` describes (a view from `scorings`), or None."""
    from benchmark.stages.score import read_scores, scores_dir
    from benchmark.stages.score_cache import INDEX_FILE, read_query_index

    sig = meta["metric_sig"]
    try:
        check_run_meta(meta)
    except BadCacheFile as err:
        warn(f"{meta_path}: metric set {sig}: {err}; skipped (rescore it to rewrite the entry)")
        return None
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
    scores = read_scores(meta_path.parent, sig, valid_ids=index.ids)
    if not len(scores):
        return None
    return Run(meta, index, scores.sort_values("query_id", kind="stable").reset_index(drop=True), meta_path.parent)


def _run_rows(run: Run, group_cols: tuple[str, ...], fname: str, n_resamples: int, seed: int) -> list[dict]:
    from benchmark.summaries import suite_summary

    meta = run.meta
    idx = run.index.frame()
    idx = idx[idx["excluded"] == ""]  # queries the metrics do not score for this editor family are not owed
    in_scope = set(idx["query_id"])
    # group membership from the index (the query set), so groups nobody selected yet still show up as missing
    scores = run.scores[run.scores["query_id"].isin(in_scope) & (run.scores["status"] != "excluded")]
    scores = scores.drop(columns=[c for c in group_cols if c in scores]).merge(
        idx[["query_id", *group_cols]], on="query_id", how="left", sort=False) if group_cols else scores
    metric_names = meta.get("metric_order") or list(meta["metrics"])
    suite = meta.get("suite")
    summary_fn = suite_summary(suite["name"]) if suite else None
    ident = {c: meta.get(c, "") if c == "metric_set" else meta[c] for c in ID_COLUMNS}
    prov = {"metric_sig": meta["metric_sig"], "git_sha": meta["git_sha"],
            "versions": json.dumps(meta["versions"], sort_keys=True), "device": meta["device"]}
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
        gkey = [meta["editor_sig"], meta["queryset_hash"], fname, *key]
        stats = summarize(part, metric_names, n_resamples, seed, gkey, n_total)
        if suite is not None:
            if summary_fn is not None:
                ok = part[part["status"] == "ok"]
                # metaeval: the suite's recorded components (e.g. HATIE's weight profile), for summaries taking them
                extra = ({"components": suite["components"]}
                         if "components" in inspect.signature(summary_fn).parameters else {})
                stats |= summary_fn(ok, {m: stats[m] for m in metric_names},
                                    {m: stats[f"{m}_se"] for m in metric_names}, overall=not group_cols,
                                    seed=int(stable_hash([seed, gkey, "suite"], 8), 16), **extra)
            else:
                stats["mark"] = "; ".join(filter(None, [stats["mark"], f"UNKNOWN SUITE {suite['name']!r}: no summary"]))
            stats["components"] = json.dumps(suite["components"], sort_keys=True)
        rows.append(ident | dict(zip(group_cols, key, strict=True)) | stats | prov)
    return rows


def build_tables(runs: list[Run], n_resamples: int, seed: int) -> dict[str, Any]:
    """The three leaderboard DataFrames (overall, per edit type, per object class); complete rows first."""
    import pandas as pd

    from benchmark.summaries import known_suites

    for run in runs:
        suite = run.meta.get("suite")
        if suite and suite["name"] not in known_suites():
            warn(f"{run.path / RUN_META}: unknown suite {suite['name']!r} (known: {known_suites()}); its rows get no "
                 "model-level summary and are marked")
    tables: dict[str, Any] = {}
    for fname, group_cols in TABLES.items():
        rows = [r for run in runs for r in _run_rows(run, group_cols, fname, n_resamples, seed)]
        df = pd.DataFrame(rows)
        if len(df):
            df["_partial"] = ~df["complete"].astype(bool)
            df = df.sort_values(["queryset", "metric_set", "prompt_kind", "_partial", "editor", "editor_sig", *group_cols],
                                kind="stable").drop(columns="_partial").reset_index(drop=True)
        tables[fname] = df
    return tables


def metric_table(runs: list[Run]):
    """Metric metadata (higher_is_better, version, description) of every metric in the tables."""
    import pandas as pd

    seen: dict[str, dict] = {}
    for run in runs:
        meta = run.meta
        for name in meta.get("column_order") or meta["metrics"]:
            seen.setdefault(name, {"metric": name, "metric_set": meta.get("metric_set", "")} | meta["metrics"][name])
    return pd.DataFrame(list(seen.values()))


def write_leaderboards(results: Path, metric_sig: str | None, n_resamples: int, seed: int) -> dict[str, Path]:
    """Rebuild the leaderboard CSVs from every run under `results`: one row per run folder and metric set it was
    scored with (`metric_sig` None), so the tables never depend on which command ran last; or only `metric_sig`."""
    from benchmark.fileio import atomic_write_text

    runs = collect_runs(results, metric_sig)
    written = {}
    for fname, df in build_tables(runs, n_resamples, seed).items():
        path = results / fname
        atomic_write_text(path, df.to_csv(index=False, float_format="%.6g"))
        written[fname] = path
    path = results / "leaderboard_metrics.csv"
    atomic_write_text(path, metric_table(runs).to_csv(index=False))
    written["leaderboard_metrics.csv"] = path
    return written


def format_table(results: Path, queryset: str | None = None) -> str:
    """A readable view of `leaderboard.csv`: means with SE, arrows for the better direction; partial rows in their
    own block after the complete ones, each with its `PARTIAL done/total` mark."""
    import pandas as pd

    path = results / "leaderboard.csv"
    if not path.is_file():
        return f"no leaderboard yet at {path}; run `make demo` or `make bench`"
    # signatures and hashes are hex strings: never numbers (an all-digit one would lose its leading zeros)
    df = pd.read_csv(path, keep_default_na=False, na_values=["", "nan", "NaN"],
                     dtype={c: str for c in ("editor_sig", "metric_sig", "queryset_hash", "git_sha")})
    meta = pd.read_csv(results / "leaderboard_metrics.csv") if (results / "leaderboard_metrics.csv").is_file() else None
    if queryset:
        df = df[df["queryset"] == queryset]
    newer = _scored_since(results, path, set(df["metric_sig"]) if "metric_sig" in df else set())
    stale = ([f"NOTE: {len(newer)} score part(s) were written after {path.name} (e.g. {newer[0]}): these tables may "
              "be stale. Rebuild them: rerun that run's command with stages=[aggregate]."] if newer else [])
    if meta is None:  # the metric directions live there: without it no metric column can be shown
        stale.append(f"NOTE: {results / 'leaderboard_metrics.csv'} is missing, so no metric column is shown. Rebuild "
                     "the tables: rerun a run's command with stages=[aggregate].")
    better = dict(zip(meta["metric"], meta["higher_is_better"], strict=True)) if meta is not None else {}
    metric_set = (dict(zip(meta["metric"], meta["metric_set"].fillna(""), strict=True))
                  if meta is not None and "metric_set" in meta else {})
    if "complete" not in df:  # a leaderboard written before completeness was recorded: nothing is known complete
        df = df.assign(complete=False, mark="completeness unknown")
    if "metric_set" not in df:  # written before one table held every metric set
        df = df.assign(metric_set="")
    df["metric_set"] = df["metric_set"].fillna("")
    lines = stale
    for (qs, mset, kind, profile), part in df.groupby(["queryset", "metric_set", "prompt_kind", "profile"], sort=True):
        # each metric set's own columns (the CSV holds the union of every set's columns)
        metrics = [m for m in better if m in part and metric_set.get(m, mset) == mset]
        lines.append(f"\nqueryset={qs}  metrics={mset or '?'}  {kind}-based editors  profile={profile}")
        header = ["editor", "sig", "n_ok", "fail", "miss", "coverage"] + [f"{m}{'↑' if better[m] else '↓'}" for m in metrics]
        done = part["complete"].astype(str).str.lower() == "true"
        blocks = [(part[done], None), (part[~done], "partial runs (not comparable with the rows above):")]
        body: list[list[str] | str] = []
        for rows, title in blocks:
            if not len(rows):
                continue
            if title:
                body.append(title)
            for _, r in rows.iterrows():
                mark = r.get("mark")
                cells = [str(r["editor"]), str(r["editor_sig"])[:8], str(r["n_ok"]), str(r["n_failed"]),
                         str(r.get("n_missing", "?")), str(mark) if isinstance(mark, str) and mark else "complete"]
                for m in metrics:
                    v, se = r[m], r.get(f"{m}_se", float("nan"))
                    cells.append("nan" if pd.isna(v) else f"{v:.4g}±{se:.2g}" if pd.notna(se) else f"{v:.4g}")
                body.append(cells)
        table = [header, *[c for c in body if isinstance(c, list)]]
        widths = [max(len(c[i]) for c in table) for i in range(len(header))]
        for cells in [header, *body]:
            lines.append(cells if isinstance(cells, str) else
                         "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip())
    return "\n".join(lines)


def _scored_since(results: Path, table: Path, metric_sigs: set[str]) -> list[Path]:
    """Score parts of these metric signatures written after `table` (a run scored but not aggregated since)."""
    written = table.stat().st_mtime_ns
    return sorted(p for sig in metric_sigs for p in (results / "runs").glob(f"*/*/{SCORES_DIR}/{sig}/part-*.parquet")
                  if p.stat().st_mtime_ns > written)


def main(argv: Sequence[str] | None = None) -> int:
    """`editmeter show` (also `python -m benchmark.leaderboard show`): print the leaderboard."""
    ap = argparse.ArgumentParser(prog="editmeter show", description="Print the leaderboard: means ± bootstrap SE, "
                                 "arrows for the better direction, one section per editor family.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    show = sub.add_parser("show", help="print results/leaderboard.csv readably")
    # the folder runs write to by default (paths.results), wherever the command is started from
    show.add_argument("--results", type=Path, default=PROJECT_ROOT / "results",
                      help="results folder (default: <checkout>/results, the default paths.results)")
    show.add_argument("--queryset", default=None, help="only this query set")
    args = ap.parse_args(argv)
    print(format_table(args.results, args.queryset))
    return 0


if __name__ == "__main__":
    main()
