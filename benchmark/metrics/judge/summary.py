"""Model-level judge summary for one leaderboard group: how sure the judge was that it was answering with a score.

The readout renormalises the first answer token's probabilities over the ten digits, so every reply is a valid
score; `score_mass` says how much of the judge's probability that was (near 1 with a real instruction-following VLM;
a low value means the scores rest on a small part of what the model wanted to say)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np


def summarize(ok: Any, means: Mapping[str, float], ses: Mapping[str, float], *, overall: bool,
              seed: int = 0) -> dict[str, Any]:
    """score_mass: mean over the ok rows of each query's mean digit mass (NaN without rows)."""
    if "score_mass" not in ok or not len(ok):
        return {"score_mass": math.nan}
    v = ok["score_mass"].to_numpy(dtype=np.float64)
    v = v[np.isfinite(v)]
    return {"score_mass": float(v.mean()) if len(v) else math.nan}
