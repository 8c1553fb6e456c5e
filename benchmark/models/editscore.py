"""EditScore's local judge (metrics=editscore, docs/judge.md "EditScore"): Qwen2.5-VL with the EditScore LoRA merged
in, prompted and sampled as VectorSpaceLab/EditScore's `mllm_tools/qwen25vl.py` does it (our own code).

Loading: `Qwen2_5_VLForConditionalGeneration.from_pretrained(base, revision=...)`, then
`PeftModel.from_pretrained(model, adapter, revision=...)` and `merge_and_unload()`; the processor comes from the base.
Weight sources as `benchmark.models.vlm.load_vlm`: pretrained (hub ids at pinned revisions), random (the real base
config, random weights, a random LoRA) and tiny (the tiny Qwen2.5-VL of vlm.py and a random LoRA saved with peft's
`save_pretrained` into a cached folder), each loaded through the same calls.

Prompt: the authors build the chat text by hand (not the processor's template): the default system turn, then the
user turn with `<imgK>: ` before each image's vision tokens, then the prompt, then the assistant turn opened. Images
go through qwen_vl_utils' resizing (`benchmark.models.vlm.qwen_vl_utils_image`).

Decoding: sampling (temperature, top_p, top_k, max_new_tokens from the config), one request per `generate` call,
the torch seed set right before each call (the authors' `set_seed(seed + pass)`), so a request's reply depends on its
own seed only: the same on a rerun (bit for bit on CPU) and whatever else is in the batch.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmark.io.model_cache import WeightsUnavailableError, check_source, tiny_model_dir
from benchmark.models.vlm import DTYPES, VLM_ID, pinned_revision, qwen_vl_utils_image, vlm_location

ADAPTER_ID = "EditScore/EditScore-7B"
# the adapter's hub commit, as a public project pins it (never the moving `main`)
PINNED_ADAPTERS: dict[str, str] = {ADAPTER_ID: "dcce052accfc75f2d48279c889a71755ecdf737b"}
# The LoRA that random / tiny build: rank and targets are ours (the real adapter brings its own adapter_config.json);
# it touches the language model's attention and MLP projections so a merge visibly changes the model.
RANDOM_LORA = {"r": 8, "lora_alpha": 16, "lora_dropout": 0.0,
               "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}
ADAPTER_SEED = 1
# the system turn the authors' hand-built chat text starts with (Qwen's default one)
SYSTEM = "You are a helpful assistant."


def adapter_revision(adapter_id: str, revision: str | None) -> str:
    """`revision` when given, else the pinned commit; refused when neither exists."""
    if revision:
        return revision
    if adapter_id not in PINNED_ADAPTERS:
        raise ValueError(f"no revision for the EditScore adapter {adapter_id!r}: editmeter pins only "
                         f"{', '.join(PINNED_ADAPTERS)}. Pass adapter_revision=<40-hex commit of {adapter_id}>")
    return PINNED_ADAPTERS[adapter_id]


def editscore_name(weights: str, base_id: str, base_revision: str | None, adapter_id: str,
                   adapter_rev: str | None) -> str:
    """The judge's identity as it enters the signature (known before anything is loaded)."""
    if check_source(weights) == "pretrained":
        return (f"{base_id}@{pinned_revision(base_id, base_revision)}+{adapter_id}@"
                f"{adapter_revision(adapter_id, adapter_rev)}")
    return f"{base_id}+{adapter_id}-{weights}"


def chat_text(prompt: str, n_images: int) -> str:
    """The chat text the authors' `apply_chat_template` helper writes: system turn, user turn with `<img1>: `,
    `<img2>: `, ... before each image's vision tokens, the prompt, then the assistant turn opened."""
    images = "".join(f"<img{k}>: <|vision_start|><|image_pad|><|vision_end|>" for k in range(1, n_images + 1))
    return (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{images}{prompt}<|im_end|>\n"
            "<|im_start|>assistant\n")


def _adapter_builder(base_location: str):
    def build(path: Path) -> None:
        import torch
        from peft import LoraConfig, get_peft_model
        from transformers import Qwen2_5_VLForConditionalGeneration

        base = Qwen2_5_VLForConditionalGeneration.from_pretrained(base_location, dtype=torch.float32)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(ADAPTER_SEED)
            # init_lora_weights=False: both factors random (peft's default zeroes B, which would merge to nothing)
            peft_model = get_peft_model(base, LoraConfig(**RANDOM_LORA, init_lora_weights=False))
        peft_model.save_pretrained(path)
        (path / "editmeter-random-lora.json").write_text(json.dumps({"base": base_location, **RANDOM_LORA}))

    return build


def adapter_location(weights: str, base_id: str, base_revision: str | None, adapter_id: str,
                     adapter_rev: str | None) -> tuple[str, dict[str, Any]]:
    """(where `PeftModel.from_pretrained` loads the adapter from, its keyword arguments)."""
    if check_source(weights) == "pretrained":
        return adapter_id, {"revision": adapter_revision(adapter_id, adapter_rev)}
    base_location, _ = vlm_location(weights, base_id, base_revision)
    key = {"base": Path(base_location).name, "lora": RANDOM_LORA, "seed": ADAPTER_SEED, "adapter": adapter_id}
    kind = f"editscore-lora-{weights}-{adapter_id.split('/')[-1]}"
    return str(tiny_model_dir(kind, key, _adapter_builder(base_location))), {}


@functools.lru_cache(maxsize=2)
def load_editscore(weights: str = "pretrained", base_id: str = VLM_ID, base_revision: str | None = None,
                   adapter_id: str = ADAPTER_ID, adapter_rev: str | None = None, dtype: str = "bfloat16",
                   device: str = "cpu") -> tuple[Any, Any, str]:
    """(merged model, processor, name): the base through `Qwen2_5_VLForConditionalGeneration.from_pretrained`, the
    LoRA through `PeftModel.from_pretrained` then `merge_and_unload()`, the processor from the base. Once per
    process per arguments."""
    import warnings

    import torch
    from peft import PeftModel
    from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration

    if dtype not in DTYPES:
        raise ValueError(f"judge dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    source = check_source(weights)
    name = editscore_name(weights, base_id, base_revision, adapter_id, adapter_rev)
    base_location, base_kwargs = vlm_location(weights, base_id, base_revision)
    lora_location, lora_kwargs = adapter_location(weights, base_id, base_revision, adapter_id, adapter_rev)
    try:
        model = Qwen2_5_VLForConditionalGeneration.from_pretrained(base_location, dtype=getattr(torch, dtype),
                                                                   **base_kwargs)
        with warnings.catch_warnings():  # peft reads transformers' deprecated alias; nothing for a user to act on
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
            model = PeftModel.from_pretrained(model, lora_location, **lora_kwargs).merge_and_unload()
        processor = AutoProcessor.from_pretrained(base_location, **base_kwargs)
    except (OSError, ValueError) as err:  # peft reports an adapter it cannot find as a ValueError
        if source != "pretrained":
            raise
        raise WeightsUnavailableError("the EditScore judge", name, err) from err
    return model.to(device).eval(), processor, name


class EditScoreJudge:
    """EditScore's local judge as a `benchmark.metrics.prompted_judge.JudgeBackbone` (name, identity,
    generate). Cheap to build: the model loads on the first `generate` (`load_editscore`, once per process).

    weights: pretrained | random | tiny. base_id / base_revision, adapter_id / adapter_revision: the hub ids and
    commits (null: the pinned ones). dtype: the authors load bfloat16. temperature, top_p, top_k, max_new_tokens:
    the sampling (the checkpoint's generation config supplies the rest, as for the authors). seed: the seed of a
    request when `generate` is given none.
    """

    def __init__(self, *, weights: str = "pretrained", base_id: str = VLM_ID, base_revision: str | None = None,
                 adapter_id: str = ADAPTER_ID, adapter_revision: str | None = None, dtype: str = "bfloat16",
                 temperature: float = 0.7, top_p: float = 0.9, top_k: int = 20, max_new_tokens: int = 512,
                 seed: int = 42, device: str = "auto") -> None:
        from benchmark.io.model_cache import resolve_device

        if dtype not in DTYPES:
            raise ValueError(f"judge dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
        for key, v in (("max_new_tokens", max_new_tokens), ("top_k", top_k)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{key} must be a positive integer, not {v!r}")
        if not 0 < float(temperature) or not 0 < float(top_p) <= 1:
            raise ValueError(f"sampling needs temperature > 0 and 0 < top_p <= 1, not {temperature!r}, {top_p!r}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed must be an integer, not {seed!r}")
        self.weights, self.dtype = weights, dtype
        self.base_id, self.base_revision = base_id, base_revision
        self.adapter_id, self.adapter_revision = adapter_id, adapter_revision
        self.temperature, self.top_p, self.top_k = float(temperature), float(top_p), top_k
        self.max_new_tokens, self.seed = max_new_tokens, seed
        self.name = editscore_name(weights, base_id, base_revision, adapter_id, adapter_revision)  # validates now
        self.device = resolve_device(device)

    @property
    def identity(self) -> str:
        from importlib.metadata import version

        # peft's version: the merge (scaling, fan-in handling) is its code
        return (f"{self.name}|dtype={self.dtype}|decode=sample,temperature={self.temperature},top_p={self.top_p},"
                f"top_k={self.top_k},max_new_tokens={self.max_new_tokens},seed-per-request"
                f"|chat=editscore-img-labels|images=qwen_vl_utils|peft={version('peft')}")

    def _loaded(self) -> tuple[Any, Any]:
        model, processor, name = load_editscore(self.weights, self.base_id, self.base_revision, self.adapter_id,
                                                self.adapter_revision, self.dtype, self.device)
        if name != self.name:
            raise RuntimeError(f"the judge loaded as {name}, but the run was keyed as {self.name}")
        return model, processor

    def generate(self, requests: Sequence[tuple[Sequence[Any], str]],
                 seeds: Sequence[int] | None = None) -> list[str]:
        """The reply to each (PIL images, prompt text) request, in order, request k sampled after seeding torch
        with `seeds[k]` (default: `seed` for every request); one `generate` call per request, as the authors."""
        import torch

        seeds = [self.seed] * len(requests) if seeds is None else list(seeds)
        if len(seeds) != len(requests):
            raise ValueError(f"{len(seeds)} seeds for {len(requests)} requests")
        model, proc = self._loaded()
        cuda = [model.device.index or 0] if model.device.type == "cuda" else []
        out: list[str] = []
        for (ims, text), seed in zip(requests, seeds, strict=True):
            enc = proc(text=[chat_text(text, len(ims))], images=[qwen_vl_utils_image(im) for im in ims] or None,
                       return_tensors="pt", padding=True)
            enc = {k: v.to(model.device) for k, v in enc.items()}
            if "pixel_values" in enc:
                enc["pixel_values"] = enc["pixel_values"].to(model.dtype)  # tensors follow the model
            # the authors reseed the global generators before each call; fork_rng keeps the caller's state as it was
            with torch.random.fork_rng(devices=cuda), torch.inference_mode():
                torch.manual_seed(seed)  # seeds the CPU and every CUDA generator, as their set_seed does
                ids = model.generate(**enc, max_new_tokens=self.max_new_tokens, do_sample=True,
                                     temperature=self.temperature, top_p=self.top_p, top_k=self.top_k)
            new = ids[:, enc["input_ids"].shape[1]:].cpu()
            out.append(proc.batch_decode(new, skip_special_tokens=True, clean_up_tokenization_spaces=False)[0].strip())
        return out
