"""DDIM inversion, null-text inversion (Mokady et al. 2023) and Direct Inversion's offsets (Ju et al. 2024) for
Stable Diffusion, batched per query.

Every function takes a batch of B independent queries; nothing mixes samples (null-text embeddings are separate
parameters per query with their own early stop), so results do not depend on how queries are batched.
The DDIM steps are written out from the scheduler's `alphas_cumprod` (deterministic, eta = 0) so inversion and
sampling use exactly the same update in both directions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DDIMGrid:
    """The timesteps of an n-step DDIM schedule (descending) and the cumulative alphas it walks along."""

    timesteps: Any          # (n,) long, descending, e.g. 981 ... 1 for n = 50
    alphas_cumprod: Any     # (T,) float
    final_alpha: float      # alpha_cumprod "before" t = 0 (SD: alphas_cumprod[0], set_alpha_to_one False)
    stride: int             # T // n

    def alpha(self, t: int) -> Any:
        """alpha_cumprod at timestep `t` (a 0-d tensor); t < 0 means the final alpha."""
        return self.alphas_cumprod[t] if t >= 0 else self.alphas_cumprod.new_tensor(self.final_alpha)


def ddim_grid(scheduler: Any, steps: int) -> DDIMGrid:
    """Timesteps and alphas of `steps` DDIM steps for the checkpoint's noise schedule (a DDIMScheduler)."""
    scheduler.set_timesteps(steps)
    ac = scheduler.alphas_cumprod.float()
    final = 1.0 if scheduler.config.set_alpha_to_one else float(ac[0])
    return DDIMGrid(scheduler.timesteps.clone(), ac, final, scheduler.config.num_train_timesteps // steps)


def ddim_move(x: Any, eps: Any, a_from: Any, a_to: Any) -> Any:
    """Deterministic DDIM update between two noise levels: predict x0 from (x, eps), re-noise it to `a_to`."""
    x0 = (x - (1 - a_from).sqrt() * eps) / a_from.sqrt()
    return a_to.sqrt() * x0 + (1 - a_to).sqrt() * eps


def encode_text(pipe: Any, prompts: Sequence[str]) -> Any:
    """CLIP text embeddings (B, 77, D) of `prompts`, padded to the tokenizer's full length."""
    import torch

    tok = pipe.tokenizer(list(prompts), padding="max_length", max_length=pipe.tokenizer.model_max_length,
                         truncation=True, return_tensors="pt")
    with torch.no_grad():
        return pipe.text_encoder(tok.input_ids.to(pipe.text_encoder.device))[0]


def encode_images(pipe: Any, images: Sequence[Any]) -> Any:
    """VAE latents (mean of the posterior, scaled) of PIL images at the model resolution."""
    import torch

    x = pipe.image_processor.preprocess(list(images)).to(pipe.vae.device, pipe.vae.dtype)
    with torch.no_grad():
        return pipe.vae.encode(x).latent_dist.mean * pipe.vae.config.scaling_factor


def decode_latents(pipe: Any, latents: Any) -> list[Any]:
    """Float (H, W, 3) images in [0, 1] from latents."""
    import torch

    vae = pipe.vae
    with torch.no_grad():  # the latents are fp32 (the DDIM arithmetic); the VAE may be fp16 / bf16 on its device
        x = vae.decode(latents.to(vae.device, vae.dtype) / vae.config.scaling_factor).sample
    return list(((x.float() / 2 + 0.5).clamp(0, 1)).permute(0, 2, 3, 1).cpu().numpy())


def _eps(unet: Any, x: Any, t: Any, emb: Any) -> Any:
    """The UNet's noise estimate in fp32, its inputs moved to the UNet's device and dtype."""
    return unet(x.to(unet.device, unet.dtype), t,
                encoder_hidden_states=emb.to(unet.device, unet.dtype)).sample.float()


def ddim_invert(unet: Any, grid: DDIMGrid, x0: Any, cond: Any) -> list[Any]:
    """DDIM inversion with the source prompt (no guidance): the trajectory [x_0, x_t1, ..., x_T] (n + 1 latents)."""
    import torch

    x = x0.to(unet.device, torch.float32)
    traj = [x]
    with torch.no_grad():
        for t in reversed(grid.timesteps.tolist()):
            # Uses eps(x_{t_prev}, t) to step from t_prev = t - stride to t (the usual inversion approximation).
            eps = _eps(unet, x, t, cond)
            x = ddim_move(x, eps, grid.alpha(t - grid.stride), grid.alpha(t))
            traj.append(x)
    return traj


def guided_eps(unet: Any, x: Any, t: Any, uncond: Any, cond: Any, guidance: float) -> Any:
    """Classifier-free guided noise estimate from one batched UNet call."""
    e = _eps(unet, torch_cat([x, x]), t, torch_cat([uncond, cond]))
    e_u, e_c = e.chunk(2)
    return e_u + guidance * (e_c - e_u)


def torch_cat(xs: Sequence[Any]) -> Any:
    """`torch.cat` of a sequence of tensors along the batch axis."""
    import torch

    return torch.cat(list(xs))


def loss_scale(elements: int) -> float:
    """The power of two nearest above `elements`: the backward scale of a mean over that many elements."""
    return float(2 ** max(0, (int(elements) - 1).bit_length()))


def null_text_optimise(unet: Any, grid: DDIMGrid, traj: Sequence[Any], cond: Any, uncond: Any, *, guidance: float,
                       inner_steps: int, lr: float, lr_decay: float, early_stop: float,
                       early_stop_growth: float) -> list[Any]:
    """Per-step unconditional embeddings that make guided DDIM sampling retrace the inversion trajectory.

    At step i the null embedding (initialised from step i-1's result) is tuned with Adam for up to `inner_steps`
    iterations, learning rate `lr * (1 - lr_decay * i)`, to minimise ||DDIM step(x_i) - x*_{i+1}||^2, stopping a
    query early once its loss is below `early_stop + early_stop_growth * i` (the paper's schedule).
    Returns n tensors (B, 77, D), one per denoising step.
    """
    import torch

    b = cond.shape[0]
    scale = loss_scale(traj[-1][0].numel())
    current = [uncond[i : i + 1].detach().float().clone() for i in range(b)]
    out, x = [], traj[-1]
    n = len(grid.timesteps)
    for i, t in enumerate(grid.timesteps.tolist()):
        target = traj[n - i - 1]
        a_t, a_prev = grid.alpha(t), grid.alpha(t - grid.stride)
        with torch.no_grad():
            eps_c = _eps(unet, x, t, cond)
        params = [c.clone().requires_grad_(True) for c in current]
        opt = torch.optim.Adam(params, lr=lr * (1.0 - lr_decay * i))
        active = [True] * b
        threshold = early_stop + early_stop_growth * i
        for _ in range(inner_steps):
            if not any(active):
                break
            eps_u = _eps(unet, x, t, torch.cat(params))
            eps = eps_u + guidance * (eps_c - eps_u)
            pred = ddim_move(x, eps, a_t, a_prev)
            losses = ((pred - target) ** 2).flatten(1).mean(1)
            opt.zero_grad(set_to_none=True)
            # Per-query losses: each gradient only reaches its own embedding. The loss is scaled up for backward
            # (an fp16 UNet would underflow the mean's per-element gradients, ~1e-3 / 16384 at 512 px) and the
            # embedding's fp32 gradient scaled back before Adam: Adam is not invariant to a loss scale (its eps is
            # not scaled), and the authors' optimisation sees the mean's gradient. A power of two makes both
            # multiplications exact, so in fp32 the gradient is bit-identical to the unscaled one.
            (losses.sum() * scale).backward()
            for k in range(b):
                if not active[k]:
                    params[k].grad = None  # Adam skips it: a finished query stays exactly where it stopped
                elif params[k].grad is not None:
                    params[k].grad.div_(scale)
            opt.step()
            for k, v in enumerate(losses.detach().tolist()):
                if v < threshold:
                    active[k] = False
        current = [p.detach() for p in params]
        emb = torch.cat(current)
        out.append(emb)
        with torch.no_grad():
            x = ddim_move(x, guided_eps(unet, x, t, emb, cond, guidance), a_t, a_prev)
    return out


def direct_offsets(unet: Any, grid: DDIMGrid, traj: Sequence[Any], cond: Any, uncond: Any, *,
                   guidance: float) -> list[Any]:
    """Direct Inversion's per-step corrections (Ju et al. 2024, "PnP Inversion"): at step i, the gap between the
    inversion trajectory's next latent and one guided DDIM step taken from the trajectory's current latent.

    The source branch of an edit adds step i's offset after its own step i, so it walks the trajectory back to x_0
    without any optimisation; the branch restarts from the trajectory at every step (the offset is measured from the
    trajectory, not from the corrected sampler), as the authors' `offset_calculate` does. Returns n tensors
    (B, C, h, w) in fp32, in denoising order.
    """
    import torch

    n = len(grid.timesteps)
    out = []
    with torch.no_grad():
        for i, t in enumerate(grid.timesteps.tolist()):
            x = traj[n - i]
            step = ddim_move(x, guided_eps(unet, x, t, uncond, cond, guidance), grid.alpha(t),
                             grid.alpha(t - grid.stride))
            out.append((traj[n - i - 1] - step).float())
    return out


def ddim_sample(unet: Any, grid: DDIMGrid, xT: Any, cond: Any, uncond: Any | Sequence[Any], guidance: float,
                on_step: Any = None, after_step: Any = None) -> Any:
    """Guided DDIM sampling from xT; `uncond` is one tensor or one per step (null-text); returns x_0.

    `after_step(i, x)`, when given, returns the latents that continue after step i (Direct Inversion's correction)."""
    import torch

    x = xT.to(unet.device, torch.float32)
    with torch.no_grad():
        for i, t in enumerate(grid.timesteps.tolist()):
            if on_step is not None:
                on_step(i)
            u = uncond[i] if isinstance(uncond, list | tuple) else uncond
            x = ddim_move(x, guided_eps(unet, x, t, u, cond, guidance), grid.alpha(t), grid.alpha(t - grid.stride))
            if after_step is not None:
                x = after_step(i, x)
    return x
