"""Judge drift, the statistics: per dimension, the mean shift B - A with a paired bootstrap interval, per-sample
agreement (exact, within a tolerance, Spearman), and what the shift does to the ranking of the editors (ranks under
both judges, Kendall's tau, the pairs whose order changes with their difference's interval under each judge).

Every interval comes from the project's cluster bootstrap over queries (`benchmark.io.stats.resampled`, as
`benchmark.commands.metaeval.stats.bootstrap` runs it, several statistics per set of resamples): a resample draws queries
with replacement and brings every sample of a drawn query along, under both judges at once (samples of one query
share its source and instruction, and A's and B's scores of one sample are paired).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from benchmark.commands.metaeval.evaluate import Boot
from benchmark.commands.metaeval.stats import correlations, query_clusters

EXACT_RTOL = 1e-9  # scores closer than this (relative to max(1, |a|, |b|)) are equal


def _equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(a - b) <= EXACT_RTOL * np.maximum(1.0, np.maximum(np.abs(a), np.abs(b)))


def _est(stat: Any, clusters: np.ndarray, boot: Boot, k: int) -> list[tuple[float, float, float]]:
    """(point, lo, hi) of each of the k columns `stat(w)` returns for an (R, n_items) weight matrix: the point at all
    weights 1, the percentile interval over one set of resamples shared by the k statistics (NaN where fewer than
    half of the resamples are finite, or with fewer than 2 resamples)."""
    from benchmark.io.stats import percentile_interval, resampled

    nan = [(math.nan, math.nan, math.nan)] * k
    if not len(clusters):
        return nan
    with np.errstate(invalid="ignore", divide="ignore"):
        point = np.asarray(stat(np.ones((1, len(clusters)))), dtype=np.float64).reshape(k)
        if boot.resamples < 2:
            return [(float(v), math.nan, math.nan) for v in point]
        lo, hi = percentile_interval(resampled(stat, clusters, boot.resamples, boot.seed), boot.confidence)
    return [(float(v), float(x), float(y)) for v, x, y in zip(point, np.ravel(lo), np.ravel(hi), strict=True)]


def _means(columns: np.ndarray):
    """stat(w) = the weighted mean of each column of `columns` (n_items, k): (R, k)."""
    return lambda w: (w @ columns) / w.sum(axis=1, keepdims=True)


def sample_stats(qids: np.ndarray, a: np.ndarray, b: np.ndarray, boot: Boot, within: float) -> dict[str, Any]:
    """Shift and agreement of paired samples (A's and B's score of each; query ids cluster the resampling)."""
    clusters = query_clusters(list(qids))
    row: dict[str, Any] = {"n_paired": len(a), "mean_a": float(a.mean()) if len(a) else math.nan,
                           "mean_b": float(b.mean()) if len(b) else math.nan}
    names = ("shift", "exact", "within")
    columns = np.column_stack([b - a, _equal(a, b), np.abs(b - a) <= within + EXACT_RTOL * max(1.0, within)])
    for name, est in zip(names, _est(_means(columns.astype(np.float64)), clusters, boot, 3), strict=True):
        row[name], row[f"{name}_lo"], row[f"{name}_hi"] = est
    row["spearman"] = correlations(a, b)["spearman"]
    return row


def dimension_rows(frame: Any, dim: str, boot: Boot, within: float) -> list[dict[str, Any]]:
    """One row for all paired samples of `dim` (scope `all`), then one per run folder (scope: its label). Samples
    where the dimension is undefined (NaN) under either judge are left out and counted (`n_undefined`)."""
    rows = []
    scopes = [("all", frame)] + [(run, frame[frame["run"] == run]) for run in dict.fromkeys(frame["run"])]
    for scope, part in scopes:
        a, b = part[f"{dim}_a"].to_numpy(np.float64), part[f"{dim}_b"].to_numpy(np.float64)
        ok = np.isfinite(a) & np.isfinite(b)
        rows.append({"dimension": dim, "scope": scope, **sample_stats(part["query_id"].to_numpy()[ok], a[ok], b[ok],
                                                                       boot, within),
                     "n_undefined": int((~ok).sum())})
    return rows


def tied(x: float, y: float) -> bool:
    """Whether two figures are equal up to float noise: closer than EXACT_RTOL relative to max(1, |x|, |y|). The one
    rule for ranks, Kendall's tau and the order-change table (4.666666666666666 and 4.666666666666667 are tied)."""
    return abs(x - y) <= EXACT_RTOL * max(1.0, abs(x), abs(y))


def _ranks(means: np.ndarray, higher_is_better: bool) -> np.ndarray:
    """1 = best; tied means (`tied`, with each value of a block tied to the next one in order) share the best rank
    of their block (competition ranking)."""
    values = -means if higher_is_better else means
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values), dtype=int)
    for pos, i in enumerate(order):
        prev = order[pos - 1] if pos else None
        ranks[i] = ranks[prev] if prev is not None and tied(values[prev], values[i]) else pos + 1
    return ranks


def _sign(d: float, x: float, y: float) -> int:
    """The sign of d = x - y, 0 where x and y are `tied`."""
    return 0 if tied(x, y) else (1 if d > 0 else -1)


def _mean_difference(values: np.ndarray, in_x: np.ndarray):
    """stat(w) = per column of `values` (n_items, k), the weighted mean of x's samples - that of y's (`in_x`: 1 for
    x's samples, 0 for y's): (R, k). A resample that draws none of one folder's queries gives NaN (left out of the
    interval)."""
    in_y = 1.0 - in_x
    return lambda w: ((w @ (values * in_x[:, None])) / (w @ in_x)[:, None]
                      - (w @ (values * in_y[:, None])) / (w @ in_y)[:, None])


def order_table(name: str, runs: list[str], means_a: np.ndarray, means_b: np.ndarray,
                higher_is_better: bool) -> dict[str, Any]:
    """Ranks of `runs` by their values under A and B, Kendall's tau (tau-b) between the two rankings, and every
    pair (x before y in `runs`) whose order differs: `reversed`, or `tied under A` / `tied under B`. Runs whose
    value is undefined under either judge are ranked by neither."""
    from scipy.stats import kendalltau

    ok = np.isfinite(means_a) & np.isfinite(means_b)
    runs = [r for r, k in zip(runs, ok, strict=True) if k]
    ma, mb = means_a[ok], means_b[ok]
    ra, rb = (_ranks(ma, higher_is_better), _ranks(mb, higher_is_better)) if runs else ([], [])
    table = [{"dimension": name, "run": r, "mean_a": float(ma[i]), "rank_a": int(ra[i]), "mean_b": float(mb[i]),
              "rank_b": int(rb[i])} for i, r in enumerate(runs)]
    tau = math.nan  # tau-b of the tie-aware ranks: values tied up to float noise count as ties, as below
    if len(runs) >= 2 and np.ptp(ra) > 0 and np.ptp(rb) > 0:
        tau = float(kendalltau(ra, rb).statistic)
    elif len(runs) >= 2 and np.ptp(ra) == 0 and np.ptp(rb) == 0:
        tau = 1.0  # every run tied under both judges: no pair changes its order
    changes = []
    for (i, x), (j, y) in itertools.combinations(enumerate(runs), 2):
        sa, sb = _sign(ma[i] - ma[j], ma[i], ma[j]), _sign(mb[i] - mb[j], mb[i], mb[j])
        if sa != sb:
            changes.append({"dimension": name, "run_x": x, "run_y": y,
                            "change": "reversed" if sa and sb else ("tied under A" if not sa else "tied under B"),
                            "diff_a": float(ma[i] - ma[j]), "diff_b": float(mb[i] - mb[j])})
    return {"ranks": table, "kendall_tau": tau, "changes": changes}


def ranking(frame: Any, dim: str, higher_is_better: bool, boot: Boot) -> dict[str, Any]:
    """`order_table` of the run folders by their mean of `dim` over their paired samples, each changed pair with
    the paired bootstrap interval of its difference under each judge (one set of resampled queries for both judges
    and both folders)."""
    part = frame[np.isfinite(frame[f"{dim}_a"]) & np.isfinite(frame[f"{dim}_b"])]
    runs = list(dict.fromkeys(part["run"]))
    means = {s: np.array([part.loc[part["run"] == r, f"{dim}_{s}"].mean() for r in runs]) for s in ("a", "b")}
    out = order_table(dim, runs, means["a"], means["b"], higher_is_better)
    for r in out["ranks"]:
        r["n_paired"] = int((part["run"] == r["run"]).sum())
    for row in out["changes"]:
        both = part[part["run"].isin([row["run_x"], row["run_y"]])]
        clusters = query_clusters(list(both["query_id"]))
        in_x = (both["run"] == row["run_x"]).to_numpy(np.float64)
        values = both[[f"{dim}_a", f"{dim}_b"]].to_numpy(np.float64)
        for s, est in zip("ab", _est(_mean_difference(values, in_x), clusters, boot, 2), strict=True):
            row[f"diff_{s}"], row[f"diff_{s}_lo"], row[f"diff_{s}_hi"] = est
    return out
