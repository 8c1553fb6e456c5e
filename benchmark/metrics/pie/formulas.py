"""PIE-Bench's per-image formulas (PnP Inversion, `evaluation/matrics_calculator.py`), on float tensors in [0, 1].

Each follows the torchmetrics class the official code calls (PeakSignalNoiseRatio, MeanSquaredError,
StructuralSimilarityIndexMeasure, CLIPScore, all with data range 1) or its own structure loss; the units here are
the raw ones (the suite scales them to the paper's). Specification: docs/pie.md.
"""

from __future__ import annotations

import math
from typing import Any

SSIM_SIGMA = 1.5  # torchmetrics' default Gaussian window: size int(3.5 * sigma + 0.5) * 2 + 1 = 11
SSIM_K1, SSIM_K2 = 0.01, 0.03
COSINE_EPS = 1e-8  # the structure loss's clamp of the norm products


def mse(a: Any, b: Any) -> float:
    """Mean of the squared differences over every element (torchmetrics MeanSquaredError)."""
    return float(((a.double() - b.double()) ** 2).mean())


def psnr(a: Any, b: Any, cap: float | None = None) -> float:
    """10 log10(1 / MSE), data range 1 (torchmetrics PeakSignalNoiseRatio(data_range=1.0)): +inf for identical
    images, or `cap` dB at most when a cap is given."""
    m = mse(a, b)
    value = math.inf if m == 0 else -10.0 * math.log10(m)
    return value if cap is None else min(value, float(cap))


def _gaussian_1d(sigma: float, dtype: Any, device: Any) -> Any:
    """torchmetrics' normalised 1-D Gaussian of size int(3.5 sigma + 0.5) * 2 + 1; its 2-D window is the outer
    product of two of these, so filtering rows then columns with it is the same convolution."""
    import torch

    size = int(3.5 * sigma + 0.5) * 2 + 1
    dist = torch.arange((1 - size) / 2, (1 + size) / 2, 1.0, dtype=dtype, device=device)
    g = torch.exp(-((dist / sigma) ** 2) / 2)
    return g / g.sum()


def ssim(a: Any, b: Any, *, crop: bool = True) -> Any:
    """SSIM of batches (B, C, H, W) in [0, 1] -> (B,), as torchmetrics StructuralSimilarityIndexMeasure
    (data_range=1.0): an 11 x 11 Gaussian window (sigma 1.5) over the images reflect-padded by 5, the SSIM map
    averaged. `crop`: drop 5 more pixels on each side of the map before averaging, as torchmetrics did until
    September 2024 (the releases PIE-Bench's numbers were computed with; Lightning-AI/torchmetrics#2721 removed it).
    Images must be larger than 10 px on each side."""
    import torch
    import torch.nn.functional as F

    a, b = a.double(), b.double()
    if min(a.shape[-2:]) <= 10:
        raise ValueError(f"SSIM needs images larger than 10 x 10 pixels, got {tuple(a.shape[-2:])}")
    g = _gaussian_1d(SSIM_SIGMA, a.dtype, a.device)
    pad, c = (len(g) - 1) // 2, a.shape[1]
    a, b = (F.pad(x, (pad, pad, pad, pad), mode="reflect") for x in (a, b))
    x = torch.cat((a, b, a * a, b * b, a * b))
    x = F.conv2d(x, g.view(1, 1, 1, -1).expand(c, 1, 1, len(g)), groups=c)  # along rows, then columns
    x = F.conv2d(x, g.view(1, 1, -1, 1).expand(c, 1, len(g), 1), groups=c)
    mu_a, mu_b, aa, bb, ab = x.split(len(a))
    c1, c2 = SSIM_K1**2, SSIM_K2**2
    var_a = torch.clamp(aa - mu_a**2, min=0.0)
    var_b = torch.clamp(bb - mu_b**2, min=0.0)
    cov = ab - mu_a * mu_b
    full = ((2 * mu_a * mu_b + c1) * (2 * cov + c2)) / ((mu_a**2 + mu_b**2 + c1) * (var_a + var_b + c2))
    return (full[..., pad:-pad, pad:-pad] if crop else full).flatten(1).mean(dim=1)


def self_similarity(keys: Any, eps: float = COSINE_EPS) -> Any:
    """Cosine self-similarity (T, T) of per-token features (T, D): <k_i, k_j> / max(|k_i| |k_j|, eps)."""
    import torch

    k = keys.double()
    norms = k.norm(dim=-1, keepdim=True)
    return (k @ k.T) / torch.clamp(norms @ norms.T, min=eps)


def structure_distance(keys_a: Any, keys_b: Any) -> float:
    """Mean squared difference of the two images' key self-similarity matrices (the structure loss's
    `F.mse_loss(keys_ssim, target_keys_self_sim)`); symmetric in its arguments."""
    sa, sb = self_similarity(keys_a), self_similarity(keys_b)
    if sa.shape != sb.shape:
        raise ValueError(f"structure distance needs the same token count for both images, got {sa.shape[0]} and "
                         f"{sb.shape[0]} (images of different sizes)")
    return float(((sa - sb) ** 2).mean())


def clip_score(image_feature: Any, text_feature: Any) -> float:
    """torchmetrics CLIPScore of one image and one text: max(100 cos(E(image), E(text)), 0)."""
    import torch

    cos = torch.nn.functional.cosine_similarity(image_feature.double(), text_feature.double(), dim=0, eps=1e-8)
    return max(100.0 * float(cos), 0.0)
