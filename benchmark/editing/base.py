"""`DiffusionEditor`: what every diffusers-based editor shares (loading, resizing, per-query randomness, OOM).

Subclasses set `prompt_kind`, `family`, `name`, implement `_edit_chunk(items)` and `hyperparameters()`. Images are
resized to a square `resolution` for the model and the result back to the source size (Stable Diffusion works on
multiples of 8 latent pixels; HATIE and MagicBrush images have many aspect ratios). A subclass may size its inputs
otherwise by overriding `prepare` and `finisher` (InstructPix2Pix and MagicBrush keep the aspect ratio, as their
authors' script does: benchmark.editing.ip2p).
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from PIL import Image

from benchmark.editing.batching import HalvingRunner
from benchmark.editing.determinism import deterministic_algorithms
from benchmark.editing.editor import Editor, generators
from benchmark.editing.work_counter import count_unet_calls
from benchmark.io.types import Query


class CoarseSettingWarning(UserWarning):
    """A setting that the run's few sampling steps round away: nearby values give byte-identical edits."""


# A strength step wider than this (steps <= 10) is worth a warning: at the tiny profile's 3 steps it is a third.
COARSE_STRENGTH_STEP = 0.1


def coarse_strengths(info: dict[str, Any]) -> list[str]:
    """Warnings for the `strength`-like settings of an editor's `info()` that few steps make coarse.

    diffusers' img2img-style pipelines (img2img, DiffEdit's inpaint and mask strengths, SDEdit) run
    n = min(int(steps * strength), steps) of the `steps` denoising steps, so every strength in [n/steps, (n+1)/steps)
    gives the same edit. Keys read: `steps` and each `strength` or `*_strength` in [0, 1); none when the step
    between two step counts, 1/steps, is at most `COARSE_STRENGTH_STEP`."""
    steps = info.get("steps")
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1 or 1 / steps <= COARSE_STRENGTH_STEP:
        return []
    notes = []
    for key, value in info.items():
        if not (key == "strength" or key.endswith("_strength")) or isinstance(value, bool):
            continue
        if not isinstance(value, int | float) or not 0 <= value < 1:
            continue
        n = min(int(steps * value), steps)  # diffusers' get_timesteps
        notes.append(f"{info.get('name', 'editor')}: {key}={value:g} runs {n} of its {steps} denoising steps, as "
                     f"every {key} in [{n / steps:.3g}, {(n + 1) / steps:.3g}) does, so those values give "
                     "byte-identical edits" + (" (0 steps: the edit is the source)" if n == 0 else "")
                     + f"; compare {key} settings at more steps (editor.steps=50 or profile=pretrained), not at "
                     "the tiny profile (docs/editors.md, section 4)")
    return notes


def warn_coarse_strengths(info: dict[str, Any]) -> list[str]:
    """`coarse_strengths(info)`, each issued as a `CoarseSettingWarning`; returns them."""
    import warnings

    notes = coarse_strengths(info)
    for note in notes:
        warnings.warn(note, CoarseSettingWarning, stacklevel=2)
    return notes


@dataclass(frozen=True)
class Item:
    """One query as the model sees it: the query, its source resized to the model resolution, its seed."""

    query: Query
    image: Image.Image
    seed: int


def to_pil(image: Any, size: tuple[int, int]) -> Image.Image:
    """Resize a float (H, W, 3) image in [0, 1] to `size` (w, h) and quantise to 8 bits once, at the very end.

    Resizing before quantising keeps float noise (e.g. a batched kernel summing in another order) to at most one
    8-bit level instead of being amplified by the interpolation of already-rounded pixels.
    """
    import numpy as np
    import torch

    x = torch.as_tensor(np.asarray(image, dtype=np.float32)).permute(2, 0, 1)[None]
    if (x.shape[-1], x.shape[-2]) != tuple(size):
        x = torch.nn.functional.interpolate(x, size=(size[1], size[0]), mode="bicubic", antialias=True, align_corners=False)
    arr = (x[0].permute(1, 2, 0).clamp(0, 1) * 255).round().to(torch.uint8).numpy()
    return Image.fromarray(arr, mode="RGB")


class DiffusionEditor(Editor):
    """Base of the diffusers editors: loads `self.pipe`, resizes in and out, batches, and seeds each query.

    Subclasses set `prompt_kind`, `family` (which base pipeline to load: a key of
    `benchmark.models.diffusion.FAMILIES`), `name`, and implement `_edit_chunk` and `hyperparameters`.

    Args common to all:
    weights: 'pretrained' (hub id at a pinned revision) or 'tiny' (random weights, same classes).
    model_id, revision: the checkpoint on the Hugging Face hub.
    resolution: model input size in pixels (square).
    device, dtype: 'auto' = CUDA + fp16 when available, else CPU + fp32; dtype one of auto, fp16, bf16, fp32.
    deterministic: run the model under PyTorch's deterministic mode (benchmark.editing.determinism): what the
        editors that backpropagate (P2P, Imagic) need for byte-identical reruns on a GPU. Recorded in `info()`.
    max_batch: largest batch sent to the model at once (None: the harness's batch); halves on CUDA OOM.
    tiny_overrides: changes to the tiny components for this editor (tiny profile only), merged over the class
        attribute of the same name, e.g. `{"unet": {"block_out_channels": [32, 32, 64]}}`.
    checkpoint, single_file: 'diffusers' (default: model_id at revision) or 'single_file' (pretrained only: the
        original checkpoint file `single_file` names, through diffusers' from_single_file; see
        benchmark.models.diffusion.load_pipeline).
    """

    family: ClassVar[str] = "sd"
    name: ClassVar[str] = "diffusion"
    # What this editor's pipeline needs beyond the shared tiny components (benchmark.models.diffusion.tiny_configs):
    # {component: {setting: value}}, component one of unet, vae, text, scheduler. Empty: the shared tiny pipeline.
    tiny_overrides: ClassVar[dict[str, dict[str, Any]]] = {}

    def __init__(self, *, weights: str, model_id: str, revision: str, resolution: int, device: str = "auto",
                 dtype: str = "auto", max_batch: int | None = None, deterministic: bool = False,
                 tiny_overrides: dict[str, dict[str, Any]] | None = None, checkpoint: str = "diffusers",
                 single_file: dict[str, Any] | None = None) -> None:
        """Loads `self.pipe` for `family` from `weights` and records its provenance; see the class docstring."""
        from benchmark.editing.determinism import configure_cublas
        from benchmark.models.diffusion import load_pipeline, merge_tiny_overrides

        configure_cublas()  # before the model's first cuBLAS call in this process
        self.resolution = int(resolution)
        self.deterministic = bool(deterministic)
        what = f"editor {self.name!r}"
        overrides = merge_tiny_overrides(type(self).tiny_overrides, tiny_overrides, what=what)
        self.pipe, self.provenance = load_pipeline(self.family, weights=weights, model_id=model_id, revision=revision,
                                                   device=device, dtype=dtype, what=what, tiny_overrides=overrides,
                                                   checkpoint=checkpoint, single_file=single_file)
        self.device = self.provenance["device"]
        self.runner = HalvingRunner(max_batch)
        # what `work_counts` reports: UNet sample evaluations (benchmark.editing.work_counter); a subclass adds its
        # own keys, created at 0 in its __init__ and incremented where the work happens
        self.work: Counter[str] = Counter()
        count_unet_calls(self.pipe.unet, self.work)

    def work_counts(self) -> dict[str, int]:
        """Cumulative counters since construction: `unet_forward` and `unet_forward_backward` (UNet sample
        evaluations, benchmark.editing.work_counter) and whatever keys the subclass adds to `self.work`."""
        return dict(getattr(self, "work", {}))

    def edit(self, queries: Sequence[Query], images: Sequence[Image.Image], *, seeds: Sequence[int]) -> list[Image.Image]:
        """One PIL RGB image per query at its source's size: `edit_deferred` with every output finished at once."""
        return [finish() for finish in self.edit_deferred(queries, images, seeds=seeds)]

    def edit_deferred(self, queries: Sequence[Query], images: Sequence[Image.Image], *, seeds: Sequence[int],
                      prepared: Sequence[Any] | None = None) -> list[Callable[[], Image.Image]]:
        """Run the model now; resizing each output back to its source size and quantising is left to the caller's
        thread. For the tiny CPU models the resizing in and out costs ~1.5 ms per 256 px image, 5% of a model call."""
        self.check_prompts(queries)
        model_inputs = [p if p is not None else self.prepare(im)
                        for p, im in zip(prepared or [None] * len(images), images, strict=True)]
        items = [Item(q, im, int(s)) for q, im, s in zip(queries, model_inputs, seeds, strict=True)]
        with deterministic_algorithms(self.deterministic):
            outs = self.runner(self._edit_chunk, items)
        return [self.finisher(o, im) for o, im in zip(outs, images, strict=True)]

    def prepare(self, image: Image.Image) -> Image.Image:
        """The source as PIL RGB at the model resolution (square `resolution`, bicubic): what `Item.image` holds.
        A subclass that sizes its inputs otherwise (InstructPix2Pix's aspect-keeping sizes, benchmark.editing.ip2p)
        overrides this and `finisher` together."""
        return image.convert("RGB").resize((self.resolution, self.resolution), Image.Resampling.BICUBIC)

    def finisher(self, output: Any, source: Image.Image) -> Callable[[], Image.Image]:
        """What turns one model output back into an image of its source's size, run later on the caller's thread:
        `to_pil` (resize the whole output to the source size, quantise once)."""
        return functools.partial(to_pil, output, source.size)

    def generators(self, items: Sequence[Item]) -> list[Any]:
        """One CPU generator per query (same stream whatever the batch)."""
        return generators([it.seed for it in items])

    def initial_latents(self, items: Sequence[Item], gens: Sequence[Any], size: tuple[int, int] | None = None) -> Any:
        """Start noise drawn per query on the CPU, so it matches across batch sizes and devices; for images of
        `size` (w, h) pixels, square `resolution` by default."""
        import torch

        c, f = self.pipe.unet.config.out_channels, self.pipe.vae_scale_factor
        w, h = size or (self.resolution, self.resolution)
        lat = torch.cat([torch.randn((1, c, h // f, w // f), generator=g) for g in gens])
        return lat.to(self.device, self.pipe.unet.dtype)

    def _edit_chunk(self, items: Sequence[Item]) -> list[Any]:
        """What subclasses implement: run the model on `items` (at most `max_batch` of them).

        Must return float images in [0, 1] at the model resolution, one per item, in order: (H, W, 3) numpy arrays
        or CPU tensors (the stage finishes them on its writer thread while the device runs the next batch). Item
        i's output must not depend on the other items: draw noise from `self.generators(items)`."""
        raise NotImplementedError

    def hyperparameters(self) -> dict[str, Any]:
        """Every setting of the subclass that shapes the output (pipeline, scheduler, steps, guidance ...), as a
        JSON-serialisable dict; `info()` merges it with the weights' provenance."""
        raise NotImplementedError

    def info(self) -> dict[str, Any]:
        """name, prompt_kind, weights provenance (weights, model_id, revision, device, dtype, pipeline; tiny
        overrides when any), resolution, deterministic mode and `hyperparameters()`: a JSON-serialisable dict."""
        return {"name": self.name, "prompt_kind": self.prompt_kind, **self.provenance, "resolution": self.resolution,
                "deterministic": self.deterministic, **self.hyperparameters()}
