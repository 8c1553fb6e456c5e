"""Model-level EditScore figures for one leaderboard group: none beyond the leaderboard's own means of the per-query
columns (EditScore scores single edits; a model's figure is the plain mean of ES_overall and of its parts, which
every leaderboard row already has, with its bootstrap standard error)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def summarize(ok: Any, means: Mapping[str, float], ses: Mapping[str, float], *, overall: bool,
              seed: int = 0) -> dict[str, Any]:
    """No further figures: the column means in `means` are EditScore's model-level numbers."""
    return {}
