"""Group-level EditVal scores: FID per edit type (docs/editval.md).

Called by `benchmark.tables.leaderboard` (through `benchmark.tables.summaries`) with a group's ok rows. For each edit type in the
group, FID between that type's originals (one per source image) and its edits; `FID_type` is the mean over the
types where it is defined (two or more edits and two or more source images), so the per-type table shows each
type's own FID and the overall table their average. `FID_type_types` says how many types that mean covers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from benchmark.metrics.editval.suite import FID_EDIT, FID_SOURCE


def _stack(values: Any) -> np.ndarray | None:
    arrs = [np.asarray(v, dtype=np.float64) for v in values if v is not None and len(v)]
    return np.stack(arrs) if arrs else None


def fid_by_type(ok: Any) -> dict[str, float]:
    """edit type -> FID of its edits against its originals (NaN where undefined)."""
    from benchmark.metrics.fid import fid

    out: dict[str, float] = {}
    if FID_EDIT not in ok or FID_SOURCE not in ok or not len(ok):
        return out
    for edit_type, part in ok.groupby("edit_type", sort=True):
        edits = _stack(part[FID_EDIT])
        srcs = _stack(part.drop_duplicates("image_id")[FID_SOURCE])
        out[str(edit_type)] = fid(srcs, edits) if edits is not None and srcs is not None else math.nan
    return out


def summarize(ok: Any, means: Mapping[str, float], ses: Mapping[str, float], *, overall: bool,
              seed: int = 0) -> dict[str, Any]:
    """FID_type (mean of the group's per-type FIDs) and FID_type_types (how many types it averages)."""
    per_type = [v for v in fid_by_type(ok).values() if math.isfinite(v)]
    return {"FID_type": float(np.mean(per_type)) if per_type else math.nan, "FID_type_types": len(per_type)}
