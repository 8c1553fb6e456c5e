"""LPIPS (AlexNet) distance, as HATIE uses it: inputs in [0, 1] (normalize=True), both resized to 64 x 64."""

from __future__ import annotations

import functools
from typing import Any

from benchmark.io.model_cache import WeightsUnavailableError, check_source

LPIPS_SIZE = 64  # HATIE resizes both images (bilinear) to 64 x 64 before LPIPS
TINY_SEED = 0


class LpipsDistance:
    """Batched LPIPS between aligned image batches (float (B, 3, H, W) in [0, 1])."""

    def __init__(self, model: Any, *, device: str = "cpu", name: str = "") -> None:
        self.model, self.device, self.name = model, device, name

    def distance(self, a: Any, b: Any) -> Any:
        import torch

        with torch.inference_mode():
            d = self.model(a.to(self.device), b.to(self.device), normalize=True)
        return d.float().flatten()


@functools.lru_cache(maxsize=4)
def load_lpips(weights: str = "pretrained", net: str = "alex", device: str = "cpu") -> LpipsDistance:
    """LPIPS once per process. Its linear heads ship inside the `lpips` wheel; the AlexNet trunk comes from
    torchvision's ImageNet weights (pretrained) or is random (tiny / random: same class, seeded)."""
    import warnings

    import lpips
    import torch

    source = check_source(weights)
    try:
        with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=UserWarning)  # lpips still passes torchvision's old `pretrained=`
            torch.manual_seed(TINY_SEED)
            model = lpips.LPIPS(net=net, pretrained=True, pnet_rand=source != "pretrained", verbose=False)
    except Exception as err:  # torchvision download errors vary by version
        if source != "pretrained":
            raise
        raise WeightsUnavailableError("LPIPS", f"torchvision {net} ImageNet weights", err) from err
    return LpipsDistance(model.to(device).eval(), device=device, name=f"lpips-{net}-{source}")
