"""Stable Diffusion components from one of three weight sources, through one `from_pretrained(path_or_id)` call.

- `pretrained`: a Hugging Face id at a pinned revision (users; needs the hub or a local cache).
- `random`: SD v1's real-size components with random weights, built and loaded the same way as `tiny` (speed and
  memory at real size, e.g. `profile=random` on a GPU; the edits are noise).
- `tiny`: random-weight components of the same classes (UNet2DConditionModel, AutoencoderKL, CLIPTextModel, a real
  CLIP tokenizer, the SD scheduler), saved once with `save_pretrained` into a content-keyed cache folder, then loaded
  with the very same `from_pretrained` call. Sizes follow diffusers' own fast-test components (the UNet with one
  layer per block); every switch that is not a size (block layout, activations, norms, special-token ids) is SD
  v1's (tests/test_model_pairs.py).

The shared tiny components are "the real architecture, smaller". An editor whose pipeline needs something they
lack (LEDITS++ reads cross-attention maps at 1/4 of the latent size, which the two-level tiny UNet does not have)
declares `tiny_overrides` in its own class or YAML; `tiny_configs` merges them into a pipeline cached apart, so no
other editor's tiny weights change.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmark.io.model_cache import WeightsUnavailableError, check_source, tiny_model_dir
from benchmark.models.tokenizer import CLIP_MAX_LENGTH, CLIP_VOCAB_SIZE

# Architecture of the tiny test models (not editing hyperparameters): diffusers' fast-test sizes, with CLIP's real
# vocabulary so the real tokenizer fits. The VAE downsamples by 2, so a 32 px image gives 16x16 latents.
# The UNet's layout is SD v1's at two levels: cross-attention at every resolution but the lowest (diffusers'
# fast-test UNet has the mirror image, attention at the lowest only), so attention control and attention maps see
# the full latent resolution as they do on the real model. One layer per block (SD: 2; a depth, i.e. a size): with
# two, attention at 16x16 makes a CPU UNet call ~2x the fast-test layout's; with one, ~1.3x.
TINY_UNET = {
    "block_out_channels": [32, 64], "layers_per_block": 1, "sample_size": 16, "out_channels": 4,
    "down_block_types": ["CrossAttnDownBlock2D", "DownBlock2D"], "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D"],
    "cross_attention_dim": 32, "attention_head_dim": 8, "norm_num_groups": 32,
}
TINY_VAE = {
    "block_out_channels": [32, 64], "in_channels": 3, "out_channels": 3, "latent_channels": 4,
    "down_block_types": ["DownEncoderBlock2D", "DownEncoderBlock2D"],
    "up_block_types": ["UpDecoderBlock2D", "UpDecoderBlock2D"], "norm_num_groups": 32, "sample_size": 32,
}
# The special-token ids are SD v1's text_encoder config values (0/2/1), not the tokenizer's (49406/49407): with
# eos_token_id == 2 transformers' CLIPTextTransformer pools at the highest token id (the tokenizer's end of text),
# SD v1's path; with 49407 it would take the other one (first position equal to eos_token_id).
SD_TEXT_TOKEN_IDS = {"bos_token_id": 0, "eos_token_id": 2, "pad_token_id": 1}
TINY_TEXT = {
    **SD_TEXT_TOKEN_IDS,
    "hidden_size": 32, "intermediate_size": 37, "layer_norm_eps": 1e-5, "num_attention_heads": 4,
    "num_hidden_layers": 5, "vocab_size": CLIP_VOCAB_SIZE, "max_position_embeddings": CLIP_MAX_LENGTH,
    "projection_dim": 32,
}
# Stable Diffusion v1's training noise schedule (the scheduler config shipped with every SD v1 checkpoint).
SD_SCHEDULER = {
    "num_train_timesteps": 1000, "beta_start": 0.00085, "beta_end": 0.012, "beta_schedule": "scaled_linear",
    "clip_sample": False, "set_alpha_to_one": False, "steps_offset": 1, "skip_prk_steps": True,
}
# Base pipeline class per family; `unet_in_channels` 8 = InstructPix2Pix (noise latents + source-image latents).
FAMILIES = {
    "sd": {"pipeline": "StableDiffusionPipeline", "unet_in_channels": 4},
    "ip2p": {"pipeline": "StableDiffusionInstructPix2PixPipeline", "unet_in_channels": 8},
}
TINY_SEED = 0  # random weights are seeded so the tiny cache folder's content is a function of its key

# SD v1's component configs (CompVis/stable-diffusion-v1-4's unet/, vae/ and text_encoder/ config.json; InstructPix2Pix
# and MagicBrush share them with 8 UNet input channels): what the `random` source builds. Settings left out are the
# classes' defaults, which equal the checkpoint's (tests/test_model_pairs.py compares them with the files).
SD_UNET = {
    "block_out_channels": [320, 640, 1280, 1280], "layers_per_block": 2, "sample_size": 64, "out_channels": 4,
    "down_block_types": ["CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"],
    "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"],
    "cross_attention_dim": 768, "attention_head_dim": 8, "norm_num_groups": 32,
}
SD_VAE = {
    "block_out_channels": [128, 256, 512, 512], "in_channels": 3, "out_channels": 3, "latent_channels": 4,
    "down_block_types": ["DownEncoderBlock2D"] * 4, "up_block_types": ["UpDecoderBlock2D"] * 4,
    "layers_per_block": 2, "norm_num_groups": 32, "sample_size": 512,
}
SD_TEXT = {
    **SD_TEXT_TOKEN_IDS,
    "hidden_size": 768, "intermediate_size": 3072, "layer_norm_eps": 1e-5, "num_attention_heads": 12,
    "num_hidden_layers": 12, "vocab_size": CLIP_VOCAB_SIZE, "max_position_embeddings": CLIP_MAX_LENGTH,
    "projection_dim": 768, "hidden_act": "quick_gelu",
}


# The component configs an editor may override for its tiny pipeline (`DiffusionEditor.tiny_overrides`), and the
# shared value each starts from. "scheduler" is the noise schedule every scheduler class reads from its config.
TINY_COMPONENTS: dict[str, dict[str, Any]] = {"unet": TINY_UNET, "vae": TINY_VAE, "text": TINY_TEXT,
                                              "scheduler": SD_SCHEDULER}


class TinyOverrideError(ValueError):
    """An editor's `tiny_overrides` names a component or a setting the tiny pipeline does not have."""


def _accepted_keys(component: str) -> set[str] | None:
    """Settings a component's class takes (None: any; scheduler classes each read their own subset)."""
    import inspect

    import diffusers
    from transformers import CLIPTextConfig

    if component == "unet":
        return set(inspect.signature(diffusers.UNet2DConditionModel.__init__).parameters) - {"self"}
    if component == "vae":
        return set(inspect.signature(diffusers.AutoencoderKL.__init__).parameters) - {"self"}
    if component == "text":
        return set(CLIPTextConfig().to_dict())
    return None


def _plain(value: Any) -> Any:
    """OmegaConf containers (from a YAML `tiny_overrides`) as plain dicts and lists, so they hash and serialise."""
    from collections.abc import Mapping

    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple) or type(value).__name__ == "ListConfig":
        return [_plain(v) for v in value]
    return value


def merge_tiny_overrides(*layers: Any, what: str = "an editor") -> dict[str, dict[str, Any]]:
    """Overrides of several layers as one (`{component: {setting: value}}`): per component, a later layer's
    settings replace an earlier one's (the editor class attribute first, then its YAML `tiny_overrides`)."""
    from collections.abc import Mapping

    out: dict[str, dict[str, Any]] = {}
    for layer in layers:
        layer = _plain(layer or {})
        if not isinstance(layer, Mapping):
            raise TinyOverrideError(f"tiny_overrides of {what} must map components to settings, not "
                                    f"{type(layer).__name__}")
        for component, settings in layer.items():
            if not isinstance(settings or {}, Mapping):
                raise TinyOverrideError(f"tiny_overrides of {what}: {component} must be a mapping of settings, "
                                        f"not {type(settings).__name__}")
            out[component] = {**out.get(component, {}), **(settings or {})}
    return out


def tiny_configs(overrides: dict[str, dict[str, Any]] | None = None, *, what: str = "an editor") -> dict[str, dict]:
    """The tiny component configs (keys of `TINY_COMPONENTS`) with `overrides` merged in, setting by setting.

    `overrides` maps a component to the settings that replace the shared ones (a list replaces the whole list):
    `{"unet": {"block_out_channels": [32, 32, 64], ...}}`. An unknown component or setting raises
    `TinyOverrideError` naming `what` and the valid names, before anything is built.
    """
    overrides = _plain(overrides or {})
    unknown = sorted(set(overrides) - set(TINY_COMPONENTS))
    if unknown:
        raise TinyOverrideError(f"tiny_overrides of {what}: unknown component(s) {', '.join(unknown)}; "
                                f"valid: {', '.join(TINY_COMPONENTS)}")
    out = {}
    for name, base in TINY_COMPONENTS.items():
        extra = overrides.get(name) or {}
        if not isinstance(extra, dict):
            raise TinyOverrideError(f"tiny_overrides of {what}: {name} must be a mapping of settings, not "
                                    f"{type(extra).__name__}")
        accepted = _accepted_keys(name) if extra else None
        bad = sorted(set(extra) - accepted) if accepted is not None else []
        if bad:
            raise TinyOverrideError(f"tiny_overrides of {what}: {name} has no setting(s) {', '.join(bad)}")
        out[name] = {**base, **extra}
    return out


def _build_tiny(family: str, scheduler: str, configs: dict[str, dict], path: Path) -> None:
    import diffusers
    import torch
    from transformers import CLIPTextConfig, CLIPTextModel

    from benchmark.models.tokenizer import build_clip_tokenizer

    torch.manual_seed(TINY_SEED)
    spec = FAMILIES[family]
    unet = diffusers.UNet2DConditionModel(**{"in_channels": spec["unet_in_channels"], **configs["unet"]})
    vae = diffusers.AutoencoderKL(**configs["vae"])
    text_encoder = CLIPTextModel(CLIPTextConfig(**configs["text"]))
    sched_cls = getattr(diffusers, scheduler)
    sched = sched_cls.from_config(dict(configs["scheduler"]))
    pipe_cls = getattr(diffusers, spec["pipeline"])
    pipe = pipe_cls(vae=vae, text_encoder=text_encoder, tokenizer=build_clip_tokenizer(), unet=unet, scheduler=sched,
                    safety_checker=None, feature_extractor=None, requires_safety_checker=False)
    pipe.save_pretrained(str(path))


def tiny_pipeline_dir(family: str, scheduler: str = "PNDMScheduler",
                      overrides: dict[str, dict[str, Any]] | None = None, *, what: str = "an editor") -> Path:
    """Cache folder of a tiny random-weight pipeline of `family` ('sd' or 'ip2p'), built on first use.

    `overrides`: an editor's changes to the shared tiny components (see `tiny_configs`). Without any, the folder
    (and so every existing editor's tiny weights) is exactly the shared one; with some, it is a folder of its own.
    """
    configs = tiny_configs(overrides, what=what)
    config = {"family": family, "scheduler": scheduler, "unet": configs["unet"], "vae": configs["vae"],
              "text": configs["text"], "sched": configs["scheduler"], "seed": TINY_SEED, "pipeline": FAMILIES[family]}
    return tiny_model_dir(f"diffusion-{family}", config, lambda p: _build_tiny(family, scheduler, configs, p))


def random_pipeline_dir(family: str, scheduler: str = "PNDMScheduler") -> Path:
    """Cache folder of SD v1's real-size pipeline of `family` with random weights (about 4 GB), built on first use."""
    configs = {"unet": SD_UNET, "vae": SD_VAE, "text": SD_TEXT, "scheduler": SD_SCHEDULER}
    config = {"family": family, "scheduler": scheduler, **configs, "seed": TINY_SEED, "pipeline": FAMILIES[family]}
    return tiny_model_dir(f"diffusion-{family}-random", config, lambda p: _build_tiny(family, scheduler, configs, p))


def resolve_device(device: str) -> str:
    """'auto' -> 'cuda' when available, else 'cpu'."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


DTYPES = ("auto", "fp16", "bf16", "fp32")


class DtypeError(ValueError):
    """An editor's `dtype` is not one of `DTYPES`."""


def check_dtype(dtype: Any, *, what: str = "a diffusion editor") -> str:
    """`dtype` itself when it is one of `DTYPES`, else `DtypeError` naming the valid values (and the likely one)."""
    if dtype in DTYPES:
        return str(dtype)
    aliases = {"float16": "fp16", "half": "fp16", "bfloat16": "bf16", "float32": "fp32", "float": "fp32"}
    hint = f" (did you mean {aliases[str(dtype).lower()]}?)" if str(dtype).lower() in aliases else ""
    raise DtypeError(f"{what}: dtype {dtype!r} is not one of {', '.join(DTYPES)}{hint}; set it with "
                     f"editor.dtype=<value>")


def resolve_dtype(dtype: str, device: str, *, what: str = "a diffusion editor") -> Any:
    """'auto' -> fp16 on CUDA, fp32 elsewhere (CPU kernels are fp32-first); an unknown name raises `DtypeError`."""
    import torch

    dtype = check_dtype(dtype, what=what)
    if dtype == "auto":
        return torch.float16 if device.startswith("cuda") else torch.float32
    return {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[dtype]


# How `profile=pretrained` weights are stored: a diffusers folder on the hub (`model_id` at `revision`), or one
# original (LDM / CompVis-format) checkpoint file loaded with diffusers' `from_single_file` (`single_file`).
CHECKPOINT_FORMATS = ("diffusers", "single_file")
SINGLE_FILE_KEYS = ("repo_id", "filename", "revision", "config", "config_revision", "extract_ema")


class SingleFileUnavailableError(WeightsUnavailableError):
    """The original checkpoint file (`checkpoint: single_file`) cannot be loaded; the message names the file and
    both fixes (download it once, or load the diffusers form)."""

    def __init__(self, what: str, spec: dict[str, Any], cause: BaseException | None = None) -> None:
        weights_id = f"{spec['repo_id']}/{spec['filename']}@{spec['revision']}"
        super().__init__(what, weights_id, cause)
        self.args = (f"{self.args[0]} The file is the hub file {spec['filename']!r} of {spec['repo_id']!r} (revision "
                     f"{spec['revision']}), with the component configs of {spec['config']!r}@{spec['config_revision']}: "
                     "fetch it with network access (`editmeter weights editor=<name> editor.checkpoint=single_file`), "
                     "or load the diffusers form instead (`editor.checkpoint=diffusers`).",)


def single_file_spec(single_file: Any, *, what: str) -> dict[str, Any]:
    """`single_file` as a plain dict with every key of `SINGLE_FILE_KEYS`; a ValueError naming what is missing."""
    spec = dict(_plain(single_file or {}))
    missing = [k for k in SINGLE_FILE_KEYS if spec.get(k) is None]
    unknown = sorted(set(spec) - set(SINGLE_FILE_KEYS))
    if missing or unknown:
        raise ValueError(f"{what}: checkpoint=single_file needs single_file.{{{', '.join(SINGLE_FILE_KEYS)}}}"
                         + (f"; missing: {', '.join(missing)}" if missing else "")
                         + (f"; unknown: {', '.join(unknown)}" if unknown else ""))
    return spec


def _load_single_file(cls: Any, spec: dict[str, Any], torch_dtype: Any, *, what: str) -> tuple[Any, dict[str, Any]]:
    """Download the original checkpoint file into the Hugging Face cache (`hf_hub_download`, pinned revision) and
    build `cls` from it with `from_single_file`, component configs from `spec['config']` at its revision."""
    import re

    import huggingface_hub
    from huggingface_hub.errors import EntryNotFoundError

    try:
        path = huggingface_hub.hf_hub_download(spec["repo_id"], spec["filename"], revision=spec["revision"])
        pipe = cls.from_single_file(path, config=spec["config"], revision=spec["config_revision"],
                                    extract_ema=bool(spec["extract_ema"]), dtype=torch_dtype, safety_checker=None,
                                    requires_safety_checker=False)
    except (OSError, ValueError, EntryNotFoundError) as err:  # offline / not cached / no such file or revision
        raise SingleFileUnavailableError(what, spec, err) from err
    # the hub cache keeps files under snapshots/<commit>/: the commit actually loaded, even for a branch name
    commit = Path(path).parent.name if re.fullmatch(r"[0-9a-f]{40}", Path(path).parent.name) else spec["revision"]
    prov = {"weights": "pretrained", "model_id": f"{spec['repo_id']}/{spec['filename']}", "revision": commit,
            "checkpoint": "single_file", "config": f"{spec['config']}@{spec['config_revision']}",
            "extract_ema": bool(spec["extract_ema"])}
    return pipe, prov


def load_pipeline(
    family: str,
    *,
    weights: str,
    model_id: str,
    revision: str,
    device: str = "auto",
    dtype: str = "auto",
    what: str = "a diffusion editor",
    tiny_overrides: dict[str, dict[str, Any]] | None = None,
    checkpoint: str = "diffusers",
    single_file: dict[str, Any] | None = None,
) -> tuple[Any, dict[str, Any]]:
    """Load the base pipeline of `family` from `weights` ('pretrained' | 'tiny' | 'random'); returns (pipeline,
    provenance).

    Every source goes through `PipelineClass.from_pretrained(source)`. A missing pretrained checkpoint raises
    `WeightsUnavailableError` naming it and the `PROFILE=tiny` fallback. `tiny_overrides` (see `tiny_configs`)
    change the tiny components only; the pretrained checkpoint is what it is. The safety checker is not loaded: a
    benchmark must score what the model made, and a blanked image would be recorded as a failure anyway.

    `checkpoint='single_file'` (pretrained only) loads the original checkpoint file `single_file` describes
    (`SINGLE_FILE_KEYS`: hub repo, file name and revision, the diffusers repo and revision whose component configs
    fit it, whether to take its EMA weights) with `PipelineClass.from_single_file` instead of `model_id`: the way to
    check a diffusers conversion against the authors' file. Tiny and random weights ignore it (they are built here).
    """
    import diffusers

    check_source(weights)
    if checkpoint not in CHECKPOINT_FORMATS:
        raise ValueError(f"{what}: checkpoint={checkpoint!r}; expected one of {', '.join(CHECKPOINT_FORMATS)}")
    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, dev, what=what)
    cls = getattr(diffusers, FAMILIES[family]["pipeline"])
    single = weights == "pretrained" and checkpoint == "single_file"
    if single:
        pipe, prov = _load_single_file(cls, single_file_spec(single_file, what=what), torch_dtype, what=what)
    elif weights == "tiny":
        overrides = {k: v for k, v in _plain(tiny_overrides or {}).items() if v}
        source, kwargs = str(tiny_pipeline_dir(family, overrides=overrides, what=what)), {}
        prov = {"weights": "tiny", "model_id": f"tiny-{family}", "revision": Path(source).name}
        if overrides:  # only then: the provenance (and run folder) of editors without overrides is unchanged
            prov["tiny_overrides"] = overrides
    elif weights == "random":  # real size: an editor's tiny_overrides do not apply
        source, kwargs = str(random_pipeline_dir(family)), {}
        prov = {"weights": "random", "model_id": f"random-{family}", "revision": Path(source).name}
    else:
        source, kwargs = model_id, {"revision": revision}
        prov = {"weights": "pretrained", "model_id": model_id, "revision": revision}
    if not single:
        try:
            pipe = cls.from_pretrained(source, dtype=torch_dtype, safety_checker=None, requires_safety_checker=False,
                                       **kwargs)
        except (OSError, ValueError) as err:  # hub unreachable / not cached / incomplete snapshot
            if weights != "pretrained":
                raise
            raise WeightsUnavailableError(what, f"{model_id}@{revision}", err) from err
    pipe = pipe.to(dev)
    pipe.set_progress_bar_config(disable=True)
    if dev.startswith("cuda"):
        # SDPA is diffusers' default processor on torch 2; set it explicitly so provenance is certain.
        from diffusers.models.attention_processor import AttnProcessor2_0

        pipe.unet.set_attn_processor(AttnProcessor2_0())
    prov.update({"device": dev, "dtype": str(torch_dtype).removeprefix("torch."), "pipeline": cls.__name__})
    return pipe, prov


def set_scheduler(pipe: Any, name: str, **overrides: Any) -> None:
    """Swap the pipeline's scheduler for diffusers class `name`, keeping the checkpoint's noise schedule; `overrides`
    replace settings of the checkpoint's scheduler config (e.g. `steps_offset=0`)."""
    import diffusers

    pipe.scheduler = getattr(diffusers, name).from_config(pipe.scheduler.config, **overrides)
