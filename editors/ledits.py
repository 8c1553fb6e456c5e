"""`ledits`: LEDITS++ (Brack et al. 2024) on Stable Diffusion through diffusers' `LEditsPPPipelineStableDiffusion`.

Edit-friendly DPM-solver inversion of the source under its caption, then semantic guidance toward the target caption
with LEDITS++'s implicit masks (cross-attention map of the edit concept intersected with the noise estimate).
Description-based: reads `source_caption` (inversion prompt) and `target_caption` (the edit concept).
The inversion draws its noise from a generator seeded from the source (benchmark.editing.source_inversions), so the
queries of one source share it: with `reuse_inversions` each source is inverted once, through the run's store.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from benchmark.editing.base import DiffusionEditor, Item
from benchmark.editing.source_inversions import SourceInversions, dtype_name, scheduler_settings


class LeditsPPEditor(SourceInversions, DiffusionEditor):
    """Args (besides DiffusionEditor's): steps (inversion = denoising steps), skip (fraction of the schedule not
    inverted), source_guidance_scale (inversion), edit_guidance_scale, edit_threshold (implicit-mask quantile),
    edit_warmup_steps, use_cross_attn_mask, use_intersect_mask, reuse_inversions (share each source's inversion
    through `inversion_store`, which the run sets to `<results>/inversions`; without a store every query inverts
    its own source, drawing the same source-seeded noise)."""

    prompt_kind: ClassVar[Literal["instruction", "description"]] = "description"
    family: ClassVar[str] = "sd"
    name: ClassVar[str] = "ledits"
    inversion_kind: ClassVar[str] = "ledits-pp-edit-friendly"
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
                 reuse_inversions: bool = True, **common: Any) -> None:
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
        self._init_source_inversions(reuse_inversions)
        # before any inversion: `invert` sets the scheduler's timestep_spacing, which must not change the key
        self._scheduler_settings = scheduler_settings(self.ledits.scheduler.config)

    def _edit_chunk(self, items: Sequence[Item]) -> list[Any]:
        """One (H, W, 3) float image in [0, 1] per item."""
        # One query at a time: the pipeline keeps the last inversion on itself and applies its editing prompts to
        # every image of that inversion.
        inversions = self._inversions(items)
        return [self._edit_one(it, inv, gen)
                for it, inv, gen in zip(items, inversions, self.generators(items), strict=True)]

    def _edit_one(self, item: Item, inversion: dict[str, Any], gen: Any) -> Any:
        """Put the source's inversion on the pipeline, then edit toward the target caption (which draws nothing)."""
        import torch

        p, q = self.ledits, item.query
        with torch.inference_mode():
            self._restore_inversion(inversion)
            return p(editing_prompt=[q.target_caption], reverse_editing_direction=[False],
                     edit_guidance_scale=[self.edit_guidance_scale], edit_threshold=[self.edit_threshold],
                     edit_warmup_steps=[self.edit_warmup_steps], use_cross_attn_mask=self.use_cross_attn_mask,
                     use_intersect_mask=self.use_intersect_mask, generator=gen, output_type="np").images[0]

    # --- inversions: edit-friendly DPM-solver++ inversion, shared per source ---------------------------------------

    def _inversion_settings(self) -> dict[str, Any]:
        return {"scheduler": self._scheduler_settings, "steps": self.steps, "skip": self.skip,
                "source_guidance_scale": self.source_guidance_scale, "resolution": self.resolution}

    def _inversion_tensors(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """What `invert` leaves on the pipeline that depends on the source: the start latent, the per-step noise
        maps and the inverted timesteps (in the pipeline's dtype, as invert makes them)."""
        p = self.ledits
        latent = (1, p.vae.config.latent_channels, self.resolution // p.vae_scale_factor,
                  self.resolution // p.vae_scale_factor)
        dtype = dtype_name(p.text_encoder.dtype)
        return {"init_latents": (latent, dtype), "zs": ((self.steps, *latent), dtype),
                "inversion_steps": ((self.steps,), "int64")}

    def _compute_inversions(self, items: Sequence[Item]) -> list[dict[str, Any]]:
        """`invert` each source under its caption, one at a time (the pipeline holds one inversion), drawing from
        the source's generator."""
        import torch

        p, out = self.ledits, []
        with torch.inference_mode():
            for it in items:
                p.invert(image=it.image, source_prompt=it.query.source_caption,
                         source_guidance_scale=self.source_guidance_scale, num_inversion_steps=self.steps,
                         skip=self.skip, generator=self.source_generator(it), height=self.resolution,
                         width=self.resolution)
                out.append({"init_latents": p.init_latents.clone(), "zs": p.zs.clone(),
                            "inversion_steps": p.inversion_steps.clone()})
        return out

    def _restore_inversion(self, inversion: dict[str, Any]) -> None:
        """Leave the pipeline as `invert` leaves it for this source: plain attention processors, eta 1, the
        scheduler's "leading" spacing set twice as invert sets it (the timesteps then match the stored ones), and
        the stored latents and noise maps on the pipeline's device."""
        import torch
        from diffusers.models.attention_processor import AttnProcessor

        p = self.ledits
        p.unet.set_attn_processor(AttnProcessor())
        p.eta = 1.0
        p.scheduler.config.timestep_spacing = "leading"
        p.scheduler.set_timesteps(int(self.steps * (1 + self.skip)))
        timesteps = p.scheduler.timesteps[-self.steps:]
        if not torch.equal(timesteps.cpu(), inversion["inversion_steps"].cpu()):
            raise ValueError(f"ledits: stored inversion timesteps {inversion['inversion_steps'].tolist()} are not "
                             f"this scheduler's {timesteps.tolist()}")
        p.inversion_steps = timesteps
        p.scheduler.set_timesteps(len(p.scheduler.timesteps))
        p.batch_size = 1
        p.init_latents = inversion["init_latents"].to(p.device)
        p.zs = inversion["zs"].to(p.device)

    def hyperparameters(self) -> dict[str, Any]:
        """Every setting that shapes the output, with how the query's captions are used."""
        return {"pipeline": "LEditsPPPipelineStableDiffusion", "scheduler": "DPMSolverMultistepScheduler (sde-dpmsolver++, 2)",
                "inversion_prompt": "source_caption", "editing_prompt": "target_caption", "steps": self.steps,
                "skip": self.skip, "source_guidance_scale": self.source_guidance_scale,
                "edit_guidance_scale": self.edit_guidance_scale, "edit_threshold": self.edit_threshold,
                "edit_warmup_steps": self.edit_warmup_steps, "use_cross_attn_mask": self.use_cross_attn_mask,
                "use_intersect_mask": self.use_intersect_mask, "inversion_noise": "per source (run seed, pixels, caption)",
                "reuse_inversions": self.reuse_inversions}
