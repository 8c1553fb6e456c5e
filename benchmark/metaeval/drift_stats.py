"""Judge drift, the statistics: per dimension, the mean shift B - A with a paired bootstrap interval, per-sample
agreement (exact, within a tolerance, Spearman), and what the shift does to the ranking of the editors (ranks under
both judges, Kendall's tau, the pairs whose order changes with their difference's interval under each judge).

Every interval comes from the project's cluster bootstrap over queries (`benchmark.metaeval.stats.bootstrap`): a
resample draws queries with replacement and brings every sample of a drawn query along, under both judges at once
(samples of one query share its source and instruction, and A's and B's scores of one sample are paired).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from benchmark.metaeval.evaluate import Boot
from benchmark.metaeval.stats import bootstrap, correlations, query_clusters, weighted_mean

EXACT_RTOL = 1e-9  # scores closer than this (relative to max(1, |a|, |b|)) are equal


def _equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(a - b) <= EXACT_RTOL * np.maximum(1.0, np.maximum(np.abs(a), np.abs(b)))


def _est(stat: Any, clusters: np.ndarray, boot: Boot) -> tuple[float, float, float]:
    if not len(clusters):
        return math.nan, math.nan, math.nan
    with np.errstate(invalid="ignore", divide="ignore"):
        return bootstrap(stat, clusters, n_resamples=boot.resamples, seed=boot.seed, confidence=boot.confidence)


def sample_stats(qids: np.ndarray, a: np.ndarray, b: np.ndarray, boot: Boot, within: float) -> dict[str, Any]:
    """Shift and agreement of paired samples (A's and B's score of each; query ids cluster the resampling)."""
    clusters = query_clusters(list(qids))
    row: dict[str, Any] = {"n_paired": len(a), "mean_a": float(a.mean()) if len(a) else math.nan,
                           "mean_b": float(b.mean()) if len(b) else math.nan}
    for name, values in (("shift", b - a), ("exact", _equal(a, b).astype(np.float64)),
                         ("within", (np.abs(b - a) <= within + EXACT_RTOL * max(1.0, within)).astype(np.float64))):
        row[name], row[f"{name}_lo"], row[f"{name}_hi"] = _est(weighted_mean(values), clusters, boot)
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


def _ranks(means: np.ndarray, higher_is_better: bool) -> np.ndarray:
    """1 = best; equal means share the best rank of their block (competition ranking)."""
    from scipy.stats import rankdata

    return rankdata(-means if higher_is_better else means, method="min").astype(int)


def _sign(d: float, scale: float) -> int:
    return 0 if abs(d) <= EXACT_RTOL * max(1.0, scale) else (1 if d > 0 else -1)


def _mean_difference(values: np.ndarray, in_x: np.ndarray):
    """stat(w) = weighted mean of x's samples - that of y's (`in_x`: 1 for x's samples, 0 for y's), for
    `bootstrap`: a resample that draws none of one folder's queries gives NaN (left out of the interval)."""
    in_y = 1.0 - in_x
    return lambda w: (w @ (values * in_x)) / (w @ in_x) - (w @ (values * in_y)) / (w @ in_y)


def ranking(frame: Any, dim: str, higher_is_better: bool, boot: Boot) -> dict[str, Any]:
    """Each run folder's mean of `dim` over its paired samples under A and B, its rank under each, Kendall's tau
    (tau-b) between the two rankings, and every pair of run folders whose order differs between the judges
    (`reversed`, or `tied under A` / `tied under B`) with the difference of their means under each judge and its
    paired bootstrap interval (one set of resampled queries for both judges and both folders)."""
    from scipy.stats import kendalltau

    part = frame[np.isfinite(frame[f"{dim}_a"]) & np.isfinite(frame[f"{dim}_b"])]
    runs = list(dict.fromkeys(part["run"]))
    means = {s: np.array([part.loc[part["run"] == r, f"{dim}_{s}"].mean() for r in runs]) for s in ("a", "b")}
    ranks = {s: _ranks(means[s], higher_is_better) for s in ("a", "b")} if runs else {"a": [], "b": []}
    table = [{"dimension": dim, "run": r, "n_paired": int((part["run"] == r).sum()), "mean_a": float(means["a"][i]),
              "rank_a": int(ranks["a"][i]), "mean_b": float(means["b"][i]), "rank_b": int(ranks["b"][i])}
             for i, r in enumerate(runs)]
    tau = math.nan
    if len(runs) >= 2 and np.ptp(means["a"]) > 0 and np.ptp(means["b"]) > 0:
        tau = float(kendalltau(means["a"], means["b"]).statistic)
    elif len(runs) >= 2 and np.ptp(means["a"]) == 0 and np.ptp(means["b"]) == 0:
        tau = 1.0 if np.array_equal(means["a"], means["b"]) else math.nan  # all tied under both: nothing moves
    flips = []
    for (i, x), (j, y) in itertools.combinations(enumerate(runs), 2):
        da, db = means["a"][i] - means["a"][j], means["b"][i] - means["b"][j]
        scale = max(abs(means["a"][i]), abs(means["a"][j]), abs(means["b"][i]), abs(means["b"][j]))
        sa, sb = _sign(da, scale), _sign(db, scale)
        if sa == sb:
            continue
        change = "reversed" if sa and sb else ("tied under A" if not sa else "tied under B")
        both = part[part["run"].isin([x, y])]
        clusters = query_clusters(list(both["query_id"]))
        in_x = (both["run"] == x).to_numpy(np.float64)
        row = {"dimension": dim, "run_x": x, "run_y": y, "change": change}
        for s in ("a", "b"):
            stat = _mean_difference(both[f"{dim}_{s}"].to_numpy(np.float64), in_x)
            row[f"diff_{s}"], row[f"diff_{s}_lo"], row[f"diff_{s}_hi"] = _est(stat, clusters, boot)
        flips.append(row)
    return {"ranks": table, "kendall_tau": tau, "flips": flips}
