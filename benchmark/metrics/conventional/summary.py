"""Model-level additions of the conventional suite to each leaderboard group: how many ok queries had no
ground-truth target, no edit mask, or an undefined directional CLIP (their columns are NaN and left out of the
means; the counts say how much each mean covers beyond `<column>_n`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def summarize(ok: Any, means: Mapping[str, float], ses: Mapping[str, float], *, overall: bool,
              seed: int = 0) -> dict[str, Any]:
    """n_no_target, n_no_mask, n_dir_undefined of the group's ok rows `ok` (a DataFrame)."""
    def count_false(col: str) -> int:
        return int((ok[col].astype(bool) == False).sum()) if col in ok else 0  # noqa: E712

    notes = ok["dir_note"] if "dir_note" in ok else None
    undefined = int((notes.fillna("").astype(str) != "").sum()) if notes is not None else 0
    return {"n_no_target": count_false("has_target"), "n_no_mask": count_false("has_mask"),
            "n_dir_undefined": undefined}
