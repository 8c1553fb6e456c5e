"""The conventional suite's CLIP and DINO (MagicBrush) inputs are those of MagicBrush's evaluation script, bit for bit:
sizes and crop boxes worked out by hand and applied with PIL, and the script's own torchvision transforms."""

import numpy as np
import pytest
import torch
from PIL import Image

from benchmark.io.imageio import to_float_tensor
from benchmark.metrics.conventional.suite import clip_input
from benchmark.models.reference_input import resize_crop, to_pil_8bit

IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
CLIP_NORM = ((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711))

# (w, h), resize, crop -> the resized (w, h) and the crop box (left, top, right, bottom), by hand:
# torchvision's Resize(n) sets the short side to n and the long side to int(n * long / short) (truncated); its
# CenterCrop's offset is round((side - crop) / 2), Python's round (half to even).
HAND = [
    # 256 * 303 / 200 = 387.84 -> 387 (rounding: 388); left (387 - 224) / 2 = 81.5 -> 82 (a floor: 81)
    ((303, 200), 256, 224, (387, 256), (82, 16, 306, 240)),
    # 256 * 500 / 333 = 384.38 -> 384; left 80, top 16
    ((500, 333), 256, 224, (384, 256), (80, 16, 304, 240)),
    # portrait, CLIP: 224 * 500 / 225 = 497.78 -> 497 (rounding: 498); top (497 - 224) / 2 = 136.5 -> 136 (even)
    ((225, 500), 224, 224, (224, 497), (0, 136, 224, 360)),
    # 224 * 427 / 300 = 318.83 -> 318 (rounding: 319); left (318 - 224) / 2 = 47
    ((427, 300), 224, 224, (318, 224), (47, 0, 271, 224)),
    # 256 * 601 / 400 = 384.64 -> 384 (rounding: 385); left 80
    ((601, 400), 256, 224, (384, 256), (80, 16, 304, 240)),
    # square: no crop offset; already at the size: no resample at all
    ((512, 512), 256, 224, (256, 256), (16, 16, 240, 240)),
    ((224, 224), 224, 224, (224, 224), (0, 0, 224, 224)),
]


def photo(w, h, seed=0):
    """An 8-bit image with edges (a bicubic resize overshoots there) and noise."""
    rng = np.random.default_rng(seed)
    arr = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    arr[:, ::7] = 255
    arr[::5] = 0
    return Image.fromarray(arr)


def by_hand(pil, size, box):
    resized = pil if pil.size == size else pil.resize(size, Image.BICUBIC)
    return torch.from_numpy(np.array(resized.crop(box))).permute(2, 0, 1).float().div(255)


@pytest.mark.parametrize(("wh", "resize", "crop", "size", "box"), HAND)
def test_resize_and_crop_are_the_hand_worked_ones(wh, resize, crop, size, box):
    """Through the suite's own paths: `clip_input` (224) and `dino_mb`'s encoder input (256, then normalised)."""
    from benchmark.models.dino_v1 import load_dino_v1

    pil = photo(*wh)
    x, want = to_float_tensor(pil), by_hand(pil, size, box)
    assert torch.equal(resize_crop(x, resize, crop), want)
    if resize == 224:
        assert torch.equal(clip_input(x, 224), want)
    else:
        mean, std = (torch.tensor(v).view(3, 1, 1) for v in IMAGENET)
        enc = load_dino_v1("tiny", model_id="facebook/dino-vits16", recipe="resize256-crop224")
        assert torch.equal(enc.prepare(x[None])[0], (want - mean) / std)


@pytest.mark.parametrize(("wh", "resize", "crop", "size", "box"), HAND)
def test_dino_input_is_magicbrush_transform_bit_for_bit(wh, resize, crop, size, box):
    """The tiny DINO encoder of `dino_mb` gets exactly what the script's DINO transform makes of the same file."""
    import torch.nn.functional as F
    from torchvision import transforms as T

    from benchmark.models.dino_v1 import load_dino_v1

    pil = photo(*wh, seed=1)
    script = T.Compose([T.Resize(256, interpolation=3), T.CenterCrop(224), T.ToTensor(), T.Normalize(*IMAGENET)])
    enc = load_dino_v1("tiny", model_id="facebook/dino-vits16", recipe="resize256-crop224")
    x = to_float_tensor(pil)[None]
    assert torch.equal(enc.prepare(x), script(pil)[None])
    # EditVal's `resize224` (shared with `dino_ev`) stays what it was: a float bicubic resize straight to 224
    want = (F.interpolate(x, size=(224, 224), mode="bicubic", antialias=True, align_corners=False).clamp(0, 1)
            - torch.tensor(IMAGENET[0]).view(1, 3, 1, 1)) / torch.tensor(IMAGENET[1]).view(1, 3, 1, 1)
    assert torch.equal(load_dino_v1("tiny", recipe="resize224").prepare(x), want)


@pytest.mark.parametrize(("wh", "resize", "crop", "size", "box"), [c for c in HAND if c[1] == 224])
def test_clip_input_is_openai_preprocess_bit_for_bit(wh, resize, crop, size, box):
    """clip_input + the encoder's normalisation = OpenAI clip's preprocess (Resize(224, bicubic), CenterCrop(224),
    ToTensor, Normalize); the input is 8-bit values, so a bicubic overshoot is clamped to [0, 1] as PIL clamps it."""
    from torchvision import transforms as T

    from benchmark.models.clip import load_clip

    pil = photo(*wh, seed=2)
    script = T.Compose([T.Resize(224, interpolation=T.InterpolationMode.BICUBIC), T.CenterCrop(224), T.ToTensor(),
                        T.Normalize(*CLIP_NORM)])
    x = clip_input(to_float_tensor(pil), 224)
    assert 0 <= float(x.min()) and float(x.max()) <= 1 and torch.equal(x * 255, (x * 255).round())
    assert torch.equal(load_clip("tiny").preprocess(x[None]), script(pil)[None])


def test_8bit_images_round_trip_and_bad_values_are_refused():
    pil = photo(40, 30)
    assert np.array_equal(np.array(to_pil_8bit(to_float_tensor(pil))), np.array(pil))
    for bad in (torch.full((3, 8, 8), 1.5), torch.full((3, 8, 8), -0.1), torch.full((3, 8, 8), float("nan"))):
        with pytest.raises(ValueError, match=r"in \[0, 1\].*8-bit image / 255"):
            resize_crop(bad, 256, 224)
    with pytest.raises(ValueError, match=r"\(3, H, W\)"):
        to_pil_8bit(torch.zeros(1, 3, 8, 8))

