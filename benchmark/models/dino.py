"""DINOv2 image features (transformers): mean over all tokens (CLS included) of `last_hidden_state`, as HATIE."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from benchmark.io.model_cache import WeightsUnavailableError, check_source, tiny_model_dir

DINO_ID = "facebook/dinov2-base"
DINO_REVISION = "f9e44c814b77203eaa57a6bdbbd535f21ede1415"
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
DINO_INPUT = 224  # the processor's crop size; HATIE resizes straight to 224 x 224
# Sizes only differ from DINOv2-base (`image_size` 518 too: the real model interpolates its 37 x 37 position
# embeddings to the 16 x 16 grid of a 224 px input, and so must the stand-in).
TINY_DINO_CONFIG = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "patch_size": 14,
                    "image_size": 518}
# facebook/dinov2-base's config.json at DINO_REVISION (what `random` builds; the model-pair test compares against it)
BASE_DINO_CONFIG = {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "mlp_ratio": 4,
                    "patch_size": 14, "image_size": 518, "num_channels": 3, "hidden_act": "gelu",
                    "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, "drop_path_rate": 0.0,
                    "initializer_range": 0.02, "layer_norm_eps": 1e-06, "layerscale_value": 1.0, "qkv_bias": True,
                    "use_swiglu_ffn": False}
TINY_SEED = 0


class DinoEncoder:
    """Batched DINOv2 features of images (float (B, 3, H, W) in [0, 1])."""

    def __init__(self, model: Any, *, device: str = "cpu", name: str = "") -> None:
        self.model, self.device, self.name = model, device, name

    def embed_images(self, images: Any) -> Any:
        import torch
        import torch.nn.functional as F

        x = F.interpolate(images.to(self.device), size=(DINO_INPUT, DINO_INPUT), mode="bilinear", antialias=True,
                          align_corners=False)
        mean = torch.tensor(IMAGENET_MEAN, device=x.device).view(1, 3, 1, 1)
        std = torch.tensor(IMAGENET_STD, device=x.device).view(1, 3, 1, 1)
        with torch.inference_mode():
            out = self.model(pixel_values=((x - mean) / std).to(self.model.dtype))
        return out.last_hidden_state.float().mean(dim=1)


def _builder(config: dict[str, Any]):
    def build(path: Path) -> None:
        import torch
        from transformers import Dinov2Config, Dinov2Model

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(TINY_SEED)
            Dinov2Model(Dinov2Config(**config)).save_pretrained(path)

    return build


@functools.lru_cache(maxsize=4)
def load_dino(weights: str = "pretrained", model_id: str = DINO_ID, revision: str = DINO_REVISION,
              device: str = "cpu") -> DinoEncoder:
    """DINOv2 once per process, always through `Dinov2Model.from_pretrained`: the hub id (pretrained), or a
    cached folder of random weights (tiny: small widths; random: DINOv2-base's shape)."""
    from transformers import Dinov2Model

    source = check_source(weights)
    if source == "pretrained":
        location, kwargs = model_id, {"revision": revision}
    else:
        config = TINY_DINO_CONFIG if source == "tiny" else BASE_DINO_CONFIG
        location, kwargs = str(tiny_model_dir(f"dinov2-{source}", config, _builder(config))), {}
    try:
        model = Dinov2Model.from_pretrained(location, **kwargs)
    except OSError as err:
        if source != "pretrained":
            raise
        raise WeightsUnavailableError("DINOv2", f"{model_id}@{revision}", err) from err
    return DinoEncoder(model.to(device).eval(), device=device, name=f"{model_id}@{revision}" if source == "pretrained" else f"dinov2-{source}")
