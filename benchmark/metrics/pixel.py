"""Weight-free pixel metrics: L1, L2 (MSE), PSNR and SSIM, over the full image or a masked region.

Masked variants compute the statistic over the valid pixels only (outside or inside the edit mask), never on whole
images with the hole zeroed (PIE-Bench's defect: that biases PSNR/MSE by the mask's area). An empty region yields
NaN, recorded as a missing value. SSIM in a region uses normalised convolution: local means, variances and covariance
are weighted sums over valid pixels only, so pixels in the hole cannot leak into the statistic through the window.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

from benchmark.io.types import MetricInfo
from benchmark.metrics.base import NEED_EDIT, NEED_EDIT_MASK, NEED_SOURCE, NEED_TARGET_IMAGE, ScoreBatch

Statistic = Literal["l1", "l2", "psnr", "ssim"]
Reference = Literal["source", "target"]
Region = Literal["full", "outside", "inside"]

# Identical images give MSE 0 and PSNR +inf; the floor keeps means finite (cap = 100 dB for data range 1).
MSE_FLOOR = 1e-10
SSIM_WINDOW = 11  # Gaussian window size and sigma of Wang et al. (2004)
SSIM_SIGMA = 1.5
SSIM_K1, SSIM_K2 = 0.01, 0.03
VERSION = "1"

_HIGHER_IS_BETTER = {"l1": False, "l2": False, "psnr": True, "ssim": True}
_DESCRIPTIONS = {
    "l1": "mean absolute difference, images in [0, 1]",
    "l2": "mean squared difference (MSE), images in [0, 1]",
    "psnr": "10 log10(1 / MSE), capped at 100 dB",
    "ssim": "structural similarity, Gaussian window 11 / sigma 1.5, channel mean",
}


def _gaussian_kernel(dtype: torch.dtype) -> torch.Tensor:
    x = torch.arange(SSIM_WINDOW, dtype=dtype) - (SSIM_WINDOW - 1) / 2
    g = torch.exp(-(x**2) / (2 * SSIM_SIGMA**2))
    return g / g.sum()


def _blur(x: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    """Separable Gaussian filter of (N, C, H, W), zero padding (weights handle the border)."""
    c = x.shape[1]
    pad = SSIM_WINDOW // 2
    kx = kernel.view(1, 1, 1, -1).expand(c, 1, 1, -1)
    ky = kernel.view(1, 1, -1, 1).expand(c, 1, -1, 1)
    x = F.conv2d(F.pad(x, (pad, pad, 0, 0)), kx, groups=c)
    return F.conv2d(F.pad(x, (0, 0, pad, pad)), ky, groups=c)


def masked_ssim(a: torch.Tensor, b: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """SSIM per sample over valid pixels. a, b: (B, 3, H, W) in [0, 1]; valid: bool (B, H, W). Returns (B,)."""
    # float32 is enough: E[x^2] - E[x]^2 cancellation errors (~1e-7) sit far below C2 = 9e-4.
    a, b = a.float(), b.float()
    w = valid.float().unsqueeze(1)  # (B, 1, H, W)
    k = _gaussian_kernel(torch.float32)
    # one filter call over all weighted moments (far cheaper than one call per moment)
    moments = _blur(torch.cat([w, a * w, b * w, a * a * w, b * b * w, a * b * w], dim=1), k)
    wsum = moments[:, :1].clamp_min(1e-12)
    mu_a, mu_b, e_aa, e_bb, e_ab = (moments[:, 1 + 3 * i : 4 + 3 * i] / wsum for i in range(5))
    var_a = (e_aa - mu_a**2).clamp_min(0)
    var_b = (e_bb - mu_b**2).clamp_min(0)
    cov = e_ab - mu_a * mu_b
    c1, c2 = SSIM_K1**2, SSIM_K2**2
    ssim_map = ((2 * mu_a * mu_b + c1) * (2 * cov + c2)) / ((mu_a**2 + mu_b**2 + c1) * (var_a + var_b + c2))
    per_pixel = ssim_map.mean(dim=1)  # channel mean, (B, H, W)
    vw = valid.double()
    n = vw.sum(dim=(1, 2))
    out = (per_pixel.double() * vw).sum(dim=(1, 2)) / n.clamp_min(1)
    return torch.where(n > 0, out, torch.full_like(out, float("nan"))).float()


def masked_stat(stat: Statistic, a: torch.Tensor, b: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """One statistic per sample over valid pixels (all channels). NaN where no pixel is valid."""
    if stat == "ssim":
        return masked_ssim(a, b, valid)
    diff = (a.double() - b.double()).abs()
    if stat in ("l2", "psnr"):
        diff = diff**2
    vw = valid.double().unsqueeze(1)
    n = vw.sum(dim=(1, 2, 3)) * a.shape[1]
    mean = (diff * vw).sum(dim=(1, 2, 3)) / n.clamp_min(1)
    if stat == "psnr":
        mean = 10 * torch.log10(1.0 / mean.clamp_min(MSE_FLOOR))
    return torch.where(n > 0, mean, torch.full_like(mean, float("nan"))).float()


class PixelMetric:
    """A pixel statistic between the edit and a reference (source or ground-truth target) over a region.

    Args:
        statistic: l1, l2 (MSE), psnr or ssim.
        reference: "source" (consistency with the input) or "target" (fidelity to a ground-truth edit).
        region: "full" image, "outside" the edit mask (unedited region) or "inside" it (edited region).
        name: column name; defaults to e.g. `psnr_out`, `l1_gt_in`.
    """

    def __init__(self, statistic: Statistic, reference: Reference = "source", region: Region = "full", name: str | None = None):
        if statistic not in _HIGHER_IS_BETTER:
            raise ValueError(f"statistic {statistic!r} is not one of {sorted(_HIGHER_IS_BETTER)}")
        if reference not in ("source", "target") or region not in ("full", "outside", "inside"):
            raise ValueError(f"reference {reference!r} / region {region!r}: expected source|target and full|outside|inside")
        self.statistic, self.reference, self.region = statistic, reference, region
        default = statistic + ("_gt" if reference == "target" else "") + {"full": "", "outside": "_out", "inside": "_in"}[region]
        needs = {NEED_EDIT, NEED_SOURCE if reference == "source" else NEED_TARGET_IMAGE}
        if region != "full":
            needs.add(NEED_EDIT_MASK)
        self.info = MetricInfo(
            name=name or default,
            version=VERSION,
            higher_is_better=_HIGHER_IS_BETTER[statistic],
            needs=frozenset(needs),
            description=f"{_DESCRIPTIONS[statistic]}; edit vs {reference}; region {region}",
        )

    def score(self, batch: ScoreBatch) -> torch.Tensor:
        ref = batch.source if self.reference == "source" else batch.target
        b, _, h, w = batch.edit.shape
        nan = torch.full((b,), float("nan"))
        if ref is None:
            return nan
        if self.region == "full":
            valid = torch.ones((b, h, w), dtype=torch.bool)
        else:
            if batch.edit_mask is None:
                return nan
            valid = ~batch.edit_mask if self.region == "outside" else batch.edit_mask.clone()
            if batch.has_edit_mask is not None:
                valid &= batch.has_edit_mask.view(-1, 1, 1)
        out = masked_stat(self.statistic, batch.edit, ref, valid)
        if self.reference == "target" and batch.has_target is not None:
            out = torch.where(batch.has_target, out, nan)
        return out
