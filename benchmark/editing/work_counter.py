"""Counting the work a diffusion editor does, instead of guessing it: UNet sample evaluations.

The unit is one latent row through the UNet once: a call on a (B, C, h, w) latent batch adds B. A call whose output
requires a gradient (grad mode on, and a parameter or an input that requires one: null-text optimisation, Imagic's
embedding optimisation and fine-tuning) is followed by a backward pass and counts as `unet_forward_backward`;
every other call as `unet_forward`. Classifier-free guidance that stacks [uncond, cond] in one call is 2 rows per
query and step; two separate calls are 2 rows too.

The counter is a forward hook on the UNet module, so every pipeline built over that module counts (LEDITS++'s and
DiffEdit's pipelines share the editor's UNet). It runs after the forward returns: a call that raised (CUDA out of
memory) evaluated nothing and adds nothing. The counts are plain integers in a `collections.Counter` that the
editor owns and updates on the thread that runs the model (the edit stage's main thread).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

UNET_FORWARD = "unet_forward"
UNET_FORWARD_BACKWARD = "unet_forward_backward"
UNET_KEYS = (UNET_FORWARD, UNET_FORWARD_BACKWARD)
# The same unit for a diffusion transformer (FLUX.1: benchmark.editing.flow_edit): one latent row through it once.
TRANSFORMER_FORWARD = "transformer_forward"
TRANSFORMER_FORWARD_BACKWARD = "transformer_forward_backward"
TRANSFORMER_KEYS = (TRANSFORMER_FORWARD, TRANSFORMER_FORWARD_BACKWARD)


def _rows(args: tuple[Any, ...], kwargs: dict[str, Any], name: str = "sample") -> int:
    """The batch size of a model call: rows of its latent input (the first argument, or the keyword `name`)."""
    sample = args[0] if args else kwargs.get(name)
    shape = getattr(sample, "shape", None)
    return int(shape[0]) if shape else 0


def _output_tensor(output: Any) -> Any:
    """The UNet's output tensor: `.sample` of its output class, or the first element of `return_dict=False`'s tuple."""
    sample = getattr(output, "sample", None)
    if sample is not None:
        return sample
    if isinstance(output, tuple | list) and output:
        return output[0]
    return output


def count_unet_calls(unet: Any, work: Counter[str]) -> Any:
    """Count every call of `unet` into `work` (UNET_KEYS, created at 0); returns the hook's handle (`.remove()`
    stops counting)."""
    return _count_calls(unet, work, UNET_KEYS, "sample")


def count_transformer_calls(transformer: Any, work: Counter[str]) -> Any:
    """Count every call of a diffusion transformer (its latent input: `hidden_states`) into `work`
    (TRANSFORMER_KEYS, created at 0); returns the hook's handle."""
    return _count_calls(transformer, work, TRANSFORMER_KEYS, "hidden_states")


def _count_calls(model: Any, work: Counter[str], keys: tuple[str, str], input_name: str) -> Any:
    import torch

    forward, forward_backward = keys
    for key in keys:
        work.setdefault(key, 0)

    def hook(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        out = _output_tensor(output)
        backward = torch.is_grad_enabled() and bool(getattr(out, "requires_grad", False))
        work[forward_backward if backward else forward] += _rows(args, kwargs, input_name)

    return model.register_forward_hook(hook, with_kwargs=True)


def difference(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    """after - before per key, zeros kept (a stage that did nothing records zeros, not an empty dict)."""
    return {k: int(after.get(k, 0)) - int(before.get(k, 0)) for k in sorted({*after, *before})}
