"""Opt-in reduced-precision scoring: the backbones' forward passes in bf16 autocast or with TF32 matmuls.

`precision: fp32` (every suite's default) is PyTorch's default numerics and what the conformance tests pin. `tf32`
lets CUDA matmuls use TF32 tensor cores (Ampere and later; cuDNN convolutions already may, PyTorch's default);
`bf16` runs each backbone forward under `torch.autocast(dtype=bfloat16)`. Features always leave the backbone as
float32, so everything downstream (cosines, distances, FID statistics, criteria) is computed as in fp32.

A reduced mode changes scores (docs/hatie.md, "Reduced precision", gives the measured drift per raw sub-score), so
it is part of the metric signature and of each encoder's feature-cache signature: bf16 features never stand in for
fp32 ones. The segmenter is never reduced: its detections pass a score threshold, where a small drift can add or
drop an object, and its cache is keyed by its own signature.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

PRECISIONS = ("fp32", "tf32", "bf16")
DEFAULT_PRECISION = "fp32"
# The methods through which suites call a backbone (ClipEncoder, DinoEncoder, DinoV1Encoder, LpipsDistance,
# FeatureExtractor): each runs under the mode's context.
FORWARD_METHODS = ("embed_images", "embed_texts", "distance", "features")


class PrecisionError(ValueError):
    """A `precision` that is not one of `PRECISIONS`, or one the device cannot run."""


def check_precision(precision: Any, device: str, *, what: str = "a metric suite") -> str:
    """`precision` itself when valid on `device`; else `PrecisionError` naming the valid values and the fix."""
    if precision not in PRECISIONS:
        raise PrecisionError(f"{what}: precision {precision!r} is not one of {', '.join(PRECISIONS)}; set it with "
                             f"metrics.<suite>.precision=<value>")
    if precision == "tf32" and not str(device).startswith("cuda"):
        raise PrecisionError(f"{what}: precision tf32 exists only on CUDA GPUs (device is {device!r}); use fp32, or "
                             "bf16 for reduced precision on this device")
    return str(precision)


@contextlib.contextmanager
def precision_context(precision: str, device: str) -> Iterator[None]:
    """Run the enclosed forward passes in `precision` on `device` (fp32: no change)."""
    import torch

    if precision == "bf16":
        with torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16):
            yield
    elif precision == "tf32":
        matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        try:
            yield
        finally:  # process-wide flags: restore, so a suite in fp32 in the same process is unaffected
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn
    else:
        yield


class ReducedPrecision:
    """A backbone whose forward methods (`FORWARD_METHODS`) run in `precision`; every other attribute is the
    wrapped backbone's. Its `signature` is the backbone's feature-cache signature plus the mode, so the shared
    feature cache keeps reduced-precision features apart from fp32 ones."""

    def __init__(self, inner: Any, precision: str) -> None:
        from benchmark.metrics.features import encoder_signature

        self._inner, self.precision = inner, precision
        base = encoder_signature(inner)  # "<what determines its features>|<device>"
        device = str(getattr(inner, "device", ""))
        self.signature = f"{base.removesuffix('|' + device)}|precision:{precision}"

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in FORWARD_METHODS or not callable(attr):
            return attr

        def run(*args: Any, **kwargs: Any) -> Any:
            with precision_context(self.precision, str(getattr(self._inner, "device", "cpu"))):
                out = attr(*args, **kwargs)
            return out.float() if hasattr(out, "float") else out

        return run


def with_precision(model: Any, precision: str) -> Any:
    """`model` itself in fp32 (or when it is None: a component turned off), else wrapped in `ReducedPrecision`."""
    if model is None or precision == DEFAULT_PRECISION:
        return model
    return ReducedPrecision(model, precision)
