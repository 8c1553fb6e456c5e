"""Open-vocabulary detection and box-prompted segmentation through transformers, for BPM (docs/bpm.md, "Locating").

- Detectors (`load_detector`): Grounding DINO (`GroundingDinoForObjectDetection`, BPM's choice; default
  IDEA-Research/grounding-dino-tiny) or OWLv2 (`Owlv2ForObjectDetection`, google/owlv2-base-patch16-ensemble).
  `detect(images, names)` returns the highest-scoring box of each image's name above the thresholds, or None.
- Mask model (`load_sam`): SAM (`SamModel`, facebook/sam-vit-base) prompted with the detected box.
- `build_locator(detector=, segmenter=)`: the pair BPM calls (segmenter None: the filled box is the mask).

Every model loads through `from_pretrained`: the hub id at a pinned revision (pretrained), or a cached folder of
random weights (tiny: the same classes with small sizes and small processor resolutions; random: transformers'
default configs, which are those of the pinned checkpoints' architectures). The tiny tokenizers are real classes
with small vocabularies (Grounding DINO: a character-level WordPiece `BertTokenizer`; OWLv2: CLIP's real BPE
vocabulary from open_clip), so no download is ever needed for tests.

The revisions were taken from public projects that pin them (no network here to confirm them against the hub);
`editmeter weights` downloads exactly these.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.io.model_cache import WeightsUnavailableError, check_source, tiny_model_dir

Box = tuple[float, float, float, float]
GDINO_ID, GDINO_REVISION = "IDEA-Research/grounding-dino-tiny", "a2bb814dd30d776dcf7e30523b00659f4f141c71"
OWLV2_ID, OWLV2_REVISION = "google/owlv2-base-patch16-ensemble", "cfd3195ba4ea9592eec887ded089f4c08eff231d"
SAM_ID, SAM_REVISION = "facebook/sam-vit-base", "70c1a07f894ebb5b307fd9eaaee97b9dfc16068f"
DETECTORS = {"grounding-dino": (GDINO_ID, GDINO_REVISION), "owlv2": (OWLV2_ID, OWLV2_REVISION)}
TINY_SEED = 0

# Tiny configs: sizes only (widths, depths, query count, resolutions); every switch is the default's.
TINY_GDINO = {"d_model": 32, "encoder_layers": 1, "decoder_layers": 2, "encoder_attention_heads": 2,
              "decoder_attention_heads": 2, "encoder_ffn_dim": 32, "decoder_ffn_dim": 32, "num_queries": 10,
              "encoder_n_points": 2, "decoder_n_points": 2,
              "backbone_config": {"model_type": "swin", "embed_dim": 16, "depths": [1, 1, 1, 1],
                                  "num_heads": [1, 1, 1, 1], "window_size": 4, "image_size": 128,
                                  "out_indices": [2, 3, 4], "out_features": ["stage2", "stage3", "stage4"]},
              "text_config": {"model_type": "bert", "hidden_size": 32, "num_hidden_layers": 1,
                              "num_attention_heads": 2, "intermediate_size": 37}}
TINY_GDINO_INPUT = 128
TINY_OWLV2 = {"text_config": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                              "num_attention_heads": 2},
              "vision_config": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                                "num_attention_heads": 2, "image_size": 64, "patch_size": 16},
              "projection_dim": 32}
TINY_SAM = {"vision_config": {"hidden_size": 32, "output_channels": 16, "num_hidden_layers": 2,
                              "num_attention_heads": 2, "image_size": 64, "patch_size": 16, "mlp_dim": 64,
                              "window_size": 2, "global_attn_indexes": [1], "num_pos_feats": 8},
            "prompt_encoder_config": {"hidden_size": 16, "image_size": 64, "patch_size": 16, "mask_input_channels": 4},
            "mask_decoder_config": {"hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
                                    "mlp_dim": 32, "iou_head_hidden_dim": 16}}
_WORDPIECE = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "'", "-",
              *"abcdefghijklmnopqrstuvwxyz0123456789", *(f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz0123456789")]


def _seeded(build: Callable[[], Any]) -> Any:
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(TINY_SEED)
        return build()


def _gdino_config(source: str) -> Any:
    from transformers import GroundingDinoConfig

    if source == "random":
        return GroundingDinoConfig()
    return GroundingDinoConfig(**{**TINY_GDINO, "text_config": {**TINY_GDINO["text_config"],
                                                               "vocab_size": len(_WORDPIECE)}})


def _build_gdino(source: str):
    def build(path: Path) -> None:
        from transformers import (
            BertTokenizer,
            GroundingDinoForObjectDetection,
            GroundingDinoImageProcessor,
            GroundingDinoProcessor,
        )

        _seeded(lambda: GroundingDinoForObjectDetection(_gdino_config(source))).save_pretrained(path)
        if source == "tiny":
            tok = BertTokenizer(vocab={t: i for i, t in enumerate(_WORDPIECE)}, do_lower_case=True)
            size = {"shortest_edge": TINY_GDINO_INPUT, "longest_edge": TINY_GDINO_INPUT}
        else:  # bert-base-uncased's vocabulary is not available offline: random keeps the tiny one
            tok = BertTokenizer(vocab={t: i for i, t in enumerate(_WORDPIECE)}, do_lower_case=True)
            size = {"shortest_edge": 800, "longest_edge": 1333}
        GroundingDinoProcessor(GroundingDinoImageProcessor(size=size), tok).save_pretrained(path)

    return build


def _build_owlv2(source: str):
    def build(path: Path) -> None:
        from transformers import Owlv2Config, Owlv2ForObjectDetection, Owlv2ImageProcessor, Owlv2Processor

        from benchmark.models.tokenizer import build_clip_tokenizer

        cfg = Owlv2Config() if source == "random" else Owlv2Config(**TINY_OWLV2)
        _seeded(lambda: Owlv2ForObjectDetection(cfg)).save_pretrained(path)
        tok = build_clip_tokenizer()
        tok.model_max_length = cfg.text_config.max_position_embeddings
        side = cfg.vision_config.image_size
        Owlv2Processor(Owlv2ImageProcessor(size={"height": side, "width": side}), tok).save_pretrained(path)

    return build


def _build_sam(source: str):
    def build(path: Path) -> None:
        from transformers import SamConfig, SamImageProcessor, SamModel, SamProcessor

        cfg = SamConfig() if source == "random" else SamConfig(**TINY_SAM)
        _seeded(lambda: SamModel(cfg)).save_pretrained(path)
        side = cfg.vision_config.image_size
        SamProcessor(SamImageProcessor(size={"longest_edge": side}, pad_size={"height": side, "width": side})
                     ).save_pretrained(path)

    return build


def _load(kind: str, model_cls: str, weights: str, model_id: str, revision: str, builder: Callable[[str], Any],
          default_id: str, config: dict[str, Any]) -> tuple[Any, Any, str]:
    """(model, processor, name) through `<model_cls>.from_pretrained` / `AutoProcessor.from_pretrained`."""
    import transformers
    from transformers import AutoProcessor

    source = check_source(weights)
    if source == "pretrained":
        location, kwargs, name = model_id, {"revision": revision}, f"{model_id}@{revision}"
    else:
        if model_id != default_id:
            raise ValueError(f"weights={source} builds a random {default_id}-shaped model; {model_id!r} has none")
        location, kwargs, name = str(tiny_model_dir(f"{kind}-{source}", config, builder(source))), {}, f"{kind}-{source}"
    try:
        processor = AutoProcessor.from_pretrained(location, **kwargs)
        model = getattr(transformers, model_cls).from_pretrained(location, **kwargs)
    except OSError as err:
        if source != "pretrained":
            raise
        raise WeightsUnavailableError(kind, f"{model_id}@{revision}", err) from err
    return model.eval(), processor, name


class OpenVocabDetector:
    """Best box per (image, object name) from Grounding DINO or OWLv2; uint8 (H, W, 3) images in."""

    def __init__(self, model: Any, processor: Any, *, kind: str, name: str, box_threshold: float,
                 text_threshold: float, batch_size: int = 4, device: str = "cpu") -> None:
        self.model, self.processor, self.kind, self.device = model.to(device), processor, kind, device
        self.box_threshold, self.text_threshold, self.batch_size = box_threshold, text_threshold, batch_size
        self.signature = f"{kind}:{name}|box{box_threshold:g}|text{text_threshold:g}"

    def detect(self, images: Sequence[np.ndarray], names: Sequence[str]) -> list[tuple[Box, float] | None]:
        out: list[tuple[Box, float] | None] = []
        for i in range(0, len(images), self.batch_size):
            out += self._batch(list(images[i : i + self.batch_size]), list(names[i : i + self.batch_size]))
        return out

    def _batch(self, images: list[np.ndarray], names: list[str]) -> list[tuple[Box, float] | None]:
        import torch
        from PIL import Image

        pil = [Image.fromarray(np.asarray(a, dtype=np.uint8)) for a in images]
        sizes = [(a.shape[0], a.shape[1]) for a in images]
        if self.kind == "grounding-dino":
            # one phrase per image, lower case and ending with "." (the model's prompt format)
            inputs = self.processor(images=pil, text=[f"{n.lower().strip()}." for n in names], return_tensors="pt",
                                    padding=True)
            with torch.inference_mode():
                outputs = self.model(**{k: v.to(self.device) for k, v in inputs.items()})
            results = self.processor.post_process_grounded_object_detection(
                outputs, inputs["input_ids"], threshold=self.box_threshold, text_threshold=self.text_threshold,
                target_sizes=sizes)
        else:
            inputs = self.processor(text=[[f"a photo of a {n}"] for n in names], images=pil, return_tensors="pt",
                                    padding="max_length", truncation=True)
            with torch.inference_mode():
                outputs = self.model(**{k: v.to(self.device) for k, v in inputs.items()})
            # OWLv2 pads every image to a square before resizing: boxes are relative to the padded square
            results = self.processor.post_process_grounded_object_detection(
                outputs, threshold=self.box_threshold, target_sizes=[(max(s), max(s)) for s in sizes])
        out: list[tuple[Box, float] | None] = []
        for r, (h, w) in zip(results, sizes, strict=True):
            best: tuple[Box, float] | None = None
            for box_t, score_t in zip(r["boxes"], r["scores"], strict=True):
                x0, y0, x1, y1 = (float(v) for v in box_t)
                box = (max(0.0, x0), max(0.0, y0), min(float(w), x1), min(float(h), y1))  # clipped to the image
                if box[2] > box[0] and box[3] > box[1] and (best is None or float(score_t) > best[1]):
                    best = (box, float(score_t))
            out.append(best)
        return out


class BoxSegmenter:
    """SAM prompted with one box per image -> bool (H, W) mask (the single-mask output)."""

    def __init__(self, model: Any, processor: Any, *, name: str, device: str = "cpu") -> None:
        self.model, self.processor, self.device = model.to(device), processor, device
        self.signature = f"sam:{name}"

    def segment(self, images: Sequence[np.ndarray], boxes: Sequence[Box]) -> list[np.ndarray]:
        import torch
        from PIL import Image

        out = []
        for img, box in zip(images, boxes, strict=True):
            inputs = self.processor(images=Image.fromarray(np.asarray(img, dtype=np.uint8)),
                                    input_boxes=[[list(map(float, box))]], return_tensors="pt")
            with torch.inference_mode():
                pred = self.model(pixel_values=inputs["pixel_values"].to(self.device),
                                  input_boxes=inputs["input_boxes"].to(self.device), multimask_output=False)
            masks = self.processor.image_processor.post_process_masks(
                pred.pred_masks.cpu(), inputs["original_sizes"], inputs["reshaped_input_sizes"])
            out.append(masks[0][0, 0].numpy().astype(bool))
        return out


class GroundedLocator:
    """BPM's locator: a detector's best box, then the mask model's mask in it (or the filled box)."""

    def __init__(self, detector: Any, segmenter: Any | None) -> None:
        self.detector, self.segmenter = detector, segmenter
        self.signature = f"{detector.signature}+{segmenter.signature if segmenter is not None else 'box-mask'}"

    def detect(self, images: Sequence[np.ndarray], names: Sequence[str]) -> list[tuple[Box, float] | None]:
        return self.detector.detect(images, names)

    def segment(self, images: Sequence[np.ndarray], boxes: Sequence[Box]) -> list[np.ndarray]:
        if self.segmenter is None:
            from benchmark.models.locate import box_mask

            return [box_mask(b, np.asarray(i).shape[:2]) for i, b in zip(images, boxes, strict=True)]
        return self.segmenter.segment(images, boxes)


@functools.lru_cache(maxsize=4)
def load_detector(kind: str = "grounding-dino", weights: str = "pretrained", model_id: str | None = None,
                  revision: str | None = None, box_threshold: float = 0.35, text_threshold: float = 0.25,
                  batch_size: int = 4, device: str = "cpu") -> OpenVocabDetector:
    """Grounding DINO (`kind: grounding-dino`) or OWLv2 (`kind: owlv2`); see the module docstring."""
    if kind not in DETECTORS:
        raise ValueError(f"unknown detector {kind!r}; expected one of {', '.join(DETECTORS)}")
    default_id, default_rev = DETECTORS[kind]
    model_id, revision = model_id or default_id, revision or default_rev
    if kind == "grounding-dino":
        model, proc, name = _load(kind, "GroundingDinoForObjectDetection", weights, model_id, revision, _build_gdino,
                                  default_id, {"config": TINY_GDINO, "input": TINY_GDINO_INPUT})
    else:
        model, proc, name = _load(kind, "Owlv2ForObjectDetection", weights, model_id, revision, _build_owlv2,
                                  default_id, TINY_OWLV2)
    return OpenVocabDetector(model, proc, kind=kind, name=name, box_threshold=box_threshold,
                             text_threshold=text_threshold, batch_size=batch_size, device=device)


@functools.lru_cache(maxsize=2)
def load_sam(weights: str = "pretrained", model_id: str = SAM_ID, revision: str = SAM_REVISION,
             device: str = "cpu") -> BoxSegmenter:
    """SAM through `SamModel.from_pretrained` (pretrained: facebook/sam-vit-base at the pinned revision)."""
    model, proc, name = _load("sam", "SamModel", weights, model_id, revision, _build_sam, SAM_ID, TINY_SAM)
    return BoxSegmenter(model, proc, name=name, device=device)


def build_locator(detector: Callable[..., Any], segmenter: Callable[..., Any] | None = None,
                  device: str = "cpu") -> GroundedLocator:
    """The config's `locator` factory: builds the detector and (optional) mask model factories on `device`."""
    return GroundedLocator(detector(device=device), segmenter(device=device) if segmenter is not None else None)
