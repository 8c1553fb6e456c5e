"""Model-level EditReward figures for one leaderboard group: none beyond the leaderboard's own mean of each column
over the ok rows (ER's plain mean is the authors' way to compare models; the paper reports no other aggregate)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def summarize(ok: Any, means: Mapping[str, float], ses: Mapping[str, float], *, overall: bool,
              seed: int = 0) -> dict[str, Any]:
    """Nothing to add: the group's ER is the mean of its ok rows' ER, which the leaderboard computes already."""
    return {}
