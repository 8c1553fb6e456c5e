"""Model-level RISEBench figures for one leaderboard group: accuracy (the share of samples fully solved), the mean
score and its percentage, overall, per category and per subtask, and the dimension means
(`protocol.official_table`, as the official gpt_eval.py writes its CSV)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def summarize(ok: Any, means: Mapping[str, float], ses: Mapping[str, float], *, overall: bool,
              seed: int = 0) -> dict[str, Any]:
    """RISE_* figures of the group's ok rows `ok` (NaN where a category or subtask has none)."""
    from benchmark.io.rise_protocol import official_table

    return official_table(ok)
