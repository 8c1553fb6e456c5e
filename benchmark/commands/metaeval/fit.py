"""Weight fitting as HATIE did (Sec. 3.4): a grid search over convex weights of the criteria, step 0.01, for the
weights whose per-editor win rates correlate best (Pearson) with people's on the training pairs.

Per image, the combined score is the weighted mean of the criteria it defines, normalised over the weights of those
criteria (HATIE's rule for queries whose type leaves a criterion undefined); an image with no weighted criterion
counts as a tie in its pairs. Among weight vectors that reach the best correlation (within 1e-12), the one closest
(L1) to the centroid of that plateau is returned, then the first in grid order: a documented, deterministic choice.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from benchmark.commands.metaeval.scoring import composite_scores
from benchmark.commands.metaeval.stats import PairIndex, rowwise_pearson, win_rates

MAX_GRID = 5_000_000  # weight vectors; beyond this, ask for a larger step or fewer criteria
TIE_TOL = 1e-12


class FitError(ValueError):
    """The fit cannot run (too large a grid, too few editors); the message says why and what to change."""


@dataclass(frozen=True)
class Fit:
    weights: dict[str, float]
    pearson: float  # on the training pairs
    n_grid: int
    n_best: int  # grid points reaching the best correlation


def simplex_grid(k: int, step: float) -> np.ndarray:
    """Every vector of k non-negative multiples of `step` summing to 1, as (n, k), in lexicographic order."""
    n = round(1 / step)
    if k < 1 or n < 1 or not math.isclose(n * step, 1.0, abs_tol=1e-9):
        raise FitError(f"grid step {step}: 1/step must be a whole number")
    size = math.comb(n + k - 1, k - 1)
    if size > MAX_GRID:
        raise FitError(f"{size:,} weight vectors for {k} criteria at step {step}: over {MAX_GRID:,}; use a larger "
                       "step (metaeval.fit.step=0.02) or fewer criteria")
    rows = []
    for bars in itertools.combinations(range(n + k - 1), k - 1):  # stars and bars
        edges = (-1, *bars, n + k - 1)
        rows.append([edges[i + 1] - edges[i] - 1 for i in range(k)])
    return np.asarray(rows, dtype=np.float64) / n


def grid_search(x: np.ndarray, ia: np.ndarray, ib: np.ndarray, index: PairIndex, human: np.ndarray,
                criteria: Sequence[str], step: float = 0.01) -> Fit:
    """Best convex weights of the columns of `x` (n_images, k criteria) for pairs (image ia[i] vs ib[i]) judged
    `human` (+1 / -1 / 0), by Pearson between people's and the combined score's per-editor win rates."""
    if len(index.editors) < 3:
        raise FitError(f"{len(index.editors)} editors: a correlation of win rates needs at least 3")
    grid = simplex_grid(x.shape[1], step)
    u = win_rates(human, index, np.ones((1, len(ia))))
    present = np.isfinite(x)
    xf = np.where(present, x, 0.0)
    # Both images of a pair are edits of one query, so they almost always define the same criteria: then the sign
    # of the difference of normalised means is the sign of the weighted difference (one matrix product), and the
    # pair is a tie when no weighted criterion is defined. Other pairs take the general path.
    same = (present[ia] == present[ib]).all(axis=1)
    patterns, group = np.unique(present[ia[same]], axis=0, return_inverse=True)
    group = group.reshape(-1)
    order = np.argsort(group, kind="stable")  # pairs grouped by the criteria they define
    dx = (xf[ia[same]] - xf[ib[same]])[order]
    bounds = np.searchsorted(group[order], np.arange(len(patterns) + 1))
    ia_o, ib_o = ia[~same], ib[~same]
    ab = np.concatenate([(index.a[same] - index.b[same])[order], index.a[~same] - index.b[~same]]).astype(np.float32)
    comps = (index.a + index.b).sum(axis=0)
    chunk = max(1, int(4e6 // max(1, len(ia))))
    r = np.empty(len(grid))
    for start in range(0, len(grid), chunk):
        w = grid[start:start + chunk]
        o_same = np.sign(dx @ w.T)
        for g, pat in enumerate(patterns):  # no weighted criterion defined: the pair is a tie
            o_same[bounds[g]:bounds[g + 1]] *= (w @ pat.astype(np.float64) > 0)[None, :]
        if len(ia_o):
            s_img = composite_scores(x, w)
            d = s_img[ia_o] - s_img[ib_o]
            o = np.concatenate([o_same, np.where(np.isfinite(d), np.sign(d), 0.0)])
        else:
            o = o_same
        # wins of an editor = (comparisons + sum over its pairs of +-outcome) / 2
        v = 0.5 + 0.5 * (o.astype(np.float32).T @ ab).astype(np.float64) / np.where(comps > 0, comps, np.nan)
        r[start:start + chunk] = rowwise_pearson(np.broadcast_to(u, v.shape), v)
    r = np.where(np.isfinite(r), r, -np.inf)
    best = r.max()
    if not np.isfinite(best):
        raise FitError("no weight vector gives a defined correlation (every metric win rate constant?)")
    cand = np.flatnonzero(r >= best - TIE_TOL)
    centroid = grid[cand].mean(axis=0)
    pick = cand[np.argmin(np.abs(grid[cand] - centroid).sum(axis=1))]
    return Fit({c: float(round(v, 10)) for c, v in zip(criteria, grid[pick], strict=True)}, float(best), len(grid),
               len(cand))

