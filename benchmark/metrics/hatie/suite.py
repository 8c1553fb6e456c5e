"""HatieSuite: scores every query of a run with HATIE's workflows, batched across queries.

Per chunk of queries (sorted by source image so an original's features are reused): load the 512 px original and
edit (DataLoader workers), segment the edits that have no cached segmentation (one batched segmenter call), build
every query's plan, evaluate all plans' requests in shared backbone batches, and aggregate each query's raw
sub-scores into OF / BF / OC / BC. FID features of edits and originals ride along in the rows so shards merge.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.io.imageio import float_chw
from benchmark.io.model_cache import resolve_device
from benchmark.io.types import HATIE_TYPES, MetricInfo, Query
from benchmark.metrics.chunking import SOURCE_MEMO, QuerySamples, check_loading, query_loader
from benchmark.metrics.hatie.primitives import IMAGE_SIZE
from benchmark.metrics.hatie.weights import CRITERIA, TOTAL_WEIGHTS_KEY, load_weight_profile, query_criteria
from benchmark.metrics.hatie.workflows import (
    ADD_RELATION_TEXT,
    WORKFLOWS,
    InputIds,
    QueryInput,
    needed_masks,
    relevant_classes,
)
from benchmark.metrics.memo import Memo
from benchmark.metrics.timing import step_time

VERSION = "1.0"
SEGMENTATIONS_DIR = "segmentations"
QUARANTINE_DIR = "_quarantine"  # under segmentations/: cache files that failed validation, with the reason
# How the segmenter's input is made (release: cv2 bilinear to 512 px); part of the segmentation cache key.
SEG_INPUT = "cv2-linear-512"
# backbones whose forward passes follow `precision` (the segmenter's thresholded detections and VQA stay fp32)
REDUCED = ("clip", "dino", "lpips", "fid")
SOURCE_FEATURE_CACHE = 1024  # originals' FID features kept in memory (bounded: memory must not grow with the set)
FID_EDIT, FID_SOURCE = "_fid_edit", "_fid_src"  # per-row feature columns (underscore: never aggregated as metrics)
# (higher_is_better, description) of every leaderboard column the suite produces; the first four are per query,
# the rest model-level (computed by `summary.summarize`).
COLUMN_INFO = {
    "Total": (True, "0.8 * (0.3 BC + 0.1 OC + 0.2 OF + 0.4 BF) + 0.2 IQ"),
    "OF": (True, "object fidelity: the requested object change happened"),
    "BF": (True, "background fidelity: the requested background / style change happened"),
    "OC": (True, "object consistency: what should stay about the object stayed"),
    "BC": (True, "background consistency: everything else stayed"),
    "IQ": (True, "image quality: 1 - tanh(FID / 25) between the originals and the edits"),
    "FID": (False, "Frechet Inception distance between the originals and the edits"),
    "score": (True, "per type / class: the weighted mean of the criteria the group defines"),
}


@dataclass(frozen=True)
class SuiteInfo(MetricInfo):
    """MetricInfo plus what the config alone does not pin down (resolved at run time), for the metric signature."""

    identity: dict[str, str] = field(default_factory=dict)


def _segmenter_identity(factory: Callable[..., Any]) -> str:
    """The signature `factory` will build, resolved without loading weights when it is `build_segmenter` (so
    `backend: auto` is pinned before the run is keyed); "" for other factories (their model's own signature is
    then used once loaded)."""
    from benchmark.models.segmenter import build_segmenter, resolve_segmenter

    if getattr(factory, "func", None) is build_segmenter:
        kw = {k: v for k, v in factory.keywords.items() if k in ("backend", "weights", "threshold")}  # type: ignore[attr-defined]
        return resolve_segmenter(*factory.args, **kw).signature  # type: ignore[attr-defined]
    return ""


@dataclass
class _Loaded:
    query: Query
    original: Any = None
    edit: Any = None
    edit_u8: Any = None  # the segmenter's uint8 input (None when the loader read the cached segmentation)
    gt_masks: dict[str, Any] | None = None
    edit_sha: str = ""
    ids: Any = None  # workflows.InputIds: the files the images were read from
    error: str = ""
    seg: Any = None  # the cached segmentation, read by the loader (None: not cached, or not read there)
    seg_error: str = ""  # why the cached segmentation was not trusted (the suite quarantines the file)
    plan: Any = None  # the query's engine.Plan, made by the loader when it read the segmentation (else by the suite)
    ahead_s: dict[str, float] = field(default_factory=dict)  # seconds of the loader's work besides loading, by step


# timings keys of the work done ahead on other threads (loader or planning threads; not steps of the scoring thread)
AHEAD_PLAN, AHEAD_INPUTS = "plan, on other threads", "edit-side backbone inputs, on other threads"


class _HatieSamples(QuerySamples):
    """Loads one query's 512 px images and ground-truth masks (runs in DataLoader workers). An original and its
    masks are decoded once for all of its queries (they arrive together, sorted by source image); the memo is
    keyed by the query set's file path, which the query set does not change during a run."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # self.sources: source path -> (PIL size, float 512 px original, sha256)
        # (folder, segmenter signature) of the segmentation cache: set, the loader reads each edit's cached
        # segmentation too (with the images, on the loader threads); None: the suite reads it
        self.seg_cache: tuple[Path, str] | None = None
        # item, segmentation -> (the query's Plan, seconds by step): set, the loader also plans each query whose
        # segmentation it read (on the loader threads, so a chunk's plans are made on several cores); None: the
        # suite plans every query. Only in this process: a plan holds closures, which DataLoader worker processes
        # could not send back.
        self.planner: Callable[[_Loaded, Any], tuple[Any, dict[str, float]]] | None = None
        self._masks = Memo(4 * SOURCE_MEMO)  # (mask path, source size) -> (float 512 px mask, sha256)

    def item(self, query: Query) -> _Loaded:
        return _Loaded(query)

    def _source(self, path: Path) -> tuple[tuple[int, int], Any, str]:
        import hashlib

        from benchmark.io.imageio import load_rgb

        def make() -> tuple[tuple[int, int], Any, str]:
            data = _read(path)
            src = load_rgb(path, data)
            return src.size, float_chw(np.array(at512(src))), hashlib.sha256(data).hexdigest()

        return self.sources.get(path, make)

    def _mask(self, path: Path, size: tuple[int, int]) -> tuple[Any, str]:
        import hashlib

        import torch
        import torch.nn.functional as F

        from benchmark.io.imageio import load_mask

        def make() -> tuple[Any, str]:
            sha = hashlib.sha256(_read(path)).hexdigest()  # digest first: the file load_mask then checks and decodes
            m = torch.from_numpy(load_mask(path, size)).float()
            return F.interpolate(m[None, None], size=(IMAGE_SIZE, IMAGE_SIZE), mode="nearest")[0, 0], sha

        return self._masks.get((path, size), make)

    def load(self, out: _Loaded, q: Query, edit_path: Path) -> None:
        import hashlib

        from benchmark.io.imageio import ImageInputError, load_rgb

        src_size, out.original, src_sha = self._source(self.queryset.path(q.image))
        edit_bytes = edit_path.read_bytes()
        out.edit_sha = hashlib.sha256(edit_bytes).hexdigest()
        edit = load_rgb(edit_path, edit_bytes)  # one read: hashed and decoded
        scored = np.array(at512(edit))  # uint8 until here: one copy, converted once
        out.edit = float_chw(scored)
        self._cached_segmentation(out)
        # the segmenter's input, unless its segmentation is already cached (then nothing needs it)
        out.edit_u8 = scored if edit.size == (IMAGE_SIZE, IMAGE_SIZE) else \
            segmenter_input(edit) if out.seg is None else None
        objs = {o.id: o for o in (q.target, q.anchor, *q.editable_objects) if o is not None}
        out.gt_masks, mask_shas = {}, {}
        for oid in needed_masks(q):
            o = objs[oid]
            if not o.mask:
                raise ImageInputError(f"query {q.id}: object {oid} ({o.name}) has no mask in the query set")
            m, mask_shas[oid] = self._mask(self.queryset.path(o.mask), src_size)
            if not m.any():
                raise ImageInputError(f"query {q.id}: the mask of object {oid} ({o.name}) is empty")
            out.gt_masks[oid] = m
        out.ids = InputIds(src_sha, out.edit_sha, mask_shas)
        if self.planner is not None and out.seg is not None:
            out.plan, out.ahead_s = self.planner(out, out.seg)

    def _cached_segmentation(self, out: _Loaded) -> None:
        """Read the edit's cached segmentation into `out.seg` (or why it is not trusted into `out.seg_error`)."""
        if self.seg_cache is None:
            return
        from benchmark.models.segmenter import SegmentationCacheError, load_segmentation

        folder, sig = self.seg_cache
        p = folder / _cache_name(out)
        if p.is_file():
            try:
                out.seg = load_segmentation(p, edit_sha256=out.edit_sha, segmenter=sig, shape=(IMAGE_SIZE, IMAGE_SIZE))
            except SegmentationCacheError as err:
                out.seg_error = str(err)


def _read(path: Path) -> bytes:
    """A query-set file's bytes; a missing one fails as `load_rgb` / `load_mask` would."""
    from benchmark.io.imageio import ImageInputError

    if not path.is_file():
        raise ImageInputError(f"{path}: file not found (check the query set folder or re-run its download)")
    return path.read_bytes()


def at512(img: Any) -> Any:
    """The image the workflows score, as the release makes it (`evaluation/score.py`): an image that is not
    512 x 512 is resized with PIL's bicubic filter (`Image.resize`'s default), one that is stays untouched. The
    release never resizes originals (its set is 512 px); editmeter resizes any other set's originals the same way
    as edits, so an identity edit of a 256 px source still scores as identical."""
    from PIL import Image

    if img.size == (IMAGE_SIZE, IMAGE_SIZE):
        return img
    return img.resize((IMAGE_SIZE, IMAGE_SIZE), Image.Resampling.BICUBIC)


def segmenter_input(img: Any) -> Any:
    """uint8 (512, 512, 3) array the segmenter sees, as the release makes it (`evaluation/segment_targets.py`): an
    edit that is not 512 x 512 is resized with OpenCV's bilinear `cv2.resize` (a different filter from scoring's)."""
    import cv2

    arr = np.asarray(img, dtype=np.uint8)
    if arr.shape[:2] == (IMAGE_SIZE, IMAGE_SIZE):
        return arr
    return cv2.resize(arr, (IMAGE_SIZE, IMAGE_SIZE), interpolation=cv2.INTER_LINEAR)


class HatieSuite:
    """HATIE's evaluation (specification: docs/hatie.md). Learned components are factories (called once, lazily):

    segmenter(device=) -> Segmenter; clip(device=) -> ClipEncoder; dino(device=) -> DinoEncoder; lpips(device=) ->
    LpipsDistance; fid(device=) -> FeatureExtractor or None to skip IQ; vqa(device=) -> VQA scorer or None (off).
    `load_threads`: threads that load a chunk's images together when scoring runs without DataLoader workers (None:
    one per core, at most 4; 1: one by one); speed only, the items are the same. `prefetch`: those threads load (and
    plan) the next chunk while the current one is scored, and make the CLIP / DINOv2 inputs of its edit-side images
    too (a chunk the suite segments itself is segmented before the previous one is scored, and planned on threads of
    its own), for a GPU that leaves the host's cores idle during its forward passes (on a CPU they would compete for
    the cores); speed only, the plans and inputs are the same.
    """

    info = MetricInfo("hatie", VERSION, True, description="HATIE fidelity/consistency criteria and Total")
    columns = CRITERIA
    column_info = COLUMN_INFO

    def __init__(self, *, segmenter: Callable[..., Any], clip: Callable[..., Any], dino: Callable[..., Any],
                 lpips: Callable[..., Any], fid: Callable[..., Any] | None = None, vqa: Callable[..., Any] | None = None,
                 device: str = "auto", batch_size: int = 32, chunk_size: int = 32,
                 add_relation_text: str = ADD_RELATION_TEXT, cache_size: int = 4096, weights: str | None = None,
                 precision: str = "fp32", load_threads: int | None = None, prefetch: bool = False) -> None:
        from benchmark.metrics.precision import check_precision

        if add_relation_text not in ("anchor", "target"):
            raise ValueError(f"add_relation_text must be 'anchor' or 'target', not {add_relation_text!r}")
        # Total's weight profile (docs/metaeval.md): validated now, before any work; applied at aggregation
        self.weight_profile = load_weight_profile(weights)
        self._factories = {"segmenter": segmenter, "clip": clip, "dino": dino, "lpips": lpips, "fid": fid, "vqa": vqa}
        self.device = resolve_device(device)
        # backbones' forward numerics (benchmark/metrics/precision.py); the segmenter and VQA always run in fp32
        self.precision = check_precision(precision, self.device, what="metrics hatie")
        self.batch_size, self.chunk_size, self.cache_size = batch_size, chunk_size, cache_size
        # threads that load a chunk's images together when there are no DataLoader workers (speed only)
        self.load_threads, self.prefetch = check_loading(load_threads, prefetch)
        self.add_relation_text = add_relation_text
        self._models: dict[str, Any] = {}
        self.timings: dict[str, float] = {}
        self.fid_items = 0  # images through the FID extractor (edits + originals not in the source cache)
        self._seg_identity = _segmenter_identity(segmenter)
        # the resolved segmenter (auto -> detectron2 or torchvision, and its weights) keys the metric signature
        self.info = SuiteInfo(HatieSuite.info.name, HatieSuite.info.version, True,
                              description=HatieSuite.info.description, identity={"segmenter": self.segmenter_signature})

    # -- components -------------------------------------------------------------------------------------------
    def _get(self, name: str) -> Any:
        from benchmark.metrics.precision import with_precision

        if name not in self._models:
            f = self._factories[name]
            if f is None:
                self._models[name] = None
            else:
                t0 = time.perf_counter()
                model = f(device=self.device)
                self.timings[f"load {name}"] = time.perf_counter() - t0
                if name == "segmenter" and self._seg_identity and model.signature != self._seg_identity:
                    raise RuntimeError(f"the segmenter loaded as {model.signature!r}, but the run was keyed as "
                                       f"{self._seg_identity!r}; scores would be filed under the wrong signature")
                self._models[name] = with_precision(model, self.precision) if name in REDUCED else model
        return self._models[name]

    @property
    def segmenter_signature(self) -> str:
        """The segmenter's identity plus how its input is made (keys the cache, the signature and `components`)."""
        ident = self._seg_identity or self._get("segmenter").signature
        return f"{ident}|input:{SEG_INPUT}"

    @property
    def vqa_on(self) -> bool:
        return self._factories["vqa"] is not None

    def components(self) -> dict[str, str]:
        """Which optional components are on (recorded in every leaderboard row)."""
        vqa = self._factories["vqa"]
        vqa_id = getattr(vqa, "keywords", {}).get("model_id", "custom") if vqa is not None else None
        return {"vqa": f"on ({vqa_id})" if vqa is not None else "off", "iq": "on" if self._factories["fid"] is not None else "off",
                "add_relation_text": self.add_relation_text, "segmenter": self.segmenter_signature,
                "precision": self.precision,
                "weights": self.weight_profile.name, TOTAL_WEIGHTS_KEY: self.weight_profile.record()}

    def applies_to(self, query: Query, prompt_kind: str) -> bool:
        """HATIE scores obj_remove only for instruction-based editors."""
        return query.edit_type in HATIE_TYPES and not (query.edit_type == "obj_remove" and prompt_kind != "instruction")

    # -- scoring ----------------------------------------------------------------------------------------------
    def _segment(self, items: list[_Loaded], cache_dir: Path) -> list[Any]:
        from benchmark.models.segmenter import SegmentationCacheError, load_segmentation, save_segmentation

        seg_model = self._get("segmenter")
        sig = self.segmenter_signature
        folder = self._seg_folder(cache_dir)
        shape = (IMAGE_SIZE, IMAGE_SIZE)
        out: list[Any] = [None] * len(items)
        todo = []
        with step_time(self.timings, "segmentation cache read"):
            for i, it in enumerate(items):
                p = folder / _cache_name(it)
                if it.seg is not None:  # read by the loader
                    out[i] = it.seg
                    continue
                if it.seg_error and p.is_file():  # the loader did not trust it: moved aside, recomputed
                    _quarantine(p, cache_dir, it.seg_error)
                elif p.is_file():
                    try:
                        out[i] = load_segmentation(p, edit_sha256=it.edit_sha, segmenter=sig, shape=shape)
                        continue
                    except SegmentationCacheError as err:
                        _quarantine(p, cache_dir, str(err))
                todo.append(i)
        if todo:
            t0 = time.perf_counter()
            segs = seg_model.segment([items[i].edit_u8 for i in todo])
            self.timings["segmenter forward"] = self.timings.get("segmenter forward", 0.0) + time.perf_counter() - t0
            for i, s in zip(todo, segs, strict=True):
                save_segmentation(s, folder / _cache_name(items[i]), edit_sha256=items[i].edit_sha, segmenter=sig,
                                  shape=shape)
                out[i] = s
        return out

    def _batch_buffer(self, n: int, like: Any) -> Any:
        """A contiguous (n, *like.shape) tensor of like's dtype and device, a slice of one buffer kept for the next
        batches (n at most batch_size; made anew when the image shape, dtype or device changes)."""
        import torch

        buf = getattr(self, "_fid_buffer", None)
        shape = (max(n, self.batch_size), *like.shape)
        if buf is None or buf.shape[1:] != shape[1:] or buf.shape[0] < n or buf.dtype != like.dtype \
                or buf.device != like.device:
            buf = self._fid_buffer = torch.empty(shape, dtype=like.dtype, device=like.device)
        return buf[:n]

    def _seg_folder(self, cache_dir: Path) -> Path:
        """This segmenter's folder of the segmentation cache under `cache_dir` (made if missing)."""
        folder = cache_dir / _safe(self.segmenter_signature)
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def _fid_features(self, items: list[_Loaded], src_cache: dict[str, Any]) -> tuple[list[Any], list[Any]]:
        import torch

        ext = self._get("fid")
        if ext is None:
            return [None] * len(items), [None] * len(items)
        def features(images: list[Any]) -> Any:
            with step_time(self.timings, "batch assembly"):
                # into the suite's own buffer: the same contiguous batch torch.stack makes, without faulting in
                # fresh pages for every batch (a batch of 32 512 px images is 100 MB, above the size malloc reuses)
                batch = torch.stack(images, out=self._batch_buffer(len(images), images[0]))
            with step_time(self.timings, "fid forward"):
                return ext.features(batch).cpu().numpy()

        edit_f = []
        for s in range(0, len(items), self.batch_size):
            edit_f.extend(features([it.edit for it in items[s : s + self.batch_size]]))
        self.fid_items += len(items)
        need = list(dict.fromkeys(it.query.image for it in items if src_cache.get_touch(it.query.image) is None))
        by_img = {it.query.image: it.original for it in items}
        for s in range(0, len(need), self.batch_size):
            chunk = need[s : s + self.batch_size]
            src_cache.update(zip(chunk, features([by_img[k] for k in chunk]), strict=True))
            self.fid_items += len(chunk)
        return edit_f, [src_cache[it.query.image] for it in items]

    def score_queries(self, queryset: Any, queries: Sequence[Query], edit_paths: Sequence[Path], *, work_dir: Path,
                      num_workers: int = 0, progress: bool = True) -> Iterator[list[dict[str, Any]]]:
        """Yield lists of result rows (one dict per query: criteria, raw sub-scores, branch, FID features)."""
        from tqdm import tqdm

        from benchmark.metrics.hatie.engine import SimilarityEngine
        from benchmark.metrics.memo import LRUCache

        order = sorted(range(len(queries)), key=lambda i: (queries[i].image, queries[i].id))
        qs = [queries[i] for i in order]
        paths = [edit_paths[i] for i in order]
        engine = SimilarityEngine(self._get("clip"), self._get("dino"), self._get("lpips"), self._get("vqa"),
                                  batch_size=self.batch_size, cache_size=self.cache_size)
        self.engine = engine
        src_feats: Any = LRUCache(SOURCE_FEATURE_CACHE)  # queries are sorted by image: a few recent ones suffice
        samples = _HatieSamples(queryset, qs, paths)
        samples.seg_cache = (self._seg_folder(work_dir / SEGMENTATIONS_DIR), self.segmenter_signature)
        # made ahead: with prefetch, plans come with their edit-side backbone inputs
        plan_ahead = partial(self._plan_ahead, engine=engine if self.prefetch else None)
        if num_workers == 0:  # loader threads (or this thread) plan the queries whose segmentation is cached
            samples.planner = plan_ahead
        loader = query_loader(samples, chunk_size=self.chunk_size, num_workers=num_workers,
                              load_threads=self.load_threads, prefetch=self.prefetch)
        bar = tqdm(total=len(qs), desc="hatie", unit="query", disable=not progress, leave=False)
        # with prefetch, plans the suite makes itself (segmented here, not read from the cache) are made on threads
        # of their own while the previous chunk is scored
        planners = ThreadPoolExecutor(self.load_threads, thread_name_prefix="editmeter-plan") \
            if self.prefetch and num_workers == 0 else None

        def segment_and_plan(chunk: list[_Loaded]) -> tuple[list[_Loaded], list[_Loaded], list[Any]]:
            """The chunk's loaded and failed items, and a plan (or a pending one) per loaded item."""
            ok = [it for it in chunk if not it.error]
            segs = self._segment(ok, work_dir / SEGMENTATIONS_DIR) if ok else []
            with step_time(self.timings, "plan (crops, edges, pyramids)"):
                # a plan the loader made is the one this would make: same item, same segmentation
                plans = [it.plan if it.plan is not None and it.seg is s
                         else planners.submit(plan_ahead, it, s) if planners is not None
                         else self._plan(it, s) for it, s in zip(ok, segs, strict=True)]
            return chunk, ok, plans

        def score(chunk: list[_Loaded], ok: list[_Loaded], plans: list[Any]) -> list[dict[str, Any]]:
            rows = [{"query_id": it.query.id, "status": "failed", "reason": it.error} for it in chunk if it.error]
            if ok:
                with step_time(self.timings, "plan (crops, edges, pyramids)"):  # waiting for plans made ahead
                    plans = [self._made_ahead(p) if isinstance(p, Future) else p for p in plans]
                raws = engine.run(plans)
                f_edit, f_src = self._fid_features(ok, src_feats)
                with step_time(self.timings, "rows (criteria)"):
                    for it, raw, fe, fs in zip(ok, raws, f_edit, f_src, strict=True):
                        rows.append(_row(it, raw, fe, fs))
            bar.update(len(chunk))
            return rows

        try:
            pending: tuple[list[_Loaded], list[_Loaded], list[Any]] | None = None
            for chunk in self._chunks(loader):
                ready = segment_and_plan(chunk)
                if planners is None:  # one chunk at a time
                    yield score(*ready)
                    continue
                # with prefetch this chunk was segmented (and its plans started) before the previous one is scored
                if pending is not None:
                    yield score(*pending)
                pending = ready
            if pending is not None:
                yield score(*pending)
        finally:
            if planners is not None:
                planners.shutdown(wait=True, cancel_futures=True)
        bar.close()

    def _chunks(self, loader: Any) -> Iterator[list[_Loaded]]:
        """The loader's items in chunks of `chunk_size`, timing the wait for them ("load images")."""
        chunk: list[_Loaded] = []
        it_loader, t0 = iter(loader), time.perf_counter()
        for item in it_loader:
            self.timings["load images"] = self.timings.get("load images", 0.0) + time.perf_counter() - t0
            self._add_ahead(item.ahead_s)  # inside the wait above (loader threads): counted apart, not as steps
            chunk.append(item)
            if len(chunk) >= self.chunk_size:
                yield chunk
                chunk = []
            t0 = time.perf_counter()
        if chunk:
            yield chunk

    def _plan_ahead(self, it: _Loaded, seg: Any, engine: Any | None) -> tuple[Any, dict[str, float]]:
        """The query's plan, made off the scoring thread, with its edit-side backbone inputs when an engine is given
        (engine.prepare_inputs), and the seconds of each step."""
        t0 = time.perf_counter()
        plan = self._plan(it, seg)
        seconds = {AHEAD_PLAN: time.perf_counter() - t0}
        if engine is not None:
            t0 = time.perf_counter()
            engine.prepare_inputs(plan)
            seconds[AHEAD_INPUTS] = time.perf_counter() - t0
        return plan, seconds

    def _made_ahead(self, future: Any) -> Any:
        plan, seconds = future.result()
        self._add_ahead(seconds)
        return plan

    def _add_ahead(self, seconds: dict[str, float]) -> None:
        for k, v in seconds.items():
            self.timings[k] = self.timings.get(k, 0.0) + v

    def _plan(self, it: _Loaded, seg: Any) -> Any:
        """The query's Plan (workflows), from its loaded images and its segmentation."""
        from benchmark.models.segmenter import restrict

        return WORKFLOWS[it.query.edit_type](QueryInput(
            it.query, it.original, it.edit, it.gt_masks or {}, restrict(seg, relevant_classes(it.query)),
            vqa=self.vqa_on, add_relation_text=self.add_relation_text, ids=it.ids))

    def step_seconds(self) -> dict[str, float]:
        """Seconds of every non-forward step the suite and its engine time (model loads excluded), in this thread:
        work done ahead on other threads is in the waits for it ("load images", "plan"), its own seconds in
        `ahead_seconds`."""
        eng = getattr(self, "engine", None)
        loads = {f"load {name}" for name in self._factories}
        out = {k: v for k, v in self.timings.items()
               if "forward" not in k and k not in loads and k not in (AHEAD_PLAN, AHEAD_INPUTS)}
        for k, v in (eng.step_seconds.items() if eng is not None else ()):
            out[k] = out.get(k, 0.0) + v
        return out

    def ahead_seconds(self) -> dict[str, float]:
        """Seconds of the work done ahead on other threads besides loading: plans, edit-side backbone inputs (summed
        over threads; they overlap the scoring thread's work)."""
        return {k: v for k, v in self.timings.items() if k in (AHEAD_PLAN, AHEAD_INPUTS)}

    def model_seconds(self) -> dict[str, float]:
        eng = getattr(self, "engine", None)
        out = {k: v for k, v in self.timings.items() if "forward" in k}
        if eng is not None:
            out.update({f"{k} forward": v for k, v in eng.model_seconds.items()})
        return out


def _row(it: _Loaded, raw: dict[str, Any], f_edit: Any, f_src: Any) -> dict[str, Any]:
    """One query's result row: criteria, branch, raw sub-scores and the FID features."""
    crit = query_criteria(it.query.edit_type, raw)
    row = {"query_id": it.query.id, "status": "ok", "reason": "", **crit, "branch": raw.pop("branch")}
    row.update({f"raw_{k}": (math.nan if v is None else float(v)) for k, v in raw.items()})
    row[FID_EDIT] = None if f_edit is None else np.asarray(f_edit, dtype=np.float32)
    row[FID_SOURCE] = None if f_src is None else np.asarray(f_src, dtype=np.float32)
    return row


def _safe(sig: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in sig)


def _cache_name(it: _Loaded) -> str:
    return f"{it.query.id}-{it.edit_sha[:16]}.npz"


def _quarantine(path: Path, cache_dir: Path, reason: str) -> None:
    """Move an untrustworthy cache file aside (never delete evidence) with a note saying why, and warn."""
    import warnings

    from benchmark.io.fileio import atomic_write_text

    dest_dir = cache_dir / QUARANTINE_DIR
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / f"{path.parent.name}--{path.name}.{time.time_ns()}"
    path.replace(dest)
    atomic_write_text(dest.with_name(dest.name + ".reason.txt"), f"{path}\n{reason}\n")
    warnings.warn(f"segmentation cache {path} is not trusted ({reason}); moved to {dest} and recomputed",
                  CacheQuarantineWarning, stacklevel=3)


class CacheQuarantineWarning(UserWarning):
    """A cache file failed validation and was moved aside; its result is recomputed."""
