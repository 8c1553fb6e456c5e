"""`ledits`: LEDITS++ (Brack et al. 2024) on Stable Diffusion through diffusers' `LEditsPPPipelineStableDiffusion`.

Edit-friendly DPM-solver inversion of the source under its caption, then semantic guidance toward the target caption
with LEDITS++'s implicit masks (cross-attention map of the edit concept intersected with the noise estimate).
Description-based: reads `source_caption` (inversion prompt) and `target_caption` (the edit concept).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from benchmark.editing.base import DiffusionEditor, Item


class LeditsPPEditor(DiffusionEditor):
    """Args (besides DiffusionEditor's): steps (inversion = denoising steps), skip (fraction of the schedule not
    inverted), source_guidance_scale (inversion), edit_guidance_scale, edit_threshold (implicit-mask quantile),
    edit_warmup_steps, use_cross_attn_mask, use_intersect_mask."""

    prompt_kind: ClassVar[Literal["instruction", "description"]] = "description"
    family: ClassVar[str] = "sd"
    name: ClassVar[str] = "ledits"
    # The tiny profile only: the shared two-level tiny UNet has cross-attention at the full latent size only;
    # LEDITS++'s attention mask needs it at 1/4, so this editor's tiny UNet has SD v1's four levels (attention at
    # 1, 1/2 and 1/4 of the latent size, none at the lowest, 1/8).
    tiny_overrides: ClassVar[dict[str, dict[str, Any]]] = {"unet": {
        "block_out_channels": [32, 32, 64, 64],
        "down_block_types": ["CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"],
        "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"],
    }}

    def __init__(self, *, steps: int, skip: float, source_guidance_scale: float, edit_guidance_scale: float,
                 edit_threshold: float, edit_warmup_steps: int, use_cross_attn_mask: bool, use_intersect_mask: bool,
                 **common: Any) -> None:
        """Loads the SD pipeline (DiffusionEditor) and builds LEDITS++'s pipeline on its components."""
        from diffusers import DPMSolverMultistepScheduler, LEditsPPPipelineStableDiffusion

        super().__init__(**common)
        self.steps, self.skip, self.source_guidance_scale = int(steps), float(skip), float(source_guidance_scale)
        self.edit_guidance_scale, self.edit_threshold = float(edit_guidance_scale), float(edit_threshold)
        self.edit_warmup_steps = int(edit_warmup_steps)
        self.use_cross_attn_mask, self.use_intersect_mask = bool(use_cross_attn_mask), bool(use_intersect_mask)
        comp = {k: v for k, v in self.pipe.components.items() if k != "image_encoder"}
        # The pipeline's own default sampler (it would swap any other scheduler for this one, with a warning).
        comp["scheduler"] = DPMSolverMultistepScheduler.from_config(
            self.pipe.scheduler.config, algorithm_type="sde-dpmsolver++", solver_order=2)
        self.ledits = LEditsPPPipelineStableDiffusion(**comp, requires_safety_checker=False)
        self.ledits.set_progress_bar_config(disable=True)

    def _edit_chunk(self, items: Sequence[Item]) -> list[Any]:
        """One (H, W, 3) float image in [0, 1] per item."""
        # One query at a time: the pipeline keeps the last inversion on itself and applies its editing prompts to
        # every image of that inversion, and the inversion draws its noise from one generator.
        return [self._edit_one(it, gen) for it, gen in zip(items, self.generators(items), strict=True)]

    def _edit_one(self, item: Item, gen: Any) -> Any:
        """Invert the source under its caption, then edit toward the target caption; both draw from `gen`."""
        import torch

        p, q = self.ledits, item.query
        with torch.inference_mode():
            p.invert(image=item.image, source_prompt=q.source_caption, source_guidance_scale=self.source_guidance_scale,
                     num_inversion_steps=self.steps, skip=self.skip, generator=gen,
                     height=self.resolution, width=self.resolution)
            return p(editing_prompt=[q.target_caption], reverse_editing_direction=[False],
                     edit_guidance_scale=[self.edit_guidance_scale], edit_threshold=[self.edit_threshold],
                     edit_warmup_steps=[self.edit_warmup_steps], use_cross_attn_mask=self.use_cross_attn_mask,
                     use_intersect_mask=self.use_intersect_mask, generator=gen, output_type="np").images[0]

    def hyperparameters(self) -> dict[str, Any]:
        """Every setting that shapes the output, with how the query's captions are used."""
        return {"pipeline": "LEditsPPPipelineStableDiffusion", "scheduler": "DPMSolverMultistepScheduler (sde-dpmsolver++, 2)",
                "inversion_prompt": "source_caption", "editing_prompt": "target_caption", "steps": self.steps,
                "skip": self.skip, "source_guidance_scale": self.source_guidance_scale,
                "edit_guidance_scale": self.edit_guidance_scale, "edit_threshold": self.edit_threshold,
                "edit_warmup_steps": self.edit_warmup_steps, "use_cross_attn_mask": self.use_cross_attn_mask,
                "use_intersect_mask": self.use_intersect_mask}
