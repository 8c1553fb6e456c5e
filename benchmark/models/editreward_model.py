"""EditReward's reward model as a module: Qwen2.5-VL with two MLP heads read at a special token (metrics=editreward,
docs/judge.md "EditReward"). Imported only when the model is built (it imports torch and transformers).

The parameter names are the authors' checkpoint's (`model.visual.*`, `model.language_model.*`, `lm_head.*`,
`rm_heads.head_<i>.<layer>.*`), so their full state dict loads with `load_state_dict(strict=True)`.

Forward, as the authors' `_run_single_batch_through_model_and_head` runs it under transformers 4.57: token
embeddings with the vision tower's merged patches scattered into the image-pad positions, then the language model
called with `inputs_embeds` only: no input ids and no image grid reach it, so its rotary positions are the plain
text ones (`official_position_ids`), never Qwen2.5-VL's M-RoPE positions. Each head (float32) reads the last hidden
state at the reward token; the heads' outputs are averaged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import nn
from transformers import Qwen2_5_VLForConditionalGeneration
from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLVisionRotaryEmbedding

NUM_HEADS = 2      # ranknet_multi_head: head_0 reads the edit-following prompt, head_1 the edit-quality prompt
OUTPUT_DIM = 2     # (mean, log sigma) of the reward
HEAD_WIDTHS = (1024, 16)  # the authors' head when no rm_head_kwargs are given (their Qwen2.5-VL config gives none)
HEAD_DROPOUT = 0.05


def reward_head(hidden_size: int) -> nn.Sequential:
    """Linear(hidden, 1024) - ReLU - Dropout - Linear(1024, 16) - ReLU - Linear(16, 2): indices 0, 3, 5 hold the
    checkpoint's `rm_heads.head_<i>.<index>.{weight,bias}`."""
    a, b = HEAD_WIDTHS
    return nn.Sequential(nn.Linear(hidden_size, a), nn.ReLU(), nn.Dropout(HEAD_DROPOUT), nn.Linear(a, b), nn.ReLU(),
                         nn.Linear(b, OUTPUT_DIM))


def official_position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """(3, B, L) rotary positions the authors' call gives the language model (transformers 4.57's `get_rope_index`
    without input ids): each row's tokens numbered 0, 1, ... by the attention mask, padding at 1, the same numbers
    on the temporal, height and width sections (no image grid)."""
    pos = attention_mask.long().cumsum(-1) - 1
    pos = pos.masked_fill(attention_mask == 0, 1)
    return pos.unsqueeze(0).expand(3, -1, -1)


class LegacyVisionRotaryEmbedding(Qwen2_5_VLVisionRotaryEmbedding):
    """The vision tower's rotary angles as transformers 4.57 computes them: position times inverse frequency in the
    inverse frequencies' own dtype, and cos / sin in it too. The authors cast the whole model to bf16
    (`model.to(torch.bfloat16)`), buffers included, so their vision angles are bf16 products; transformers 5
    multiplies in float32. In float32 both are the same. (The name keeps "RotaryEmbedding": transformers
    initialises the buffers of modules so named.)"""

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        inv = self.inv_freq.to(x.device)
        freqs = position_ids[..., None].to(inv.dtype) * inv
        cos = self.recomposition_frequencies(freqs.cos() * self.attention_scaling)
        sin = self.recomposition_frequencies(freqs.sin() * self.attention_scaling)
        return cos, sin


class EditRewardModel(Qwen2_5_VLForConditionalGeneration):
    """Qwen2.5-VL with `rm_heads` (module docstring). `reward_token_id` is set by the loader once the tokenizer has
    the reward token."""

    # the base checkpoint has no heads: they come from the authors' state dict, loaded strictly right after, so their
    # absence at `from_pretrained` is expected (any other missing weight is still reported)
    _keys_to_ignore_on_load_missing = [r"^rm_heads\."]

    def __init__(self, config: object) -> None:
        super().__init__(config)
        self.model.visual.rotary_pos_emb = LegacyVisionRotaryEmbedding(self.config.vision_config)
        hidden = self.config.text_config.hidden_size
        self.rm_heads = nn.ModuleDict({f"head_{i}": reward_head(hidden) for i in range(NUM_HEADS)})
        self.reward_token_id: int | None = None

    def heads_to_float32(self) -> None:
        """The heads in float32 whatever the body's dtype (the authors cast them after loading)."""
        for head in self.rm_heads.values():
            head.to(torch.float32)

    def image_features(self, enc: Mapping[str, torch.Tensor]) -> torch.Tensor | None:
        """(merged patches, hidden) the vision tower's output for a batch's images, in order; None without any."""
        if enc.get("pixel_values") is None:
            return None
        feats = self.model.get_image_features(enc["pixel_values"], enc["image_grid_thw"], return_dict=True)
        return torch.cat(list(feats.pooler_output), dim=0)

    def hidden_at_reward_token(self, enc: Mapping[str, torch.Tensor],
                               features: torch.Tensor | None = None) -> torch.Tensor:
        """(B, hidden) last hidden state at each row's reward token (the official forward, module docstring).
        `features`: the batch's `image_features`, when already computed."""
        ids, mask = enc["input_ids"], enc["attention_mask"]
        embeds = self.get_input_embeddings()(ids)
        if features is None:
            features = self.image_features(enc)
        if features is not None:
            merged = features.to(embeds.device, embeds.dtype)
            where = (ids == self.config.image_token_id).unsqueeze(-1).expand_as(embeds)
            embeds = embeds.masked_scatter(where, merged)
        out = self.model.language_model(input_ids=None, inputs_embeds=embeds, attention_mask=mask,
                                        position_ids=official_position_ids(mask), use_cache=False)
        at = ids == self.reward_token_id
        counts = at.sum(dim=1)
        if self.reward_token_id is None or bool((counts != 1).any()):
            raise ValueError(f"every prompt needs exactly one reward token; counts per row: {counts.tolist()}")
        return out.last_hidden_state[at]

    def head_outputs(self, batches: Sequence[Mapping[str, torch.Tensor]]) -> torch.Tensor:
        """(heads, B, 2) float32: head i on batch i (its prompt), each at the reward token. A head is the same MLP
        at every position, so applying it to the pooled position only equals the authors' head-then-pool."""
        if len(batches) != len(self.rm_heads):
            raise ValueError(f"{len(self.rm_heads)} heads need {len(self.rm_heads)} batches, got {len(batches)}")
        # every head's batch holds the same images (only the text differs): the vision tower runs once, which
        # changes no number (the authors run it per head on identical pixels)
        pixels = [b.get("pixel_values") for b in batches]
        same = all(p is not None and p.shape == pixels[0].shape and torch.equal(p, pixels[0]) for p in pixels)
        shared = self.image_features(batches[0]) if same else None
        outs = []
        for i, enc in enumerate(batches):
            head = self.rm_heads[f"head_{i}"]
            hidden = self.hidden_at_reward_token(enc, shared)
            outs.append(head(hidden.to(torch.float32)))  # float32, as their autocast to float32
        return torch.stack(outs)


def _register_key_names() -> None:
    """Let `from_pretrained` rename the base checkpoint's keys for this class as it does for its parent (the hub's
    Qwen2.5-VL files use the older `model.layers.*` / `visual.*` names). transformers applies a class's renaming
    only to its own classes and to classes registered by name, so a subclass defined here must be registered."""
    from transformers.conversion_mapping import (
        get_checkpoint_conversion_mapping,
        register_checkpoint_conversion_mapping,
    )

    parent = get_checkpoint_conversion_mapping(Qwen2_5_VLForConditionalGeneration.__name__)
    if parent is not None:
        register_checkpoint_conversion_mapping(EditRewardModel.__name__, parent, overwrite=True)


_register_key_names()


def pool_heads(per_head: torch.Tensor) -> torch.Tensor:
    """(B, 2) the authors' `pooling_strategy: mean`: the mean over heads of (mean, log sigma)."""
    return per_head.mean(dim=0)
