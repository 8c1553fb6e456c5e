"""Judge drift, the data side: find the two judges (metric signatures of one judged suite) of a results folder,
pair their score rows sample by sample, and say which judges they were (`editmeter metaeval drift`,
docs/metaeval.md "Judge drift").

A judge is one metric signature of a metric set (the same suite with another backbone, or the same backbone at
another version, is another signature in each run folder it scored). Only samples scored `ok` under both judges are
paired; a failure row is never a score, and every row left out is counted by why.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.commands.metaeval.scoring import MetaevalError

# the per-reply provenance a judged row may carry (the model asked, the snapshot the reply says answered, the
# system_fingerprint, the server's reported version; several replies' distinct values joined by ';'); absent: "not
# recorded"
PROVENANCE_COLUMNS = ("judge_model", "judge_answered_by", "judge_fingerprint", "judge_version")
# why a sample is not paired (exclusive): failed under A / B / both, not scored under one, or the two judges scored
# other bytes (the edit was replaced between the two scorings: not one edit judged twice)
DROP_KINDS = ("failed_a", "failed_b", "failed_both", "missing", "other_edit")


class DriftError(MetaevalError):
    """The drift comparison cannot be made as asked; the message names the input and the fix (exit 2)."""


@dataclass
class Judge:
    """One metric signature of the compared metric set: the run folders it scored and what it is."""

    sig: str
    entries: list[tuple[Path, dict[str, Any]]]  # (run.json path, validated view) per run folder it scored
    name: str = "not recorded"  # the suite's `judge` component (the backbone's model and revision)
    components: dict[str, Any] = field(default_factory=dict)
    first_scored_ns: int = 0  # time of its earliest score part (0: unknown)
    runs: list[Any] = field(default_factory=list)  # benchmark.tables.leaderboard.Run per run folder, after `load()`

    @property
    def first_scored(self) -> str:
        if not self.first_scored_ns:
            return "unknown"
        return datetime.fromtimestamp(self.first_scored_ns / 1e9, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")

    def describe(self) -> str:
        return f"{self.sig}  judge {self.name}, {len(self.entries)} run folder(s), first scored {self.first_scored}"

    def load(self) -> None:
        """Read the score rows of every run folder (whole: a suite's leaderboard figures may need its other columns,
        e.g. GEdit-Bench's language), validated as the leaderboard reads them (a bad part is quarantined with a
        warning and its rows count as missing)."""
        from benchmark.tables.leaderboard import collect_run

        runs = (collect_run(path, view) for path, view in self.entries)
        self.runs = [r for r in runs if r is not None]

    def provenance_rows(self) -> list[Any]:
        """Per run folder: query_id, status and whichever provenance columns its rows carry."""
        from benchmark.stages.score import read_scores

        return [read_scores(r.path, self.sig, columns=("query_id", "status", *PROVENANCE_COLUMNS),
                            valid_ids=r.index.ids) for r in self.runs]


@dataclass
class Group:
    """The runs of one metric set on one query set, by signature."""

    metric_set: str
    queryset: str
    queryset_hash: str
    judges: dict[str, Judge]

    @property
    def label(self) -> str:
        return f"{self.metric_set or '(unnamed)'} on {self.queryset} ({self.queryset_hash[:10]})"


def _first_part_ns(run_dir: Path, sig: str) -> int:
    """Write time of the earliest score part of `sig` in a run folder (part names start with the time in ns)."""
    from benchmark.stages.score import scores_dir

    times = []
    for p in scores_dir(run_dir, sig).glob("part-*.parquet"):
        stamp = p.name.split("-", 2)[1]
        if stamp.isdigit():
            times.append(int(stamp))
    return min(times, default=0)


def read_groups(results: Path) -> list[Group]:
    """Every (metric set, query set) of `results/runs` with its signatures and the run folders each scored (from
    the run.json files only: rows are read once two judges are chosen, `Judge.load`); a bad run.json is skipped
    with a warning as the leaderboard does."""
    from benchmark.tables.leaderboard import iter_scorings

    groups: dict[tuple[str, str, str], Group] = {}
    for meta_path, view in iter_scorings(results):
        if not _first_part_ns(meta_path.parent, view["metric_sig"]):
            # run.json records a metric set it has not scored (an earlier stages=[edit] run): no judge of it
            continue
        key = (view.get("metric_set") or "", view["queryset"], view["queryset_hash"])
        g = groups.setdefault(key, Group(*key, {}))
        sig = view["metric_sig"]
        judge = g.judges.setdefault(sig, Judge(sig, []))
        judge.entries.append((meta_path, view))
        suite = view.get("suite") or {}
        if not judge.components and isinstance(suite.get("components"), dict):
            judge.components = dict(suite["components"])
            judge.name = str(judge.components.get("judge") or judge.name)
    for g in groups.values():
        for j in g.judges.values():
            j.first_scored_ns = min((t for t in (_first_part_ns(p.parent, j.sig) for p, _ in j.entries) if t),
                                    default=0)
    return sorted(groups.values(), key=lambda g: (g.queryset, g.metric_set, g.queryset_hash))


def _listing(groups: list[Group]) -> str:
    return "; ".join(f"{g.label}: {len(g.judges)} judge(s)" for g in groups) or "none"


def pick_group(groups: list[Group], results: Path, metric_set: str | None, queryset: str | None) -> Group:
    """The one (metric set, query set) to compare: the one asked for, else the only one with two or more judges."""
    if not groups:
        raise DriftError(f"no scored runs under {results / 'runs'}: score the same runs with two judges first, e.g. "
                         "`editmeter run ... metrics=gedit`, then again with another backbone (docs/metaeval.md)")
    hits = [g for g in groups if (metric_set is None or g.metric_set == metric_set)
            and (queryset is None or g.queryset == queryset)]
    if not hits:
        asked = " and ".join(x for x in (f"--metrics {metric_set}" if metric_set else "",
                                          f"--queryset {queryset}" if queryset else "") if x)
        raise DriftError(f"{asked}: no such runs in {results}; metric sets there: {_listing(groups)}")
    two = [g for g in hits if len(g.judges) >= 2]
    if len(two) == 1:
        return two[0]
    if not two:
        raise DriftError(f"no metric set in {results} was scored by two judges (two metric signatures of one suite) "
                         f"{'among those asked for ' if metric_set or queryset else ''}(metric sets there: "
                         f"{_listing(hits)}); score the same runs again with another judge, e.g. "
                         "`metrics/gedit_judge@metrics.gedit.backbone=endpoint metrics.gedit.backbone.model=...`")
    raise DriftError(f"several metric sets have two or more judges ({_listing(two)}); pick one with --metrics NAME "
                     "and, when a metric set has runs on several query sets, --queryset NAME")


def _resolve(group: Group, spec: str, option: str) -> Judge:
    """The judge `spec` names: a signature prefix, or a judge name (the suite's `judge` component)."""
    hits = [j for j in group.judges.values() if j.sig.startswith(spec)] or \
           [j for j in group.judges.values() if j.name == spec]
    listing = "; ".join(j.describe() for j in group.judges.values())
    if not hits:
        raise DriftError(f"{option} {spec}: no judge of {group.label} has that signature prefix or judge name; "
                         f"judges there: {listing}")
    if len(hits) > 1:
        raise DriftError(f"{option} {spec}: {len(hits)} judges of {group.label} match; give a signature prefix: "
                         + "; ".join(j.describe() for j in hits))
    return hits[0]


def pick_judges(group: Group, a: str | None, b: str | None) -> tuple[Judge, Judge, str]:
    """(judge A, judge B, how they were chosen). Without --a / --b the group must have exactly two judges: A is
    the one scored first (earliest score part), B the later (same time or unknown: by signature)."""
    judges = sorted(group.judges.values(), key=lambda j: (j.first_scored_ns or np.inf, j.sig))
    if a is None and b is None:
        if len(judges) != 2:
            raise DriftError(f"{group.label} has {len(judges)} judges (metric signatures); pick two with --a and --b "
                             "(a signature prefix or a judge name): " + "; ".join(j.describe() for j in judges))
        return judges[0], judges[1], ("the only two judges of this metric set; A is the one scored first "
                                      "(earliest score part), B the later")
    if a is None or b is None:
        given, spec = ("--a", a) if a is not None else ("--b", b)
        assert spec is not None
        ja = _resolve(group, spec, given)
        others = [j for j in judges if j.sig != ja.sig]
        if len(others) != 1:
            raise DriftError(f"{given} {spec} given alone, and {group.label} has {len(others)} other judges; name the "
                             "other with " + ("--b" if given == "--a" else "--a") + ": "
                             + "; ".join(j.describe() for j in others))
        pair = (ja, others[0]) if given == "--a" else (others[0], ja)
        return pair[0], pair[1], f"{given} {spec}; the other is the only other judge of this metric set"
    ja, jb = _resolve(group, a, "--a"), _resolve(group, b, "--b")
    if ja.sig == jb.sig:
        raise DriftError(f"--a {a} and --b {b} name the same judge ({ja.sig}); name two different ones")
    return ja, jb, f"--a {a}, --b {b}"


@dataclass
class Paired:
    """The samples scored ok by both judges, one row per (run folder, query), with each dimension under A and B."""

    frame: Any  # DataFrame: run, editor, query_id, <dim>_a, <dim>_b for every dimension
    dims: list[str]
    higher_is_better: dict[str, bool]
    runs: list[str]  # labels of the run folders scored by both judges, in order
    dropped: dict[str, dict[str, int]]  # run label -> DROP_KINDS counts
    only_a: list[str]  # run folders scored by A only (left out)
    only_b: list[str]
    dims_only: dict[str, list[str]]  # "A" / "B" -> per-sample columns the other judge's rows lack
    sides: dict[str, tuple[Any, Any]] = field(default_factory=dict)  # run label -> (A's rows, B's rows) of its pairs


def _labels(folders: list[Any]) -> dict[Path, str]:
    """Run folder -> its label: the editor's name when no other compared folder has that editor, else the folder."""
    editors = Counter(r.meta["editor"] for r in folders)
    return {r.path: r.meta["editor"] if editors[r.meta["editor"]] == 1 else r.path.name for r in folders}


def pair_scores(a: Judge, b: Judge) -> Paired:
    """Pair A's and B's rows per run folder and query. Dimensions: the per-sample columns (`metric_order`) both
    judges' runs record, in A's order. Counted, never paired: rows failed under A, under B, under both, rows
    missing (not scored, or no row) under either, and rows whose two judges scored other edit bytes (`edit_sha256`:
    the edit was replaced between the scorings); excluded rows are not owed and not counted."""
    import pandas as pd

    meta_a, meta_b = a.entries[0][1], b.entries[0][1]
    cols_a = list(meta_a.get("metric_order") or meta_a["metrics"])
    cols_b = list(meta_b.get("metric_order") or meta_b["metrics"])
    dims = [c for c in cols_a if c in cols_b]
    if not dims:
        raise DriftError(f"judges {a.sig} and {b.sig} share no per-sample column ({cols_a} vs {cols_b}): they are not "
                         "two judges of one suite")
    hib = {d: bool(meta_a["metrics"][d]["higher_is_better"]) for d in dims}
    by_a, by_b = {r.path: r for r in a.runs}, {r.path: r for r in b.runs}
    both = [by_a[p] for p in sorted(by_a) if p in by_b]
    labels = _labels(both)
    frames, dropped, sides = [], {}, {}
    for run_a in both:
        label = labels[run_a.path]
        sa, sb = run_a.scores, by_b[run_a.path].scores
        keys = ["query_id", "status", "edit_sha256"]
        m = pd.merge(sa[[*keys, *[d for d in dims if d in sa]]], sb[[*keys, *[d for d in dims if d in sb]]],
                     on="query_id", how="outer", suffixes=("_a", "_b"), sort=True)
        st_a, st_b = m["status_a"].fillna("missing"), m["status_b"].fillna("missing")
        owed = (st_a != "excluded") & (st_b != "excluded")
        both_ok = owed & (st_a == "ok") & (st_b == "ok")
        same_edit = m["edit_sha256_a"].fillna("").to_numpy(object) == m["edit_sha256_b"].fillna("").to_numpy(object)
        ok = both_ok & same_edit
        scored = owed & st_a.isin(["ok", "failed"]) & st_b.isin(["ok", "failed"])
        dropped[label] = {"failed_a": int((scored & (st_a == "failed") & (st_b == "ok")).sum()),
                          "failed_b": int((scored & (st_a == "ok") & (st_b == "failed")).sum()),
                          "failed_both": int((scored & (st_a == "failed") & (st_b == "failed")).sum()),
                          "missing": int((owed & ~scored).sum()), "other_edit": int((both_ok & ~same_edit).sum())}
        out = pd.DataFrame({"run": label, "editor": run_a.meta["editor"], "query_id": m.loc[ok, "query_id"]})
        for d in dims:
            for side in ("a", "b"):
                col = m[f"{d}_{side}"] if f"{d}_{side}" in m else pd.Series(np.nan, index=m.index)
                out[f"{d}_{side}"] = pd.to_numeric(col[ok], errors="coerce").astype(np.float64)
        frames.append(out)
        ids = set(out["query_id"])
        sides[label] = (sa[sa["query_id"].isin(ids)], sb[sb["query_id"].isin(ids)])
    if not frames:
        raise DriftError(f"no run folder was scored by both judges {a.sig} and {b.sig} (A: "
                         f"{', '.join(sorted(r.path.name for r in a.runs))}; B: "
                         f"{', '.join(sorted(r.path.name for r in b.runs))}); score the same runs with both")
    frame = pd.concat(frames, ignore_index=True)
    return Paired(frame, dims, hib, [labels[r.path] for r in both], dropped,
                  sorted(r.path.name for p, r in by_a.items() if p not in by_b),
                  sorted(r.path.name for p, r in by_b.items() if p not in by_a),
                  {"A": [c for c in cols_a if c not in cols_b], "B": [c for c in cols_b if c not in cols_a]}, sides)


def leaderboard_figures(judge: Judge, other: Judge, paired: Paired) -> tuple[dict[str, Any], str]:
    """The suite's model-level leaderboard figures (e.g. GEdit_O_en) of each compared run folder, computed by the
    suite's registered summary from its paired rows under each judge: figure -> {"a": [...], "b": [...],
    "higher_is_better": bool}, in the suite's column order; figures undefined for every folder are left out. {} for
    a metric set without a suite summary. Both judges' figures come from the same samples, so what differs is the
    judge's. The second value says why there are none when the summary raised (the per-sample comparison stands)."""
    import inspect

    from benchmark.tables.summaries import suite_summary

    meta = judge.entries[0][1]
    suite = meta.get("suite") or {}
    fn = suite_summary(suite["name"]) if suite.get("name") else None
    per_sample = set(meta.get("metric_order") or [])
    # a count of rows (`count`: PIE-Bench's n_no_background) is not a figure to rank editors by
    keys = [k for k in (meta.get("column_order") or meta["metrics"])
            if k not in per_sample and not meta["metrics"][k].get("count")]
    if fn is None or not keys:
        return {}, ""
    out: dict[str, Any] = {k: {"a": [], "b": [], "higher_is_better": bool(meta["metrics"][k]["higher_is_better"])}
                           for k in keys}
    for run in paired.runs:
        for side, rows, j in (("a", paired.sides[run][0], judge), ("b", paired.sides[run][1], other)):
            comps = (j.entries[0][1].get("suite") or {}).get("components", {})
            extra = {"components": comps} if "components" in inspect.signature(fn).parameters else {}
            means = {c: float(rows[c].mean()) if c in rows and len(rows) else float("nan") for c in per_sample}
            try:
                figures = fn(rows.sort_values("query_id", kind="stable"), means,
                             {c: float("nan") for c in per_sample}, overall=True, seed=0, **extra)
            except Exception as err:  # noqa: BLE001 - any suite's summary; the per-sample comparison stands
                return {}, (f"the {suite['name']} summary raised on {run}'s paired rows ({type(err).__name__}: "
                            f"{err}); no ranking by its leaderboard figures")
            for k in keys:
                v = figures.get(k, float("nan"))
                out[k][side].append(float(v) if isinstance(v, int | float) else float("nan"))
    return {k: v for k, v in out.items() if np.isfinite(v["a"]).any() or np.isfinite(v["b"]).any()}, ""


def provenance(frames: list[Any]) -> dict[str, Any]:
    """What a judge's rows (`Judge.provenance_rows`) say it was: per provenance column, each value seen with its
    number of rows (over the judged rows, ok or failed; a row whose replies name several, joined by ';', counts for
    each), and the judged rows without any; "not recorded" when no row carries it."""
    out: dict[str, Any] = {}
    for col in PROVENANCE_COLUMNS:
        seen: Counter[str] = Counter()
        n_rows = n_with = 0
        for frame in frames:
            rows = frame[frame["status"].isin(["ok", "failed"])]
            n_rows += len(rows)
            if col in rows:
                values = [[x for x in dict.fromkeys(v.split(";")) if x] if isinstance(v, str) else [] for v in rows[col]]
                seen.update(x for row_values in values for x in row_values)
                n_with += sum(1 for vs in values if vs)
        without = n_rows - n_with
        out[col] = {"values": dict(sorted(seen.items())), "rows_without": without} if seen else "not recorded"
    return out


def describe_provenance(prov: dict[str, Any]) -> str:
    """'judge_model: a (12 rows), b (3 rows); judge_answered_by not recorded; ...'."""
    parts = []
    for col, v in prov.items():
        if v == "not recorded":
            parts.append(f"{col} not recorded")
            continue
        seen = ", ".join(f"{k} ({n} row{'s' * (n != 1)})" for k, n in v["values"].items())
        parts.append(f"{col}: {seen}" + (f", not recorded on {v['rows_without']} row(s)" if v["rows_without"] else ""))
    return "; ".join(parts)
