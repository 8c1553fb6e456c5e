"""Paired comparison of runs on the queries they share: `editmeter compare` (docs/compare.md).

    editmeter compare [--results DIR] [--queryset NAME] [--metric-set hatie] [RUN ...] [--by type|class]

For every unordered pair of the given runs (A before B in the given order) and every per-query metric: the means of
A and B over the queries both edited successfully and where the metric is defined for both, their difference with
a paired bootstrap percentile interval (the query is the resampling unit), a paired test (Wilcoxon signed-rank, or
a sign-flip permutation test), Holm-adjusted p-values and win rates with Wilson intervals. Optionally split by edit
type or object class.

Trust first: runs of different query sets, runs without a shared query and metrics missing from a run are refused
(`CompareError`, exit 2, one message). A comparison involving an incomplete run is marked PARTIAL in every row
(`complete` False). Suite-level scores that do not exist per query (HATIE's Total, IQ, FID) are not compared, and the
output says so. Runs are read through `benchmark.tables.leaderboard.collect_runs`: nothing under results/ is executed.
"""

from __future__ import annotations

import argparse
import difflib
import itertools
import math
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.io.hashing import stable_hash
from benchmark.io.provenance import PROJECT_ROOT
from benchmark.io.stats import bootstrap_mean_ci, holm, sign_flip_p, wilcoxon_p, wilson_interval
from benchmark.io.turns import protocol_of

COLUMNS = ["metric_set", "metric", "higher_is_better", "by", "group", "run_a", "run_b", "editor_a", "editor_b",
           "n_shared", "mean_a", "mean_b", "diff", "ci_low", "ci_high", "p_value", "p_adjusted", "test", "win_a",
           "win_b", "ties", "win_rate_a", "win_ci_low", "win_ci_high", "complete"]
# --by spellings -> the `by` column's value; that value -> the query index column holding the group
BY_VALUES = {None: "", "": "", "type": "edit_type", "edit_type": "edit_type", "class": "class", "object_class": "class"}
GROUP_COLUMN = {"edit_type": "edit_type", "class": "object_class"}
TESTS = {"wilcoxon": "Wilcoxon signed-rank", "permutation": "paired sign-flip permutation"}
LEVEL = 0.95
TIE_RTOL = 1e-6  # per-query values closer than this (relative to max(1, |a|, |b|)) count as a tie, not a win


class CompareError(ValueError):
    """The requested comparison cannot be made; the message says why and what to do (the CLI exits 2)."""


@dataclass
class _Folder:
    """One run folder and its Run (from collect_runs) per metric set it was scored with."""

    key: str  # "<queryset dir>/<run folder>", unique under results/runs
    name: str  # "<editor>-<editor signature>"
    editor: str
    queryset: str
    queryset_hash: str
    prompt_kind: str
    protocol: str = "single_turn"  # run.json `protocol`: runs of two protocols are never paired
    runs: dict[str, list[Any]] = field(default_factory=dict)  # metric set -> Runs (one per metric signature)


def _folders(all_runs: list[Any], queryset: str | None) -> list[_Folder]:
    out: dict[str, _Folder] = {}
    for run in all_runs:
        meta = run.meta
        if queryset is not None and meta["queryset"] != queryset:
            continue
        key = f"{run.path.parent.name}/{run.path.name}"
        f = out.setdefault(key, _Folder(key, run.path.name, meta["editor"], meta["queryset"], meta["queryset_hash"],
                                        meta["prompt_kind"], protocol_of(meta)))
        f.runs.setdefault(meta.get("metric_set") or "", []).append(run)
    return sorted(out.values(), key=lambda f: (f.queryset, f.editor, f.name))


def _protocol_mix(folders: Sequence[_Folder]) -> str:
    """Why runs of several protocols are not compared, naming each run's protocol."""
    held = "; ".join(f"{f.key}: {f.protocol}" for f in folders)
    return (f"the runs were edited under different protocols ({held}): a multi-turn edit starts from the editor's "
            "own previous turn, a single-turn edit from the dataset's input, so their per-query scores are not "
            "paired measurements of one task")


def _hits(folders: list[_Folder], name: str) -> list[_Folder]:
    """The run folders `name` denotes: a folder name (or <queryset dir>/<folder>), else an editor's folders, else
    the folders whose name starts with `name` when it has the form `<editor>-<signature prefix>`."""
    hits = [f for f in folders if name in (f.name, f.key)]
    hits = hits or [f for f in folders if f.editor == name]
    return hits or ([f for f in folders if f.name.startswith(name)] if "-" in name else [])


def _set_dir(f: _Folder) -> str:
    """The query-set folder `<queryset>-<hash prefix>` under results/runs that holds the run."""
    return f.key.split("/", 1)[0]


def _command(names: Sequence[str], folders: list[_Folder], set_dir: str) -> str:
    """The exact `editmeter compare` command that names `names` within query-set folder `set_dir`: --queryset when
    that name picks this folder alone, else each run by its <queryset dir>/<folder> key."""
    inside = [f for f in folders if _set_dir(f) == set_dir]
    name = inside[0].queryset
    if {_set_dir(f) for f in folders if f.queryset == name} == {set_dir}:
        return f"editmeter compare {' '.join(names)} --queryset {name}"
    keys = [_hits(inside, n)[0].key if len(_hits(inside, n)) == 1 else n for n in names]
    return f"editmeter compare {' '.join(keys)}"


def _narrow_to_one_set(folders: list[_Folder], names: Sequence[str], where: str, scoped: bool) -> list[_Folder]:
    """When a name matches runs of several query sets (`make demo` runs identity on demo_mini and demo_editval),
    keep the one query set that holds a run of every name; several such sets are refused with the exact command
    for each, a name that matches no run at all is reported as unknown (`scoped`: `folders` are one --queryset's
    only, so the name may have runs elsewhere)."""
    per_name = {n: _hits(folders, n) for n in names}
    for n, hits in per_name.items():
        if not hits:
            known = sorted({f.editor for f in folders})
            close = difflib.get_close_matches(n, known, n=1)
            guess = f" Did you mean {close[0]!r}?" if close else ""
            what = f"no run of {n!r}" if scoped else f"unknown editor {n!r}: no run of it"  # elsewhere, maybe
            raise CompareError(f"{what} {where} (editors there: "
                               f"{', '.join(known) or 'none'}).{guess} Name an editor, or a run folder "
                               "<editor>-<signature> when an editor has several.")
    common = set.intersection(*({_set_dir(f) for f in hits} for hits in per_name.values()))
    if len(common) == 1:
        return [f for f in folders if _set_dir(f) in common]
    if not common:
        held = "; ".join(f"{n}: {', '.join(sorted({_set_dir(f) for f in hits}))}" for n, hits in per_name.items())
        raise CompareError(f"the runs are of different query sets ({held}) and no query set holds runs of all of "
                           f"{', '.join(names)}; a paired comparison needs the same queries: run the missing editors "
                           "on one set, or name runs of one set")
    options = "; ".join(f"{d}: `{_command(names, folders, d)}`" for d in sorted(common))
    raise CompareError(f"{len(common)} query sets hold runs of all of {', '.join(names)}; pick one: {options}")


def _resolve(folders: list[_Folder], names: Sequence[str], where: str, scoped: bool = False) -> list[_Folder]:
    """The run folder each name denotes: a folder name (or <queryset dir>/<folder>), an editor name with one
    folder, or a unique prefix `<editor>-<signature prefix>`; within the one query set holding all the names."""
    folders = _narrow_to_one_set(folders, names, where, scoped)
    chosen = []
    for name in names:
        hits = _hits(folders, name)
        if len(hits) > 1:
            # folder names repeat across query sets (same editor signature), so name those by their full key
            labels = [f.name for f in hits] if len({f.name for f in hits}) == len(hits) else [f.key for f in hits]
            raise CompareError(f"{name!r} names {len(hits)} run folders ({', '.join(f.key for f in hits)}); name "
                               f"one of {', '.join(labels)} instead")
        chosen.append(hits[0])
    twice = sorted({f.key for f in chosen if chosen.count(f) > 1})
    if twice:
        raise CompareError(f"run {twice[0]} is named twice; name each run once")
    return chosen


def _one_scoring(members: list[_Folder], mset: str) -> list[Any]:
    """The Run of each folder for metric set `mset`, all with one metric signature (else the scores were made by
    different metric configurations or versions and are not comparable)."""
    sigs = [{r.meta["metric_sig"] for r in f.runs[mset]} for f in members]
    common = set.intersection(*sigs)
    if len(common) != 1:
        detail = "; ".join(f"{f.name}: {', '.join(sorted(s))}" for f, s in zip(members, sigs, strict=True))
        raise CompareError(f"metric set {mset!r} was scored with different metric configurations (metric signatures "
                           f"{detail}); their scores are not comparable. Rescore the runs with one configuration.")
    sig = common.pop()
    return [next(r for r in f.runs[mset] if r.meta["metric_sig"] == sig) for f in members]


def _metric_columns(runs: list[Any], names: list[_Folder], mset: str, wanted: Sequence[str] | None
                    ) -> tuple[list[str], list[str]]:
    """(per-query metrics to compare, model-level columns of the set that cannot be paired)."""
    per_query = [list(r.meta.get("metric_order") or r.meta["metrics"]) for r in runs]
    columns = [list(r.meta.get("column_order") or r.meta["metrics"]) for r in runs]
    model_level = [c for c in dict.fromkeys(itertools.chain(*columns)) if not any(c in p for p in per_query)]
    known = set(itertools.chain(*per_query, *columns))
    metrics = list(per_query[0]) if wanted is None else [m for m in wanted if m in known]
    for m in metrics:
        if m in model_level:
            raise CompareError(f"{m!r} ({mset}) is a model-level score of the whole run, not a per-query value: it "
                               f"cannot be paired per query. Per-query metrics of {mset}: {', '.join(per_query[0])}")
        for run, f, pq in zip(runs, names, per_query, strict=True):
            if m not in pq or m not in run.scores.columns:
                where = "its run.json metrics" if m not in pq else "its score rows"
                raise CompareError(f"metric {m!r} ({mset}) is missing from run {f.key} ({where}); rescore that run "
                                   f"with metrics={mset}, or leave {m!r} out (--metrics)")
    return metrics, model_level


def _scope(run: Any, metrics: list[str]):
    """The queries the run's metrics owe it (not excluded for its editor family) with status and metric values;
    queries without a score row are `missing`. Group columns come from the query index, as in the leaderboard."""
    idx = run.index.frame()
    idx = idx.loc[idx["excluded"] == "", ["query_id", "edit_type", "object_class"]]
    scores = run.scores[run.scores["status"] != "excluded"][["query_id", "status", *metrics]]
    df = idx.merge(scores, on="query_id", how="left", sort=False)
    df["status"] = df["status"].fillna("missing")
    return df


@dataclass
class _Pair:
    """Two runs' in-scope rows aligned on the query set (one row per query id of the set, in id order)."""

    fa: _Folder
    fb: _Folder
    both: Any  # DataFrame: status_a, status_b, <metric>_a, <metric>_b (NaN / None outside a run's scope)
    shared: np.ndarray  # bool per query: ok in both runs
    not_done: np.ndarray  # bool per query: in A's or B's scope but not yet edited or scored there
    coverage: dict[str, Any]


def _pair(sa: Any, sb: Any, fa: _Folder, fb: _Folder, mset: str, ids: Any) -> _Pair:
    """Align the scopes of A and B on the query ids `ids` (a one-column frame, in id order); count what is shared
    and what is dropped; refuse a pair without a shared query."""
    both = ids.merge(sa.drop(columns=["edit_type", "object_class"]), on="query_id", how="left")
    both = both.merge(sb.drop(columns=["edit_type", "object_class"]), on="query_id", how="left", suffixes=("_a", "_b"))
    in_a, in_b = both["status_a"].notna().to_numpy(), both["status_b"].notna().to_numpy()
    shared = ((both["status_a"] == "ok") & (both["status_b"] == "ok")).to_numpy()
    pending = {x: (both[f"status_{x}"].notna() & ~both[f"status_{x}"].isin(("ok", "failed"))).to_numpy() for x in "ab"}
    coverage = {
        "metric_set": mset, "run_a": fa.name, "run_b": fb.name, "n_scope": int((in_a | in_b).sum()),
        "n_shared": int(shared.sum()),
        "a_failed": int((both["status_a"] == "failed").sum()), "b_failed": int((both["status_b"] == "failed").sum()),
        "a_not_done": int(pending["a"].sum()), "b_not_done": int(pending["b"].sum()),
        "out_of_scope": int((in_a != in_b).sum()), "n_total_a": len(sa), "n_total_b": len(sb),
    }
    if not coverage["n_shared"]:
        raise CompareError(f"runs {fa.key} and {fb.key} share no query that both edited and scored successfully "
                           f"({mset}): nothing to pair. Finish or rerun them (editmeter run ...) before comparing.")
    return _Pair(fa, fb, both, shared, pending["a"] | pending["b"], coverage)


def _set_rows(pairs: list[_Pair], universe: Any, mset: str, metrics: list[str],
              higher: dict[str, bool], by: str, n_resamples: int, seed: int, test: str) -> list[dict]:
    """Rows of every pair of one metric set: overall, then per group when `by`. Within a group, the (pair, metric)
    differences defined on the same queries are bootstrapped together with one draw of resampled queries, so adding
    pairs or metrics adds matrix columns, not resamples."""
    groups: list[tuple[str, str, np.ndarray]] = [("", "all", np.ones(len(universe), bool))]
    if by:
        labels = universe[GROUP_COLUMN[by]].to_numpy()
        groups += [(by, str(g), labels == g) for g in sorted(set(labels))]
    stats: dict[tuple[int, int, str], dict[str, Any]] = {}  # (pair, group number, metric) -> statistics
    for g, (by_value, group, in_group) in enumerate(groups):
        # the seed ignores the runs, so each pair's interval depends only on its own data and swapping A and B
        # negates it exactly
        gseed = int(stable_hash([seed, mset, by_value, group], 8), 16)
        jobs: dict[bytes, list[tuple[int, str, np.ndarray]]] = {}
        diffs: dict[tuple[int, str], tuple[np.ndarray, np.ndarray]] = {}
        for i, p in enumerate(pairs):
            for m in metrics:
                va, vb = (p.both[f"{m}_{s}"].to_numpy(np.float64) for s in "ab")
                mask = in_group & p.shared & np.isfinite(va) & np.isfinite(vb)
                diffs[i, m] = (va[mask], vb[mask])
                jobs.setdefault(mask.tobytes(), []).append((i, m, va[mask] - vb[mask]))
        ci: dict[tuple[int, str], tuple[float, float]] = {}
        for items in jobs.values():
            low, high = bootstrap_mean_ci(np.stack([d for _, _, d in items], axis=1), n_resamples, gseed, LEVEL)
            ci |= {(i, m): (float(lo), float(hi)) for (i, m, _), lo, hi in zip(items, low, high, strict=True)}
        for i, p in enumerate(pairs):
            done = int((p.not_done & in_group).sum())
            for m in metrics:
                stats[i, g, m] = _stats(*diffs[i, m], ci[i, m], higher[m], n_resamples, gseed, test) | {
                    "by": by_value, "complete": done == 0}
    rows = []
    for i, p in enumerate(pairs):
        for g, (_, group, _) in enumerate(groups):
            for m in metrics:
                st = stats[i, g, m]
                rows.append({"metric_set": mset, "metric": m, "higher_is_better": higher[m], "by": st.pop("by"),
                             "group": group, "run_a": p.fa.name, "run_b": p.fb.name, "editor_a": p.fa.editor,
                             "editor_b": p.fb.editor, **st, "p_adjusted": math.nan})
    return rows


def _stats(va: np.ndarray, vb: np.ndarray, ci: tuple[float, float], higher: bool, n_resamples: int, seed: int,
           test: str) -> dict[str, Any]:
    """Means, difference, test and wins of one (pair, group, metric) from the paired values `va`, `vb`."""
    n = len(va)
    d = va - vb
    # a tie: equal up to TIE_RTOL of the larger magnitude (at least 1), so scorer rounding noise (HATIE's raw scores
    # move by about 1e-7 with batch composition) never turns identical edits into wins
    tied = np.abs(d) <= TIE_RTOL * np.maximum(1.0, np.maximum(np.abs(va), np.abs(vb)))
    a_better = (d > 0 if higher else d < 0) & ~tied
    b_better = (d < 0 if higher else d > 0) & ~tied
    win_a, win_b = int(a_better.sum()), int(b_better.sum())
    d_test = np.where(tied, 0.0, d)  # a tie is no difference for the test either
    p = wilcoxon_p(d_test) if test == "wilcoxon" else sign_flip_p(d_test, n_resamples, seed)
    mean_a, mean_b = (float(va.mean()), float(vb.mean())) if n else (math.nan, math.nan)
    wlo, whi = wilson_interval(win_a, n, _z(LEVEL))
    return {"n_shared": n, "mean_a": mean_a, "mean_b": mean_b, "diff": mean_a - mean_b, "ci_low": ci[0],
            "ci_high": ci[1], "p_value": p, "test": TESTS[test], "win_a": win_a, "win_b": win_b,
            "ties": n - win_a - win_b, "win_rate_a": win_a / n if n else math.nan, "win_ci_low": wlo,
            "win_ci_high": whi}


def _z(level: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(0.5 + level / 2)


def _family_blind_hint(chosen: list[_Folder], metric_set: str | None) -> str:
    """How to compare runs of two editor families: the metric sets without a suite's family split that every named
    run was scored with (`--metric-set <set>`), or, when none, scoring them with `metrics=basic` first."""
    shared = set.intersection(*(set(f.runs) for f in chosen))
    blind = sorted(m for m in shared if m and m != metric_set and not any(r.meta.get("suite") for f in chosen
                                                                       for r in f.runs[m]))
    if blind:
        return "compare them on a metric set that does not split editor families: " + " or ".join(
            f"--metric-set {m}" for m in blind)
    return ("score both with a metric set that does not split editor families (metrics=basic) and compare them "
            "with --metric-set basic")


def compare_runs(results: Path, runs: Sequence[str] | None = None, *, queryset: str | None = None,
                 metric_set: str | None = None, by: str | None = None, metrics: Sequence[str] | None = None,
                 n_resamples: int = 10000, seed: int = 0, test: str = "wilcoxon"):
    """Paired comparison of every unordered pair of `runs` (editor names or run folder names; default: every run
    of the query set), one row per (metric_set, metric, by, group, run_a, run_b); columns `COLUMNS`.

    `by`: None (overall rows only) or "type" / "class" (overall rows, then one row per edit type / object class).
    `test`: "wilcoxon" (default) or "permutation". p_adjusted: Holm over every row of one (metric_set, by) table.
    `df.attrs` holds `notes` (what was left out and why), `coverage` (per pair: queries shared and dropped) and the
    settings. Raises CompareError when the comparison cannot be made."""
    import pandas as pd

    from benchmark.tables.leaderboard import collect_runs

    if by not in BY_VALUES:
        raise CompareError(f"--by {by!r}: use type or class")
    if test not in TESTS:
        raise CompareError(f"test {test!r}: use one of {', '.join(TESTS)}")
    if n_resamples < 2:
        raise CompareError(f"--resamples {n_resamples}: use at least 2 (default 10000)")
    by_value = BY_VALUES[by]
    results = Path(results)
    where = f"under {results / 'runs'}" + (f" for query set {queryset!r}" if queryset else "")
    folders = _folders(collect_runs(results, per_query_only=True), queryset)  # not the per-row FID features
    if not folders:
        raise CompareError(f"no scored runs {where}; run `make demo` or `editmeter run ...` first")
    explicit = bool(runs)
    chosen = _resolve(folders, runs, where, scoped=queryset is not None) if runs else folders
    if len(chosen) < 2:
        raise CompareError(f"a comparison needs two or more runs; {'named' if explicit else 'found'} {len(chosen)} "
                           f"{where}")
    hashes = {f.queryset_hash for f in chosen}
    if len(hashes) > 1:
        sets = "; ".join(f"{f.key}: {f.queryset} {f.queryset_hash[:10]}" for f in chosen)
        raise CompareError(f"the runs are of different query sets ({sets}); a paired comparison needs the same "
                           "queries. Name runs of one set, or pass --queryset.")
    if explicit and len({f.protocol for f in chosen}) > 1:
        raise CompareError(_protocol_mix(chosen) + "; name runs of one protocol")
    notes: list[str] = []
    have = [set(f.runs) for f in chosen]
    if metric_set is not None:
        lacking = [f for f in chosen if metric_set not in f.runs]
        if lacking and (explicit or len(lacking) > len(chosen) - 2):
            f = lacking[0]
            raise CompareError(f"run {f.key} was not scored with metric set {metric_set!r} (it has: "
                               f"{', '.join(sorted(f.runs)) or 'none'}); score it with metrics={metric_set}, or "
                               "leave it out")
        msets = [metric_set]
    elif explicit:
        msets = sorted(set.intersection(*have))
        if not msets:
            raise CompareError("the runs share no metric set (" + "; ".join(
                f"{f.key}: {', '.join(sorted(f.runs))}" for f in chosen) + "); score them with one metrics=...")
        for mset in sorted(set.union(*have) - set(msets)):
            notes.append(f"metric set {mset}: not compared, not every named run was scored with it")
    else:
        msets = sorted(set.union(*have))
    rows: list[dict] = []
    coverage: list[dict] = []
    compared: set[str] = set()
    for mset in msets:
        members = [f for f in chosen if mset in f.runs]
        left_out = [f.key for f in chosen if mset not in f.runs]
        if left_out:
            notes.append(f"metric set {mset}: {', '.join(left_out)} not scored with it, left out")
        if len(members) < 2:
            continue
        set_runs = _one_scoring(members, mset)
        names, model_level = _metric_columns(set_runs, members, mset, metrics)
        if not names:
            continue
        compared.update(names)
        if model_level:
            notes.append(f"metric set {mset}: {', '.join(model_level)} are model-level scores of a whole run, not "
                         "per-query values: they cannot be paired per query and are not compared here (editmeter "
                         "show prints each run's value; a model-level score has no per-query SE)")
        higher = {m: bool(set_runs[0].meta["metrics"][m]["higher_is_better"]) for m in names}
        suite = set_runs[0].meta.get("suite")
        sides = {f.key: _scope(r, names) for f, r in zip(members, set_runs, strict=True)}
        if not explicit:  # every run of a set: one without a scored query cannot take out the others' comparisons
            empty = [f for f in members if not (sides[f.key]["status"] == "ok").any()]
            if empty:
                notes.append(f"metric set {mset}: {', '.join(f.key for f in empty)} left out, no query scored ok "
                             "(finish or rerun it, or delete it: editmeter remove)")
                keep = [i for i, f in enumerate(members) if f not in empty]
                members, set_runs = [members[i] for i in keep], [set_runs[i] for i in keep]
                if len(members) < 2:
                    continue
        # the query set's ids in id order, with their groups (every run of the set has the same index)
        universe = set_runs[0].index.frame()[["query_id", "edit_type", "object_class"]].fillna("(none)")
        universe = universe.sort_values("query_id", kind="stable").reset_index(drop=True)
        pairs = []
        for fa, fb in itertools.combinations(members, 2):
            if fa.protocol != fb.protocol:  # only reached without named runs: every run of the set
                notes.append(f"metric set {mset}: pair not compared, {_protocol_mix([fa, fb])}")
                continue
            if suite and fa.prompt_kind != fb.prompt_kind:
                why = (f"{fa.key} is {fa.prompt_kind}-based and {fb.key} {fb.prompt_kind}-based: {suite['name']}'s "
                       "scores of the two editor families are not comparable")
                if explicit:
                    raise CompareError(f"metric set {mset}: {why}; name editors of one family, or "
                                       + _family_blind_hint(chosen, metric_set))
                notes.append(f"metric set {mset}: pair not compared, {why}")
                continue
            try:
                pairs.append(_pair(sides[fa.key], sides[fb.key], fa, fb, mset, universe[["query_id"]]))
            except CompareError as err:
                if explicit:
                    raise
                notes.append(f"metric set {mset}: pair not compared, {err}")
        rows += _set_rows(pairs, universe, mset, names, higher, by_value, n_resamples, seed, test)
        coverage += [p.coverage for p in pairs]
    unknown = [m for m in (metrics or ()) if m not in compared]
    if unknown:
        raise CompareError(f"metric {unknown[0]!r} is not a per-query metric of any compared metric set ("
                           f"{', '.join(msets)}); see leaderboard_metrics.csv for the names")
    if not rows:
        raise CompareError(f"nothing to compare {where}: " + ("; ".join(notes) or "no pair of runs shares a metric set"))
    df = pd.DataFrame(rows, columns=COLUMNS)
    for _, part in df.groupby(["metric_set", "by"], sort=False):
        df.loc[part.index, "p_adjusted"] = holm(part["p_value"].to_numpy())
    partial: dict[tuple[str, str], str] = {}  # (run folder, metric set) -> its PARTIAL note, in pair order
    for c in coverage:
        for s in "ab":
            if c[f"{s}_not_done"]:
                partial.setdefault((c[f"run_{s}"], c["metric_set"]),
                                   f"PARTIAL: {c[f'run_{s}']} has {c[f'{s}_not_done']} of its {c[f'n_total_{s}']} "
                                   f"queries ({c['metric_set']}) not yet edited or scored; its comparisons cover only "
                                   "the finished queries, not the whole set")
    notes = [*partial.values(), *notes]
    df.attrs.update({"notes": notes, "coverage": coverage, "n_resamples": n_resamples, "seed": seed,
                     "test": TESTS[test], "level": LEVEL, "queryset": chosen[0].queryset})
    return df


# -- terminal output ------------------------------------------------------------------------------------------------

def _decimals(values: Sequence[float]) -> int:
    """Decimals that give the largest of `values` four significant digits (0..6)."""
    finite = [abs(v) for v in values if isinstance(v, float | int) and math.isfinite(v) and v != 0]
    if not finite:
        return 3
    return int(min(6, max(0, 3 - math.floor(math.log10(max(finite))))))


def _diff_decimals(values: Sequence[float], dec: int) -> int:
    """Decimals (at least `dec`) that give the smallest nonzero of `values` (a difference and its CI bounds) two
    significant digits: a difference of 4e-5 must not print as 0.000 [0.000, 0.000]. More than 12 means
    scientific notation (returned as -1)."""
    finite = [abs(v) for v in values if isinstance(v, float | int) and math.isfinite(v) and v != 0]
    if not finite:
        return dec
    need = 1 - math.floor(math.log10(min(finite)))
    return max(dec, need) if need <= 12 else -1


def _num(v: float, dec: int) -> str:
    if not isinstance(v, float | int) or not math.isfinite(v):
        return "-"
    if dec < 0:
        return f"{v:.2e}"
    s = f"{v:.{dec}f}"
    return s[1:] if s.startswith("-") and float(s) == 0 else s  # no "-0.000"


def _p(v: float) -> str:
    return "-" if not math.isfinite(v) else "<1e-4" if v < 1e-4 else f"{v:.2g}"


def _win_cell(r: Any) -> str:
    """A's win rate with its interval, and the tied share when there are ties: a 0% win rate where every query
    ties must not read as a loss."""
    if not math.isfinite(r.win_rate_a):
        return "-"
    if r.n_shared and r.ties == r.n_shared:
        return f"all {r.ties} tied"
    cell = f"{100 * r.win_rate_a:.0f}% [{100 * r.win_ci_low:.0f}, {100 * r.win_ci_high:.0f}]"
    return cell + (f", {100 * r.ties / r.n_shared:.0f}% tied" if r.ties else "")


def _verdict(r: Any) -> str:
    """'A' / 'B' when the Holm-adjusted p is below 0.05 and the whole interval favours that run, else ''."""
    if not (math.isfinite(r.p_adjusted) and r.p_adjusted < 0.05 and math.isfinite(r.ci_low)):
        return ""
    favours_a = r.ci_low > 0 if r.higher_is_better else r.ci_high < 0
    favours_b = r.ci_high < 0 if r.higher_is_better else r.ci_low > 0
    return "A" if favours_a else "B" if favours_b else ""


def format_comparison(df) -> str:
    """A readable view of `compare_runs`' frame: one table per metric set and pair, arrows for the better direction,
    the interval as [lo, hi], PARTIAL on rows of an incomplete run, the notes and how to read the columns."""
    attrs = df.attrs
    df = df.assign(by=df["by"].fillna("").astype(str))  # a table read back from CSV has NaN for ""
    lines: list[str] = [w for n in attrs.get("notes", []) if n.startswith("PARTIAL")
                        for w in textwrap.wrap(n, 110, subsequent_indent="  ")]
    coverage = {(c["metric_set"], c["run_a"], c["run_b"]): c for c in attrs.get("coverage", [])}
    pct = int(round(100 * attrs.get("level", LEVEL)))
    for (mset, ra, rb), part in df.groupby(["metric_set", "run_a", "run_b"], sort=False):
        ea, eb = part["editor_a"].iloc[0], part["editor_b"].iloc[0]
        lines.append(f"\nmetrics={mset}  A = {ea} ({ra})  B = {eb} ({rb})")
        c = coverage.get((mset, ra, rb))
        if c:
            dropped = c["n_scope"] - c["n_shared"]
            why = ", ".join(f"{k} {c[v]}" for k, v in (("A failed", "a_failed"), ("A not done", "a_not_done"),
                                                     ("B failed", "b_failed"), ("B not done", "b_not_done"),
                                                     ("in one run's scope only", "out_of_scope")) if c[v])
            lines.append(f"shared: {c['n_shared']} of {c['n_scope']} queries ok in both; dropped {dropped}"
                         + (f" ({why})" if why else ""))
        header = ["metric", "group", "n", "mean A", "mean B", "diff A-B", f"{pct}% CI", "p", "p_holm", "A wins",
                  "B wins", "ties", f"A win rate [{pct}% CI]", "better", ""]
        table = [header]
        for m, mrows in part.groupby("metric", sort=False):
            dec = _decimals([*mrows["mean_a"], *mrows["mean_b"]])
            # the difference and its CI with two significant digits, the means with as many decimals when that
            # stays readable: "1.000 vs 1.000, diff 0.000 [0.000, 0.000]" hid a significant difference
            ddec = _diff_decimals([*mrows["diff"], *mrows["ci_low"], *mrows["ci_high"]], dec)
            mdec = ddec if 0 <= ddec <= 8 else dec
            arrow = "↑" if mrows["higher_is_better"].iloc[0] else "↓"
            for r in mrows.itertuples():
                if r.by and r.n_shared == 0:
                    continue
                win = _win_cell(r)
                table.append([f"{m}{arrow}", r.group, str(r.n_shared), _num(r.mean_a, mdec), _num(r.mean_b, mdec),
                              _num(r.diff, ddec), f"[{_num(r.ci_low, ddec)}, {_num(r.ci_high, ddec)}]", _p(r.p_value),
                              _p(r.p_adjusted), str(r.win_a), str(r.win_b), str(r.ties), win, _verdict(r),
                              "" if r.complete else "PARTIAL"])
        if not part["by"].astype(bool).any():  # no groups: drop the all-"all" column
            table = [row[:1] + row[2:] for row in table]
        widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
        lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in table]
    lines += [w for n in attrs.get("notes", []) if not n.startswith("PARTIAL")
              for w in textwrap.wrap(f"NOTE: {n}", 110, subsequent_indent="  ")]
    grouped = bool(df["by"].astype(bool).any())
    if grouped:
        lines.append("NOTE: groups where a metric is defined for no shared query are not shown (they are in the CSV)")
    resampling = (f"{attrs['n_resamples']} resamples of queries, seed {attrs['seed']}" if "n_resamples" in attrs
                  else "queries resampled")
    test = attrs.get("test") or (str(df["test"].iloc[0]) if len(df) else "paired")
    legend = (f"diff: mean A - mean B over the n queries both runs edited ok where the metric is defined for both. "
              f"{pct}% CI: paired bootstrap percentile interval ({resampling}). p: two-sided {test} test; p_holm: Holm-adjusted within one metric set over "
              "the overall rows (pairs x metrics)" + (" and, separately, over the group rows (pairs x metrics x "
              "groups)" if grouped else "") + ". Wins: queries where that run is better in the metric's direction "
              f"(↑ higher, ↓ lower); ties (equal to 1e-6) counted apart; win rate = A wins / n, Wilson {pct}% "
              "interval. better: the run the whole CI favours when p_holm < 0.05. Model-level scores (HATIE's "
              "Total, IQ, FID) exist per run, not per query, and are not paired.")
    lines += ["", *textwrap.wrap(legend, 110)]
    return "\n".join(lines).lstrip("\n")


def main(argv: Sequence[str] | None = None) -> int:
    """`editmeter compare`: print (and optionally write) the paired comparison; exit 2 when it is refused."""
    ap = argparse.ArgumentParser(prog="editmeter compare", description="Paired comparison of two or more runs on "
                                 "the queries they share: mean differences with bootstrap CIs, a paired test, win "
                                 "rates. docs/compare.md names every statistic.")
    ap.add_argument("runs", nargs="*", metavar="RUN", help="editor names, or run folders <editor>-<signature> when an "
                    "editor has several (default: every run of the query set)")
    ap.add_argument("--results", type=Path, default=PROJECT_ROOT / "results",
                    help="results folder (default: <checkout>/results)")
    ap.add_argument("--queryset", default=None, help="only runs of this query set")
    ap.add_argument("--metric-set", default=None, help="only this metric set (basic, hatie, ...; default: every set "
                    "the runs share)")
    ap.add_argument("--by", choices=("type", "class"), default=None, help="also split by edit type / object class")
    ap.add_argument("--metrics", default=None, help="comma-separated per-query metrics (default: all of the set)")
    ap.add_argument("--resamples", type=int, default=10000, help="bootstrap resamples (default 10000)")
    ap.add_argument("--seed", type=int, default=0, help="resampling seed (default 0)")
    ap.add_argument("--test", choices=tuple(TESTS), default="wilcoxon",
                    help="paired test: wilcoxon signed-rank (default) or a sign-flip permutation test of the mean")
    ap.add_argument("--csv", type=Path, default=None, help="also write the full table to this CSV file")
    args = ap.parse_intermixed_args(argv)  # runs may stand between options
    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()] if args.metrics else None
    try:
        df = compare_runs(args.results, args.runs or None, queryset=args.queryset, metric_set=args.metric_set,
                          by=args.by, metrics=metrics, n_resamples=args.resamples, seed=args.seed, test=args.test)
    except CompareError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(format_comparison(df))
    if args.csv is not None:
        from benchmark.io.fileio import atomic_write_text

        # no float_format: pandas writes the shortest repr that reads back to the same float (full precision)
        atomic_write_text(args.csv, df.to_csv(index=False))
        print(f"wrote {args.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
