"""Model-level GEdit-Bench figures for one leaderboard group: per language (EN, CN), over the full set and the
intersection subset, the mean per task group and then the unweighted mean over the groups
(`protocol.official_means`, as Step1X-Edit's calculate_statistics.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def summarize(ok: Any, means: Mapping[str, float], ses: Mapping[str, float], *, overall: bool,
              seed: int = 0) -> dict[str, Any]:
    """GEdit_<SC|PQ|O>_<en|cn>[_intersection] of the group's ok rows `ok` (NaN where a language or subset has none)."""
    from benchmark.metrics.gedit.protocol import official_means

    return official_means(ok)
