"""`editmeter metaeval drift [--metrics SET] [--queryset NAME] [--a JUDGE] [--b JUDGE] [paths.results=DIR]`: how
far two judges of one suite disagree on the same edits, and what that does to the leaderboard. Reads scored runs
only (nothing is judged); prints the tables and writes them under <results>/metaeval/."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from benchmark.commands.metaeval.drift import DROP_KINDS, DriftError

DROP_WORDS = {"failed_a": "failed under A", "failed_b": "failed under B", "failed_both": "failed under both",
              "missing": "missing (not scored under A or B)",
              "other_edit": "scored on other edit bytes by A and B (the edit was replaced between the scorings)"}


def _results(overrides: list[str]) -> Path:
    from benchmark.commands.run import compose

    stray = [o for o in overrides if not o.startswith("paths.")]
    if stray:
        raise DriftError(f"{' '.join(stray)}: drift reads scored runs and takes no run-config override but "
                         "paths.results=DIR (the results folder) and metaeval.<key>=value; select with --metrics, "
                         "--queryset, --a and --b")
    return Path(compose(overrides)[0].paths.results)


def _grid(header: list[str], body: list[list[str]]) -> str:
    widths = [max(len(x) for x in col) for col in zip(header, *body, strict=True)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()
                     for cells in [header, *body])


def _num(x: float, digits: int = 3) -> str:
    return "-" if not math.isfinite(x) else f"{x:.{digits}f}"


def _est(row: dict[str, Any], name: str) -> str:
    from benchmark.commands.metaeval.table import fmt

    v, lo, hi = row[name], row.get(f"{name}_lo", math.nan), row.get(f"{name}_hi", math.nan)
    if math.isfinite(v) and math.isfinite(lo) and math.isfinite(hi):
        return f"{v:+.3f} [{lo:+.3f}, {hi:+.3f}]" if name.startswith(("shift", "diff")) else fmt(v, lo, hi)
    return _num(v)


def _write_csv(path: Path, rows: list[dict[str, Any]], columns: list[str]) -> None:
    import pandas as pd

    from benchmark.io.fileio import atomic_write_text

    # full precision, as the leaderboards: pandas writes the shortest repr that reads back to the same float
    atomic_write_text(path, pd.DataFrame(rows, columns=columns).to_csv(index=False))


def run_drift(args: argparse.Namespace, overrides: list[str], settings: list[str]) -> int:
    """Run the drift comparison; returns 0 (errors raise DriftError, which the CLI turns into exit 2)."""
    from benchmark.commands.metaeval import drift as D
    from benchmark.commands.metaeval.drift_stats import dimension_rows, order_table, ranking
    from benchmark.commands.metaeval.evaluate import Boot
    from benchmark.commands.metaeval.judge_cli import _settings
    from benchmark.commands.metaeval.table import write_table

    results = _results(overrides)
    conf = _settings(settings)
    boot = Boot(int(args.resamples if args.resamples is not None else conf.resamples),
                int(args.seed if args.seed is not None else conf.seed), float(conf.confidence))
    if boot.resamples < 0:
        raise DriftError(f"--resamples {boot.resamples}: must be >= 0")
    if not (args.within >= 0 and math.isfinite(args.within)):
        raise DriftError(f"--within {args.within}: must be a finite number >= 0 (on the suite's own scale)")
    metric_set = args.metrics
    if metric_set is not None and "," in metric_set:
        raise DriftError(f"--metrics {metric_set}: drift compares the judges of one metric set; name one")
    group = D.pick_group(D.read_groups(results), results, metric_set, args.queryset)
    ja, jb, how = D.pick_judges(group, args.a, args.b)
    for j in (ja, jb):
        j.load()
    paired = D.pair_scores(ja, jb)
    prov = {"A": D.provenance(ja.provenance_rows()), "B": D.provenance(jb.provenance_rows())}

    totals = {k: sum(d[k] for d in paired.dropped.values()) for k in DROP_KINDS}
    rows, ranks, flips, taus = [], [], [], {}
    for dim in paired.dims:
        rank = ranking(paired.frame, dim, paired.higher_is_better[dim], boot)
        taus[dim] = rank["kendall_tau"]
        ranks += rank["ranks"]
        flips += rank["changes"]
        for r in dimension_rows(paired.frame, dim, boot, args.within):
            everything = r["scope"] == "all"
            counts = totals if everything else paired.dropped[r["scope"]]
            rows.append({"metric": f"{group.metric_set}/{dim}", **r,
                         "kendall_tau": rank["kendall_tau"] if everything else math.nan,
                         "n_order_changes": len(rank["changes"]) if everything else math.nan, **counts,
                         "sig_a": ja.sig, "sig_b": jb.sig, "judge_a": ja.name, "judge_b": jb.name})
    # the suite's own leaderboard figures (GEdit_O_en, ...) on the paired samples: ranks and order changes, no
    # intervals (a figure such as a macro average over task groups is not a mean of per-sample values)
    figures, why_none = D.leaderboard_figures(ja, jb, paired)
    board: dict[str, Any] = {"ranks": [], "changes": [], "kendall_tau": {}}
    for name, v in figures.items():
        t = order_table(name, paired.runs, np.array(v["a"]), np.array(v["b"]), v["higher_is_better"])
        board["ranks"] += t["ranks"]
        board["changes"] += t["changes"]
        board["kendall_tau"][name] = t["kendall_tau"]
    profiles = sorted({v["profile"] for j in (ja, jb) for _, v in j.entries})
    judges = {side: {"sig": j.sig, "judge": j.name, "components": j.components, "first_scored": j.first_scored,
                     "run_folders": sorted(p.parent.name for p, _ in j.entries), "rows": prov[side]}
              for side, j in (("A", ja), ("B", jb))}
    path = write_table(results / "metaeval", "drift", rows,
                       queryset=SimpleNamespace(name=group.queryset, hash=group.queryset_hash),
                       profile="+".join(profiles), resamples=boot.resamples, confidence=boot.confidence,
                       seed=boot.seed, inputs={}, float_format=None,
                       extra={"options": {"metrics": group.metric_set, "a": ja.sig, "b": jb.sig,
                                          "within": args.within},
                              "judges": judges, "chosen": how, "dimensions": paired.dims,
                              "not_compared_columns": paired.dims_only, "dropped": paired.dropped,
                              "runs_only_a": paired.only_a, "runs_only_b": paired.only_b,
                              "kendall_tau": taus, "leaderboard_kendall_tau": board["kendall_tau"],
                              "leaderboard_figures_note": why_none,
                              "overrides": overrides + settings})
    stem = path.with_suffix("")
    kind = [{"kind": "per-sample mean"}] * len(ranks) + [{"kind": "leaderboard figure"}] * len(board["ranks"])
    _write_csv(stem.with_name(stem.name + "-ranks.csv"),
               [k | r for k, r in zip(kind, ranks + board["ranks"], strict=True)],
               ["dimension", "kind", "run", "n_paired", "mean_a", "rank_a", "mean_b", "rank_b"])
    kind = [{"kind": "per-sample mean"}] * len(flips) + [{"kind": "leaderboard figure"}] * len(board["changes"])
    _write_csv(stem.with_name(stem.name + "-changes.csv"),
               [k | r for k, r in zip(kind, flips + board["changes"], strict=True)],
               ["dimension", "kind", "run_x", "run_y", "change",
                *[f"diff_{s}{x}" for s in "ab" for x in ("", "_lo", "_hi")]])
    _print(group, ja, jb, how, prov, paired, totals, rows, ranks, flips, taus, boot, args.within)
    _print_board(board)
    if why_none:
        print(f"[metaeval] {why_none}")
    print(f"[metaeval] wrote {path} (+ .json provenance, {stem.name}-ranks.csv, {stem.name}-changes.csv)")
    return 0


def _print(group: Any, ja: Any, jb: Any, how: str, prov: dict[str, Any], paired: Any, totals: dict[str, int],
           rows: list[dict[str, Any]], ranks: list[dict[str, Any]], flips: list[dict[str, Any]],
           taus: dict[str, float], boot: Any, within: float) -> None:
    from benchmark.commands.metaeval.drift import describe_provenance

    print(f"\n[metaeval] judge drift of {group.label}: {len(paired.runs)} run folder(s) scored by both judges "
          f"({how})")
    for side, j in (("A", ja), ("B", jb)):
        print(f"  {side} = {j.describe()}")
        backbone = str(j.components.get("backbone", "not recorded"))
        print(f"      backbone: {backbone if len(backbone) <= 160 else backbone[:157] + '...'}")
        print(f"      rows: {describe_provenance(prov[side])}")
    for side, left in (("A", paired.only_a), ("B", paired.only_b)):
        if left:
            print(f"[metaeval] left out, scored by {side} only: {', '.join(left)}")
    for side, cols in paired.dims_only.items():
        if cols:
            print(f"[metaeval] not compared, only {side}'s rows have: {', '.join(cols)}")
    n = int(len(paired.frame))
    print(f"[metaeval] paired: {n} sample(s) scored ok under both judges; not paired (never scored as a number): "
          + ", ".join(f"{totals[k]} {DROP_WORDS[k]}" for k in DROP_KINDS))
    print(f"[metaeval] {int(boot.confidence * 100)}% intervals from {boot.resamples} paired bootstrap resamples over "
          f"queries, seed {boot.seed}; within {within:g} = |B - A| <= {within:g} on the suite's own scale")
    body = [[r["dimension"] if r["scope"] == "all" else "", r["scope"], str(r["n_paired"]), _num(r["mean_a"]),
             _num(r["mean_b"]), _est(r, "shift"), _est(r, "exact"), _est(r, "within"), _num(r["spearman"])]
            for r in rows]
    print("\nshift B - A and per-sample agreement")
    print(_grid(["dimension", "scope", "n", "mean A", "mean B", "shift B-A", "exact", f"within {within:g}",
                 "spearman"], body))
    print("\nranks under each judge (1 = best; mean over each editor's paired samples)")
    print(_grid(["dimension", "editor", "n", "mean A", "rank A", "mean B", "rank B"],
                [[r["dimension"], r["run"], str(r["n_paired"]), _num(r["mean_a"]), str(r["rank_a"]), _num(r["mean_b"]),
                  str(r["rank_b"])] for r in ranks]))
    print("Kendall's tau between the rankings: " + ", ".join(f"{d} {_num(t)}" for d, t in taus.items()))
    if not flips:
        print("order changes: none (every pair of editors keeps its order under both judges)")
        return
    print("\norder changes (difference x - y of the means, under each judge)")
    print(_grid(["dimension", "x", "y", "change", "A: x - y", "B: x - y"],
                [[f["dimension"], f["run_x"], f["run_y"], f["change"], _est(f, "diff_a"), _est(f, "diff_b")]
                 for f in flips]))


def _print_board(board: dict[str, Any]) -> None:
    if not board["ranks"]:
        return
    print("\nranks by the suite's leaderboard figures, each computed from the paired samples (no intervals: a figure "
          "is not a mean of per-sample values)")
    print(_grid(["figure", "editor", "A", "rank A", "B", "rank B"],
                [[r["dimension"], r["run"], _num(r["mean_a"]), str(r["rank_a"]), _num(r["mean_b"]), str(r["rank_b"])]
                 for r in board["ranks"]]))
    print("Kendall's tau between the rankings: " + ", ".join(f"{d} {_num(t)}" for d, t in board["kendall_tau"].items()))
    if not board["changes"]:
        print("order changes: none")
        return
    print(_grid(["figure", "x", "y", "change", "A: x - y", "B: x - y"],
                [[c["dimension"], c["run_x"], c["run_y"], c["change"], f"{c['diff_a']:+.3f}", f"{c['diff_b']:+.3f}"]
                 for c in board["changes"]]))
