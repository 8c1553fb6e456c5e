"""Aggregation: per-sample score rows -> leaderboard tables with n, failures, bootstrap SE and provenance.

    python -m benchmark.leaderboard show [--results results] [--queryset demo]

Failed edits are excluded from every mean and counted in `n_failed`; a metric that is undefined for a sample (NaN,
e.g. the outside-mask PSNR of a full-image style edit) is excluded from that metric's mean and `<metric>_n` says how
many samples it covers.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.hashing import stable_hash

BOOTSTRAP_CHUNK = 500  # resamples drawn at once (bounds memory at chunk * n indices)
RUN_META = "run.json"
TABLES = {"leaderboard.csv": (), "leaderboard_by_type.csv": ("edit_type",), "leaderboard_by_class.csv": ("object_class",)}
ID_COLUMNS = ("queryset", "queryset_hash", "editor", "editor_sig", "prompt_kind", "profile", "seed")
PROVENANCE_COLUMNS = ("metric_sig", "git_sha", "versions", "device")


def bootstrap_se(values: np.ndarray, n_resamples: int, seed: int) -> float:
    """Bootstrap standard error of the mean of the finite `values` (NaN when fewer than 2)."""
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


def summarize(df, metric_names: Sequence[str], n_resamples: int, seed: int, key: Any) -> dict[str, Any]:
    """One table row for the score rows `df` of one group."""
    ok = df[df["status"] == "ok"]
    row: dict[str, Any] = {"n_queries": len(df), "n_ok": len(ok), "n_failed": int((df["status"] != "ok").sum())}
    for m in metric_names:
        vals = ok[m].to_numpy(dtype=np.float64) if m in ok else np.array([])
        finite = vals[np.isfinite(vals)]
        row[m] = float(finite.mean()) if len(finite) else float("nan")
        # seed from the group key so a group's SE does not depend on which other groups exist
        row[f"{m}_se"] = bootstrap_se(finite, n_resamples, int(stable_hash([seed, key, m], 8), 16))
        row[f"{m}_n"] = len(finite)
    return row


def collect_runs(results: Path, metric_sig: str | None = None, queryset: str | None = None) -> list[tuple[dict, Any]]:
    """(run metadata, score rows) of every run folder under `results/runs` with scores for `metric_sig`."""
    from benchmark.stages.score import read_scores

    out = []
    for meta_path in sorted((results / "runs").glob(f"{queryset + '-' if queryset else ''}*/*/{RUN_META}")):
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        sig = metric_sig or meta.get("metric_sig")
        if sig is None or meta.get("metric_sig") != sig:
            continue
        scores = read_scores(meta_path.parent, sig)
        if len(scores):
            out.append((meta, scores))
    return out


def build_tables(runs: list[tuple[dict, Any]], n_resamples: int, seed: int) -> dict[str, Any]:
    """The three leaderboard DataFrames (overall, per edit type, per object class)."""
    import pandas as pd

    tables: dict[str, Any] = {}
    for fname, group_cols in TABLES.items():
        rows = []
        for meta, scores in runs:
            scores = scores[scores["status"] != "excluded"]  # not part of this editor family's benchmark
            metric_names = meta.get("metric_order") or list(meta["metrics"])
            suite = meta.get("suite")
            suite_summary = _load_callable(suite["summary"]) if suite else None
            ident = {c: meta[c] for c in ID_COLUMNS}
            prov = {"metric_sig": meta["metric_sig"], "git_sha": meta["git_sha"],
                    "versions": json.dumps(meta["versions"], sort_keys=True), "device": meta["device"]}
            groups = [((), scores)] if not group_cols else list(scores.groupby(list(group_cols), sort=True))
            for key, part in groups:
                key = key if isinstance(key, tuple) else (key,)
                gkey = [meta["editor_sig"], meta["queryset_hash"], fname, *key]
                stats = summarize(part, metric_names, n_resamples, seed, gkey)
                if suite_summary is not None:
                    ok = part[part["status"] == "ok"]
                    stats |= suite_summary(ok, {m: stats[m] for m in metric_names},
                                           {m: stats[f"{m}_se"] for m in metric_names}, overall=not group_cols,
                                           seed=int(stable_hash([seed, gkey, "suite"], 8), 16))
                    stats["components"] = json.dumps(suite["components"], sort_keys=True)
                row = ident | dict(zip(group_cols, key, strict=True)) | stats | prov
                rows.append(row)
        df = pd.DataFrame(rows)
        if len(df):
            df = df.sort_values(["queryset", "prompt_kind", "editor", "editor_sig", *group_cols], kind="stable").reset_index(drop=True)
        tables[fname] = df
    return tables


def _load_callable(path: str) -> Any:
    """`module:function` -> the function (suites name their model-level summary this way in run.json)."""
    import importlib

    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def metric_table(runs: list[tuple[dict, Any]]):
    """Metric metadata (higher_is_better, version, description) of every metric in the tables."""
    import pandas as pd

    seen: dict[str, dict] = {}
    for meta, _ in runs:
        for name in meta.get("column_order") or meta["metrics"]:
            seen.setdefault(name, {"metric": name} | meta["metrics"][name])
    return pd.DataFrame(list(seen.values()))


def write_leaderboards(results: Path, metric_sig: str, n_resamples: int, seed: int) -> dict[str, Path]:
    """Rebuild the leaderboard CSVs from every run under `results` scored with `metric_sig`."""
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
    """A readable view of `leaderboard.csv`: means with SE, arrows for the better direction."""
    import pandas as pd

    path = results / "leaderboard.csv"
    if not path.is_file():
        return f"no leaderboard yet at {path}; run `make demo` or `make bench`"
    df = pd.read_csv(path)
    meta = pd.read_csv(results / "leaderboard_metrics.csv") if (results / "leaderboard_metrics.csv").is_file() else None
    if queryset:
        df = df[df["queryset"] == queryset]
    better = dict(zip(meta["metric"], meta["higher_is_better"], strict=True)) if meta is not None else {}
    metrics = [m for m in better if m in df]
    lines = []
    for (qs, kind, profile), part in df.groupby(["queryset", "prompt_kind", "profile"], sort=True):
        lines.append(f"\nqueryset={qs}  {kind}-based editors  profile={profile}")
        header = ["editor", "sig", "n_ok", "fail"] + [f"{m}{'↑' if better[m] else '↓'}" for m in metrics]
        body = []
        for _, r in part.iterrows():
            cells = [str(r["editor"]), str(r["editor_sig"])[:8], str(r["n_ok"]), str(r["n_failed"])]
            for m in metrics:
                v, se = r[m], r.get(f"{m}_se", float("nan"))
                cells.append("nan" if pd.isna(v) else f"{v:.4g}±{se:.2g}" if pd.notna(se) else f"{v:.4g}")
            body.append(cells)
        widths = [max(len(c[i]) for c in [header, *body]) for i in range(len(header))]
        for cells in [header, *body]:
            lines.append("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """`editmeter show` (also `python -m benchmark.leaderboard show`): print the leaderboard."""
    ap = argparse.ArgumentParser(prog="editmeter show", description="Print the leaderboard: means ± bootstrap SE, "
                                 "arrows for the better direction, one section per editor family.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    show = sub.add_parser("show", help="print results/leaderboard.csv readably")
    show.add_argument("--results", type=Path, default=Path("results"), help="results folder (default: results)")
    show.add_argument("--queryset", default=None, help="only this query set")
    args = ap.parse_args(argv)
    print(format_table(args.results, args.queryset))
    return 0


if __name__ == "__main__":
    main()
