"""EditReward (TIGER-Lab) as a local reward model: loading and scoring (metrics=editreward; docs/judge.md,
"EditReward"). The module (`EditRewardModel`) is in `benchmark.models.editreward_model`.

Loading follows the authors' `create_model_and_processor` + `EditRewardInferencer`: the base Qwen2.5-VL and its
processor by `from_pretrained` (right padding), the special token `<|Reward|>` added to the tokenizer, the
embeddings resized to the tokenizer's length, the body in the chosen dtype and the heads in float32, then the
authors' full state dict (`model.safetensors`, else `model.pth`) loaded with `load_state_dict(strict=True)`.

Weight sources:
  - pretrained: base Qwen/Qwen2.5-VL-7B-Instruct and checkpoint TIGER-Lab/EditReward-Qwen2.5-VL-7B, each at a
    pinned hub commit;
  - tiny: the tiny Qwen2.5-VL of `benchmark.models.vlm` (same classes, small widths), `<|Reward|>` added, seeded
    random heads, saved as a full state dict `model.safetensors` under the tiny cache and loaded back through the
    same path as the real checkpoint (strict load included);
  - random: the real base config with random weights and seeded heads (time and memory; no checkpoint file).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmark.io.model_cache import WeightsUnavailableError, check_source, tiny_model_dir
from benchmark.models.vlm import DTYPES, HUB_DEFAULT_SYSTEM, VLM_ID, pinned_revision, qwen_vl_utils_size

CHECKPOINT_ID = "TIGER-Lab/EditReward-Qwen2.5-VL-7B"
CHECKPOINT_REVISION = "51b92ab5246295637c4ab3bd71e54a26f0a5189d"
# the file names the authors' inferencer reads (it tries model.pth first; the safe format is tried first here)
CHECKPOINT_FILES = ("model.safetensors", "model.pth")
REWARD_TOKEN = "<|Reward|>"
BASE_ID = VLM_ID  # pinned in benchmark.models.vlm.PINNED_REVISIONS
IMAGE_PIXELS = 256 * 28 * 28  # the authors' min_pixels = max_pixels of both images (256 merged 28-px patches)
HEAD_SEED = 0
ATTENTION = ("sdpa", "eager", "flash_attention_2")


def editreward_image(img: Any, pixels: int = IMAGE_PIXELS) -> Any:
    """An image as the authors' `fetch_image` hands it to the processor: `convert("RGB")` (alpha dropped, not
    composited), resized with PIL's bicubic filter to qwen-vl-utils' `smart_resize` size for
    min_pixels = max_pixels = `pixels` (sides multiples of 28, area at most `pixels`)."""
    from PIL import Image

    rgb = img if img.mode == "RGB" else img.convert("RGB")
    size = qwen_vl_utils_size(rgb.width, rgb.height, min_pixels=pixels, max_pixels=pixels)
    return rgb if rgb.size == size else rgb.resize(size, Image.Resampling.BICUBIC)


def normalise_keys(state: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint's state dict as the authors' loader takes it: a `{"model": ...}` wrapper unwrapped, nothing
    renamed. Their strict load into a transformers 4.57 model means the file uses 4.57's names
    (`model.language_model.*`, `model.visual.*`, `lm_head.*`, `rm_heads.*`), which are this version's too."""
    if "model" in state and isinstance(state["model"], dict):
        return state["model"]
    return state


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """The full state dict of `path` (safetensors, or a torch file of tensors only), keys normalised."""
    import torch

    path = Path(path)
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        state = load_file(str(path), device="cpu")
    else:
        state = torch.load(path, map_location="cpu", weights_only=True)  # tensors only: no code runs
    return normalise_keys(state)


def _assemble(location: str, kwargs: dict[str, Any], dtype: str, attn: str) -> tuple[Any, Any]:
    """(model, processor) the authors' way, before any checkpoint: base + processor (right padding), the reward
    token added, embeddings resized to the tokenizer, the whole model cast to `dtype`, then the heads to float32."""
    import torch
    from transformers import AutoProcessor

    from benchmark.models.editreward_model import EditRewardModel

    processor = AutoProcessor.from_pretrained(location, **kwargs)
    processor.tokenizer.padding_side = "right"
    processor.tokenizer.add_special_tokens({"additional_special_tokens": [REWARD_TOKEN]})
    token_id = processor.tokenizer.convert_tokens_to_ids(REWARD_TOKEN)
    model = EditRewardModel.from_pretrained(location, dtype=getattr(torch, dtype), attn_implementation=attn,
                                            **kwargs)
    # the new rows' values do not matter (the checkpoint replaces every weight): no covariance over the table
    model.resize_token_embeddings(len(processor.tokenizer), mean_resizing=False)
    # the authors' `model.to(torch.bfloat16)` (their config's bf16): buffers too, so the rotary inverse frequencies
    # are rounded to bf16 as in their training and inference (from_pretrained alone keeps them in float32)
    model.to(getattr(torch, dtype))
    model.heads_to_float32()
    model.reward_token_id = int(token_id)
    model.config.pad_token_id = processor.tokenizer.pad_token_id
    return model, processor


def _seed_heads(model: Any) -> None:
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(HEAD_SEED)
        for head in model.rm_heads.values():
            for layer in head:
                if hasattr(layer, "reset_parameters"):
                    layer.reset_parameters()


def _tiny_checkpoint(location: str) -> Path:
    """`model.safetensors` of a tiny EditReward: the tiny base assembled as the real one, seeded heads, the body
    saved in bfloat16 and the heads in float32 (as the authors' bf16 training saves them)."""
    def build(path: Path) -> None:
        import torch
        from safetensors.torch import save_file

        model, _ = _assemble(location, {}, "float32", "sdpa")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(HEAD_SEED + 1)  # the resized embedding row
            model.get_input_embeddings().weight.data[-1].normal_(0, 0.02)
            model.get_output_embeddings().weight.data[-1].normal_(0, 0.02)
        _seed_heads(model)
        state = {k: (v if k.startswith("rm_heads.") else v.to(torch.bfloat16)).contiguous()
                 for k, v in model.state_dict().items()}
        save_file(state, str(path / "model.safetensors"), metadata={"format": "pt"})

    key = {"base": Path(location).name, "token": REWARD_TOKEN, "seed": HEAD_SEED, "layout": "transformers-4.57"}
    return tiny_model_dir("editreward-tiny", key, build) / "model.safetensors"


def checkpoint_path(checkpoint_id: str, revision: str) -> Path:
    """The checkpoint file from the hub at `revision` (the HF cache), `CHECKPOINT_FILES` in order."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError

    last: Exception | None = None
    for name in CHECKPOINT_FILES:
        try:
            return Path(hf_hub_download(checkpoint_id, name, revision=revision))
        except EntryNotFoundError as err:
            last = err
        except OSError as err:
            raise WeightsUnavailableError("the EditReward checkpoint", f"{checkpoint_id}@{revision}", err) from err
    raise WeightsUnavailableError("the EditReward checkpoint", f"{checkpoint_id}@{revision}", last)


def editreward_name(weights: str, checkpoint_id: str = CHECKPOINT_ID, revision: str = CHECKPOINT_REVISION) -> str:
    """The model's identity in the metric signature (known before loading)."""
    if check_source(weights) == "pretrained":
        return f"{checkpoint_id}@{revision}"
    return f"{checkpoint_id}-{weights}"


@functools.lru_cache(maxsize=2)
def load_editreward(weights: str = "pretrained", checkpoint_id: str = CHECKPOINT_ID,
                    checkpoint_revision: str = CHECKPOINT_REVISION, base_id: str = BASE_ID,
                    base_revision: str | None = None, dtype: str = "bfloat16", device: str = "cpu",
                    attn_implementation: str = "sdpa") -> tuple[Any, Any]:
    """(EditRewardModel in eval mode on `device`, processor), once per process per arguments (module docstring)."""
    from benchmark.models.vlm import vlm_location

    if dtype not in DTYPES:
        raise ValueError(f"EditReward dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    if attn_implementation not in ATTENTION:
        raise ValueError(f"attn_implementation must be one of {', '.join(ATTENTION)}, not {attn_implementation!r}")
    source = check_source(weights)
    location, kwargs = vlm_location(weights, base_id, base_revision)
    try:
        model, processor = _assemble(location, kwargs, dtype, attn_implementation)
    except OSError as err:
        if source != "pretrained":
            raise
        raise WeightsUnavailableError("the EditReward base model", f"{base_id}@{kwargs['revision']}", err) from err
    if source == "random":
        _seed_heads(model)
    else:
        path = (checkpoint_path(checkpoint_id, checkpoint_revision) if source == "pretrained"
                else _tiny_checkpoint(location))
        load_strict(model, read_checkpoint(path), path)
    return model.to(device).eval(), processor


def load_strict(model: Any, state: dict[str, Any], where: str | Path) -> None:
    """`load_state_dict(strict=True)`, a missing, extra or misshapen key refused with the file named."""
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as err:
        raise ValueError(f"{where}: not a full EditReward state dict for this model ({err})") from None


class EditRewardScorer:
    """EditReward's reward of (instruction, source, edit) triples: the backbone of metrics=editreward (`name`,
    `identity`, known before loading; the model loads on the first call). `batch_size`: triples per forward
    pass (right padding and reward-token pooling: a reward does not depend on its neighbours beyond float
    rounding). `image_pixels`: the area both images are resized to (the authors': 256 x 28 x 28)."""

    def __init__(self, *, weights: str = "pretrained", checkpoint_id: str = CHECKPOINT_ID,
                 checkpoint_revision: str = CHECKPOINT_REVISION, base_id: str = BASE_ID,
                 base_revision: str | None = None, dtype: str = "bfloat16", attn_implementation: str = "sdpa",
                 batch_size: int = 4, image_pixels: int = IMAGE_PIXELS, device: str = "auto") -> None:
        from benchmark.io.model_cache import resolve_device

        if dtype not in DTYPES:
            raise ValueError(f"EditReward dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
        for key, v in (("batch_size", batch_size), ("image_pixels", image_pixels)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{key} must be a positive integer, not {v!r}")
        self.weights, self.checkpoint_id, self.checkpoint_revision = weights, checkpoint_id, checkpoint_revision
        self.base_id, self.base_revision = base_id, pinned_revision(base_id, base_revision)
        self.dtype, self.attn, self.batch_size, self.image_pixels = dtype, attn_implementation, batch_size, image_pixels
        self.name = editreward_name(weights, checkpoint_id, checkpoint_revision)
        self.device = resolve_device(device)

    @property
    def identity(self) -> str:
        base = f"{self.base_id}@{self.base_revision}" if self.weights == "pretrained" else self.base_id
        return (f"{self.name}|base={base}|dtype={self.dtype}|heads=float32|pixels={self.image_pixels}"
                f"|pool=reward-token,mean-of-heads|positions=text")

    def loaded(self) -> tuple[Any, Any]:
        """(model, processor), loaded on first use (`load_editreward`, once per process)."""
        return load_editreward(self.weights, self.checkpoint_id, self.checkpoint_revision, self.base_id,
                               self.base_revision, self.dtype, self.device, self.attn)

    def unscorable(self, instruction: str) -> str:
        """Why an instruction cannot be scored ('' when it can): empty, or holding a special token of the
        tokenizer, which would add a reward token or an image placeholder to the prompt."""
        if not (instruction or "").strip():
            return "no instruction: EditReward's prompts quote it"
        tok = self.loaded()[1].tokenizer
        # the added special tokens (adding <|Reward|> leaves Qwen's image and chat tokens out of all_special_tokens)
        special = {t.content for t in tok.added_tokens_decoder.values() if t.special} | {REWARD_TOKEN}
        found = sorted(t for t in special if t in instruction)
        return f"the instruction holds the tokenizer's special token(s) {found}" if found else ""

    def encode(self, instructions: Sequence[str], sources: Sequence[Any], edits: Sequence[Any],
               prompts: Any) -> list[dict[str, Any]]:
        """One processor batch per head (`prompts.texts(instruction)[i]` for head i), each a user turn of
        [source, edit, text] after the hub template's default system turn, the assistant turn opened; tensors on
        the model's device, pixel values in its dtype."""
        model, proc = self.loaded()
        images = []
        for src, edit in zip(sources, edits, strict=True):
            images += [editreward_image(src, self.image_pixels), editreward_image(edit, self.image_pixels)]
        per_head = list(zip(*(prompts.texts(t) for t in instructions), strict=True))
        out = []
        for texts in per_head:
            chats = [proc.apply_chat_template(
                [{"role": "system", "content": HUB_DEFAULT_SYSTEM},
                 {"role": "user", "content": [{"type": "image"}, {"type": "image"}, {"type": "text", "text": t}]}],
                tokenize=False, add_generation_prompt=True) for t in texts]
            enc = proc(text=chats, images=images, padding=True, return_tensors="pt")
            enc = {k: v.to(model.device) for k, v in enc.items()}
            enc["pixel_values"] = enc["pixel_values"].to(model.dtype)
            out.append(enc)
        return out

    def head_outputs(self, instructions: Sequence[str], sources: Sequence[Any], edits: Sequence[Any],
                     prompts: Any) -> Any:
        """(heads, N, 2) float32 CPU tensor: each head's (mean, log sigma) per triple, `batch_size` at a time."""
        import torch

        model, _ = self.loaded()
        parts = []
        for s in range(0, len(instructions), self.batch_size):
            sl = slice(s, s + self.batch_size)
            batches = self.encode(instructions[sl], sources[sl], edits[sl], prompts)
            with torch.inference_mode():
                parts.append(model.head_outputs(batches).cpu())
        return torch.cat(parts, dim=1)

    def reward(self, instructions: Sequence[str], sources: Sequence[Any], edits: Sequence[Any],
               prompts: Any) -> tuple[Any, Any]:
        """(reward, log sigma), float32 (N,) each: the mean over the heads of their (mean, log sigma)."""
        from benchmark.models.editreward_model import pool_heads

        pooled = pool_heads(self.head_outputs(instructions, sources, edits, prompts))
        return pooled[:, 0], pooled[:, 1]
