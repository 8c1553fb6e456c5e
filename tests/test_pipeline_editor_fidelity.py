"""The diffusers-pipeline editors follow their authors' scripts (docs/diffusion.md, "Fidelity to the authors'
scripts: pipeline editors"): InstructPix2Pix / MagicBrush input sizes, MagicBrush's original checkpoint file,
DiffEdit's inversion guidance, SDEdit's reference settings, LEDITS++'s intersect mask. Tiny profile, offline."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from PIL import Image, ImageOps

from benchmark.commands.run import compose
from benchmark.editing.editor import query_seed
from benchmark.plan.config import read_plan

pytestmark = pytest.mark.usefixtures("single_thread_torch")


@functools.cache
def tiny_editor(name: str, *overrides: str):
    from hydra.utils import instantiate

    cfg, _ = compose([f"editor={name}", "queryset=demo", "profile=tiny", *overrides])
    return instantiate(cfg.editor)


class Spy:
    """Stands in for a pipeline object: records the keyword arguments of every call, delegates everything else."""

    def __init__(self, pipe):
        self._pipe, self.calls = pipe, []

    def __getattr__(self, name):
        return getattr(self._pipe, name)

    def __call__(self, **kwargs):
        self.calls.append(kwargs)
        return self._pipe(**kwargs)


def edit_spied(editor, queries, images, seeds):
    """`editor.edit` with its pipeline behind a Spy: (the edits, the pipeline calls' keyword arguments)."""
    spy, real = Spy(editor.pipe), editor.pipe
    editor.pipe = spy
    try:
        return editor.edit(queries, images, seeds=seeds), spy.calls
    finally:
        editor.pipe = real


def noise_image(size, seed=0):
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8), mode="RGB")


def instruction_query(demo_qs):
    return next(q for q in demo_qs.queries if q.instruction)


# ------------------------------------------------------------------------------------ 1. IP2P / MagicBrush sizes

# (source w, h) -> what edit_cli.py's arithmetic gives at --resolution 512 (its multiple, 64), worked out by hand:
# 640x480: 384 short side, 512 long; 640x427: the short side rounds up to 384, so the long one is 575.5 -> 512 and
# the sides are cropped; 500x333: 340.9 -> 384, 576.6 -> 576; a square 49 px source: 49 * (448 / 49) lands just
# under 512 in floats and floors to 448.
EDIT_CLI_SIZES = {(640, 480): (512, 384), (640, 427): (512, 384), (500, 333): (576, 384), (333, 500): (384, 576),
                  (512, 512): (512, 512), (1024, 1024): (512, 512), (49, 49): (448, 448), (256, 256): (512, 512)}


@pytest.mark.parametrize(("source", "expected"), EDIT_CLI_SIZES.items())
def test_model_size_is_edit_cli_arithmetic(source, expected):
    from benchmark.editing.ip2p import model_size

    assert model_size(*source, 512, 64) == expected


@pytest.mark.parametrize("source", [(640, 427), (500, 333), (333, 500), (80, 50), (50, 80), (64, 64)])
def test_fit_box_is_the_region_imageops_fit_resizes(source):
    from benchmark.editing.ip2p import fit_box, model_size

    src = noise_image(source)
    size = model_size(*source, 32, 8)
    ours = src.resize(size, Image.Resampling.LANCZOS, box=fit_box(source, size))
    assert np.array_equal(np.asarray(ours), np.asarray(ImageOps.fit(src, size, method=Image.Resampling.LANCZOS)))


@pytest.mark.parametrize("name", ["ip2p", "magicbrush"])
def test_ip2p_model_sees_edit_cli_size_and_returns_the_source_size(name, demo_qs):
    """A non-square source: the pipeline gets edit_cli.py's size (at the tiny profile's 32 px, multiple 8) cropped
    and resized with Lanczos; the edit comes back at the source's size, the cropped strips the source's own pixels."""
    editor = tiny_editor(name)
    assert editor.info()["resize"] == "aspect" and editor.info()["size_multiple"] == 8
    q = instruction_query(demo_qs)
    src = noise_image((80, 50), seed=1)
    # 80x50 at 32 px: the short side 20 -> 24, scale 24 / 50, the long side 38.4 -> 32: (32, 24), the sides
    # cropped to 66.7 px of the 80 (6.7 px each side)
    prepared = editor.prepare(src)
    assert prepared.size == (32, 24)
    assert np.array_equal(np.asarray(prepared), np.asarray(ImageOps.fit(src, (32, 24), method=Image.Resampling.LANCZOS)))
    (out,), calls = edit_spied(editor, [q], [src], [query_seed(0, q.id)])
    assert [im.size for call in calls for im in call["image"]] == [(32, 24)]
    assert tuple(calls[0]["latents"].shape[-2:]) == (24 // editor.pipe.vae_scale_factor, 32 // editor.pipe.vae_scale_factor)
    assert out.size == src.size
    arr, s = np.asarray(out), np.asarray(src)
    assert np.array_equal(arr[:, :7], s[:, :7]) and np.array_equal(arr[:, 73:], s[:, 73:])  # outside the crop
    assert not np.array_equal(arr[:, 7:73], s[:, 7:73])                                       # the edited region


def test_ip2p_mixed_aspect_ratios_in_one_batch_match_one_by_one(demo_qs):
    """Sources of different model sizes in one batch run as groups; each result is its own query's alone."""
    editor = tiny_editor("ip2p")
    qs = [q for q in demo_qs.queries if q.instruction][:3]
    srcs = [noise_image((80, 50), 2), noise_image((50, 80), 3), noise_image((64, 64), 4)]
    seeds = [query_seed(0, q.id) for q in qs]
    together, calls = edit_spied(editor, qs, srcs, seeds)
    assert [[im.size for im in call["image"]] for call in calls] == [[(32, 24)], [(24, 32)], [(32, 32)]]
    alone = [editor.edit([q], [im], seeds=[s])[0] for q, im, s in zip(qs, srcs, seeds, strict=True)]
    for a, b, src in zip(together, alone, srcs, strict=True):
        assert a.size == src.size
        assert int(np.abs(np.asarray(a, np.int16) - np.asarray(b, np.int16)).max()) <= 1


def test_square_option_restores_the_squashed_convention(demo_qs):
    editor = tiny_editor("ip2p", "editor.resize=square")
    assert editor.info()["resize"] == "square" and "size_multiple" not in editor.info()
    src = noise_image((80, 50), seed=1)
    prepared = editor.prepare(src)
    assert np.array_equal(np.asarray(prepared), np.asarray(src.resize((32, 32), Image.Resampling.BICUBIC)))
    q = instruction_query(demo_qs)
    (out,), calls = edit_spied(editor, [q], [src], [query_seed(0, q.id)])
    assert [im.size for call in calls for im in call["image"]] == [(32, 32)]
    assert out.size == src.size
    # the whole output is stretched back: no source pixels are kept
    assert not np.array_equal(np.asarray(out)[:, :7], np.asarray(src)[:, :7])


def test_square_sources_get_the_same_model_size_either_way(demo_qs):
    src = noise_image((256, 256))
    assert tiny_editor("ip2p").prepare(src).size == tiny_editor("ip2p", "editor.resize=square").prepare(src).size


def test_unknown_resize_mode_is_refused():
    with pytest.raises(Exception, match="resize='squash'; expected one of aspect, square"):
        tiny_editor("ip2p", "editor.resize=squash")


# ------------------------------------------------------------------------------- 2. MagicBrush's original file

FAKE_COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _pretrained_magicbrush(*overrides):
    from hydra.utils import instantiate

    cfg, _ = compose(["editor=magicbrush", "queryset=demo", "profile=pretrained", "editor.device=cpu",
                      "editor.dtype=fp32", *overrides])
    return cfg, lambda: instantiate(cfg.editor)


def test_magicbrush_single_file_routes_to_from_single_file(monkeypatch):
    """`editor.checkpoint=single_file` downloads the authors' .ckpt at its configured revision and builds the
    pipeline with from_single_file, component configs from ip2p's pinned repo, EMA weights; the provenance names
    the file and the commit the cache holds."""
    import diffusers
    import huggingface_hub

    from benchmark.models.diffusion import tiny_pipeline_dir

    downloads, builds = [], []
    path = f"/hub/models--osunlp--InstructPix2Pix-MagicBrush/snapshots/{FAKE_COMMIT}/MagicBrush-epoch-52-step-4999.ckpt"

    def fake_download(repo_id, filename, **kwargs):
        downloads.append((repo_id, filename, kwargs))
        return path

    def fake_from_single_file(cls, link, **kwargs):
        builds.append((cls.__name__, link, kwargs))
        return cls.from_pretrained(str(tiny_pipeline_dir("ip2p")), safety_checker=None, requires_safety_checker=False)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    monkeypatch.setattr(diffusers.StableDiffusionInstructPix2PixPipeline, "from_single_file",
                        classmethod(fake_from_single_file))
    cfg, build = _pretrained_magicbrush("editor.checkpoint=single_file")
    editor = build()
    assert downloads == [("osunlp/InstructPix2Pix-MagicBrush", "MagicBrush-epoch-52-step-4999.ckpt",
                          {"revision": cfg.editor.single_file.revision})]
    ((cls_name, link, kwargs),) = builds
    assert cls_name == "StableDiffusionInstructPix2PixPipeline" and link == path
    assert kwargs["config"] == "timbrooks/instruct-pix2pix"
    assert kwargs["revision"] == "31519b5cb02a7fd89b906d88731cd4d6a7bbf88d" and kwargs["extract_ema"] is True
    assert kwargs["safety_checker"] is None
    info = editor.info()
    assert info["checkpoint"] == "single_file" and info["revision"] == FAKE_COMMIT
    assert info["model_id"] == "osunlp/InstructPix2Pix-MagicBrush/MagicBrush-epoch-52-step-4999.ckpt"


def test_magicbrush_default_is_the_diffusers_conversion(monkeypatch):
    import diffusers

    from benchmark.models.diffusion import tiny_pipeline_dir

    cls = diffusers.StableDiffusionInstructPix2PixPipeline
    tiny = cls.from_pretrained(str(tiny_pipeline_dir("ip2p")), safety_checker=None, requires_safety_checker=False)
    loads = []

    def fake_from_pretrained(_cls, source, **kwargs):
        loads.append((source, kwargs.get("revision")))
        return tiny

    def refuse(*args, **kwargs):
        raise AssertionError("from_single_file called without checkpoint=single_file")

    monkeypatch.setattr(cls, "from_pretrained", classmethod(fake_from_pretrained))
    monkeypatch.setattr(cls, "from_single_file", classmethod(refuse))
    cfg, build = _pretrained_magicbrush()
    assert cfg.editor.checkpoint == "diffusers"
    info = build().info()
    assert loads == [("vinesmsuic/magicbrush-jul7", "105e768cb4167881474aee9b94e7db9c0b4a371d")]
    assert "checkpoint" not in info and info["model_id"] == "vinesmsuic/magicbrush-jul7"


def test_magicbrush_single_file_offline_names_the_file_and_the_fix(monkeypatch, tmp_path):
    """Offline (the test suite's HF_HUB_OFFLINE=1) with an empty hub cache: the real download fails and the error
    says which file, where from, and the two ways out."""
    import huggingface_hub

    from benchmark.io.model_cache import WeightsUnavailableError

    real = huggingface_hub.hf_hub_download
    monkeypatch.setattr(huggingface_hub, "hf_hub_download",
                        lambda *a, **kw: real(*a, cache_dir=str(tmp_path), **kw))
    _, build = _pretrained_magicbrush("editor.checkpoint=single_file")
    with pytest.raises(Exception) as err:  # noqa: PT011 - Hydra wraps it; the cause is checked below
        build()
    cause = err.value
    while cause is not None and not isinstance(cause, WeightsUnavailableError):
        cause = cause.__cause__
    assert cause is not None, err.value
    msg = str(cause)
    for part in ("MagicBrush-epoch-52-step-4999.ckpt", "osunlp/InstructPix2Pix-MagicBrush",
                 "editor.checkpoint=single_file", "editor.checkpoint=diffusers", "PROFILE=tiny"):
        assert part in msg, (part, msg)


def test_weights_lists_the_single_file_for_the_preflight():
    from benchmark.plan import weights as W

    cfg, _ = _pretrained_magicbrush("editor.checkpoint=single_file")
    (ck,) = [c for c in W.resolve(read_plan(cfg), "magicbrush") if c.component.startswith("editor")]
    assert (ck.kind, ck.source, ck.files) == ("hf-file", "osunlp/InstructPix2Pix-MagicBrush",
                                              ("MagicBrush-epoch-52-step-4999.ckpt",))


def test_tiny_profile_ignores_the_single_file_option():
    assert tiny_editor("magicbrush", "editor.checkpoint=single_file").info() == tiny_editor("magicbrush").info()


# ------------------------------------------------------------------------------------ 3. DiffEdit's inversion

@pytest.mark.parametrize("scale", [7.5, 3.0])
def test_diffedit_inversion_gets_the_configured_guidance(scale, demo_qs):
    editor = tiny_editor("diffedit", f"editor.guidance_scale={scale}")
    seen = []
    real = editor.diffedit.invert

    def spy(**kwargs):
        seen.append(kwargs)
        return real(**kwargs)

    editor.diffedit.invert = spy
    try:
        q = next(q for q in demo_qs.queries if q.source_caption and q.target_caption)
        editor.edit([q], [noise_image((64, 64))], seeds=[0])
    finally:
        del editor.diffedit.invert
    assert [kw.get("guidance_scale") for kw in seen] == [scale]


# --------------------------------------------------------------------------------------- 4. SDEdit's reference

def test_sdedit_defaults_are_compvis_img2img():
    """CompVis/stable-diffusion scripts/img2img.py: DDIM, 50 steps, strength 0.75, --scale 5.0."""
    cfg, _ = compose(["editor=sdedit", "queryset=demo", "profile=pretrained"])
    e = cfg.editor
    assert (e.scheduler, e.steps, e.strength, e.guidance_scale) == ("DDIMScheduler", 50, 0.75, 5.0)


# ------------------------------------------------------------------------------------ 5. LEDITS++'s masks

def test_ledits_intersect_mask_reaches_the_pipeline(demo_qs):
    """The authors' default (ml-research/ledits_pp: use_intersect_mask=False) is ours; an override reaches the call."""
    q = next(q for q in demo_qs.queries if q.source_caption and q.target_caption)
    for overrides, expected in (((), False), (("editor.use_intersect_mask=true",), True)):
        editor = tiny_editor("ledits", *overrides)
        spy, real = Spy(editor.ledits), editor.ledits
        editor.ledits = spy
        try:
            editor.edit([q], [noise_image((64, 64))], seeds=[0])
        finally:
            editor.ledits = real
        assert [c["use_intersect_mask"] for c in spy.calls] == [expected], overrides
        assert editor.info()["use_intersect_mask"] is expected
