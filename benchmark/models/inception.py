"""Image features for FID: pytorch-fid's Inception-v3 (pool3, 2048-d, the standard FID weights, as HATIE), with a
replaceable extractor (tiny: a small random CNN; random: torchvision's Inception-v3 shape, random weights)."""

from __future__ import annotations

import functools
from typing import Any

from benchmark.io.model_cache import WeightsUnavailableError, check_source

FID_DIMS = 2048
TINY_FID_DIMS = 32
TINY_SEED = 0


class FeatureExtractor:
    """Batched features (B, D) of images (float (B, 3, H, W) in [0, 1])."""

    def __init__(self, model: Any, dims: int, *, device: str = "cpu", name: str = "") -> None:
        self.model, self.dims, self.device, self.name = model, dims, device, name

    def features(self, images: Any) -> Any:
        import torch

        with torch.inference_mode():
            out = self.model(images.to(self.device))
        if isinstance(out, list | tuple):  # pytorch-fid returns one map per requested block
            out = out[0]
        return out.reshape(out.shape[0], -1).float()


def _tiny_net() -> Any:
    """A deliberately different, small architecture: Inception-v3's widths are fixed in code (no size knob) and the
    real-size network costs ~0.1 s per image on CPU. What can match does: the input (pytorch-fid's bilinear 299 px,
    scaled to [-1, 1], via `_Resized`), Inception's own building block (`BasicConv2d`: conv without bias, BatchNorm
    eps 0.001, ReLU, the same 3x3 stride-2 stem), and global average pooling into the feature vector."""
    import torch.nn as nn
    from torchvision.models.inception import BasicConv2d

    return _Resized(nn.Sequential(
        BasicConv2d(3, 16, kernel_size=3, stride=2), BasicConv2d(16, TINY_FID_DIMS, kernel_size=3, stride=2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(),
    ))


class _Resized:
    """A network fed like pytorch-fid's InceptionV3 (resize_input, normalize_input): bilinear to 299, to [-1, 1]."""

    def __init__(self, net: Any) -> None:
        self.net = net

    def to(self, device: str) -> _Resized:
        self.net = self.net.to(device)
        return self

    def eval(self) -> _Resized:
        self.net.eval()
        return self

    def __call__(self, x: Any) -> Any:
        import torch.nn.functional as F

        x = F.interpolate(x, size=(299, 299), mode="bilinear", align_corners=False)
        return self.net(2 * x - 1)


@functools.lru_cache(maxsize=4)
def load_fid_extractor(weights: str = "pretrained", device: str = "cpu") -> FeatureExtractor:
    import torch

    source = check_source(weights)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(TINY_SEED)
        if source == "tiny":
            return FeatureExtractor(_tiny_net().to(device).eval(), TINY_FID_DIMS, device=device, name="tiny-cnn")
        if source == "random":
            import torchvision

            net = torchvision.models.inception_v3(weights=None, aux_logits=False, init_weights=False)
            net.fc = torch.nn.Identity()
            return FeatureExtractor(_Resized(net).to(device).eval(), FID_DIMS, device=device, name="inception-v3-random")
        try:
            from pytorch_fid.inception import InceptionV3

            model = InceptionV3([InceptionV3.BLOCK_INDEX_BY_DIM[FID_DIMS]])
        except Exception as err:  # the FID weights are fetched from GitHub on first use
            raise WeightsUnavailableError("the FID Inception-v3", "pytorch-fid pt_inception-2015-12-05", err) from err
    return FeatureExtractor(model.to(device).eval(), FID_DIMS, device=device, name="pytorch-fid-inception-v3")
