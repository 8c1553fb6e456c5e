"""The DiT instruction editors (flux_kontext, qwen_image_edit, flux2, omnigen): tiny = real architecture, smaller; offload;
reruns. The editor contract (shape, batch independence, prompt kind) is tests/test_editors.py's, half precision on the
model's device tests/test_gpu_class_bugs.py's; both discover these editors from their configs."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest
import torch
from test_model_pairs import config_diff, module_switches

from benchmark.editing.editor import query_seed
from benchmark.io.imageio import load_rgb
from benchmark.models import dit

pytestmark = pytest.mark.usefixtures("single_thread_torch")
KINDS = ["flux_kontext", "flux", "qwen_image_edit", "flux2", "omnigen"]
INSTRUCTION_EDITORS = ["flux_kontext", "qwen_image_edit", "flux2", "omnigen"]  # "flux" is rf_solver's and fireflow's
# What the tiny profile may change: sizes only (widths, depths, head counts, rope axes that must sum to the head
# width, block counts, vocabulary sizes). A switch that is not a size put into `dit.TINY` fails here.
SIZE_KEYS = {
    "num_layers", "num_single_layers", "attention_head_dim", "num_attention_heads", "joint_attention_dim",
    "pooled_projection_dim", "axes_dims_rope", "block_out_channels", "down_block_types", "up_block_types",
    "layers_per_block", "sample_size", "hidden_size", "intermediate_size", "num_hidden_layers", "projection_dim",
    "d_model", "d_ff", "d_kv", "num_heads", "num_decoder_layers", "base_dim", "dim_mult", "num_res_blocks",
    "temperal_downsample", "num_key_value_heads", "depth", "out_hidden_size", "fullatt_block_indexes", "head_dim",
    "rope_scaling",  # only its per-frequency lists (as long as the head width), checked below
}
# Set from the tiny tokenizers (a vocabulary size, and ids of the same special tokens in a smaller vocabulary).
TOKEN_KEYS = {"vocab_size", "bos_token_id", "eos_token_id", "pad_token_id", "image_token_id", "video_token_id",
              "vision_start_token_id", "vision_end_token_id", "vision_token_id"}
# Derived from a depth: one entry per layer (compared as the set of layer kinds).
PER_LAYER = {"layer_types"}
NESTED = {"text_encoder.text": "text_config", "text_encoder.vision": "vision_config"}


def _config(module) -> dict:
    cfg = module.config
    return dict(cfg.to_dict() if hasattr(cfg, "to_dict") else cfg)


def _get(cfg: dict, path: str):
    for part in path.split("."):
        cfg = cfg.get(part) if isinstance(cfg, dict) else None
    return cfg


@functools.cache
def _tiny(kind):
    pipe, _ = dit.load_dit_pipeline(kind, weights="tiny", model_id="unused", revision="unused", device="cpu")
    return pipe


@functools.cache
def _real_on_meta(kind):
    with torch.device("meta"):
        return dit.build_components(kind, "random")


def test_building_components_leaves_the_config_tables_as_they_were():
    """transformers' configs write into the dicts they are given (Qwen's rope_scaling gains rope_theta): a build must
    hand them copies, or every later build and this file's size checks see the changed tables (failed under xdist,
    where another file had built a Qwen model in the same worker first)."""
    import copy

    tables = copy.deepcopy((dit.TINY, {k: v.real for k, v in dit.KINDS.items()}))
    with torch.device("meta"):
        dit.build_components("qwen_image_edit", "random")
        dit.build_components("qwen_image_edit", "tiny")
    assert (dit.TINY, {k: v.real for k, v in dit.KINDS.items()}) == tables


def test_tiny_sizes_are_sizes():
    for kind, comps in dit.TINY.items():
        for comp, sizes in comps.items():
            assert set(sizes) <= SIZE_KEYS, f"{kind} {comp}: {set(sizes) - SIZE_KEYS} are not sizes"
            real = dit.KINDS[kind].real[comp]
            for key in ("down_block_types", "up_block_types"):  # fewer levels, but of the real block types
                if key in sizes:
                    assert set(sizes[key]) <= set(real[key])
            if "rope_scaling" in sizes:
                per_frequency = {"mrope_section", "long_factor", "short_factor"}
                assert {k: v for k, v in sizes["rope_scaling"].items() if k not in per_frequency} == \
                    {k: v for k, v in real["rope_scaling"].items() if k not in per_frequency}
                for key in ("long_factor", "short_factor"):  # OmniGen: the real factors of the first frequencies
                    if key in sizes["rope_scaling"]:
                        tiny_list = sizes["rope_scaling"][key]
                        assert tiny_list == real["rope_scaling"][key][:len(tiny_list)]


@pytest.mark.parametrize("kind", KINDS)
def test_tiny_components_are_the_real_classes_with_the_real_switches(kind):
    pipe, real = _tiny(kind), _real_on_meta(kind)
    assert type(pipe).__name__ == dit.KINDS[kind].pipeline
    sizes = {comp: set(s) | TOKEN_KEYS for comp, s in dit.TINY[kind].items()}
    for name, real_module in real.items():
        if name not in pipe.components:  # a pipeline setting (klein's is_distilled): the real value
            assert pipe.config[name] == real_module, name
            continue
        tiny_module = pipe.components[name]
        assert type(tiny_module) is type(real_module), name  # same classes (models, tokenizers, processor)
        if not isinstance(real_module, torch.nn.Module):
            continue
        a, b = _config(real_module), _config(tiny_module)
        skip = set(sizes.get(name, set())) | TOKEN_KEYS
        for comp, sub in NESTED.items():  # Qwen2.5-VL: its language and vision configs are nested
            if comp.split(".")[0] == name:
                skip |= {f"{sub}.{k}" for k in sizes.get(comp, set()) | TOKEN_KEYS}
                skip |= {f"{sub}.rope_parameters.mrope_section"}
        skip |= {f"text_config.{k}" for k in TOKEN_KEYS} | {"rope_parameters.mrope_section"}
        for key in PER_LAYER:
            for path in (key, f"text_config.{key}"):
                ra, rb = _get(a, path), _get(b, path)
                assert (ra is None) == (rb is None) and set(ra or []) == set(rb or []), (name, path)
                skip.add(path)
        assert config_diff(a, b, skip) == [], name
        assert module_switches(real_module) == module_switches(tiny_module), name
    # the written-down real configs are the checkpoints' architecture: the published parameter counts
    counts = dit.parameter_counts(kind)
    published = {"flux_kontext": ("transformer", 12), "flux": ("transformer", 12), "qwen_image_edit": ("transformer", 20),
                 "flux2": ("transformer", 4), "omnigen": ("transformer", 4)}[kind]
    assert round(counts[published[0]] / 1e9) == published[1]


@pytest.mark.parametrize("kind", KINDS)
def test_tiny_tokenizers_and_text_encoders_agree_on_vocabulary_and_special_tokens(kind):
    pipe = _tiny(kind)
    for tok_name, enc_name in (("tokenizer", "text_encoder"), ("tokenizer_2", "text_encoder_2")):
        tok, enc = getattr(pipe, tok_name, None), getattr(pipe, enc_name, None)
        if tok is None or enc is None:
            continue
        cfg = getattr(enc.config, "text_config", enc.config)
        assert len(tok) <= cfg.vocab_size  # every id the tokenizer makes has an embedding row
    if kind == "qwen_image_edit":
        cfg, tok = pipe.text_encoder.config, pipe.tokenizer
        for key, token in (("image_token_id", "<|image_pad|>"), ("vision_start_token_id", "<|vision_start|>"),
                           ("vision_end_token_id", "<|vision_end|>")):
            assert getattr(cfg, key) == tok.convert_tokens_to_ids(token), key
        assert pipe.processor.image_token_id == cfg.image_token_id
    if kind == "omnigen":  # its processor strips a leading id 1 (<s>) from text chunks and pads with id 2 (</s>)
        tok = pipe.tokenizer
        assert (tok.bos_token_id, tok.eos_token_id) == (1, 2) and tok("a b").input_ids[0] == 1
        assert len(tok) <= pipe.transformer.config.vocab_size
        assert pipe.transformer.config.pad_token_id == tok.convert_tokens_to_ids("<|endoftext|>")
    if kind == "flux2":  # Qwen3's chat format with thinking off, as the pipeline asks for it
        text = pipe.tokenizer.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False,
                                                  add_generation_prompt=True, enable_thinking=False)
        assert text == "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"


def _editor(name, *overrides):
    from hydra.utils import instantiate

    from benchmark.commands.run import compose

    cfg, _ = compose([f"editor={name}", "queryset=demo", "profile=tiny", *overrides])
    return instantiate(cfg.editor), cfg


def _sample(demo_qs, n=2):
    qs = [q for q in demo_qs.queries if q.instruction][:n]
    return qs, [load_rgb(demo_qs.path(q.image)) for q in qs], [query_seed(0, q.id) for q in qs]


@pytest.mark.parametrize("name", INSTRUCTION_EDITORS)
def test_fresh_loads_give_identical_edits_and_the_seed_matters(name, demo_qs):
    queries, images, seeds = _sample(demo_qs)
    first = _editor(name)[0].edit(queries, images, seeds=seeds)
    again_editor = _editor(name)[0]
    again = again_editor.edit(queries, images, seeds=seeds)
    assert all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(first, again, strict=True))
    other = again_editor.edit(queries[:1], images[:1], seeds=[seeds[0] + 1])[0]
    assert not np.array_equal(np.asarray(first[0]), np.asarray(other))


def _refused(*overrides) -> BaseException:
    """The error the editor's constructor raised (Hydra wraps it in an InstantiationException)."""
    with pytest.raises(Exception) as info:
        _editor(*overrides)
    return info.value.__cause__ or info.value


def test_bad_offload_is_one_clear_error_naming_the_valid_ones():
    err = _refused("flux2", "editor.offload=cpu")
    assert isinstance(err, dit.OffloadError)
    assert "editor 'flux2': offload 'cpu' is not one of none, model, sequential" in str(err)


def test_offload_without_cuda_is_refused_naming_the_fix():
    err = _refused("flux2", "editor.offload=model", "editor.device=cpu")
    assert isinstance(err, dit.OffloadError) and "editor.offload=none" in str(err)


@pytest.mark.parametrize("mode,method", [("model", "enable_model_cpu_offload"),
                                         ("sequential", "enable_sequential_cpu_offload")])
def test_offload_reaches_the_pipeline_info_and_signature(mode, method, monkeypatch):
    """No CUDA here: the pipeline's offloading call is recorded instead of run (diffusers' own code, not ours)."""
    import diffusers

    from benchmark.plan.config import editor_signature

    calls = []
    monkeypatch.setattr(diffusers.Flux2KleinPipeline, method, lambda self, device=None: calls.append(device))
    editor, cfg = _editor("flux2", f"editor.offload={mode}", "editor.device=cuda", "editor.dtype=fp32")
    assert calls == ["cuda"]
    assert editor.info()["offload"] == mode
    plain, plain_cfg = _editor("flux2")
    assert plain.info()["offload"] == "none"
    sig = editor_signature(dict(cfg.editor), editor.info(), 0, "tiny")
    assert sig != editor_signature(dict(plain_cfg.editor), plain.info(), 0, "tiny")


def test_resolution_must_fit_the_latent_packing():
    err = _refused("flux2", "editor.resolution=66")  # tiny VAE downsamples by 2: multiples of 4
    assert isinstance(err, ValueError) and "resolution 66 is not a multiple of 4" in str(err)
    assert "editor.resolution" in str(err)


def test_qwen_sizes_the_reference_images_as_configured_and_restores_diffusers(demo_qs):
    import diffusers.pipelines.qwenimage.pipeline_qwenimage_edit_plus as module

    editor, cfg = _editor("qwen_image_edit", "editor.vae_side=96")
    before = (module.CONDITION_IMAGE_SIZE, module.VAE_IMAGE_SIZE)
    seen = []
    real_encode = editor.pipe.vae.encode

    def spy(x, *args, **kwargs):
        seen.append(tuple(x.shape[-2:]))
        return real_encode(x, *args, **kwargs)

    editor.pipe.vae.encode = spy
    queries, images, seeds = _sample(demo_qs, 1)
    editor.edit(queries, images, seeds=seeds)
    assert seen == [(96, 96)]  # the source's reference latents at vae_side^2 (square source), not 1024^2
    assert (module.CONDITION_IMAGE_SIZE, module.VAE_IMAGE_SIZE) == before
    assert editor.info()["vae_side"] == 96 and editor.info()["condition_side"] == cfg.editor.condition_side


def test_gpu_check_covers_the_dit_editors_in_tiny_size_and_times_them_only_when_asked(tmp_path):
    from benchmark.commands import gpucheck

    args = gpucheck.parse(["--editors", "flux2", "--suites", "basic,hatie", "--dtypes", "bf16"])
    assert len(gpucheck.plan(args, gpucheck.Device("cpu"), tmp_path)) == 4  # tiny bf16, 2 suites, HATIE timing
    args = gpucheck.parse(["--editors", "flux2", "--suites", "basic,hatie", "--dtypes", "bf16", "--dit-timing"])
    assert len(gpucheck.plan(args, gpucheck.Device("cpu"), tmp_path)) == 5  # + flux2 at real size
    args = gpucheck.parse(["--editors", "flux2", "--suites", "basic", "--dtypes", "bf16", "--no-tiny"])
    assert gpucheck.plan(args, gpucheck.Device("cpu"), tmp_path) == []  # DiT timing not asked, no HATIE timing
    assert set(dit.KINDS) - {"flux"} | {"rf_solver", "fireflow", "rf_inversion"} <= set(gpucheck.DIT_EDITORS)


@pytest.mark.parametrize("kind", ["qwen_image_edit", "flux2"])
def test_the_random_source_builds_in_bf16_and_edits(kind, tmp_path, monkeypatch):
    """`profile=random`'s build path (bf16, real vocabulary sizes, the offline tokenizers) on the tiny sizes: real
    size is never built in the tests, but what differs between the two sources is exercised here."""
    import diffusers
    from PIL import Image

    dit._build(kind, "random", dit.KINDS[kind].configs(kind, "tiny"), tmp_path)  # the random path, tiny sizes
    pipe = getattr(diffusers, dit.KINDS[kind].pipeline).from_pretrained(str(tmp_path), dtype=torch.float32)
    text = getattr(pipe.text_encoder.config, "text_config", pipe.text_encoder.config)
    real_text = dit.KINDS[kind].real["text_encoder.text" if kind == "qwen_image_edit" else "text_encoder"]
    assert text.vocab_size == real_text["vocab_size"] > len(pipe.tokenizer)  # the real size, not the tokenizer's
    saved = json.loads((tmp_path / "transformer" / "config.json").read_text())
    assert saved["num_layers"] == dit.TINY[kind]["transformer"]["num_layers"]
    from safetensors import safe_open

    weights = next((tmp_path / "transformer").glob("*.safetensors"))
    with safe_open(str(weights), "pt") as f:
        assert f.get_tensor(next(iter(f.keys()))).dtype == torch.bfloat16
    image = Image.new("RGB", (64, 64), (120, 60, 30))
    kwargs = {"image": image, "prompt": "add a hat", "height": 64, "width": 64, "num_inference_steps": 2,
              "generator": torch.Generator().manual_seed(0), "output_type": "np"}
    if kind == "qwen_image_edit":
        import diffusers.pipelines.qwenimage.pipeline_qwenimage_edit_plus as module

        monkeypatch.setattr(module, "CONDITION_IMAGE_SIZE", 64 * 64)
        monkeypatch.setattr(module, "VAE_IMAGE_SIZE", 64 * 64)
    with torch.inference_mode():
        out = pipe(**kwargs).images
    assert out.shape == (1, 64, 64, 3) and np.isfinite(out).all()
