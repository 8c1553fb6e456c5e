"""Pixel metrics: properties and metamorphic relations, not pixel goldens."""

import math

import pytest
import torch

from benchmark.metrics.base import ScoreBatch
from benchmark.metrics.pixel import PixelMetric, masked_stat

STATS = ["l1", "l2", "psnr", "ssim"]


def batch(src, edit, mask=None, target=None):
    b = src.shape[0]
    return ScoreBatch(queries=[None] * b, source=src, edit=edit, edit_mask=mask,
                      has_edit_mask=None if mask is None else torch.ones(b, dtype=torch.bool),
                      target=target, has_target=None if target is None else torch.ones(b, dtype=torch.bool))


def rand(b=2, h=48, w=40, seed=0):
    return torch.rand((b, 3, h, w), generator=torch.Generator().manual_seed(seed))


def box_mask(b, h, w, frac):
    m = torch.zeros((b, h, w), dtype=torch.bool)
    m[:, : int(h * frac), :] = True
    return m


@pytest.mark.parametrize("stat", STATS)
@pytest.mark.parametrize("region", ["full", "outside", "inside"])
def test_identical_images_are_perfect(stat, region):
    x = rand()
    m = box_mask(2, 48, 40, 0.5)
    v = PixelMetric(stat, region=region).score(batch(x, x.clone(), m))
    perfect = {"l1": 0.0, "l2": 0.0, "psnr": 100.0, "ssim": 1.0}[stat]
    assert torch.allclose(v, torch.full((2,), perfect), atol=1e-5)


@pytest.mark.parametrize("stat", STATS)
def test_outside_metric_ignores_pixels_inside_the_mask(stat):
    src, edit = rand(seed=1), rand(seed=2)
    m = box_mask(2, 48, 40, 0.4)
    scrambled = edit.clone()
    scrambled[m.unsqueeze(1).expand_as(edit)] = torch.rand(int(m.sum()) * 3)
    metric = PixelMetric(stat, region="outside")
    assert torch.allclose(metric.score(batch(src, edit, m)), metric.score(batch(src, scrambled, m)), atol=1e-6)


def test_psnr_outside_is_not_a_function_of_mask_area():
    """Same noise level everywhere: the unedited-region PSNR must not drift with the mask's size
    (zero-filling the hole, PIE-Bench's defect, would raise it by 10 log10(1 / (1 - area)))."""
    g = torch.Generator().manual_seed(3)
    src = torch.rand((1, 3, 128, 128), generator=g) * 0.8 + 0.1
    edit = src + 0.05 * torch.randn(src.shape, generator=g)
    metric = PixelMetric("psnr", region="outside")
    values = [float(metric.score(batch(src, edit, box_mask(1, 128, 128, f)))[0]) for f in (0.0, 0.25, 0.5, 0.75)]
    assert max(values) - min(values) < 0.2, values
    zero_filled = [float(masked_stat("psnr", src * ~box_mask(1, 128, 128, f).unsqueeze(1), edit * ~box_mask(1, 128, 128, f).unsqueeze(1),
                                     torch.ones((1, 128, 128), dtype=torch.bool))[0]) for f in (0.0, 0.75)]
    assert zero_filled[1] - zero_filled[0] > 5  # the biased variant really is biased, so the check above means something


def test_full_mask_gives_missing_value_not_a_string():
    x = rand()
    v = PixelMetric("psnr", region="outside").score(batch(x, x, torch.ones((2, 48, 40), dtype=torch.bool)))
    assert v.dtype == torch.float32 and torch.isnan(v).all()


def test_missing_target_gives_nan():
    x = rand()
    assert torch.isnan(PixelMetric("l1", reference="target").score(batch(x, x))).all()


def test_ssim_of_constant_images_matches_closed_form():
    a, b = 0.3, 0.7
    v = float(masked_stat("ssim", torch.full((1, 3, 32, 32), a), torch.full((1, 3, 32, 32), b),
                          torch.ones((1, 32, 32), dtype=torch.bool))[0])
    c1 = 0.01**2
    assert v == pytest.approx((2 * a * b + c1) / (a * a + b * b + c1), rel=1e-4)  # float32 moments


def test_ssim_is_symmetric_and_bounded():
    a, b = rand(seed=4), rand(seed=5)
    m = torch.ones((2, 48, 40), dtype=torch.bool)
    s_ab, s_ba = masked_stat("ssim", a, b, m), masked_stat("ssim", b, a, m)
    assert torch.allclose(s_ab, s_ba, atol=1e-6)
    assert ((s_ab <= 1) & (s_ab >= -1)).all()


@pytest.mark.parametrize("stat", STATS)
def test_batch_of_one_equals_batch_of_four(stat):
    src, edit = rand(4, seed=6), rand(4, seed=7)
    m = torch.stack([box_mask(1, 48, 40, f)[0] for f in (0.1, 0.3, 0.5, 0.7)])
    metric = PixelMetric(stat, region="outside")
    together = metric.score(batch(src, edit, m))
    alone = torch.cat([metric.score(batch(src[i : i + 1], edit[i : i + 1], m[i : i + 1])) for i in range(4)])
    assert torch.allclose(together, alone, atol=1e-6)


def test_psnr_and_l2_agree():
    src, edit = rand(seed=8), rand(seed=9)
    m = torch.ones((2, 48, 40), dtype=torch.bool)
    mse = masked_stat("l2", src, edit, m)
    assert torch.allclose(masked_stat("psnr", src, edit, m), 10 * torch.log10(1 / mse), atol=1e-4)


def test_metric_metadata():
    assert PixelMetric("psnr", region="outside").info.name == "psnr_out"
    assert PixelMetric("l1", reference="target", region="inside").info.name == "l1_gt_in"
    assert PixelMetric("l1").info.higher_is_better is False and PixelMetric("ssim").info.higher_is_better is True
    with pytest.raises(ValueError, match="statistic 'lpips'"):
        PixelMetric("lpips")
    assert math.isfinite(float(PixelMetric("psnr").score(batch(rand(), rand(seed=3)))[0]))
