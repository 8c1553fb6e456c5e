"""Model-level AugCLIP summary for one leaderboard group: how many attribute weights had to be clipped.

A clipped weight (alpha < min_weight, raised to min_weight so the SVM accepts it) means an attribute resembles the
opposite set more than its own; many of them say the attribute lists separate the edit poorly."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np


def summarize(ok: Any, means: Mapping[str, float], ses: Mapping[str, float], *, overall: bool,
              seed: int = 0) -> dict[str, Any]:
    """clipped_queries (queries with >= 1 clipped weight) and clipped_weights (their sum) over the ok rows."""
    if "clipped_weights" not in ok or not len(ok):
        return {"clipped_queries": 0, "clipped_weights": 0}
    n = np.nan_to_num(ok["clipped_weights"].to_numpy(dtype=np.float64))
    return {"clipped_queries": int((n > 0).sum()), "clipped_weights": int(n.sum())}
