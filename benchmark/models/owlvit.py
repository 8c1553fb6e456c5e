"""OWL-ViT (`google/owlvit-base-patch32`) open-vocabulary detection through transformers, for EditVal's rules.

One code path for every weight source: `OwlViTForObjectDetection.from_pretrained` + `OwlViTProcessor.from_pretrained`
on the hub id at a pinned revision (pretrained), or on a cached folder holding a random-weight model of the same
class and a processor with the real settings (tiny: small widths and a 96 px input; random: the real shape). The
tokenizer of the stand-ins is CLIP's real BPE vocabulary (read from open_clip's wheel) with OWL-ViT's settings:
16 positions, padded with "!".

Per image and per name the detector keeps the **highest-scoring** box over all of OWL-ViT's patch boxes, scoring
each name on its own (sigmoid of that name's logit), so a name's result never depends on which other names were
asked in the same call or batch. Boxes are corners (x0, y0, x1, y1) in pixels of the image it was given, y down.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmark.io.model_cache import WeightsUnavailableError, check_source, tiny_model_dir

OWLVIT_ID = "google/owlvit-base-patch32"
# Commit of google/owlvit-base-patch32 on the hub. Not verifiable offline here: it is the sha that independent
# public projects pin for this model (found with the project's code search); `editmeter weights` fetches exactly it.
OWLVIT_REVISION = "cbc355fb364588351c5d51c7f74465e8e7ec6f72"
# The pinned config.json: transformers' OwlViTConfig defaults are this checkpoint's (`random` builds it).
BASE_CONFIG: dict[str, Any] = {
    "text_config": {"vocab_size": 49408, "hidden_size": 512, "intermediate_size": 2048, "num_hidden_layers": 12,
                    "num_attention_heads": 8, "max_position_embeddings": 16, "hidden_act": "quick_gelu",
                    "layer_norm_eps": 1e-5, "attention_dropout": 0.0, "pad_token_id": 0, "bos_token_id": 49406,
                    "eos_token_id": 49407},
    "vision_config": {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12, "num_attention_heads": 12,
                      "num_channels": 3, "image_size": 768, "patch_size": 32, "hidden_act": "quick_gelu",
                      "layer_norm_eps": 1e-5, "attention_dropout": 0.0},
    "projection_dim": 512, "logit_scale_init_value": 2.6592,
}
TINY_TEXT = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2}
TINY_VISION = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
               "image_size": 96}
TINY_PROJECTION = 32
# The pinned preprocessor_config.json / tokenizer settings (the stand-ins' processors are built from these).
BASE_PROCESSOR: dict[str, Any] = {"do_resize": True, "size": {"height": 768, "width": 768}, "resample": 3,
                                  "do_center_crop": False, "crop_size": {"height": 768, "width": 768},
                                  "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
                                  "image_mean": [0.48145466, 0.4578275, 0.40821073],
                                  "image_std": [0.26862954, 0.26130258, 0.27577711], "do_convert_rgb": True}
TOKENIZER_MAX_LENGTH = 16
TOKENIZER_PAD = "!"
TINY_SEED = 0
Detection = tuple[float, "tuple[float, float, float, float] | None"]


def config_for(source: str) -> dict[str, Any]:
    """OwlViTConfig kwargs for `source`: the pinned checkpoint's, or its copy with tiny widths."""
    cfg = {k: (dict(v) if isinstance(v, dict) else v) for k, v in BASE_CONFIG.items()}
    if source == "tiny":
        cfg["text_config"].update(TINY_TEXT)
        cfg["vision_config"].update(TINY_VISION)
        cfg["projection_dim"] = TINY_PROJECTION
    return cfg


def processor_settings(source: str) -> dict[str, Any]:
    """The image processor kwargs for `source` (tiny: the input side follows the tiny vision tower)."""
    settings = dict(BASE_PROCESSOR)
    if source == "tiny":
        side = TINY_VISION["image_size"]
        settings.update(size={"height": side, "width": side}, crop_size={"height": side, "width": side})
    return settings


def _tokenizer() -> Any:
    """OWL-ViT's tokenizer: CLIP's BPE (from open_clip's bundled vocabulary), 16 positions, "!" as padding."""
    from transformers import CLIPTokenizer

    from benchmark.models.tokenizer import BOS, EOS, clip_vocab_and_merges

    vocab, merges = clip_vocab_and_merges()
    return CLIPTokenizer(vocab=vocab, merges=[tuple(m.split()) for m in merges], model_max_length=TOKENIZER_MAX_LENGTH,
                         bos_token=BOS, eos_token=EOS, unk_token=EOS, pad_token=TOKENIZER_PAD)


def _builder(source: str):
    def build(path: Path) -> None:
        import torch
        from transformers import OwlViTConfig, OwlViTForObjectDetection, OwlViTImageProcessor, OwlViTProcessor

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(TINY_SEED)
            OwlViTForObjectDetection(OwlViTConfig(**config_for(source))).save_pretrained(path)
        OwlViTProcessor(image_processor=OwlViTImageProcessor(**processor_settings(source)),
                        tokenizer=_tokenizer()).save_pretrained(path)

    return build


def best_per_query(logits: Any, pred_boxes: Any, size: tuple[int, int]) -> list[Detection]:
    """(score, corner box in pixels) of the best box for each query of one image.

    logits: (N, K) per-box logits of K text queries; pred_boxes: (N, 4) relative (cx, cy, w, h); size: the image's
    (height, width). Scores are sigmoids of each query's own logit; the argmax is the first of equal maxima."""
    import torch

    scores = torch.sigmoid(logits.float())
    best = scores.argmax(dim=0)
    h, w = size
    out: list[Detection] = []
    for k in range(scores.shape[1]):
        cx, cy, bw, bh = (float(v) for v in pred_boxes[best[k]])
        box = ((cx - bw / 2) * w, (cy - bh / 2) * h, (cx + bw / 2) * w, (cy + bh / 2) * h)
        out.append((float(scores[best[k], k]), box))
    return out


class OwlViTDetector:
    """Batched open-vocabulary detection: `detect(images, names)` -> per image, name -> (best score, best box)."""

    def __init__(self, model: Any, processor: Any, *, device: str = "cpu", name: str = "", batch_size: int = 8) -> None:
        self.model, self.processor, self.device, self.name, self.batch_size = model, processor, device, name, batch_size

    @property
    def signature(self) -> str:
        return self.name

    def detect(self, images: Sequence[Any], names: Sequence[Sequence[str]]) -> list[dict[str, Detection]]:
        """images: PIL RGB images (any sizes); names[i]: the names to look for in images[i] (natural language,
        asked as "a photo of a <name>"). A name's score is the best box's; the caller applies the threshold."""
        import torch

        from benchmark.io.editval_rules import text_query

        if len(images) != len(names):
            raise ValueError(f"{len(images)} images but {len(names)} name lists")
        out: list[dict[str, Detection]] = [{} for _ in images]
        todo = [i for i in range(len(images)) if names[i]]
        for s in range(0, len(todo), self.batch_size):
            idx = todo[s : s + self.batch_size]
            asked = [list(dict.fromkeys(names[i])) for i in idx]
            inputs = self.processor(text=[[text_query(n) for n in a] for a in asked], images=[images[i] for i in idx],
                                    return_tensors="pt", truncation=True)
            inputs = {k: v.to(self.device) for k, v in inputs.items()}
            with torch.inference_mode():
                res = self.model(**inputs)
            for j, (i, a) in enumerate(zip(idx, asked, strict=True)):
                size = (images[i].height, images[i].width)
                dets = best_per_query(res.logits[j, :, : len(a)].cpu(), res.pred_boxes[j].cpu(), size)
                out[i] = dict(zip(a, dets, strict=True))
        return out


@functools.lru_cache(maxsize=4)
def load_owlvit(weights: str = "pretrained", model_id: str = OWLVIT_ID, revision: str = OWLVIT_REVISION,
                device: str = "cpu", batch_size: int = 8) -> OwlViTDetector:
    """OWL-ViT once per process (per arguments), always through `from_pretrained`: the hub id at `revision`
    (pretrained), or a cached folder of random weights with the real processor settings (tiny / random)."""
    from transformers import OwlViTForObjectDetection, OwlViTProcessor

    source = check_source(weights)
    if source == "pretrained":
        location, kwargs = model_id, {"revision": revision}
    else:
        key = {"config": config_for(source), "processor": processor_settings(source),
               "tokenizer": [TOKENIZER_MAX_LENGTH, TOKENIZER_PAD]}
        location, kwargs = str(tiny_model_dir(f"owlvit-{source}", key, _builder(source))), {}
    try:
        model = OwlViTForObjectDetection.from_pretrained(location, **kwargs)
        processor = OwlViTProcessor.from_pretrained(location, **kwargs)
    except OSError as err:
        if source != "pretrained":
            raise
        raise WeightsUnavailableError("OWL-ViT", f"{model_id}@{revision}", err) from err
    name = f"{model_id}@{revision}" if source == "pretrained" else f"owlvit-{source}"
    return OwlViTDetector(model.to(device).eval(), processor, device=device, name=name, batch_size=batch_size)
