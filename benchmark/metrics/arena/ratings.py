"""Bradley-Terry ratings of battles, as GenArena fits them (genarena/bt_elo.py at v0.1.2; docs/arena.md).

A battle is (model_a, model_b, outcome) with outcome model_a, model_b or tie. The points matrix W counts a win as 2
points of the winner over the loser and a tie as 1 point each way. The strengths are fitted by the MM iteration
(Hunter 2004): each model's strength is its points over the sum, over its opponents, of the pair's points divided
by the sum of the two strengths; at most `max_iters` sweeps, stopping once no strength moves more than `tol`.

- Joint fit: strengths p summing to 1, every model updated from the previous sweep's values, then renormalised; the
  Elo of p is 400 log10(p / mean p) + 1000. A model with no points (it lost every battle) keeps p = 0, and GenArena
  rates it 1000 (not minus infinity): kept, and named in docs/arena.md.
- Anchored fit (`fixed`): the anchors keep their Elo exactly; their strengths are 10^((Elo - 1000) / 400), the free
  models start at 1 and are updated in name order from the values of this sweep (Gauss-Seidel), without
  renormalisation; a group of free models with no battle against an anchor is scaled to mean strength 1.
- Bootstrap: the battles are counted per distinct (model_a, model_b, outcome), in order of first appearance; each
  resample draws the same total from those counts (multinomial), is fitted as above, and the rating is the median
  resample (index n // 2 of the sorted values), the interval its [int(0.025 n), min(int(0.975 n), n - 1)] entries:
  GenArena's table shows that median, not the fit of all battles (`point` keeps the latter). The draws come from
  numpy's generator seeded with `seed`; `bootstrap_from_counts` takes drawn counts, so the two implementations
  can be compared on the same draws.

The loops run in the same order as GenArena's (models sorted by name), so that the same battles give the same
floating-point ratings.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from benchmark.metrics.arena.protocol import MODEL_A, MODEL_B

SCALE, BASE, INIT = 400.0, 10.0, 1000.0
Battle = tuple[str, str, str]


def _points(counts: Iterable[tuple[Battle, int]], models: list[str]) -> dict[str, dict[str, float]]:
    W: dict[str, dict[str, float]] = {m: {o: 0.0 for o in models if o != m} for m in models}
    for (a, b, outcome), n in counts:
        if not a or not b or a == b or a not in W or b not in W or n == 0:
            continue
        if outcome == MODEL_A:
            W[a][b] += 2.0 * n
        elif outcome == MODEL_B:
            W[b][a] += 2.0 * n
        else:
            W[a][b] += 1.0 * n
            W[b][a] += 1.0 * n
    return W


def _models(counts: Sequence[tuple[Battle, int]], models: Iterable[str] | None) -> list[str]:
    found = set(models or ())
    for (a, b, _), _n in counts:
        found.update(x for x in (a, b) if x)
    return sorted(found)


def fit(battles: Sequence[Battle] | Sequence[tuple[Battle, int]], *, models: Iterable[str] | None = None,
        fixed: dict[str, float] | None = None, max_iters: int = 100, tol: float = 1e-6,
        counted: bool = False) -> dict[str, float]:
    """Elo ratings of the battles' models (and of `models`, battles or not). `fixed`: anchors' Elo, kept exactly
    (those not among the models are ignored). `counted`: `battles` are (battle, count) pairs."""
    counts: list[tuple[Battle, int]] = list(battles) if counted else [(b, 1) for b in battles]  # type: ignore[misc]
    names = _models(counts, models)
    if not names:
        return {}
    if len(names) == 1:
        return {names[0]: INIT}
    anchors = {m: float(v) for m, v in (fixed or {}).items() if m in set(names)}
    W = _points(counts, names)
    log_base = math.log(BASE)
    if anchors:
        return _anchored(W, names, anchors, max_iters, tol, log_base)
    p = {m: 1.0 / len(names) for m in names}
    for _ in range(max_iters):
        new: dict[str, float] = {}
        for i in names:
            num = den = 0.0
            for j in names:
                if i == j:
                    continue
                n_ij = W[i][j] + W[j][i]
                if n_ij <= 0:
                    continue
                num += W[i][j]
                den += n_ij / (p[i] + p[j])
            new[i] = num / den if den > 0 else p[i]
        total = sum(new.values())
        if total > 0:
            new = {k: v / total for k, v in new.items()}
        moved = max(abs(new[m] - p[m]) for m in names)
        p = new
        if moved <= tol:
            break
    mean = sum(p.values()) / len(names)
    if mean <= 0:
        return {m: INIT for m in names}
    return {m: SCALE * (math.log(p[m] / mean) / log_base) + INIT if p[m] > 0 else INIT for m in names}


def _anchored(W: dict[str, dict[str, float]], names: list[str], anchors: dict[str, float], max_iters: int,
              tol: float, log_base: float) -> dict[str, float]:
    s = {m: BASE ** ((anchors[m] - INIT) / SCALE) if m in anchors else 1.0 for m in names}
    free = [m for m in names if m not in anchors]
    for _ in range(max_iters):
        moved = 0.0
        for i in free:
            num = den = 0.0
            for j in names:
                if i == j:
                    continue
                n_ij = W[i][j] + W[j][i]
                if n_ij <= 0:
                    continue
                num += W[i][j]
                den += n_ij / (s[i] + s[j])
            value = num / den if den > 0 else s[i]
            moved = max(moved, abs(value - s[i]))
            s[i] = value
        if moved <= tol:
            break
    # free models with no path to an anchor: their level is not identified; scaled to mean strength 1
    seen: set[str] = set()
    for start in free:
        if start in seen:
            continue
        seen.add(start)
        group, stack, anchored = [], [start], False
        while stack:
            x = stack.pop()
            group.append(x)
            for y in names:
                if y == x or W[x][y] + W[y][x] <= 0:
                    continue
                if y in anchors:
                    anchored = True
                elif y not in seen:
                    seen.add(y)
                    stack.append(y)
        if not anchored:
            mean = sum(s[x] for x in group) / len(group)
            if mean > 0:
                for x in group:
                    s[x] = s[x] / mean
    return {m: anchors[m] if m in anchors else (SCALE * (math.log(s[m]) / log_base) + INIT if s[m] > 0 else INIT)
            for m in names}


@dataclass
class Bootstrap:
    """Ratings with 95% bootstrap intervals (see the module): `rating` the median resample, `point` the fit of all
    battles."""

    rating: dict[str, float]
    low: dict[str, float]
    high: dict[str, float]
    std: dict[str, float]
    point: dict[str, float]
    n_battles: int
    n_resamples: int
    resamples: list[dict[str, float]] = field(default_factory=list, repr=False)

    def width(self, model: str) -> float:
        return self.high[model] - self.low[model]


def outcome_counts(battles: Sequence[Battle]) -> tuple[list[Battle], list[int]]:
    """The distinct battles in order of first appearance and their counts (what the bootstrap resamples)."""
    c = Counter(battles)
    return list(c), list(c.values())


def draw_counts(counts: Sequence[int], n_resamples: int, seed: int) -> list[list[int]]:
    """`n_resamples` multinomial draws of sum(counts) battles with probabilities counts / sum (numpy, seeded)."""
    import numpy as np

    total = sum(counts)
    rng = np.random.default_rng(seed)
    probs = np.asarray(counts, dtype=float) / total
    return [rng.multinomial(total, probs).tolist() for _ in range(n_resamples)]


def bootstrap(battles: Sequence[Battle], *, n_resamples: int = 100, seed: int = 0, models: Iterable[str] | None = None,
              fixed: dict[str, float] | None = None) -> Bootstrap:
    """Ratings and 95% intervals of `battles` by `n_resamples` seeded multinomial resamples (see the module)."""
    unique, counts = outcome_counts(battles)
    draws = draw_counts(counts, n_resamples, seed) if counts else []
    return bootstrap_from_counts(unique, counts, draws, models=models, fixed=fixed)


def bootstrap_from_counts(unique: Sequence[Battle], counts: Sequence[int], draws: Sequence[Sequence[int]], *,
                          models: Iterable[str] | None = None, fixed: dict[str, float] | None = None) -> Bootstrap:
    """`bootstrap` on given draws (each: a count per distinct battle, in `unique`'s order)."""
    models = list(models) if models is not None else None
    n_battles = int(sum(counts))
    if n_battles == 0:
        return Bootstrap({}, {}, {}, {}, {}, 0, len(draws))
    point = fit(list(zip(unique, counts, strict=True)), models=models, fixed=fixed, counted=True)
    names = sorted(point)
    samples = [fit(list(zip(unique, d, strict=True)), models=models, fixed=fixed, counted=True) for d in draws]
    rating, low, high, std = {}, {}, {}, {}
    for m in names:
        values = sorted(s.get(m, INIT) for s in samples)
        n = len(values)
        if n == 0:
            rating[m] = low[m] = high[m] = point[m]
            std[m] = 0.0
            continue
        low[m], high[m] = values[int(n * 0.025)], values[min(int(n * 0.975), n - 1)]
        rating[m] = values[n // 2]
        mean = sum(values) / n
        std[m] = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return Bootstrap(rating, low, high, std, point, n_battles, len(draws), samples)


def pair_tables(battles: Sequence[Battle], failed: Sequence[int] | None = None,
                consistent: Sequence[bool] | None = None) -> dict[tuple[str, str], dict[str, int]]:
    """Per unordered pair (names sorted): battles, wins of each side, ties, consistent battles and battles with a
    failed call."""
    out: dict[tuple[str, str], dict[str, int]] = {}
    for k, (a, b, outcome) in enumerate(battles):
        x, y = sorted((a, b))
        row = out.setdefault((x, y), {"battles": 0, "wins_first": 0, "wins_second": 0, "ties": 0, "consistent": 0,
                                      "with_failed_call": 0})
        row["battles"] += 1
        winner = a if outcome == MODEL_A else b if outcome == MODEL_B else None
        if winner is None:
            row["ties"] += 1
        else:
            row["wins_first" if winner == x else "wins_second"] += 1
        row["consistent"] += bool(consistent[k]) if consistent is not None else 0
        row["with_failed_call"] += bool(failed[k]) if failed is not None else 0
    return out
