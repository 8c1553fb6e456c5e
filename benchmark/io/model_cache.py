"""Shared plumbing for model loaders: weight sources, the tiny-model cache, the missing-weights error."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from benchmark.io.hashing import stable_hash

# pretrained: real checkpoints; tiny: small random models of the same classes (tests, demo);
# random: real-size architectures with random weights (speed benchmarks; not every loader offers it).
WeightSource = Literal["pretrained", "tiny", "random"]
WEIGHT_SOURCES: tuple[str, ...] = ("pretrained", "tiny", "random")
# Bump when the way tiny models are built changes, so stale cache entries are never reused.
TINY_CACHE_VERSION = 1


class WeightsUnavailableError(RuntimeError):
    """Real weights are needed but cannot be loaded (offline, not cached). The message names them and the fix."""

    def __init__(self, what: str, weights_id: str, cause: BaseException | None = None) -> None:
        offline = os.environ.get("HF_HUB_OFFLINE") == "1"
        detail = f" ({type(cause).__name__}: {cause})" if cause is not None else ""
        super().__init__(
            f"cannot load the pretrained weights of {what}: {weights_id!r}{detail}. "
            + ("HF_HUB_OFFLINE=1 is set and they are not in the local cache. " if offline else "")
            + "Download them once with network access (they are then cached), or run with PROFILE=tiny "
            "(`profile=tiny`: random weights of the same architectures, for testing the pipeline)."
        )
        self.weights_id = weights_id


def check_source(source: str) -> WeightSource:
    if source not in WEIGHT_SOURCES:
        raise ValueError(f"unknown weight source {source!r}; expected one of {', '.join(WEIGHT_SOURCES)}")
    return source  # type: ignore[return-value]


def cache_root() -> Path:
    """Where tiny models (and other derived artefacts) are cached: $EDITMETER_CACHE or ~/.cache/editmeter."""
    env = os.environ.get("EDITMETER_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "editmeter"


def tiny_model_dir(kind: str, config: dict[str, Any], build: Callable[[Path], None]) -> Path:
    """Folder holding a tiny random-weight model, built once per (kind, config) and then reused.

    `build(path)` must write the model into `path` (e.g. `model.save_pretrained(path)`); it runs in a temp
    folder that is renamed into place only when complete, so concurrent or killed builds never leave a
    half-written model that a later run trusts.
    """
    key = stable_hash({"kind": kind, "config": config, "v": TINY_CACHE_VERSION})
    final = cache_root() / "tiny" / f"{kind}-{key}"
    if final.is_dir():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{kind}-", dir=final.parent))
    try:
        build(tmp)
        try:
            tmp.rename(final)
        except OSError:
            if not final.is_dir():  # lost a race only if someone else finished; anything else is real
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def resolve_device(device: str) -> str:
    """`auto` -> `cuda` when a GPU is visible, else `cpu`; anything else unchanged."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
