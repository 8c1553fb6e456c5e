"""DINO (v1) ViT keys of the last block's self-attention, for PIE-Bench's structure distance (Tumanyan et al.'s
"Splicing ViT Features" loss, as PnP Inversion's `evaluation/matrics_calculator.py` uses it with `dino_vitb8`).

The features of an image are the keys of the last transformer block, all heads concatenated per token, CLS token
included: a (T, D) matrix, T = 1 + (h / 8) * (w / 8). The suite turns them into the cosine self-similarity matrix.
The model loads through transformers' `ViTModel` (the hub's `facebook/dino-vitb8`, a conversion of the torch.hub
checkpoint whose fused `qkv` projection is split into `k_proj` / `key`: the same keys).

Two input recipes, named so they are part of the signature:
  - `official`: the evaluation's transform on the 8-bit values 0..255 *without dividing by 255 first*:
    `Resize(224, max_size=480)` (bilinear, not antialiased: torchvision's behaviour on tensors before 0.17, the
    release of the time), then ImageNet normalisation. This is PIE-Bench's own quirk, reproduced on purpose.
  - `corrected`: the same resize on values in [0, 1], then ImageNet normalisation (what the model was trained on).
"""

from __future__ import annotations

import functools
from typing import Any

from benchmark.io.model_cache import WeightsUnavailableError, check_source, tiny_model_dir
from benchmark.models.dino_v1 import random_vit_builder

MODEL_ID = "facebook/dino-vitb8"
# No commit of facebook/dino-vitb8 could be verified offline, and a guessed hash would be worse than none: the
# pretrained model needs an explicit revision (metrics.pie.dino.revision=<commit>) rather than the moving `main`.
PINNED_REVISION: str | None = None
# the hub's config.json of ViT-B/8 (transformers' ViTConfig); `random` builds it, tiny shrinks the widths
BASE_CONFIG: dict[str, Any] = {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                               "intermediate_size": 3072, "patch_size": 8, "image_size": 224, "num_channels": 3,
                               "hidden_act": "gelu", "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
                               "initializer_range": 0.02, "layer_norm_eps": 1e-12, "qkv_bias": True}
TINY_SIZES = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
RECIPES = ("official", "corrected")
SHORT_SIDE, MAX_SIDE = 224, 480  # the evaluation's Resize(224, max_size=480)
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def resized_shape(h: int, w: int, size: int = SHORT_SIDE, max_size: int = MAX_SIDE) -> tuple[int, int]:
    """torchvision's `Resize(size, max_size=max_size)` output (h, w): shorter side to `size`, the longer scaled and
    truncated, then both scaled down when the longer would exceed `max_size`."""
    short, long = (h, w) if h <= w else (w, h)
    new_short, new_long = size, int(size * long / short)
    if new_long > max_size:
        new_short, new_long = int(max_size * new_short / new_long), max_size
    return (new_short, new_long) if h <= w else (new_long, new_short)


class DinoKeysEncoder:
    """Last-block attention keys of images (float (B, 3, H, W) in [0, 1]) -> (B, T, D), heads concatenated."""

    def __init__(self, model: Any, *, recipe: str = "official", device: str = "cpu", name: str = "") -> None:
        if recipe not in RECIPES:
            raise ValueError(f"unknown structure-distance input recipe {recipe!r}; expected one of "
                             f"{', '.join(RECIPES)}")
        self.model, self.recipe, self.device, self.name = model, recipe, device, name

    @property
    def signature(self) -> str:
        return f"dino-keys|{self.name}|{self.recipe}"

    def prepare(self, images: Any) -> Any:
        """The recipe's resize and normalisation (see the module docstring)."""
        import torch
        import torch.nn.functional as F

        x = images.to(self.device).float()
        if self.recipe == "official":
            x = (x * 255).round()  # the 8-bit values the evaluation reads with np.array(PIL image)
        h, w = resized_shape(*x.shape[-2:])
        if (h, w) != tuple(x.shape[-2:]):
            x = F.interpolate(x, size=(h, w), mode="bilinear", align_corners=False, antialias=False)
        mean = torch.tensor(IMAGENET_MEAN, device=x.device).view(1, 3, 1, 1)
        std = torch.tensor(IMAGENET_STD, device=x.device).view(1, 3, 1, 1)
        return ((x - mean) / std).to(self.model.dtype)

    def embed_images(self, images: Any) -> Any:
        import torch

        x = self.prepare(images)
        got: list[Any] = []
        handle = _key_projection(self.model).register_forward_hook(lambda _m, _i, out: got.append(out))
        try:
            with torch.inference_mode():
                size = self.model.config.image_size
                self.model(pixel_values=x, interpolate_pos_encoding=tuple(x.shape[-2:]) != (size, size))
        finally:
            handle.remove()
        return got[-1].float()


def _key_projection(model: Any) -> Any:
    """The last block's key projection (transformers 5: `layers[-1].attention.k_proj`; 4: `encoder.layer[-1]
    .attention.attention.key`)."""
    layers = getattr(model, "layers", None)
    if layers is None:
        layers = model.encoder.layer
    attn = layers[-1].attention
    return attn.k_proj if hasattr(attn, "k_proj") else attn.attention.key


def config_for(source: str) -> dict[str, Any]:
    """The ViTConfig kwargs `source` builds: the hub's, or its tiny-width copy."""
    return {**BASE_CONFIG, **TINY_SIZES} if source == "tiny" else dict(BASE_CONFIG)


@functools.lru_cache(maxsize=4)
def load_dino_keys(weights: str = "pretrained", model_id: str = MODEL_ID, revision: str | None = None,
                   recipe: str = "official", device: str = "cpu") -> DinoKeysEncoder:
    """DINO ViT-B/8 once per process (per arguments), always through `ViTModel.from_pretrained`: the hub id at
    `revision` (pretrained; required, see PINNED_REVISION), or a cached folder of random weights (tiny: small
    widths; random: the real shape)."""
    from transformers import ViTModel

    if model_id != MODEL_ID:
        raise ValueError(f"unknown structure-distance model {model_id!r}; PIE-Bench uses {MODEL_ID}")
    if recipe not in RECIPES:
        raise ValueError(f"unknown structure-distance input recipe {recipe!r}; expected one of {', '.join(RECIPES)}")
    source = check_source(weights)
    if source == "pretrained":
        revision = revision or PINNED_REVISION
        if not revision:
            raise ValueError(
                f"no revision for the pretrained {model_id!r}: editmeter pins no commit of it (none could be verified "
                f"offline). Pick the commit to use from https://huggingface.co/{model_id}/commits/main and pass it: "
                "metrics.pie.dino.revision=<40-hex commit>, or drop the structure distance with metrics.pie.dino=null")
        location, kwargs = model_id, {"revision": revision}
    else:
        config = config_for(source)
        location, kwargs = str(tiny_model_dir(f"dino-vitb8-{source}", config, random_vit_builder(config))), {}
    try:
        model = ViTModel.from_pretrained(location, add_pooling_layer=False, **kwargs)
    except OSError as err:
        if source != "pretrained":
            raise
        raise WeightsUnavailableError("DINO ViT-B/8", f"{model_id}@{revision}", err) from err
    name = f"{model_id}@{revision}" if source == "pretrained" else f"dino-vitb8-{source}"
    return DinoKeysEncoder(model.to(device).eval(), recipe=recipe, device=device, name=name)
