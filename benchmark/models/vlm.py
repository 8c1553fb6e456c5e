"""A local vision-language model that reads 0..10 scores from its own token probabilities (the `judge` suite,
docs/judge.md): Qwen2.5-VL (`Qwen2_5_VLForConditionalGeneration` + its processor) by hub id at a pinned revision, or
a random model of the same classes, loaded through the same `from_pretrained` calls.

Weight sources:
  - pretrained: Qwen/Qwen2.5-VL-7B-Instruct (default) or Qwen/Qwen2.5-VL-3B-Instruct (the fast option), each at the
    commit public projects pin;
  - random: the real config of the chosen model with random weights (throughput and memory at real size);
  - tiny: the same classes with small widths (tests, CPU). Qwen's 151k-token vocabulary cannot be fetched offline,
    so random and tiny carry a real `Qwen2Tokenizer` (byte-level BPE, Qwen's pre-tokenisation) whose vocabulary is
    the 256 byte symbols plus Qwen's special tokens and no merges (as `benchmark.models.llm`), a
    `Qwen2VLImageProcessor` built from Qwen2.5-VL's preprocessor settings, and a chat template of Qwen's format.
    Everything is saved with `save_pretrained` and loaded back with `from_pretrained`.

Score readout (`ScoreReader`, no sampling, no `generate()`): the prompt ends where the assistant's answer starts,
and one forward pass over prompt + "1" gives two distributions: the first answer token (position after the prompt)
and the token after a "1" (teacher-forced). Qwen's tokenizers split numbers into single digits, so "10" is "1","0".
P(k) for k = 0, 2..9 is the first-token probability of digit k renormalised over the ten digits; P(1) and P(10)
split the first-token mass of "1" by the second position's probabilities of "<|im_end|>" (the answer ends: 1) and
"0" (10), renormalised over those two. The 11 probabilities sum to 1 by construction, so every reply is a valid
score: expected value sum(k P(k)) and argmax.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmark.io.model_cache import WeightsUnavailableError, check_source, tiny_model_dir

VLM_ID = "Qwen/Qwen2.5-VL-7B-Instruct"
FAST_VLM_ID = "Qwen/Qwen2.5-VL-3B-Instruct"
# The hub commit each model is loaded at: both are pinned by several public projects (model registries, evaluation
# scripts and HF-cache snapshot paths of Qwen2.5-VL users); never the moving `main`.
# GEdit-Bench's official local judge (Step1X-Edit's GEdit-Bench/viescore/mllm_tools/qwen25vl_eval.py), float16.
GEDIT_VLM_ID = "Qwen/Qwen2.5-VL-72B-Instruct-AWQ"
PINNED_REVISIONS: dict[str, str] = {VLM_ID: "cc594898137f460bfe9f0759e9844b3ce807cfb5",
                                    FAST_VLM_ID: "66285546d2b821cf421d4f5eb2576359d3770cd3",
                                    GEDIT_VLM_ID: "c8b87d4b81f34b6a147577a310d7e75f0698f6c2"}
# The hub's config.json of each (what `random` builds; tiny shrinks the widths). Both share the vision tower.
_VISION = {"depth": 32, "hidden_act": "silu", "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16,
           "in_channels": 3, "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2, "window_size": 112,
           "fullatt_block_indexes": [7, 15, 23, 31], "tokens_per_second": 2}
BASE_CONFIGS: dict[str, dict[str, Any]] = {
    VLM_ID: {"text": {"hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
                      "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
                      "max_window_layers": 28, "tie_word_embeddings": False},
             "vision": {**_VISION, "out_hidden_size": 3584}},
    FAST_VLM_ID: {"text": {"hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36,
                           "num_attention_heads": 16, "num_key_value_heads": 2, "vocab_size": 151936,
                           "max_window_layers": 70, "tie_word_embeddings": True},
                  "vision": {**_VISION, "out_hidden_size": 2048}},
    # the 72B architecture (random: unquantized, about 145 GB in bf16; AWQ's 4-bit layers come only with its
    # checkpoint); tiny shrinks it like the others
    GEDIT_VLM_ID: {"text": {"hidden_size": 8192, "intermediate_size": 29568, "num_hidden_layers": 80,
                            "num_attention_heads": 64, "num_key_value_heads": 8, "vocab_size": 152064,
                            "max_window_layers": 80, "tie_word_embeddings": False},
                   "vision": {**_VISION, "out_hidden_size": 8192}},
}
# Shared by both (their config.json): M-RoPE sections of the 128-wide heads, theta, norms, context.
_TEXT_COMMON = {"hidden_act": "silu", "max_position_embeddings": 128000, "rms_norm_eps": 1e-06,
                "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}, "rope_theta": 1000000.0,
                "sliding_window": 32768, "use_sliding_window": False, "attention_dropout": 0.0}
# Tiny: widths only. Heads of 16 (64 / 4) -> M-RoPE sections [2, 3, 3] (the real 16:24:24 split of half a head);
# two vision blocks, the last with full attention (as every 8th real block).
TINY_TEXT = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "max_window_layers": 2,
             "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]}}
TINY_VISION = {"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "fullatt_block_indexes": [1],
               "out_hidden_size": TINY_TEXT["hidden_size"]}  # the merger projects into the language model's width
# Qwen2.5-VL's preprocessor_config.json (Qwen2VLImageProcessor): pixel bounds, patching, CLIP's normalisation.
PREPROCESSOR = {"min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2,
                "merge_size": 2, "image_mean": [0.48145466, 0.4578275, 0.40821073],
                "image_std": [0.26862954, 0.26130258, 0.27577711]}
PIXEL_MULTIPLE = 28  # patch 14 x spatial merge 2: image sides the processor keeps as they are
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
            "<|video_pad|>")
# Qwen's chat format (ChatML; an image is <|vision_start|><|image_pad|><|vision_end|>, which the processor expands
# to one pad per merged patch). The hub template adds a default system turn when none is given; the judge always
# gives its own, so both templates render the same text.
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['content'] is string %}{{ m['content'] }}"
                 "{% else %}{% for c in m['content'] %}{% if c['type'] == 'image' %}"
                 "<|vision_start|><|image_pad|><|vision_end|>{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}"
                 "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
                 "{% endif %}")
DTYPES = ("bfloat16", "float16", "float32")
SCORE_MAX = 10
TINY_SEED = 0


def pinned_revision(model_id: str, revision: str | None) -> str:
    """`revision` when given, else the pinned commit; refused when neither exists (the hub's moving `main` would
    make judgements depend on the day they were computed)."""
    if revision:
        return revision
    if model_id not in PINNED_REVISIONS:
        raise ValueError(f"no revision for the judge model {model_id!r}: editmeter pins only {', '.join(PINNED_REVISIONS)}"
                         f". Pass metrics.judge.vlm.revision=<40-hex commit of {model_id}>")
    return PINNED_REVISIONS[model_id]


def vlm_name(weights: str, model_id: str = VLM_ID, revision: str | None = None) -> str:
    """The model's identity as it enters the judge's signature (known before anything is loaded)."""
    if check_source(weights) == "pretrained":
        return f"{model_id}@{pinned_revision(model_id, revision)}"
    return f"{model_id}-{weights}"


def _tiny_tokenizer() -> Any:
    from transformers import Qwen2Tokenizer

    from benchmark.models.tokenizer import _byte_symbols

    vocab = {s: i for i, s in enumerate(_byte_symbols())}  # "0".."9" get ids 15..24, as in Qwen's vocabulary
    for t in SPECIALS:
        vocab[t] = len(vocab)
    tok = Qwen2Tokenizer(vocab=vocab, merges=[], unk_token=SPECIALS[0], eos_token="<|im_end|>", pad_token=SPECIALS[0])
    tok.add_special_tokens({"additional_special_tokens": list(SPECIALS[1:])})
    return tok


def _builder(model_id: str, text: dict[str, Any], vision: dict[str, Any], tiny: bool):
    def build(path: Path) -> None:
        import torch
        from transformers import (
            Qwen2_5_VLConfig,
            Qwen2_5_VLForConditionalGeneration,
            Qwen2_5_VLProcessor,
            Qwen2VLImageProcessor,
        )
        from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

        tok = _tiny_tokenizer()
        ids = {t: tok.convert_tokens_to_ids(t) for t in SPECIALS}
        tcfg = {**text, "bos_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|im_end|>"],
                "pad_token_id": ids["<|endoftext|>"]}
        if tiny:  # the embedding covers the byte vocabulary; random keeps the real (larger) table
            tcfg["vocab_size"] = len(tok)
        cfg = Qwen2_5_VLConfig(text_config=tcfg, vision_config=vision, image_token_id=ids["<|image_pad|>"],
                               video_token_id=ids["<|video_pad|>"], vision_start_token_id=ids["<|vision_start|>"],
                               vision_end_token_id=ids["<|vision_end|>"],
                               tie_word_embeddings=text["tie_word_embeddings"])
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(TINY_SEED)
            Qwen2_5_VLForConditionalGeneration(cfg).save_pretrained(path)
        proc = Qwen2_5_VLProcessor(image_processor=Qwen2VLImageProcessor(**PREPROCESSOR), tokenizer=tok,
                                   video_processor=Qwen2VLVideoProcessor(), chat_template=CHAT_TEMPLATE)
        proc.save_pretrained(path)
        (path / "editmeter-tiny.json").write_text(json.dumps({"model_id": model_id, "tiny": tiny}))

    return build


def vlm_location(weights: str = "pretrained", model_id: str = VLM_ID,
                 revision: str | None = None) -> tuple[str, dict[str, Any]]:
    """(where `from_pretrained` loads the model from, its keyword arguments): the hub id at its pinned revision
    (pretrained), or a cached folder of random weights built on first use (random: the real config; tiny: small
    widths)."""
    source = check_source(weights)
    if source == "pretrained":
        return model_id, {"revision": pinned_revision(model_id, revision)}
    if model_id not in BASE_CONFIGS:
        raise ValueError(f"weights={source} builds a random model of a known config; {model_id!r} has none "
                         f"(known: {', '.join(BASE_CONFIGS)}; use weights=pretrained)")
    base = BASE_CONFIGS[model_id]
    text = {**_TEXT_COMMON, **base["text"], **(TINY_TEXT if source == "tiny" else {})}
    vision = {**base["vision"], **(TINY_VISION if source == "tiny" else {})}
    key = {"model_id": model_id, "text": text, "vision": vision, "pre": PREPROCESSOR, "chat": CHAT_TEMPLATE}
    kind = f"qwen2_5_vl-{source}-{model_id.split('/')[-1]}"
    return str(tiny_model_dir(kind, key, _builder(model_id, text, vision, source == "tiny"))), {}


@functools.lru_cache(maxsize=2)
def load_vlm(weights: str = "pretrained", model_id: str = VLM_ID, revision: str | None = None,
             dtype: str = "bfloat16", device: str = "cpu") -> tuple[Any, Any, str]:
    """(model, processor, name) through `Qwen2_5_VLForConditionalGeneration` / `AutoProcessor.from_pretrained`
    from `vlm_location`. Once per process per arguments."""
    import torch
    from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration

    if dtype not in DTYPES:
        raise ValueError(f"judge dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    source = check_source(weights)
    location, kwargs = vlm_location(weights, model_id, revision)
    try:
        processor = AutoProcessor.from_pretrained(location, **kwargs)
        model = Qwen2_5_VLForConditionalGeneration.from_pretrained(location, dtype=getattr(torch, dtype), **kwargs)
    except OSError as err:
        if source != "pretrained":
            raise
        raise WeightsUnavailableError("the judge VLM", f"{model_id}@{kwargs['revision']}", err) from err
    return model.to(device).eval(), processor, vlm_name(weights, model_id, revision)


def judge_size(width: int, height: int, resolution: int) -> tuple[int, int]:
    """(width, height) an image is resized to: longer side `resolution`, aspect ratio kept, both sides rounded to
    multiples of 28 (so Qwen's processor, which wants such sides, changes nothing more)."""
    if resolution < PIXEL_MULTIPLE or resolution % PIXEL_MULTIPLE:
        raise ValueError(f"judge resolution must be a positive multiple of {PIXEL_MULTIPLE} (patch 14 x merge 2), "
                         f"not {resolution}")
    s = resolution / max(width, height)

    def side(n: int) -> int:
        return max(PIXEL_MULTIPLE, round(n * s / PIXEL_MULTIPLE) * PIXEL_MULTIPLE)

    return side(width), side(height)


class ScoreReader:
    """Probabilities of the scores 0..10 of prompts that end where the answer starts (module docstring), batched:
    left padding, one forward pass per batch, logits of the last two positions only."""

    def __init__(self, model: Any, processor: Any, *, name: str, device: str = "cpu") -> None:
        self.model, self.processor, self.name, self.device = model, processor, name, device
        tok = processor.tokenizer
        self.digit_ids = [self._single_id(tok, str(d)) for d in range(10)]
        self.end_id = self._single_id(tok, "<|im_end|>")

    @staticmethod
    def _single_id(tok: Any, text: str) -> int:
        ids = tok.encode(text, add_special_tokens=False)
        if len(ids) != 1:
            raise ValueError(f"the judge's tokenizer splits {text!r} into {len(ids)} tokens; the score readout needs "
                             "one token per digit and for <|im_end|> (Qwen's tokenizers)")
        return int(ids[0])

    @property
    def dtype(self) -> str:
        return str(self.model.dtype).removeprefix("torch.")

    def chat(self, text: str, n_images: int, system: str = "") -> str:
        """The prompt of one question: a system turn (when given), a user turn with `n_images` images then `text`,
        and the assistant's turn opened (the position the score is read at)."""
        content = [{"type": "image"}] * n_images + [{"type": "text", "text": text}]
        turns = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": content}]
        return self.processor.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)

    def probabilities(self, prompts: Sequence[str], images: Sequence[Sequence[Any]]) -> tuple[Any, Any]:
        """((N, 11) float64 score probabilities, (N,) probability mass the first answer token put on digits) of
        chat prompts (`chat`), each with its images (uint8 (3, H, W) tensors or PIL images), in order."""
        import torch

        proc = self.processor
        proc.tokenizer.padding_side = "left"  # every prompt then ends at the same position
        flat = [im for ims in images for im in ims]
        enc = proc(text=[p + "1" for p in prompts], images=flat or None, return_tensors="pt", padding=True)
        model = self.model
        enc = {k: v.to(model.device) for k, v in enc.items()}
        if "pixel_values" in enc:
            enc["pixel_values"] = enc["pixel_values"].to(model.dtype)  # tensors follow the model (bf16 on CPU too)
        with torch.inference_mode():
            logits = model(**enc, logits_to_keep=2, use_cache=False).logits.float()
        first = torch.softmax(logits[:, 0], dim=-1).double().cpu()   # after the prompt: the first answer token
        second = torch.softmax(logits[:, 1], dim=-1).double().cpu()  # after a teacher-forced "1"
        return self.readout(first, second)

    def readout(self, first: Any, second: Any) -> tuple[Any, Any]:
        """Score probabilities (N, 11) and digit mass (N,) from the two positions' token distributions (N, V)."""
        import torch

        digits = first[:, self.digit_ids]
        mass = digits.sum(dim=1)
        p = digits / mass.clamp_min(1e-300)[:, None]
        tail = second[:, [self.end_id, self.digit_ids[0]]]  # "1" then end -> 1; "1" then "0" -> 10
        tail = tail / tail.sum(dim=1).clamp_min(1e-300)[:, None]
        out = torch.cat([p[:, :1], (p[:, 1] * tail[:, 0])[:, None], p[:, 2:], (p[:, 1] * tail[:, 1])[:, None]], dim=1)
        return out, mass


def expected_and_argmax(p: Any) -> tuple[Any, Any]:
    """(sum_k k p_k, argmax_k p_k) of (N, 11) score probabilities (ties: the lower score)."""
    import torch

    k = torch.arange(SCORE_MAX + 1, dtype=p.dtype)
    return (p * k).sum(dim=1), p.argmax(dim=1)


def load_score_reader(weights: str = "pretrained", model_id: str = VLM_ID, revision: str | None = None,
                      dtype: str = "bfloat16", device: str = "cpu") -> ScoreReader:
    """A `ScoreReader` on `load_vlm`'s model (the config's `_partial_` factory calls this with device=)."""
    model, processor, name = load_vlm(weights, model_id, revision, dtype, device)
    return ScoreReader(model, processor, name=name, device=device)


# --- free-text judging (metrics=gedit, docs/judge.md "GEdit-Bench's protocol") -------------------------------------
# qwen_vl_utils' defaults, which GEdit-Bench's local judge resizes every image with (process_vision_info): sides
# rounded to multiples of 28, the area kept within 4 and 16,384 merged patches (the processor's own bounds).
QWEN_VL_UTILS_MIN_PIXELS = 4 * PIXEL_MULTIPLE * PIXEL_MULTIPLE
QWEN_VL_UTILS_MAX_PIXELS = 16384 * PIXEL_MULTIPLE * PIXEL_MULTIPLE
QWEN_VL_UTILS_MAX_RATIO = 200
# The hub chat template's default system turn, rendered when a conversation has none (GEdit-Bench sends none). Given
# explicitly, every template (the hub's, tiny's) renders the same text.
HUB_DEFAULT_SYSTEM = "You are a helpful assistant."


def qwen_vl_utils_size(width: int, height: int, min_pixels: int = QWEN_VL_UTILS_MIN_PIXELS,
                       max_pixels: int = QWEN_VL_UTILS_MAX_PIXELS) -> tuple[int, int]:
    """(width, height) qwen_vl_utils' `smart_resize` gives an image: each side rounded to a multiple of 28 (at least
    28), then scaled down (floor) or up (ceil) to multiples of 28 when the area leaves [min_pixels, max_pixels]."""
    import math

    f = PIXEL_MULTIPLE
    if min(width, height) < 1 or max(width, height) / min(width, height) > QWEN_VL_UTILS_MAX_RATIO:
        raise ValueError(f"image of {width} x {height} pixels: its aspect ratio must be below "
                         f"{QWEN_VL_UTILS_MAX_RATIO} (Qwen2.5-VL's limit)")
    h, w = max(f, round(height / f) * f), max(f, round(width / f) * f)
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h, w = math.floor(height / beta / f) * f, math.floor(width / beta / f) * f
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h, w = math.ceil(height * beta / f) * f, math.ceil(width * beta / f) * f
    return w, h


def qwen_vl_utils_image(img: Any) -> Any:
    """An image as qwen_vl_utils hands it to the processor: RGB (RGBA over white), resized with PIL's default
    filter (bicubic) to `qwen_vl_utils_size`. GEdit-Bench's PNG round trip before it is lossless (left out)."""
    from PIL import Image

    if img.mode == "RGBA":
        rgb = Image.new("RGB", img.size, (255, 255, 255))
        rgb.paste(img, mask=img.split()[3])
    else:
        rgb = img.convert("RGB")
    size = qwen_vl_utils_size(rgb.width, rgb.height)
    return rgb if rgb.size == size else rgb.resize(size, Image.Resampling.BICUBIC)


class TextJudge:
    """A local Qwen2.5-VL answering a prompt about images in free text, decoded as GEdit-Bench's local judge decodes
    (greedy: `do_sample=False`, one beam, `max_new_tokens`; the checkpoint's own generation config otherwise, e.g.
    its repetition penalty; special tokens dropped from the reply).

    The judge-backbone interface of `metrics=gedit` (`benchmark.metrics.prompted_judge.JudgeBackbone`): `name`
    (model@revision), `identity` (everything of the backbone that shapes a reply, known before loading) and
    `generate(requests)`. Cheap to build: the model loads on the first `generate` (`load_vlm`, once per process).
    `batch_size`: prompts per `generate` call (GEdit-Bench: 1; more is faster, and left padding can change a reply
    where two tokens are within float rounding of each other). `text_first`: the prompt text before the images in
    the user turn (ImgEdit-Bench's order) instead of after them (GEdit-Bench's).
    """

    def __init__(self, *, weights: str = "pretrained", model_id: str = GEDIT_VLM_ID, revision: str | None = None,
                 dtype: str = "float16", max_new_tokens: int = 512, batch_size: int = 1, device: str = "auto",
                 system: str = HUB_DEFAULT_SYSTEM, text_first: bool = False) -> None:
        from benchmark.io.model_cache import resolve_device

        if dtype not in DTYPES:
            raise ValueError(f"judge dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
        for key, v in (("max_new_tokens", max_new_tokens), ("batch_size", batch_size)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{key} must be a positive integer, not {v!r}")
        self.weights, self.model_id, self.revision, self.dtype = weights, model_id, revision, dtype
        if not isinstance(text_first, bool):
            raise ValueError(f"text_first must be true or false, not {text_first!r}")
        self.max_new_tokens, self.batch_size, self.system = max_new_tokens, batch_size, system
        self.text_first = text_first
        self.name = vlm_name(weights, model_id, revision)  # validates the source and the revision now
        self.device = resolve_device(device)

    @property
    def identity(self) -> str:
        return (f"{self.name}|dtype={self.dtype}|decode=greedy,max_new_tokens={self.max_new_tokens}"
                f"|system={self.system!r}|images=qwen_vl_utils{'|text_first' if self.text_first else ''}")

    @property
    def version(self) -> str:
        """What besides `name` shapes this local judge's replies: the libraries that run it and the dtype (each
        judged row records it as `judge_version`)."""
        import torch
        import transformers

        return f"local|transformers={transformers.__version__}|torch={torch.__version__}|dtype={self.dtype}"

    def _loaded(self) -> tuple[Any, Any]:
        model, processor, name = load_vlm(self.weights, self.model_id, self.revision, self.dtype, self.device)
        if name != self.name:
            raise RuntimeError(f"the judge loaded as {name}, but the run was keyed as {self.name}")
        return model, processor

    def generate(self, requests: Sequence[tuple[Sequence[Any], str]]) -> list[str]:
        """The reply to each (PIL images, prompt text) request, in order: one user turn with the images, then the
        text, after the system turn."""
        import torch

        model, proc = self._loaded()
        proc.tokenizer.padding_side = "left"  # every prompt of a batch then ends where its reply starts
        out: list[str] = []
        for start in range(0, len(requests), self.batch_size):
            batch = requests[start : start + self.batch_size]
            texts, images = [], []
            for ims, text in batch:
                content = [{"type": "image"}] * len(ims)
                if not isinstance(text, str):  # an interleaved prompt (the arena's protocol)
                    from benchmark.models.judge_reply import interleaved

                    content = interleaved(text, len(ims), lambda _: {"type": "image"})
                else:
                    content = [{"type": "text", "text": text}, *content] if self.text_first else [
                        *content, {"type": "text", "text": text}]
                turns = [{"role": "system", "content": self.system}, {"role": "user", "content": content}]
                texts.append(proc.apply_chat_template(turns, tokenize=False, add_generation_prompt=True))
                images += [qwen_vl_utils_image(im) for im in ims]
            enc = proc(text=texts, images=images or None, return_tensors="pt", padding=True)
            enc = {k: v.to(model.device) for k, v in enc.items()}
            if "pixel_values" in enc:
                enc["pixel_values"] = enc["pixel_values"].to(model.dtype)
            with torch.inference_mode():
                ids = model.generate(**enc, max_new_tokens=self.max_new_tokens, do_sample=False, num_beams=1)
            new = ids[:, enc["input_ids"].shape[1]:].cpu()
            out += proc.batch_decode(new, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        return out
