"""DiT instruction editors' pipelines (FLUX.1 Kontext, Qwen-Image-Edit, FLUX.2 [klein], OmniGen) from one of three
weight sources, through one `PipelineClass.from_pretrained(path_or_id)` call, as `benchmark.models.diffusion` does for SD.

- `pretrained`: the checkpoint's hub id at a pinned revision (users; needs the hub or a local cache).
- `random`: the checkpoint's real component configs (`KINDS[kind].real`, written down below with their source) with
  random weights, built in bf16, saved once and loaded like `tiny`: speed and memory at real size on a GPU. 8-58 GB
  of weights: never built in the tests.
- `tiny`: the same component configs with only their sizes replaced (`TINY[kind]`: widths, depths, head
  counts, vocabulary sizes); every switch that is not a size (activations, norms, rope layout, latent channels,
  VAE scaling, scheduler, special-token roles) is the real one, which tests/test_dit_editors.py checks.

Tokenizers cannot be downloaded here, so every tokenizer is built offline with the real class: CLIP from open_clip's
bundled BPE (the real vocabulary, `benchmark.models.tokenizer`); T5 (`T5Tokenizer`, a Unigram model over printable
characters), Qwen (`Qwen2Tokenizer`, byte-level BPE over the 256 byte symbols, no merges) and Phi-3/Llama
(`LlamaTokenizer`, BPE with byte fallback, no merges) with small
vocabularies and the real special tokens, as `benchmark.models.llm` does for its tiny Qwen2. A vocabulary size is a
size: the tiny text encoders' `vocab_size` and special-token ids are set from these tokenizers.

FLUX.2: `Flux2KleinPipeline` with FLUX.2 [klein] 4B, not `Flux2Pipeline` (FLUX.2 [dev]). Klein's text encoder is a
`Qwen3ForCausalLM` with a `Qwen2Tokenizer`, which builds offline soundly (the precedent of benchmark.models.llm);
[dev]'s is a 24B `Mistral3ForConditionalGeneration` (Pixtral vision tower) behind a `PixtralProcessor` whose tekken
tokenizer and chat template have no offline counterpart here, and [dev] needs ~110 GB at bf16 (32B transformer +
24B encoder), more than one 80 GB card without offloading. Klein 4B is Apache-2.0 and not gated.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.io.model_cache import WeightsUnavailableError, check_source, tiny_model_dir

TINY_SEED = 0  # random weights are seeded, so a cache folder's content is a function of its key
OFFLOAD = ("none", "model", "sequential")


class OffloadError(ValueError):
    """An editor's `offload` is not one of `OFFLOAD`, or asks for offloading where there is no GPU to offload to."""


# ------------------------------------------------------------------------------------------------- tokenizers

def _byte_symbols() -> list[str]:
    from benchmark.models.tokenizer import _byte_symbols as symbols

    return symbols()


QWEN_VL_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                    "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>")
QWEN3_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
QWEN3_ADDED = ("<think>", "</think>")  # added (not special) tokens of Qwen3's tokenizer
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
# Qwen3's template with `enable_thinking=False` appends an empty think block to the generation prompt.
QWEN3_CHAT = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
              "{% if add_generation_prompt %}<|im_start|>assistant\n"
              "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}"
              "{% endif %}")


def qwen_tokenizer(specials: tuple[str, ...], added: tuple[str, ...] = (), chat_template: str = CHATML) -> Any:
    """A real `Qwen2Tokenizer` (byte-level BPE, Qwen's pre-tokenisation) over the 256 byte symbols with no merges,
    plus Qwen's special tokens: end of text = pad = unk, `<|im_end|>` = eos (Qwen's roles)."""
    from transformers import Qwen2Tokenizer

    vocab = {s: i for i, s in enumerate(_byte_symbols())}
    for t in (*specials, *added):
        vocab[t] = len(vocab)
    tok = Qwen2Tokenizer(vocab=vocab, merges=[], unk_token=specials[0], eos_token="<|im_end|>",
                         pad_token=specials[0])
    tok.add_special_tokens({"additional_special_tokens": [t for t in specials if t not in (specials[0], "<|im_end|>")]})
    if added:
        tok.add_tokens(list(added))
    tok.chat_template = chat_template
    return tok


def t5_tokenizer(model_max_length: int = 512) -> Any:
    """A real `T5Tokenizer` (Unigram, Metaspace) over printable ASCII with T5's specials (pad 0, eos 1, unk 2) and
    its 100 sentinel tokens; T5's 32k sentencepiece vocabulary cannot be fetched offline."""
    from transformers import T5Tokenizer

    pieces = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("\u2581", -1.0)]
    pieces += [(chr(c), -2.0) for c in range(33, 127)]
    return T5Tokenizer(vocab=pieces, extra_ids=100, model_max_length=model_max_length)


# ------------------------------------------------------------------------------------------- real configs
# FLUX.1 Kontext [dev] (black-forest-labs/FLUX.1-Kontext-dev): the component configs FLUX.1 [dev] ships, which
# Kontext keeps (transformer/, vae/, text_encoder/ = CLIP ViT-L/14's text tower, text_encoder_2/ = T5 v1.1 XXL's
# encoder, scheduler/ of the diffusers layout). The repository is gated: values from FLUX.1-dev's public configs.
FLUX_TRANSFORMER = {
    "patch_size": 1, "in_channels": 64, "num_layers": 19, "num_single_layers": 38, "attention_head_dim": 128,
    "num_attention_heads": 24, "joint_attention_dim": 4096, "pooled_projection_dim": 768, "guidance_embeds": True,
    "axes_dims_rope": [16, 56, 56],
}
FLUX_VAE = {
    "in_channels": 3, "out_channels": 3, "latent_channels": 16, "block_out_channels": [128, 256, 512, 512],
    "down_block_types": ["DownEncoderBlock2D"] * 4, "up_block_types": ["UpDecoderBlock2D"] * 4,
    "layers_per_block": 2, "act_fn": "silu", "norm_num_groups": 32, "sample_size": 1024, "scaling_factor": 0.3611,
    "shift_factor": 0.1159, "use_quant_conv": False, "use_post_quant_conv": False, "mid_block_add_attention": True,
    "force_upcast": True,
}
CLIP_L_TEXT = {  # openai/clip-vit-large-patch14's text tower (the same dict as SD v1's text encoder)
    "bos_token_id": 0, "eos_token_id": 2, "pad_token_id": 1, "hidden_size": 768, "intermediate_size": 3072,
    "layer_norm_eps": 1e-5, "num_attention_heads": 12, "num_hidden_layers": 12, "vocab_size": 49408,
    "max_position_embeddings": 77, "projection_dim": 768, "hidden_act": "quick_gelu",
}
T5_XXL_ENCODER = {  # google/t5-v1_1-xxl (FLUX's text_encoder_2/config.json)
    "d_model": 4096, "d_ff": 10240, "d_kv": 64, "num_heads": 64, "num_layers": 24, "num_decoder_layers": 24,
    "vocab_size": 32128, "feed_forward_proj": "gated-gelu", "dense_act_fn": "gelu_new", "is_gated_act": True,
    "layer_norm_epsilon": 1e-6, "relative_attention_num_buckets": 32, "relative_attention_max_distance": 128,
    "tie_word_embeddings": False, "pad_token_id": 0, "eos_token_id": 1, "decoder_start_token_id": 0,
}
FLUX_SCHEDULER = {  # FLUX.1's scheduler/scheduler_config.json
    "base_image_seq_len": 256, "base_shift": 0.5, "max_image_seq_len": 4096, "max_shift": 1.15,
    "num_train_timesteps": 1000, "shift": 3.0, "use_dynamic_shifting": True,
}
# Qwen-Image-Edit-2509 (Qwen/Qwen-Image-Edit-2509): Qwen-Image's MMDiT (60 layers, 20B), its Wan-style 3D VAE, and a
# Qwen2.5-VL-7B-Instruct text encoder. The transformer and VAE values are diffusers' class defaults, which were
# written from these files; the text encoder is Qwen2.5-VL-7B-Instruct's config.json.
QWEN_TRANSFORMER = {
    "patch_size": 2, "in_channels": 64, "out_channels": 16, "num_layers": 60, "attention_head_dim": 128,
    "num_attention_heads": 24, "joint_attention_dim": 3584, "guidance_embeds": False, "axes_dims_rope": [16, 56, 56],
}
QWEN_VAE = {
    "base_dim": 96, "z_dim": 16, "dim_mult": [1, 2, 4, 4], "num_res_blocks": 2, "attn_scales": [],
    "temperal_downsample": [False, True, True], "dropout": 0.0,
    "latents_mean": [-0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508, 0.4134, -0.0715, 0.5517,
                     -0.3632, -0.1922, -0.9497, 0.2503, -0.2921],
    "latents_std": [2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743, 3.2687, 2.1526, 2.8652, 1.5579,
                    1.6382, 1.1253, 2.8251, 1.916],
}
QWEN_VL_TEXT = {  # Qwen2.5-VL-7B-Instruct: the language model
    "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
    "num_key_value_heads": 4, "hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
    "max_position_embeddings": 128000, "vocab_size": 152064, "tie_word_embeddings": False,
    "rope_scaling": {"type": "mrope", "rope_type": "default", "mrope_section": [16, 24, 24]},
}
QWEN_VL_VISION = {  # Qwen2.5-VL-7B-Instruct: the vision tower
    "depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16, "out_hidden_size": 3584,
    "hidden_act": "silu", "in_chans": 3, "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2,
    "window_size": 112, "fullatt_block_indexes": [7, 15, 23, 31], "tokens_per_second": 2,
}
QWEN_SCHEDULER = {  # Qwen-Image's scheduler/scheduler_config.json
    "base_image_seq_len": 256, "base_shift": 0.5, "invert_sigmas": False, "max_image_seq_len": 8192,
    "max_shift": 0.9, "num_train_timesteps": 1000, "shift": 1.0, "shift_terminal": 0.02,
    "stochastic_sampling": False, "time_shift_type": "exponential", "use_beta_sigmas": False,
    "use_dynamic_shifting": True, "use_exponential_sigmas": False, "use_karras_sigmas": False,
}
# FLUX.2 [klein] 4B (black-forest-labs/FLUX.2-klein-4B): 5 double + 20 single blocks of 24x128, text = three
# hidden layers (9, 18, 27) of Qwen3-4B concatenated (3 x 2560 = 7680); the FLUX.2 VAE (32 latent channels, 2x2
# patchified to 128); the distilled checkpoint (`is_distilled`, 4 steps, no CFG).
KLEIN_TRANSFORMER = {
    "patch_size": 1, "in_channels": 128, "num_layers": 5, "num_single_layers": 20, "attention_head_dim": 128,
    "num_attention_heads": 24, "joint_attention_dim": 7680, "timestep_guidance_channels": 256, "mlp_ratio": 3.0,
    "axes_dims_rope": [32, 32, 32, 32], "rope_theta": 2000, "eps": 1e-6, "guidance_embeds": False,
}
FLUX2_VAE = {  # FLUX.2's vae/config.json (diffusers' AutoencoderKLFlux2 defaults were written from it)
    "in_channels": 3, "out_channels": 3, "down_block_types": ["DownEncoderBlock2D"] * 4,
    "up_block_types": ["UpDecoderBlock2D"] * 4, "block_out_channels": [128, 256, 512, 512], "layers_per_block": 2,
    "act_fn": "silu", "latent_channels": 32, "norm_num_groups": 32, "sample_size": 1024, "use_quant_conv": True,
    "use_post_quant_conv": True, "mid_block_add_attention": True, "batch_norm_eps": 1e-4,
    "batch_norm_momentum": 0.1, "patch_size": [2, 2],
}
QWEN3_4B = {  # Qwen/Qwen3-4B's config.json (klein's text_encoder/)
    "hidden_size": 2560, "intermediate_size": 9728, "num_hidden_layers": 36, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 128, "hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
    "max_position_embeddings": 40960, "vocab_size": 151936, "tie_word_embeddings": True, "attention_bias": False,
    "bos_token_id": 151643, "eos_token_id": 151645,
}
# OmniGen v1 (Shitao/OmniGen-v1-diffusers): a Phi-3-mini-128k transformer (3.8B) that reads text tokens and VAE image
# tokens in one sequence, the SDXL VAE, Phi-3's Llama tokenizer. The transformer's values are diffusers' class defaults
# plus what diffusers' conversion script (scripts/convert_omnigen_to_diffusers.py) sets: Phi-3's "su" rope factors,
# patch 2, 4 input channels, 192 positions per side; its scheduler is the script's.
OMNIGEN_TRANSFORMER = {
    "in_channels": 4, "patch_size": 2, "hidden_size": 3072, "rms_norm_eps": 1e-5, "num_attention_heads": 32,
    "num_key_value_heads": 32, "intermediate_size": 8192, "num_layers": 32, "pad_token_id": 32000,
    "vocab_size": 32064, "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
    "rope_base": 10000, "pos_embed_max_size": 192, "time_step_dim": 256, "flip_sin_to_cos": True,
    "downscale_freq_shift": 0, "timestep_activation_fn": "silu",
    "rope_scaling": {"type": "su", "long_factor": [
        1.0299999713897705, 1.0499999523162842, 1.0499999523162842, 1.0799999237060547, 1.2299998998641968,
        1.2299998998641968, 1.2999999523162842, 1.4499999284744263, 1.5999999046325684, 1.6499998569488525,
        1.8999998569488525, 2.859999895095825, 3.68999981880188, 5.419999599456787, 5.489999771118164,
        5.489999771118164, 9.09000015258789, 11.579999923706055, 15.65999984741211, 15.769999504089355,
        15.789999961853027, 18.360000610351562, 21.989999771118164, 23.079999923706055, 30.009998321533203,
        32.35000228881836, 32.590003967285156, 35.56000518798828, 39.95000457763672, 53.840003967285156,
        56.20000457763672, 57.95000457763672, 59.29000473022461, 59.77000427246094, 59.920005798339844,
        61.190006256103516, 61.96000671386719, 62.50000762939453, 63.3700065612793, 63.48000717163086,
        63.48000717163086, 63.66000747680664, 63.850006103515625, 64.08000946044922, 64.760009765625,
        64.80001068115234, 64.81001281738281, 64.81001281738281], "short_factor": [
        1.05, 1.05, 1.05, 1.1, 1.1, 1.1, 1.2500000000000002, 1.2500000000000002, 1.4000000000000004,
        1.4500000000000004, 1.5500000000000005, 1.8500000000000008, 1.9000000000000008] + [2.000000000000001] * 19 + [
        2.1000000000000005, 2.1000000000000005, 2.2, 2.3499999999999996, 2.3499999999999996, 2.3499999999999996,
        2.3499999999999996, 2.3999999999999995, 2.3999999999999995, 2.6499999999999986, 2.6999999999999984,
        2.8999999999999977, 2.9499999999999975, 3.049999999999997, 3.049999999999997, 3.049999999999997]},
}
SDXL_VAE = {  # stabilityai/sdxl-vae's config.json (OmniGen's vae/)
    "in_channels": 3, "out_channels": 3, "latent_channels": 4, "block_out_channels": [128, 256, 512, 512],
    "down_block_types": ["DownEncoderBlock2D"] * 4, "up_block_types": ["UpDecoderBlock2D"] * 4,
    "layers_per_block": 2, "act_fn": "silu", "norm_num_groups": 32, "sample_size": 1024, "scaling_factor": 0.13025,
    "force_upcast": True,
}
OMNIGEN_SCHEDULER = {"invert_sigmas": True, "num_train_timesteps": 1}
PHI3_SPECIALS = ("<|endoftext|>", "<|assistant|>", "<|system|>", "<|end|>", "<|user|>")  # Phi-3's added tokens
KLEIN_SCHEDULER = dict(FLUX_SCHEDULER)  # FLUX.2's scheduler config equals FLUX.1's (the pipeline computes mu itself)
KLEIN_PIPELINE = {"is_distilled": True}  # model_index.json of the distilled 4B checkpoint

# ------------------------------------------------------------------------------------------- tiny sizes
# Only sizes: widths, depths, head counts (and the rope axes that must sum to the head width), vocabulary-sized
# keys (set from the tiny tokenizers at build time). diffusers' fast-test sizes where they have them.
TINY = {
    "flux_kontext": {
        "transformer": {"num_layers": 1, "num_single_layers": 1, "attention_head_dim": 16, "num_attention_heads": 2,
                        "joint_attention_dim": 32, "pooled_projection_dim": 32, "axes_dims_rope": [4, 4, 8]},
        # two levels: the VAE downsamples by 2, so 32 px gives 16x16 latents (8x8 tokens after 2x2 packing)
        "vae": {"block_out_channels": [32, 64], "down_block_types": ["DownEncoderBlock2D"] * 2,
                "up_block_types": ["UpDecoderBlock2D"] * 2, "layers_per_block": 1, "sample_size": 32},
        "text_encoder": {"hidden_size": 32, "intermediate_size": 37, "num_attention_heads": 4,
                         "num_hidden_layers": 2, "projection_dim": 32},
        "text_encoder_2": {"d_model": 32, "d_ff": 37, "d_kv": 8, "num_heads": 4, "num_layers": 2,
                           "num_decoder_layers": 2},
    },
    "qwen_image_edit": {
        "transformer": {"num_layers": 2, "attention_head_dim": 16, "num_attention_heads": 2,
                        "joint_attention_dim": 32, "axes_dims_rope": [8, 4, 4]},
        # one temporal/spatial level fewer: the VAE downsamples by 4 (real: 8)
        "vae": {"base_dim": 16, "dim_mult": [1, 2, 2], "num_res_blocks": 1, "temperal_downsample": [False, True]},
        "text_encoder.text": {"hidden_size": 32, "intermediate_size": 37, "num_hidden_layers": 2,
                              "num_attention_heads": 4, "num_key_value_heads": 2,
                              "rope_scaling": {"type": "mrope", "rope_type": "default", "mrope_section": [1, 1, 2]}},
        "text_encoder.vision": {"depth": 2, "hidden_size": 32, "intermediate_size": 37, "num_heads": 2,
                                "out_hidden_size": 32, "fullatt_block_indexes": [1]},
    },
    "flux2": {
        "transformer": {"num_layers": 1, "num_single_layers": 1, "attention_head_dim": 16, "num_attention_heads": 2,
                        "joint_attention_dim": 48, "axes_dims_rope": [4, 4, 4, 4]},
        "vae": {"block_out_channels": [32, 64], "down_block_types": ["DownEncoderBlock2D"] * 2,
                "up_block_types": ["UpDecoderBlock2D"] * 2, "layers_per_block": 1, "sample_size": 32},
        # 28 layers: klein reads hidden states 9, 18 and 27 (real: 36 layers)
        "text_encoder": {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 28,
                         "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8},
    },
    "omnigen": {
        # heads of width 8 have 4 rope frequencies: the first 4 of each real factor list (one factor per frequency)
        "transformer": {"hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 4,
                        "intermediate_size": 37, "num_layers": 1,
                        "rope_scaling": {"type": "su",
                                         "long_factor": OMNIGEN_TRANSFORMER["rope_scaling"]["long_factor"][:4],
                                         "short_factor": OMNIGEN_TRANSFORMER["rope_scaling"]["short_factor"][:4]}},
        # four levels like the real VAE: OmniGen's processor counts image tokens as (H / 16) x (W / 16)
        "vae": {"block_out_channels": [32, 32, 64, 64], "layers_per_block": 1, "sample_size": 64},
    },
}


# FLUX.1 [dev] (the rectified-flow editors: rf_solver, fireflow): Kontext's tiny sizes, but the real 38 single-stream
# blocks, because those editors share attention features in single blocks named by their index (RF-Solver: 20-37)
TINY["flux"] = {**TINY["flux_kontext"],
                "transformer": {**TINY["flux_kontext"]["transformer"], "num_single_layers": 38}}


def _merge(base: dict[str, Any], sizes: dict[str, Any]) -> dict[str, Any]:
    return {**base, **sizes}


@dataclass(frozen=True)
class Kind:
    """One DiT editor pipeline: its diffusers class and the real component configs (`{component: config}`)."""

    pipeline: str
    real: dict[str, dict[str, Any]]

    def configs(self, name: str, source: str) -> dict[str, dict[str, Any]]:
        """The component configs `source` ('tiny' | 'random') builds: the real ones, sizes replaced for tiny."""
        import copy

        # deep copies: transformers' configs write into nested dicts they are given (rope_scaling gains rope_theta),
        # which would change the tables below for every later build in the process
        if source == "random":
            return copy.deepcopy(self.real)
        sizes = TINY[name]
        return copy.deepcopy({k: _merge(v, sizes.get(k, {})) for k, v in self.real.items()})


KINDS: dict[str, Kind] = {
    "flux_kontext": Kind("FluxKontextPipeline", {
        "transformer": FLUX_TRANSFORMER, "vae": FLUX_VAE, "text_encoder": CLIP_L_TEXT,
        "text_encoder_2": T5_XXL_ENCODER, "scheduler": FLUX_SCHEDULER}),
    # FLUX.1 [dev] itself (black-forest-labs/FLUX.1-dev), text-to-image: what the training-free rectified-flow
    # editors (benchmark.editing.flow_edit) invert and sample; the components and configs Kontext kept
    "flux": Kind("FluxPipeline", {
        "transformer": FLUX_TRANSFORMER, "vae": FLUX_VAE, "text_encoder": CLIP_L_TEXT,
        "text_encoder_2": T5_XXL_ENCODER, "scheduler": FLUX_SCHEDULER}),
    "qwen_image_edit": Kind("QwenImageEditPlusPipeline", {
        "transformer": QWEN_TRANSFORMER, "vae": QWEN_VAE, "text_encoder.text": QWEN_VL_TEXT,
        "text_encoder.vision": QWEN_VL_VISION, "scheduler": QWEN_SCHEDULER}),
    "flux2": Kind("Flux2KleinPipeline", {
        "transformer": KLEIN_TRANSFORMER, "vae": FLUX2_VAE, "text_encoder": QWEN3_4B, "scheduler": KLEIN_SCHEDULER,
        "pipeline": KLEIN_PIPELINE}),
    "omnigen": Kind("OmniGenPipeline", {
        "transformer": OMNIGEN_TRANSFORMER, "vae": SDXL_VAE, "scheduler": OMNIGEN_SCHEDULER}),
}


# ------------------------------------------------------------------------------------------- builders

def _flux_kontext(c: dict[str, dict[str, Any]], tiny: bool) -> dict[str, Any]:
    import diffusers
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

    from benchmark.models.tokenizer import build_clip_tokenizer

    tok2 = t5_tokenizer()
    t5 = {**c["text_encoder_2"], **({"vocab_size": len(tok2)} if tiny else {})}
    return {
        "transformer": diffusers.FluxTransformer2DModel(**c["transformer"]),
        "vae": diffusers.AutoencoderKL(**c["vae"]),
        "text_encoder": CLIPTextModel(CLIPTextConfig(**c["text_encoder"])),
        "text_encoder_2": T5EncoderModel(T5Config(**t5)),
        "tokenizer": build_clip_tokenizer(), "tokenizer_2": tok2,
        "scheduler": diffusers.FlowMatchEulerDiscreteScheduler(**c["scheduler"]),
        "image_encoder": None, "feature_extractor": None,
    }


def _qwen_image_edit(c: dict[str, dict[str, Any]], tiny: bool) -> dict[str, Any]:
    import diffusers
    from transformers import (
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2VLImageProcessor,
        Qwen2VLProcessor,
        Qwen2VLVideoProcessor,
    )

    tok = qwen_tokenizer(QWEN_VL_SPECIALS)
    ids = {t: tok.convert_tokens_to_ids(t) for t in QWEN_VL_SPECIALS}
    text = dict(c["text_encoder.text"])
    if tiny:  # tiny: the tokenizer's vocabulary (a vocabulary size is a size); random keeps Qwen's 152064 rows
        text["vocab_size"] = len(tok)
    # Both sources use the tokenizer's ids of Qwen's special tokens: the real tokenizer cannot be fetched here, and
    # the processor writes the image placeholder with the tokenizer's id, which the model must look for.
    token_ids = {"image_token_id": ids["<|image_pad|>"], "video_token_id": ids["<|video_pad|>"],
                 "vision_start_token_id": ids["<|vision_start|>"], "vision_end_token_id": ids["<|vision_end|>"],
                 "vision_token_id": ids["<|vision_pad|>"], "bos_token_id": ids["<|endoftext|>"],
                 "eos_token_id": ids["<|im_end|>"]}
    config = Qwen2_5_VLConfig(text_config={**text, **{k: token_ids[k] for k in ("bos_token_id", "eos_token_id")}},
                              vision_config=dict(c["text_encoder.vision"]), **token_ids)
    processor = Qwen2VLProcessor(image_processor=Qwen2VLImageProcessor(), tokenizer=tok,
                                 video_processor=Qwen2VLVideoProcessor(), chat_template=CHATML)
    return {
        "transformer": diffusers.QwenImageTransformer2DModel(**c["transformer"]),
        "vae": diffusers.AutoencoderKLQwenImage(**c["vae"]),
        "text_encoder": Qwen2_5_VLForConditionalGeneration(config),
        "tokenizer": tok, "processor": processor,
        "scheduler": diffusers.FlowMatchEulerDiscreteScheduler(**c["scheduler"]),
    }


def _flux2(c: dict[str, dict[str, Any]], tiny: bool) -> dict[str, Any]:
    import diffusers
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tok = qwen_tokenizer(QWEN3_SPECIALS, QWEN3_ADDED, QWEN3_CHAT)
    text = dict(c["text_encoder"])
    if tiny:  # the tokenizer's vocabulary and ids (random: Qwen3's, 151643 / 151645)
        text.update(vocab_size=len(tok), bos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
                    eos_token_id=tok.eos_token_id)
    return {
        "transformer": diffusers.Flux2Transformer2DModel(**c["transformer"]),
        "vae": diffusers.AutoencoderKLFlux2(**c["vae"]),
        "text_encoder": Qwen3ForCausalLM(Qwen3Config(**text)),
        "tokenizer": tok,
        "scheduler": diffusers.FlowMatchEulerDiscreteScheduler(**c["scheduler"]),
        **c["pipeline"],
    }


def llama_tokenizer() -> Any:
    """A real `LlamaTokenizer` (BPE with byte fallback, Metaspace) over printable ASCII and the 256 byte tokens, with
    Llama's <unk>/<s>/</s> at ids 0/1/2 (which OmniGen's processor relies on: it strips id 1 and pads with id 2) and
    Phi-3's added chat tokens; it adds <s> in front, as OmniGen's processor expects."""
    from transformers import LlamaTokenizer

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    vocab["\u2581"] = len(vocab)
    for c in range(33, 127):
        vocab[chr(c)] = len(vocab)
    tok = LlamaTokenizer(vocab=vocab, merges=[], add_bos_token=True, add_eos_token=False)
    tok.add_special_tokens({"additional_special_tokens": list(PHI3_SPECIALS)})
    return tok


def _omnigen(c: dict[str, dict[str, Any]], tiny: bool) -> dict[str, Any]:
    import diffusers

    tok = llama_tokenizer()
    transformer = dict(c["transformer"])
    if tiny:  # the tokenizer's vocabulary and pad id (random: Phi-3's, 32064 / 32000)
        transformer.update(vocab_size=len(tok), pad_token_id=tok.convert_tokens_to_ids("<|endoftext|>"))
    return {
        "transformer": diffusers.OmniGenTransformer2DModel(**transformer),
        "vae": diffusers.AutoencoderKL(**c["vae"]),
        "tokenizer": tok,
        "scheduler": diffusers.FlowMatchEulerDiscreteScheduler(**c["scheduler"]),
    }


BUILDERS: dict[str, Callable[[dict[str, dict[str, Any]], bool], dict[str, Any]]] = {
    "flux_kontext": _flux_kontext, "flux": _flux_kontext, "qwen_image_edit": _qwen_image_edit, "flux2": _flux2, "omnigen": _omnigen,
}


def _build(kind: str, source: str, configs: dict[str, dict[str, Any]], path: Path) -> None:
    import diffusers
    import torch

    # Real size is built straight in bf16 (the checkpoints' dtype): Qwen-Image-Edit in fp32 would need ~115 GB of
    # CPU memory before it could be cast.
    dtype = torch.bfloat16 if source == "random" else torch.float32
    previous = torch.get_default_dtype()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(TINY_SEED)
        torch.set_default_dtype(dtype)
        try:
            components = BUILDERS[kind](configs, source == "tiny")
        finally:
            torch.set_default_dtype(previous)
    pipe = getattr(diffusers, KINDS[kind].pipeline)(**components)
    pipe.save_pretrained(str(path))
    (path / "editmeter-dit.json").write_text(json.dumps({"kind": kind, "configs": configs}, sort_keys=True))


def pipeline_dir(kind: str, source: str) -> Path:
    """Cache folder of `kind`'s pipeline with random weights ('tiny' sizes or the 'random' real ones), built on
    first use and loaded with `from_pretrained` like a hub snapshot."""
    check_kind(kind)
    configs = KINDS[kind].configs(kind, source)
    key = {"kind": kind, "source": source, "configs": configs, "seed": TINY_SEED,
           "pipeline": KINDS[kind].pipeline}
    return tiny_model_dir(f"dit-{kind}-{source}", key, lambda p: _build(kind, source, configs, p))


def build_components(kind: str, source: str) -> dict[str, Any]:
    """The pipeline's components for `source` ('tiny' | 'random') in memory, unseeded and unsaved. Under
    `torch.device("meta")` it builds even the real sizes in no time and no memory (tests compare their configs and
    layouts with the tiny ones; `parameter_counts` counts them)."""
    check_kind(kind)
    return BUILDERS[kind](KINDS[kind].configs(kind, source), source == "tiny")


def parameter_counts(kind: str, source: str = "random") -> dict[str, int]:
    """Parameters of each model component of `kind` at `source`'s sizes, counted on PyTorch's meta device (no memory,
    no weights): what the GPU memory estimates in docs/dit-editors.md are computed from (2 bytes each at bf16)."""
    import torch

    with torch.device("meta"):
        components = build_components(kind, source)
    return {name: sum(p.numel() for p in m.parameters()) for name, m in components.items()
            if isinstance(m, torch.nn.Module)}


def check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"unknown DiT pipeline kind {kind!r}; valid: {', '.join(KINDS)}")
    return kind


def check_offload(offload: Any, *, what: str = "a DiT editor") -> str:
    """`offload` itself when it is one of `OFFLOAD`, else `OffloadError` naming the valid values."""
    if offload in OFFLOAD:
        return str(offload)
    raise OffloadError(f"{what}: offload {offload!r} is not one of {', '.join(OFFLOAD)}; set it with "
                       f"editor.offload=<value> (model: diffusers' enable_model_cpu_offload, whole models move to "
                       f"the GPU in turn; sequential: enable_sequential_cpu_offload, layer by layer)")


def resolve_dit_dtype(dtype: str, device: str, *, what: str = "a DiT editor") -> Any:
    """'auto' -> bf16 on CUDA (these models' official dtype; fp16 overflows in FLUX's and Qwen-Image's
    activations), fp32 elsewhere; other values as `benchmark.models.diffusion.resolve_dtype`."""
    from benchmark.models.diffusion import check_dtype, resolve_dtype

    dtype = check_dtype(dtype, what=what)
    if dtype == "auto" and device.startswith("cuda"):
        dtype = "bf16"
    return resolve_dtype(dtype, device, what=what)


def load_dit_pipeline(kind: str, *, weights: str, model_id: str, revision: str, device: str = "auto",
                      dtype: str = "auto", offload: str = "none",
                      what: str = "a DiT editor") -> tuple[Any, dict[str, Any]]:
    """Load `kind`'s pipeline from `weights` ('pretrained' | 'tiny' | 'random'); returns (pipeline, provenance).

    Every source goes through `PipelineClass.from_pretrained(source)`. A missing pretrained checkpoint raises
    `WeightsUnavailableError` naming it and the `profile=tiny` fallback. `offload` 'model' / 'sequential' keep the
    weights in CPU memory and move them to the GPU by model / by layer (diffusers' offloading); it needs CUDA.
    """
    import diffusers

    from benchmark.models.diffusion import resolve_device

    check_source(weights)
    check_kind(kind)
    offload = check_offload(offload, what=what)
    dev = resolve_device(device)
    if offload != "none" and not dev.startswith("cuda"):
        raise OffloadError(f"{what}: offload={offload!r} moves weights between CPU memory and a GPU, but the device "
                           f"is {dev!r}; use editor.offload=none on a machine without CUDA")
    torch_dtype = resolve_dit_dtype(dtype, dev, what=what)
    cls = getattr(diffusers, KINDS[kind].pipeline)
    if weights == "pretrained":
        source, kwargs = model_id, {"revision": revision}
        prov = {"weights": "pretrained", "model_id": model_id, "revision": revision}
    else:
        source, kwargs = str(pipeline_dir(kind, weights)), {}
        prov = {"weights": weights, "model_id": f"{weights}-{kind}", "revision": Path(source).name}
    try:
        pipe = cls.from_pretrained(source, dtype=torch_dtype, **kwargs)
    except (OSError, ValueError) as err:  # hub unreachable / gated / not cached / incomplete snapshot
        if weights != "pretrained":
            raise
        raise WeightsUnavailableError(what, f"{model_id}@{revision}", err) from err
    if offload == "model":
        pipe.enable_model_cpu_offload(device=dev)
    elif offload == "sequential":
        pipe.enable_sequential_cpu_offload(device=dev)
    else:
        pipe = pipe.to(dev)
    pipe.set_progress_bar_config(disable=True)
    prov.update({"device": dev, "dtype": str(torch_dtype).removeprefix("torch."), "pipeline": cls.__name__,
                 "offload": offload})
    return pipe, prov
