"""`p2p`: Prompt-to-Prompt (Hertz et al. 2023) on real images, through one of three inversions.

DDIM-invert the source under its caption, then sample source and target captions side by side while the target
branch takes the source's attention (word swap / refinement / re-weighting of cross-attention; self-attention
injection for the first tau of the steps). `inversion` says how the source branch is made to retrace the inversion:

- `null_text` (Mokady et al. 2023): per-step null-text embeddings optimised so guided sampling retraces it;
- `negative_prompt` (Miyake et al. 2023): the source caption's embedding serves as the null text of both branches,
  no optimisation (the source branch's guidance then cancels out: eps = eps(source caption));
- `direct` (Ju et al. 2024, "PnP Inversion"): the plain empty null text, and after each step the source branch adds
  the gap between the trajectory and one guided step from it, measured once per source; no optimisation.

PIE-Bench compares the three (docs/diffusion.md), with two more settings its P2P runs use, both off by default:
`local_blend: blended_word` (the authors' LocalBlend over the query's `blended_word` pair: the target keeps the
source's latents outside where the two words attend) and `blended_word_reweight` (the target word's cross-attention
scaled, the authors' eq_params). Description-based: source_caption + target_caption.
Deterministic: no random numbers are drawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from benchmark.editing.base import DiffusionEditor, Item
from benchmark.editing.source_inversions import SourceInversions, scheduler_settings


class PromptToPromptEditor(SourceInversions, DiffusionEditor):
    """Args (besides DiffusionEditor's): steps (DDIM), guidance_scale, mode ('replace' | 'refine' | 'auto'),
    cross_replace_steps, self_replace_steps (tau), self_replace_max_tokens, reweight ({word: scale}),
    token_mapping ('reference': the authors' token mappers | 'aligned': editmeter's earlier ones),
    inversion ('null_text' | 'negative_prompt' | 'direct'; the null_text_* settings apply to 'null_text' only),
    null_text_inner_steps, null_text_lr, null_text_lr_decay, null_text_early_stop, null_text_early_stop_growth,
    reuse_inversions (share each source's inversion through `inversion_store`, which the run sets to
    `<results>/inversions`; without a store every query inverts its own source),
    local_blend (False | 'blended_word'), local_blend_start and local_blend_threshold (the authors' 0.2 and 0.3),
    blended_word_reweight (None | the scale of the target's blended word's cross-attention; the authors' 2).
    A query without a blended_word is edited without either, and counted (`blended_word_absent`)."""

    prompt_kind: ClassVar[Literal["instruction", "description"]] = "description"
    family: ClassVar[str] = "sd"
    name: ClassVar[str] = "p2p"
    inversion_kind: ClassVar[str] = "p2p-null-text"  # per instance: INVERSION_KINDS[inversion]
    seeded_inversion: ClassVar[bool] = False  # DDIM inversion and null-text optimisation draw nothing

    def __init__(self, *, steps: int, guidance_scale: float, mode: str, cross_replace_steps: float,
                 self_replace_steps: float, self_replace_max_tokens: int, reweight: dict[str, float],
                 token_mapping: str, null_text_inner_steps: int, null_text_lr: float, null_text_lr_decay: float,
                 null_text_early_stop: float, null_text_early_stop_growth: float, inversion: str = "null_text",
                 reuse_inversions: bool = True, local_blend: bool | str = False, local_blend_start: float = 0.2,
                 local_blend_threshold: float = 0.3, blended_word_reweight: float | None = None,
                 **common: Any) -> None:
        from benchmark.editing.attention import MODES, LocalBlend
        from benchmark.editing.token_maps import TOKEN_MAPPINGS
        from benchmark.models.diffusion import set_scheduler

        if mode not in MODES:
            raise ValueError(f"p2p: unknown mode {mode!r}; expected one of {', '.join(MODES)}")
        if token_mapping not in TOKEN_MAPPINGS:
            raise ValueError(f"p2p: unknown token_mapping {token_mapping!r}; expected one of {', '.join(TOKEN_MAPPINGS)}")
        if inversion not in INVERSION_KINDS:
            raise ValueError(f"p2p: unknown inversion {inversion!r}; expected one of {', '.join(INVERSION_KINDS)}")
        if local_blend is not False and local_blend != "blended_word":
            raise ValueError(f"p2p: local_blend must be false or blended_word (the query's blended_word pair), got "
                             f"{local_blend!r}")
        if blended_word_reweight is not None and (isinstance(blended_word_reweight, bool)
                                                  or not isinstance(blended_word_reweight, int | float)):
            raise ValueError(f"p2p: blended_word_reweight must be null or a number (PIE-Bench: 2), got "
                             f"{blended_word_reweight!r}")
        LocalBlend.check(start=local_blend_start, threshold=local_blend_threshold)
        super().__init__(**common)
        set_scheduler(self.pipe, "DDIMScheduler")
        self.steps, self.guidance_scale, self.mode = int(steps), float(guidance_scale), mode
        self.cross_replace_steps, self.self_replace_steps = float(cross_replace_steps), float(self_replace_steps)
        self.self_replace_max_tokens = int(self_replace_max_tokens)
        self.reweight = {str(k): float(v) for k, v in dict(reweight or {}).items()}
        self.token_mapping = token_mapping
        self.inversion = inversion
        self.inversion_kind = INVERSION_KINDS[inversion]
        self.null_text = {"inner_steps": int(null_text_inner_steps), "lr": float(null_text_lr),
                          "lr_decay": float(null_text_lr_decay), "early_stop": float(null_text_early_stop),
                          "early_stop_growth": float(null_text_early_stop_growth)}
        self.local_blend = local_blend
        self.local_blend_start, self.local_blend_threshold = float(local_blend_start), float(local_blend_threshold)
        self.blended_word_reweight = None if blended_word_reweight is None else float(blended_word_reweight)
        self._init_source_inversions(reuse_inversions)
        if self.local_blend or self.blended_word_reweight is not None:
            # queries edited with a local blend; without one because they have no blended_word; and those whose
            # blended word is no word of its caption (that branch's mask is empty, its re-weighting does nothing)
            self.work.update({"local_blends": 0, "blended_word_absent": 0, "blended_word_unmatched": 0})

    def _edit_chunk(self, items: Sequence[Item]) -> list[Any]:
        from benchmark.editing import inversion as inv
        from benchmark.editing.attention import AttentionController, build_token_edit, controlled_attention

        p, unet = self.pipe, self.pipe.unet
        src = [it.query.source_caption for it in items]
        tgt = [it.query.target_caption for it in items]
        src_emb, tgt_emb = inv.encode_text(p, src), inv.encode_text(p, tgt)
        x_t, uncond, correct = self._source_branch(items, src_emb)
        grid = inv.ddim_grid(p.scheduler, self.steps)
        words = [self._blended_words(it.query) for it in items]
        blend = self._local_blend(src, tgt, words)
        controller = AttentionController(
            [build_token_edit(p.tokenizer, s, t, mode=self.mode, reweight=self._reweight(w),
                              token_mapping=self.token_mapping) for s, t, w in zip(src, tgt, words, strict=True)],
            num_steps=self.steps, cross_replace_steps=self.cross_replace_steps,
            self_replace_steps=self.self_replace_steps, self_replace_max_tokens=self.self_replace_max_tokens,
            device=unet.device, blend=blend)

        def after_step(i: int, x: Any) -> Any:
            # the authors' Direct Inversion step adds the source's offset, then runs the controller's step_callback
            # (the local blend) on the corrected latents
            x = x if correct is None else correct(i, x)
            return x if blend is None else blend(i, x)

        # Batch layout the controller expects: per query [source, target] side by side.
        cond = _interleave(src_emb, tgt_emb)
        with controlled_attention(unet, controller):
            x = inv.ddim_sample(unet, grid, _interleave(x_t, x_t), cond, uncond, self.guidance_scale,
                                on_step=lambda i: setattr(controller, "step", i),
                                after_step=None if correct is None and blend is None else after_step)
        return inv.decode_latents(p, x[1::2])

    # --- PIE-Bench's blended word: local blend and re-weighting ----------------------------------------------------

    def _blended_words(self, query: Any) -> tuple[str, str] | None:
        """(source word, target word) of the query's `blended_word` when an option reads it; None when none does or
        the query has none (counted). A value that is not two space-separated words is refused: the authors' script
        takes the first two of `blended_word.split(" ")` and would fail on one."""
        if not self.local_blend and self.blended_word_reweight is None:
            return None
        value = getattr(query, "blended_word", None)
        if not value:
            self.work["blended_word_absent"] += 1
            return None
        words = str(value).split(" ")
        if len(words) != 2 or not all(words):
            raise ValueError(f"p2p: query {query.id}: blended_word {value!r} is not two space-separated words (the "
                             f"source caption's edited word, then the target caption's); fix the query set, or run "
                             f"with editor.local_blend=false editor.blended_word_reweight=null")
        return words[0], words[1]

    def _reweight(self, words: tuple[str, str] | None) -> dict[str, float]:
        """The query's re-weighting: `reweight`, and its target blended word at `blended_word_reweight` (the authors'
        eq_params; it replaces a `reweight` entry for the same word)."""
        if words is None or self.blended_word_reweight is None:
            return self.reweight
        return {**self.reweight, words[1]: self.blended_word_reweight}

    def _local_blend(self, src: Sequence[str], tgt: Sequence[str], words: Sequence[tuple[str, str] | None]) -> Any:
        """The batch's LocalBlend (None when local_blend is off): each query's blended words' token positions, found
        as the authors' get_word_inds finds them (under `token_mapping: reference`)."""
        from benchmark.editing.attention import LocalBlend, blend_map_side, word_positions

        if not self.local_blend and self.blended_word_reweight is None:
            return None  # nothing reads the blended words (and nothing is counted: the counters do not exist)
        tok = self.pipe.tokenizer
        found = []
        for s, t, w in zip(src, tgt, words, strict=True):
            pos = None if w is None else (word_positions(tok, s, w[0], token_mapping=self.token_mapping),
                                          word_positions(tok, t, w[1], token_mapping=self.token_mapping))
            used = () if pos is None else pos if self.local_blend else pos[1:]
            self.work["blended_word_unmatched"] += int(any(not p for p in used))
            found.append(pos)
        if not self.local_blend:
            return None
        self.work["local_blends"] += sum(p is not None for p in found)
        side = blend_map_side(self.pipe.unet.config, self.resolution // self.pipe.vae_scale_factor)
        return LocalBlend(found, num_steps=self.steps, start=self.local_blend_start,
                          threshold=self.local_blend_threshold, map_side=side, num_tokens=tok.model_max_length,
                          device=self.pipe.unet.device)

    # --- inversions: DDIM inversion (+ null-text optimisation or Direct Inversion's offsets), shared per source ----

    def _source_branch(self, items: Sequence[Item], src_emb: Any) -> tuple[Any, Any, Any]:
        """(x_T (B, C, h, w), the null text of the interleaved [source, target] batch (one tensor, or n: one per
        step), the `after_step` correction or None) of `items`, fp32 on the UNet's device: the inversions are read
        from the store, or computed now (and stored when there is a store)."""
        import torch

        from benchmark.editing import inversion as inv

        per_item = self._inversions(items)
        dev = self.pipe.unet.device
        x_t = torch.cat([t["x_T"] for t in per_item]).to(dev)
        if self.inversion == "null_text":
            nulls = torch.stack([t["null_embeddings"] for t in per_item], dim=1).to(dev)  # (n, B, 77, D)
            return x_t, [_interleave(n, n) for n in nulls], None
        if self.inversion == "negative_prompt":  # the authors expand the source's embedding over both branches
            src = src_emb.to(dev)
            return x_t, _interleave(src, src), None
        empty = inv.encode_text(self.pipe, [""] * len(items)).to(dev)
        offsets = torch.stack([t["offsets"] for t in per_item], dim=1).to(dev)  # (n, B, C, h, w)

        def correct(i: int, x: Any) -> Any:
            # only the source branch (even rows) is corrected, as the authors' P2P runs do; the target keeps its step
            x = x.clone()
            x[0::2] += offsets[i]
            return x

        return x_t, _interleave(empty, empty), correct

    def _inversion_settings(self) -> dict[str, Any]:
        """Every setting of the inversion (never an editing setting, so a sweep of tau, mode or reweight shares it)."""
        settings: dict[str, Any] = {"scheduler": scheduler_settings(self.pipe.scheduler.config), "steps": self.steps}
        if self.inversion == "null_text":
            settings.update(guidance_scale=self.guidance_scale, null_text=self.null_text)
        elif self.inversion == "direct":  # the offsets are measured with the sampler's guidance
            settings.update(guidance_scale=self.guidance_scale)
        return settings

    def _inversion_tensors(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """The tensors one stored inversion holds: {name: (shape, dtype)}."""
        c = self.pipe.unet.config.in_channels
        side = self.resolution // self.pipe.vae_scale_factor
        width = self.pipe.text_encoder.config.hidden_size
        tensors = {"x_T": ((1, c, side, side), "float32")}
        if self.inversion == "null_text":
            tensors["null_embeddings"] = ((self.steps, self.pipe.tokenizer.model_max_length, width), "float32")
        elif self.inversion == "direct":
            tensors["offsets"] = ((self.steps, c, side, side), "float32")
        return tensors

    def _compute_inversions(self, items: Sequence[Item]) -> list[dict[str, Any]]:
        """DDIM-invert each source under its caption, then optimise its null-text embeddings (`null_text`) or measure
        its offsets (`direct`), as one batch; `negative_prompt` keeps x_T alone."""
        import torch

        from benchmark.editing import inversion as inv

        p, unet = self.pipe, self.pipe.unet
        src_emb = inv.encode_text(p, [it.query.source_caption for it in items])
        grid = inv.ddim_grid(p.scheduler, self.steps)
        traj = inv.ddim_invert(unet, grid, inv.encode_images(p, [it.image for it in items]), src_emb)
        out = [{"x_T": traj[-1][i : i + 1].float()} for i in range(len(items))]
        if self.inversion == "negative_prompt":
            return out
        empty = inv.encode_text(p, [""] * len(items))
        if self.inversion == "null_text":
            nulls = inv.null_text_optimise(unet, grid, traj, src_emb, empty, guidance=self.guidance_scale,
                                           **self.null_text)
            name, stacked = "null_embeddings", torch.stack(nulls, dim=1).float()  # (B, n, 77, D)
        else:
            offsets = inv.direct_offsets(unet, grid, traj, src_emb, empty, guidance=self.guidance_scale)
            name, stacked = "offsets", torch.stack(offsets, dim=1).float()  # (B, n, C, h, w)
        for i, o in enumerate(out):
            o[name] = stacked[i]
        return out

    def hyperparameters(self) -> dict[str, Any]:
        return {"scheduler": "DDIM (eta 0)", "steps": self.steps, "guidance_scale": self.guidance_scale,
                "mode": self.mode, "cross_replace_steps": self.cross_replace_steps,
                "self_replace_steps": self.self_replace_steps, "self_replace_max_tokens": self.self_replace_max_tokens,
                "reweight": self.reweight, "token_mapping": self.token_mapping, "inversion": self.inversion,
                "null_text": self.null_text if self.inversion == "null_text" else None,
                "reuse_inversions": self.reuse_inversions, "local_blend": self.local_blend,
                "local_blend_start": self.local_blend_start, "local_blend_threshold": self.local_blend_threshold,
                "blended_word_reweight": self.blended_word_reweight}


# The store's kind of each inversion: its stored tensors differ, so the kinds never read each other's files.
INVERSION_KINDS = {"null_text": "p2p-null-text", "negative_prompt": "p2p-negative-prompt", "direct": "p2p-direct"}


def _interleave(a: Any, b: Any) -> Any:
    """[a0, b0, a1, b1, ...] along the batch axis."""
    import torch

    return torch.stack([a, b], dim=1).flatten(0, 1)
