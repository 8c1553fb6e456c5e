"""VQAScore on a transformers-native VQA model: P(answer token | image, question) from the first generated token.

HATIE's release used CLIP-FlanT5-XXL through `t2v-metrics`, whose pins (torch 2.5.1, transformers 4.49,
numpy 1.26) cannot live in this environment (docs/hatie.md, deviations). editmeter's default is BLIP VQA (model id and
revision are configuration); the question template is VQAScore's.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from benchmark.io.model_cache import WeightsUnavailableError, check_source, tiny_model_dir

QUESTION = "Does this figure show '{text}'? Please answer yes or no."
VQA_ID = "Salesforce/blip-vqa-base"
VQA_REVISION = "787b3d35d57e49572baabd22884b3d5a05acf072"
TINY_WORDS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[DEC]", "yes", "no", "does", "this", "figure", "show",
              "please", "answer", "or", "a", "an", "the", "of", "on", "in", "'", "?", ".", ",")
TINY_BLIP = {"hidden": 32, "layers": 2, "heads": 2, "ffn": 64, "image": 64, "patch": 16}
TINY_SEED = 0


class VQAScorer:
    """Batched P(yes) for (image, text) pairs; images are float (3, H, W) in [0, 1]."""

    def __init__(self, model: Any, processor: Any, *, answer: str = "yes", device: str = "cpu", name: str = "") -> None:
        self.model, self.processor, self.device, self.name = model, processor, device, name
        ids = processor.tokenizer(answer, add_special_tokens=False).input_ids
        if not ids or processor.tokenizer.unk_token_id in ids[:1]:
            raise ValueError(f"the VQA tokenizer has no token for the answer {answer!r}")
        self.answer_id = ids[0]

    def score(self, images: list[Any], texts: list[str]) -> list[float]:
        """VQAScore: P(yes) to "Does this figure show '<text>'? ..." for each (image, text)."""
        return self.ask(images, [QUESTION.format(text=t) for t in texts])

    def ask(self, images: list[Any], questions: list[str]) -> list[float]:
        """P(answer) for free-form yes/no questions; images are float (3, H, W) tensors or PIL images."""
        import torch
        from PIL import Image

        pil = [im if isinstance(im, Image.Image) else
               Image.fromarray((im.clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0).cpu().numpy())
               for im in images]
        inputs = self.processor(images=pil, text=list(questions), return_tensors="pt", padding=True).to(self.device)
        with torch.inference_mode():
            out = self.model.generate(**inputs, max_new_tokens=1, do_sample=False, output_logits=True,
                                      return_dict_in_generate=True)
        return torch.softmax(out.logits[0].float(), dim=-1)[:, self.answer_id].tolist()


def _build_tiny(path: Path) -> None:
    import torch
    from transformers import (
        BertTokenizerFast,
        BlipConfig,
        BlipForQuestionAnswering,
        BlipImageProcessor,
        BlipProcessor,
    )

    tok = BertTokenizerFast(vocab={w: i for i, w in enumerate(TINY_WORDS)}, do_lower_case=True, model_max_length=64,
                            bos_token="[DEC]")
    c = TINY_BLIP
    proc = BlipProcessor(image_processor=BlipImageProcessor(size={"height": c["image"], "width": c["image"]}),
                         tokenizer=tok)
    cfg = BlipConfig(
        text_config={"vocab_size": len(TINY_WORDS), "hidden_size": c["hidden"], "num_hidden_layers": c["layers"],
                     "num_attention_heads": c["heads"], "intermediate_size": c["ffn"], "encoder_hidden_size": c["hidden"],
                     "bos_token_id": tok.bos_token_id, "pad_token_id": tok.pad_token_id, "sep_token_id": tok.sep_token_id,
                     "max_position_embeddings": 64},
        vision_config={"hidden_size": c["hidden"], "num_hidden_layers": c["layers"], "num_attention_heads": c["heads"],
                       "intermediate_size": c["ffn"], "image_size": c["image"], "patch_size": c["patch"]},
        projection_dim=c["hidden"])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(TINY_SEED)
        BlipForQuestionAnswering(cfg).save_pretrained(path)
    proc.save_pretrained(path)


@functools.lru_cache(maxsize=2)
def load_vqa(weights: str = "pretrained", model_id: str = VQA_ID, revision: str = VQA_REVISION,
             model_class: str = "BlipForQuestionAnswering", answer: str = "yes", device: str = "cpu") -> VQAScorer:
    """The VQA model once per process, through `<model_class>.from_pretrained` and `AutoProcessor` (tiny: a small
    random BLIP with a small real vocabulary, saved once and loaded through the same calls)."""
    import transformers

    source = check_source(weights)
    if source == "random":
        raise ValueError("load_vqa has no 'random' source; use tiny or pretrained")
    cls = getattr(transformers, model_class)
    if source == "tiny":
        location, kwargs = str(tiny_model_dir("vqa-blip", {**TINY_BLIP, "words": TINY_WORDS}, _build_tiny)), {}
    else:
        location, kwargs = model_id, {"revision": revision}
    try:
        model = cls.from_pretrained(location, **kwargs)
        processor = transformers.AutoProcessor.from_pretrained(location, **kwargs)
    except OSError as err:
        if source != "pretrained":
            raise
        raise WeightsUnavailableError("the VQA model", f"{model_id}@{revision}", err) from err
    name = f"{model_id}@{revision}" if source == "pretrained" else "blip-vqa-tiny"
    return VQAScorer(model.to(device).eval(), processor, answer=answer, device=device, name=name)


def occlusion_vqa(image: Any, question: str) -> float:
    """The GQA builder's optional occlusion filter (`--vqa-fn benchmark.models.vqa:occlusion_vqa`): P(yes).
    Weights: $EDITMETER_WEIGHTS (default pretrained)."""
    import os

    return load_vqa(os.environ.get("EDITMETER_WEIGHTS", "pretrained")).ask([image.convert("RGB")], [question])[0]
