"""CLIP image/text encoder (open_clip), with HATIE's preprocessing: resize the short side to 224 (bicubic) and
normalise; no centre crop (HATIE's inputs are square).

OpenAI's CLIP weights (what HATIE used, through OpenAI's `clip` package) were trained with QuickGELU. open_clip 3.x
builds plain `ViT-B-32` with GELU and only logs a warning when the OpenAI weights are loaded into it, so the config
names `ViT-B-32-quickgelu`, and `load_clip` forces QuickGELU whenever the `openai` weights are asked for. The tiny
model is derived from the pretrained architecture's own open_clip config with only the sizes replaced, so the two
cannot drift apart in activation, normalisation or patch size.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmark.io.model_cache import WeightsUnavailableError, check_source, tiny_model_dir

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
CLIP_ARCH = "ViT-B-32-quickgelu"  # HATIE's CLIP: ViT-B/32 with OpenAI's weights, which need QuickGELU
CLIP_TAG = "openai"
# Only sizes differ between the tiny stand-in and the pretrained architecture (tokeniser and vocab are real too).
TINY_CLIP_SIZES = {"embed_dim": 32, "vision_cfg": {"layers": 2, "width": 64},
                   "text_cfg": {"width": 32, "heads": 2, "layers": 2}}
# ResNet CLIP towers (RN101: the MD paper's encoder) have one depth per stage and heads = width * 32 / 64.
TINY_RESNET_VISION = {"layers": [1, 1, 1, 1], "width": 8}
TINY_SEED = 0


def tiny_clip_config(arch: str = CLIP_ARCH, tag: str = CLIP_TAG) -> dict[str, Any]:
    """open_clip's config of `arch` with `TINY_CLIP_SIZES` substituted: every other switch (activation, norms,
    patch size, pooling, image size, context length) is the pretrained model's own. OpenAI weights force QuickGELU,
    exactly as `load_clip` does for the pretrained model."""
    import copy

    import open_clip

    base = open_clip.get_model_config(arch)
    if base is None:
        raise ValueError(f"open_clip has no model config {arch!r}")
    cfg = copy.deepcopy(base)
    sizes = TINY_CLIP_SIZES
    if isinstance(cfg["vision_cfg"].get("layers"), list | tuple):  # ResNet towers (RN50, RN101): 4 stages
        sizes = {**sizes, "vision_cfg": TINY_RESNET_VISION}
    for key, value in sizes.items():
        if isinstance(value, dict):
            cfg[key] = {**cfg[key], **value}
        else:
            cfg[key] = value
    if tag == "openai":
        cfg["quick_gelu"] = True
    return cfg


class ClipEncoder:
    """Batched, L2-normalised CLIP features of images (float (B, 3, H, W) in [0, 1]) and texts."""

    def __init__(self, model: Any, tokenizer: Any, *, image_size: int = 224, device: str = "cpu",
                 name: str = "") -> None:
        self.model, self.tokenizer, self.image_size, self.device, self.name = model, tokenizer, image_size, device, name

    @property
    def signature(self) -> str:
        """What determines this encoder's features (model, weights, input size): the feature cache's key."""
        return f"clip|{self.name}|{self.image_size}"

    def preprocess(self, images: Any) -> Any:
        import torch
        import torch.nn.functional as F

        h, w = images.shape[-2:]
        scale = self.image_size / min(h, w)
        size = (max(self.image_size, round(h * scale)), max(self.image_size, round(w * scale)))
        # an input already at the size (the conventional suite's, made as OpenAI's preprocess makes it) is passed
        # on unchanged, as torchvision's Resize does
        x = images if (h, w) == size else F.interpolate(images, size=size, mode="bicubic", antialias=True,
                                                        align_corners=False)
        mean = torch.tensor(CLIP_MEAN, device=x.device).view(1, 3, 1, 1)
        std = torch.tensor(CLIP_STD, device=x.device).view(1, 3, 1, 1)
        return (x - mean) / std

    def embed_images(self, images: Any) -> Any:
        import torch

        with torch.inference_mode():
            feats = self.model.encode_image(self.preprocess(images.to(self.device)))
        return torch.nn.functional.normalize(feats.float(), dim=-1)

    def embed_texts(self, texts: list[str]) -> Any:
        import torch

        with torch.inference_mode():
            feats = self.model.encode_text(self.tokenizer(texts).to(self.device))
        return torch.nn.functional.normalize(feats.float(), dim=-1)


class _DropMessage(logging.Filter):
    """Drops the one log record whose message starts with `prefix`; lets everything else through."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefix)


@contextlib.contextmanager
def expected_random_init(model_name: str) -> Iterator[None]:
    """Silence open_clip's "No pretrained weights loaded for model '<model_name>'" while building a model that is
    random on purpose (tiny / random profiles): the user asked for it, so the warning only alarms. open_clip logs it
    on the root logger; other messages, and that message for any other model, still pass."""
    root = logging.getLogger()
    drop = _DropMessage(f"No pretrained weights loaded for model '{model_name}'")
    root.addFilter(drop)
    try:
        yield
    finally:
        root.removeFilter(drop)


def _builder(config: dict[str, Any]):
    def build(path: Path) -> None:
        import open_clip
        import torch

        cfg_file = path / "editmeter-tiny-clip.json"
        cfg_file.write_text(json.dumps(config))
        open_clip.add_model_config(cfg_file)
        with torch.random.fork_rng(devices=[]), expected_random_init("editmeter-tiny-clip"):
            torch.manual_seed(TINY_SEED)
            model = open_clip.create_model("editmeter-tiny-clip", pretrained=None)
        torch.save(model.state_dict(), path / "open_clip_model.pt")

    return build


@functools.lru_cache(maxsize=4)
def load_clip(weights: str = "pretrained", arch: str = CLIP_ARCH, tag: str = CLIP_TAG, device: str = "cpu") -> ClipEncoder:
    """CLIP once per process. pretrained: `arch` with the `tag` weights; tiny: a small random CLIP derived from
    `arch`'s config (`tiny_clip_config`); random: `arch` with random weights (speed benchmarks). All load through
    `open_clip.create_model`; the `openai` weights always get QuickGELU (see the module docstring)."""
    import open_clip
    import torch

    source = check_source(weights)
    quick_gelu = tag == "openai"
    if source == "tiny":
        config = tiny_clip_config(arch, tag)
        folder = tiny_model_dir("clip", config, _builder(config))
        open_clip.add_model_config(folder / "editmeter-tiny-clip.json")
        arch, pretrained = "editmeter-tiny-clip", str(folder / "open_clip_model.pt")
    else:
        pretrained = tag if source == "pretrained" else None
    try:
        quiet = expected_random_init(arch) if pretrained is None else contextlib.nullcontext()
        with torch.random.fork_rng(devices=[]), quiet:
            torch.manual_seed(TINY_SEED)  # `random` weights are reproducible too
            model = open_clip.create_model(arch, pretrained=pretrained, device=device, force_quick_gelu=quick_gelu)
    except Exception as err:  # hub/network errors have many types; all mean the same to the user
        if source != "pretrained":
            raise
        raise WeightsUnavailableError("CLIP", f"open_clip {arch} / {tag}", err) from err
    model.eval()
    tokenizer = open_clip.get_tokenizer(arch)
    # a tiny model's name carries its content-keyed folder: tiny stand-ins of different archs never share a name
    label = pretrained if source == "pretrained" else source if source == "random" else Path(pretrained).parent.name
    return ClipEncoder(model, tokenizer, device=device, name=f"{arch}/{label}")


def background_scores(image: Any, texts: list[str]) -> list[float]:
    """CLIP image-text scores (1 + cos) / 2 for the GQA builder's bg_chg ranking
    (`--scorer benchmark.models.clip:background_scores`). Weights: $EDITMETER_WEIGHTS (default pretrained)."""
    import os

    import numpy as np
    import torch

    clip = load_clip(os.environ.get("EDITMETER_WEIGHTS", "pretrained"))
    arr = np.asarray(image.convert("RGB") if hasattr(image, "convert") else image, dtype=np.uint8)
    img = torch.from_numpy(arr.copy()).permute(2, 0, 1).float().div(255).unsqueeze(0)
    return ((1 + clip.embed_images(img) @ clip.embed_texts(list(texts)).T) / 2)[0].tolist()
