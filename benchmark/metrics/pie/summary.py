"""Model-level additions of the PIE-Bench suite to each leaderboard group: how many ok queries had no background
(mask over the whole image) or no target caption; their columns are NaN and left out of the means."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def summarize(ok: Any, means: Mapping[str, float], ses: Mapping[str, float], *, overall: bool,
              seed: int = 0) -> dict[str, Any]:
    """n_no_background, n_no_caption of the group's ok rows `ok` (a DataFrame)."""
    from benchmark.metrics.pie.suite import NO_BACKGROUND, NO_CAPTION

    def count(col: str, note: str) -> int:
        return int((ok[col].fillna("").astype(str) == note).sum()) if col in ok else 0

    return {"n_no_background": count("bg_note", NO_BACKGROUND), "n_no_caption": count("clip_note", NO_CAPTION)}
