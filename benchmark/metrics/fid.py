"""Fréchet distance between feature sets (FID when the features are Inception pool3), and HATIE's image quality.

Features are kept per image (rows of the score parts), so shards merge by concatenation and the IQ error can be
bootstrapped over the edited set.
"""

from __future__ import annotations

import math

import numpy as np

from benchmark.metrics.hatie.weights import IQ_RESAMPLES, image_quality


def _stats(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(x, dtype=np.float64)
    return x.mean(axis=0), np.cov(x, rowvar=False)


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


def fid(reference: np.ndarray, generated: np.ndarray) -> float:
    if len(reference) < 2 or len(generated) < 2:
        return math.nan
    mu1, s1 = _stats(reference)
    mu2, s2 = _stats(generated)
    return frechet_distance(mu1, s1, mu2, s2)


def image_quality_with_error(reference: np.ndarray, generated: np.ndarray, *, resamples: int = IQ_RESAMPLES,
                             seed: int = 0) -> dict[str, float]:
    """FID, IQ = 1 - tanh(FID / 25), and IQ's error: std over `resamples` resamples of the generated set (HATIE)."""
    if len(reference) < 2 or len(generated) < 2:
        return {"FID": math.nan, "IQ": math.nan, "IQ_se": math.nan}
    mu1, s1 = _stats(reference)
    r1 = _sqrt_psd(s1)
    mu2, s2 = _stats(generated)
    value = frechet_distance(mu1, s1, mu2, s2, r1)
    rng = np.random.default_rng(seed)
    iqs = []
    for _ in range(resamples):
        g = generated[rng.integers(0, len(generated), len(generated))]
        m, s = _stats(g)
        iqs.append(image_quality(frechet_distance(mu1, s1, m, s, r1)))
    return {"FID": value, "IQ": image_quality(value), "IQ_se": float(np.std(iqs)) if resamples > 1 else math.nan}
