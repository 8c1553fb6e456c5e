"""`sdedit`: SDEdit (Meng et al. 2022) on Stable Diffusion: noise the source to `strength`, denoise toward the target
caption (diffusers' img2img pipeline). Description-based: reads `target_caption`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from benchmark.editing.base import DiffusionEditor, Item


class SDEditEditor(DiffusionEditor):
    """Args (besides DiffusionEditor's): scheduler, steps, strength (fraction of the schedule re-noised),
    guidance_scale."""

    prompt_kind: ClassVar[Literal["instruction", "description"]] = "description"
    family: ClassVar[str] = "sd"
    name: ClassVar[str] = "sdedit"

    def __init__(self, *, scheduler: str, steps: int, strength: float, guidance_scale: float, **common: Any) -> None:
        from diffusers import StableDiffusionImg2ImgPipeline

        from benchmark.models.diffusion import set_scheduler

        super().__init__(**common)
        self.scheduler, self.steps = scheduler, int(steps)
        self.strength, self.guidance_scale = float(strength), float(guidance_scale)
        self.img2img = StableDiffusionImg2ImgPipeline(**self.pipe.components)
        self.img2img.set_progress_bar_config(disable=True)
        set_scheduler(self.img2img, scheduler)

    def _edit_chunk(self, items: Sequence[Item]) -> list[Any]:
        import torch

        with torch.inference_mode():
            return list(self.img2img(
                prompt=[it.query.target_caption for it in items], image=[it.image for it in items],
                strength=self.strength, num_inference_steps=self.steps, guidance_scale=self.guidance_scale,
                generator=self.generators(items), output_type="np",
            ).images)

    def hyperparameters(self) -> dict[str, Any]:
        return {"pipeline": "StableDiffusionImg2ImgPipeline", "scheduler": self.scheduler, "steps": self.steps,
                "strength": self.strength, "guidance_scale": self.guidance_scale}
