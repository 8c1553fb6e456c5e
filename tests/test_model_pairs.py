"""Every tiny stand-in differs from its pretrained model only in sizes and weights.

For each pair (the pretrained architecture, built from its config without downloading anything, and the tiny
model as the loaders build it) this compares every architectural switch that is not a size: activation functions,
normalisation types and epsilons, convolution kernels / strides (patch sizes), attention implementation, bias use,
pre/post norms, block layouts, image mean / std / interpolation, tokenisers' context length, detector thresholds.
A difference fails the test, so a mistake like building OpenAI's CLIP with GELU instead of QuickGELU in both
profiles (which no score test can see) cannot come back. Where the tiny model is deliberately another
architecture, the test says so and why, and compares what can be compared.

Pretrained configs come from the libraries (open_clip's model configs, torchvision's builders) or are written here
/ in the loaders with the pinned revisions' values (DINOv2, BLIP VQA, Stable Diffusion v1 components).
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import torch
from torch import nn

# Keys that record provenance or random-init scale, not architecture.
BOOKKEEPING = {"_name_or_path", "architectures", "dtype", "torch_dtype", "transformers_version", "_commit_hash",
               "_diffusers_version", "_class_name", "_use_default_values", "initializer_range", "initializer_factor",
               "_attn_implementation_autoset", "output_attentions", "output_hidden_states", "return_dict"}


def config_diff(real: dict[str, Any], tiny: dict[str, Any], sizes: set[str], prefix: str = "") -> list[str]:
    """Keys whose values differ, recursing into nested configs; `sizes` (dotted) and bookkeeping are skipped."""
    out = []
    for key in sorted(set(real) | set(tiny)):
        name = f"{prefix}{key}"
        if key in BOOKKEEPING or name in sizes:
            continue
        a, b = real.get(key, "<absent>"), tiny.get(key, "<absent>")
        if isinstance(a, dict) and isinstance(b, dict):
            out += config_diff(a, b, sizes, f"{name}.")
        elif a != b:
            out.append(f"{name}: pretrained {a!r} != tiny {b!r}")
    return out


def module_switches(model: nn.Module) -> dict[str, set]:
    """Size-free description of a network: which module classes it uses and how each kind is set up."""
    out: dict[str, set] = defaultdict(set)
    for m in model.modules():
        cls = type(m).__name__
        if cls in ("ModuleList", "Sequential", "ModuleDict", "Identity"):
            continue
        out["module classes"].add(cls)
        if isinstance(m, nn.GELU):
            out["gelu approximate"].add(m.approximate)
        if isinstance(m, nn.LayerNorm):
            out["layer norm"].add((m.eps, m.elementwise_affine, m.bias is not None))
        if isinstance(m, nn.GroupNorm):
            out["group norm"].add((m.eps, m.affine))
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            out["batch norm"].add((cls, m.eps, m.affine, m.track_running_stats))
        if type(m).__name__ == "FrozenBatchNorm2d":
            out["batch norm"].add((cls, m.eps))
        if isinstance(m, nn.Conv2d):
            out["conv"].add((m.kernel_size, m.stride, m.padding, m.dilation, m.groups == m.in_channels > 1,
                             m.bias is not None, m.padding_mode))
        if isinstance(m, nn.Linear):
            out["linear bias"].add(m.bias is not None)
        if isinstance(m, nn.MultiheadAttention):
            out["multi-head attention"].add((m.batch_first, m._qkv_same_embed_dim, m.in_proj_bias is not None,
                                             m.bias_k is not None))
        if isinstance(m, nn.Dropout):
            out["dropout p"].add(m.p)
        for attr in ("eps", "variance_epsilon", "act_fn", "activation_fn", "intermediate_act_fn"):
            v = getattr(m, attr, None)
            if isinstance(v, float | nn.Module) and not isinstance(m, nn.modules.batchnorm._BatchNorm | nn.LayerNorm |
                                                                   nn.GroupNorm):
                out[f"{cls}.{attr}"].add(type(v).__name__ if isinstance(v, nn.Module) else v)
    return dict(out)


def switch_diff(real: nn.Module, tiny: nn.Module, allowed: dict[str, str] | None = None) -> list[str]:
    a, b = module_switches(real), module_switches(tiny)
    out = []
    for kind in sorted(set(a) | set(b)):
        if allowed and kind in allowed:
            continue
        if a.get(kind, set()) != b.get(kind, set()):
            out.append(f"{kind}: pretrained {sorted(map(str, a.get(kind, set())))} != tiny "
                       f"{sorted(map(str, b.get(kind, set())))}")
    return out


def meta(build):
    """Build a (large) pretrained-shape model on the meta device: structure only, no memory, no download."""
    with torch.device("meta"):
        return build()


# -- CLIP ---------------------------------------------------------------------------------------------------

def test_clip_pair_and_quick_gelu_for_the_openai_weights():
    import open_clip

    from benchmark.models.clip import CLIP_MEAN, CLIP_STD, TINY_CLIP_SIZES, load_clip, tiny_clip_config
    from benchmark.plan.config import CONFIG_DIR

    cfg = __import__("yaml").safe_load((CONFIG_DIR / "metrics" / "hatie.yaml").read_text())["hatie"]["clip"]
    arch, tag = cfg["arch"], cfg["tag"]
    real = meta(lambda: open_clip.create_model(arch, pretrained=None, force_quick_gelu=tag == "openai", device="meta"))
    tiny = load_clip("tiny", arch, tag).model
    assert tag == "openai" and any(type(m).__name__ == "QuickGELU" for m in real.modules())  # OpenAI's activation
    sizes = {"embed_dim", *(f"{k}.{s}" for k, v in TINY_CLIP_SIZES.items() if isinstance(v, dict) for s in v)}
    real_cfg = {**open_clip.get_model_config(arch), **({"quick_gelu": True} if tag == "openai" else {})}
    assert config_diff(real_cfg, tiny_clip_config(arch, tag), sizes) == []
    assert switch_diff(real, tiny) == []
    assert real.visual.preprocess_cfg == tiny.visual.preprocess_cfg
    assert tuple(real.visual.preprocess_cfg["mean"]) == CLIP_MEAN and tuple(real.visual.preprocess_cfg["std"]) == CLIP_STD
    assert real.visual.preprocess_cfg["interpolation"] == "bicubic"  # what ClipEncoder.preprocess uses
    assert (real.context_length, real.vocab_size) == (tiny.context_length, tiny.vocab_size)


def test_the_comparison_sees_gelu_versus_quick_gelu():
    """The mistake this file exists for: plain `ViT-B-32` (GELU) against the OpenAI-weights build (QuickGELU)."""
    import open_clip

    gelu = meta(lambda: open_clip.create_model("ViT-B-32", pretrained=None, device="meta"))
    quick = meta(lambda: open_clip.create_model("ViT-B-32", pretrained=None, force_quick_gelu=True, device="meta"))
    assert any("module classes" in d and "QuickGELU" in d for d in switch_diff(gelu, quick))


# -- DINOv2 --------------------------------------------------------------------------------------------------

DINO_PROCESSOR = {"crop_size": 224, "image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225]}
DINO_SIZES = {"hidden_size", "num_hidden_layers", "num_attention_heads", "stage_names", "out_indices", "out_features"}


def test_dino_pair():
    from transformers import Dinov2Config, Dinov2Model

    from benchmark.models.dino import BASE_DINO_CONFIG, DINO_INPUT, IMAGENET_MEAN, IMAGENET_STD, load_dino

    real = meta(lambda: Dinov2Model(Dinov2Config(**BASE_DINO_CONFIG)))
    tiny = load_dino("tiny").model
    assert config_diff(real.config.to_dict(), tiny.config.to_dict(), DINO_SIZES) == []
    assert real.config._attn_implementation == tiny.config._attn_implementation
    assert switch_diff(real, tiny) == []
    # both go through DinoEncoder: the pinned processor's crop size, mean and std (HATIE resizes to the crop size)
    assert (DINO_INPUT, list(IMAGENET_MEAN), list(IMAGENET_STD)) == tuple(DINO_PROCESSOR.values())


# -- BLIP VQA ------------------------------------------------------------------------------------------------

# Salesforce/blip-vqa-base at VQA_REVISION: transformers' BlipConfig defaults are this model's, except the text
# vocabulary (BERT's 30522 + [DEC] + [ENC]).
BLIP_TEXT = {"vocab_size": 30524, "bos_token_id": 30522, "sep_token_id": 102, "pad_token_id": 0}
# The tiny VQA model has its own 25-word vocabulary (the real tokenizer's 30k-word vocab file is not in any wheel):
# the vocabulary and the ids of its special tokens are sizes/weights of the embedding, not switches.
BLIP_SIZES = {"projection_dim", "image_text_hidden_size",
              *(f"text_config.{k}" for k in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                                             "intermediate_size", "encoder_hidden_size", "max_position_embeddings",
                                             "bos_token_id", "pad_token_id", "sep_token_id", "eos_token_id",
                                             "decoder_start_token_id")),
              *(f"vision_config.{k}" for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                               "intermediate_size", "image_size"))}


def test_blip_vqa_pair():
    from transformers import BlipConfig, BlipForQuestionAnswering, BlipImageProcessor

    from benchmark.models.vqa import load_vqa

    real = meta(lambda: BlipForQuestionAnswering(BlipConfig(text_config=BLIP_TEXT)))
    scorer = load_vqa("tiny")
    tiny = scorer.model
    assert config_diff(real.config.to_dict(), tiny.config.to_dict(), BLIP_SIZES) == []
    assert switch_diff(real, tiny) == []
    real_proc = BlipImageProcessor().to_dict()  # the pinned preprocessor_config.json: BlipImageProcessor's defaults
    tiny_proc = scorer.processor.image_processor.to_dict()
    assert config_diff(real_proc, tiny_proc, {"size", "processor_class", "image_processor_type"}) == []
    assert scorer.processor.tokenizer.do_lower_case


# -- LPIPS ---------------------------------------------------------------------------------------------------

def test_lpips_pair():
    import warnings

    import lpips

    from benchmark.models.perceptual import load_lpips

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        real = lpips.LPIPS(net="alex", pretrained=True, pnet_rand=True, verbose=False)  # the real layout, no download
    tiny = load_lpips("tiny").model
    assert switch_diff(real, tiny) == []
    assert {k: v.shape for k, v in real.state_dict().items()} == {k: v.shape for k, v in tiny.state_dict().items()}
    assert (real.version, real.lpips, real.spatial) == (tiny.version, tiny.lpips, tiny.spatial)


# -- FID features --------------------------------------------------------------------------------------------

def test_fid_features_pair(monkeypatch):
    """Deliberately different: the tiny extractor is a 2-block CNN, not Inception-v3, because Inception's widths are
    fixed in code (no size knob) and the real network costs ~0.1 s per image on CPU. What can match is checked: the
    input transform (bilinear to 299 px, scaled to [-1, 1]) and Inception's building block (BasicConv2d: conv
    without bias + BatchNorm eps 0.001 + ReLU)."""
    import torchvision
    from pytorch_fid import inception as fid_inception

    from benchmark.models.inception import _Resized, load_fid_extractor

    # pytorch-fid downloads its weights inside the constructor: keep the structure, skip the download
    monkeypatch.setattr(fid_inception, "load_state_dict_from_url", lambda *a, **k: {})
    monkeypatch.setattr(torchvision.models.inception.Inception3, "load_state_dict", lambda self, *a, **k: None)
    real = fid_inception.InceptionV3([fid_inception.InceptionV3.BLOCK_INDEX_BY_DIM[2048]])
    tiny = load_fid_extractor("tiny").model
    assert real.resize_input and real.normalize_input and isinstance(tiny, _Resized)
    x = torch.rand(2, 3, 64, 64)
    seen = []
    hook = tiny.net[0].register_forward_pre_hook(lambda m, args: seen.append(args[0]))
    tiny(x)
    hook.remove()
    want = 2 * torch.nn.functional.interpolate(x, size=(299, 299), mode="bilinear", align_corners=False) - 1
    assert torch.equal(seen[0], want)  # pytorch-fid's InceptionV3.forward input handling
    block = module_switches(tiny.net)
    real_sw = module_switches(real)
    assert block["batch norm"] and block["batch norm"] <= real_sw["batch norm"]  # Inception's BatchNorm set-up
    assert block.get("linear bias", set()) <= real_sw.get("linear bias", set())
    assert {c for c in block["conv"] if c[0] == (3, 3) and c[1] == (2, 2)} <= real_sw["conv"]
    assert "BasicConv2d" in block["module classes"] and "BasicConv2d" in real_sw["module classes"]


# -- segmenter -----------------------------------------------------------------------------------------------

# Proposal counts and the input resolution are sizes (the stand-in keeps CPU tests fast).
DETECTOR_SIZES = {"transform.min_size", "transform.max_size", "rpn._pre_nms_top_n", "rpn._post_nms_top_n"}


def _detector_settings(model: Any) -> dict[str, Any]:
    rpn, heads, tr = model.rpn, model.roi_heads, model.transform
    ag = rpn.anchor_generator
    return {
        "transform.image_mean": tr.image_mean, "transform.image_std": tr.image_std, "transform.min_size": tr.min_size,
        "transform.max_size": tr.max_size, "transform.size_divisible": tr.size_divisible,
        "transform.fixed_size": tr.fixed_size, "anchors": (ag.sizes, ag.aspect_ratios),
        "rpn.nms_thresh": rpn.nms_thresh, "rpn.score_thresh": rpn.score_thresh,
        "rpn._pre_nms_top_n": rpn._pre_nms_top_n["testing"], "rpn._post_nms_top_n": rpn._post_nms_top_n["testing"],
        "rpn.box_coder": rpn.box_coder.weights, "rpn.head_convs": len(rpn.head.conv),
        "roi.score_thresh": heads.score_thresh, "roi.nms_thresh": heads.nms_thresh,
        "roi.detections_per_img": heads.detections_per_img, "roi.box_coder": heads.box_coder.weights,
        "roi.box_pool": (heads.box_roi_pool.featmap_names, heads.box_roi_pool.output_size,
                         heads.box_roi_pool.sampling_ratio),
        "roi.mask_pool": (heads.mask_roi_pool.featmap_names, heads.mask_roi_pool.output_size,
                          heads.mask_roi_pool.sampling_ratio),
        "roi.box_head": [type(heads.box_head).__name__, *(type(m).__name__ for m in heads.box_head.children())],
        "roi.mask_head": [type(heads.mask_head).__name__, *(type(m).__name__ for m in heads.mask_head.children())],
        "fpn": (type(model.backbone.fpn.extra_blocks).__name__, model.backbone.out_channels,
                sorted(model.backbone.body.return_layers.values())),
    }


def test_segmenter_pair():
    """torchvision backend. The body is deliberately shallower (one Bottleneck block per stage instead of 3-4-6-3:
    a depth, i.e. a size); every other part follows `maskrcnn_resnet50_fpn_v2`'s builder."""
    from torchvision.models.detection import maskrcnn_resnet50_fpn_v2

    from benchmark.models.segmenter import SCORE_THRESHOLD, load_torchvision_segmenter

    real = meta(lambda: maskrcnn_resnet50_fpn_v2(weights=None, weights_backbone=None, box_score_thresh=SCORE_THRESHOLD))
    tiny = load_torchvision_segmenter("tiny").model
    a, b = _detector_settings(real), _detector_settings(tiny)
    assert {k: (a[k], b[k]) for k in a if a[k] != b[k] and k not in DETECTOR_SIZES} == {}
    assert switch_diff(real, tiny) == []


# -- diffusion pipelines (benchmark/models/diffusion.py) -----------------------------------------------------

# CompVis/stable-diffusion-v1-4 @ 133a221b (unet/, vae/, text_encoder/, scheduler/ config.json); InstructPix2Pix
# and MagicBrush share these with in_channels 8 and their own scheduler class.
SD_UNET = {"act_fn": "silu", "attention_head_dim": 8, "block_out_channels": [320, 640, 1280, 1280],
           "center_input_sample": False, "cross_attention_dim": 768,
           "down_block_types": ["CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"],
           "downsample_padding": 1, "flip_sin_to_cos": True, "freq_shift": 0, "in_channels": 4, "layers_per_block": 2,
           "mid_block_scale_factor": 1, "norm_eps": 1e-05, "norm_num_groups": 32, "out_channels": 4, "sample_size": 64,
           "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"]}
SD_VAE = {"act_fn": "silu", "block_out_channels": [128, 256, 512, 512], "down_block_types": ["DownEncoderBlock2D"] * 4,
          "in_channels": 3, "latent_channels": 4, "layers_per_block": 2, "norm_num_groups": 32, "out_channels": 3,
          "sample_size": 512, "up_block_types": ["UpDecoderBlock2D"] * 4}
SD_TEXT = {"attention_dropout": 0.0, "bos_token_id": 0, "dropout": 0.0, "eos_token_id": 2, "hidden_act": "quick_gelu",
           "hidden_size": 768, "intermediate_size": 3072, "layer_norm_eps": 1e-05, "max_position_embeddings": 77,
           "num_attention_heads": 12, "num_hidden_layers": 12, "pad_token_id": 1, "projection_dim": 768,
           "vocab_size": 49408}
SD_SCHEDULER_PINNED = {"beta_end": 0.012, "beta_schedule": "scaled_linear", "beta_start": 0.00085,
                       "num_train_timesteps": 1000, "set_alpha_to_one": False, "skip_prk_steps": True, "steps_offset": 1,
                       "trained_betas": None, "clip_sample": False}


def _block_layout(types: list[str]) -> list[bool]:
    """Which resolution levels carry cross-attention, as a pattern over the levels (depth is a size)."""
    return [t.startswith("CrossAttn") for t in types]


def _layout_equivalent(real: list[str], tiny: list[str]) -> bool:
    """Same pattern at another depth: SD v1 has cross-attention at every level but the lowest-resolution one (down
    path; mirrored on the way up)."""
    r, t = _block_layout(real), _block_layout(tiny)
    if r[0] != r[-1]:  # down: attention at the top, none at the bottom; up: the mirror
        return t[0] == r[0] and t[-1] == r[-1] and all(x == r[0] for x in t[:-1]) if r[0] else \
            t[0] == r[0] and t[-1] == r[-1] and all(x == r[-1] for x in t[1:])
    return set(t) == set(r)


def _tiny_component_dir(component: str):
    from benchmark.models.diffusion import tiny_pipeline_dir

    return tiny_pipeline_dir("sd") / component


def _tiny_component_config(component: str) -> dict[str, Any]:
    from benchmark.models.diffusion import tiny_pipeline_dir

    folder = tiny_pipeline_dir("sd")
    name = "scheduler_config.json" if component == "scheduler" else "config.json"
    return json.loads((folder / component / name).read_text())


UNET_SIZES = {"block_out_channels", "cross_attention_dim", "sample_size", "layers_per_block", "down_block_types",
              "up_block_types"}


def test_diffusion_unet_pair():
    from diffusers import UNet2DConditionModel

    real = meta(lambda: UNet2DConditionModel(**SD_UNET)).config
    tiny = _tiny_component_config("unet")
    with torch.device("meta"):
        tiny = dict(UNet2DConditionModel.from_config(tiny).config)
    assert config_diff(dict(real), tiny, UNET_SIZES) == []
    assert _layout_equivalent(SD_UNET["down_block_types"], tiny["down_block_types"])
    assert _layout_equivalent(SD_UNET["up_block_types"], tiny["up_block_types"])
    # the built modules too (norms, activations, convolutions, attention), as the loaders load them
    built = UNet2DConditionModel.from_pretrained(_tiny_component_dir("unet"))
    assert switch_diff(meta(lambda: UNet2DConditionModel(**SD_UNET)), built) == []


def test_editor_tiny_overrides_keep_the_unet_layout():
    """An editor's tiny UNet (LEDITS++ needs more levels) may change sizes, not SD v1's cross-attention pattern."""
    from benchmark.models.diffusion import tiny_configs
    from editors.ledits import LeditsPPEditor

    unet = tiny_configs(LeditsPPEditor.tiny_overrides)["unet"]
    assert _layout_equivalent(SD_UNET["down_block_types"], unet["down_block_types"])
    assert _layout_equivalent(SD_UNET["up_block_types"], unet["up_block_types"])


def test_diffusion_vae_pair():
    from diffusers import AutoencoderKL

    sizes = {"block_out_channels", "layers_per_block", "sample_size", "down_block_types", "up_block_types"}
    with torch.device("meta"):
        real = dict(AutoencoderKL(**SD_VAE).config)
        tiny = dict(AutoencoderKL.from_config(_tiny_component_config("vae")).config)
    assert config_diff(real, tiny, sizes) == []
    assert set(real["down_block_types"]) == set(tiny["down_block_types"])  # the same block at another depth
    assert set(real["up_block_types"]) == set(tiny["up_block_types"])
    assert switch_diff(meta(lambda: AutoencoderKL(**SD_VAE)), AutoencoderKL.from_pretrained(_tiny_component_dir("vae"))) == []


def test_diffusion_text_encoder_pair():
    from transformers import CLIPTextConfig, CLIPTextModel

    sizes = {"hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers", "projection_dim"}
    known = set(CLIPTextConfig().to_dict())  # `dropout` in SD's file is not a CLIPTextConfig field any more
    real = {k: v for k, v in CLIPTextConfig(**SD_TEXT).to_dict().items() if k in known}
    tiny = {k: v for k, v in CLIPTextConfig(**_tiny_component_config("text_encoder")).to_dict().items() if k in known}
    assert config_diff(real, tiny, sizes) == []
    built = CLIPTextModel.from_pretrained(_tiny_component_dir("text_encoder"))
    assert switch_diff(meta(lambda: CLIPTextModel(CLIPTextConfig(**SD_TEXT))), built) == []


def test_random_source_is_sd_v1_at_real_size():
    """`profile=random` builds SD v1's components exactly: every setting of the checkpoint's config files, sizes
    included (its throughput and memory are the real model's), through the builder the tiny ones use."""
    from diffusers import AutoencoderKL, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    from benchmark.models import diffusion as D

    plain = lambda cfg: {k: list(v) if isinstance(v, tuple) else v for k, v in dict(cfg).items()}  # noqa: E731
    unet = meta(lambda: UNet2DConditionModel(**{"in_channels": 4, **D.SD_UNET}))
    assert config_diff(plain(meta(lambda: UNet2DConditionModel(**SD_UNET)).config), plain(unet.config), set()) == []
    assert 859e6 < sum(p.numel() for p in unet.parameters()) < 860e6  # SD v1's UNet: 859.5M parameters
    vae = meta(lambda: AutoencoderKL(**D.SD_VAE))
    assert config_diff(plain(meta(lambda: AutoencoderKL(**SD_VAE)).config), plain(vae.config), set()) == []
    known = set(CLIPTextConfig().to_dict())
    want = {k: v for k, v in CLIPTextConfig(**SD_TEXT).to_dict().items() if k in known}
    got = {k: v for k, v in CLIPTextConfig(**D.SD_TEXT).to_dict().items() if k in known}
    assert config_diff(want, got, set()) == []
    assert switch_diff(meta(lambda: CLIPTextModel(CLIPTextConfig(**SD_TEXT))),
                       meta(lambda: CLIPTextModel(CLIPTextConfig(**D.SD_TEXT)))) == []


def test_random_pipelines_load_through_the_tiny_builder(monkeypatch, tmp_path):
    """`weights=random` reads the folder `random_pipeline_dir` builds (here: with the tiny configs swapped in, so the
    test stays small) and records itself as random, never as pretrained."""
    from benchmark.models import diffusion as D

    monkeypatch.setenv("EDITMETER_CACHE", str(tmp_path))
    for name in ("SD_UNET", "SD_VAE", "SD_TEXT"):
        monkeypatch.setattr(D, name, {"SD_UNET": D.TINY_UNET, "SD_VAE": D.TINY_VAE, "SD_TEXT": D.TINY_TEXT}[name])
    pipe, prov = D.load_pipeline("ip2p", weights="random", model_id="timbrooks/instruct-pix2pix", revision="x",
                                 device="cpu")
    assert prov["weights"] == "random" and prov["model_id"] == "random-ip2p"
    assert pipe.unet.config.in_channels == 8
    assert D.random_pipeline_dir("ip2p").is_relative_to(tmp_path)


def test_diffusion_scheduler_pair():
    """The noise schedule every SD v1 checkpoint ships; the scheduler class itself is the editor's choice
    (`set_scheduler`) and the same for both profiles."""
    from benchmark.models.diffusion import SD_SCHEDULER

    tiny = _tiny_component_config("scheduler")
    assert {k: tiny.get(k) for k in SD_SCHEDULER_PINNED} == SD_SCHEDULER_PINNED
    assert {k: v for k, v in SD_SCHEDULER.items() if k in SD_SCHEDULER_PINNED} == \
        {k: v for k, v in SD_SCHEDULER_PINNED.items() if k in SD_SCHEDULER}


# -- DINO v1 (EditVal ViT-B/16, MagicBrush ViT-S/16) ---------------------------------------------------------

# pooler_output_size defaults to hidden_size (no pooler is built: add_pooling_layer=False)
DINO_V1_SIZES = {"hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "pooler_output_size"}


def test_dino_v1_pairs():
    from transformers import ViTConfig, ViTModel

    from benchmark.models.dino_v1 import BASE_CONFIGS, DINO_V1_MODELS, load_dino_v1

    for model_id, kind in DINO_V1_MODELS.items():
        real = meta(lambda kind=kind: ViTModel(ViTConfig(**BASE_CONFIGS[kind]), add_pooling_layer=False))
        tiny = load_dino_v1("tiny", model_id=model_id).model
        assert config_diff(real.config.to_dict(), tiny.config.to_dict(), DINO_V1_SIZES) == []
        assert switch_diff(real, tiny) == []


def test_dino_v1_features_follow_the_recipe():
    import torch

    from benchmark.models.dino_v1 import load_dino_v1

    enc = load_dino_v1("tiny", recipe="resize256-crop224")
    x = torch.rand(2, 3, 300, 200)
    f = enc.embed_images(x)
    assert f.shape == (2, 32)
    # batch in, batch out, order kept: one image alone gives its row of the batch (0 apart at batch sizes 2
    # and 1, measured here (tests/helpers/spread_probe.py, the project's 2-core machine); 1e-5 is ~100 ulps of
    # unit-norm features)
    assert torch.allclose(enc.embed_images(x[1:]), f[1:], atol=1e-5)
    # the centre crop ignores a border outside it
    y = x.clone()
    y[..., :5, :] = 0
    assert torch.allclose(enc.embed_images(y), f, atol=1e-5)
    assert load_dino_v1("tiny", recipe="resize224").embed_images(y).sub(f).abs().max() > 1e-4


# -- AugCLIP: CLIP ViT-B/16 and the attribute LLM -------------------------------------------------------------

def test_augclip_clip_pair():
    """AugCLIP's CLIP (the paper's ViT-B/16, OpenAI weights): the tiny model keeps patch size 16 and QuickGELU."""
    import open_clip

    from benchmark.models.clip import TINY_CLIP_SIZES, load_clip, tiny_clip_config
    from benchmark.plan.config import CONFIG_DIR

    cfg = __import__("yaml").safe_load((CONFIG_DIR / "metrics" / "augclip.yaml").read_text())["augclip"]["clip"]
    arch, tag = cfg["arch"], cfg["tag"]
    real = meta(lambda: open_clip.create_model(arch, pretrained=None, force_quick_gelu=tag == "openai", device="meta"))
    tiny = load_clip("tiny", arch, tag).model
    sizes = {"embed_dim", *(f"{k}.{s}" for k, v in TINY_CLIP_SIZES.items() if isinstance(v, dict) for s in v)}
    real_cfg = {**open_clip.get_model_config(arch), **({"quick_gelu": True} if tag == "openai" else {})}
    assert config_diff(real_cfg, tiny_clip_config(arch, tag), sizes) == []
    assert switch_diff(real, tiny) == []
    assert real.visual.patch_size == tiny.visual.patch_size == (16, 16)


def test_augclip_llm_pair():
    """Qwen2.5-0.5B-Instruct vs its tiny stand-in. Deliberately different besides widths: the vocabulary (256 byte
    symbols + Qwen's special tokens instead of 151,936 tokens, which cannot be fetched offline) and so the special
    token ids; the tokenizer class, its byte-level pre-tokenisation and the ChatML prompt format are Qwen's."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from benchmark.models.llm import BASE_LLM_CONFIG, TINY_LLM_SIZES, load_causal_lm

    real = meta(lambda: Qwen2ForCausalLM(Qwen2Config(**BASE_LLM_CONFIG)))
    tiny, tok, _ = load_causal_lm("tiny")
    sizes = set(TINY_LLM_SIZES) | {"vocab_size", "bos_token_id", "eos_token_id", "pad_token_id", "head_dim",
                                   "layer_types"}
    assert config_diff(real.config.to_dict(), tiny.config.to_dict(), sizes) == []
    assert switch_diff(real, tiny) == []
    assert type(tok).__name__ == "Qwen2Tokenizer" and "<|im_start|>" in tok.apply_chat_template(
        [{"role": "user", "content": "x"}], tokenize=False, add_generation_prompt=True)


# -- BPM: open-vocabulary detectors and SAM (benchmark/models/grounding.py) ----------------------------------

def _flat_sizes(tiny: dict[str, Any], prefix: str = "") -> set[str]:
    out = set()
    for k, v in tiny.items():
        if isinstance(v, dict) and k != "model_type":
            out |= _flat_sizes(v, f"{prefix}{k}.")
        elif k != "model_type":
            out.add(f"{prefix}{k}")
    return out


# Follow from the sizes: Swin's per-stage lists and derived widths, text vocabulary / positions.
GDINO_DERIVED = {"backbone_config.hidden_size", "backbone_config.stage_names", "backbone_config.num_layers",
                 "text_config.vocab_size", "backbone_config.out_features", "backbone_config.out_indices"}


def test_grounding_dino_pair():
    """Grounding DINO (transformers' default config = grounding-dino-tiny's architecture) vs the tiny stand-in;
    the tokenizer is deliberately a character-level WordPiece vocabulary (bert-base-uncased's is not offline)."""
    from transformers import GroundingDinoConfig, GroundingDinoForObjectDetection

    from benchmark.models.grounding import TINY_GDINO, load_detector

    real = meta(lambda: GroundingDinoForObjectDetection(GroundingDinoConfig()))
    det = load_detector("grounding-dino", "tiny")
    sizes = _flat_sizes(TINY_GDINO) | GDINO_DERIVED
    assert config_diff(real.config.to_dict(), det.model.config.to_dict(), sizes) == []
    assert switch_diff(real, det.model) == []
    assert det.processor.image_processor.do_normalize and type(det.processor.tokenizer).__name__ == "BertTokenizer"


def test_owlv2_pair():
    from transformers import Owlv2Config, Owlv2ForObjectDetection

    from benchmark.models.grounding import TINY_OWLV2, load_detector

    real = meta(lambda: Owlv2ForObjectDetection(Owlv2Config()))
    det = load_detector("owlv2", "tiny")
    assert config_diff(real.config.to_dict(), det.model.config.to_dict(), _flat_sizes(TINY_OWLV2)) == []
    assert switch_diff(real, det.model) == []
    assert det.processor.tokenizer.model_max_length == real.config.text_config.max_position_embeddings


def test_sam_pair():
    from transformers import SamConfig, SamModel

    from benchmark.models.grounding import TINY_SAM, load_sam

    real = meta(lambda: SamModel(SamConfig()))
    seg = load_sam("tiny")
    derived = {"prompt_encoder_config.image_embedding_size", "vision_config.scale"}  # follow from sizes
    assert config_diff(real.config.to_dict(), seg.model.config.to_dict(), _flat_sizes(TINY_SAM) | derived) == [], \
        config_diff(real.config.to_dict(), seg.model.config.to_dict(), _flat_sizes(TINY_SAM) | derived)
    assert switch_diff(real, seg.model) == []
