"""Catch CUDA device-mismatch bugs on a CPU: a torch function mode that treats the model as if it lived elsewhere.

On a GPU, a tensor made without the model's device (``torch.zeros(n)``, ``torch.randn(..., generator=cpu_gen)``,
``torch.from_numpy``, a test's own input) is a CPU tensor, and the first op that meets a CUDA tensor fails with
"Expected all tensors to be on the same device". On a CPU every tensor shares one device, so the bug is invisible.

`ModelDeviceGuard` stands in for the GPU with the device ``cpu:0`` (`MODEL_DEVICE`): a CPU device that torch runs
on like ``cpu`` but that compares unequal to it. Load the model with ``device="cpu:0"``; inside the ``with`` block
the guard tracks which tensors would be on the model's device:

- the parameters and buffers of the given modules are on it, and their ``.device`` reads ``cpu:0``, so code that
  takes the device from the model (``x.device``, ``pipe.device``) gets the model's device as on a GPU;
- an op's outputs are on it when one of its tensor inputs is (device propagation);
- ``.to(d)`` puts a tensor on it when ``d`` is ``cpu:0`` or a tensor on it, and takes it off for ``cpu``;
  ``.to(<dtype>)`` keeps where it was; ``.cpu()`` and ``.numpy()`` take it off;
- a factory call (``torch.zeros``, ``torch.tensor``, ``torch.randn``...) is on it only with ``device="cpu:0"``.

Every other tensor is "off-device" (a CPU tensor on a GPU machine). An op that mixes an on-device tensor with an
off-device tensor of one or more dimensions raises `DeviceMismatch`, as CUDA would. What CUDA allows stays allowed:
0-d CPU tensors as scalars, copies across devices (``copy_``, ``x[i] = y``) and CPU index tensors in ``x[idx]``.

It is a test tool: an approximation of CUDA's rules (a ``.cpu()`` of a CPU tensor is the tensor itself, so it
stays on), meant to err on the side of false negatives, never of false positives.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map

_ON = "_editmeter_on_model_device"
MODEL_DEVICE = torch.device("cpu", 0)
_REAL_DEVICE = torch._C.TensorBase.device

# Calls where an on-device and an off-device tensor may meet on CUDA.
_CROSS_DEVICE_OK = {torch.Tensor.copy_, torch.Tensor.__setitem__, torch.Tensor.__getitem__, torch.Tensor.to,
                    torch.Tensor.type_as, torch.Tensor.new_tensor, torch.Tensor.new_zeros, torch.Tensor.new_ones,
                    torch.Tensor.new_empty, torch.Tensor.new_full}
# Calls whose result is a CPU tensor whatever the input.
_TO_CPU = {torch.Tensor.cpu, torch.Tensor.numpy}


class DeviceMismatch(RuntimeError):
    """An op mixed a tensor on the model's device with one that would be on the CPU of a GPU machine."""


def _is_on(t: torch.Tensor) -> bool:
    return bool(getattr(t, _ON, False))


def _mark(t: Any) -> Any:
    if isinstance(t, torch.Tensor):
        try:
            setattr(t, _ON, True)
        except (AttributeError, RuntimeError):  # some internal tensor types take no attributes
            pass
    return t


def _unmark(t: Any) -> Any:
    if isinstance(t, torch.Tensor) and _is_on(t):
        try:
            delattr(t, _ON)
        except AttributeError:
            pass
    return t


def _is_model_device(device: Any) -> bool:
    return device is not None and torch.device(device) == MODEL_DEVICE


def _target(args: tuple, kwargs: dict) -> bool | None:
    """Where `.to(...)` puts the tensor: True (the model's device), False (the CPU), None (no device named)."""
    if kwargs.get("device") is not None:
        return _is_model_device(kwargs["device"])
    for a in args[1:]:
        if isinstance(a, torch.Tensor):
            return _is_on(a)
        if isinstance(a, str | torch.device):
            return _is_model_device(a)
    return None


def _device(t: torch.Tensor) -> torch.device:
    return MODEL_DEVICE if _is_on(t) else _REAL_DEVICE.__get__(t)


class ModelDeviceGuard(TorchFunctionMode):
    """``with ModelDeviceGuard(modules):`` raise `DeviceMismatch` where CUDA would; see the module docstring."""

    def __init__(self, modules: Iterable[torch.nn.Module]) -> None:
        super().__init__()
        self.modules = [m for m in modules if isinstance(m, torch.nn.Module)]
        self.ops = 0

    def __enter__(self) -> ModelDeviceGuard:
        for m in self.modules:
            for t in (*m.parameters(), *m.buffers()):
                _mark(t)
        torch.Tensor.device = property(_device)  # Tensor inherits TensorBase's getter: shadow it, then delete
        return super().__enter__()

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        del torch.Tensor.device
        for m in self.modules:
            for t in (*m.parameters(), *m.buffers()):
                _unmark(t)

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        self.ops += 1
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        on = [t for t in tensors if _is_on(t)]
        off = [t for t in tensors if not _is_on(t)]
        if on and func not in _CROSS_DEVICE_OK and func not in _TO_CPU:
            stray = [t for t in off if t.dim() > 0]
            if stray:
                name = getattr(func, "__qualname__", getattr(func, "__name__", repr(func)))
                raise DeviceMismatch(
                    f"{name}: a tensor of shape {tuple(stray[0].shape)} that would be on the CPU meets tensors on the "
                    f"model's device (on CUDA: 'Expected all tensors to be on the same device'). Create it with "
                    f"device= taken from the model, or move it with .to(model.device).")
        out = func(*args, **kwargs)
        if func in _TO_CPU:
            return out if out is tensors[0] else tree_map(_unmark, out)
        if func is torch.Tensor.to:
            target = _target(args, kwargs)
            on_after = _is_on(tensors[0]) if target is None else target
            if out is tensors[0] and on_after != _is_on(out):
                return out  # a no-op move returns the tensor itself: leave it as it was
            return tree_map(_mark if on_after else _unmark, out)
        if on or (not tensors and _is_model_device(kwargs.get("device"))):
            return tree_map(_mark, out)
        return out


def pipeline_modules(pipe: Any) -> list[torch.nn.Module]:
    """The torch modules of a diffusers pipeline (UNet, VAE, text encoder ...)."""
    return [m for m in getattr(pipe, "components", {}).values() if isinstance(m, torch.nn.Module)]
