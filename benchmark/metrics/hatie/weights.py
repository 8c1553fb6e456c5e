"""HATIE's weights (from the authors' release) and the per-query aggregation of raw sub-scores into criteria.

Raw sub-score names: `bc_*` background consistency, `oc_*` object consistency, `of_*` object fidelity,
`bf_*` background fidelity. A value of None means the component is off (VQA disabled): every weighted sum is then
renormalised over the components present (docs/hatie.md section 5), and the leaderboard row says `vqa: off`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass

from benchmark.metrics.hatie.primitives import g

SIMS = ("clip", "lpips", "dino", "l2")
TESTS = ("edge", "degA", "degB")
CRITERIA = ("OF", "BF", "OC", "BC")

# Background consistency of object tasks: BC = (sum w * BC4) ** BC_POWER.
W_BC = {"clip": 0.22, "lpips": 0.17, "dino": 0.25, "l2": 0.36}
BC_POWER = 6
# obj_add fidelity: the three object terms share 0.03 (weights 0.01 / 0.92 / 0.07 within it), position text 0.97.
ADD_OBJECT_SHARE = 0.03
W_OF_DETECT = {"clip": 0.01, "det": 0.92, "vqa": 0.07}  # obj_rep, obj_remove; obj_add scaled by ADD_OBJECT_SHARE
W_OF_ADD = {**{k: v * ADD_OBJECT_SHARE for k, v in W_OF_DETECT.items()}, "clip_rel": 0.71, "vqa_rel": 0.26}
W_OF_ATTR = {"clip": 0.36, "det": 0.57, "vqa": 0.07}
# Object consistency of obj_resize (and, per object, bg_chg): appearance similarities then pos (and size).
W_OC_APPEARANCE = {"clip": 0.23, "lpips": 0.01, "dino": 0.11, "l2": 0.65}
RESIZE_APPEARANCE_SHARE, RESIZE_POS = 0.9, 0.1
BG_APPEARANCE_SHARE, BG_POS, BG_SIZE = 0.6, 0.12, 0.28
# attr_chg object consistency: 0.7 * sum_s w2[s] sum_t w1[s][t] x[s][t] + 0.23 pos + 0.07 size.
W_ATTR_TESTS = {"clip": (0.08, 0.57, 0.35), "lpips": (0.01, 0.03, 0.96), "dino": (0.93, 0.05, 0.02), "l2": (0.01, 0.01, 0.98)}
W_ATTR_SIMS = {"clip": 0.84, "lpips": 0.01, "dino": 0.02, "l2": 0.13}
ATTR_STRUCTURE_SHARE, ATTR_POS, ATTR_SIZE = 0.7, 0.23, 0.07
# style_chg background consistency: sum_s w2s[s] sum_t w1s[s][t] x[s][t] (no power).
W_STYLE_TESTS = {"clip": (0.48, 0.12, 0.4), "lpips": (0.01, 0.02, 0.97), "dino": (0.49, 0.01, 0.5), "l2": (0.03, 0.96, 0.01)}
W_STYLE_SIMS = {"clip": 0.01, "lpips": 0.49, "dino": 0.01, "l2": 0.49}
W_BF_BG = {"clip": 0.87, "vqa": 0.13}
W_BF_STYLE = {"clip": 0.58, "vqa": 0.42}

# Model level: Total = CRITERIA_SHARE * sum_k W_TOTAL[k] * criterion_k + (1 - CRITERIA_SHARE) * IQ.
W_TOTAL = {"BC": 0.3, "OC": 0.1, "OF": 0.2, "BF": 0.4}
CRITERIA_SHARE = 0.8
FID_SCALE = 25.0  # IQ = 1 - tanh(FID / FID_SCALE)
IQ_RESAMPLES = 30  # IQ's error: std over this many resamples of the edited set's features


def _flat(prefix: str, nested: Mapping[str, tuple[float, ...]], outer: Mapping[str, float], share: float) -> dict[str, float]:
    return {f"{prefix}_{s}_{t}": share * outer[s] * nested[s][i] for s in SIMS for i, t in enumerate(TESTS)}


# Effective weight of every raw component, per task and criterion.
QUERY_WEIGHTS: dict[str, dict[str, dict[str, float]]] = {
    "obj_add": {"BC": {f"bc_{k}": v for k, v in W_BC.items()}, "OF": {f"of_{k}": v for k, v in W_OF_ADD.items()}},
    "obj_remove": {"BC": {f"bc_{k}": v for k, v in W_BC.items()}, "OF": {f"of_{k}": v for k, v in W_OF_DETECT.items()}},
    "obj_rep": {"BC": {f"bc_{k}": v for k, v in W_BC.items()}, "OF": {f"of_{k}": v for k, v in W_OF_DETECT.items()},
                "OC": {"oc_pos": 1.0}},
    "obj_resize": {"BC": {f"bc_{k}": v for k, v in W_BC.items()}, "OF": {"of_size": 1.0},
                   "OC": {**{f"oc_{k}": RESIZE_APPEARANCE_SHARE * v for k, v in W_OC_APPEARANCE.items()},
                          "oc_pos": RESIZE_POS}},
    "attr_chg": {"BC": {f"bc_{k}": v for k, v in W_BC.items()}, "OF": {f"of_{k}": v for k, v in W_OF_ATTR.items()},
                 "OC": {**_flat("oc", W_ATTR_TESTS, W_ATTR_SIMS, ATTR_STRUCTURE_SHARE), "oc_pos": ATTR_POS,
                        "oc_size": ATTR_SIZE}},
    "bg_chg": {"OC": {**{f"oc_{k}": BG_APPEARANCE_SHARE * v for k, v in W_OC_APPEARANCE.items()}, "oc_pos": BG_POS,
                      "oc_size": BG_SIZE},
               "BF": {f"bf_{k}": v for k, v in W_BF_BG.items()}},
    "style_chg": {"BC": _flat("bc", W_STYLE_TESTS, W_STYLE_SIMS, 1.0), "BF": {f"bf_{k}": v for k, v in W_BF_STYLE.items()}},
}
# Criteria with a non-linear transform after the weighted sum.
POST = {("obj_add", "BC"), ("obj_remove", "BC"), ("obj_rep", "BC"), ("obj_resize", "BC"), ("attr_chg", "BC"),
        ("bg_chg", "BF"), ("style_chg", "BF")}


def weighted(weights: Mapping[str, float], raw: Mapping[str, float | None]) -> float:
    """sum w * x over the components present; renormalised by the present weights only when one is off (None).
    A missing key is an error (a workflow bug), not an off component."""
    present = {k: w for k, w in weights.items() if raw[k] is not None}
    if not present:
        return math.nan
    total = sum(w * float(raw[k]) for k, w in present.items())  # type: ignore[arg-type]
    return total if len(present) == len(weights) else total / sum(present.values())


def query_criteria(edit_type: str, raw: Mapping[str, float | None]) -> dict[str, float]:
    """The per-query criteria (OF, BF, OC, BC) a task defines; the others are NaN."""
    out = dict.fromkeys(CRITERIA, math.nan)
    for crit, weights in QUERY_WEIGHTS[edit_type].items():
        if edit_type == "bg_chg" and crit == "OC" and raw.get("oc_n_objects", 1) == 0:
            continue  # no editable object: object consistency is undefined for this query
        v = weighted(weights, raw)
        if (edit_type, crit) in POST:
            v = v**BC_POWER if crit == "BC" else g(v)
        out[crit] = v
    return out


def combine(means: Mapping[str, float], ses: Mapping[str, float], iq: float | None = None,
            iq_se: float | None = None, profile: WeightProfile | None = None) -> tuple[float, float]:
    """Weighted score of the criteria present (finite), normalised by their weights; with IQ: HATIE's Total.
    `profile` replaces the release's weights (`W_TOTAL`, `CRITERIA_SHARE`; see `load_weight_profile`).

    SE propagates as independent terms: sqrt(sum (w_k SE_k)^2) (the release adds the IQ term unsquared; not copied).
    """
    w_total = profile.total if profile is not None else W_TOTAL
    share = profile.criteria_share if profile is not None else CRITERIA_SHARE
    present = [k for k in w_total if k in means and math.isfinite(means[k]) and w_total[k] > 0]
    if not present:
        return math.nan, math.nan
    wsum = sum(w_total[k] for k in present)
    if iq is None:
        score = sum(w_total[k] * means[k] for k in present) / wsum
        var = sum((w_total[k] * ses.get(k, math.nan)) ** 2 for k in present) / wsum**2
        return score, math.sqrt(var)
    # Total: the criteria part is normalised over the weights present (all four in a full HATIE run)
    crit = sum(w_total[k] * means[k] for k in present) / wsum
    score = share * crit + (1 - share) * iq
    var = sum((share * w_total[k] / wsum * ses.get(k, math.nan)) ** 2 for k in present)
    var += ((1 - share) * (iq_se if iq_se is not None else math.nan)) ** 2
    return score, math.sqrt(var)


def image_quality(fid: float) -> float:
    return 1.0 - math.tanh(fid / FID_SCALE)


# ---- named weight profiles (Total's criteria weights; written by `editmeter metaeval fit-weights`) -------------
PROFILE_DIR = "configs/metrics/hatie_weights"  # relative to the checkout: <name>.yaml
DEFAULT_PROFILE = "default"  # the release's W_TOTAL and CRITERIA_SHARE
TOTAL_WEIGHTS_KEY = "total_weights"  # the suite component recording the profile (run.json, leaderboard)


class WeightProfileError(ValueError):
    """A weight profile is missing or malformed; the message names the file and the fix."""


@dataclass(frozen=True)
class WeightProfile:
    """Total = criteria_share * sum_k total[k] * criterion_k + (1 - criteria_share) * IQ (docs/metaeval.md)."""

    name: str
    total: Mapping[str, float]
    criteria_share: float
    source: str = "built-in"

    def record(self) -> str:
        """The weights as one canonical JSON string (run.json's suite components; read back by `from_record`)."""
        return json.dumps({"name": self.name, "total": {k: self.total[k] for k in CRITERIA},
                           "criteria_share": self.criteria_share}, sort_keys=True)


def release_profile() -> WeightProfile:
    return WeightProfile(DEFAULT_PROFILE, dict(W_TOTAL), CRITERIA_SHARE)


def check_profile(data: object, where: str) -> WeightProfile:
    """Validate a profile mapping ({name, total: {OF, BF, OC, BC}, criteria_share}); WeightProfileError otherwise."""
    if not isinstance(data, Mapping):
        raise WeightProfileError(f"{where}: a weight profile must be a mapping with keys name, total, criteria_share")
    total = data.get("total")
    if not isinstance(total, Mapping) or set(total) != set(CRITERIA):
        got = sorted(total) if isinstance(total, Mapping) else type(total).__name__
        raise WeightProfileError(f"{where}: 'total' must map exactly {', '.join(CRITERIA)} to weights, got {got}")
    vals = {}
    for k in W_TOTAL:  # the release's order, so the release's weights give the very same floating-point sums
        v = total[k]
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
            raise WeightProfileError(f"{where}: total.{k} = {v!r}; weights are finite numbers >= 0")
        vals[k] = float(v)
    if abs(sum(vals.values()) - 1.0) > 1e-6:
        raise WeightProfileError(f"{where}: the weights in 'total' sum to {sum(vals.values()):.6g}; they must sum to 1")
    share = data.get("criteria_share", CRITERIA_SHARE)
    if isinstance(share, bool) or not isinstance(share, int | float) or not 0.0 <= float(share) <= 1.0:
        raise WeightProfileError(f"{where}: criteria_share = {share!r}; it must be a number in [0, 1]")
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise WeightProfileError(f"{where}: 'name' must be a non-empty string")
    return WeightProfile(name, vals, float(share), where)


def load_weight_profile(name_or_path: str | None) -> WeightProfile:
    """`default` (or None): the release's weights; a name: `configs/metrics/hatie_weights/<name>.yaml`; anything
    with a `/` or ending in .yaml / .json: that file. Raises WeightProfileError naming the file and the fix."""
    if name_or_path in (None, "", DEFAULT_PROFILE):
        return release_profile()
    from pathlib import Path

    import yaml

    from benchmark.io.provenance import PROJECT_ROOT

    text = str(name_or_path)
    path = Path(text) if ("/" in text or text.endswith((".yaml", ".yml", ".json"))) else PROJECT_ROOT / PROFILE_DIR / f"{text}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in (PROJECT_ROOT / PROFILE_DIR).glob("*.yaml"))
        raise WeightProfileError(f"HATIE weight profile {text!r}: no file {path}. Known profiles: "
                                 f"{', '.join([DEFAULT_PROFILE, *known])}; `editmeter metaeval fit-weights` writes new ones")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise WeightProfileError(f"{path}: not readable YAML/JSON ({type(err).__name__}: {err})") from None
    return check_profile(data, str(path))


def profile_from_record(record: str | None) -> WeightProfile:
    """The profile a run recorded (`WeightProfile.record`); the release's when the run predates profiles (None)."""
    if record is None:
        return release_profile()
    try:
        data = json.loads(record)
    except (TypeError, ValueError) as err:
        raise WeightProfileError(f"recorded total_weights is not JSON ({err})") from None
    return check_profile(data, "run.json suite components.total_weights")
