"""`DiTEditor`: the instruction editors built on diffusion transformers (FLUX.1 Kontext, Qwen-Image-Edit, FLUX.2).

They share `DiffusionEditor`'s machinery (resizing in and out through `to_pil`, one CPU generator per query, the
OOM-halving runner, deterministic mode, `info()`), and differ in how they load (`benchmark.models.dit`: another
pipeline class per `kind`, bf16 by default on CUDA, diffusers' CPU offloading) and in the pipeline call.

Start noise: each query's CPU generator goes to the pipeline as one element of a generator list; diffusers'
`randn_tensor` then draws every sample's noise from its own generator on the CPU, so a query's noise (and edit) is
the same whatever the batch and the device. Pipelines that read a list of images as several references for ONE
prompt (Qwen-Image-Edit-Plus, FLUX.2) are called once per query (`batched = False`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from benchmark.editing.base import DiffusionEditor, Item
from benchmark.editing.batching import HalvingRunner


class DiTEditor(DiffusionEditor):
    """Base of the DiT instruction editors; subclasses set `name`, `kind` (a key of `benchmark.models.dit.KINDS`),
    `batched`, and implement `_call(prompts, images, generators)` and `hyperparameters()`.

    Args common to all:
    weights: 'pretrained' (hub id at a pinned revision), 'tiny' or 'random' (random weights, same classes).
    model_id, revision: the checkpoint on the Hugging Face hub.
    resolution: model input and output size in pixels (square; the source is resized in and the edit back out).
    steps: denoising steps.
    offload: 'none' (the whole pipeline on the device), 'model' (diffusers' enable_model_cpu_offload: each model
        moves to the GPU when it runs) or 'sequential' (enable_sequential_cpu_offload: layer by layer; least memory,
        slowest). Recorded in `info()`.
    device, dtype: 'auto' = CUDA + bf16 when available, else CPU + fp32; dtype one of auto, fp16, bf16, fp32.
    deterministic: PyTorch's deterministic mode (benchmark.editing.determinism). Recorded in `info()`.
    max_batch: largest batch sent to the model at once (None: the harness's batch); halves on CUDA OOM.
    """

    prompt_kind: ClassVar[Literal["instruction", "description"]] = "instruction"
    name: ClassVar[str] = "dit"
    kind: ClassVar[str] = ""
    batched: ClassVar[bool] = True  # the pipeline edits a batch of (prompt, image) pairs in one call

    def __init__(self, *, weights: str, model_id: str, revision: str, resolution: int, steps: int,
                 offload: str = "none", device: str = "auto", dtype: str = "auto", max_batch: int | None = None,
                 deterministic: bool = False) -> None:
        """Loads `self.pipe` for `kind` from `weights` and records its provenance; see the class docstring."""
        from benchmark.editing.determinism import configure_cublas
        from benchmark.models.dit import load_dit_pipeline

        configure_cublas()  # before the model's first cuBLAS call in this process
        self.resolution = int(resolution)
        self.steps = int(steps)
        self.deterministic = bool(deterministic)
        self.pipe, self.provenance = load_dit_pipeline(self.kind, weights=weights, model_id=model_id,
                                                       revision=revision, device=device, dtype=dtype,
                                                       offload=offload, what=f"editor {self.name!r}")
        self.device = self.provenance["device"]
        self.runner = HalvingRunner(max_batch)
        multiple = int(self.pipe.vae_scale_factor) * 2  # VAE downsampling x 2x2 latent packing
        if self.resolution % multiple:
            raise ValueError(f"editor {self.name!r}: resolution {self.resolution} is not a multiple of {multiple} (VAE "
                             f"downsampling x 2x2 packing of this pipeline); set editor.resolution to one, e.g. "
                             f"{max(multiple, self.resolution // multiple * multiple)}")

    def _edit_chunk(self, items: Sequence[Item]) -> list[Any]:
        """(H, W, 3) float images in [0, 1] at the model resolution, one per item; noise from each query's own
        generator, so an item's output does not depend on the others."""
        import torch

        gens = self.generators(items)
        prompts = [it.query.instruction for it in items]
        images = [it.image for it in items]
        with torch.inference_mode():
            if self.batched:
                return list(self._call(prompts, images, gens))
            return [out for p, im, g in zip(prompts, images, gens, strict=True) for out in self._call([p], [im], [g])]

    def _call(self, prompts: list[str], images: list[Any], generators: list[Any]) -> Any:
        """The pipeline on these (prompt, image, generator) triples: a (B, H, W, 3) float array in [0, 1]."""
        raise NotImplementedError
