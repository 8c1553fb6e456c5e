"""AugClipSuite: AugCLIP for every query of a run (docs/augclip.md).

Per chunk of queries (sorted by source image): load source and edit (DataLoader workers; centre-cropped to a
square and resized to CLIP's 224 px), get each query's attributes (cache, else the extractor; an extraction
failure is that query's failure row), encode images and texts in shared batches through the process-wide feature
cache (`_embed_images`, `_text_features`: the only backbone calls; an input another suite of the process already
gave the same CLIP is not encoded again), then fit one weighted SVM per query and score.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.io.model_cache import resolve_device
from benchmark.io.types import MetricInfo, Query
from benchmark.metrics.augclip.attributes import AttributeCache, Attributes
from benchmark.metrics.augclip.core import AugClipError, augclip
from benchmark.metrics.chunking import QuerySamples
from benchmark.metrics.components import LazyComponents

VERSION = "1.0"
CLIP_INPUT = 224
TARGET_ANCHORS = ("text", "edit")
TEXT_FIELDS = ("target_caption", "instruction")
COLUMN_INFO = {
    "AugCLIP": (True, "cs(E(edit), E(source) + v), v = minimal move of the source onto the weighted SVM hyperplane "
                      "between source and target attributes"),
    "clipped_queries": (False, "queries with at least one negative attribute weight clipped to min_weight"),
    "clipped_weights": (False, "attribute weights clipped to min_weight, summed over the group's queries"),
}


@dataclass(frozen=True)
class SuiteInfo(MetricInfo):
    """MetricInfo plus the run-time identity (the attribute extractor) that keys the metric signature."""

    identity: dict[str, str] | None = None


def _extractor_signature(factory: Callable[..., Any]) -> tuple[str, Any]:
    """(signature, built extractor or None): the LLM extractor's signature is computed from its settings without
    loading the model; any other extractor is cheap to build (and a file extractor validates its file now)."""
    from benchmark.metrics.augclip.llm import llm_signature, load_llm_extractor

    if getattr(factory, "func", None) is load_llm_extractor:
        return llm_signature(*factory.args, **factory.keywords), None  # type: ignore[attr-defined]
    built = factory()
    return built.signature, built


@dataclass
class _Loaded:
    query: Query
    source: Any = None
    edit: Any = None
    error: str = ""


def clip_square(img: Any) -> Any:
    """CLIP's input recipe on a PIL image: centre crop to a square, resize to 224 (bicubic) -> float (3, 224, 224)."""
    from PIL import Image

    from benchmark.io.imageio import to_float_tensor

    w, h = img.size
    s = min(w, h)
    left, top = (w - s) // 2, (h - s) // 2
    img = img.crop((left, top, left + s, top + s))
    if img.size != (CLIP_INPUT, CLIP_INPUT):
        img = img.resize((CLIP_INPUT, CLIP_INPUT), Image.Resampling.BICUBIC)
    return to_float_tensor(img)


class _Samples(QuerySamples):
    def item(self, query: Query) -> _Loaded:
        return _Loaded(query)

    def load(self, out: _Loaded, q: Query, edit_path: Path) -> None:
        from benchmark.io.imageio import load_rgb

        out.source = self.original(q, clip_square)
        out.edit = clip_square(load_rgb(edit_path))


class AugClipSuite(LazyComponents):
    """AugCLIP (specification: docs/augclip.md). `clip(device=)` -> ClipEncoder; `extractor(device=)` -> an
    attribute extractor (`benchmark.metrics.augclip.attributes`)."""

    info = MetricInfo("augclip", VERSION, True, description="AugCLIP: edit vs the minimal SVM move of the source")
    columns = ("AugCLIP",)
    column_info = COLUMN_INFO

    def __init__(self, *, clip: Callable[..., Any], extractor: Callable[..., Any], attribute_cache: str | None = None,
                 C: float = 1.0, min_weight: float = 1e-3, target_anchor: str = "text",
                 target_text: Sequence[str] = TEXT_FIELDS, device: str = "auto", batch_size: int = 32,
                 chunk_size: int = 64, precision: str = "fp32", load_threads: int | None = None,
                 prefetch: bool = False) -> None:
        from benchmark.metrics.chunking import check_loading
        from benchmark.metrics.precision import check_precision

        if target_anchor not in TARGET_ANCHORS:
            raise ValueError(f"target_anchor must be one of {TARGET_ANCHORS}, not {target_anchor!r}")
        bad = [f for f in target_text if f not in TEXT_FIELDS + ("source_caption",)]
        if bad or not target_text:
            raise ValueError(f"target_text must list fields among {TEXT_FIELDS}, not {list(target_text)}")
        if not (C > 0 and min_weight > 0):
            raise ValueError(f"C and min_weight must be > 0 (got C={C}, min_weight={min_weight})")
        self.device = resolve_device(device)
        self.precision = check_precision(precision, self.device, what="metrics augclip")
        self._clip_factory, self._extractor_factory = clip, extractor
        self.C, self.min_weight, self.target_anchor = float(C), float(min_weight), target_anchor
        self.target_text = tuple(target_text)
        self.batch_size, self.chunk_size = batch_size, chunk_size
        self.load_threads, self.prefetch = check_loading(load_threads, prefetch)  # speed only (docs/metrics.md)
        self.cache = AttributeCache(attribute_cache) if attribute_cache else None  # validated now, before any work
        self.extractor_signature, self._extractor = _extractor_signature(extractor)
        self._clip: Any = None
        self.timings: dict[str, float] = {}
        self.info = SuiteInfo(AugClipSuite.info.name, VERSION, True, description=AugClipSuite.info.description,
                              identity={"extractor": self.extractor_signature})

    # -- components -------------------------------------------------------------------------------------------
    @property
    def clip(self) -> Any:
        from benchmark.metrics.precision import with_precision

        if self._clip is None:
            t0 = time.perf_counter()
            self._clip = with_precision(self._clip_factory(device=self.device), self.precision)
            self.timings["load clip"] = time.perf_counter() - t0
        return self._clip

    @property
    def extractor(self) -> Any:
        if self._extractor is None:
            t0 = time.perf_counter()
            ex = self._extractor_factory(device=self.device)
            self.timings["load extractor"] = time.perf_counter() - t0
            if ex.signature != self.extractor_signature:
                raise RuntimeError(f"the attribute extractor loaded as {ex.signature!r}, but the run was keyed as "
                                   f"{self.extractor_signature!r}; scores would be filed under the wrong signature")
            self._extractor = ex
        return self._extractor

    def components(self) -> dict[str, str]:
        kw = getattr(self._clip_factory, "keywords", {})
        return {"extractor": self.extractor_signature, "clip": f"{kw.get('arch', '?')}/{kw.get('tag', '?')}",
                "target_anchor": self.target_anchor, "target_text": ",".join(self.target_text),
                "C": f"{self.C:g}", "min_weight": f"{self.min_weight:g}",
                "attribute_cache": str(self.cache.path) if self.cache else "off", "precision": self.precision}

    def applies_to(self, query: Query, prompt_kind: str) -> bool:
        return True

    # -- backbone calls (the only ones), through the process-wide feature cache ------------------------------
    def _embed_images(self, images: Sequence[Any]) -> np.ndarray:
        """L2-normalised CLIP features (N, D) of float (3, 224, 224) images; an image any suite of this process
        already gave the same CLIP is not encoded again (`benchmark.metrics.features`)."""
        from benchmark.metrics.features import embed_images

        feats = embed_images(self.clip, list(images), batch_size=self.batch_size,
                             timer=self._timer("clip image forward"), steps=self.timings)
        return np.stack([f.cpu().numpy() for f in feats]).astype(np.float64)

    def _text_features(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """L2-normalised CLIP features of `texts`, each distinct text encoded once per process and CLIP."""
        from benchmark.metrics.features import embed_texts

        uniq = list(dict.fromkeys(texts))
        feats = embed_texts(self.clip, uniq, batch_size=self.batch_size, timer=self._timer("clip text forward"))
        return {t: f.cpu().numpy().astype(np.float64) for t, f in zip(uniq, feats, strict=True)}

    def _target_text(self, q: Query) -> tuple[int, str]:
        """(position in `target_text` of the field used, its text); (-1, "") when every field is empty."""
        for i, f in enumerate(self.target_text):
            v = getattr(q, f) or ""
            if v.strip():
                return i, v
        return -1, ""

    def attributes(self, queries: Sequence[Query]) -> list[Attributes | str]:
        """Each query's attributes (cache first, then the extractor; new ones are written to the cache) or a
        failure reason."""
        sig = self.extractor_signature
        out: list[Attributes | str | None] = [self.cache.get(sig, q) if self.cache else None for q in queries]
        todo = [i for i, a in enumerate(out) if a is None]
        if todo:
            t0 = time.perf_counter()
            got = self.extractor.extract([queries[i] for i in todo])
            self.timings["attribute extraction"] = self.timings.get("attribute extraction", 0.0) + time.perf_counter() - t0
            for i, a in zip(todo, got, strict=True):
                out[i] = a
            if self.cache:
                self.cache.put(sig, {queries[i]: a for i, a in zip(todo, got, strict=True) if isinstance(a, Attributes)})
        return out  # type: ignore[return-value]

    def score_features(self, s: np.ndarray, e: np.ndarray, anchor: np.ndarray, d_s: np.ndarray,
                       d_t: np.ndarray) -> dict[str, Any]:
        """One query's AugCLIP and diagnostics from CLIP features (rows: d_s / d_t may have zero rows)."""
        r = augclip(s, e, e if self.target_anchor == "edit" else anchor, d_s, d_t, C=self.C, min_weight=self.min_weight)
        return {"AugCLIP": r.score, "clipped_weights": r.plane.n_clipped, "misclassified": r.plane.misclassified,
                "source_margin": r.source_margin, "n_source_set": r.n_source, "n_target_set": r.n_target}

    def _score_chunk(self, items: list[_Loaded]) -> list[dict[str, Any]]:
        rows = [{"query_id": it.query.id, "status": "failed", "reason": it.error} for it in items if it.error]
        ok = [it for it in items if not it.error]
        if not ok:
            return rows
        attrs = self.attributes([it.query for it in ok])
        good = []
        for it, a in zip(ok, attrs, strict=True):
            field, text = self._target_text(it.query)
            if isinstance(a, str):
                rows.append({"query_id": it.query.id, "status": "failed", "reason": a})
            elif not text:
                rows.append({"query_id": it.query.id, "status": "failed",
                             "reason": f"no target text: the query's {' / '.join(self.target_text)} are empty"})
            else:
                good.append((it, a, field, text))
        if not good:
            return rows
        srcs = list(dict.fromkeys(it.query.image for it, *_ in good))
        by_img = {it.query.image: it.source for it, *_ in good}
        feats = self._embed_images([by_img[k] for k in srcs] + [it.edit for it, *_ in good])
        src_f = dict(zip(srcs, feats[: len(srcs)], strict=True))
        edit_f = feats[len(srcs):]
        tf = self._text_features([t for _, a, _, text in good for t in (text, *a.source, *a.target)])
        d = feats.shape[1]
        t0 = time.perf_counter()
        for (it, a, field, text), e in zip(good, edit_f, strict=True):
            q = it.query
            # score parts hold numbers only (besides ids and reasons): the field used is its index in target_text;
            # the attributes themselves are reproducible from the query (structured) or kept in attribute_cache
            base = {"query_id": q.id, "target_text_field": field}
            try:
                r = self.score_features(src_f[q.image], e, tf[text],
                                        np.array([tf[t] for t in a.source]).reshape(-1, d),
                                        np.array([tf[t] for t in a.target]).reshape(-1, d))
            except AugClipError as err:
                rows.append(base | {"status": "failed", "reason": str(err)})
                continue
            status = "ok" if math.isfinite(r["AugCLIP"]) else "failed"
            rows.append(base | {"status": status, "reason": "" if status == "ok" else "AugCLIP is not finite"} | r)
        self.timings["svm"] = self.timings.get("svm", 0.0) + time.perf_counter() - t0
        return rows

    def score_queries(self, queryset: Any, queries: Sequence[Query], edit_paths: Sequence[Path], *, work_dir: Path,
                      num_workers: int = 0, progress: bool = True) -> Iterator[list[dict[str, Any]]]:
        """Yield lists of result rows (one dict per query)."""
        from benchmark.metrics.chunking import by_source

        qs, paths = by_source(queries, edit_paths)
        yield from self._score_chunks(_Samples(queryset, qs, paths), self._score_chunk, desc="augclip",
                                      num_workers=num_workers, progress=progress)

    def model_seconds(self) -> dict[str, float]:
        return {k: v for k, v in self.timings.items() if "forward" in k or k == "attribute extraction"}
