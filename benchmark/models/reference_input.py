"""Encoder inputs made as MagicBrush's evaluation script makes them (`evaluation/image_eval.py`): the 8-bit image,
resized and centre-cropped by torchvision's own transforms on a PIL image, then `ToTensor` (/ 255).

CLIP-I / CLIP-T there use OpenAI `clip`'s preprocess (`Resize(224, bicubic)`, `CenterCrop(224)`), DINO uses
`Resize(256, interpolation=3)` (bicubic) and `CenterCrop(224)`. Calling the same torchvision functions on the same
8-bit pixels gives the same input bit for bit, which a float resize does not: PIL resizes 8-bit images (each pass
rounded and clamped to 0..255), torchvision's Resize sets the longer side to int(size * long / short) (truncated,
not rounded), and its CenterCrop's offset is round((side - crop) / 2) with Python's round (half to even), not a
floor division.
"""

from __future__ import annotations

from typing import Any


def to_pil_8bit(img: Any) -> Any:
    """float (3, H, W) in [0, 1] -> PIL RGB. Each value is rounded to the nearest 8-bit level: an image decoded from
    an 8-bit file (every image editmeter loads: uint8 / 255) comes back as exactly its pixels."""
    import numpy as np
    import torch
    from PIL import Image

    if img.ndim != 3 or img.shape[0] != 3:
        raise ValueError(f"expected a (3, H, W) image, got shape {tuple(img.shape)}")
    # numpy on the (H, W, 3) view: the loader's tensors are channels-last views, so this reads memory in order
    a = img.detach().to("cpu", torch.float32).permute(1, 2, 0).numpy()
    lo, hi = float(a.min()), float(a.max())
    if not (0.0 <= lo and hi <= 1.0):  # also refuses NaN
        raise ValueError(f"image values must lie in [0, 1] (got {lo:.4g} .. {hi:.4g}); pass an 8-bit image / 255")
    return Image.fromarray(np.rint(a * np.float32(255)).astype(np.uint8))


def resize_crop(img: Any, resize: int, crop: int) -> Any:
    """torchvision's `Resize(resize, bicubic)`, `CenterCrop(crop)`, `ToTensor()` on the 8-bit image of `img`
    (float (3, H, W) in [0, 1]): float (3, crop, crop) whose values are k / 255."""
    import numpy as np
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms import functional as TF

    from benchmark.io.imageio import float_chw

    pil = TF.center_crop(TF.resize(to_pil_8bit(img), resize, interpolation=InterpolationMode.BICUBIC), crop)
    return float_chw(np.array(pil))  # ToTensor's values (float32(x) / 255), as a channels-last view
