"""JudgeSuite: VIEScore's semantic consistency (SC) and perceptual quality (PQ), as GEdit-Bench applies it, with a
local VLM whose scores are read from its token probabilities (docs/judge.md).

Per chunk of queries (sorted by source image): load source and edit resized to the judge resolution (DataLoader
workers), build each query's four questions (`prompts.py`), look each (question, images) up in the process-wide
cache (`benchmark.metrics.features.shared_cache`, keyed by the judge's identity and the digest of the exact prompt
text and image tensors), run the rest through the VLM in batches of `batch_size` prompts, and compute
SC = min of its sub-scores, PQ = min of its sub-scores, O = sqrt(SC x PQ), from expected values and from argmaxes.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.io.model_cache import resolve_device
from benchmark.io.types import MetricInfo, Query
from benchmark.metrics.chunking import QuerySamples
from benchmark.metrics.components import LazyComponents
from benchmark.metrics.judge.prompts import DEFAULT_VERSION, Prompts, Question, get_prompts

VERSION = "1.0"
DEFAULT_RESOLUTION = 448  # longer side in pixels: 16 x 16 merged patches (256 visual tokens) for a square image
N_SCORES = 11  # 0..10


def column_info(prompts: Prompts) -> dict[str, tuple[bool, str]]:
    """name -> (higher_is_better, description), in table order: G_O, G_SC, G_PQ (expected values), their argmax
    versions (GEdit-Bench's integer scores), then each question's expected value and argmax."""
    info = {
        "G_O": (True, "overall: sqrt(G_SC x G_PQ) (VIEScore's O; GEdit-Bench's G_O), from expected scores, 0..10"),
        "G_SC": (True, "semantic consistency: min of the SC questions' expected scores (request followed, not "
                       "over-edited), 0..10"),
        "G_PQ": (True, "perceptual quality: min of the PQ questions' expected scores (natural, free of artifacts), "
                       "0..10"),
        "G_O_argmax": (True, "sqrt(G_SC_argmax x G_PQ_argmax): O from each question's most probable integer score"),
        "G_SC_argmax": (True, "min of the SC questions' most probable integer scores"),
        "G_PQ_argmax": (True, "min of the PQ questions' most probable integer scores"),
    }
    for q in prompts.questions:
        info[q.key] = (True, f"{q.criterion} question {q.key}: expected score sum(k P(k)), 0..10")
        info[f"{q.key}_argmax"] = (True, f"{q.criterion} question {q.key}: most probable integer score")
    return info


SUMMARY_INFO: dict[str, tuple[bool, str]] = {
    "score_mass": (True, "mean over ok queries and questions of the probability the judge's first answer token put "
                         "on a digit (the readout renormalises over digits; a low mass means the judge wanted to say "
                         "something else)"),
}


@dataclass(frozen=True)
class SuiteInfo(MetricInfo):
    """MetricInfo plus the judge's identity (model, revision, dtype, resolution, prompt version) for the signature."""

    identity: dict[str, str] | None = None


@dataclass
class _Loaded:
    query: Query
    source: Any = None  # uint8 (3, H, W) at the judge size
    edit: Any = None
    error: str = ""


def to_judge_input(img: Any, resolution: int) -> Any:
    """A PIL image resized (bicubic) to the judge size (`benchmark.models.vlm.judge_size`) as uint8 (3, H, W)."""
    import numpy as np
    import torch
    from PIL import Image

    from benchmark.models.vlm import judge_size

    size = judge_size(img.width, img.height, resolution)
    if img.size != size:
        img = img.resize(size, Image.Resampling.BICUBIC)
    return torch.from_numpy(np.asarray(img.convert("RGB"), dtype=np.uint8).copy()).permute(2, 0, 1).contiguous()


class _Samples(QuerySamples):
    def __init__(self, queryset: Any, queries: Sequence[Query], edit_paths: Sequence[Path], resolution: int) -> None:
        super().__init__(queryset, queries, edit_paths)
        self.resolution = resolution

    def item(self, query: Query) -> _Loaded:
        return _Loaded(query)

    def load(self, out: _Loaded, q: Query, edit_path: Path) -> None:
        from benchmark.io.imageio import load_rgb

        out.source = self.original(q, lambda img: to_judge_input(img, self.resolution))
        out.edit = to_judge_input(load_rgb(edit_path), self.resolution)


def reader_identity(factory: Callable[..., Any]) -> tuple[str, str]:
    """(model name, dtype) of what the score-reader factory (`load_score_reader` partial) will load, known without
    loading it; a factory of another kind must be built to tell."""
    from benchmark.models.vlm import VLM_ID, load_score_reader, vlm_name

    if getattr(factory, "func", None) is load_score_reader:
        kw = dict(getattr(factory, "keywords", {}) or {})
        return (vlm_name(kw.get("weights", "pretrained"), kw.get("model_id", VLM_ID), kw.get("revision")),
                str(kw.get("dtype", "bfloat16")))
    built = factory()
    return built.name, built.dtype


class JudgeSuite(LazyComponents):
    """VIEScore SC / PQ / O per query with a local VLM judge (specification: docs/judge.md).

    vlm(device=) -> `benchmark.models.vlm.ScoreReader`. `resolution`: longer image side in pixels (a multiple of
    28). `prompt_version`: a key of `prompts.PROMPT_SETS`. `batch_size`: prompts per forward pass (scores do not
    depend on it beyond float rounding); `chunk_size`: queries gathered per round.
    """

    info = MetricInfo("judge", VERSION, True, description="VIEScore SC / PQ / O from a local VLM's score-token "
                      "probabilities (GEdit-Bench's protocol)")

    def __init__(self, *, vlm: Callable[..., Any], resolution: int = DEFAULT_RESOLUTION,
                 prompt_version: str = DEFAULT_VERSION, device: str = "auto", batch_size: int = 8,
                 chunk_size: int = 32, load_threads: int | None = None, prefetch: bool = False) -> None:
        from benchmark.metrics.chunking import check_loading
        from benchmark.models.vlm import judge_size

        if batch_size < 1 or chunk_size < 1:
            raise ValueError(f"batch_size and chunk_size must be >= 1 (got {batch_size}, {chunk_size})")
        judge_size(resolution, resolution, resolution)  # validates the resolution now, before any work
        self.prompts = get_prompts(prompt_version)
        self.resolution = int(resolution)
        self.device = resolve_device(device)
        self.batch_size, self.chunk_size = batch_size, chunk_size
        self.load_threads, self.prefetch = check_loading(load_threads, prefetch)  # speed only (docs/metrics.md)
        self._factories: dict[str, Callable[..., Any] | None] = {"judge": vlm}
        self._models: dict[str, Any] = {}
        self.model_name, self.dtype = reader_identity(vlm)
        self.timings: dict[str, float] = {}
        self.column_info = column_info(self.prompts) | SUMMARY_INFO
        self.columns = tuple(c for c in self.column_info if c not in SUMMARY_INFO)
        self.headline = "G_O"  # VIEScore's O; score_mass is a diagnostic of the readout beside it
        self.info = SuiteInfo(JudgeSuite.info.name, VERSION, True, description=JudgeSuite.info.description,
                              identity={"judge": self.identity})

    # -- identity ---------------------------------------------------------------------------------------------
    @property
    def identity(self) -> str:
        """Everything that shapes a judgement besides the query: model@revision, dtype, resolution, prompts."""
        return (f"{self.model_name}|dtype={self.dtype}|res={self.resolution}|prompts={self.prompts.identity}"
                f"|readout=digits-v1")

    def components(self) -> dict[str, str]:
        return {"judge": self.model_name, "dtype": self.dtype, "resolution": str(self.resolution),
                "prompts": self.prompts.identity}

    def applies_to(self, query: Query, prompt_kind: str) -> bool:
        return True

    def model_seconds(self) -> dict[str, float]:
        return {k: v for k, v in self.timings.items() if "forward" in k}

    @property
    def reader(self) -> Any:
        """The judge's `ScoreReader`, loaded on first use (LazyComponents), checked against the run's key."""
        r = self._get("judge")
        if (r.name, r.dtype) != (self.model_name, self.dtype):
            raise RuntimeError(f"the judge loaded as {r.name} ({r.dtype}), but the run was keyed as "
                               f"{self.model_name} ({self.dtype}); scores would be filed under the wrong signature")
        return r

    # -- judging ----------------------------------------------------------------------------------------------
    def request(self, q: Query) -> str:
        """The request the SC questions quote: the instruction, else the target caption; '' when neither."""
        if (q.instruction or "").strip():
            return self.prompts.instruction_request.format(text=q.instruction.strip())
        if (q.target_caption or "").strip():
            return self.prompts.caption_request.format(text=q.target_caption.strip())
        return ""

    def judge(self, jobs: Sequence[tuple[Question, str, Sequence[Any]]]) -> list[Any]:
        """Score probabilities + digit mass, a float64 (12,) tensor per job (question, request, images), in order.
        Each distinct (exact prompt text, image bytes) is judged once per process and judge identity."""
        import torch

        from benchmark.metrics.features import shared_cache, tensor_digest

        cache = shared_cache()
        sig = f"judge|{self.identity}|{self.device}"
        reader = self.reader
        keys, prompts = [], []
        for question, request, images in jobs:
            prompt = reader.chat(question.text.format(request=request), len(images), self.prompts.system)
            h = hashlib.blake2b(prompt.encode(), digest_size=16)
            for im in images:
                h.update(tensor_digest(im).encode())
            keys.append(h.hexdigest())
            prompts.append(prompt)
        out: dict[str, Any] = {}
        todo: list[int] = []
        for i, k in enumerate(keys):
            if k in out:
                continue
            hit = cache.get(sig, k)
            out[k] = hit
            if hit is None:
                todo.append(i)
        # one question at a time: prompts of equal length and image count share a batch (little padding)
        todo.sort(key=lambda i: (jobs[i][0].key, i))
        for start in range(0, len(todo), self.batch_size):
            idx = todo[start : start + self.batch_size]
            t0 = time.perf_counter()
            p, mass = reader.probabilities([prompts[i] for i in idx], [jobs[i][2] for i in idx])
            self.timings["judge forward"] = self.timings.get("judge forward", 0.0) + time.perf_counter() - t0
            cache.forward_calls[sig] += 1
            cache.forward_items[sig] += len(idx)
            for i, row, m in zip(idx, p, mass, strict=True):
                v = torch.cat([row, m.reshape(1)])
                out[keys[i]] = v
                cache.put(sig, keys[i], v)
        return [out[k] for k in keys]

    def _score_chunk(self, items: list[_Loaded]) -> list[dict[str, Any]]:
        import torch

        from benchmark.models.vlm import expected_and_argmax

        rows = [{"query_id": it.query.id, "status": "failed", "reason": it.error} for it in items if it.error]
        good = []
        for it in items:
            if it.error:
                continue
            req = self.request(it.query)
            if not req:
                rows.append({"query_id": it.query.id, "status": "failed",
                             "reason": "no instruction or target caption: the SC questions have no request to quote"})
            else:
                good.append((it, req))
        if not good:
            return rows
        qs = self.prompts.questions
        jobs = [(q, req, [it.source, it.edit] if q.with_source else [it.edit]) for it, req in good for q in qs]
        got = torch.stack(self.judge(jobs))
        ev, am = expected_and_argmax(got[:, :N_SCORES])
        mass = got[:, N_SCORES]
        for n, (it, _) in enumerate(good):
            row: dict[str, Any] = {"query_id": it.query.id}
            sub: dict[str, list[tuple[float, float]]] = {"SC": [], "PQ": []}
            masses = []
            for j, q in enumerate(qs):
                r = n * len(qs) + j
                e, a = float(ev[r]), float(am[r])
                row[q.key], row[f"{q.key}_argmax"], row[f"{q.key}_mass"] = e, a, float(mass[r])
                sub[q.criterion].append((e, a))
                masses.append(float(mass[r]))
            for suffix, pick in (("", 0), ("_argmax", 1)):
                sc = min(v[pick] for v in sub["SC"])
                pq = min(v[pick] for v in sub["PQ"])
                row[f"G_SC{suffix}"], row[f"G_PQ{suffix}"] = sc, pq
                row[f"G_O{suffix}"] = math.sqrt(max(sc, 0.0) * max(pq, 0.0))
            row["score_mass"] = sum(masses) / len(masses)
            ok = all(math.isfinite(row[c]) for c in self.columns)
            rows.append(row | {"status": "ok" if ok else "failed", "reason": "" if ok else "a judge score is not finite"})
        return rows

    judge_column = "G_O"  # what `editmeter metaeval judges` compares between edits

    def score_images(self, items: Sequence[tuple[Query, Any, Any]]) -> list[dict[str, Any]]:
        """Rows for (query, source PIL image, edit PIL image) triples held in memory (human-preference sets)."""
        return self._score_chunk([_Loaded(q, to_judge_input(src, self.resolution),
                                          to_judge_input(edit, self.resolution)) for q, src, edit in items])

    def score_queries(self, queryset: Any, queries: Sequence[Query], edit_paths: Sequence[Path], *, work_dir: Path,
                      num_workers: int = 0, progress: bool = True) -> Iterator[list[dict[str, Any]]]:
        """Yield lists of result rows (one dict per query), chunk by chunk."""
        from benchmark.metrics.chunking import by_source

        qs, paths = by_source(queries, edit_paths)
        yield from self._score_chunks(_Samples(queryset, qs, paths, self.resolution), self._score_chunk,
                                      desc="judge", num_workers=num_workers, progress=progress)
