"""`imagic`: Imagic (Kawar et al. 2023) on Stable Diffusion v1.4. Description-based: reads `target_caption`.

Per image: (A) optimise the target caption's embedding to reconstruct the image, (B) fine-tune the UNet on that
embedding, (C) sample from eta * e_tgt + (1 - eta) * e_opt with the fine-tuned UNet. Each query is processed on its
own (every image has its own model); the base UNet weights are restored after every query. Fine-tunes are cached by
a key over every input of (A) and (B) (benchmark.editing.imagic), so an eta sweep reuses them.

Faithful to the reference (diffusers' community pipeline `imagic_stable_diffusion.py`) by default: the source latent
is one sample of the VAE posterior (`source_latent: sample`; `mean` is the posterior mean), drawn from the query's
optimisation stream before the optimisation's own draws and shared by (A) and (B); sampling uses DDIM with
`steps_offset` 0 (the reference's scheduler: timesteps 980 ... 0 for 50 steps; SD's checkpoint config has 1).

Precision: (A) and (B) keep fp32 master weights (UNet weights, gradients, Adam state, latents, embedding), whatever
`dtype` says: Adam's updates at lr 2e-6 are below half precision's resolution of the weights and its loss
overflows, so an fp16 optimisation gives NaN (an all-black edit). `optimisation_precision` sets the forward's
arithmetic: `bf16_autocast` (bf16 autocast around the UNet, the loss in fp32: diffusers' training scripts'
practice), `fp32`, or `auto` (bf16_autocast on CUDA, fp32 elsewhere); the mode used is in the signature and the
fine-tune key. `dtype` is the precision of sampling (C) and of the VAE and text encoder: the fine-tuned weights are
cast to it after (B), as diffusers' training scripts keep fp32 master weights and cast the trained model for
inference.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from benchmark.editing.base import DiffusionEditor, Item


class ImagicEditor(DiffusionEditor):
    """Args (besides DiffusionEditor's): embedding_steps, embedding_lr, finetune_steps, finetune_lr, eta, steps
    (DDIM sampling), guidance_scale, cache_size (fine-tunes kept in memory, 0 disables), source_latent ('sample' or
    'mean'), steps_offset (the DDIM scheduler's), optimisation_precision ('auto', 'fp32', 'bf16_autocast')."""

    prompt_kind: ClassVar[Literal["instruction", "description"]] = "description"
    family: ClassVar[str] = "sd"
    name: ClassVar[str] = "imagic"

    def __init__(self, *, embedding_steps: int, embedding_lr: float, finetune_steps: int, finetune_lr: float,
                 eta: float, steps: int, guidance_scale: float, cache_size: int, source_latent: str,
                 steps_offset: int, optimisation_precision: str, **common: Any) -> None:
        from benchmark.editing.imagic import check_source_latent, resolve_precision
        from benchmark.models.diffusion import set_scheduler

        check_source_latent(source_latent)  # both before the model loads
        resolve_precision(optimisation_precision, "cpu")
        super().__init__(**common)
        self.steps_offset = int(steps_offset)
        # add_noise (the optimisation's) reads alphas_cumprod only: steps_offset moves the sampling timesteps alone
        set_scheduler(self.pipe, "DDIMScheduler", steps_offset=self.steps_offset)
        self.optim = {"embedding_steps": int(embedding_steps), "embedding_lr": float(embedding_lr),
                      "finetune_steps": int(finetune_steps), "finetune_lr": float(finetune_lr),
                      "resolution": self.resolution, "dtype": self.provenance["dtype"],
                      "optimisation_dtype": "float32", "source_latent": str(source_latent),
                      "optimisation_precision": resolve_precision(optimisation_precision, self.device)}
        self.eta, self.steps, self.guidance_scale = float(eta), int(steps), float(guidance_scale)
        self.cache_size = int(cache_size)
        self.base_state = {k: v.detach().clone() for k, v in self.pipe.unet.state_dict().items()}

    def key(self, item: Item) -> str:
        from benchmark.editing.imagic import finetune_key

        weights = {k: self.provenance[k] for k in ("weights", "model_id", "revision")}
        return finetune_key(image=item.image, prompt=item.query.target_caption, seed=item.seed, weights=weights,
                            optim=self.optim)

    def _edit_chunk(self, items: Sequence[Item]) -> list[Any]:
        return [self._edit_one(it) for it in items]

    def _tuned(self, item: Item, e_tgt: Any) -> tuple[Any, dict[str, Any]]:
        """(e_opt, fine-tuned UNet state on CPU), from the cache or computed now."""
        from benchmark.editing import imagic
        from benchmark.editing.editor import generators, query_seed

        key = self.key(item)
        hit = imagic.FINETUNES.get(key)
        if hit is not None:
            return hit
        unet, sched, o = self.pipe.unet, self.pipe.scheduler, self.optim
        # Its own stream (derived from the query seed), so a cache hit cannot shift the sampling noise.
        gen = generators([query_seed(item.seed, "imagic-optimisation")])[0]
        # The reference samples the posterior once, first, and reconstructs that one latent in both stages.
        x0 = imagic.source_latent(self.pipe, item.image, mode=o["source_latent"], generator=gen)
        precision = o["optimisation_precision"]
        with imagic.fp32_weights(unet):
            e_opt = imagic.optimise_embedding(unet, sched, x0, e_tgt, steps=o["embedding_steps"],
                                              lr=o["embedding_lr"], generator=gen, precision=precision)
            imagic.finetune_unet(unet, sched, x0, e_opt, steps=o["finetune_steps"], lr=o["finetune_lr"],
                                 generator=gen, precision=precision)
            # kept at the sampling precision, so a cache hit loads exactly what a miss samples with
            state = {k: v.detach().to("cpu", self.base_state[k].dtype, copy=True) for k, v in unet.state_dict().items()}
        value = (e_opt.cpu(), state)
        imagic.FINETUNES.put(key, value, self.cache_size)
        return value

    def _edit_one(self, item: Item) -> Any:
        import torch

        from benchmark.editing import inversion as inv
        from benchmark.editing.imagic import interpolate

        p = self.pipe
        e_tgt = inv.encode_text(p, [item.query.target_caption]).float()
        try:
            e_opt, state = self._tuned(item, e_tgt)
            p.unet.load_state_dict(state)
            emb = interpolate(e_opt.to(e_tgt.device), e_tgt, self.eta)
            gens = self.generators([item])
            with torch.inference_mode():
                return p(prompt_embeds=emb.to(p.unet.dtype), negative_prompt_embeds=inv.encode_text(p, [""]),
                         num_inference_steps=self.steps, guidance_scale=self.guidance_scale, generator=gens,
                         latents=self.initial_latents([item], gens), output_type="np").images[0]
        finally:
            p.unet.load_state_dict(self.base_state)  # never let one image's fine-tune leak into the next

    def hyperparameters(self) -> dict[str, Any]:
        return {"scheduler": "DDIMScheduler", "steps_offset": self.steps_offset, **self.optim, "eta": self.eta,
                "steps": self.steps, "guidance_scale": self.guidance_scale}
