"""Process-wide feature cache shared by every metric suite: each encoder input is encoded once per process.

A feature is keyed by (encoder signature, digest of the exact tensor handed to the encoder's `embed_images`), and
a text feature by (encoder signature, the text). Keying on the encoder's actual input makes the key complete by
construction: whatever resizing, cropping or upsampling a suite applies before the encoder is part of the bytes,
so two suites share a feature exactly when they would have fed the encoder the same input (EditVal's and the
conventional suite's DINO ViT-B/16 input; not HATIE's and the conventional suite's CLIP inputs, resized by
different recipes), and never otherwise. Encoders are loaded once per process by their loaders (`lru_cache`).

The cache is bounded by bytes (LRU eviction; `EDITMETER_FEATURE_CACHE_MB`, default 512), so memory does not grow
with the query set. Counters (`stats()`) record encoder forward passes and images per encoder signature.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

DEFAULT_BUDGET_MB = 512
_TEXT = "text\x00"  # prefix of text keys (image keys are hex digests: never collide)


def encoder_signature(encoder: Any) -> str:
    """The identity of an encoder's outputs: its own `signature` where it has one (CLIP: model and input size; DINO
    v1: model and input recipe), else class, name and input size; plus its device (features stay where they were
    computed, and a GPU's numerics are not a CPU's). Two encoders with one signature must compute the same
    features."""
    device = getattr(encoder, "device", "")
    sig = getattr(encoder, "signature", None)
    if isinstance(sig, str) and sig:
        return f"{sig}|{device}"
    name = getattr(encoder, "name", "") or ""
    if not name:
        raise ValueError(f"encoder {type(encoder).__name__} has neither a signature nor a name: its features "
                         "cannot be shared safely")
    size = getattr(encoder, "image_size", "")
    return f"{type(encoder).__module__}.{type(encoder).__qualname__}|{name}|{size}|{device}"


def tensor_digest(x: Any) -> str:
    """Digest of a tensor's dtype, shape and bytes (the content key of an encoder input). sha256, truncated to 128
    bits: with the SHA instructions of current x86 and ARM CPUs it hashes about 2x faster than blake2b, and the keys
    live only in this process's cache, so the choice of function can change between versions."""
    t = x.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    h = hashlib.sha256()
    h.update(f"{t.dtype}|{tuple(t.shape)}|".encode())
    h.update(t.contiguous().numpy().data)  # the buffer itself: the bytes tobytes() would copy out
    return h.hexdigest()[:32]


class FeatureCache:
    """LRU of feature tensors keyed by (encoder signature, content key), bounded by total bytes."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget = int(budget_bytes)
        self._data: OrderedDict[tuple[str, str], Any] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.forward_calls: Counter[str] = Counter()  # encoder signature -> embed calls
        self.forward_items: Counter[str] = Counter()  # encoder signature -> images / texts encoded

    @staticmethod
    def _size(v: Any) -> int:
        return int(v.numel() * v.element_size()) + 200  # + key and bookkeeping, roughly

    def get(self, sig: str, key: str) -> Any:
        with self._lock:
            v = self._data.get((sig, key))
            if v is None:
                self.misses += 1
                return None
            self._data.move_to_end((sig, key))
            self.hits += 1
            return v

    def put(self, sig: str, key: str, value: Any) -> None:
        value = value.detach().clone()  # a row of a batch output is a view: keep only its own bytes alive
        size = self._size(value)
        if size > self.budget:
            return
        with self._lock:
            old = self._data.pop((sig, key), None)
            if old is not None:
                self._bytes -= self._size(old)
            self._data[(sig, key)] = value
            self._bytes += size
            while self._bytes > self.budget and self._data:
                _, v = self._data.popitem(last=False)
                self._bytes -= self._size(v)

    def clear(self) -> None:
        """Drop every feature and reset the counters (what a fresh process would see)."""
        with self._lock:
            self._data.clear()
            self._bytes = 0
            self.hits = self.misses = 0
            self.forward_calls.clear()
            self.forward_items.clear()

    def __len__(self) -> int:
        return len(self._data)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def stats(self) -> dict[str, Any]:
        return {"entries": len(self._data), "bytes": self._bytes, "budget": self.budget, "hits": self.hits,
                "misses": self.misses, "forward_calls": dict(self.forward_calls),
                "forward_items": dict(self.forward_items)}


def _budget_from_env() -> int:
    raw = os.environ.get("EDITMETER_FEATURE_CACHE_MB", "")
    try:
        mb = float(raw) if raw else DEFAULT_BUDGET_MB
    except ValueError:
        raise ValueError(f"EDITMETER_FEATURE_CACHE_MB={raw!r} is not a number of megabytes") from None
    return int(mb * 2**20)


_SHARED: FeatureCache | None = None


def shared_cache() -> FeatureCache:
    """The process-wide cache (created on first use with the budget of `EDITMETER_FEATURE_CACHE_MB`)."""
    global _SHARED
    if _SHARED is None:
        _SHARED = FeatureCache(_budget_from_env())
    return _SHARED


def embed_images(encoder: Any, inputs: Sequence[Any], *, batch_size: int = 32, cache: FeatureCache | None = None,
                 keys: Sequence[str] | None = None, timer: Callable[[Callable[[], Any]], Any] | None = None,
                 steps: dict[str, float] | None = None) -> list[Any]:
    """Features of `inputs` (float (3, H, W) tensors, exactly what `encoder.embed_images` receives), one per input,
    in order. Each distinct input is encoded at most once per process: inputs are deduplicated by content, looked
    up in `cache` (default: the shared one), and the rest encoded in batches of equal-sized inputs.

    `keys` may give precomputed digests of the inputs (`tensor_digest`); `timer(fn)` wraps each forward call
    (time accounting of the caller); `steps` accumulates the seconds of the non-forward steps (cache keys, batch
    assembly)."""
    import torch

    from benchmark.metrics.timing import step_time

    cache = shared_cache() if cache is None else cache
    sig = encoder_signature(encoder)
    with step_time(steps, "cache keys"):
        digests = list(keys) if keys is not None else [tensor_digest(x) for x in inputs]
    out: dict[str, Any] = {}
    todo: dict[tuple[int, ...], list[int]] = {}  # input shape -> first index of each missing digest
    for i, d in enumerate(digests):
        if d in out:
            continue
        hit = cache.get(sig, d)
        if hit is not None:
            out[d] = hit
        else:
            out[d] = None
            todo.setdefault(tuple(inputs[i].shape), []).append(i)
    for idx in todo.values():
        for start in range(0, len(idx), batch_size):
            chunk = idx[start : start + batch_size]
            with step_time(steps, "batch assembly"):
                batch = torch.stack([inputs[i] for i in chunk])
            run = lambda b=batch: encoder.embed_images(b)  # noqa: E731
            feats = timer(run) if timer is not None else run()
            cache.forward_calls[sig] += 1
            cache.forward_items[sig] += len(chunk)
            for i, f in zip(chunk, feats, strict=True):
                out[digests[i]] = f
                cache.put(sig, digests[i], f)
    return [out[d] for d in digests]


def embed_texts(encoder: Any, texts: Sequence[str], *, batch_size: int = 256, cache: FeatureCache | None = None,
                timer: Callable[[Callable[[], Any]], Any] | None = None) -> list[Any]:
    """Text features of `texts` through `encoder.embed_texts`, each distinct text encoded once per process."""
    cache = shared_cache() if cache is None else cache
    sig = encoder_signature(encoder)
    out: dict[str, Any] = {}
    todo: list[str] = []
    for t in dict.fromkeys(texts):
        hit = cache.get(sig, _TEXT + t)
        if hit is None:
            todo.append(t)
        else:
            out[t] = hit
    for start in range(0, len(todo), batch_size):
        chunk = todo[start : start + batch_size]
        run = lambda c=chunk: encoder.embed_texts(c)  # noqa: E731
        feats = timer(run) if timer is not None else run()
        cache.forward_calls[sig] += 1
        cache.forward_items[sig] += len(chunk)
        for t, f in zip(chunk, feats, strict=True):
            out[t] = f
            cache.put(sig, _TEXT + t, f)
    return [out[t] for t in texts]
