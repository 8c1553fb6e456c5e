"""GPU-class bugs caught on a CPU: half precision (bf16, and fp16 where the CPU runs it) and device mismatches.

CI has no GPU. Two things a CUDA run meets that a default CPU run does not: half-precision weights (fp16 by default
on CUDA) and a model that lives on another device than the tensors code makes without one. Every diffusion editor
goes through the edit stage here with `editor.dtype=bf16` / `fp16`, loaded on ``cpu:0`` under `ModelDeviceGuard`
(tests/helpers/device_guard.py), which raises where CUDA would say "Expected all tensors to be on the same device".
"""

import numpy as np
import pytest
import torch
from device_guard import MODEL_DEVICE, DeviceMismatch, ModelDeviceGuard, pipeline_modules

from benchmark.editing.base import DiffusionEditor


def _diffusion_editors() -> list[str]:
    """Every editor config whose class is a DiffusionEditor: a new one is covered without being listed."""
    from hydra.utils import get_class
    from omegaconf import OmegaConf

    from benchmark.io.provenance import PROJECT_ROOT
    from benchmark.plan.config import options

    names = []
    for name in options("editor"):
        target = OmegaConf.load(PROJECT_ROOT / "configs" / "editor" / f"{name}.yaml").get("_target_")
        if target and issubclass(get_class(target), DiffusionEditor):
            names.append(name)
    return names


DIFFUSION_EDITORS = _diffusion_editors()
pytestmark = pytest.mark.usefixtures("single_thread_torch")


def test_every_diffusion_editor_is_covered():
    assert FP16_EVERY_RUN <= set(DIFFUSION_EDITORS)
    assert {"ip2p", "magicbrush", "sdedit", "diffedit", "p2p", "imagic", "ledits",
            "flux_kontext", "qwen_image_edit", "flux2", "omnigen"} <= set(DIFFUSION_EDITORS)  # the DiT ones subclass it too


def _cpu_runs_fp16() -> bool:
    try:
        conv = torch.nn.Conv2d(4, 4, 3).half()
        return bool(torch.isfinite(conv(torch.ones(1, 4, 8, 8, dtype=torch.float16))).all())
    except RuntimeError:
        return False


HALF = ["bf16"] + (["fp16"] if _cpu_runs_fp16() else [])


@pytest.fixture
def guarded_edits(monkeypatch):
    """Every DiffusionEditor call runs under ModelDeviceGuard of its own pipeline; yields the op counts seen."""
    seen = []
    original = DiffusionEditor.edit_deferred

    def guarded(self, *args, **kwargs):
        assert str(self.device) == str(MODEL_DEVICE), "load the editor with editor.device=cpu:0"
        with ModelDeviceGuard(pipeline_modules(self.pipe)) as guard:
            out = original(self, *args, **kwargs)
        seen.append(guard.ops)
        return out

    monkeypatch.setattr(DiffusionEditor, "edit_deferred", guarded)
    return seen


# fp16 in the default suite for one editor of each family (an image-conditioned UNet, P2P's attention control,
# Imagic's fp32 optimisation, a DiT, a flow solver); every editor's fp16 with --run-slow. bf16 runs every editor.
FP16_EVERY_RUN = {"ip2p", "p2p", "imagic", "flux_kontext", "fireflow"}
HALF_CASES = [pytest.param(name, dtype, marks=() if dtype == "bf16" or name in FP16_EVERY_RUN else pytest.mark.slow,
                           id=f"{name}-{dtype}") for name in DIFFUSION_EDITORS for dtype in HALF]


@pytest.mark.parametrize(("name", "dtype"), HALF_CASES)
def test_editor_runs_the_edit_stage_in_half_precision_on_the_models_device(name, dtype, tmp_path, guarded_edits,
                                                                         restore_logging):
    from conftest import run_demo

    # bf16 edits a batch of two; fp16, which a CPU runs 2-5x slower than bf16 (no native fp16 kernels), one query:
    # a dtype or device left behind shows on the first query, and the batch path is bf16's to cover
    n = 2 if dtype == "bf16" else 1
    summary = run_demo(tmp_path, name, "queryset=demo_mini", f"limit={n}", "stages=[edit]", f"editor.dtype={dtype}",
                       f"editor.device={MODEL_DEVICE}", "fail_fast=true")
    st = summary["edit"]
    assert (st.computed, st.failed) == (n, 0), st.failure_summary()
    assert guarded_edits and min(guarded_edits) > 100  # the model really ran under the guard
    pngs = sorted((tmp_path / "runs").glob("*/*/edits/*.png"))
    assert len(pngs) == n
    from PIL import Image

    for png in pngs:  # not a NaN edit quantised to black or grey: the model's output varies over the image
        assert np.asarray(Image.open(png)).std() > 1


def test_imagic_in_fp16_optimises_in_fp32_and_samples_in_fp16(demo_qs, monkeypatch):
    from hydra.utils import instantiate

    from benchmark.editing import imagic

    # the process-wide fine-tune cache may hold this query from an earlier test's run: a hit skips the optimisation
    monkeypatch.setattr(imagic, "FINETUNES", imagic.FinetuneCache())

    from benchmark.commands.run import compose
    from benchmark.editing.editor import query_seed
    from benchmark.io.imageio import load_rgb

    cfg, _ = compose(["editor=imagic", "queryset=demo", "profile=tiny", "editor.dtype=fp16", "editor.cache_size=0"])
    editor = instantiate(cfg.editor)
    q = demo_qs.queries[0]
    dtypes = []
    real = editor.pipe.unet.forward

    def spy(*args, **kwargs):
        dtypes.append(editor.pipe.unet.dtype)
        return real(*args, **kwargs)

    editor.pipe.unet.forward = spy
    out = editor.edit([q], [load_rgb(demo_qs.path(q.image))], seeds=[query_seed(0, q.id)])[0]
    assert np.asarray(out).std() > 1  # an fp16 optimisation gave NaN: an all-black edit
    o = cfg.editor
    optimisation = o.embedding_steps + o.finetune_steps
    assert dtypes[:optimisation] == [torch.float32] * optimisation
    assert set(dtypes[optimisation:]) == {torch.float16}  # sampling at the pipeline's precision
    assert editor.pipe.unet.dtype == torch.float16 and editor.info()["optimisation_dtype"] == "float32"


def test_unknown_dtype_is_one_clear_error_naming_the_valid_ones(tmp_path, capsys, restore_logging):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "benchmark.commands.cli", "run", "editor=p2p", "queryset=demo_mini",
                           "profile=tiny", "editor.dtype=float16", f"paths.results={tmp_path}"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    err = proc.stdout + proc.stderr
    assert "dtype 'float16' is not one of auto, fp16, bf16, fp32 (did you mean fp16?)" in err
    assert "Traceback" not in err and "KeyError" not in err
    assert not (tmp_path / "runs").exists()  # refused before any work


# --- the guard itself: it must fail where CUDA fails, and only there ----------------------------------------------

def test_guard_raises_where_cuda_would_and_allows_what_cuda_allows():
    model = torch.nn.Linear(3, 3)
    with ModelDeviceGuard([model]):
        assert model.weight.device == MODEL_DEVICE
        with pytest.raises(DeviceMismatch, match="Linear|linear"):
            model(torch.ones(2, 3))  # "mat1 is on cpu"
        with pytest.raises(DeviceMismatch):
            _ = model.weight + torch.zeros(3)
        x = torch.ones(2, 3).to(model.weight.device)  # moved: fine
        y = model(x)
        _ = y * torch.tensor(2.0)  # a 0-d CPU tensor is a scalar on CUDA
        _ = y + torch.ones(2, 3, device=model.weight.device)  # made on the model's device
        _ = y[torch.tensor([1, 0])]  # CPU indices into a CUDA tensor
        y[0] = torch.zeros(3)  # a copy across devices
        assert (y.detach().cpu().numpy() == 0).any()
        with pytest.raises(DeviceMismatch):
            _ = y + torch.ones(2, 3).to(torch.float32)  # a dtype change does not move a tensor
    assert model.weight.device == torch.device("cpu")  # the guard leaves nothing behind


def test_guard_catches_a_p2p_mapper_left_on_the_cpu(monkeypatch, guarded_edits, tmp_path, restore_logging):
    """A planted bug of the kind CUDA reported: the word-swap mapper not moved to the attention maps' device."""
    import benchmark.editing.attention as attention

    def cross_without_move(base, edit, e):  # AttentionController._cross without its .to(base.device)
        if e.mode == "none":
            return edit
        if e.mode == "replace":
            new = torch.einsum("hqk,kn->hqn", base, e.mapper.to(base.dtype))
        else:
            a = e.alphas.to(base.dtype)
            new = base[..., e.mapper] * a + edit * (1 - a)
        return new * e.equalizer.to(base.device, base.dtype)

    monkeypatch.setattr(attention.AttentionController, "_cross", staticmethod(cross_without_move))
    monkeypatch.setattr(attention.TokenEdit, "to", lambda self, device: self)  # and the controller's move undone
    from conftest import run_demo

    with pytest.raises(DeviceMismatch):
        run_demo(tmp_path, "p2p", "queryset=demo_mini", "limit=1", "stages=[edit]",
                 f"editor.device={MODEL_DEVICE}", "fail_fast=true")
