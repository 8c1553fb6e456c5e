"""BpmSuite: BPM's per-query terms for every query of a run (docs/bpm.md).

Per chunk of queries: load original and edit (the edit resized to the original's size if it differs), parse the
instruction (query fields, else the rule-based parser, else the optional LLM; failing that, a failure row),
locate o1 in the original (ground-truth mask from the query set when it has one and `original_masks: queryset`,
else the detector) and o2 in the edit (`_detect` + `_segment`, batched), apply the position / size rules, and
compute S_modify (CLIP on box crops, `_embed_images` / `_embed_texts`) and S_preserve (1 - MSE outside the union
of the masks). Rows hold the raw terms; the min-max normalisation of the paper is a set-level step done in the
leaderboard summary (`summary.py`), never per row or per shard.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.io.model_cache import resolve_device
from benchmark.io.types import FREEFORM_TYPES, GEDIT_TYPES, IMGEDIT_TYPES, PIE_TYPES, MetricInfo, Query
from benchmark.metrics.bpm.rules import PositionRule, SizeRule, iou
from benchmark.metrics.chunking import QuerySamples
from benchmark.metrics.components import LazyComponents
from benchmark.models.instructions import GLOBAL_TYPES, ParsedEdit, ParseError, RuleParser, from_query
from benchmark.models.locate import Box, box_mask, box_of

VERSION = "1.0"
CLIP_INPUT = 224
COLUMNS = ("BPM_fixed", "S_region", "S_position", "S_size", "S_modify", "S_preserve")
COLUMN_INFO = {
    "BPM": (True, "0.7 S_semantic + 0.3 S_region, S_semantic from min-max normalised S_modify and S_preserve over "
                  "the group's queries (the paper's BPM; set-level, see docs/bpm.md)"),
    "S_semantic": (True, "Norm(S_modify) + Norm(S_preserve), min-max over the group's queries"),
    "BPM_fixed": (True, "0.7 ((S_modify + 1) / 2 + S_preserve) + 0.3 S_region: BPM with fixed bounds instead of "
                        "the set's min / max (per query, comparable across editors and shards)"),
    "S_region": (True, "S_position + S_size, in {0, 1, 2}"),
    "S_position": (True, "1 when the object moved as asked (or stayed when it should), else 0"),
    "S_size": (True, "1 when the object's mask area changed as asked (or stayed), else 0"),
    "S_modify": (True, "cs(E(edit crop) - E(original crop), E_T(o2) - E_T(o1)) on the objects' boxes"),
    "S_preserve": (True, "1 - mean squared difference outside the union of the objects' masks (images in [0, 1])"),
}
# types whose queries carry no structured edit fields, only text (MagicBrush, GEdit-Bench, PIE-Bench, ImgEdit-Bench):
# the edit is parsed from the instruction
TEXT_ONLY_TYPES = frozenset(FREEFORM_TYPES) | frozenset(GEDIT_TYPES) | frozenset(PIE_TYPES) | frozenset(IMGEDIT_TYPES)


@dataclass
class _Loaded:
    query: Query
    original: Any = None     # uint8 (H, W, 3)
    edit: Any = None
    gt: dict[str, Any] = field(default_factory=dict)  # "target" / "anchor" -> bool mask (query set ground truth)
    error: str = ""


class _Samples(QuerySamples):
    def __init__(self, queryset: Any, queries: Sequence[Query], edit_paths: Sequence[Path], gt_original: bool):
        super().__init__(queryset, queries, edit_paths)
        self.gt_original = gt_original

    def item(self, query: Query) -> _Loaded:
        return _Loaded(query)

    def load(self, out: _Loaded, q: Query, edit_path: Path) -> None:
        from PIL import Image

        from benchmark.io.imageio import load_mask, load_rgb

        size, out.original = self.original(q, lambda img: (img.size, np.asarray(img, dtype=np.uint8)))
        edit = load_rgb(edit_path)
        if edit.size != size:  # judged at the original's size
            edit = edit.resize(size, Image.Resampling.BICUBIC)
        out.edit = np.asarray(edit, dtype=np.uint8)
        if self.gt_original:  # keyed by role: the target and the anchor may share a class name
            for role, o in (("target", q.target), ("anchor", q.anchor)):
                if o is not None and o.mask:
                    out.gt[role] = load_mask(self.queryset.path(o.mask), size)


@dataclass
class _Job:
    """One query's parse and located regions while it is being scored."""

    item: _Loaded
    parse: ParsedEdit
    orig: tuple[Box, np.ndarray] | None = None
    edit: tuple[Box, np.ndarray] | None = None
    ref: tuple[Box, np.ndarray] | None = None
    orig_from_gt: int = 0
    error: str = ""


class BpmSuite(LazyComponents):
    """BPM (specification: docs/bpm.md). `clip(device=)` -> ClipEncoder; `locator(device=)` -> a Locator
    (detector + mask model); `llm_parser(device=)` -> optional LLMInstructionParser for what the rules miss."""

    reduced_components = ("clip",)  # follows `precision`; the locator's detector and mask model stay fp32

    info = MetricInfo("bpm", VERSION, True, description="BPM: region- and semantic-aware instruction compliance")
    columns = COLUMNS
    column_info = COLUMN_INFO

    def __init__(self, *, clip: Callable[..., Any], locator: Callable[..., Any],
                 llm_parser: Callable[..., Any] | None = None, position: dict[str, float] | None = None,
                 size: dict[str, float] | None = None, semantic_weight: float = 0.7, none_text: str = "background",
                 original_masks: str = "queryset", device: str = "auto", batch_size: int = 32,
                 chunk_size: int = 32, precision: str = "fp32", load_threads: int | None = None,
                 prefetch: bool = False) -> None:
        from benchmark.metrics.chunking import check_loading
        from benchmark.metrics.precision import check_precision

        if original_masks not in ("queryset", "detector"):
            raise ValueError(f"original_masks must be 'queryset' or 'detector', not {original_masks!r}")
        if not 0 <= semantic_weight <= 1:
            raise ValueError(f"semantic_weight must be in [0, 1], not {semantic_weight}")
        self.device = resolve_device(device)
        self.precision = check_precision(precision, self.device, what="metrics bpm")
        self._factories = {"clip": clip, "locator": locator, "llm_parser": llm_parser}
        self._models: dict[str, Any] = {}
        self.position_rule, self.size_rule = PositionRule(**(position or {})), SizeRule(**(size or {}))
        self.semantic_weight, self.none_text, self.original_masks = float(semantic_weight), none_text, original_masks
        self.batch_size, self.chunk_size = batch_size, chunk_size
        self.load_threads, self.prefetch = check_loading(load_threads, prefetch)  # speed only (docs/metrics.md)
        self.rules = RuleParser()
        self.timings: dict[str, float] = {}

    def components(self) -> dict[str, str]:
        def ident(f: Any) -> str:
            """`name(key=value, ...)` of a factory (partial), nested factories described the same way."""
            func = getattr(f, "func", f)
            kw = getattr(f, "keywords", {})
            args = ",".join(f"{k}={ident(v) if callable(v) else v}" for k, v in sorted(kw.items()))
            return f"{getattr(func, '__name__', type(func).__name__)}({args})"

        return {"locator": ident(self._factories["locator"]), "clip": ident(self._factories["clip"]),
                "parser": self.rules.signature + ("+llm" if self._factories["llm_parser"] is not None else ""),
                "original_masks": self.original_masks, "semantic_weight": f"{self.semantic_weight:g}",
                "precision": self.precision}

    def applies_to(self, query: Query, prompt_kind: str) -> bool:
        """BPM judges object edits: whole-image types (background, style, viewpoint) are excluded."""
        return query.edit_type not in GLOBAL_TYPES

    # -- backbone calls (the only ones; CLIP through the process-wide feature cache) --------------------------
    def _detect(self, images: list[np.ndarray], names: list[str]) -> list[tuple[Box, float] | None]:
        t0 = time.perf_counter()
        out = self._get("locator").detect(images, names)
        self.timings["detector forward"] = self.timings.get("detector forward", 0.0) + time.perf_counter() - t0
        return out

    def _segment(self, images: list[np.ndarray], boxes: list[Box]) -> list[np.ndarray]:
        t0 = time.perf_counter()
        out = self._get("locator").segment(images, boxes)
        self.timings["mask model forward"] = self.timings.get("mask model forward", 0.0) + time.perf_counter() - t0
        return out

    def _embed_images(self, images: Sequence[Any]) -> np.ndarray:
        """CLIP features (N, D) of float (3, 224, 224) crops through the process-wide feature cache
        (`benchmark.metrics.features`): a crop any suite of this process already gave the same CLIP is not
        encoded again."""
        from benchmark.metrics.features import embed_images

        feats = embed_images(self._get("clip"), list(images), batch_size=self.batch_size,
                             timer=self._timer("clip image forward"), steps=self.timings)
        return np.stack([f.cpu().numpy() for f in feats]).astype(np.float64)

    def _embed_texts(self, texts: list[str]) -> np.ndarray:
        """CLIP features of `texts`, each distinct text encoded once per process and CLIP."""
        from benchmark.metrics.features import embed_texts

        feats = embed_texts(self._get("clip"), texts, batch_size=self.batch_size, timer=self._timer("clip text forward"))
        return np.stack([f.cpu().numpy() for f in feats]).astype(np.float64)

    # -- steps ------------------------------------------------------------------------------------------------
    def parse(self, queries: Sequence[Query]) -> list[ParsedEdit | str]:
        """Query fields for generated sets, rules for free-form instructions, then the LLM (if configured) for
        what the rules miss; a str is the failure reason."""
        out: list[ParsedEdit | str] = []
        for q in queries:
            try:
                out.append(self.rules.parse(q.instruction) if q.edit_type in TEXT_ONLY_TYPES else from_query(q))
            except ParseError as err:
                out.append(str(err))
        llm = self._get("llm_parser") if self._factories["llm_parser"] is not None else None
        miss = [i for i, p in enumerate(out) if isinstance(p, str) and queries[i].edit_type in TEXT_ONLY_TYPES]
        if llm is not None and miss:
            for i, p in zip(miss, llm.parse_many([queries[i].instruction for i in miss]), strict=True):
                out[i] = p if isinstance(p, ParsedEdit) else f"{out[i]}; LLM parser: {p}"
        return out

    def _locate(self, jobs: list[_Job]) -> None:
        """Fill each job's original / reference / edit regions (ground truth where allowed, else the locator)."""
        requests: list[tuple[_Job, str, np.ndarray, str]] = []
        def truth(it: _Loaded, name: str, roles: tuple[str, ...]) -> Any:
            """The query set's mask of the first role whose object is `name` (None when there is none)."""
            for role in roles:
                o = getattr(it.query, role)
                if o is not None and o.name == name and role in it.gt and box_of(it.gt[role]) is not None:
                    return it.gt[role]
            return None

        for j in jobs:
            p, it = j.parse, j.item
            if p.source_object is not None:
                gt = truth(it, p.source_object, ("target",))
                if gt is not None:
                    j.orig, j.orig_from_gt = (box_of(gt), gt), 1
                else:
                    requests.append((j, "orig", it.original, p.source_object))
            if p.reference is not None and p.position != "unchanged":
                gt = truth(it, p.reference, ("anchor", "target"))
                if gt is not None:
                    j.ref = (box_of(gt), gt)
                else:
                    requests.append((j, "ref", it.original, p.reference))
            if p.target_object is not None:
                requests.append((j, "edit", it.edit, p.target_object))
        if not requests:
            return
        found = self._detect([r[2] for r in requests], [r[3] for r in requests])
        hits = [(r, f[0]) for r, f in zip(requests, found, strict=True) if f is not None]
        masks = self._segment([r[2] for r, _ in hits], [b for _, b in hits]) if hits else []
        for (r, box), mask in zip(hits, masks, strict=True):
            mask = np.asarray(mask, dtype=bool)
            if not mask.any():  # the mask model found nothing inside the detected box: the box is the region
                mask = box_mask(box, mask.shape)
            setattr(r[0], r[1], (box_of(mask), mask))
        for j, role, _, name in requests:
            if role == "orig" and j.orig is None:
                j.error = f"the source object {name!r} was not found in the original image"
            if role == "ref" and j.ref is None:
                j.error = f"the reference object {name!r} was not found in the original image"

    def _crop(self, image: np.ndarray, box: Box) -> Any:
        """Box crop, zero-padded to a square (the odd pixel right / bottom), resized to CLIP's 224 px."""
        import torch
        import torch.nn.functional as F

        h, w = image.shape[:2]
        x0, y0 = max(0, math.floor(box[0])), max(0, math.floor(box[1]))
        x1, y1 = min(w, max(x0 + 1, math.ceil(box[2]))), min(h, max(y0 + 1, math.ceil(box[3])))
        c = torch.from_numpy(np.array(image[y0:y1, x0:x1])).permute(2, 0, 1).float() / 255
        s = max(c.shape[1:])
        dh, dw = s - c.shape[1], s - c.shape[2]
        c = F.pad(c, (dw // 2, dw - dw // 2, dh // 2, dh - dh // 2))
        return F.interpolate(c[None], size=(CLIP_INPUT, CLIP_INPUT), mode="bicubic", antialias=True,
                             align_corners=False)[0].clamp(0, 1)

    def judge(self, j: _Job) -> dict[str, Any]:
        """Region terms and the regions the semantic terms use, for a located job (docs/bpm.md)."""
        p, it = j.parse, j.item
        h, w = it.original.shape[:2]
        full: tuple[Box, np.ndarray] = ((0.0, 0.0, float(w), float(h)), np.zeros((h, w), dtype=bool))
        found = 1 if (p.target_object is None or j.edit is not None) else 0
        if p.kind == "add":
            edit = j.edit or (j.ref if j.ref is not None else full)
            orig = edit  # add: the original box / mask default to the edited ones
        elif p.kind == "remove":
            orig = j.orig
            edit = orig  # remove: the edited box / mask default to the original ones
        else:
            orig = j.orig
            edit = j.edit or (orig[0], np.zeros((h, w), dtype=bool))  # o2 missing: judge where o1 was
        assert orig is not None and edit is not None
        if not found:
            s_pos, why_pos, s_size, why_size = 0, f"{p.target_object!r} not found in the edit", 0, "not found"
        else:
            before = j.ref[0] if (j.ref is not None and p.position != "unchanged") else orig[0]
            if p.kind == "remove":
                s_pos, why_pos = 1, ""
            elif p.kind == "add" and p.position != "unchanged" and j.ref is None:
                s_pos, why_pos = 0, "no reference object to place the new object against"
            else:
                s_pos, why_pos = self.position_rule(before, edit[0], p.position, (w, h))
            if p.kind == "add":
                s_size, why_size = 1, ""
            else:
                s_size, why_size = self.size_rule(float(orig[1].sum()), float(edit[1].sum()), p.size)
        return {"S_position": s_pos, "S_size": s_size, "S_region": s_pos + s_size, "edit_found": found,
                "orig_from_gt": j.orig_from_gt, "iou": iou(orig[0], edit[0]),
                "area_ratio": float(edit[1].sum()) / max(float(orig[1].sum()), 1.0),
                "_why": "; ".join(x for x in (why_pos, why_size) if x), "_orig": orig, "_edit": edit}

    @staticmethod
    def preserve(original: np.ndarray, edit: np.ndarray, union: np.ndarray) -> float:
        """1 - MSE over the pixels outside `union` (all channels, images in [0, 1]); NaN when nothing is outside."""
        valid = ~union
        if not valid.any():
            return math.nan
        d = (original[valid].astype(np.float64) - edit[valid].astype(np.float64)) / 255.0
        return 1.0 - float(np.mean(d**2))

    def _score_chunk(self, items: list[_Loaded]) -> list[dict[str, Any]]:
        rows = [{"query_id": it.query.id, "status": "failed", "reason": it.error} for it in items if it.error]
        ok = [it for it in items if not it.error]
        jobs: list[_Job] = []
        for it, p in zip(ok, self.parse([it.query for it in ok]), strict=True):
            if isinstance(p, str):
                rows.append({"query_id": it.query.id, "status": "failed", "reason": p})
            else:
                jobs.append(_Job(it, p))
        self._locate(jobs)
        done = []
        for j in jobs:
            if j.error:
                rows.append({"query_id": j.item.query.id, "status": "failed", "reason": j.error})
            else:
                done.append((j, self.judge(j)))
        if not done:
            return rows
        crops = [c for j, r in done for c in (self._crop(j.item.original, r["_orig"][0]),
                                               self._crop(j.item.edit, r["_edit"][0]))]
        feats = self._embed_images(crops)
        texts = [t for j, _ in done for t in (j.parse.o1_text or self.none_text, j.parse.o2_text or self.none_text)]
        uniq = list(dict.fromkeys(texts))
        tf = dict(zip(uniq, self._embed_texts(uniq), strict=True))
        wsem = self.semantic_weight
        for k, (j, r) in enumerate(done):
            img_dir = feats[2 * k + 1] - feats[2 * k]
            txt_dir = tf[texts[2 * k + 1]] - tf[texts[2 * k]]
            n = float(np.linalg.norm(img_dir) * np.linalg.norm(txt_dir))
            s_mod = float(img_dir @ txt_dir) / n if n > 0 else math.nan
            s_pre = self.preserve(j.item.original, j.item.edit, r["_orig"][1] | r["_edit"][1])
            fixed = wsem * ((s_mod + 1) / 2 + s_pre) + (1 - wsem) * r["S_region"]
            row = {k2: v for k2, v in r.items() if not k2.startswith("_")}
            row |= {"query_id": j.item.query.id, "status": "ok", "reason": "", "S_modify": s_mod, "S_preserve": s_pre,
                    "BPM_fixed": fixed, "semantic_weight": wsem,
                    "size_state": ("smaller", "unchanged", "larger").index(j.parse.size) - 1,
                    "position_state": ("unchanged", "left", "right", "up", "down").index(j.parse.position),
                    "kind": ("add", "modify", "remove").index(j.parse.kind)}
            rows.append(row)
        return rows

    def score_queries(self, queryset: Any, queries: Sequence[Query], edit_paths: Sequence[Path], *, work_dir: Path,
                      num_workers: int = 0, progress: bool = True) -> Iterator[list[dict[str, Any]]]:
        """Yield lists of result rows (one dict per query)."""
        from benchmark.metrics.chunking import by_source

        qs, paths = by_source(queries, edit_paths)
        samples = _Samples(queryset, qs, paths, self.original_masks == "queryset")
        yield from self._score_chunks(samples, self._score_chunk, desc="bpm", num_workers=num_workers,
                                      progress=progress)

    def model_seconds(self) -> dict[str, float]:
        return {k: v for k, v in self.timings.items() if "forward" in k}


__all__ = ["BpmSuite", "box_mask"]
