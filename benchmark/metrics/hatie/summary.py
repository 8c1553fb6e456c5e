"""Model-level HATIE scores for one leaderboard group: IQ from FID (overall only) and Total (docs/hatie.md section 5).

Called by `benchmark.tables.leaderboard` with the group's ok rows (in query-id order, whatever the shards or parts they
came from) and the criteria means / bootstrap SEs it computed. FID comes from the sufficient statistics of the two
feature sets (`benchmark.metrics.fid.FeatureStats`), accumulated block by block; the sources count once per image.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from benchmark.metrics.hatie.suite import FID_EDIT, FID_SOURCE
from benchmark.metrics.hatie.weights import (
    TOTAL_WEIGHTS_KEY,
    WeightProfileError,
    combine,
    profile_from_record,
)


def _rows(values: Any) -> np.ndarray | None:
    """The feature vectors of a column as an n x d float32 array (rows without features are left out)."""
    arrs = [np.asarray(v, dtype=np.float32) for v in values if v is not None and len(v)]
    return np.stack(arrs) if arrs else None


def summarize(ok: Any, means: Mapping[str, float], ses: Mapping[str, float], *, overall: bool,
              seed: int = 0, components: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """overall: FID, IQ, IQ_se, Total, Total_se; Total is NaN, with the reason under `note`, when IQ is (one source
    image, FID off): a criteria-only mean is not HATIE's Total. Per type / class: `score`, `score_se` = the weighted mean of the
    criteria the group defines (same weights as Total, normalised over them; IQ is a set-level quantity and is
    not split). `components` (the suite's, from run.json) names the weight profile the run was scored with; a run
    without one uses the release's weights."""
    try:
        profile = profile_from_record((components or {}).get(TOTAL_WEIGHTS_KEY))
    except WeightProfileError as err:  # a damaged run.json: no Total rather than one with unknown weights
        from benchmark.io.score_cache import warn

        warn(f"{err}; Total and score are left empty for this run (rescore it to rewrite run.json)")
        return {"score": math.nan, "score_se": math.nan} if not overall else {
            "FID": math.nan, "IQ": math.nan, "IQ_se": math.nan, "Total": math.nan, "Total_se": math.nan}
    if not overall:
        score, se = combine(means, ses, profile=profile)
        return {"score": score, "score_se": se}
    from benchmark.metrics.fid import FeatureStats, image_quality_from_stats

    out: dict[str, Any] = {"FID": math.nan, "IQ": math.nan, "IQ_se": math.nan}
    if FID_EDIT in ok and len(ok):
        edits = _rows(ok[FID_EDIT])
        srcs = _rows(ok.drop_duplicates("image_id")[FID_SOURCE]) if FID_SOURCE in ok else None
        if edits is not None and srcs is not None and len(edits) >= 2 and len(srcs) >= 2:
            out.update(image_quality_from_stats(FeatureStats.of(srcs), FeatureStats.of(edits), edits, seed=seed))
    if not math.isfinite(out["IQ"]):
        # Total is 0.8 x criteria + 0.2 x IQ: a criteria-only mean is another quantity and never takes its column
        from benchmark.metrics.base import SUMMARY_NOTE

        return out | {"Total": math.nan, "Total_se": math.nan, SUMMARY_NOTE: _no_iq_note(ok, components)}
    total, total_se = combine(means, ses, out["IQ"], out["IQ_se"], profile=profile)
    out.update({"Total": total, "Total_se": total_se})
    return out


def _no_iq_note(ok: Any, components: Mapping[str, Any] | None) -> str:
    """Why the overall Total is NaN: IQ is off (no FID model), or FID is undefined on these edits."""
    if (components or {}).get("iq") == "off":
        return "Total NaN: IQ is off (no FID model), and Total = 0.8 x criteria + 0.2 x IQ"
    n_edits = int(ok[FID_EDIT].map(lambda v: v is not None and len(v) > 0).sum()) if FID_EDIT in ok else 0
    n_src = int(ok["image_id"].nunique()) if "image_id" in ok and len(ok) else 0
    return (f"Total NaN: no IQ (FID needs 2+ edits and 2+ source images, here {n_edits} and {n_src}), "
            "and Total = 0.8 x criteria + 0.2 x IQ")
