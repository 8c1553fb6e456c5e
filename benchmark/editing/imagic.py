"""Imagic (Kawar et al. 2023) building blocks: embedding optimisation, model fine-tuning, interpolation, and the
per-image fine-tune cache.

The fine-tune of one image is expensive (hundreds of UNet steps) and is reused across editing settings that do not
change it (e.g. an eta sweep). ImagenHub's Imagic reused a fine-tune when image *and* prompt matched only partially
(an `and` where `or` was needed), so a new image with the same prompt got a stale model. Here the key is a hash of
every input of the fine-tune: the image's pixels, the prompt, every optimisation hyperparameter, the base weights
and the seed. A different image always gets a different key.

Fidelity to the reference (diffusers' community `imagic_stable_diffusion.py`, docs/diffusion.md): the source latent
is one sample of the VAE posterior (`source_latent: sample`), drawn first from the query's optimisation stream and
used by both stages; `mean` is the posterior mean. Precision (`optimisation_precision`): `fp32`, or `bf16_autocast`,
the practice of diffusers' training scripts (bf16 autocast around the UNet's forward, fp32 master weights, gradients
and Adam state, the loss in fp32).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

from benchmark.io.hashing import stable_hash

SOURCE_LATENTS = ("sample", "mean")
PRECISIONS = ("auto", "fp32", "bf16_autocast")


def check_source_latent(mode: str) -> str:
    """`mode` itself when it is one of `SOURCE_LATENTS`, else a ValueError naming the valid values."""
    if mode not in SOURCE_LATENTS:
        raise ValueError(f"imagic: source_latent {mode!r} is not one of {', '.join(SOURCE_LATENTS)}; set it with "
                         f"editor.source_latent=<value>")
    return str(mode)


def resolve_precision(precision: str, device: str) -> str:
    """The optimisation's precision mode: 'auto' -> 'bf16_autocast' on CUDA, 'fp32' elsewhere; an unknown name
    raises a ValueError naming the valid values."""
    if precision not in PRECISIONS:
        raise ValueError(f"imagic: optimisation_precision {precision!r} is not one of {', '.join(PRECISIONS)}; set "
                         f"it with editor.optimisation_precision=<value>")
    if precision == "auto":
        return "bf16_autocast" if str(device).startswith("cuda") else "fp32"
    return str(precision)


def source_latent(pipe: Any, image: Any, *, mode: str, generator: Any) -> Any:
    """The scaled VAE latent (1, C, h, w) in fp32 that Imagic's optimisation reconstructs.

    'sample': mean + std * eps of the posterior, eps drawn in fp32 from `generator` (a CPU generator, so the draw is
    the same on every device and at every dtype), as the reference draws `latent_dist.sample(generator)` once before
    its optimisation. 'mean': the posterior mean (`inversion.encode_images`).
    """
    import torch

    from benchmark.editing.inversion import encode_images

    if check_source_latent(mode) == "mean":
        return encode_images(pipe, [image]).float()
    x = pipe.image_processor.preprocess([image]).to(pipe.vae.device, pipe.vae.dtype)
    with torch.no_grad():
        dist = pipe.vae.encode(x).latent_dist
    mean = dist.mean.float()
    eps = torch.randn(mean.shape, generator=generator, dtype=torch.float32).to(mean.device)
    return (mean + dist.std.float() * eps) * pipe.vae.config.scaling_factor


def autocast(precision: str, device: Any) -> Any:
    """The context of one optimisation forward: bf16 autocast on `device`'s type for 'bf16_autocast', else none."""
    import torch

    if precision == "bf16_autocast":
        return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)
    if precision != "fp32":
        raise ValueError(f"imagic: optimisation precision {precision!r} is not fp32 or bf16_autocast")
    return nullcontext()


def image_digest(image: Any) -> str:
    """sha256 of an image's mode, size and pixels (what the model sees, not the file it came from)."""
    import numpy as np

    arr = np.ascontiguousarray(np.asarray(image))
    h = hashlib.sha256(f"{image.mode}:{image.size}:{arr.dtype}:{arr.shape}".encode())
    h.update(arr.tobytes())
    return h.hexdigest()


def finetune_key(*, image: Any, prompt: str, seed: int, weights: dict[str, Any], optim: dict[str, Any]) -> str:
    """Cache key of one Imagic fine-tune: covers image pixels, prompt, seed, base weights, optimisation settings."""
    return stable_hash({"image": image_digest(image), "prompt": prompt, "seed": int(seed), "weights": weights,
                        "optim": optim}, length=32)


def interpolate(e_opt: Any, e_tgt: Any, eta: float) -> Any:
    """Imagic's interpolation: eta * e_tgt + (1 - eta) * e_opt (eta 0: reconstruct the input, 1: the target text)."""
    return eta * e_tgt + (1.0 - eta) * e_opt


@contextmanager
def fp32_weights(unet: Any) -> Iterator[None]:
    """Within the block the UNet's weights are fp32 (optimisation); its dtype is restored on exit, also on error."""
    import torch

    dtype = unet.dtype
    # torch's own Module.to: diffusers' override warns about "modules to keep in float32" on every dtype cast,
    # even when there are none (SD's UNet); it adds nothing else for an unquantised model.
    torch.nn.Module.to(unet, torch.float32)
    try:
        yield
    finally:
        torch.nn.Module.to(unet, dtype)


def _denoising_loss(unet: Any, scheduler: Any, x0: Any, emb: Any, generator: Any, precision: str = "fp32") -> Any:
    """Standard diffusion loss at a random timestep, noise drawn from the query's own CPU generator. With
    'bf16_autocast' the UNet's forward runs under bf16 autocast (its weights stay as they are, fp32 in the
    optimisation); the loss is computed in fp32 outside it."""
    import torch

    t = torch.randint(0, scheduler.config.num_train_timesteps, (1,), generator=generator)
    noise = torch.randn(x0.shape, generator=generator).to(x0.device, x0.dtype)
    xt = scheduler.add_noise(x0, noise, t)
    with autocast(precision, unet.device):
        pred = unet(xt.to(unet.device, unet.dtype), t.to(unet.device),
                    encoder_hidden_states=emb.to(unet.device, unet.dtype)).sample
    return torch.nn.functional.mse_loss(pred.float(), noise.float())


def optimise_embedding(unet: Any, scheduler: Any, x0: Any, e_tgt: Any, *, steps: int, lr: float,
                       generator: Any, precision: str = "fp32") -> Any:
    """Stage A: tune the text embedding (model frozen) so the model reconstructs the input image."""
    import torch

    e = e_tgt.detach().float().clone().requires_grad_(True)
    opt = torch.optim.Adam([e], lr=lr)
    unet.requires_grad_(False)
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        _denoising_loss(unet, scheduler, x0, e, generator, precision).backward()
        opt.step()
    return e.detach()


def finetune_unet(unet: Any, scheduler: Any, x0: Any, e_opt: Any, *, steps: int, lr: float, generator: Any,
                  precision: str = "fp32") -> None:
    """Stage B: fine-tune the UNet (embedding frozen at e_opt) in place to reconstruct the input even better."""
    import torch

    unet.requires_grad_(True)
    unet.train()
    opt = torch.optim.Adam([p for p in unet.parameters() if p.requires_grad], lr=lr)
    try:
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            _denoising_loss(unet, scheduler, x0, e_opt, generator, precision).backward()
            opt.step()
    finally:
        unet.requires_grad_(False)
        unet.eval()


class FinetuneCache:
    """LRU of (optimised embedding, fine-tuned UNet weights on CPU) by `finetune_key`; process-wide so a Hydra
    multirun sweep over eta (one editor instance per job) reuses the fine-tune."""

    def __init__(self) -> None:
        """An empty cache; capacity is given per `put` (the editor's `cache_size`)."""
        self.entries: OrderedDict[str, tuple[Any, dict[str, Any]]] = OrderedDict()
        self.hits = self.misses = 0

    def get(self, key: str) -> tuple[Any, dict[str, Any]] | None:
        """The cached (embedding, UNet state) of `key`, marked most recently used; None on a miss."""
        if key in self.entries:
            self.entries.move_to_end(key)
            self.hits += 1
            return self.entries[key]
        self.misses += 1
        return None

    def put(self, key: str, value: tuple[Any, dict[str, Any]], capacity: int) -> None:
        """Store `value`, evicting the least recently used entries beyond `capacity` (0: store nothing)."""
        if capacity <= 0:
            return
        self.entries[key] = value
        self.entries.move_to_end(key)
        while len(self.entries) > capacity:
            self.entries.popitem(last=False)


FINETUNES = FinetuneCache()
