"""Paired statistics for comparing two editors on the same queries (used by `benchmark.commands.compare`).

Every function takes per-query paired differences `d = a - b` (one value per shared query, in query-id order) or
counts, and is deterministic given its seed. The resampling unit is the query: a resample draws queries with
replacement and each query brings its A and B values along (and, in `bootstrap_mean_ci`, every column of `d`).

`resampled` is the project's one bootstrap: the meta-evaluation's cluster bootstrap (`benchmark.commands.metaeval.stats`)
runs on it too.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import numpy as np

CHUNK_ELEMENTS = 2_000_000  # resample indices drawn at once (bounds memory at about 50 MB)
Z95 = 1.959963984540054  # standard normal quantile for a 95% two-sided interval


def _chunks(n: int, n_resamples: int):
    """(start, size) blocks of resamples so that size * n stays under CHUNK_ELEMENTS."""
    step = max(1, CHUNK_ELEMENTS // max(n, 1))
    for start in range(0, n_resamples, step):
        yield start, min(step, n_resamples - start)


def resampled(stat: Callable[[np.ndarray], np.ndarray], clusters: np.ndarray, n_resamples: int, seed: int
              ) -> np.ndarray:
    """`stat` over `n_resamples` cluster-bootstrap resamples: the project's one bootstrap.

    `clusters` gives each item's cluster index (0..G-1; `np.arange(n)` resamples the items themselves). Each
    resample draws G clusters with replacement and hands `stat` the item weights, an (R, n_items) matrix whose entry
    is how often the item's cluster was drawn; `stat` returns (R,) or (R, k) values. Deterministic given `seed`."""
    clusters = np.asarray(clusters)
    n, g = len(clusters), int(clusters.max()) + 1
    rng = np.random.default_rng(seed)
    dtype = np.int32 if g < 2**31 else np.int64
    itself = g == n and bool(np.array_equal(clusters, np.arange(n)))  # each item its own cluster: no gather
    values: np.ndarray | None = None
    for start, size in _chunks(max(n, g), n_resamples):
        idx = rng.integers(0, g, size=(size, g), dtype=dtype)
        # how often each cluster is drawn in each resample (row by row: a 400 KB counter stays in cache at 50k
        # clusters)
        counts = np.empty((size, g))
        for r in range(size):
            counts[r] = np.bincount(idx[r], minlength=g)
        out = np.asarray(stat(counts if itself else counts[:, clusters]), dtype=np.float64)
        if values is None:
            values = np.empty((n_resamples, *out.shape[1:]))
        values[start:start + size] = out
    assert values is not None
    return values


def percentile_interval(values: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval of resampled `values` (R,) or (R, k), per column over its finite values; NaN for a
    column where fewer than half of the resamples are finite (a statistic mostly undefined under resampling has
    no meaningful interval)."""
    v = np.asarray(values, dtype=np.float64)
    tail = (1.0 - level) / 2
    if np.isfinite(v).all():
        low, high = np.quantile(v, [tail, 1.0 - tail], axis=0)
        return low, high
    cols = v.reshape(len(v), -1)
    low, high = np.full(cols.shape[1], np.nan), np.full(cols.shape[1], np.nan)
    for j in range(cols.shape[1]):
        finite = cols[np.isfinite(cols[:, j]), j]
        if len(finite) >= len(v) / 2:
            low[j], high[j] = np.quantile(finite, [tail, 1.0 - tail])
    return low.reshape(v.shape[1:]), high.reshape(v.shape[1:])


def bootstrap_mean_ci(d: np.ndarray, n_resamples: int, seed: int, level: float = 0.95
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap interval of the mean of each column of `d` (n queries x k columns, all finite).

    One set of resampled query indices serves every column, so columns resample the same queries jointly. Returns
    (low, high) arrays of length k; NaN when n < 2 or n_resamples < 2."""
    x = np.asarray(d, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    n, k = x.shape
    if n < 2 or n_resamples < 2:
        return np.full(k, np.nan), np.full(k, np.nan)
    return percentile_interval(resampled(lambda w: (w @ x) / n, np.arange(n), n_resamples, seed), level)


def wilcoxon_p(d: np.ndarray) -> float:
    """Two-sided Wilcoxon signed-rank p-value of the paired differences `d` (scipy; zero differences dropped, as
    Wilcoxon's original method). 1.0 when every difference is zero (no evidence of any difference); NaN for no data."""
    from scipy.stats import wilcoxon

    x = np.asarray(d, dtype=np.float64)
    if len(x) == 0:
        return math.nan
    if not np.any(x != 0):
        return 1.0
    with warnings.catch_warnings():  # small samples: scipy warns that the normal approximation is rough
        warnings.simplefilter("ignore")
        return float(wilcoxon(x, zero_method="wilcox", alternative="two-sided").pvalue)


def sign_flip_p(d: np.ndarray, n_resamples: int, seed: int) -> float:
    """Two-sided paired permutation (sign-flip) p-value for the mean of `d`: under H0 each query's difference is
    as likely to have either sign. Monte Carlo with `n_resamples` flips, p = (1 + #{|mean*| >= |mean|}) / (1 + N),
    never 0. 1.0 when every difference is zero; NaN for no data."""
    x = np.asarray(d, dtype=np.float64)
    n = len(x)
    if n == 0:
        return math.nan
    if not np.any(x != 0):
        return 1.0
    observed = abs(x.mean())
    rng = np.random.default_rng(seed)
    hits = 0
    tol = 1e-12 * max(1.0, float(np.abs(x).max()))  # equal means up to rounding count as at least as extreme
    for _, size in _chunks(n, n_resamples):
        signs = rng.integers(0, 2, size=(size, n), dtype=np.int8) * 2 - 1
        hits += int((np.abs((signs * x).mean(axis=1)) >= observed - tol).sum())
    return (1 + hits) / (1 + n_resamples)


def wilson_interval(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a proportion of k successes in n trials ((nan, nan) when n == 0)."""
    if n <= 0:
        return math.nan, math.nan
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def holm(p_values: np.ndarray) -> np.ndarray:
    """Holm-Bonferroni adjusted p-values of one family (NaN entries are not tests: they stay NaN and do not count)."""
    p = np.asarray(p_values, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    tested = np.flatnonzero(np.isfinite(p))
    m = len(tested)
    if not m:
        return out
    order = tested[np.argsort(p[tested], kind="stable")]
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))  # step-down: adjusted values never decrease
        out[i] = running
    return out
