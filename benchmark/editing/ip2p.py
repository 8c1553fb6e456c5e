"""InstructPix2Pix-style editing (IP2P and its fine-tunes such as MagicBrush): one pipeline class, two checkpoints."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from benchmark.editing.base import DiffusionEditor, Item


class Pix2PixEditor(DiffusionEditor):
    """`StableDiffusionInstructPix2PixPipeline` with classifier-free guidance on text (sT) and image (sI).

    Args (besides DiffusionEditor's): scheduler (diffusers class name), steps, guidance_scale (sT),
    image_guidance_scale (sI).
    """

    prompt_kind: ClassVar[Literal["instruction", "description"]] = "instruction"
    family: ClassVar[str] = "ip2p"

    def __init__(self, *, scheduler: str, steps: int, guidance_scale: float, image_guidance_scale: float,
                 **common: Any) -> None:
        """Loads the `ip2p` pipeline (DiffusionEditor) and sets its scheduler."""
        from benchmark.models.diffusion import set_scheduler

        super().__init__(**common)
        self.scheduler, self.steps = scheduler, int(steps)
        self.guidance_scale, self.image_guidance_scale = float(guidance_scale), float(image_guidance_scale)
        set_scheduler(self.pipe, scheduler)

    def _edit_chunk(self, items: Sequence[Item]) -> list[Any]:
        """One (H, W, 3) float image in [0, 1] per item: the instruction-guided edit, start noise drawn per query."""
        import torch

        gens = self.generators(items)
        with torch.inference_mode():
            return list(self.pipe(
                prompt=[it.query.instruction for it in items], image=[it.image for it in items],
                num_inference_steps=self.steps, guidance_scale=self.guidance_scale,
                image_guidance_scale=self.image_guidance_scale, generator=gens,
                latents=self.initial_latents(items, gens), output_type="np",
            ).images)

    def hyperparameters(self) -> dict[str, Any]:
        """Sampler settings that shape the output (merged into `info()`)."""
        return {"scheduler": self.scheduler, "steps": self.steps, "guidance_scale": self.guidance_scale,
                "image_guidance_scale": self.image_guidance_scale}
