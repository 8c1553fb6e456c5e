"""CLIP image/text encoder (open_clip), with HATIE's preprocessing: resize the short side to 224 (bicubic) and
normalise; no centre crop (HATIE's inputs are square)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from benchmark.models.common import WeightsUnavailableError, check_source, tiny_model_dir

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
# Same class (open_clip CLIP), small widths: a random-weight stand-in for tests (tokeniser and vocab are real).
TINY_CLIP_CONFIG = {
    "embed_dim": 32,
    "vision_cfg": {"image_size": 224, "layers": 2, "width": 64, "patch_size": 32},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 2},
}
TINY_SEED = 0


class ClipEncoder:
    """Batched, L2-normalised CLIP features of images (float (B, 3, H, W) in [0, 1]) and texts."""

    def __init__(self, model: Any, tokenizer: Any, *, image_size: int = 224, device: str = "cpu",
                 name: str = "") -> None:
        self.model, self.tokenizer, self.image_size, self.device, self.name = model, tokenizer, image_size, device, name

    def preprocess(self, images: Any) -> Any:
        import torch
        import torch.nn.functional as F

        h, w = images.shape[-2:]
        scale = self.image_size / min(h, w)
        size = (max(self.image_size, round(h * scale)), max(self.image_size, round(w * scale)))
        x = F.interpolate(images, size=size, mode="bicubic", antialias=True, align_corners=False)
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


def _build_tiny(path: Path) -> None:
    import open_clip
    import torch

    cfg_file = path / "editmeter-tiny-clip.json"
    cfg_file.write_text(json.dumps(TINY_CLIP_CONFIG))
    open_clip.add_model_config(cfg_file)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(TINY_SEED)
        model = open_clip.create_model("editmeter-tiny-clip", pretrained=None)
    torch.save(model.state_dict(), path / "open_clip_model.pt")


@functools.lru_cache(maxsize=4)
def load_clip(weights: str = "pretrained", arch: str = "ViT-B-32", tag: str = "openai", device: str = "cpu") -> ClipEncoder:
    """CLIP once per process. pretrained: `arch` with the `tag` weights; tiny: a small random CLIP (same class);
    random: `arch` with random weights (speed benchmarks). All load through `open_clip.create_model`."""
    import open_clip
    import torch

    source = check_source(weights)
    if source == "tiny":
        folder = tiny_model_dir("clip", TINY_CLIP_CONFIG, _build_tiny)
        open_clip.add_model_config(folder / "editmeter-tiny-clip.json")
        arch, pretrained = "editmeter-tiny-clip", str(folder / "open_clip_model.pt")
    else:
        pretrained = tag if source == "pretrained" else None
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(TINY_SEED)  # `random` weights are reproducible too
            model = open_clip.create_model(arch, pretrained=pretrained, device=device)
    except Exception as err:  # hub/network errors have many types; all mean the same to the user
        if source != "pretrained":
            raise
        raise WeightsUnavailableError("CLIP", f"open_clip {arch} / {tag}", err) from err
    model.eval()
    tokenizer = open_clip.get_tokenizer(arch)
    return ClipEncoder(model, tokenizer, device=device, name=f"{arch}/{pretrained if source == 'pretrained' else source}")


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
