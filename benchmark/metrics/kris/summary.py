"""Model-level KRIS-Bench figures for one leaderboard group: per category and dimension, per category, per
meta-category and overall, the mean of the normalised scores (`protocol.official_means`, as summarize.py). On the
by-type leaderboard a group is one task, so its category columns are that task's figures."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def summarize(ok: Any, means: Mapping[str, float], ses: Mapping[str, float], *, overall: bool,
              seed: int = 0) -> dict[str, Any]:
    """KRIS_<category>_<dimension|AVG>, KRIS_<meta>_AVG and KRIS_overall_AVG of the group's ok rows `ok` (NaN where
    there is nothing to average)."""
    from benchmark.metrics.kris.protocol import official_means

    return official_means(ok)
