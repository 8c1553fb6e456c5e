"""`diffedit`: DiffEdit (Couairon et al. 2023) with diffusers' pipeline: a mask from the disagreement of source- and
target-caption noise estimates, DDIM inversion of the source, masked denoising toward the target caption."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from benchmark.editing.base import DiffusionEditor, Item


class DiffEditEditor(DiffusionEditor):
    """Args (besides DiffusionEditor's): steps, guidance_scale (mask estimation, inversion and denoising alike),
    inpaint_strength (how far inversion goes),
    mask_encode_strength, mask_thresholding_ratio, num_maps_per_mask (DiffEdit's mask estimation)."""

    prompt_kind: ClassVar[Literal["instruction", "description"]] = "description"
    family: ClassVar[str] = "sd"
    name: ClassVar[str] = "diffedit"

    def __init__(self, *, steps: int, guidance_scale: float, inpaint_strength: float, mask_encode_strength: float,
                 mask_thresholding_ratio: float, num_maps_per_mask: int, **common: Any) -> None:
        from diffusers import DDIMInverseScheduler, DDIMScheduler, StableDiffusionDiffEditPipeline

        super().__init__(**common)
        self.steps, self.guidance_scale = int(steps), float(guidance_scale)
        self.inpaint_strength, self.mask_encode_strength = float(inpaint_strength), float(mask_encode_strength)
        self.mask_thresholding_ratio, self.num_maps_per_mask = float(mask_thresholding_ratio), int(num_maps_per_mask)
        comp = dict(self.pipe.components)
        # DiffEdit needs DDIM forward and inverse schedulers (its paper and diffusers' docs).
        comp["scheduler"] = DDIMScheduler.from_config(self.pipe.scheduler.config)
        comp["inverse_scheduler"] = DDIMInverseScheduler.from_config(self.pipe.scheduler.config)
        self.diffedit = StableDiffusionDiffEditPipeline(**{k: v for k, v in comp.items() if k != "image_encoder"},
                                                        requires_safety_checker=False)
        self.diffedit.set_progress_bar_config(disable=True)

    def _edit_chunk(self, items: Sequence[Item]) -> list[Any]:
        import torch

        p, gens = self.diffedit, self.generators(items)
        src = [it.query.source_caption for it in items]
        tgt = [it.query.target_caption for it in items]
        with torch.inference_mode():
            # The mask draws num_maps_per_mask noises from one generator, so it runs per query.
            masks = torch.cat([torch.as_tensor(p.generate_mask(
                image=it.image, source_prompt=s, target_prompt=t, num_maps_per_mask=self.num_maps_per_mask,
                mask_encode_strength=self.mask_encode_strength, mask_thresholding_ratio=self.mask_thresholding_ratio,
                num_inference_steps=self.steps, guidance_scale=self.guidance_scale, generator=g,
            )) for it, s, t, g in zip(items, src, tgt, gens, strict=True)])
            # The inversion is guided too, with the same scale: diffusers' DiffEdit example leaves guidance_scale at
            # its default, 7.5, in generate_mask, invert and the final call alike.
            inverted = p.invert(prompt=src, image=[it.image for it in items], num_inference_steps=self.steps,
                                inpaint_strength=self.inpaint_strength, guidance_scale=self.guidance_scale,
                                generator=gens).latents
            return list(p(prompt=tgt, negative_prompt=src, mask_image=masks, image_latents=inverted,
                          inpaint_strength=self.inpaint_strength, num_inference_steps=self.steps,
                          guidance_scale=self.guidance_scale, generator=gens, output_type="np").images)

    def hyperparameters(self) -> dict[str, Any]:
        # negative prompt = source caption, as in diffusers' DiffEdit documentation
        return {"pipeline": "StableDiffusionDiffEditPipeline", "scheduler": "DDIMScheduler+DDIMInverseScheduler",
                "negative_prompt": "source_caption", "steps": self.steps, "guidance_scale": self.guidance_scale,
                "inpaint_strength": self.inpaint_strength, "mask_encode_strength": self.mask_encode_strength,
                "mask_thresholding_ratio": self.mask_thresholding_ratio, "num_maps_per_mask": self.num_maps_per_mask}
