"""Fréchet distance between feature sets (FID when the features are Inception pool3), and HATIE's image quality.

A feature set enters the distance only through its sufficient statistics (`FeatureStats`: n, the mean and the
sum of outer products about it, float64), which merge: shards, score parts or blocks of rows combine by `+`, and
the mean and covariance of the union follow. IQ's error resamples the edited set with
replacement; a resample is a vector of counts over the rows, so its statistics are count-weighted sums of the same
rows (`FeatureStats.weighted`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from benchmark.metrics.hatie.weights import IQ_RESAMPLES, image_quality

STATS_BLOCK = 1024  # rows converted to float64 at once


@dataclass(frozen=True)
class FeatureStats:
    """Sufficient statistics of a set of feature rows, float64: the count, the mean and the scatter matrix (the sum
    of outer products of the rows about their mean). Same information as (n, sum, sum of outer products), but
    merging keeps the precision of a two-pass covariance: with raw sums, `outer - n mu mu^T` cancels the digits a
    small FID lives in (a rank-deficient or near-identical pair of sets)."""

    n: int
    mean: np.ndarray     # (d,)
    scatter: np.ndarray  # (d, d): sum_i (x_i - mean)(x_i - mean)^T

    @classmethod
    def of(cls, rows: np.ndarray) -> FeatureStats:
        """Statistics of the rows of `rows` (n x d), in blocks of STATS_BLOCK rows merged in the given order
        (memory stays at one block in float64; float32 products are exact in float64)."""
        return cls.weighted(rows, None)

    @classmethod
    def weighted(cls, rows: np.ndarray, counts: np.ndarray | None) -> FeatureStats:
        """Statistics of the multiset that holds row i `counts[i]` times (a bootstrap resample; None = once each).
        Rows with count 0 are skipped."""
        rows = np.asarray(rows)
        if rows.ndim != 2:
            raise ValueError(f"feature rows must be a 2-d array, got shape {rows.shape}")
        out = cls.empty(rows.shape[1])
        for start in range(0, len(rows), STATS_BLOCK):
            x = np.asarray(rows[start : start + STATS_BLOCK], dtype=np.float64)
            if counts is None:  # the two passes of `np.cov`, in its order of operations
                mean = x.mean(axis=0)
                xc = (x - mean).T
                out = out + cls(len(x), mean, np.dot(xc, xc.T))
                continue
            c = np.asarray(counts[start : start + STATS_BLOCK], np.float64)
            keep = c > 0
            x, c = x[keep], c[keep]
            n = float(c.sum())
            if n == 0:
                continue
            mean = (c @ x) / n
            xc = x - mean
            out = out + cls(int(n), mean, xc.T @ (c[:, None] * xc))
        return out

    @classmethod
    def empty(cls, d: int) -> FeatureStats:
        return cls(0, np.zeros(d), np.zeros((d, d)))

    @classmethod
    def merge(cls, parts: Iterable[FeatureStats]) -> FeatureStats | None:
        """The statistics of the union of `parts`, merged in the given order (None when there is none)."""
        out: FeatureStats | None = None
        for p in parts:
            out = p if out is None else out + p
        return out

    def __add__(self, other: FeatureStats) -> FeatureStats:
        """The union's statistics (Chan, Golub and LeVeque's pairwise update)."""
        if self.mean.shape != other.mean.shape:
            raise ValueError(f"cannot merge feature statistics of dimension {self.mean.shape} and {other.mean.shape}")
        if other.n == 0:
            return self
        if self.n == 0:
            return other
        n = self.n + other.n
        delta = other.mean - self.mean
        mean = self.mean + delta * (other.n / n)
        scatter = self.scatter + other.scatter + np.outer(delta, delta) * (self.n * other.n / n)
        return FeatureStats(n, mean, scatter)

    def mean_cov(self) -> tuple[np.ndarray, np.ndarray]:
        """Mean and unbiased covariance (n - 1 in the denominator, as `np.cov`)."""
        if self.n < 2:
            raise ValueError("a covariance needs at least 2 rows")
        return self.mean, self.scatter * (1.0 / (self.n - 1))


def _sqrt_psd(s: np.ndarray) -> np.ndarray:
    w, v = np.linalg.eigh(s)
    return (v * np.sqrt(np.clip(w, 0, None))) @ v.T


def frechet_distance(mu1: np.ndarray, s1: np.ndarray, mu2: np.ndarray, s2: np.ndarray,
                     sqrt_s1: np.ndarray | None = None) -> float:
    """||mu1 - mu2||^2 + tr(s1) + tr(s2) - 2 tr sqrt(s1 s2).

    tr sqrt(s1 s2) = sum sqrt(eig(sqrt(s1) s2 sqrt(s1))): a symmetric PSD eigenproblem, exact for PSD
    covariances, stabler and several times faster than a general `sqrtm` (pass `sqrt_s1` to reuse it).
    """
    r1 = _sqrt_psd(s1) if sqrt_s1 is None else sqrt_s1
    m = r1 @ s2 @ r1
    tr = float(np.sqrt(np.clip(np.linalg.eigvalsh((m + m.T) / 2), 0, None)).sum())
    d = mu1 - mu2
    return max(0.0, float(d @ d + np.trace(s1) + np.trace(s2) - 2 * tr))


def fid_from_stats(reference: FeatureStats, generated: FeatureStats) -> float:
    """FID between two feature sets given by their statistics (NaN when either has fewer than 2 rows)."""
    if reference.n < 2 or generated.n < 2:
        return math.nan
    return frechet_distance(*reference.mean_cov(), *generated.mean_cov())


def fid(reference: np.ndarray, generated: np.ndarray) -> float:
    """FID between two sets of feature rows."""
    if len(reference) < 2 or len(generated) < 2:
        return math.nan
    return fid_from_stats(FeatureStats.of(reference), FeatureStats.of(generated))


def image_quality_from_stats(reference: FeatureStats, generated: FeatureStats, generated_rows: np.ndarray | None,
                             *, resamples: int = IQ_RESAMPLES, seed: int = 0) -> dict[str, float]:
    """FID and IQ = 1 - tanh(FID / 25) from merged statistics; IQ's error (HATIE): the std of IQ over `resamples`
    resamples with replacement of the edited set, which needs its rows (`generated_rows`, in a fixed order: the
    caller sorts them by query id) because a resample's statistics are count-weighted sums over them.
    Without rows (or `resamples` < 2) the error is NaN."""
    if reference.n < 2 or generated.n < 2:
        return {"FID": math.nan, "IQ": math.nan, "IQ_se": math.nan}
    mu1, s1 = reference.mean_cov()
    r1 = _sqrt_psd(s1)
    value = frechet_distance(mu1, s1, *generated.mean_cov(), r1)
    se = math.nan
    if generated_rows is not None and resamples > 1:
        if len(generated_rows) != generated.n:
            raise ValueError(f"{len(generated_rows)} rows given for a set of {generated.n}")
        rng = np.random.default_rng(seed)
        n = len(generated_rows)
        iqs = []
        for _ in range(resamples):
            counts = np.bincount(rng.integers(0, n, n), minlength=n)
            m, s = FeatureStats.weighted(generated_rows, counts).mean_cov()
            iqs.append(image_quality(frechet_distance(mu1, s1, m, s, r1)))
        se = float(np.std(iqs))
    return {"FID": value, "IQ": image_quality(value), "IQ_se": se}


def image_quality_with_error(reference: np.ndarray, generated: np.ndarray, *, resamples: int = IQ_RESAMPLES,
                             seed: int = 0) -> dict[str, float]:
    """`image_quality_from_stats` for two sets of feature rows."""
    if len(reference) < 2 or len(generated) < 2:
        return {"FID": math.nan, "IQ": math.nan, "IQ_se": math.nan}
    return image_quality_from_stats(FeatureStats.of(reference), FeatureStats.of(generated), generated,
                                    resamples=resamples, seed=seed)
