"""Prompt-to-Prompt attention control (Hertz et al. 2023) through diffusers attention processors.

The edit batch for B queries is `[uncond (B x [source, target]), cond (B x [source, target])]`. Every attention layer
computes its probabilities explicitly (P2P edits them, so the fused SDPA kernel cannot be used here), hands them to
the `AttentionController`, which rewrites only the conditional target branch from the conditional source branch:

- cross-attention, for steps before `int(cross_replace_steps * (n + 1))` (the authors' window): word swap (`replace`: the target's maps are the
  source's maps through a token mapper), refinement (`refine`: aligned tokens take the source's maps, new tokens keep
  their own), then re-weighting (`equalizer`: scale chosen tokens' maps); the mappers are built in
  benchmark.editing.token_maps, by the authors' rules unless `token_mapping` says otherwise;
- self-attention, for steps before `int(self_replace_steps * n)` (P2P's tau) and layers with at most
  `self_replace_max_tokens` query positions: the target's self-attention is the source's.

A `LocalBlend` (optional) sums the conditional branches' cross-attention maps of chosen words as the controller sees
them, and after each scheduler step keeps the target's latents equal to the source's outside the region they mark.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

MODES = ("replace", "refine", "auto")


@dataclass
class TokenEdit:
    """How one query's target prompt maps onto its source prompt (tensors over the 77 text positions).

    mode: 'replace' (mapper is a (77, 77) matrix, target maps = source maps @ mapper), 'refine' (mapper is a (77,)
    index into the source, alphas (77,) 1 where a target token is aligned to a source token), or 'none' (no-op).
    equalizer: (77,) multiplier of each target token's cross-attention map (ones = no re-weighting).
    """

    mode: str
    mapper: Any = None
    alphas: Any = None
    equalizer: Any = None

    def to(self, device: Any) -> TokenEdit:
        """This edit with its tensors on `device` (built on the CPU; moved once, not in every attention layer)."""
        def move(t: Any) -> Any:
            return None if t is None else t.to(device)

        return TokenEdit(self.mode, move(self.mapper), move(self.alphas), move(self.equalizer))


def word_positions(tokenizer: Any, prompt: str, word: str, *, token_mapping: str = "reference") -> list[int]:
    """Token positions (in the padded prompt, start of text = 0) of `word` in `prompt`: the words equal to it
    (`reference`, the authors' rule) or every run of its tokens (`aligned`); see benchmark.editing.token_maps."""
    from benchmark.editing import token_maps as tm

    if token_mapping == "reference":
        return [p for p in tm.reference_word_positions(tokenizer, prompt, word) if p < tokenizer.model_max_length]
    return tm.aligned_word_positions(tokenizer, prompt, word)


def build_token_edit(tokenizer: Any, source: str, target: str, *, mode: str,
                     reweight: dict[str, float] | None = None, token_mapping: str = "reference") -> TokenEdit:
    """The word-swap / refinement mapper and equalizer for one (source, target) caption pair.

    mode 'auto' picks 'replace' (a word swap) when both captions have the same number of words and the swap can be
    built, else 'refine'. `token_mapping` picks the rule set (benchmark.editing.token_maps): 'reference' (the
    authors' code, the default) or 'aligned' (editmeter's earlier rules, whose 'auto' also swaps at equal token
    counts).
    """
    import torch

    from benchmark.editing import token_maps as tm

    if mode not in MODES:
        raise ValueError(f"unknown P2P mode {mode!r}; expected one of {', '.join(MODES)}")
    if token_mapping not in tm.TOKEN_MAPPINGS:
        raise ValueError(f"unknown P2P token_mapping {token_mapping!r}; expected one of {', '.join(tm.TOKEN_MAPPINGS)}")
    n = tokenizer.model_max_length
    equalizer = torch.ones(n)
    for word, scale in (reweight or {}).items():
        for p in word_positions(tokenizer, target, word, token_mapping=token_mapping):
            equalizer[p] = float(scale)
    swap = tm.reference_swap_for_captions if token_mapping == "reference" else tm.aligned_swap_for_captions
    if mode == "auto":
        same_tokens = token_mapping == "aligned" and len(tm.token_ids(tokenizer, source)) == len(tm.token_ids(tokenizer, target))
        mode = "replace" if same_tokens or tm.same_word_count(source, target, token_mapping) else "refine"
        if mode == "replace":
            try:
                matrix = swap(tokenizer, source, target)
            except ValueError:  # a swapped word without tokens in the 77 positions: refinement still applies
                mode = "refine"
    elif mode == "replace":
        matrix = swap(tokenizer, source, target)
    if mode == "replace":
        return TokenEdit("replace", mapper=torch.tensor(matrix, dtype=torch.float32), equalizer=equalizer)
    refine = tm.reference_refinement if token_mapping == "reference" else tm.aligned_refinement
    mapper, alphas = refine(tm.token_ids(tokenizer, source), tm.token_ids(tokenizer, target), n)
    return TokenEdit("refine", mapper=torch.tensor(mapper, dtype=torch.long),
                     alphas=torch.tensor(alphas, dtype=torch.float32), equalizer=equalizer)


class AttentionController:
    """Rewrites attention probabilities of the edit branch; `step` is set by the sampling loop before each UNet call.

    Args:
        edits: one TokenEdit per query in the batch.
        num_steps: denoising steps of the edit.
        cross_replace_steps: fraction of steps (from the start) with cross-attention control.
        self_replace_steps: fraction of steps with self-attention injection (P2P's tau).
        self_replace_max_tokens: only layers with at most this many query positions get self-attention injection
            (P2P: 32x32; finer layers carry appearance detail and stay free).
        recorder: optional callback(step, is_cross, before, after) seeing the conditional half, for tests/analysis.
        device: where the attention maps live (the UNet's device); the edits' tensors are moved there once.
        blend: optional LocalBlend (one per batch, built for the same queries) that collects the cross-attention maps
            of the down and up blocks after this controller's edit, as the authors' attention store holds them.
    """

    def __init__(self, edits: Sequence[TokenEdit], *, num_steps: int, cross_replace_steps: float,
                 self_replace_steps: float, self_replace_max_tokens: int,
                 recorder: Callable[[int, bool, Any, Any], None] | None = None, device: Any = None,
                 blend: LocalBlend | None = None) -> None:
        """Builds the controller for one batch; the sampling loop then sets `step` before each UNet call."""
        self.edits = [e.to(device) for e in edits] if device is not None else list(edits)
        if blend is not None and blend.batch != len(self.edits):
            raise ValueError(f"LocalBlend built for {blend.batch} queries, controller for {len(self.edits)}")
        self.blend = blend
        # The authors' code builds its cross-attention schedule over num_steps + 1 entries (and the self-attention
        # one over num_steps): int(0.8 * 51) = 40 at 50 steps, but int(0.8 * 4) = 3 (not 2) at 3 steps.
        self.cross_until = int(cross_replace_steps * (num_steps + 1))
        self.self_until = int(self_replace_steps * num_steps)
        self.self_max_tokens = int(self_replace_max_tokens)
        self.recorder = recorder
        self.step = 0

    def __call__(self, probs: Any, is_cross: bool, heads: int, place: str | None = None) -> Any:
        """probs: (4 * B * heads, queries, keys) for the batch layout in the module docstring; `place` is the
        layer's part of the UNet ('down' | 'mid' | 'up'; None: unknown, never collected by a LocalBlend)."""
        b = len(self.edits)
        view = probs.view(2, b, 2, heads, *probs.shape[1:])
        cond = view[1]
        out = None
        if is_cross and self.step < self.cross_until:
            out = cond.clone()
            for i, e in enumerate(self.edits):
                out[i, 1] = self._cross(cond[i, 0], cond[i, 1], e)
        elif not is_cross and self.step < self.self_until and probs.shape[1] <= self.self_max_tokens:
            out = cond.clone()
            for i, e in enumerate(self.edits):
                if e.mode != "none":
                    out[i, 1] = cond[i, 0]
        if self.recorder is not None:
            self.recorder(self.step, is_cross, cond, cond if out is None else out)
        if self.blend is not None and is_cross and place in LocalBlend.PLACES:
            self.blend.collect(cond if out is None else out)
        if out is None:
            return probs
        new = view.clone()
        new[1] = out
        return new.view_as(probs)

    @staticmethod
    def _cross(base: Any, edit: Any, e: TokenEdit) -> Any:
        import torch

        if e.mode == "none":
            return edit
        m = e.mapper.to(base.device)  # a no-op when the controller was given the UNet's device
        if e.mode == "replace":
            new = torch.einsum("hqk,kn->hqn", base, m.to(base.dtype))
        else:
            a = e.alphas.to(base.device, base.dtype)
            new = base[..., m] * a + edit * (1 - a)
        return new * e.equalizer.to(base.device, base.dtype)


class ControlledAttnProcessor:
    """A diffusers attention processor that materialises the probabilities and passes them through a controller."""

    def __init__(self, controller: AttentionController, place: str | None = None) -> None:
        """Wraps `controller` for the layers of one part of the UNet (`place`: 'down' | 'mid' | 'up')."""
        self.controller, self.place = controller, place

    def __call__(self, attn: Any, hidden_states: Any, encoder_hidden_states: Any = None, attention_mask: Any = None,
                 temb: Any = None, *args: Any, **kwargs: Any) -> Any:
        """Attention of one layer with the probabilities passed through the controller; returns the layer's output
        (hidden states of the input's shape), as diffusers' own processors do."""
        import torch

        is_cross = encoder_hidden_states is not None
        context = encoder_hidden_states if is_cross else hidden_states
        query = attn.head_to_batch_dim(attn.to_q(hidden_states))
        key = attn.head_to_batch_dim(attn.to_k(context))
        value = attn.head_to_batch_dim(attn.to_v(context))
        probs = attn.get_attention_scores(query, key, attention_mask)
        probs = self.controller(probs, is_cross, attn.heads, self.place)
        out = attn.batch_to_head_dim(torch.bmm(probs, value))
        out = attn.to_out[1](attn.to_out[0](out))
        if attn.residual_connection:
            out = out + hidden_states
        return out / attn.rescale_output_factor


class controlled_attention:  # noqa: N801 - used as a context manager, reads like `with torch.no_grad()`
    """Install `ControlledAttnProcessor(controller)` on every attention layer of `unet`; restore on exit."""

    def __init__(self, unet: Any, controller: AttentionController) -> None:
        """Nothing is installed until the `with` block is entered."""
        self.unet, self.controller = unet, controller

    def __enter__(self) -> AttentionController:
        """Save the UNet's processors, install the controlled ones (one per part of the UNet, which the
        controller's LocalBlend needs); returns the controller."""
        self.saved = dict(self.unet.attn_processors)
        parts = {place: ControlledAttnProcessor(self.controller, place) for place in ("down", "mid", "up", None)}
        self.unet.set_attn_processor({name: parts[_place(name)] for name in self.saved})
        return self.controller

    def __exit__(self, *exc: object) -> None:
        """Put the saved processors back, also when the block raised."""
        self.unet.set_attn_processor(self.saved)


def _place(processor_name: str) -> str | None:
    """'down' | 'mid' | 'up' for a diffusers attention processor name ('down_blocks.2.attentions.0...'), else None."""
    head = processor_name.split(".", 1)[0]
    return {"down_blocks": "down", "mid_block": "mid", "up_blocks": "up"}.get(head)


def blend_map_side(unet_config: Any, latent_side: int) -> int:
    """Side of the cross-attention maps a LocalBlend reads: the coarsest down-block level with cross-attention
    (Stable Diffusion v1 at 512 px: 64 // 4 = 16, the authors' 16 x 16 layers; the tiny UNet: 16)."""
    levels = [i for i, kind in enumerate(unet_config.down_block_types) if "CrossAttn" in kind]
    if not levels:
        raise ValueError(f"LocalBlend needs a UNet with cross-attention down blocks; this one has "
                         f"{list(unet_config.down_block_types)}")
    return int(latent_side) // 2 ** max(levels)


class LocalBlend:
    """Prompt-to-Prompt's local blend as PIE-Bench's P2P runs it (cure-lab/PnPInversion,
    models/p2p/attention_control.py; the same as google/prompt-to-prompt's null-text notebook at 512 px).

    Per query, a word of the source caption and one of the target caption (token positions; None: no blend for
    that query). Each step the controller hands over the conditional [source, target] cross-attention maps of the
    down- and up-block layers at `map_side` x `map_side` positions (after its edit); each branch's maps of its
    word's tokens are summed over tokens, heads, layers and every step so far (the authors sum their attention
    store and never reset it within an edit; they average over heads and layers, a constant factor that the
    normalisation below removes). Only this (B, 2, map_side^2) sum is kept, not the maps.

    After the scheduler's step i >= int(start * num_steps) (the authors: start_blend 0.2, counter > start_blend):
    each branch's sum gets a 3 x 3 max-pool (stride 1, padding 1), nearest upsampling to the latent size, division
    by its maximum and `> threshold` (0.3); the target's mask is the union of the source's and its own, and the
    target's latents become `src + mask * (tgt - src)`: outside the mask exactly the source's. A word without tokens
    gives 0 / 0, NaN, never above the threshold: an empty mask for that branch, as in the authors' code.
    """

    PLACES = ("down", "up")  # the authors' down_cross[2:4] + up_cross[:3]: never the mid block

    def __init__(self, words: Sequence[tuple[Sequence[int], Sequence[int]] | None], *, num_steps: int,
                 start: float, threshold: float, map_side: int, num_tokens: int = 77, device: Any = None) -> None:
        """words: per query (source token positions, target token positions) or None; the tensors live on
        `device` (the UNet's)."""
        import torch

        self.check(start=start, threshold=threshold)
        alphas = torch.zeros(len(words), 2, num_tokens)
        for i, w in enumerate(words):
            if w is not None:
                for branch, positions in enumerate(w):
                    alphas[i, branch, list(positions)] = 1.0
        self.batch = len(words)
        self.alphas = alphas.to(device)
        self.active = torch.tensor([w is not None for w in words], device=device)
        self.start_step = int(float(start) * num_steps)
        self.threshold = float(threshold)
        self.map_side = int(map_side)
        self.maps: Any = None  # (B, 2, map_side^2) float32 running sum

    @staticmethod
    def check(*, start: float, threshold: float) -> None:
        """Refuse a start or threshold outside its range, naming it and the authors' value."""
        if isinstance(start, bool) or not isinstance(start, int | float) or not 0.0 <= start <= 1.0:
            raise ValueError(f"local_blend_start {start!r} is not a fraction of the steps in [0, 1] (the authors': 0.2)")
        if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0.0 <= threshold < 1.0:
            raise ValueError(f"local_blend_threshold {threshold!r} is not in [0, 1) (each map is divided by its "
                             f"maximum; the authors': 0.3)")

    def collect(self, cond: Any) -> None:
        """Add one layer's conditional cross-attention maps, (B, 2, heads, queries, tokens); a layer at another
        resolution is left out."""
        if cond.shape[-2] != self.map_side ** 2:
            return
        import torch

        part = torch.einsum("bshqk,bsk->bsq", cond, self.alphas.to(cond.dtype)).float()
        self.maps = part if self.maps is None else self.maps + part

    def mask(self, size: Sequence[int]) -> Any:
        """The target's blend mask, (B, 1, h, w) bool at latent size `size`: the union of both branches' masks."""
        import torch.nn.functional as F  # noqa: N812

        if self.maps is None:
            raise RuntimeError(f"LocalBlend collected no cross-attention maps of {self.map_side} x {self.map_side} "
                               f"positions from the down and up blocks: install it through an AttentionController "
                               f"under controlled_attention, on a UNet that has such layers")
        s = self.map_side
        m = F.max_pool2d(self.maps.view(-1, 1, s, s), (3, 3), (1, 1), padding=(1, 1))
        m = F.interpolate(m, size=tuple(size))  # nearest, as the authors
        m = m / m.amax(dim=(2, 3), keepdim=True)
        m = (m > self.threshold).view(self.batch, 2, *m.shape[-2:])
        return (m[:, 0] | m[:, 1]).unsqueeze(1)

    def __call__(self, step: int, x: Any) -> Any:
        """The latents after scheduler step `step`, [source, target] per query, with each blended query's target
        blended onto its source (from the start step on); the other queries' rows unchanged."""
        import torch

        if step < self.start_step or not bool(self.active.any()):
            return x
        src, tgt = x[0::2], x[1::2]
        mask = self.mask(x.shape[-2:]).to(x.dtype)
        blended = src + mask * (tgt - src)  # the authors' x_t[:1] + mask * (x_t - x_t[:1])
        out = x.clone()
        out[1::2] = torch.where(self.active.view(-1, 1, 1, 1), blended, tgt)
        return out
