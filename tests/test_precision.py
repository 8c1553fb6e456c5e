"""Opt-in reduced-precision scoring (benchmark/metrics/precision.py): validated up front, part of every signature
that its numerics reach, and harmless where the inputs are equal."""


import pytest
import torch
from conftest import run_demo
from hydra.utils import instantiate
from omegaconf import OmegaConf

from benchmark.commands.run import compose
from benchmark.metrics.features import FeatureCache, embed_images, encoder_signature
from benchmark.metrics.precision import PrecisionError, ReducedPrecision, check_precision, with_precision
from benchmark.plan.config import metric_signature

pytestmark = pytest.mark.usefixtures("single_thread_torch")


def _signature(*extra):
    cfg, _ = compose(["profile=tiny", "metrics=hatie", *extra])
    suite = instantiate(cfg.metrics.hatie)
    return metric_signature(OmegaConf.to_container(cfg.metrics, resolve=True), {"hatie": suite.info})


def test_unknown_and_impossible_modes_are_refused_with_the_fix():
    with pytest.raises(PrecisionError, match=r"'fp16' is not one of fp32, tf32, bf16.*metrics.<suite>.precision"):
        check_precision("fp16", "cpu")
    with pytest.raises(PrecisionError, match="tf32 exists only on CUDA"):
        check_precision("tf32", "cpu")
    assert check_precision("tf32", "cuda:0") == "tf32" and check_precision("bf16", "cpu") == "bf16"
    from benchmark.io.errors import RunError
    from benchmark.plan.config import apply_run_checks

    cfg, _ = compose(["profile=tiny", "metrics=hatie", "metrics.hatie.precision=half"])
    with pytest.raises(RunError, match="metrics hatie: precision 'half'"):  # one line, before any work
        apply_run_checks(cfg, "identity")


def test_the_default_keeps_signatures_and_a_reduced_mode_changes_them():
    cfg, _ = compose(["profile=tiny", "metrics=hatie"])
    assert cfg.metrics.hatie.precision == "fp32"
    default = _signature()
    # a run made before the setting existed (no `precision` key) keeps its signature: fp32 is neutral
    cfg_old = OmegaConf.to_container(cfg.metrics, resolve=True)
    del cfg_old["hatie"]["precision"]
    suite = instantiate(cfg.metrics.hatie)
    assert metric_signature(cfg_old, {"hatie": suite.info}) == default
    assert _signature("metrics.hatie.precision=bf16") != default


@pytest.fixture(scope="module")
def tiny_clip():
    from benchmark.models.clip import load_clip

    return load_clip(weights="tiny", arch="ViT-B-32-quickgelu", tag="openai", device="cpu")


def test_reduced_features_are_float32_close_and_cached_apart(tiny_clip):
    x = torch.rand(3, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    bf16 = with_precision(tiny_clip, "bf16")
    assert with_precision(tiny_clip, "fp32") is tiny_clip and with_precision(None, "bf16") is None
    assert isinstance(bf16, ReducedPrecision) and bf16.image_size == tiny_clip.image_size  # other attributes pass
    assert encoder_signature(bf16) != encoder_signature(tiny_clip)
    assert encoder_signature(bf16).endswith(f"|precision:bf16|{tiny_clip.device}")
    cache = FeatureCache(2**26)
    full = torch.stack(embed_images(tiny_clip, list(x), cache=cache))
    reduced = torch.stack(embed_images(bf16, list(x), cache=cache))
    assert reduced.dtype == torch.float32
    assert cache.forward_items[encoder_signature(bf16)] == 3  # not served from the fp32 entries
    assert not torch.equal(full, reduced)  # the mode really ran in bf16 ...
    assert torch.allclose(full, reduced, atol=0.05)  # ... and stays near fp32 (unit-norm features)
    texts = bf16.embed_texts(["a red car"])
    assert texts.dtype == torch.float32 and torch.isfinite(texts).all()


def test_bf16_keeps_an_identity_edit_consistent(tmp_path):
    """Metamorphic: equal inputs give equal features in any precision, so the identity edit's consistency criteria
    under bf16 are fp32's (BC 1 everywhere, to float rounding), while the fidelity criteria move, and only a little."""
    from pathlib import Path

    from benchmark.stages.score import read_scores

    rows = {}
    for mode in ("fp32", "bf16"):
        summary = run_demo(tmp_path / mode, "identity", "queryset=demo_mini", "metrics=hatie_oracle",
                           f"metrics.hatie.precision={mode}", "metrics.hatie.fid=null")
        df = read_scores(Path(summary["run_dir"]), summary["metric_sig"]).set_index("query_id").sort_index()
        assert (df["status"] == "ok").all()
        rows[mode] = df
    fp32, bf16 = rows["fp32"], rows["bf16"]
    assert ((fp32["BC"].dropna() - 1).abs() < 1e-6).all() and fp32["BC"].notna().sum() >= 10
    for col in ("OC", "BC"):  # equal up to the float rounding of a cosine of equal vectors (~1e-7)
        assert fp32[col].isna().equals(bf16[col].isna()), col
        assert ((fp32[col] - bf16[col]).dropna().abs() < 1e-6).all(), col
    drift = (fp32[["OF", "BF"]] - bf16[["OF", "BF"]]).abs().max().max()
    assert 0 < drift < 0.01  # bf16 really ran, and stayed near fp32


SUITES = {"hatie": "hatie", "conventional": "conventional", "editval_oracle": "editval", "augclip": "augclip",
          "bpm": "bpm"}


@pytest.mark.parametrize("metric_set", sorted(SUITES))
def test_every_suite_with_backbones_offers_the_mode_in_its_signature(metric_set):
    from benchmark.io.errors import RunError
    from benchmark.plan.config import apply_run_checks

    suite_name = SUITES[metric_set]
    sigs, suites = {}, {}
    for mode in ("fp32", "bf16"):
        cfg, _ = compose(["profile=tiny", f"metrics={metric_set}", f"metrics.{suite_name}.precision={mode}"])
        suite = instantiate(cfg.metrics[suite_name])
        suites[mode] = suite
        sigs[mode] = metric_signature(OmegaConf.to_container(cfg.metrics, resolve=True), {suite_name: suite.info})
        assert suite.precision == mode and suite.components()["precision"] == mode
    assert sigs["fp32"] != sigs["bf16"]
    # the components that follow the mode are real components of the suite (a typo would silently do nothing)
    reduced = getattr(suites["bf16"], "reduced_components", ())
    assert set(reduced) <= set(getattr(suites["bf16"], "_factories", {})), reduced
    cfg, _ = compose(["profile=tiny", f"metrics={metric_set}", f"metrics.{suite_name}.precision=tf32", "device=cpu"])
    with pytest.raises(RunError, match=f"metrics {suite_name}: precision tf32 exists only on CUDA"):
        apply_run_checks(cfg, "identity")
