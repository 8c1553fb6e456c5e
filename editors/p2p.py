"""`p2p`: Prompt-to-Prompt (Hertz et al. 2023) on real images via null-text inversion (Mokady et al. 2023).

DDIM-invert the source under its caption, optimise per-step null-text embeddings so guided sampling retraces the
inversion, then sample source and target captions side by side while the target branch takes the source's attention
(word swap / refinement / re-weighting of cross-attention; self-attention injection for the first tau of the steps).
Description-based: source_caption + target_caption. Deterministic: no random numbers are drawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from benchmark.editing.base import DiffusionEditor, Item


class PromptToPromptEditor(DiffusionEditor):
    """Args (besides DiffusionEditor's): steps (DDIM), guidance_scale, mode ('replace' | 'refine' | 'auto'),
    cross_replace_steps, self_replace_steps (tau), self_replace_max_tokens, reweight ({word: scale}),
    token_mapping ('reference': the authors' token mappers | 'aligned': editmeter's earlier ones), null_text_inner_steps, null_text_lr, null_text_lr_decay, null_text_early_stop, null_text_early_stop_growth."""

    prompt_kind: ClassVar[Literal["instruction", "description"]] = "description"
    family: ClassVar[str] = "sd"
    name: ClassVar[str] = "p2p"

    def __init__(self, *, steps: int, guidance_scale: float, mode: str, cross_replace_steps: float,
                 self_replace_steps: float, self_replace_max_tokens: int, reweight: dict[str, float],
                 token_mapping: str,
                 null_text_inner_steps: int, null_text_lr: float, null_text_lr_decay: float,
                 null_text_early_stop: float, null_text_early_stop_growth: float, **common: Any) -> None:
        from benchmark.editing.attention import MODES
        from benchmark.editing.token_maps import TOKEN_MAPPINGS
        from benchmark.models.diffusion import set_scheduler

        if mode not in MODES:
            raise ValueError(f"p2p: unknown mode {mode!r}; expected one of {', '.join(MODES)}")
        if token_mapping not in TOKEN_MAPPINGS:
            raise ValueError(f"p2p: unknown token_mapping {token_mapping!r}; expected one of {', '.join(TOKEN_MAPPINGS)}")
        super().__init__(**common)
        set_scheduler(self.pipe, "DDIMScheduler")
        self.steps, self.guidance_scale, self.mode = int(steps), float(guidance_scale), mode
        self.cross_replace_steps, self.self_replace_steps = float(cross_replace_steps), float(self_replace_steps)
        self.self_replace_max_tokens = int(self_replace_max_tokens)
        self.reweight = {str(k): float(v) for k, v in dict(reweight or {}).items()}
        self.token_mapping = token_mapping
        self.null_text = {"inner_steps": int(null_text_inner_steps), "lr": float(null_text_lr),
                          "lr_decay": float(null_text_lr_decay), "early_stop": float(null_text_early_stop),
                          "early_stop_growth": float(null_text_early_stop_growth)}

    def _edit_chunk(self, items: Sequence[Item]) -> list[Any]:
        from benchmark.editing import inversion as inv
        from benchmark.editing.attention import AttentionController, build_token_edit, controlled_attention

        p, unet = self.pipe, self.pipe.unet
        src = [it.query.source_caption for it in items]
        tgt = [it.query.target_caption for it in items]
        x0 = inv.encode_images(p, [it.image for it in items])
        src_emb, tgt_emb, empty = inv.encode_text(p, src), inv.encode_text(p, tgt), inv.encode_text(p, [""] * len(items))
        grid = inv.ddim_grid(p.scheduler, self.steps)
        traj = inv.ddim_invert(unet, grid, x0, src_emb)
        nulls = inv.null_text_optimise(unet, grid, traj, src_emb, empty, guidance=self.guidance_scale, **self.null_text)
        controller = AttentionController(
            [build_token_edit(p.tokenizer, s, t, mode=self.mode, reweight=self.reweight,
                              token_mapping=self.token_mapping) for s, t in zip(src, tgt, strict=True)],
            num_steps=self.steps, cross_replace_steps=self.cross_replace_steps,
            self_replace_steps=self.self_replace_steps, self_replace_max_tokens=self.self_replace_max_tokens,
            device=unet.device)
        # Batch layout the controller expects: per query [source, target] side by side.
        cond = _interleave(src_emb, tgt_emb)
        with controlled_attention(unet, controller):
            x = inv.ddim_sample(unet, grid, _interleave(traj[-1], traj[-1]), cond,
                                [_interleave(n, n) for n in nulls], self.guidance_scale,
                                on_step=lambda i: setattr(controller, "step", i))
        return inv.decode_latents(p, x[1::2])

    def hyperparameters(self) -> dict[str, Any]:
        return {"scheduler": "DDIM (eta 0)", "steps": self.steps, "guidance_scale": self.guidance_scale,
                "mode": self.mode, "cross_replace_steps": self.cross_replace_steps,
                "self_replace_steps": self.self_replace_steps, "self_replace_max_tokens": self.self_replace_max_tokens,
                "reweight": self.reweight, "token_mapping": self.token_mapping, "null_text": self.null_text}


def _interleave(a: Any, b: Any) -> Any:
    """[a0, b0, a1, b1, ...] along the batch axis."""
    import torch

    return torch.stack([a, b], dim=1).flatten(0, 1)
