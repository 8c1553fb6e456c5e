"""EditValSuite: EditVal's automatic evaluation of every query of a run (docs/editval.md).

Per query: `accuracy` (1 / 0 from the type's detector rule; NaN for the seven types without one) and
`DINO_context` (cosine of DINO ViT-B/16 CLS features of the original and the edit). Per group of the leaderboard:
`FID_type` (FID between the originals and the edits of each edit type, averaged over the group's types;
`benchmark.metrics.editval.summary`), from Inception features carried in every row so shards merge.

Work is batched across a chunk of queries and deduplicated by image content: an original shared by many queries
(or an edit identical to its original) is detected / embedded once. DINO and FID features go through the
process-wide feature cache (`benchmark.metrics.features`), so an input another suite of the process already gave
the same encoder (the conventional suite's DINO ViT-B/16 with the same recipe) is not encoded again; detections are
memoised here (a bounded LRU keyed by image content and name).
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.io.editval_rules import RuleSettings, judge, requests, scale_box
from benchmark.io.model_cache import resolve_device
from benchmark.io.types import EDITVAL_TYPES, MetricInfo, Query
from benchmark.metrics.chunking import QuerySamples
from benchmark.metrics.components import LazyComponents
from benchmark.metrics.memo import LRUCache

VERSION = "1.0"
FID_EDIT, FID_SOURCE = "_fid_edit", "_fid_src"  # per-row Inception features (underscore: never a table column)
BOX_PREFIX, SCORE_PREFIX = "_box_", "raw_score_"  # per role: best box (original's pixel frame) and its score
# (higher_is_better, description) of every leaderboard column; the first two are per query, FID_type per group.
COLUMN_INFO = {
    "accuracy": (True, "EditVal detector-rule accuracy: share of edits passing their type's rule (6 rule types; "
                       "other types have no automatic rule and are left out of this mean)"),
    "DINO_context": (True, "context preservation: cosine of DINO ViT-B/16 CLS features of the original and the edit"),
    "FID_type": (False, "FID between the originals and the edits of each edit type, averaged over the group's types"),
}


@dataclass
class _Loaded:
    query: Query
    original: Any = None   # PIL RGB
    edit: Any = None       # PIL RGB
    original_key: str = ""  # content keys (`_digest`) and float tensors, made on the loader threads
    edit_key: str = ""
    original_t: Any = None
    edit_t: Any = None
    error: str = ""


class _Samples(QuerySamples):
    """Loads one query's original and edit (runs in DataLoader workers)."""

    def item(self, query: Query) -> _Loaded:
        return _Loaded(query)

    def load(self, out: _Loaded, q: Query, edit_path: Path) -> None:
        from benchmark.io.imageio import load_rgb

        out.original, out.original_key, out.original_t = self.original(q, _keyed)
        out.edit, out.edit_key, out.edit_t = _keyed(load_rgb(edit_path))


def _keyed(img: Any) -> tuple[Any, str, Any]:
    """A decoded image with its content key and float tensor (made on the loader threads, not in the scoring loop)."""
    from benchmark.io.imageio import to_float_tensor

    return img, _digest(img), to_float_tensor(img)


def _digest(img: Any) -> str:
    """Content key of a decoded image (pixels and size), so equal images share every model pass."""
    arr = np.asarray(img, dtype=np.uint8)
    return hashlib.blake2b(arr.tobytes() + repr(arr.shape).encode(), digest_size=16).hexdigest()


class _FidEncoder:
    """The FID extractor seen as an encoder of the shared feature cache (`embed_images` = its `features`)."""

    def __init__(self, extractor: Any) -> None:
        self.extractor, self.device = extractor, getattr(extractor, "device", "")
        cls = f"{type(extractor).__module__}.{type(extractor).__qualname__}"
        own = getattr(extractor, "signature", None)  # a reduced-precision extractor names its mode there
        self.signature = (f"fid|{own}|{getattr(extractor, 'dims', '')}" if isinstance(own, str) and own else
                          f"fid|{cls}|{getattr(extractor, 'name', '')}|{getattr(extractor, 'dims', '')}")

    def embed_images(self, images: Any) -> Any:
        return self.extractor.features(images)


def _factory_label(factory: Callable[..., Any] | None) -> str:
    """What a component factory builds (function and its settings), for `components()`; "off" for None."""
    if factory is None:
        return "off"
    func = getattr(factory, "func", factory)
    kw = getattr(factory, "keywords", {}) or {}
    # a folder is named by its last part: leaderboard rows must not carry this machine's paths
    args = ", ".join(f"{k}={Path(v).name if k == 'root' else v}" for k, v in sorted(kw.items())
                     if k not in ("device", "batch_size"))
    return f"{getattr(func, '__qualname__', type(func).__name__)}({args})"


class EditValSuite(LazyComponents):
    """EditVal's automatic evaluation. Learned components are factories called once, lazily:

    detector(device=) -> object with `detect(images, names) -> [ {name: (score, box)} or None ]` (OWL-ViT, or the
    demo world's `oracle`); dino(device=) -> encoder with `embed_images`; fid(device=) -> extractor with
    `features`, or None to leave FID_type out.
    """

    reduced_components = ("dino", "fid")  # follow `precision`; the detector (thresholded) stays fp32

    info = MetricInfo("editval", VERSION, True, description="EditVal detector-rule accuracy, DINO context, FID per type")
    columns = ("accuracy", "DINO_context")
    column_info = COLUMN_INFO
    headline = "accuracy"  # EditVal's figure; FID_type is a per-group summary beside it

    def __init__(self, *, detector: Callable[..., Any], dino: Callable[..., Any], fid: Callable[..., Any] | None = None,
                 threshold: float = 0.1, position_delta: float = 0.25, size_margin: float = 0.1,
                 positional_reference: str = "edit", device: str = "auto", batch_size: int = 16,
                 chunk_size: int = 32, cache_size: int = 1024, precision: str = "fp32", load_threads: int | None = None,
                 prefetch: bool = False) -> None:
        from benchmark.metrics.chunking import check_loading
        from benchmark.metrics.precision import check_precision

        self.settings = RuleSettings(threshold=threshold, position_delta=position_delta, size_margin=size_margin,
                                     positional_reference=positional_reference)
        self._factories = {"detector": detector, "dino": dino, "fid": fid}
        self.device = resolve_device(device)
        self.precision = check_precision(precision, self.device, what="metrics editval")
        self.batch_size, self.chunk_size = batch_size, chunk_size
        self.load_threads, self.prefetch = check_loading(load_threads, prefetch)  # speed only (docs/metrics.md)
        self._models: dict[str, Any] = {}
        self._detections_seen = LRUCache(cache_size)  # DINO / FID features live in the shared feature cache
        self.timings: dict[str, float] = {}

    # -- components -------------------------------------------------------------------------------------------
    def components(self) -> dict[str, str]:
        """The detector, DINO and FID components and the rule settings (recorded in every leaderboard row)."""
        s = self.settings
        return {"detector": _factory_label(self._factories["detector"]), "dino": _factory_label(self._factories["dino"]),
                "fid": _factory_label(self._factories["fid"]),
                "rules": f"threshold={s.threshold} position_delta={s.position_delta}*width "
                         f"size_margin={s.size_margin} positional_reference={s.positional_reference}",
                "precision": self.precision}

    def applies_to(self, query: Query, prompt_kind: str) -> bool:
        """Every EditVal type (accuracy is NaN for the seven without a rule; DINO and FID still apply)."""
        return query.edit_type in EDITVAL_TYPES

    def _tick(self, key: str, t0: float) -> None:
        self.timings[key] = self.timings.get(key, 0.0) + time.perf_counter() - t0

    # -- backbone calls ---------------------------------------------------------------------------------------
    def _detect(self, images: list[Any], names: list[list[str]]) -> list[dict[str, Any] | None]:
        """Per image: name -> (best score, best corner box in its pixels), or None when the detector cannot read
        the image (the oracle, on anything but an exact render of the demo world)."""
        t0 = time.perf_counter()
        out = self._get("detector").detect(images, names)
        self._tick("detector forward", t0)
        return out

    def _embed(self, what: str, images: list[Any]) -> list[np.ndarray]:
        """DINO CLS (`dino`) or Inception (`fid`) features of float (3, H, W) tensors, through the process-wide
        feature cache (benchmark/metrics/features.py): an input any suite of this process already gave the same
        encoder (the conventional suite's `dino_ev` with EditVal's recipe, say) is not encoded again."""
        from benchmark.metrics.features import embed_images

        enc = self._get("dino") if what == "dino" else _FidEncoder(self._get("fid"))
        feats = embed_images(enc, images, batch_size=self.batch_size,
                             timer=self._timer(f"{what} forward"), steps=self.timings)
        return [f.detach().cpu().double().numpy() for f in feats]

    # -- scoring ----------------------------------------------------------------------------------------------
    def _features(self, what: str, keyed: dict[str, Any]) -> dict[str, np.ndarray]:
        """Features of each unique image (content key -> tensor); the shared cache skips those already encoded."""
        return dict(zip(keyed, self._embed(what, list(keyed.values())), strict=True))

    def _detections(self, wanted: dict[str, tuple[Any, set[str]]]) -> dict[tuple[str, str], Any]:
        """(content key, name) -> (score, box) or None (image unreadable by the detector), detecting only the
        names of each image that are not cached."""
        cache = self._detections_seen
        out = {(k, n): cache.get_touch((k, n)) for k, (_, names) in wanted.items() for n in names}
        todo: dict[str, list[str]] = {}
        for (k, n), v in out.items():
            if v is None:
                todo.setdefault(k, []).append(n)
        if todo:
            keys = list(todo)
            results = self._detect([wanted[k][0] for k in keys], [sorted(todo[k]) for k in keys])
            for k, res in zip(keys, results, strict=True):
                for n in todo[k]:
                    # None: the detector cannot read this image (kept as such: the rows record the failure)
                    out[(k, n)] = None if res is None else res.get(n, (0.0, None))
                    if res is not None:
                        cache.put((k, n), out[(k, n)])
        return out

    def _score_chunk(self, chunk: list[_Loaded]) -> list[dict[str, Any]]:
        rows = [{"query_id": it.query.id, "status": "failed", "reason": it.error} for it in chunk if it.error]
        ok = [it for it in chunk if not it.error]
        if not ok:
            return rows
        keys = [(it.original_key, it.edit_key) for it in ok]
        tensors: dict[str, Any] = {}
        wanted: dict[str, tuple[Any, set[str]]] = {}
        for it, (ko, ke) in zip(ok, keys, strict=True):
            tensors.setdefault(ko, it.original_t)
            tensors.setdefault(ke, it.edit_t)
            for image, name in requests(it.query, self.settings).values():
                k, img = (ko, it.original) if image == "original" else (ke, it.edit)
                wanted.setdefault(k, (img, set()))[1].add(name)
        dets = self._detections(wanted) if wanted else {}
        dino = self._features("dino", tensors)
        fid = self._features("fid", tensors) if self._factories["fid"] is not None else {}
        for it, (ko, ke) in zip(ok, keys, strict=True):
            rows.append(self._row(it, ko, ke, dets, dino, fid))
        return rows

    def _row(self, it: _Loaded, ko: str, ke: str, dets: dict, dino: dict, fid: dict) -> dict[str, Any]:
        q = it.query
        (w_o, h_o), (w_e, h_e) = it.original.size, it.edit.size
        boxes: dict[str, Any] = {}
        row: dict[str, Any] = {"query_id": q.id, "status": "ok", "reason": ""}
        for role, (image, name) in requests(q, self.settings).items():
            det = dets[(ko if image == "original" else ke, name)]
            if det is None:
                return {"query_id": q.id, "status": "failed",
                        "reason": f"detector cannot read the {image} image of {q.id} (the oracle detector reads only "
                                  "exact renders of the demo world: use the OWL-ViT detector for other edits)"}
            score, box = det
            # the edit's boxes in the original's pixel frame, so positions and areas compare across sizes
            box = box if image == "original" else scale_box(box, w_o / w_e, h_o / h_e)
            boxes[role] = box if score > self.settings.threshold else None
            row[SCORE_PREFIX + role] = float(score)
            # no box: NaNs (a list column must stay a list of numbers for the part's schema check)
            row[BOX_PREFIX + role] = np.full(4, np.nan) if box is None else np.asarray(box, dtype=np.float64)
        row["accuracy"] = judge(q, boxes, float(w_o), self.settings)
        a, b = dino[ko], dino[ke]
        cos = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b))) if np.any(a) and np.any(b) else math.nan
        row["DINO_context"] = min(1.0, max(-1.0, cos)) if math.isfinite(cos) else math.nan
        if fid:
            row[FID_EDIT], row[FID_SOURCE] = np.asarray(fid[ke], dtype=np.float32), np.asarray(fid[ko], dtype=np.float32)
        return row

    def score_queries(self, queryset: Any, queries: Sequence[Query], edit_paths: Sequence[Path], *, work_dir: Path,
                      num_workers: int = 0, progress: bool = True) -> Iterator[list[dict[str, Any]]]:
        """Yield lists of result rows (one dict per query: accuracy, DINO_context, detections, FID features)."""
        from benchmark.metrics.chunking import by_source

        qs, paths = by_source(queries, edit_paths)
        yield from self._score_chunks(_Samples(queryset, qs, paths), self._score_chunk, desc="editval",
                                      num_workers=num_workers, progress=progress)

    def model_seconds(self) -> dict[str, float]:
        return {k: v for k, v in self.timings.items() if "forward" in k}
