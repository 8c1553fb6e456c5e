"""DINO (v1) ViT image features through transformers: the CLS token of `last_hidden_state` (after the final layer
norm, which is what the original torch.hub models return). EditVal uses ViT-B/16, MagicBrush ViT-S/16.

Two input recipes, named so they can be part of a metric's signature:
  - `resize224`: resize straight to 224 x 224 (EditVal, via the ViT image processor);
  - `resize256-crop224`: MagicBrush's torchvision transform, bit for bit: `Resize(256, bicubic)` and
    `CenterCrop(224)` on the 8-bit PIL image (`benchmark.models.reference_input`).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from benchmark.io.model_cache import WeightsUnavailableError, check_source, tiny_model_dir

DINO_V1_MODELS = {"facebook/dino-vitb16": "vitb16", "facebook/dino-vits16": "vits16"}
# The hub commit each model is pinned at, as every other checkpoint of the project is. ViT-B/16's is the commit
# public projects pin (metrics=editval uses it too). ViT-S/16 has none: no commit of facebook/dino-vits16 could be
# verified offline (not in this repository, its docs or tests), and a guessed hash would be worse than none. So the
# pretrained ViT-S/16 needs an explicit revision (metrics.conventional.dino_mb.revision=<commit>) and is refused
# without one, rather than loaded at whatever `main` holds today.
PINNED_REVISIONS: dict[str, str | None] = {"facebook/dino-vitb16": "f205d5d8e640a89a2b8ef0369670dfc37cc07fc2",
                                           "facebook/dino-vits16": None}
# The hub's config.json of each model (transformers' ViTConfig); `random` builds these, tiny shrinks the widths.
BASE_CONFIGS: dict[str, dict[str, Any]] = {
    "vitb16": {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072,
               "patch_size": 16, "image_size": 224, "num_channels": 3, "hidden_act": "gelu",
               "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, "initializer_range": 0.02,
               "layer_norm_eps": 1e-12, "qkv_bias": True},
    "vits16": {"hidden_size": 384, "num_hidden_layers": 12, "num_attention_heads": 6, "intermediate_size": 1536,
               "patch_size": 16, "image_size": 224, "num_channels": 3, "hidden_act": "gelu",
               "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, "initializer_range": 0.02,
               "layer_norm_eps": 1e-12, "qkv_bias": True},
}
TINY_SIZES = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
RECIPES = ("resize224", "resize256-crop224")
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
TINY_SEED = 0


class DinoV1Encoder:
    """Batched DINO CLS features of images (float (B, 3, H, W) in [0, 1]) -> (B, D)."""

    def __init__(self, model: Any, *, recipe: str, device: str = "cpu", name: str = "") -> None:
        if recipe not in RECIPES:
            raise ValueError(f"unknown DINO input recipe {recipe!r}; expected one of {', '.join(RECIPES)}")
        self.model, self.recipe, self.device, self.name = model, recipe, device, name

    @property
    def signature(self) -> str:
        return f"{self.name}|{self.recipe}"

    def prepare(self, images: Any) -> Any:
        """The recipe's resize / crop and ImageNet normalisation (float (B, 3, H, W) in [0, 1] in)."""
        import torch
        import torch.nn.functional as F

        if self.recipe == "resize224":
            x = F.interpolate(images.to(self.device), size=(224, 224), mode="bicubic", antialias=True,
                              align_corners=False)
        else:  # PIL on the 8-bit image, per image (as the script): its numbers, not a float resize's
            from benchmark.models.reference_input import resize_crop

            x = torch.stack([resize_crop(im, 256, 224) for im in images]).to(self.device)
        mean = torch.tensor(IMAGENET_MEAN, device=x.device).view(1, 3, 1, 1)
        std = torch.tensor(IMAGENET_STD, device=x.device).view(1, 3, 1, 1)
        return ((x.clamp(0, 1) - mean) / std).to(self.model.dtype)

    def embed_images(self, images: Any) -> Any:
        import torch

        with torch.inference_mode():
            out = self.model(pixel_values=self.prepare(images))
        return out.last_hidden_state[:, 0].float()


def config_for(kind: str, source: str) -> dict[str, Any]:
    """The ViTConfig kwargs `source` builds for `kind` (vitb16 / vits16): the hub's, or its tiny-width copy."""
    base = BASE_CONFIGS[kind]
    return {**base, **TINY_SIZES} if source == "tiny" else dict(base)


def random_vit_builder(config: dict[str, Any]):
    """A `tiny_model_dir` builder: saves a `ViTModel` of `config` with weights drawn from TINY_SEED (the global RNG
    left untouched)."""
    def build(path: Path) -> None:
        import torch
        from transformers import ViTConfig, ViTModel

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(TINY_SEED)
            ViTModel(ViTConfig(**config), add_pooling_layer=False).save_pretrained(path)

    return build


class UnpinnedRevisionError(ValueError):
    """Pretrained weights were asked for without a revision and editmeter pins none for that model."""


def pinned_revision(model_id: str, revision: str | None) -> str:
    """The revision to load `model_id` at: `revision` when given, else the pinned commit; refused when neither
    exists (loading the hub's moving `main` would make scores depend on when they were computed)."""
    if revision:
        return revision
    pinned = PINNED_REVISIONS.get(model_id)
    if pinned is None:
        raise UnpinnedRevisionError(
            f"no revision for the pretrained {model_id!r}: editmeter pins no commit of it (none could be verified "
            f"offline). Pick the commit to use from https://huggingface.co/{model_id}/commits/main and pass it, e.g. "
            "metrics.conventional.dino_mb.revision=<40-hex commit>, or drop the component with "
            "metrics.conventional.dino_mb=null")
    return pinned


@functools.lru_cache(maxsize=4)
def load_dino_v1(weights: str = "pretrained", model_id: str = "facebook/dino-vitb16", revision: str | None = None,
                 recipe: str = "resize224", device: str = "cpu") -> DinoV1Encoder:
    """DINO ViT once per process (per arguments), always through `ViTModel.from_pretrained`: the hub id at
    `revision` or its pinned commit (pretrained; `pinned_revision`), or a cached folder of random weights (tiny:
    small widths; random: the real shape; no revision needed)."""
    from transformers import ViTModel

    if model_id not in DINO_V1_MODELS:
        raise ValueError(f"unknown DINO model {model_id!r}; expected one of {', '.join(DINO_V1_MODELS)}")
    kind = DINO_V1_MODELS[model_id]
    source = check_source(weights)
    if source == "pretrained":
        revision = pinned_revision(model_id, revision)
        location, kwargs = model_id, {"revision": revision}
    else:
        config = config_for(kind, source)
        location, kwargs = str(tiny_model_dir(f"dino-{kind}-{source}", config, random_vit_builder(config))), {}
    try:
        model = ViTModel.from_pretrained(location, add_pooling_layer=False, **kwargs)
    except OSError as err:
        if source != "pretrained":
            raise
        raise WeightsUnavailableError(f"DINO {kind}", f"{model_id}@{revision}", err) from err
    name = f"{model_id}@{revision}" if source == "pretrained" else f"dino-{kind}-{source}"
    return DinoV1Encoder(model.to(device).eval(), recipe=recipe, device=device, name=name)
