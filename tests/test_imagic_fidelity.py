"""Imagic against its reference, diffusers' community pipeline `examples/community/imagic_stable_diffusion.py`
(docs/diffusion.md, "Imagic: fidelity to the reference and mixed precision"), and its mixed-precision optimisation.

The reference samples the VAE posterior once (`latent_dist.sample(generator)`) before its optimisation and
reconstructs that latent in both stages; it samples with a `DDIMScheduler` built with `steps_offset` 0. The
optimisation's bf16 autocast path (the default on CUDA) must work on a CPU too."""

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.usefixtures("single_thread_torch")


def _editor(*overrides):
    from hydra.utils import instantiate

    from benchmark.commands.run import compose

    cfg, _ = compose(["editor=imagic", "queryset=demo", "profile=tiny", "editor.cache_size=0", *overrides])
    return cfg, instantiate(cfg.editor)


def _query(demo_qs):
    from benchmark.editing.editor import query_seed
    from benchmark.io.imageio import load_rgb

    q = demo_qs.queries[0]
    return q, load_rgb(demo_qs.path(q.image)), query_seed(0, q.id)


def _spy_latents(monkeypatch):
    """The source latent each optimisation stage receives, in call order."""
    from benchmark.editing import imagic

    seen = []
    for name in ("optimise_embedding", "finetune_unet"):
        real = getattr(imagic, name)

        def spy(unet, scheduler, x0, *args, _real=real, **kwargs):
            seen.append(x0.detach().clone())
            return _real(unet, scheduler, x0, *args, **kwargs)

        monkeypatch.setattr(imagic, name, spy)
    return seen


def _posterior(editor, image):
    """(mean, std) of the VAE posterior of the model-resolution source, fp32."""
    x = editor.pipe.image_processor.preprocess([image]).to(editor.pipe.vae.device, editor.pipe.vae.dtype)
    with torch.no_grad():
        dist = editor.pipe.vae.encode(x).latent_dist
    return dist.mean.float(), dist.std.float()


def test_source_latent_is_one_posterior_sample_from_the_optimisation_stream(demo_qs, monkeypatch):
    from benchmark.editing.editor import generators, query_seed

    _, editor = _editor()
    q, src, seed = _query(demo_qs)
    seen = _spy_latents(monkeypatch)
    out = editor.edit([q], [src], seeds=[seed])[0]
    assert len(seen) == 2 and torch.equal(seen[0], seen[1])  # one draw, reconstructed by both stages
    mean, std = _posterior(editor, editor.prepare(src))
    sf = editor.pipe.vae.config.scaling_factor
    assert (seen[0] - mean * sf).abs().max() > 1e-3  # not the mean (today's editmeter)
    # the first draw of the query's optimisation stream, before the optimisation's timesteps and noise
    gen = generators([query_seed(seed, "imagic-optimisation")])[0]
    eps = torch.randn(mean.shape, generator=gen)
    torch.testing.assert_close(seen[0], (mean + std * eps) * sf, rtol=0, atol=1e-6)
    assert editor.info()["source_latent"] == "sample"

    again = editor.edit([q], [src], seeds=[seed])[0]  # same seed: the same draw, the same edit
    assert torch.equal(seen[2], seen[0]) and np.array_equal(np.asarray(again), np.asarray(out))
    editor.edit([q], [src], seeds=[seed + 1])  # another seed: another draw
    assert not torch.equal(seen[4], seen[0])


def test_source_latent_mean_restores_the_posterior_mean(demo_qs, monkeypatch):
    from benchmark.editing import inversion as inv
    from benchmark.editing.base import Item

    _, editor = _editor("editor.source_latent=mean")
    q, src, seed = _query(demo_qs)
    seen = _spy_latents(monkeypatch)
    editor.edit([q], [src], seeds=[seed])
    image = editor.prepare(src)
    assert torch.equal(seen[0], inv.encode_images(editor.pipe, [image]).float()) and torch.equal(seen[1], seen[0])
    assert editor.info()["source_latent"] == "mean"
    _, sampling = _editor()
    item = Item(q, image, seed)
    assert editor.key(item) != sampling.key(item)  # the fine-tune cache tells the two apart


TEN_STEPS_OFFSET_0 = [900, 800, 700, 600, 500, 400, 300, 200, 100, 0]  # 1000 // 10 = 100: k * 100, k = 9 ... 0
TEN_STEPS_OFFSET_1 = [901, 801, 701, 601, 501, 401, 301, 201, 101, 1]  # the same + SD's checkpoint steps_offset 1


@pytest.mark.parametrize(("overrides", "expected"), [((), TEN_STEPS_OFFSET_0),
                                                     (("editor.steps_offset=1",), TEN_STEPS_OFFSET_1)])
def test_sampling_timesteps_at_10_steps(demo_qs, overrides, expected):
    from benchmark.editing.base import Item

    _, editor = _editor("editor.steps=10", *overrides)
    q, src, seed = _query(demo_qs)
    sched = editor.pipe.scheduler
    steps, real = [], sched.step

    def spy(model_output, timestep, *args, **kwargs):
        steps.append(int(timestep))
        return real(model_output, timestep, *args, **kwargs)

    sched.step = spy
    editor.edit([q], [src], seeds=[seed])
    assert steps == expected
    assert editor.info()["steps_offset"] == (1 if overrides else 0)

    # The optimisation's forward process reads alphas_cumprod only: the offset leaves it, and the fine-tune, alone.
    _, other = _editor("editor.steps=10", f"editor.steps_offset={0 if overrides else 1}")
    g = torch.Generator().manual_seed(0)
    x0, noise, t = torch.randn(1, 4, 16, 16, generator=g), torch.randn(1, 4, 16, 16, generator=g), torch.tensor([981])
    assert torch.equal(sched.add_noise(x0, noise, t), other.pipe.scheduler.add_noise(x0, noise, t))
    item = Item(q, editor.prepare(src), seed)
    assert editor.key(item) == other.key(item)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_bf16_autocast_optimisation_runs_on_cpu(demo_qs, monkeypatch, dtype):
    """The CUDA default's code path at the tiny profile on a CPU: bf16 autocast around the optimisation's forward,
    fp32 master weights, gradients and Adam state; sampling outside autocast at the pipeline's dtype."""
    cfg, editor = _editor("editor.optimisation_precision=bf16_autocast", f"editor.dtype={dtype}")
    q, src, seed = _query(demo_qs)
    calls, real = [], editor.pipe.unet.forward

    def spy(*args, **kwargs):
        calls.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"), editor.pipe.unet.dtype))
        return real(*args, **kwargs)

    editor.pipe.unet.forward = spy
    adam, real_step = [], torch.optim.Adam.step

    def step(self, *args, **kwargs):
        out = real_step(self, *args, **kwargs)
        params = [p for group in self.param_groups for p in group["params"] if p.grad is not None]
        adam.append({(p.dtype, p.grad.dtype, self.state[p]["exp_avg"].dtype, self.state[p]["exp_avg_sq"].dtype)
                     for p in params})
        return out

    monkeypatch.setattr(torch.optim.Adam, "step", step)
    out = np.asarray(editor.edit([q], [src], seeds=[seed])[0])
    o = cfg.editor
    n = o.embedding_steps + o.finetune_steps
    assert calls[:n] == [(True, torch.bfloat16, torch.float32)] * n
    sampling = {torch.bfloat16: "bf16", torch.float32: "fp32"}
    assert {(c[0], sampling[c[2]]) for c in calls[n:]} == {(False, dtype)}
    f32 = torch.float32
    assert len(adam) == n and set().union(*adam) == {(f32, f32, f32, f32)}
    assert np.isfinite(out).all() and out.std() > 1  # not a NaN edit quantised to black
    assert editor.info()["optimisation_precision"] == "bf16_autocast"


def test_optimisation_precision_resolves_per_device_and_keys_the_fine_tune(demo_qs):
    from benchmark.editing.base import Item
    from benchmark.editing.imagic import resolve_precision

    assert resolve_precision("auto", "cuda") == resolve_precision("auto", "cuda:1") == "bf16_autocast"
    assert resolve_precision("auto", "cpu") == "fp32"
    assert resolve_precision("fp32", "cuda") == "fp32" and resolve_precision("bf16_autocast", "cpu") == "bf16_autocast"
    _, auto = _editor()
    assert auto.info()["optimisation_precision"] == "fp32"  # auto on a CPU
    _, bf16 = _editor("editor.optimisation_precision=bf16_autocast")
    q, src, seed = _query(demo_qs)
    item = Item(q, auto.prepare(src), seed)
    assert auto.key(item) != bf16.key(item)


@pytest.mark.parametrize(("override", "message"), [
    ("editor.optimisation_precision=fp16", "optimisation_precision 'fp16' is not one of auto, fp32, bf16_autocast"),
    ("editor.source_latent=median", "source_latent 'median' is not one of sample, mean"),
])
def test_unknown_option_is_one_clear_error(override, message):
    from hydra.errors import InstantiationException

    with pytest.raises((ValueError, InstantiationException), match=message):
        _editor(override)
