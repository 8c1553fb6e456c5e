"""Training-free editing of FLUX.1 [dev] by inversion and feature sharing: RF-Solver-Edit and FireFlow.

Both authors' editing scripts (RF-Solver-Edit's `edit.py`, FireFlow's `edit.py`, on the reference FLUX code) do:

1. encode the source with the VAE (posterior mean), pack it into 2x2 tokens;
2. invert it from t = 0 to 1 under the SOURCE caption at distilled guidance 1, with the solver
   (benchmark.editing.flow_solvers), over the FLUX schedule of `steps` steps read backwards;
3. sample from the inverted latent, t = 1 to 0, under the TARGET caption at distilled guidance `guidance`. There is no
   source branch: the source enters through the latent and through the shared features.

Feature sharing: during the last `inject` inversion steps, every single-stream block from `start_layer` to `end_layer`
(inclusive) keeps its self-attention values V (of the whole joint sequence, text tokens included); during the first
`inject` sampling steps the same blocks replace their V by the kept one. The authors key each kept V by a time and
the evaluation (first or midpoint); the time is the inversion step's END time and the sampling step's START time, so
inversion step i feeds sampling step n - 1 - i: the START evaluation of sampling step j at time t_j gets the V that
inversion computed at t_{j+1} (one grid point earlier in the inversion), the MID evaluation the V of the same
midpoint time. A key the inversion never made is left alone (FireFlow's code checks; RF-Solver's always finds it):
FireFlow's inversion evaluates START at its first step only, so its shared V are the MID ones (`shared_slots`).

The inversion (the final latent and the kept V) depends only on the source, its caption and the inversion's settings,
so it is shared per source through the run's InversionStore (`reuse_inversions`); a sweep of `guidance` computes no
new inversion. Transformer evaluations are counted per row (`transformer_forward`), inversions as computed / reused.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from benchmark.editing.base import Item
from benchmark.editing.dit import DiTEditor
from benchmark.editing.flow_solvers import MID, START, check_solver, evaluations, flux_schedule
from benchmark.editing.source_inversions import SourceInversions, dtype_name, scheduler_settings


def shared_slots(solver: str, steps: int, inject: int) -> list[tuple[int, str]]:
    """The (sampling step, START | MID) evaluations whose V the inversion keeps, in the inversion's order.

    The authors' inject list is [True] * inject + [False] * (steps - inject) in sampling order, reversed for the
    inversion; an inversion step i's evaluations are keyed by sampling step steps - 1 - i."""
    if not 0 <= inject <= steps:
        raise ValueError(f"inject must be between 0 and steps ({steps}), got {inject}")
    return [(steps - 1 - i, which) for i, which in evaluations(solver, steps) if steps - 1 - i < inject]


class ValueSharing:
    """Forward hooks on the `to_v` projections of single-stream blocks `layers`: in 'record' mode they keep the V of
    the evaluations in `slots`, in 'inject' mode they replace V by the kept one. `tag` is set to (step, START | MID)
    before each transformer evaluation; other evaluations pass through."""

    def __init__(self, transformer: Any, layers: Sequence[int], slots: Sequence[tuple[int, str]]) -> None:
        """Hook `transformer`'s single-stream blocks `layers`; `slots` are the (step, START | MID) evaluations whose
        V is kept, in the order they are stored."""
        self.layers = list(layers)
        self.slots = {s: n for n, s in enumerate(slots)}
        self.mode: str | None = None
        self.tag: tuple[int, str] | None = None
        self.kept: dict[tuple[int, int], Any] = {}  # (slot, layer position) -> (B, L, inner) values
        self.injected: Any = None  # (B, slots * layers, L, inner) while injecting
        self._handles = [transformer.single_transformer_blocks[layer].attn.to_v.register_forward_hook(self._hook(k))
                         for k, layer in enumerate(self.layers)]

    def _hook(self, position: int) -> Any:
        def hook(module: Any, args: Any, output: Any) -> Any:
            slot = self.slots.get(self.tag) if self.tag is not None else None
            if slot is None or self.mode is None:
                return None
            if self.mode == "record":
                self.kept[(slot, position)] = output.detach()
                return None
            return self.injected[:, slot * len(self.layers) + position].to(output.device, output.dtype)
        return hook

    def recorded(self) -> Any:
        """The kept values as one (B, slots * layers, L, inner) tensor, slot-major."""
        import torch

        return torch.stack([self.kept[(s, k)] for s in range(len(self.slots)) for k in range(len(self.layers))],
                           dim=1)

    def remove(self) -> None:
        """Take the hooks off (the transformer runs unchanged again)."""
        self.mode = None
        for h in self._handles:
            h.remove()


class FluxInversionEditor(SourceInversions, DiTEditor):
    """What the FLUX.1 [dev] inversion editors share (rf_solver, fireflow, rf_inversion): loading through `FluxPipeline`
    (kind `flux`), description prompts, text and image encoding, the transformer as a velocity function, decoding,
    transformer evaluations counted (`transformer_forward`), one inversion per source (SourceInversions).

    Args (besides DiTEditor's): max_sequence_length (T5 tokens), reuse_inversions (share each source's inversion
    through `inversion_store`), vae_fp32 (run the VAE in fp32, as the reference FLUX code's autoencoder)."""

    prompt_kind: ClassVar[Literal["instruction", "description"]] = "description"
    kind: ClassVar[str] = "flux"

    def __init__(self, *, max_sequence_length: int, reuse_inversions: bool = True, vae_fp32: bool = True,
                 **common: Any) -> None:
        """max_sequence_length: T5 tokens; reuse_inversions: share each source's inversion through the store;
        vae_fp32: the VAE in fp32 as the reference code; **common: DiTEditor's arguments."""
        import torch

        from benchmark.editing.work_counter import count_transformer_calls

        super().__init__(**common)
        self.max_sequence_length, self.vae_fp32 = int(max_sequence_length), bool(vae_fp32)
        if self.vae_fp32:
            # The reference AutoEncoder loads ae.safetensors' fp32 weights: it encodes in fp32 (then casts the latents
            # to the transformer's bf16) and decodes under bf16 autocast. diffusers' FLUX.1 VAE follows the pipeline
            # dtype, so it is upcast here (84M parameters).
            self.pipe.vae.to(torch.float32)
        self.work: Counter[str] = Counter()
        count_transformer_calls(self.pipe.transformer, self.work)
        self._init_source_inversions(reuse_inversions)

    # --- model pieces -------------------------------------------------------------------------------------------

    def _tokens_side(self) -> int:
        """Packed tokens per side: the latent side (resolution / VAE factor) over the 2x2 packing."""
        return self.resolution // self.pipe.vae_scale_factor // 2

    def _encode_text(self, prompts: list[str], max_sequence_length: int | None = None) -> tuple[Any, Any, Any]:
        """The T5 and CLIP embeddings of `prompts`, T5 at `max_sequence_length` tokens (default the editor's)."""
        p = self.pipe
        embeds, pooled, text_ids = p.encode_prompt(prompt=prompts, prompt_2=None, device=p.transformer.device,
                                                   max_sequence_length=max_sequence_length or self.max_sequence_length)
        return embeds, pooled, text_ids

    def _encode_images(self, items: Sequence[Item], generators: Sequence[Any] | None = None) -> Any:
        """Packed latents (B, tokens, 64) in the transformer's dtype: pixels / 127.5 - 1, the VAE posterior's mean
        (the reference AutoEncoder.encode, whose sampling line is commented out) or, with `generators`, a sample of it
        drawn from each item's generator; then (z - shift) * scale."""
        import numpy as np
        import torch

        p, vae = self.pipe, self.pipe.vae
        x = torch.stack([torch.from_numpy(np.asarray(it.image, dtype=np.uint8).copy()).permute(2, 0, 1)
                         for it in items]).float() / 127.5 - 1
        # one image at a time, as the reference does: a batch's convolutions round differently in the last bits,
        # which the cast to bf16 can turn into a whole bf16 step of a latent
        posteriors = [vae.encode(x[i : i + 1].to(vae.device, vae.dtype)).latent_dist for i in range(len(x))]
        z = torch.cat([d.mode() if generators is None else d.sample(generator=g)
                       for d, g in zip(posteriors, generators or [None] * len(x), strict=True)])
        z = (z - vae.config.shift_factor) * vae.config.scaling_factor
        b, c, h, w = z.shape
        return p._pack_latents(z, b, c, h, w).to(p.transformer.dtype)

    def _decode(self, x: Any) -> list[Any]:
        """(H, W, 3) float images in [0, 1] from packed latents: the fp32 VAE under autocast to the transformer's
        dtype when that is bf16 (the reference decodes under bf16 autocast), clamped to [-1, 1] first. Where the
        reference writes 127.5 (x + 1) truncated to a byte, the harness rounds (to_pil): at most one level apart."""
        import torch

        p, vae = self.pipe, self.pipe.vae
        z = p._unpack_latents(x.float(), self.resolution, self.resolution, p.vae_scale_factor)
        z = z / vae.config.scaling_factor + vae.config.shift_factor
        bf16 = self.vae_fp32 and p.transformer.dtype == torch.bfloat16
        z = z.to(vae.dtype)
        with torch.autocast(device_type=z.device.type, dtype=torch.bfloat16, enabled=bf16):
            # one latent at a time, as the reference: under bf16 autocast a batch's convolutions round otherwise
            img = torch.cat([vae.decode(z[i : i + 1], return_dict=False)[0] for i in range(len(z))]).detach()
        img = ((img.float().clamp(-1, 1) + 1) / 2).permute(0, 2, 3, 1).cpu().numpy()
        return list(img)

    def _velocity(self, text: tuple[Any, Any, Any], guidance: float, sharing: ValueSharing | None,
                  inverting: bool = False) -> Any:
        """The velocity function of `integrate`: one transformer evaluation, tagged for `sharing` by SAMPLING step
        (an inversion step i is sampling step steps - 1 - i, as the authors' keys pair them)."""
        import torch

        embeds, pooled, text_ids = text
        side = self._tokens_side()
        transformer = self.pipe.transformer
        img_ids = self.pipe._prepare_latent_image_ids(1, side, side, transformer.device, transformer.dtype)

        def velocity(x: Any, t: float, step: int, which: str) -> Any:
            if sharing is not None:
                sharing.tag = (self.steps - 1 - step if inverting else step, which)
            b = x.shape[0]
            # the reference builds t and guidance in the latents' dtype (bf16 on a GPU), rounding them as it does
            t_vec = torch.full((b,), t, dtype=x.dtype, device=x.device)
            g_vec = torch.full((b,), guidance, dtype=x.dtype, device=x.device)
            return transformer(hidden_states=x, timestep=t_vec, guidance=g_vec, pooled_projections=pooled,
                               encoder_hidden_states=embeds, txt_ids=text_ids, img_ids=img_ids,
                               return_dict=False)[0]
        return velocity


class FlowEditor(FluxInversionEditor):
    """Invert the source with a flow solver, then sample the target caption sharing the inversion's attention values.

    Args (besides FluxInversionEditor's): solver ('euler' | 'rf_solver' | 'fireflow'), guidance (FLUX's distilled
    guidance while sampling), inversion_guidance (while inverting: the authors' 1), inject (sampling steps that take
    the kept V), start_layer and end_layer (single-stream blocks sharing V, inclusive). Description-based:
    source_caption (inversion) and target_caption (sampling). Draws no random numbers."""

    seeded_inversion: ClassVar[bool] = False  # the VAE's posterior mean and an ODE: nothing is drawn

    def __init__(self, *, solver: str, guidance: float, inversion_guidance: float, inject: int, start_layer: int,
                 end_layer: int, **common: Any) -> None:
        """See the class docstring; `common` goes to FluxInversionEditor."""
        check_solver(solver, what=f"editor {self.name!r}")
        super().__init__(**common)
        self.solver, self.guidance, self.inversion_guidance = solver, float(guidance), float(inversion_guidance)
        self.inject = int(inject)
        self.start_layer, self.end_layer = int(start_layer), int(end_layer)
        blocks = len(self.pipe.transformer.single_transformer_blocks)
        if not 0 <= self.start_layer <= self.end_layer < blocks:
            raise ValueError(f"editor {self.name!r}: start_layer {self.start_layer} .. end_layer {self.end_layer} is "
                             f"not a range of this transformer's {blocks} single-stream blocks (0 .. {blocks - 1})")
        self.slots = shared_slots(self.solver, self.steps, self.inject)
        self.inversion_kind = f"flow-{self.solver}"

    def _times(self) -> list[float]:
        """The sampling times 1 -> 0 of the FLUX reference schedule for this image size (the scheduler config's
        shift constants, which equal the reference code's: 256 / 0.5, 4096 / 1.15)."""
        cfg = self.pipe.scheduler.config
        return flux_schedule(self.steps, self._tokens_side() ** 2, base_seq_len=cfg.base_image_seq_len,
                             max_seq_len=cfg.max_image_seq_len, base_shift=cfg.base_shift, max_shift=cfg.max_shift)

    def _sharing(self) -> ValueSharing | None:
        if not self.slots:
            return None
        return ValueSharing(self.pipe.transformer, range(self.start_layer, self.end_layer + 1), self.slots)

    # --- inversion (shared per source) --------------------------------------------------------------------------

    def _compute_inversions(self, items: Sequence[Item]) -> list[dict[str, Any]]:
        """Invert each source under its caption (guidance `inversion_guidance`), keeping the shared V."""
        import torch

        from benchmark.editing.flow_solvers import integrate

        with torch.inference_mode():
            x0 = self._encode_images(items)
            text = self._encode_text([it.query.source_caption for it in items])
            sharing = self._sharing()
            try:
                if sharing is not None:
                    sharing.mode = "record"
                z = integrate(self._velocity(text, self.inversion_guidance, sharing, inverting=True), x0,
                              self._times()[::-1], self.solver)
                values = sharing.recorded() if sharing is not None else None
            finally:
                if sharing is not None:
                    sharing.remove()
        out = []
        for i in range(len(items)):
            entry = {"z": z[i : i + 1].clone()}
            if values is not None:
                entry["values"] = values[i].clone()
            out.append(entry)
        return out

    def _inversion_settings(self) -> dict[str, Any]:
        """Every setting of the inversion; `guidance` (sampling) is not one, so a sweep of it shares the inversion."""
        return {"solver": self.solver, "steps": self.steps, "schedule": scheduler_settings(self.pipe.scheduler.config),
                "inversion_guidance": self.inversion_guidance, "inject": self.inject,
                "layers": [self.start_layer, self.end_layer], "max_sequence_length": self.max_sequence_length,
                "resolution": self.resolution, "shared": "single-block self-attention V"}

    def _inversion_tensors(self) -> dict[str, tuple[tuple[int, ...], str]]:
        t = self.pipe.transformer
        tokens = self._tokens_side() ** 2
        dtype = dtype_name(t.dtype)
        tensors = {"z": ((1, tokens, t.config.in_channels), dtype)}
        if self.slots:
            inner = t.config.num_attention_heads * t.config.attention_head_dim
            n = len(self.slots) * (self.end_layer - self.start_layer + 1)
            tensors["values"] = ((n, self.max_sequence_length + tokens, inner), dtype)
        return tensors

    # --- editing ------------------------------------------------------------------------------------------------

    def _edit_chunk(self, items: Sequence[Item]) -> list[Any]:
        """The edits of `items`: each source's inversion (stored or computed), then the target caption sampled from
        it with the kept V injected; one RGB image per item."""
        import torch

        from benchmark.editing.flow_solvers import integrate

        per_item = self._inversions(items)
        t = self.pipe.transformer
        z = torch.cat([p["z"] for p in per_item]).to(t.device, t.dtype)
        sharing = self._sharing()
        try:
            if sharing is not None:
                sharing.mode = "inject"
                sharing.injected = torch.stack([p["values"] for p in per_item]).to(t.device, t.dtype)
            with torch.inference_mode():
                text = self._encode_text([it.query.target_caption for it in items])
                x = integrate(self._velocity(text, self.guidance, sharing), z, self._times(), self.solver)
                return self._decode(x)
        finally:
            if sharing is not None:
                sharing.remove()

    def hyperparameters(self) -> dict[str, Any]:
        """The settings that shape an edit (the editor's `info()`)."""
        return {"solver": self.solver, "steps": self.steps, "guidance": self.guidance,
                "inversion_guidance": self.inversion_guidance, "inject": self.inject,
                "start_layer": self.start_layer, "end_layer": self.end_layer,
                "shared_evaluations": [f"{step}:{which}" for step, which in self.slots],
                "max_sequence_length": self.max_sequence_length, "reuse_inversions": self.reuse_inversions,
                "vae_fp32": self.vae_fp32, "schedule": "FLUX reference get_schedule (shifted linspace)"}


__all__ = ["FlowEditor", "FluxInversionEditor", "ValueSharing", "shared_slots", "START", "MID"]
