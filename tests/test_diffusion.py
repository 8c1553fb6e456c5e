"""Diffusion plumbing (tiny profile, offline): tokenizer, weight sources, OOM halving, null-text inversion,
Prompt-to-Prompt attention control, Imagic's cache key and interpolation."""

import dataclasses

import numpy as np
import pytest
import torch
from device_guard import MODEL_DEVICE, ModelDeviceGuard, pipeline_modules

from benchmark.editing import inversion as inv
from benchmark.editing.attention import AttentionController, TokenEdit, build_token_edit, controlled_attention
from benchmark.editing.batching import HalvingRunner
from benchmark.io.model_cache import WeightsUnavailableError

STEPS = 3
pytestmark = pytest.mark.usefixtures("single_thread_torch")


@pytest.fixture(scope="module")
def sd():
    """The tiny SD pipeline on ``cpu:0``, the stand-in for a GPU that `guard` checks device placement against."""
    from benchmark.models.diffusion import load_pipeline, set_scheduler

    pipe, _ = load_pipeline("sd", weights="tiny", model_id="unused", revision="unused", device=str(MODEL_DEVICE))
    set_scheduler(pipe, "DDIMScheduler")
    return pipe


@pytest.fixture
def guard(sd):
    """The test body runs under ModelDeviceGuard: a tensor left on the CPU that meets the model raises, as on CUDA
    (these tests failed on a GPU with 'Expected all tensors to be on the same device')."""
    with ModelDeviceGuard(pipeline_modules(sd)) as g:
        yield g


@pytest.fixture(scope="module")
def source(demo_qs):
    from benchmark.io.imageio import load_rgb

    q = demo_qs.queries[0]
    return q, load_rgb(demo_qs.path(q.image)).resize((32, 32))


def test_offline_tokenizer_matches_open_clip():
    import open_clip

    from benchmark.models.tokenizer import build_clip_tokenizer

    texts = ["a photo of a cat riding a bicycle, 3 dogs!", "Replace the red car with a Hummer", "naïve café 東京 🙂"]
    ours = build_clip_tokenizer()(texts, padding="max_length", max_length=77, truncation=True, return_tensors="pt")
    ref = open_clip.tokenize(texts)
    used = ref != 0  # open_clip pads with 0, SD's tokenizer with end-of-text; compare the real tokens
    assert torch.equal(ours.input_ids[used], ref[used])


def test_tiny_pipeline_is_built_once_and_loaded_by_path(sd):
    from benchmark.models.diffusion import tiny_pipeline_dir

    a, b = tiny_pipeline_dir("sd"), tiny_pipeline_dir("sd")
    assert a == b and (a / "model_index.json").is_file() and (a / "tokenizer").is_dir()
    assert type(sd).__name__ == "StableDiffusionPipeline" and sd.tokenizer.vocab_size == 49408


def test_missing_pretrained_weights_name_them_and_the_tiny_profile(monkeypatch):
    from benchmark.models.diffusion import load_pipeline

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(WeightsUnavailableError, match=r"(?s)CompVis/not-a-real-model@deadbeef.*PROFILE=tiny"):
        load_pipeline("sd", weights="pretrained", model_id="CompVis/not-a-real-model", revision="deadbeef")


def test_halving_runner_splits_on_cuda_oom_and_keeps_order():
    calls = []

    def fn(chunk):
        calls.append(len(chunk))
        if len(chunk) > 2:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        return [x * 10 for x in chunk]

    runner = HalvingRunner()
    assert runner(fn, list(range(9))) == [x * 10 for x in range(9)]
    assert runner.max_batch == 2 and calls == [9, 4, 2, 2, 2, 2, 1]
    with pytest.raises(ValueError):  # other errors are not retried
        HalvingRunner()(lambda c: (_ for _ in ()).throw(ValueError("bad")), [1, 2])
    with pytest.raises(torch.cuda.OutOfMemoryError):  # a single query that does not fit is a failure
        HalvingRunner()(lambda c: (_ for _ in ()).throw(torch.cuda.OutOfMemoryError("x")), [1])


# --- null-text inversion -------------------------------------------------------------------------------------------

def test_null_text_inversion_reconstructs_far_better_than_plain_ddim_inversion(sd, guard, source):
    q, image = source
    x0 = inv.encode_images(sd, [image])
    cond, empty = inv.encode_text(sd, [q.source_caption]), inv.encode_text(sd, [""])
    grid = inv.ddim_grid(sd.scheduler, STEPS)
    traj = inv.ddim_invert(sd.unet, grid, x0, cond)
    # Random tiny weights make the text path weak, so the test gives the optimiser a larger step and more
    # iterations than the paper's 1e-2 x 10 (what is tested is that it optimises the right objective).
    nulls = inv.null_text_optimise(sd.unet, grid, traj, cond, empty, guidance=7.5, inner_steps=20, lr=1.0,
                                   lr_decay=0.01, early_stop=1e-5, early_stop_growth=2e-5)
    err = lambda x: float(((x - x0) ** 2).mean())  # noqa: E731
    plain = err(inv.ddim_sample(sd.unet, grid, traj[-1], cond, empty, 7.5))
    null_text = err(inv.ddim_sample(sd.unet, grid, traj[-1], cond, nulls, 7.5))
    assert null_text < plain / 4, (null_text, plain)


def test_null_text_queries_are_independent_in_a_batch(sd, guard, source):
    q, image = source
    x0 = inv.encode_images(sd, [image, image.transpose(0)])
    cond, empty = inv.encode_text(sd, [q.source_caption] * 2), inv.encode_text(sd, [""] * 2)
    grid = inv.ddim_grid(sd.scheduler, 2)
    kw = dict(guidance=7.5, inner_steps=3, lr=0.1, lr_decay=0.01, early_stop=1e-5, early_stop_growth=2e-5)
    both = inv.null_text_optimise(sd.unet, grid, inv.ddim_invert(sd.unet, grid, x0, cond), cond, empty, **kw)
    one = inv.null_text_optimise(sd.unet, grid, inv.ddim_invert(sd.unet, grid, x0[:1], cond[:1]), cond[:1],
                                 empty[:1], **kw)
    # Adam normalises each gradient element, so float noise from batched kernels on a near-zero gradient can move
    # that element by a sizeable fraction of lr (seen: up to 0.014, on 1-4 of 2464 elements); leakage between
    # queries would move whole embeddings by ~lr (0.1), i.e. most elements and the mean.
    for a, b in zip(both, one, strict=True):
        d = (a[:1] - b).abs()
        assert d.mean() < 1e-4 and (d > 1e-3).float().mean() < 0.01, (d.mean(), (d > 1e-3).float().mean())


# --- Prompt-to-Prompt attention control ----------------------------------------------------------------------------

def run_controlled(sd, source_caption, target_caption, edit, *, steps=4, cross=0.5, tau=0.5, max_tokens=1024):
    """One [source, target] DDIM pass of the tiny UNet under `edit`; returns the recorded cross/self maps."""
    records = []
    ctrl = AttentionController([edit], num_steps=steps, cross_replace_steps=cross, self_replace_steps=tau,
                               self_replace_max_tokens=max_tokens,
                               recorder=lambda s, c, before, after: records.append((s, c, before.clone(), after.clone())))
    grid = inv.ddim_grid(sd.scheduler, steps)
    emb = inv.encode_text(sd, [source_caption, target_caption])
    xT = torch.randn((1, 4, 16, 16), generator=torch.Generator().manual_seed(0)).repeat(2, 1, 1, 1)
    with controlled_attention(sd.unet, ctrl):
        out = inv.ddim_sample(sd.unet, grid, xT, emb, inv.encode_text(sd, ["", ""]), 7.5,
                              on_step=lambda i: setattr(ctrl, "step", i))
    return records, out


def test_empty_edit_controller_is_a_no_op(sd, guard):
    probs = torch.rand(4 * 2 * 3, 16, 77)  # (uncond/cond x 2 queries x [src, tgt]) x 3 heads
    ctrl = AttentionController([TokenEdit("none"), TokenEdit("none")], num_steps=4, cross_replace_steps=1.0,
                               self_replace_steps=1.0, self_replace_max_tokens=1024)
    for is_cross in (True, False):
        assert torch.equal(ctrl(probs, is_cross, 3), probs)
    # Source == target caption: the controlled pass equals the uncontrolled one (both branches already agree).
    cap = "a purple sports ball and a purple bottle on a night sky"
    _, controlled = run_controlled(sd, cap, cap, build_token_edit(sd.tokenizer, cap, cap, mode="auto"))
    _, free = run_controlled(sd, cap, cap, TokenEdit("none"))
    # Up to float32 noise: the two batch rows of one uncontrolled pass already differ by ~1e-6 of the output's scale
    # (batched CPU kernels), which the sampling loop amplifies; with attention at the full latent size that reaches
    # ~3e-5 on outputs of ~20, so the tolerance is relative to the scale, and a real edit must be far above it.
    tol = 1e-5 * free.abs().max().item()
    torch.testing.assert_close(controlled, free, atol=tol, rtol=1e-5)
    torch.testing.assert_close(controlled[0], controlled[1], atol=tol, rtol=1e-5)
    other = cap.replace("ball", "cube")
    _, swapped = run_controlled(sd, cap, other, build_token_edit(sd.tokenizer, cap, other, mode="auto"))
    _, swapped_free = run_controlled(sd, cap, other, TokenEdit("none"))
    assert (swapped[1] - swapped_free[1]).abs().max() > 100 * tol


def test_word_swap_injects_source_maps_only_in_the_chosen_steps(sd, guard):
    src, tgt = "a red ball on the grass", "a blue ball on the grass"
    edit = build_token_edit(sd.tokenizer, src, tgt, mode="replace")
    steps, cross, tau = 4, 0.5, 0.25
    # 8x8 positions: the tiny (16x16-latent) analogue of P2P's 32x32 of SD's 64x64 latent
    max_tokens = 64
    records, out = run_controlled(sd, src, tgt, edit, steps=steps, cross=cross, tau=tau, max_tokens=max_tokens)
    swapped = 2  # bos, "a", "red"/"blue"
    assert sd.tokenizer(src).input_ids[swapped] != sd.tokenizer(tgt).input_ids[swapped]
    seen_cross = set()
    for step, is_cross, before, after in records:
        # cond half, shape (queries, [src, tgt], heads, q, k): the source branch is never modified
        assert torch.equal(after[:, 0], before[:, 0])
        if is_cross:
            seen_cross.add(step)
            if step < int(cross * steps):
                # target keeps the source's layout for every token, including the swapped word's map
                assert torch.equal(after[:, 1], after[:, 0])
                assert not torch.allclose(before[:, 1, ..., swapped], before[:, 0, ..., swapped])
            else:
                assert torch.equal(after[:, 1], before[:, 1])
        elif step < int(tau * steps) and before.shape[-2] <= max_tokens:
            assert torch.equal(after[:, 1], after[:, 0])
        else:  # later steps, and layers finer than max_tokens (appearance detail) at every step
            assert torch.equal(after[:, 1], before[:, 1])
    assert seen_cross == set(range(steps))
    # the tiny UNet has attention at the full latent size and below, as SD: both sides of the threshold were seen
    latent = 16 * 16
    assert {b.shape[-2] for _, c, b, _ in records if not c} == {latent, latent // 4}
    assert {b.shape[-2] for _, c, b, _ in records if c} == {latent, latent // 4}
    assert not torch.allclose(out[0], out[1])  # the swapped word's values still change the image


def test_reweighting_scales_only_the_chosen_words_maps(sd):
    src, tgt = "a red ball on the grass", "a blue ball on the grass"
    plain = build_token_edit(sd.tokenizer, src, tgt, mode="replace")
    weighted = build_token_edit(sd.tokenizer, src, tgt, mode="replace", reweight={"blue": 3.0})
    assert torch.nonzero(weighted.equalizer != 1).flatten().tolist() == [2]
    probs = torch.rand(4 * 1 * 2, 16, 77)
    kw = dict(num_steps=2, cross_replace_steps=1.0, self_replace_steps=0.0, self_replace_max_tokens=1024)
    a = AttentionController([plain], **kw)(probs, True, 2).view(2, 1, 2, 2, 16, 77)
    b = AttentionController([weighted], **kw)(probs, True, 2).view(2, 1, 2, 2, 16, 77)
    torch.testing.assert_close(b[1, 0, 1, ..., 2], 3 * a[1, 0, 1, ..., 2])
    keep = [i for i in range(77) if i != 2]
    assert torch.equal(b[..., keep], a[..., keep]) and torch.equal(b[:, :, 0], a[:, :, 0])


def test_refinement_maps_shared_tokens_and_frees_new_ones(sd):
    src, tgt = "a ball on the grass", "a big red ball on the grass"
    e = build_token_edit(sd.tokenizer, src, tgt, mode="auto")
    assert e.mode == "refine"
    s_ids, t_ids = sd.tokenizer(src).input_ids, sd.tokenizer(tgt).input_ids
    for j, tok in enumerate(t_ids):
        if e.alphas[j] == 1:
            assert s_ids[int(e.mapper[j])] == tok
    new = [j for j in range(len(t_ids)) if e.alphas[j] == 0]
    assert [sd.tokenizer.decode([t_ids[j]]).strip() for j in new] == ["big", "red"]


# --- Imagic --------------------------------------------------------------------------------------------------------

def test_imagic_cache_key_covers_every_input(source):
    from benchmark.editing.imagic import finetune_key

    _, image = source
    base = dict(image=image, prompt="a photo of a dog", seed=1, weights={"model_id": "m", "revision": "r"},
                optim={"embedding_steps": 2, "embedding_lr": 1e-3, "finetune_steps": 2, "finetune_lr": 2e-6})
    k = finetune_key(**base)
    assert finetune_key(**base) == k
    other_pixels = image.copy()
    other_pixels.putpixel((0, 0), tuple(255 - c for c in image.getpixel((0, 0))))
    variants = [
        {"image": other_pixels},  # the peer bug: a new image with the same prompt must not reuse the fine-tune
        {"prompt": "a photo of a cat"}, {"seed": 2}, {"weights": {"model_id": "m", "revision": "r2"}},
        *({"optim": {**base["optim"], name: value * 2}} for name, value in base["optim"].items()),
    ]
    keys = {finetune_key(**{**base, **v}) for v in variants}
    assert k not in keys and len(keys) == len(variants)


def test_imagic_eta_endpoints_reproduce_the_embeddings():
    from benchmark.editing.imagic import interpolate

    g = torch.Generator().manual_seed(0)
    e_opt, e_tgt = torch.randn(1, 77, 32, generator=g), torch.randn(1, 77, 32, generator=g)
    assert torch.equal(interpolate(e_opt, e_tgt, 0.0), e_opt)
    assert torch.equal(interpolate(e_opt, e_tgt, 1.0), e_tgt)
    torch.testing.assert_close(interpolate(e_opt, e_tgt, 0.6), 0.6 * e_tgt + 0.4 * e_opt)


def test_imagic_never_reuses_a_fine_tune_across_images(demo_qs):
    from hydra.utils import instantiate

    from benchmark.commands.run import compose
    from benchmark.editing import imagic
    from benchmark.io.imageio import load_rgb

    cfg, _ = compose(["editor=imagic", "queryset=demo", "profile=tiny", "editor.cache_size=4"])
    editor = instantiate(cfg.editor)
    qs = [q for q in demo_qs.queries if q.image_id in ("demo000", "demo001")]
    a = next(q for q in qs if q.image_id == "demo000")
    b = dataclasses.replace(next(q for q in qs if q.image_id == "demo001"), target_caption=a.target_caption)
    ims = [load_rgb(demo_qs.path(q.image)) for q in (a, b)]
    imagic.FINETUNES.entries.clear()
    hits0, misses0 = imagic.FINETUNES.hits, imagic.FINETUNES.misses
    out = editor.edit([a, b], ims, seeds=[7, 7])  # same prompt, same seed, different images
    assert imagic.FINETUNES.misses - misses0 == 2 and imagic.FINETUNES.hits == hits0
    again = editor.edit([a], ims[:1], seeds=[7])  # same everything: reused, identical output
    assert imagic.FINETUNES.hits == hits0 + 1
    assert np.array_equal(np.asarray(again[0]), np.asarray(out[0]))


def test_imagic_edits_a_query_alone_as_it_does_in_a_batch(demo_qs):
    """Imagic's fine-tune and sampling run one query at a time: the second query of a batch of two, edited alone
    with a fresh fine-tune (the cache cleared), gives the same pixels (what a resume that re-edits it alone does)."""
    from hydra.utils import instantiate

    from benchmark.commands.run import compose
    from benchmark.editing import imagic
    from benchmark.io.imageio import load_rgb

    cfg, _ = compose(["editor=imagic", "queryset=demo", "profile=tiny"])
    editor = instantiate(cfg.editor)
    qs = [next(q for q in demo_qs.queries if q.image_id == i) for i in ("demo000", "demo001")]
    ims = [load_rgb(demo_qs.path(q.image)) for q in qs]
    imagic.FINETUNES.entries.clear()
    both = editor.edit(qs, ims, seeds=[3, 4])
    imagic.FINETUNES.entries.clear()
    misses = imagic.FINETUNES.misses
    alone = editor.edit(qs[1:], ims[1:], seeds=[4])
    assert imagic.FINETUNES.misses == misses + 1  # fine-tuned again, not read from the cache
    assert np.array_equal(np.asarray(alone[0]), np.asarray(both[1]))


# --- real devices and real weights (opt-in) ------------------------------------------------------------------------

@pytest.mark.gpu
def test_cuda_defaults_to_fp16_and_sdpa():
    from diffusers.models.attention_processor import AttnProcessor2_0

    from benchmark.models.diffusion import load_pipeline

    pipe, prov = load_pipeline("sd", weights="tiny", model_id="unused", revision="unused", device="cuda")
    assert prov["dtype"] == "float16" and pipe.unet.dtype == torch.float16
    assert all(isinstance(p, AttnProcessor2_0) for p in pipe.unet.attn_processors.values())


DIFFUSION_EDITORS = ["ip2p", "magicbrush", "sdedit", "diffedit", "p2p", "imagic", "ledits"]


@pytest.mark.weights
@pytest.mark.parametrize("name", DIFFUSION_EDITORS)
def test_pretrained_editor_edits_one_query(name, demo_qs):
    """Real checkpoints (needs them cached or the hub): one query, few steps, a valid non-trivial edit."""
    from hydra.utils import instantiate

    from benchmark.commands.run import compose
    from benchmark.editing.editor import query_seed
    from benchmark.io.imageio import load_rgb

    few = ["editor.steps=10"] + (["editor.embedding_steps=5", "editor.finetune_steps=5"] if name == "imagic" else [])
    cfg, _ = compose([f"editor={name}", "queryset=demo", "profile=pretrained", *few])
    editor = instantiate(cfg.editor)
    q = demo_qs.queries[0]
    src = load_rgb(demo_qs.path(q.image))
    out = editor.edit([q], [src], seeds=[query_seed(0, q.id)])[0]
    assert out.size == src.size and np.asarray(out).std() > 1
    assert editor.info()["weights"] == "pretrained" and editor.info()["revision"] == cfg.editor.revision


def test_p2p_through_the_edit_stage_and_rerun(tmp_path):
    """End to end through the harness: every edit is valid, and a rerun recomputes nothing."""
    from conftest import run_demo

    args = ("limit=6", "batch_size=4", "stages=[edit]")
    first = run_demo(tmp_path, "p2p", *args)["edit"]
    assert (first.computed, first.failed) == (6, 0)
    again = run_demo(tmp_path, "p2p", *args)["edit"]
    assert (again.computed, again.skipped) == (0, 6)


def test_word_swap_with_different_token_counts_maps_words_onto_words(sd):
    """The `aligned` option (editmeter's earlier rule); the authors' rule is pinned in test_p2p_reference.py."""
    src, tgt = "a red ball on the grass", "a aquamarine ball on the grass"  # 1 token -> 2 tokens
    e = build_token_edit(sd.tokenizer, src, tgt, mode="auto", token_mapping="aligned")
    assert e.mode == "replace"
    m = e.mapper
    torch.testing.assert_close(m.sum(0), torch.ones(77))  # every target position is a convex mix of source maps
    assert m[2, 2] == 1 and m[2, 3] == 1  # "red" -> both tokens of "aquamarine"
    assert m[3, 4] == 1 and m[0, 0] == 1  # "ball" keeps its layout, shifted by one; start of text stays
    # the authors' rule: half of "red"'s map on each token, then target position j takes source position j
    ref = build_token_edit(sd.tokenizer, src, tgt, mode="auto").mapper
    assert ref[2, 2] == ref[2, 3] == 0.5 and ref[4, 4] == 1 and ref[3, 4] == 0
    with pytest.raises(ValueError, match="same number of words"):
        build_token_edit(sd.tokenizer, src, "a ball", mode="replace")
