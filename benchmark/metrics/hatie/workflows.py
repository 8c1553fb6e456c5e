"""HATIE's seven per-task workflows (docs/hatie.md section 4): from a query, its 512 px images, the original's ground-truth
masks and the edit's segmentation to a Plan of similarity requests whose results become raw sub-scores.

Convention for every pair: (edit side, original side), the release's argument order (l2_s resizes the second to
the first). Branches: `detected`, `degenerate` (box < 5 px a side), `not_detected`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from benchmark.io.types import Query
from benchmark.metrics.hatie import primitives as P
from benchmark.metrics.hatie.engine import Plan, Results
from benchmark.metrics.hatie.weights import SIMS, TESTS
from benchmark.models.segmenter import Detection, Segmentation

# The release writes the added object's name twice in the position text ("c <rel> c"); the paper's example
# ("pizza under microwave") names the anchor. editmeter follows the paper.
ADD_RELATION_TEXT = "anchor"  # or "target" to reproduce the release
# bg_chg: an object crop whose pixels sum to zero scores 0 on clip/lpips/dino/l2, as in the release
# (`eval_bgChg`: `... if torch.sum(edit_img) > 0 else 0`); position and size are still scored.
BLANK_CROP_IS_MISSING = True


@dataclass(frozen=True)
class InputIds:
    """What determines a query's images, by file: sha256 of the source's and the edit's bytes and of each ground-truth
    mask file (object id -> digest). The suite reads them with the files; they name every image a plan makes."""

    source: str
    edit: str
    masks: Mapping[str, str]


@dataclass
class QueryInput:
    """Everything a workflow reads: images (3, 512, 512) in [0, 1], GT object masks by object id (float
    (512, 512)), and the edit's segmentation restricted to the query's relevant classes. `ids` names the files
    they were read from (None: the tensors' own digests name them)."""

    query: Query
    original: Any
    edit: Any
    gt_masks: Mapping[str, Any]
    seg: Segmentation
    vqa: bool = False
    add_relation_text: str = ADD_RELATION_TEXT
    ids: InputIds | None = None


def _tensor_ids(x: QueryInput) -> InputIds:
    """Content digests of the tensors themselves, for inputs that come with no file ids (tests, custom callers)."""
    from benchmark.metrics.features import tensor_digest

    return InputIds(tensor_digest(x.original), tensor_digest(x.edit),
                    {oid: tensor_digest(m) for oid, m in x.gt_masks.items()})


def _seg_digest(seg: Segmentation) -> str:
    """Digest of a segmentation: each detection's class, score, box and mask bits."""
    import hashlib

    import numpy as np

    h = hashlib.blake2b(digest_size=16)
    for name in sorted(seg):
        d = seg[name]
        h.update(f"{name}|{d.score!r}|{tuple(int(v) for v in d.bbox)}|{d.mask.shape}|".encode())
        h.update(np.packbits(np.asarray(d.mask, dtype=bool)).tobytes())
    return h.hexdigest()


def query_scope(x: QueryInput) -> tuple[str, str]:
    """(source scope, query scope): the prefixes of every image key a plan makes. They hold what determines the
    images: the source file (source scope); the query's record, the source, edit and mask files and the
    segmentation (query scope). So a key names its image's content, and the feature cache can be keyed by it
    without hashing the image (the part after the scope names the transform: crop, background, edges, pyramid)."""
    import hashlib

    ids = x.ids or _tensor_ids(x)
    h = hashlib.blake2b(digest_size=16)
    h.update(repr((x.query, ids.source, ids.edit, sorted(ids.masks.items()), _seg_digest(x.seg))).encode())
    return f"src:{ids.source}", f"q:{x.query.id}:{h.hexdigest()}"


def relevant_classes(q: Query) -> list[str]:
    """Classes the segmentation keeps for this query (docs/hatie.md section 2)."""
    t = q.edit_type
    if t in ("attr_chg", "obj_resize", "obj_remove"):
        return [q.target.name]  # type: ignore[union-attr]
    if t == "obj_rep":
        return [q.new_class, q.target.name]  # type: ignore[list-item, union-attr]
    if t == "obj_add":
        return [q.new_class, q.anchor.name]  # type: ignore[list-item, union-attr]
    return [o.name for o in q.editable_objects]


def needed_masks(q: Query) -> list[str]:
    """Object ids whose ground-truth masks the workflow reads."""
    if q.edit_type in ("attr_chg", "obj_resize", "obj_remove", "obj_rep"):
        return [q.target.id]  # type: ignore[union-attr]
    if q.edit_type == "bg_chg":
        return [o.id for o in q.editable_objects]
    return []


def _mask(det: Detection) -> Any:
    import torch

    return torch.from_numpy(det.mask).float()


def _gt_bbox(mask: Any) -> tuple[int, int, int, int]:
    import numpy as np

    from benchmark.models.segmenter import bbox_from_mask

    return bbox_from_mask(np.asarray(mask.bool().numpy()))


class _Ctx:
    """Key naming and the shared steps of the object workflows."""

    def __init__(self, x: QueryInput) -> None:
        self.x, self.q, self.plan = x, x.query, Plan()
        self.ids = x.ids or _tensor_ids(x)
        self.src, self.qk = query_scope(x)
        self._masks: dict[int, Any] = {}

    def mask(self, det: Detection) -> Any:
        """The detection's float mask, converted once per query (crops, backgrounds and spatial scores share it)."""
        m = self._masks.get(id(det))
        if m is None:
            m = self._masks[id(det)] = _mask(det)
        return m

    def vqa_or_none(self, value: float) -> float | None:
        return value if self.x.vqa else None

    def bc4(self, *masks: Any) -> tuple[str, str]:
        """Background pair with `masks` removed from both images (no masks: the full images)."""
        if masks:
            a = self.plan.image(f"{self.qk}:bg:e", P.background(self.x.edit, *masks))
            b = self.plan.image(f"{self.qk}:bg:o", P.background(self.x.original, *masks))
        else:
            a, b = self.full()
        return self.plan.pair(a, b)

    def full(self) -> tuple[str, str]:
        """The whole edit and original: keyed by content, so other suites' features of the same input are shared."""
        return (self.plan.image(f"{self.qk}:full", self.x.edit, by_content=True),
                self.plan.image(f"{self.src}:full", self.x.original, by_content=True))

    def gt_crop(self, oid: str) -> tuple[str, Any]:
        m = self.x.gt_masks[oid]
        key = f"{self.src}:gt:{self.ids.masks[oid]}"  # the crop is the source's, cut by this mask file
        return self.plan.image(key, P.crop(self.x.original, m, _gt_bbox(m))), m

    def edit_crop(self, det: Detection, tag: str) -> str:
        return self.plan.image(f"{self.qk}:{tag}", P.crop(self.x.edit, self.mask(det), det.bbox))

    def structure(self, e_key: str, o_key: str) -> dict[str, tuple[str, str] | list[tuple[str, str]]]:
        """Requests of edge / degA / degB between two images (edit side first)."""
        e, o = self.plan.images[e_key], self.plan.images[o_key]
        out: dict[str, Any] = {
            "edge": self.plan.pair(self.plan.image(f"{e_key}:edge", P.edge_map(e)),
                                   self.plan.image(f"{o_key}:edge", P.edge_map(o))),
            "degB": self.plan.pair(self.plan.image(f"{e_key}:degB", P.deg_b_image(e)),
                                   self.plan.image(f"{o_key}:degB", P.deg_b_image(o))),
        }
        out["degA"] = self.plan.deg_a_test(e_key, o_key)
        return out


def _bc(r: Results, pk: tuple[str, str], prefix: str = "bc") -> dict[str, float]:
    return {f"{prefix}_{s}": r.pair[pk][s] for s in SIMS}


def _structure_scores(r: Results, req: dict[str, Any], prefix: str) -> dict[str, float]:
    out = {}
    for s in SIMS:
        out[f"{prefix}_{s}_edge"] = r.pair[req["edge"]][s]
        out[f"{prefix}_{s}_degA"] = req["degA"].scores[s]
        out[f"{prefix}_{s}_degB"] = r.pair[req["degB"]][s]
    return out


def _zeros(prefix: str, names: tuple[str, ...] | list[str]) -> dict[str, float]:
    return {f"{prefix}_{n}": 0.0 for n in names}


def _branch(det: Detection | None) -> str:
    return "not_detected" if det is None else "degenerate" if det.degenerate else "detected"


def _unless_detected(c: _Ctx, det: Detection | None, zeros: dict[str, Any], *gt: Any) -> Any | None:
    """The shared miss branches of the object tasks. Not detected: BC on the backgrounds without the GT masks
    (without any mask when there are none: the full images), zero scores. Degenerate: BC also without the
    detection's mask, zero scores. Returns the detection's mask when it is usable, else None (plan finished)."""
    if det is not None and not det.degenerate:
        return c.mask(det)
    branch = _branch(det)
    bg = c.bc4(*([c.mask(det)] if det is not None else []), *gt)
    c.plan.finish = lambda r: {"branch": branch, **_bc(r, bg), **zeros}
    return None


def plan_obj_add(x: QueryInput) -> Plan:
    c, q = _Ctx(x), x.query
    new, anchor = q.new_class, q.anchor.name  # type: ignore[union-attr]
    det = x.seg.get(new)  # type: ignore[arg-type]
    of_zero = {"of_clip": 0.0, "of_det": 0.0, "of_vqa": c.vqa_or_none(0.0), "of_clip_rel": 0.0,
               "of_vqa_rel": c.vqa_or_none(0.0)}
    # degenerate: spec says BC on bg(mask_c) (the release mixes in a full-image CLIP term there)
    m = _unless_detected(c, det, of_zero)
    if m is None:
        return c.plan
    assert det is not None
    branch, bg = "detected", c.bc4(m)
    t = c.edit_crop(det, "T")
    a_det = x.seg.get(anchor)
    a_box = a_det.bbox if a_det is not None else (0, 0, P.IMAGE_SIZE, P.IMAGE_SIZE)
    u = c.plan.image(f"{c.qk}:U", P.crop(x.edit, None, P.union_box(a_box, det.bbox)))
    other = anchor if x.add_relation_text == "anchor" else new
    rel_text = f"{new} {P.relation_phrase(q.relation or '')} {other}"
    t_obj = c.plan.text(t, new, with_vqa=x.vqa)  # type: ignore[arg-type]
    t_rel = c.plan.text(u, rel_text, with_vqa=x.vqa)

    def finish(r: Results) -> dict[str, Any]:
        return {"branch": branch, **_bc(r, bg), "of_clip": r.clip_it[t_obj], "of_det": det.score,
                "of_vqa": r.vqa[t_obj] if x.vqa else None, "of_clip_rel": r.clip_it[t_rel],
                "of_vqa_rel": r.vqa[t_rel] if x.vqa else None}

    c.plan.finish = finish
    return c.plan


def plan_obj_remove(x: QueryInput) -> Plan:
    c, q = _Ctx(x), x.query
    o = q.target
    gt = x.gt_masks[o.id]  # type: ignore[union-attr]
    det = x.seg.get(o.name)  # type: ignore[union-attr]
    branch = _branch(det)
    if det is None or det.degenerate:
        bg = c.bc4(gt)
        c.plan.finish = lambda r: {"branch": branch, **_bc(r, bg), "of_clip": 1.0, "of_det": 1.0,
                                   "of_vqa": c.vqa_or_none(1.0)}
        return c.plan
    bg = c.bc4(c.mask(det), gt)
    t = c.plan.text(c.edit_crop(det, "T"), o.name, with_vqa=x.vqa)  # type: ignore[union-attr]
    c.plan.finish = lambda r: {"branch": branch, **_bc(r, bg), "of_clip": 1.0 - r.clip_it[t], "of_det": 1.0 - det.score,
                               "of_vqa": 1.0 - r.vqa[t] if x.vqa else None}
    return c.plan


def plan_obj_rep(x: QueryInput) -> Plan:
    c, q = _Ctx(x), x.query
    gt = x.gt_masks[q.target.id]  # type: ignore[union-attr]
    det = x.seg.get(q.new_class)  # type: ignore[arg-type]
    m = _unless_detected(c, det, {"oc_pos": 0.0, "of_clip": 0.0, "of_det": 0.0, "of_vqa": c.vqa_or_none(0.0)}, gt)
    if m is None:
        return c.plan
    assert det is not None
    branch, bg = "detected", c.bc4(m, gt)
    t = c.plan.text(c.edit_crop(det, "T"), q.new_class, with_vqa=x.vqa)  # type: ignore[arg-type]
    pos = P.pos(det.mask, gt)  # the bool mask: no float-to-bool conversion
    c.plan.finish = lambda r: {"branch": branch, **_bc(r, bg), "oc_pos": pos, "of_clip": r.clip_it[t],
                               "of_det": det.score, "of_vqa": r.vqa[t] if x.vqa else None}
    return c.plan


def plan_obj_resize(x: QueryInput) -> Plan:
    c, q = _Ctx(x), x.query
    o = q.target
    o_key, gt = c.gt_crop(o.id)  # type: ignore[union-attr]
    det = x.seg.get(o.name)  # type: ignore[union-attr]
    m = _unless_detected(c, det, {**_zeros("oc", [*SIMS, "pos"]), "of_size": 0.0}, gt)
    if m is None:
        return c.plan
    assert det is not None
    branch, bg = "detected", c.bc4(m, gt)
    obj = c.plan.pair(c.edit_crop(det, "T"), o_key)
    pos, sz = P.pos(det.mask, gt), P.size(gt, det.mask, q.size_change)  # type: ignore[arg-type]
    c.plan.finish = lambda r: {"branch": branch, **_bc(r, bg), **_bc(r, obj, "oc"), "oc_pos": pos, "of_size": sz}
    return c.plan


def plan_attr_chg(x: QueryInput) -> Plan:
    c, q = _Ctx(x), x.query
    o = q.target
    o_key, gt = c.gt_crop(o.id)  # type: ignore[union-attr]
    det = x.seg.get(o.name)  # type: ignore[union-attr]
    zeros = {**{f"oc_{s}_{t}": 0.0 for s in SIMS for t in TESTS}, "oc_pos": 0.0, "oc_size": 0.0,
             "of_clip": 0.0, "of_det": 0.0, "of_vqa": c.vqa_or_none(0.0)}
    m = _unless_detected(c, det, zeros, gt)
    if m is None:
        return c.plan
    assert det is not None
    branch, bg = "detected", c.bc4(m, gt)
    t_key = c.edit_crop(det, "T")
    req = c.structure(t_key, o_key)
    t = c.plan.text(t_key, f"{q.attribute_after} {o.name}", with_vqa=x.vqa)  # type: ignore[union-attr]
    pos, sz = P.pos(det.mask, gt), P.size(gt, det.mask, "keep")
    c.plan.finish = lambda r: {"branch": branch, **_bc(r, bg), **_structure_scores(r, req, "oc"), "oc_pos": pos,
                               "oc_size": sz, "of_clip": r.clip_it[t], "of_det": det.score,
                               "of_vqa": r.vqa[t] if x.vqa else None}
    return c.plan


def plan_bg_chg(x: QueryInput) -> Plan:
    c, q = _Ctx(x), x.query
    # per object, by id: None if missing, else (appearance pair or None for a blank crop, pos, size)
    per_obj: list[tuple[tuple[str, str] | None, float, float] | None] = []
    detected = []
    for o in q.editable_objects:  # paired by id (the release pairs two lists by position)
        det = x.seg.get(o.name)
        if det is None or det.degenerate:
            per_obj.append(None)
            continue
        o_key, gt = c.gt_crop(o.id)
        m = c.mask(det)
        detected.append(m)
        crop = P.crop(x.edit, m, det.bbox)
        # BLANK_CROP_IS_MISSING: the release scores an object crop whose pixels sum to zero (e.g. the object painted
        # black) as 0 on the four appearance similarities; its position and size still count (the mask is there)
        pair = None if BLANK_CROP_IS_MISSING and float(crop.sum()) == 0.0 else \
            c.plan.pair(c.plan.image(f"{c.qk}:T{o.id}", crop), o_key)
        per_obj.append((pair, P.pos(det.mask, gt), P.size(gt, det.mask, "keep")))
    bg_key = c.plan.image(f"{c.qk}:bgonly", P.background(x.edit, *detected))
    t = c.plan.text(bg_key, q.background or "", with_vqa=x.vqa)
    n = len(per_obj)

    def finish(r: Results) -> dict[str, Any]:
        sums = dict.fromkeys([*SIMS, "pos", "size"], 0.0)
        for item in per_obj:
            if item is None:
                continue  # a missing object contributes zeros
            pk, pos, sz = item
            if pk is not None:
                for s in SIMS:
                    sums[s] += r.pair[pk][s]
            sums["pos"] += pos
            sums["size"] += sz
        oc = {f"oc_{k}": (v / n if n else float("nan")) for k, v in sums.items()}
        return {"branch": f"{sum(i is not None for i in per_obj)}/{n} detected", **oc, "oc_n_objects": n,
                "oc_n_blank": sum(i is not None and i[0] is None for i in per_obj),
                "bf_clip": r.clip_it[t], "bf_vqa": r.vqa[t] if x.vqa else None}

    c.plan.finish = finish
    return c.plan


def plan_style_chg(x: QueryInput) -> Plan:
    c, q = _Ctx(x), x.query
    e_key, o_key = c.full()
    req = c.structure(e_key, o_key)
    t = c.plan.text(e_key, q.style or "", with_vqa=x.vqa)
    c.plan.finish = lambda r: {"branch": "whole image", **_structure_scores(r, req, "bc"), "bf_clip": r.clip_it[t],
                               "bf_vqa": r.vqa[t] if x.vqa else None}
    return c.plan


WORKFLOWS = {
    "obj_add": plan_obj_add, "obj_remove": plan_obj_remove, "obj_rep": plan_obj_rep, "obj_resize": plan_obj_resize,
    "attr_chg": plan_attr_chg, "bg_chg": plan_bg_chg, "style_chg": plan_style_chg,
}
