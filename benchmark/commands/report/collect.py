"""What the report shows, read from a results folder: the leaderboard CSVs (as `show` reads them), each run
folder's metadata, per-query score rows and failures, and the query sets the runs were made on.

Nothing is recomputed here: the tables are the CSVs that aggregation wrote, marked stale when score parts are newer
than them; per-query rows come from the validated score parts (`benchmark.stages.score.read_scores`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmark.commands.report.html import run_label

TABLE_FILES = {"overall": "leaderboard.csv", "by_type": "leaderboard_by_type.csv",
               "by_class": "leaderboard_by_class.csv"}
HEX_COLUMNS = ("editor_sig", "metric_sig", "queryset_hash", "git_sha")
_LOG_HEAD = re.compile(r"^--- (\S+) run_id=(\S+) query=(.+)$")


@dataclass
class Leaderboards:
    """The leaderboard CSVs (None when absent), the metric metadata and what makes them untrustworthy now."""

    tables: dict[str, Any]
    metrics: Any
    notes: list[str] = field(default_factory=list)
    stale: bool = False


@dataclass
class Scoring:
    """One metric set a run folder was scored with: its per-query columns and score rows."""

    sig: str
    metric_set: str
    columns: list[str]
    rows: Any  # DataFrame indexed by query_id


@dataclass
class RunData:
    """One run folder: metadata, its scorings, edit records and failures."""

    path: Path
    meta: dict[str, Any]
    scorings: list[Scoring]
    index_rows: list[tuple]  # queries.json rows: (query_id, image_id, edit_type, object_class, excluded)
    records: dict[str, dict]
    tracebacks: dict[str, str]
    notes: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return run_label(self.meta["editor"], self.meta["editor_sig"])

    @property
    def key(self) -> str:
        return f"{self.meta['editor']}-{self.meta['editor_sig']}"


def read_csv(path: Path):
    """A leaderboard CSV as `show` reads it: hashes and signatures stay strings."""
    import pandas as pd

    return pd.read_csv(path, keep_default_na=False, na_values=["", "nan", "NaN"],
                       dtype={c: str for c in HEX_COLUMNS})


def read_leaderboards(results: Path, queryset: str | None = None) -> Leaderboards:
    """The three leaderboard CSVs and leaderboard_metrics.csv, with notes on anything that makes them stale."""
    tables: dict[str, Any] = {}
    notes: list[str] = []
    for key, name in TABLE_FILES.items():
        path = results / name
        if not path.is_file():
            tables[key] = None
            notes.append(f"{path} is missing: run `make demo` or `make bench` (or rerun a run with "
                         "stages=[aggregate]) to write it.")
            continue
        df = read_csv(path)
        if "complete" not in df:  # written before completeness was recorded: nothing is known complete
            df = df.assign(complete=False, mark="completeness unknown")
        if "metric_set" not in df:
            df = df.assign(metric_set="")
        df["metric_set"] = df["metric_set"].fillna("")
        df["mark"] = df["mark"].map(lambda m: m if isinstance(m, str) else "") if "mark" in df else ""
        df["complete"] = df["complete"].astype(str).str.lower() == "true"
        if queryset:
            df = df[df["queryset"] == queryset].reset_index(drop=True)
        tables[key] = df
    mpath = results / "leaderboard_metrics.csv"
    metrics = read_csv(mpath) if mpath.is_file() else None
    if metrics is None:
        notes.append(f"{mpath} is missing, so no metric column can be shown (the better direction is unknown). "
                     "Rebuild it: rerun a run's command with stages=[aggregate].")
    elif "metric_set" not in metrics:
        metrics = metrics.assign(metric_set="")
    stale = False
    overall = results / TABLE_FILES["overall"]
    if overall.is_file():
        since = overall.stat().st_mtime_ns
        checks = ((parts_newer_than, "score part(s)", "the leaderboard tables and charts may not include them. "
                   "Rebuild them: rerun that run's command with stages=[aggregate]."),
                  (edits_newer_than, "edit PNG(s)", "rows of their runs may hold the scores of the edits they "
                   "replaced. Rerun that run's command: its score stage rescores changed edits and rebuilds the "
                   "tables."))
        for newer_than, what, consequence in checks:
            newer = newer_than(results, since)
            if newer:
                stale = True
                notes.append(f"STALE: {len(newer)} {what} were written after {overall.name} (e.g. {newer[0]}): "
                             f"{consequence}")
    return Leaderboards(tables, metrics, notes, stale)


def parts_newer_than(results: Path, mtime_ns: int) -> list[Path]:
    """Score parts under results/runs written after `mtime_ns` (a run scored but not aggregated since)."""
    return sorted(p for p in (results / "runs").glob("*/*/scores/*/part-*.parquet") if p.stat().st_mtime_ns > mtime_ns)


def edits_newer_than(results: Path, mtime_ns: int) -> list[Path]:
    """Edit PNGs under results/runs modified after `mtime_ns`: their scores in the tables may be of the edits they
    replaced (the mtime is enough to suspect; aggregation confirms by hash and marks the rows STALE)."""
    return sorted(p for p in (results / "runs").glob("*/*/edits/*.png") if p.stat().st_mtime_ns > mtime_ns)


def parse_failures_log(path: Path, limit_chars: int = 4000) -> dict[str, str]:
    """query id -> the last traceback `failures.log` holds for it (its tail, at most `limit_chars`)."""
    out: dict[str, str] = {}
    if not path.is_file():
        return out
    current, lines = None, []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            m = _LOG_HEAD.match(line.rstrip("\n"))
            if m:
                if current is not None:
                    out[current] = "".join(lines).strip()[-limit_chars:]
                current, lines = m.group(3), []
            elif current is not None:
                lines.append(line)
    if current is not None:
        out[current] = "".join(lines).strip()[-limit_chars:]
    return out


def read_runs(results: Path, queryset: str | None = None) -> tuple[list[RunData], list[str]]:
    """Every run folder under results/runs with a valid run.json (of `queryset` when given), with the per-query
    columns of every metric set it was scored with. Returns the runs and notes on what was skipped and why."""
    from benchmark.io.errors import CorruptRunFile
    from benchmark.io.score_cache import ROW_KEYS, read_query_index
    from benchmark.stages.edit import latest_records
    from benchmark.stages.score import read_scores, scores_dir
    from benchmark.tables.leaderboard import RUN_META, BadCacheFile, load_run_meta, scorings

    runs, notes = [], []
    for meta_path in sorted((results / "runs").glob(f"*/*/{RUN_META}")):
        try:
            meta = load_run_meta(meta_path)
        except BadCacheFile as err:
            notes.append(f"{meta_path}: {err}; this run is not shown (rerun its configuration to rewrite it)")
            continue
        if queryset and meta["queryset"] != queryset:
            continue
        run_dir = meta_path.parent
        run_notes: list[str] = []
        try:
            records = latest_records(run_dir)
        except CorruptRunFile as err:
            records = {}
            run_notes.append(f"edit records not shown: {err}")
        index_rows: list[tuple] = []
        scs = []
        for sig, view in scorings(meta).items():
            folder = scores_dir(run_dir, sig)
            index = read_query_index(folder)
            if index is None or index.queryset_hash != meta["queryset_hash"]:
                if folder.is_dir():
                    run_notes.append(f"metric set {view.get('metric_set') or sig}: {folder} has no valid "
                                     "queries.json for this query set; its scores are not shown (rerun its score stage)")
                continue
            index_rows = index_rows or list(index.rows)
            cols = [c for c in (view.get("metric_order") or list(view["metrics"])) if not c.startswith("_")]
            rows = read_scores(run_dir, sig, columns=[*ROW_KEYS, *cols], valid_ids=index.ids)
            scs.append(Scoring(sig, view.get("metric_set") or "", cols, rows.set_index("query_id", drop=False)))
        runs.append(RunData(run_dir, meta, scs, index_rows, records, parse_failures_log(run_dir / "failures.log"),
                            run_notes))
    return runs, notes


def resolve_queryset(name: str, queryset_hash: str, given: dict[str, Any] | None = None,
                     metas: list[dict[str, Any]] | None = None) -> tuple[Any, str]:
    """The loaded query set `name` when its content hash is `queryset_hash`, else (None, why not).

    `given` maps names to already loaded sets (tests, scripts). Otherwise the set is loaded as its runs recorded it
    (`metas`: their run.json): the query-set config a run was made with (`queryset_config`), so a derived set (a
    sample, one language of GEdit-Bench, a multi-turn build under another root) loads as it did for the run; for a
    run.json written before that was recorded, the set's own config (configs/queryset/<name>.yaml) or, for a sample
    (run.json `sample`), its parent's config with the recorded draw (`sample`, `sample_seed`, `sample_types`)."""
    qs = (given or {}).get(name)
    if qs is not None:
        return _checked(qs, name, queryset_hash)
    tries: list[str] = []
    for spec, how in _queryset_specs(name, metas or []):
        try:
            qs = _load_spec(spec)
        except Exception as err:  # any config or loading problem: the grid still shows edits and scores
            tries.append(f"{how}: {type(err).__name__}: {str(err)[:300]}")
            continue
        if qs.name == name and qs.hash == queryset_hash:
            return qs, ""
        tries.append(f"{how}: {qs.name!r} at {qs.root} now has hash {qs.hash[:10]}, the runs were made on "
                     f"{queryset_hash[:10]}: its files changed")
    if not tries:
        return None, (f"query set {name!r}: its runs' run.json records no query-set config and no config is named "
                      f"{name!r} (configs/queryset/); rerun one of its runs (e.g. with stages=[aggregate]) to record "
                      "it: sources and ground truth are not shown")
    return None, f"query set {name!r} could not be loaded ({'; '.join(tries)}): sources and ground truth are not shown"


def _checked(qs: Any, name: str, queryset_hash: str) -> tuple[Any, str]:
    if qs.hash != queryset_hash:
        return None, (f"query set {name!r} at {qs.root} now has hash {qs.hash[:10]}, the runs were made on "
                      f"{queryset_hash[:10]}: its files changed, so sources and ground truth are not shown")
    return qs, ""


def _queryset_specs(name: str, metas: list[dict[str, Any]]) -> list[tuple[Any, str]]:
    """What to load, in order, each with how it was found: every distinct recorded config (a `_target_` mapping),
    then the Hydra overrides that rebuild the set from its name (and a sample's recorded draw)."""
    from benchmark.plan.config import CONFIG_DIR

    specs: list[tuple[Any, str]] = []
    seen: list[Any] = []
    for meta in metas:
        cfg = meta.get("queryset_config")
        if isinstance(cfg, dict) and cfg not in seen:
            seen.append(cfg)
            specs.append((cfg, "the query-set config run.json records"))
    sample = next((m["sample"] for m in metas if isinstance(m.get("sample"), dict)), None)
    if sample is not None and isinstance(sample.get("parent"), str):
        parent = sample["parent"]
        if (CONFIG_DIR / "queryset" / f"{parent}.yaml").is_file():
            types = sample.get("types")
            overrides = [f"queryset={parent}", f"queryset.sample={sample.get('n')}",
                         f"queryset.sample_seed={sample.get('seed', 0)}",
                         "queryset.sample_types=" + ("null" if types is None else "[" + ",".join(types) + "]")]
            specs.append((overrides, f"queryset={parent} with run.json's sample"))
    if (CONFIG_DIR / "queryset" / f"{name}.yaml").is_file():
        specs.append(([f"queryset={name}"], f"queryset={name}"))
    return specs


def queryset_loaders() -> set[tuple[str, str | None]]:
    """(`_target_`, `loader`) of each query-set config (configs/queryset/*.yaml): the only loaders a recorded config
    may name, so nothing a results folder holds picks what is called."""
    import yaml

    from benchmark.plan.config import CONFIG_DIR

    out = set()
    for path in (CONFIG_DIR / "queryset").glob("*.yaml"):
        cfg = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        if isinstance(cfg.get("_target_"), str):
            out.add((cfg["_target_"], cfg.get("loader")))
    return out


def _load_spec(spec: Any) -> Any:
    """A query set from a recorded `_target_` mapping (its `<root>` token made this checkout's path again) or from
    Hydra overrides, loaded exactly as a run loads it."""
    from hydra.utils import instantiate

    if isinstance(spec, list):
        from benchmark.commands.run import compose

        cfg, _ = compose(spec)
        return instantiate(cfg.queryset)
    loader = (spec.get("_target_"), spec.get("loader"))
    if loader not in queryset_loaders():
        raise ValueError(f"recorded loader {loader[0]!r}" + (f" ({loader[1]!r})" if loader[1] else "")
                         + " is not one a query-set config names (configs/queryset/)")
    return instantiate({**_local(spec), "_recursive_": False, "_convert_": "all"})  # no value of it is built


def _local(obj: Any) -> Any:
    """`benchmark.plan.config.portable` undone: its `<root>` token becomes this checkout's path."""
    from benchmark.plan.config import PROJECT_ROOT, portable

    token = portable(str(PROJECT_ROOT))
    if isinstance(obj, dict):
        return {k: _local(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_local(v) for v in obj]
    return obj.replace(token, str(PROJECT_ROOT), 1) if isinstance(obj, str) and obj.startswith(token) else obj


def json_default(obj: Any) -> Any:
    """JSON for numpy scalars (NaN is mapped to null before this is reached)."""
    import numpy as np

    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return None if not np.isfinite(obj) else float(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def dumps(obj: Any) -> str:
    """Compact JSON, safe to embed in a <script> (no '</' sequence survives)."""
    return json.dumps(obj, separators=(",", ":"), default=json_default, allow_nan=False).replace("</", "<\\/")
