"""`rf_inversion`: RF-Inversion (Rout et al. 2024, "Semantic Image Inversion and Editing using Rectified Stochastic
Differential Equations", arXiv:2410.10792) on FLUX.1 [dev], as the diffusers community pipeline
`examples/community/pipeline_flux_rf_inversion.py` (the authors' own code: GitHub LituRout/RF-Inversion points to it)
does it. Description-based: the inversion uses an empty prompt, as the pipeline's `invert` by default; the edit
the target caption.

Controlled forward ODE (the pipeline's `invert`, the paper's Algorithm 1): from the source latent y0, Euler steps of
u + gamma (u_cond - u), u the transformer's velocity at distilled guidance `inversion_guidance` (0), u_cond = (y1 - Y)
/ (1 - t) towards a Gaussian sample y1. Controlled reverse ODE (its `__call__`, Algorithm 2): from the inverted
latent, Euler steps of v + eta (v_cond - v), v = -(the transformer's prediction) under the target caption at guidance
`guidance`, v_cond = (y0 - X) / (1 - t), for the steps i with int(start_timestep n) <= i < min(int(stop_timestep n),
n); v alone elsewhere. Quirks kept (pinned in tests/test_flow_editors.py): the inversion evaluates the transformer at
t_i = i / (n + 1), not at its schedule's times, while stepping by the shifted schedule's sigma gaps in sampling order.

Randomness: the pipeline samples the VAE posterior and y1 from PyTorch's global generator; here both come from the
source's generator (`SourceInversions.source_generator`: the run's seed, the source's pixels and caption), in the
pipeline's order, so every query of a source shares one inversion. docs/flow-editors.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from PIL import Image

from benchmark.editing.base import Item
from benchmark.editing.flow_edit import FluxInversionEditor
from benchmark.editing.source_inversions import dtype_name, scheduler_settings


def eta_schedule(eta: float, window: range, steps: int, decay_eta: bool, eta_decay_power: float) -> list[float]:
    """The reverse controller's strength at each of the `steps` sampling steps, as the pipeline's `__call__`: eta
    inside the window, 0 outside; with `decay_eta`, times (1 - i / steps) ** eta_decay_power at step i."""
    out = []
    for i in range(steps):
        eta_t = eta if i in window else 0.0
        if decay_eta:
            eta_t = eta_t * (1 - i / steps) ** eta_decay_power
        out.append(eta_t)
    return out


def controller_window(steps: int, start_timestep: float, stop_timestep: float) -> range:
    """The sampling steps the controller guides: int(start * n) <= i < min(int(stop * n), n), as the pipeline."""
    if not 0 <= start_timestep <= stop_timestep:
        raise ValueError(f"start_timestep must be in [0, stop_timestep], got {start_timestep} and {stop_timestep}")
    return range(int(start_timestep * steps), min(int(stop_timestep * steps), steps))


class RFInversionEditor(FluxInversionEditor):
    """Args (besides FluxInversionEditor's): guidance (distilled guidance of the edit: the pipeline's 3.5),
    inversion_guidance (of the inversion: its `source_guidance_scale` 0), inversion_prompt ('empty': the pipeline's
    default source prompt "" | 'source_caption'), gamma (forward controller, 0.5), eta (reverse controller, 0.9),
    start_timestep, stop_timestep (fractions of the steps the reverse controller guides: 0 and 7/28), decay_eta,
    eta_decay_power (the pipeline's decay of eta over the steps: off, power 1), inversion_max_sequence_length (T5
    tokens of the inversion prompt: the pipeline's `invert` encodes it at encode_prompt's default 512, whatever
    max_sequence_length the edit uses)."""

    name: ClassVar[str] = "rf_inversion"
    inversion_kind: ClassVar[str] = "rf-inversion"
    seeded_inversion: ClassVar[bool] = True  # the VAE posterior sample and y1 are drawn per source

    def __init__(self, *, guidance: float, inversion_guidance: float, inversion_prompt: str, gamma: float,
                 eta: float, start_timestep: float, stop_timestep: float, decay_eta: bool = False,
                 eta_decay_power: float = 1.0, inversion_max_sequence_length: int = 512, **common: Any) -> None:
        if inversion_prompt not in ("empty", "source_caption"):
            raise ValueError(f"editor 'rf_inversion': inversion_prompt must be empty (the pipeline's default \"\") or "
                             f"source_caption, got {inversion_prompt!r}")
        super().__init__(**common)
        self.guidance, self.inversion_guidance = float(guidance), float(inversion_guidance)
        self.inversion_prompt, self.gamma, self.eta = inversion_prompt, float(gamma), float(eta)
        self.start_timestep, self.stop_timestep = float(start_timestep), float(stop_timestep)
        self.window = controller_window(self.steps, self.start_timestep, self.stop_timestep)
        if not isinstance(decay_eta, bool):
            raise ValueError(f"editor 'rf_inversion': decay_eta must be true or false, got {decay_eta!r}")
        self.decay_eta, self.eta_decay_power = decay_eta, float(eta_decay_power)
        self.inversion_max_sequence_length = int(inversion_max_sequence_length)

    def prepare(self, image: Image.Image) -> Image.Image:
        """The source at `resolution` x `resolution`, resized with Lanczos as diffusers' VaeImageProcessor does."""
        return image.convert("RGB").resize((self.resolution, self.resolution), Image.Resampling.LANCZOS)

    def _schedule(self) -> tuple[Any, Any]:
        """(timesteps (n,), sigmas (n + 1,)) float32 tensors: the pipeline's linspace(1, 1/n, n) shifted by the
        scheduler (mu from the image tokens), with its final 0."""
        import numpy as np

        cfg, sched = self.pipe.scheduler.config, self.pipe.scheduler
        n, seq = self.steps, self._tokens_side() ** 2
        slope = (cfg.max_shift - cfg.base_shift) / (cfg.max_image_seq_len - cfg.base_image_seq_len)
        mu = seq * slope + (cfg.base_shift - slope * cfg.base_image_seq_len)
        sched.set_timesteps(sigmas=np.linspace(1.0, 1 / n, n), mu=mu, device=self.pipe.transformer.device)
        return sched.timesteps.clone(), sched.sigmas.clone()

    def _model(self, x: Any, timestep: Any, guidance: float, text: tuple[Any, Any, Any]) -> Any:
        import torch

        embeds, pooled, text_ids = text
        side = self._tokens_side()
        t = self.pipe.transformer
        img_ids = self.pipe._prepare_latent_image_ids(1, side, side, t.device, t.dtype)
        g = torch.full((x.shape[0],), guidance, device=x.device, dtype=torch.float32)
        return t(hidden_states=x, timestep=timestep, guidance=g, pooled_projections=pooled,
                 encoder_hidden_states=embeds, txt_ids=text_ids, img_ids=img_ids, return_dict=False)[0]

    def _compute_inversions(self, items: Sequence[Item]) -> list[dict[str, Any]]:
        """The controlled forward ODE of each source: {'z': the inverted latent, 'y0': the source latent}."""
        import torch

        gens = [self.source_generator(it) for it in items]
        with torch.inference_mode():
            y0 = self._encode_images(items, generators=gens)  # the posterior sample, drawn first as the pipeline
            y1 = torch.cat([torch.randn(y0.shape[1:], generator=g)[None] for g in gens]).to(y0.device, y0.dtype)
            prompts = ["" if self.inversion_prompt == "empty" else it.query.source_caption for it in items]
            text = self._encode_text(prompts, max_sequence_length=self.inversion_max_sequence_length)
            _, sigmas = self._schedule()
            x, count = y0, len(sigmas)
            for i in range(count - 1):
                # the pipeline's t_i = i / len(sigmas): n + 1 in the denominator, not the schedule's time
                t_i = torch.tensor(i / count, dtype=x.dtype, device=x.device)
                u = self._model(x, t_i.repeat(x.shape[0]), self.inversion_guidance, text)
                u_hat = u + self.gamma * ((y1 - x) / (1 - t_i) - u)
                x = x + u_hat * (sigmas[i] - sigmas[i + 1])
        return [{"z": x[i : i + 1].clone(), "y0": y0[i : i + 1].clone()} for i in range(len(items))]

    def _edit_chunk(self, items: Sequence[Item]) -> list[Any]:
        import torch

        per_item = self._inversions(items)
        t = self.pipe.transformer
        x = torch.cat([p["z"] for p in per_item]).to(t.device, t.dtype)
        y0 = torch.cat([p["y0"] for p in per_item]).to(t.device, t.dtype)
        with torch.inference_mode():
            text = self._encode_text([it.query.target_caption for it in items])
            timesteps, sigmas = self._schedule()
            etas = eta_schedule(self.eta, self.window, len(timesteps), self.decay_eta, self.eta_decay_power)
            for i, step_t in enumerate(timesteps):
                t_i = 1 - step_t / 1000
                timestep = step_t.expand(x.shape[0]).to(x.dtype)
                v = -self._model(x, timestep / 1000, self.guidance, text)
                if i in self.window:  # outside it eta_t is 0: v itself, as v + 0 (v_cond - v) is
                    v = v + etas[i] * ((y0 - x) / (1 - t_i) - v)
                x = x + v * (sigmas[i] - sigmas[i + 1])
            return self._decode(x)

    def _inversion_settings(self) -> dict[str, Any]:
        """Every setting of the inversion (never `guidance`, `eta` or the controller window of the edit)."""
        return {"steps": self.steps, "schedule": scheduler_settings(self.pipe.scheduler.config),
                "inversion_guidance": self.inversion_guidance, "inversion_prompt": self.inversion_prompt,
                "gamma": self.gamma, "max_sequence_length": self.inversion_max_sequence_length,
                "resolution": self.resolution,
                "vae_fp32": self.vae_fp32, "resize": "lanczos"}

    def _inversion_tensors(self) -> dict[str, tuple[tuple[int, ...], str]]:
        t = self.pipe.transformer
        shape = (1, self._tokens_side() ** 2, t.config.in_channels)
        return {"z": (shape, dtype_name(t.dtype)), "y0": (shape, dtype_name(t.dtype))}

    def hyperparameters(self) -> dict[str, Any]:
        return {"steps": self.steps, "guidance": self.guidance, "inversion_guidance": self.inversion_guidance,
                "inversion_prompt": self.inversion_prompt, "gamma": self.gamma, "eta": self.eta,
                "start_timestep": self.start_timestep, "stop_timestep": self.stop_timestep,
                "controlled_steps": [self.window.start, self.window.stop], "decay_eta": self.decay_eta,
                "eta_decay_power": self.eta_decay_power, "max_sequence_length": self.max_sequence_length,
                "inversion_max_sequence_length": self.inversion_max_sequence_length, "reuse_inversions": self.reuse_inversions,
                "vae_fp32": self.vae_fp32, "schedule": "diffusers FlowMatchEulerDiscreteScheduler, sigmas "
                "linspace(1, 1/n, n) shifted by mu", "resize": "lanczos"}
