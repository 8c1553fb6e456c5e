"""Batched evaluation of the similarity requests of many queries at once.

Workflows register images under keys and ask for pair similarities (clip_ii, lpips_s, dino_s, l2_s of an
(edit-side, original-side) pair) and image-text scores (clip_it, vqa). The engine dedupes images by key, runs each
backbone on large batches, and keeps an LRU cache of features so an original's crops and pyramids are encoded once
for all of its queries.

A plan's image keys name their content (workflows.query_scope: file digests, the query, the segmentation, then the
transform), so the process-wide feature cache is keyed by them without hashing any input; images registered
`by_content` (whole 512 px images, which other suites encode too) are keyed by their input's digest, and equal
images under different names are found by comparison and encoded once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from benchmark.metrics.features import (
    embed_images,
    embed_texts,
    encoder_signature,
    shared_cache,
    tensor_digest,
)
from benchmark.metrics.hatie.primitives import (
    DEG_A_LEVELS,
    DEG_A_MIN_SIZE,
    DEG_A_THRESHOLD,
    IMAGE_SIZE,
    gray3,
    interpolate,
    l2_sim,
    resize,
)
from benchmark.metrics.memo import LRUCache
from benchmark.metrics.timing import step_time
from benchmark.models.dino import DINO_INPUT
from benchmark.models.perceptual import LPIPS_SIZE

SIM_NAMES = ("clip", "lpips", "dino", "l2")
PairKey = tuple[str, str]
TextKey = tuple[str, str]


@dataclass
class DegAJob:
    """Degradation test A between an edit-side and an original-side image, evaluated level by level across all
    pending jobs; a job stops once all four similarities have passed (the release's early exit)."""

    e_key: str
    o_key: str
    e_img: Any
    o_img: Any
    scores: dict[str, float] = field(default_factory=dict)
    done: bool = False


@dataclass
class Plan:
    """What one query needs from the backbones, and how to turn the answers into raw sub-scores."""

    images: dict[str, Any] = field(default_factory=dict)
    by_content: set[str] = field(default_factory=set)  # keys whose features are shared by input content
    pairs: list[PairKey] = field(default_factory=list)
    texts: list[TextKey] = field(default_factory=list)
    vqa: list[TextKey] = field(default_factory=list)
    deg_a: list[DegAJob] = field(default_factory=list)
    finish: Callable[[Results], dict[str, Any]] | None = None
    # (image key, transform tag) -> the backbone's input, made ahead (SimilarityEngine.prepare_inputs)
    inputs: dict[tuple[str, str], Any] = field(default_factory=dict)

    def image(self, key: str, img: Any, *, by_content: bool = False) -> str:
        """Register `img` under `key`, a name of its content (workflows.query_scope). `by_content`: key its
        features in the process-wide cache by the encoder input's digest instead (an input other suites also
        make, such as a whole 512 px image, so they share its features)."""
        self.images.setdefault(key, img)
        if by_content:
            self.by_content.add(key)
        return key

    def pair(self, a: str, b: str) -> PairKey:
        self.pairs.append((a, b))
        return (a, b)

    def deg_a_test(self, e_key: str, o_key: str) -> DegAJob:
        job = DegAJob(e_key, o_key, self.images[e_key], self.images[o_key])
        self.deg_a.append(job)
        return job

    def text(self, key: str, text: str, *, with_vqa: bool) -> TextKey:
        self.texts.append((key, text))
        if with_vqa:
            self.vqa.append((key, text))
        return (key, text)


@dataclass
class Results:
    pair: dict[PairKey, dict[str, float]]
    clip_it: dict[TextKey, float]
    vqa: dict[TextKey, float]


class SimilarityEngine:
    """Runs CLIP, DINOv2, LPIPS (and optionally a VQA scorer) on batches gathered from many plans."""

    def __init__(self, clip: Any, dino: Any, lpips: Any, vqa: Any | None = None, *, batch_size: int = 32,
                 cache_size: int = 4096) -> None:
        self.clip, self.dino, self.lpips, self.vqa_model = clip, dino, lpips, vqa
        self.batch_size = batch_size
        self._clip_cache, self._dino_cache = LRUCache(cache_size), LRUCache(cache_size)
        self._text_cache: dict[str, Any] = {}
        self.model_seconds: dict[str, float] = {"clip": 0.0, "dino": 0.0, "lpips": 0.0, "vqa": 0.0}
        self.forward_calls: dict[str, int] = {"clip": 0, "dino": 0, "lpips": 0, "vqa": 0}
        # inputs that actually went through a backbone (after dedup by key and by content): the work done
        self.forward_items: dict[str, int] = {"clip image": 0, "clip text": 0, "dino": 0, "lpips pair": 0, "vqa": 0}
        # seconds of the non-forward steps (what the bench prints per query)
        self.step_seconds: dict[str, float] = {}
        # image keys that name their content (plans' keys, workflows.query_scope): the process-wide cache is keyed
        # by them and the input's transform, no digest of the input needed; any other key is digested
        self._named: set[str] = set()
        # this call's plan keys registered `by_content`: they name their image too (the scope holds the file
        # digests), their own features are only shared by digest so that other suites find them
        self._plan_keys_by_content: set[str] = set()
        self._ready: dict[tuple[str, str], Any] = {}  # this call's inputs made ahead (plans' `inputs`)
        self.ready_used = 0  # inputs made ahead that a backbone then encoded (the rest were cache hits)

    def _count(self, item: str, encoder: Any, fn: Callable[[], Any]) -> Any:
        """Run `fn` (an embed call through the shared cache) and add the inputs it encoded to `item`'s count."""
        cache, sig = shared_cache(), encoder_signature(encoder)
        before = cache.forward_items[sig]
        out = fn()
        self.forward_items[item] += cache.forward_items[sig] - before
        return out

    def _timed(self, name: str, fn: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        out = fn()
        _sync_cuda()  # GPU kernels run asynchronously: without this the time would land in whoever reads the result
        self.model_seconds[name] += time.perf_counter() - t0
        self.forward_calls[name] += 1
        return out

    def _embed(self, name: str, cache: LRUCache, keys: Iterable[str], images: dict[str, Any],
               prepare: tuple[Callable[[Any], Any], str], encoder: Any) -> dict[str, Any]:
        """Features of the images under `keys`: from the engine's cache, else the process-wide one (named keys are
        looked up before their input is even made), else encoded. `prepare` = (how an image becomes the
        encoder's input, a name of that transform for the cache key)."""
        out, todo = {}, []
        shared, sig = shared_cache(), encoder_signature(encoder)
        make, tag = prepare
        for k in dict.fromkeys(keys):
            hit = cache.get_touch(k)
            if hit is None and k in self._named:
                hit = shared.get(sig, f"hatie-input:{k}|{tag}")
                if hit is not None:
                    cache.put(k, hit)
            if hit is None:
                todo.append(k)
            else:
                out[k] = hit
        if todo:  # the process-wide cache (benchmark.metrics.features) shares features with other suites
            with step_time(self.step_seconds, "cache keys"):
                # content-keyed images first: one of them stands for its equals, so its digest is in the
                # process-wide cache for every content-keyed equal (named equals are put under their names)
                first = _first_equal(sorted(todo, key=lambda k: k in self._named), images)
            unique = [k for k in todo if first[k] == k]
            with step_time(self.step_seconds, "resize to backbone input"):
                ready = [self._ready.get((k, tag)) for k in unique]
                self.ready_used += sum(x is not None for x in ready)
                inputs = [make(images[k]) if x is None else x for k, x in zip(unique, ready, strict=True)]
            with step_time(self.step_seconds, "cache keys"):
                ckeys = [f"hatie-input:{k}|{tag}" if k in self._named else tensor_digest(x)
                         for k, x in zip(unique, inputs, strict=True)]
            feats = self._count("clip image" if name == "clip" else name, encoder, lambda: embed_images(
                encoder, inputs, batch_size=self.batch_size, keys=ckeys, timer=lambda fn: self._timed(name, fn),
                steps=self.step_seconds))
            out.update(zip(unique, feats, strict=True))
            for k in todo:
                out[k] = out[first[k]]
                cache.put(k, out[k])
                if k != first[k] and k in self._named:
                    shared.put(sig, f"hatie-input:{k}|{tag}", out[k])
        return out

    def pair_similarities(self, pairs: list[PairKey], images: dict[str, Any],
                          need: dict[PairKey, tuple[str, ...]] | None = None) -> dict[PairKey, dict[str, float]]:
        """clip_ii, lpips_s, dino_s, l2_s of every (edit side, original side) pair, in shared batches. `need`
        restricts a pair to some of the four (degradation test A asks only for those that have not passed yet);
        a backbone then encodes only the images of pairs that need its similarity."""
        import torch

        if not pairs:
            return {}
        want = {pk: SIM_NAMES if need is None else need[pk] for pk in pairs}
        keys = lambda sim: [k for pk in pairs if sim in want[pk] for k in pk]  # noqa: E731
        clip_f = self._embed("clip", self._clip_cache, keys("clip"), images, self._clip_input(), self.clip)
        # resize each image to the backbone's input size first so differently sized crops stack into one batch
        dino_f = self._embed("dino", self._dino_cache, keys("dino"), images, self._dino_input(), self.dino)
        lp: dict[PairKey, float] = {}
        lp_pairs = [pk for pk in pairs if "lpips" in want[pk]]
        for start in range(0, len(lp_pairs), self.batch_size):
            chunk = lp_pairs[start : start + self.batch_size]
            with step_time(self.step_seconds, "resize to backbone input"):
                a = torch.stack([resize(images[x], (LPIPS_SIZE, LPIPS_SIZE)) for x, _ in chunk])
                b = torch.stack([resize(images[y], (LPIPS_SIZE, LPIPS_SIZE)) for _, y in chunk])
            d = self._timed("lpips", lambda a=a, b=b: self.lpips.distance(a, b))
            self.forward_items["lpips pair"] += len(chunk)
            lp.update({pk: 1.0 - float(v) for pk, v in zip(chunk, d, strict=True)})
        sims = {"clip": lambda pk: _cos01(clip_f[pk[0]], clip_f[pk[1]]), "lpips": lambda pk: lp[pk],
                "dino": lambda pk: _cos01(dino_f[pk[0]], dino_f[pk[1]]),
                "l2": lambda pk: l2_sim(images[pk[0]], images[pk[1]])}
        with step_time(self.step_seconds, "pair scores (cosine, l2)"):
            return {pk: {name: sims[name](pk) for name in want[pk]} for pk in pairs}

    def _clip_input(self) -> tuple[Callable[[Any], Any], str]:
        size = self.clip.image_size
        return (lambda im: _square_resize(im, size, "bicubic")), f"square{size}-bicubic-aa"

    @staticmethod
    def _dino_input() -> tuple[Callable[[Any], Any], str]:
        # resize each image to the backbone's input size first so differently sized crops stack into one batch
        return (lambda im: _square_resize(im, DINO_INPUT, "bilinear")), f"square{DINO_INPUT}-bilinear-aa"

    def prepare_inputs(self, plan: Plan) -> None:
        """Make ahead, into `plan.inputs`, the CLIP and DINOv2 inputs of the plan's edit-side images (the first of
        each pair, the images of its text scores): those an edit makes anew, so a backbone will almost always encode
        them. Called where the plan is made (a loader thread running ahead of a GPU), so the resizes leave this
        thread; the inputs are the same tensors `_embed` would make. Original-side images are left to `_embed`:
        they are mostly cache hits."""
        clip_t, dino_t = self._clip_input(), self._dino_input()
        wanted = [(e, t) for e, _ in plan.pairs for t in (clip_t, dino_t)] + [(k, clip_t) for k, _ in plan.texts]
        for key, (make, tag) in wanted:
            if (key, tag) not in plan.inputs:
                plan.inputs[key, tag] = make(plan.images[key])

    def run_deg_a(self, jobs: list[DegAJob]) -> None:
        """Degradation test A for all jobs, one pyramid level at a time over the jobs still pending. At each level a
        job asks only for the similarities that have not passed yet: a passed one's score is fixed by the level it
        first passed at, so computing it again could not change any score (it would only cost forward passes)."""
        with step_time(self.step_seconds, "degradation pyramid"):
            for job in jobs:
                job.e_img, job.o_img = gray3(job.e_img), gray3(job.o_img)
                job.scores = dict.fromkeys(SIM_NAMES, 0.0)
        for p in range(DEG_A_LEVELS):
            side = IMAGE_SIZE // 2**p
            pending = [j for j in jobs if not j.done]
            if side < DEG_A_MIN_SIZE or not pending:
                break
            images, pairs, need = {}, [], {}
            with step_time(self.step_seconds, "degradation pyramid"):
                for j in pending:
                    j.e_img, j.o_img = resize(j.e_img, (side, side)), resize(j.o_img, (side, side))
                    pk = (f"{j.e_key}:degA{p}", f"{j.o_key}:degA{p}")
                    # a level of a plan image's pyramid is named by its key (gray, then halved p times), a whole
                    # 512 px image's too: no other suite makes these inputs, so no digest of them is needed
                    self._named.update(k for k, parent in zip(pk, (j.e_key, j.o_key), strict=True)
                                       if parent in self._named or parent in self._plan_keys_by_content)
                    images[pk[0]], images[pk[1]] = j.e_img, j.o_img
                    pairs.append(pk)
                    need[pk] = tuple(name for name in SIM_NAMES if j.scores[name] == 0)
            sims = self.pair_similarities(pairs, images, need)
            for j, pk in zip(pending, pairs, strict=True):
                for name, v in sims[pk].items():
                    if v > DEG_A_THRESHOLD:
                        j.scores[name] = (DEG_A_LEVELS - p) / DEG_A_LEVELS
                j.done = all(j.scores.values())

    def run(self, plans: list[Plan]) -> list[dict[str, Any]]:
        """Evaluate every request of `plans` in shared batches; returns each plan's raw sub-scores, in order."""
        images: dict[str, Any] = {}
        for p in plans:
            images.update(p.images)
        # this call's named keys only (bounded by a chunk, not the query set)
        self._named = {k for p in plans for k in p.images if k not in p.by_content}
        self._plan_keys_by_content = {k for p in plans for k in p.by_content}
        self._ready = {k: x for p in plans for k, x in p.inputs.items()}
        pairs = list(dict.fromkeys(pk for p in plans for pk in p.pairs))
        texts = list(dict.fromkeys(tk for p in plans for tk in p.texts))
        vqas = list(dict.fromkeys(tk for p in plans for tk in p.vqa))

        pair_res = self.pair_similarities(pairs, images)
        self.run_deg_a([j for p in plans for j in p.deg_a])
        img_f = self._embed("clip", self._clip_cache, [k for k, _ in texts], images, self._clip_input(), self.clip)
        new_texts = [t for t in dict.fromkeys(t for _, t in texts) if t not in self._text_cache]
        if new_texts:
            tf = self._count("clip text", self.clip, lambda: embed_texts(
                self.clip, new_texts, batch_size=self.batch_size, timer=lambda fn: self._timed("clip", fn)))
            self._text_cache.update(zip(new_texts, tf, strict=True))
        with step_time(self.step_seconds, "pair scores (cosine, l2)"):
            text_res = {tk: _cos01(img_f[tk[0]], self._text_cache[tk[1]]) for tk in texts}
        vqa_res: dict[TextKey, float] = {}
        if vqas:
            if self.vqa_model is None:
                raise RuntimeError("a workflow asked for VQA scores but no VQA model is configured")
            for start in range(0, len(vqas), self.batch_size):
                chunk = vqas[start : start + self.batch_size]
                ims = [images[k] for k, _ in chunk]
                ps = self._timed("vqa", lambda ims=ims, chunk=chunk: self.vqa_model.score(ims, [t for _, t in chunk]))
                self.forward_items["vqa"] += len(chunk)
                vqa_res.update({tk: float(p) for tk, p in zip(chunk, ps, strict=True)})
        res = Results(pair_res, text_res, vqa_res)
        self._ready = {}  # inputs made ahead live for this call only
        return [p.finish(res) for p in plans]  # type: ignore[misc]


def _first_equal(keys: list[str], images: dict[str, Any]) -> dict[str, str]:
    """key -> the first key whose image is an equal tensor (itself if none): equal images are the same encoder
    input, so one forward serves them all (a region an edit left untouched, a background two queries share).
    Names cannot see that; a sparse sample narrows the candidates and `torch.equal` decides, far cheaper than
    hashing every image."""
    import torch

    seen: dict[tuple[Any, ...], list[str]] = {}
    out = {}
    for k in keys:
        x = images[k]
        sample = (tuple(x.shape), str(x.dtype), x[..., ::8, ::8].cpu().contiguous().numpy().tobytes())
        group = seen.setdefault(sample, [])
        out[k] = next((r for r in group if torch.equal(images[r], x)), k)
        if out[k] == k:
            group.append(k)
    return out


def _sync_cuda() -> None:
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def _cos01(u: Any, v: Any) -> float:
    import torch

    return (1.0 + float(torch.nn.functional.cosine_similarity(u, v, dim=0, eps=1e-8))) / 2.0


def _square_resize(img: Any, size: int, mode: str) -> Any:
    """Resize a square image to size x size (antialiased, as torchvision's Resize on tensors)."""
    return interpolate(img, (size, size), mode=mode, antialias=True, align_corners=False)
