"""`diffedit`: DiffEdit (Couairon et al. 2023) with diffusers' pipeline: a mask from the disagreement of source- and
target-caption noise estimates, DDIM inversion of the source, masked denoising toward the target caption.

The inversion samples the VAE posterior from a generator seeded from the source (benchmark.editing.source_inversions),
so the queries of one source share it: with `reuse_inversions` each source is inverted once, through the run's store.
The mask is drawn per query, from the query's own generator."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from benchmark.editing.base import DiffusionEditor, Item
from benchmark.editing.source_inversions import SourceInversions, dtype_name, scheduler_settings


class DiffEditEditor(SourceInversions, DiffusionEditor):
    """Args (besides DiffusionEditor's): steps, guidance_scale (mask estimation, inversion and denoising alike),
    inpaint_strength (how far inversion goes),
    mask_encode_strength, mask_thresholding_ratio, num_maps_per_mask (DiffEdit's mask estimation),
    reuse_inversions (share each source's inversion through `inversion_store`, which the run sets to
    `<results>/inversions`; without a store every query inverts its own source, with the same source-seeded draw)."""

    prompt_kind: ClassVar[Literal["instruction", "description"]] = "description"
    family: ClassVar[str] = "sd"
    name: ClassVar[str] = "diffedit"
    inversion_kind: ClassVar[str] = "diffedit-ddim"

    def __init__(self, *, steps: int, guidance_scale: float, inpaint_strength: float, mask_encode_strength: float,
                 mask_thresholding_ratio: float, num_maps_per_mask: int, reuse_inversions: bool = True,
                 **common: Any) -> None:
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
        self._init_source_inversions(reuse_inversions)

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
            inverted = torch.stack([inv["latents"] for inv in self._inversions(items)]).to(p.device)
            return list(p(prompt=tgt, negative_prompt=src, mask_image=masks, image_latents=inverted,
                          inpaint_strength=self.inpaint_strength, num_inference_steps=self.steps,
                          guidance_scale=self.guidance_scale, generator=gens, output_type="np").images)

    # --- inversions: DDIM inversion of the source, shared per source ----------------------------------------------

    def _inversion_settings(self) -> dict[str, Any]:
        return {"inverse_scheduler": scheduler_settings(self.diffedit.inverse_scheduler.config), "steps": self.steps,
                "inpaint_strength": self.inpaint_strength, "guidance_scale": self.guidance_scale}

    def _inversion_tensors(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """The inverted latents of one source, x_t at each inverted timestep, last first (as `invert` returns them),
        in the pipeline's dtype."""
        p = self.diffedit
        side = self.resolution // p.vae_scale_factor
        n = min(int(self.steps * self.inpaint_strength), self.steps)  # invert's timesteps (get_inverse_timesteps)
        return {"latents": ((n, p.vae.config.latent_channels, side, side), dtype_name(p.unet.dtype))}

    def _compute_inversions(self, items: Sequence[Item]) -> list[dict[str, Any]]:
        """DDIM-invert the sources under their captions as one batch; each samples the VAE posterior from its
        source's generator."""
        import torch

        with torch.inference_mode():
            # The inversion is guided too, with the same scale: diffusers' DiffEdit example leaves guidance_scale at
            # its default, 7.5, in generate_mask, invert and the final call alike.
            latents = self.diffedit.invert(
                prompt=[it.query.source_caption for it in items], image=[it.image for it in items],
                num_inference_steps=self.steps, inpaint_strength=self.inpaint_strength,
                guidance_scale=self.guidance_scale, generator=[self.source_generator(it) for it in items]).latents
        return [{"latents": latents[i]} for i in range(len(items))]

    def hyperparameters(self) -> dict[str, Any]:
        # negative prompt = source caption, as in diffusers' DiffEdit documentation
        return {"pipeline": "StableDiffusionDiffEditPipeline", "scheduler": "DDIMScheduler+DDIMInverseScheduler",
                "negative_prompt": "source_caption", "steps": self.steps, "guidance_scale": self.guidance_scale,
                "inpaint_strength": self.inpaint_strength, "mask_encode_strength": self.mask_encode_strength,
                "mask_thresholding_ratio": self.mask_thresholding_ratio, "num_maps_per_mask": self.num_maps_per_mask,
                "inversion_noise": "per source (run seed, pixels, caption)", "reuse_inversions": self.reuse_inversions}
