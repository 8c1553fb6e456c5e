"""Prompt-to-Prompt attention control (Hertz et al. 2023) through diffusers attention processors.

The edit batch for B queries is `[uncond (B x [source, target]), cond (B x [source, target])]`. Every attention layer
computes its probabilities explicitly (P2P edits them, so the fused SDPA kernel cannot be used here), hands them to
the `AttentionController`, which rewrites only the conditional target branch from the conditional source branch:

- cross-attention, for steps before `cross_replace_steps * n`: word swap (`replace`: the target's maps are the
  source's maps through a token mapper), refinement (`refine`: aligned tokens take the source's maps, new tokens keep
  their own), then re-weighting (`equalizer`: scale chosen tokens' maps);
- self-attention, for steps before `self_replace_steps * n` (P2P's tau) and layers with at most
  `self_replace_max_tokens` query positions: the target's self-attention is the source's.
"""

from __future__ import annotations

import difflib
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


def _ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, truncation=True, max_length=tokenizer.model_max_length).input_ids)


def word_positions(tokenizer: Any, prompt: str, word: str) -> list[int]:
    """Token positions (in the padded prompt, bos = 0) of every occurrence of `word`'s tokens in `prompt`."""
    ids, sub = _ids(tokenizer, prompt), _ids(tokenizer, word)[1:-1]
    return [i + k for i in range(len(ids) - len(sub) + 1) if ids[i : i + len(sub)] == sub for k in range(len(sub))]


def build_token_edit(tokenizer: Any, source: str, target: str, *, mode: str,
                     reweight: dict[str, float] | None = None) -> TokenEdit:
    """The word-swap / refinement mapper and equalizer for one (source, target) caption pair.

    mode 'auto' picks 'replace' (a word swap) when both captions have the same number of tokens or of words, else
    'refine'.
    Refinement aligns the two token sequences (longest matching blocks); tokens substituted one-for-one map onto
    the source token they replace, inserted tokens keep their own attention (alpha 0).
    """
    import torch

    if mode not in MODES:
        raise ValueError(f"unknown P2P mode {mode!r}; expected one of {', '.join(MODES)}")
    n = tokenizer.model_max_length
    src, tgt = _ids(tokenizer, source), _ids(tokenizer, target)
    equalizer = torch.ones(n)
    for word, scale in (reweight or {}).items():
        for p in word_positions(tokenizer, target, word):
            equalizer[p] = float(scale)
    if mode == "auto":
        same_words = len(source.split()) == len(target.split())
        mode = "replace" if len(src) == len(tgt) or same_words else "refine"
    if mode == "replace":
        return TokenEdit("replace", mapper=_swap_mapper(tokenizer, source, target, len(src), len(tgt)),
                         equalizer=equalizer)
    mapper, alphas = torch.arange(n), torch.zeros(n)
    for op, i0, i1, j0, j1 in difflib.SequenceMatcher(None, src, tgt, autojunk=False).get_opcodes():
        if op == "equal" or (op == "replace" and i1 - i0 == j1 - j0):
            mapper[j0:j1] = torch.arange(i0, i1)
            alphas[j0:j1] = 1.0
        else:
            mapper[j0:j1] = 0  # unused: alpha 0 keeps the target's own map
    # Padding after the end of text: align the tails so the "rest of the sentence" maps keep their layout.
    tail = torch.arange(len(tgt), n)
    mapper[len(tgt) :] = (tail - len(tgt) + len(src)).clamp(max=n - 1)
    alphas[len(tgt) :] = 1.0
    return TokenEdit("refine", mapper=mapper, alphas=alphas, equalizer=equalizer)


def _swap_mapper(tokenizer: Any, source: str, target: str, n_src: int, n_tgt: int) -> Any:
    """(77, 77) word-swap mapper: target maps = source maps @ mapper.

    Same token count: the identity. Otherwise the captions must have the same number of words; word k of the target
    takes the mean of word k's source token maps on each of its tokens (so a 1-token word swapped for a 2-token
    word keeps its layout), and the end-of-text/padding tails are aligned.
    """
    import torch

    n = tokenizer.model_max_length
    if n_src == n_tgt:
        return torch.eye(n)
    s_words, t_words = source.split(), target.split()
    if len(s_words) != len(t_words):
        raise ValueError(f"word swap needs captions with the same number of words: {source!r} vs {target!r}")
    mapper = torch.zeros(n, n)
    mapper[0, 0] = 1.0  # start of text
    i = j = 1
    for sw, tw in zip(s_words, t_words, strict=True):
        a, b = len(_ids(tokenizer, sw)) - 2, len(_ids(tokenizer, tw)) - 2
        if i + a > n_src - 1 or j + b > n_tgt - 1:
            break  # truncated caption: the rest is treated as tail
        if a == b:
            mapper[torch.arange(i, i + a), torch.arange(j, j + b)] = 1.0
        else:
            mapper[i : i + a, j : j + b] = 1.0 / a
        i, j = i + a, j + b
    for k in range(n - j):  # end of text and padding, aligned from the end of each caption
        mapper[min(i + k, n - 1), j + k] = 1.0
    return mapper


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
    """

    def __init__(self, edits: Sequence[TokenEdit], *, num_steps: int, cross_replace_steps: float,
                 self_replace_steps: float, self_replace_max_tokens: int,
                 recorder: Callable[[int, bool, Any, Any], None] | None = None, device: Any = None) -> None:
        """Builds the controller for one batch; the sampling loop then sets `step` before each UNet call."""
        self.edits = [e.to(device) for e in edits] if device is not None else list(edits)
        self.cross_until = int(cross_replace_steps * num_steps)
        self.self_until = int(self_replace_steps * num_steps)
        self.self_max_tokens = int(self_replace_max_tokens)
        self.recorder = recorder
        self.step = 0

    def __call__(self, probs: Any, is_cross: bool, heads: int) -> Any:
        """probs: (4 * B * heads, queries, keys) for the batch layout in the module docstring."""
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

    def __init__(self, controller: AttentionController) -> None:
        """Wraps `controller`; one processor instance is shared by every attention layer."""
        self.controller = controller

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
        probs = self.controller(probs, is_cross, attn.heads)
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
        """Save the UNet's processors, install the controlled one; returns the controller."""
        self.saved = dict(self.unet.attn_processors)
        self.unet.set_attn_processor(ControlledAttnProcessor(self.controller))
        return self.controller

    def __exit__(self, *exc: object) -> None:
        """Put the saved processors back, also when the block raised."""
        self.unet.set_attn_processor(self.saved)
