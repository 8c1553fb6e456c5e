"""Model-level ImgEdit-Bench Basic figures for one leaderboard group: per edit type the mean of the edits' scores,
and the overall mean of the nine type figures (`protocol.official_means`, as the official step2_typescore.py and the
paper's table)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def summarize(ok: Any, means: Mapping[str, float], ses: Mapping[str, float], *, overall: bool,
              seed: int = 0) -> dict[str, Any]:
    """ImgEdit_<type> and ImgEdit_overall of the group's ok rows `ok` (NaN where a type has none)."""
    from benchmark.metrics.imgedit.protocol import official_means

    return official_means(ok)
