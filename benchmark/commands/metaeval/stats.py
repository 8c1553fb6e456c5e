"""The statistics of meta-evaluation: ground-truth selection shares, 2AFC agreement, win rates, correlations, and
percentile intervals from a cluster bootstrap over queries (docs/metaeval.md).

Every statistic is written as a function of per-item weights, so the point estimate (all weights 1) and each
bootstrap resample (weight of an item = how often its query was drawn) run through the same code. Resampling whole
queries rather than single pairs keeps the pairs of one query (which share a source image and an instruction)
together, so intervals are not made narrower than the data allow.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from benchmark.io.stats import percentile_interval, resampled


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its percentile bootstrap interval (NaN where undefined)."""

    value: float
    lo: float
    hi: float
    n: int  # items (queries, pairs or editors) the point estimate used


def query_clusters(query_ids: Sequence[str]) -> np.ndarray:
    """Cluster index (0..G-1) of each item, by query id, in first-seen order."""
    index: dict[str, int] = {}
    return np.array([index.setdefault(q, len(index)) for q in query_ids], dtype=np.int64)


def bootstrap(stat: Callable[[np.ndarray], np.ndarray], clusters: np.ndarray, *, n_resamples: int, seed: int,
              confidence: float = 0.95) -> tuple[float, float, float]:
    """(point, lo, hi) of `stat`: a function of an (R, n_items) weight matrix returning (R,) values.

    Each resample draws the G clusters with replacement (`benchmark.io.stats.resampled`, the project's one bootstrap).
    The interval is the percentile interval of the finite resampled values; NaN when fewer than half of the
    resamples are finite (a statistic that is mostly undefined under resampling has no meaningful interval)."""
    n = len(clusters)
    point = float(stat(np.ones((1, n)))[0]) if n else float("nan")
    if n == 0 or n_resamples < 2:
        return point, float("nan"), float("nan")
    lo, hi = percentile_interval(resampled(stat, clusters, n_resamples, seed), confidence)
    return point, float(lo), float(hi)


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


# --------------------------------------------------------------------------------------- ground-truth selection
def selection_credit(scores: np.ndarray, higher_is_better: bool) -> tuple[np.ndarray, np.ndarray]:
    """(credit (n, k), valid (n,)) for candidate scores (n queries x k candidates).

    A query is valid when every candidate has a finite score. The best-scored candidate gets credit 1; when several
    tie for best, each gets 1/(number tied), so every valid row sums to 1 (ties split the preference, they never
    count as a win of the first column)."""
    s = np.asarray(scores, dtype=np.float64)
    s = s if higher_is_better else -s
    valid = np.isfinite(s).all(axis=1)
    credit = np.zeros_like(s)
    if valid.any():
        sv = s[valid]
        best = sv == sv.max(axis=1, keepdims=True)
        credit[valid] = best / best.sum(axis=1, keepdims=True)
    return credit, valid


# ------------------------------------------------------------------------------------------------- pair outcomes
def metric_outcome(score_a: np.ndarray, score_b: np.ndarray, higher_is_better: bool) -> np.ndarray:
    """+1 when the metric prefers a, -1 for b, 0 for a tie (equal scores), NaN when either score is undefined."""
    a, b = np.asarray(score_a, dtype=np.float64), np.asarray(score_b, dtype=np.float64)
    d = (a - b) if higher_is_better else (b - a)
    return np.where(np.isfinite(d), np.sign(d), np.nan)


def agreement(human: np.ndarray, metric: np.ndarray) -> np.ndarray:
    """Per pair: 1 when the metric prefers the image people preferred, 0 when the other, 0.5 when the metric ties.
    Pairs people tied on must be dropped before (they have no preferred image)."""
    h, m = np.asarray(human, dtype=np.float64), np.asarray(metric, dtype=np.float64)
    return np.where(m == 0, 0.5, (m == h).astype(np.float64))


def weighted_mean(values: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """stat(w) = sum w x / sum w, for `bootstrap`."""
    x = np.asarray(values, dtype=np.float64)
    return lambda w: _ratio(w @ x, w.sum(axis=1))


# ----------------------------------------------------------------------------------------------------- win rates
@dataclass(frozen=True)
class PairIndex:
    """Editor incidence of pairwise comparisons: which editor is side a / side b of each pair."""

    editors: tuple[str, ...]
    a: np.ndarray  # (n_pairs, n_editors) one-hot
    b: np.ndarray

    @classmethod
    def build(cls, editor_a: Sequence[str], editor_b: Sequence[str]) -> PairIndex:
        editors = tuple(sorted(set(editor_a) | set(editor_b)))
        col = {e: i for i, e in enumerate(editors)}
        a = np.zeros((len(editor_a), len(editors)))
        b = np.zeros_like(a)
        a[np.arange(len(editor_a)), [col[e] for e in editor_a]] = 1.0
        b[np.arange(len(editor_b)), [col[e] for e in editor_b]] = 1.0
        return cls(editors, a, b)


def win_rates(outcome: np.ndarray, index: PairIndex, w: np.ndarray) -> np.ndarray:
    """(R, n_editors) win rates under item weights `w` (R, n_pairs): wins / comparisons of each editor, a tie
    counting half a win for both sides. Editors without a comparison get NaN."""
    o = np.asarray(outcome, dtype=np.float64)
    win_a, win_b = (1 + o) / 2, (1 - o) / 2
    wins = (w * win_a) @ index.a + (w * win_b) @ index.b
    comps = w @ (index.a + index.b)
    return _ratio(wins, comps)


def rowwise_pearson(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pearson's r of each row pair of x, y (R, M), over the columns finite in both; NaN when either is constant."""
    x, y = np.atleast_2d(x).astype(np.float64), np.atleast_2d(y).astype(np.float64)
    ok = np.isfinite(x) & np.isfinite(y)
    n = ok.sum(axis=1)
    xs, ys = np.where(ok, x, 0.0), np.where(ok, y, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mx, my = xs.sum(1) / n, ys.sum(1) / n
        dx, dy = np.where(ok, x - mx[:, None], 0.0), np.where(ok, y - my[:, None], 0.0)
        sxy, sxx, syy = (dx * dy).sum(1), (dx * dx).sum(1), (dy * dy).sum(1)
        den = np.sqrt(sxx * syy)
        r = np.where((den > 1e-15) & (n >= 2), sxy / np.where(den > 0, den, 1.0), np.nan)
    return np.clip(r, -1.0, 1.0)


def correlations(u: np.ndarray, v: np.ndarray) -> dict[str, float]:
    """Pearson, Spearman and Kendall (tau-b) between two vectors over the entries finite in both (scipy);
    NaN with fewer than 3 entries or a constant vector."""
    from scipy import stats

    u, v = np.asarray(u, dtype=np.float64), np.asarray(v, dtype=np.float64)
    ok = np.isfinite(u) & np.isfinite(v)
    u, v = u[ok], v[ok]
    nan = {"pearson": float("nan"), "spearman": float("nan"), "kendall": float("nan")}
    if len(u) < 3 or np.ptp(u) == 0 or np.ptp(v) == 0:
        return nan
    return {"pearson": float(stats.pearsonr(u, v).statistic), "spearman": float(stats.spearmanr(u, v).statistic),
            "kendall": float(stats.kendalltau(u, v).statistic)}


def correlation_stat(kind: str, human: np.ndarray, metric: np.ndarray,
                     index: PairIndex) -> Callable[[np.ndarray], np.ndarray]:
    """stat(w) = correlation `kind` between human and metric win rates of the editors, for `bootstrap`."""

    def stat(w: np.ndarray) -> np.ndarray:
        u, v = win_rates(human, index, w), win_rates(metric, index, w)
        return ROWWISE[kind](u, v)

    return stat


def _ranks(x: np.ndarray) -> np.ndarray:
    """Average ranks of each row's finite entries (NaN stays NaN)."""
    from scipy.stats import rankdata

    return rankdata(np.where(np.isfinite(x), x, np.nan), axis=1, nan_policy="omit")


def rowwise_spearman(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman's rho of each row pair: Pearson's r of average ranks (scipy's definition), finite entries only."""
    x, y = np.atleast_2d(x), np.atleast_2d(y)
    both = np.isfinite(x) & np.isfinite(y)
    return rowwise_pearson(_ranks(np.where(both, x, np.nan)), _ranks(np.where(both, y, np.nan)))


def rowwise_kendall(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Kendall's tau-b of each row pair over the entries finite in both (scipy's default variant):
    sum sx*sy / sqrt(sum sx^2 * sum sy^2) over pairs of entries, s = sign of the difference."""
    x, y = np.atleast_2d(x).astype(np.float64), np.atleast_2d(y).astype(np.float64)
    both = np.isfinite(x) & np.isfinite(y)
    sx = np.sign(x[:, :, None] - x[:, None, :])
    sy = np.sign(y[:, :, None] - y[:, None, :])
    mask = both[:, :, None] & both[:, None, :]
    sx, sy = np.where(mask, sx, 0.0), np.where(mask, sy, 0.0)
    num = (sx * sy).sum(axis=(1, 2))
    den = np.sqrt((sx * sx).sum(axis=(1, 2)) * (sy * sy).sum(axis=(1, 2)))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((den > 0) & (both.sum(axis=1) >= 3), num / np.where(den > 0, den, 1.0), np.nan)


ROWWISE: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "pearson": rowwise_pearson, "spearman": rowwise_spearman, "kendall": rowwise_kendall}
