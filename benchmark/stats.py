"""Paired statistics for comparing two editors on the same queries (used by `benchmark.compare`).

Every function takes per-query paired differences `d = a - b` (one value per shared query, in query-id order) or
counts, and is deterministic given its seed. The resampling unit is the query: a resample draws queries with
replacement and each query brings its A and B values along (and, in `bootstrap_mean_ci`, every column of `d`).
"""

from __future__ import annotations

import math
import warnings

import numpy as np

CHUNK_ELEMENTS = 2_000_000  # resample indices drawn at once (bounds memory at about 50 MB)
Z95 = 1.959963984540054  # standard normal quantile for a 95% two-sided interval


def _chunks(n: int, n_resamples: int):
    """(start, size) blocks of resamples so that size * n stays under CHUNK_ELEMENTS."""
    step = max(1, CHUNK_ELEMENTS // max(n, 1))
    for start in range(0, n_resamples, step):
        yield start, min(step, n_resamples - start)


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
    rng = np.random.default_rng(seed)
    means = np.empty((n_resamples, k))
    dtype = np.int32 if n < 2**31 else np.int64
    for start, size in _chunks(n, n_resamples):
        idx = rng.integers(0, n, size=(size, n), dtype=dtype)
        # how often each query is drawn in each resample (row by row: a 400 KB counter stays in cache at 50k
        # queries); the means of every column are then one matrix product
        counts = np.empty((size, n))
        for r in range(size):
            counts[r] = np.bincount(idx[r], minlength=n)
        means[start:start + size] = (counts @ x) / n
    tail = (1.0 - level) / 2
    low, high = np.quantile(means, [tail, 1.0 - tail], axis=0)
    return low, high


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
