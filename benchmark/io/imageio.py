"""Reading and writing images and masks with explicit, documented conversions.

Input images become 8-bit RGB. Conversions that lose nothing are done (grayscale repeated to 3 channels, as HATIE
does; an RGBA image whose alpha is fully opaque drops its alpha; 16-bit images are scaled to 8 bits by value/257,
not clipped the way PIL's `convert` does). Anything ambiguous (real transparency, unreadable or missing files) raises
`ImageInputError` naming the file and the fix, so the stage records a failure instead of guessing.

Limits (docs/inputs.md): an image whose header claims more than `max_pixels` pixels is refused before anything is
decoded (a 70-byte PNG can claim 60000 x 60000), and a source smaller than `min_source_side` on either side is refused
by the edit stage. EXIF orientation tags are ignored: pixels are used in stored order, as HATIE's reference code
(PIL) does and as the builders size masks and boxes; rotating sources alone would misalign their masks.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from benchmark.io.fileio import atomic_path


class ImageInputError(ValueError):
    """An input image cannot be used as is; the message names the file and what to do."""


# 2048 x 2048: 10x the largest source of any supported set (COCO / GQA images are at most 640 px a side, HATIE and
# MagicBrush 512 x 512), while basic scoring of a 16-megapixel source was measured at 5.5 GB RSS (~340 bytes per
# pixel), so the default bounds one source near 1.4 GB. `limits.max_source_pixels` in configs/config.yaml.
DEFAULT_MAX_PIXELS = 2048 * 2048
# A source smaller than this on either side cannot be edited or scored meaningfully (HATIE crops objects from it and
# resizes to 512 x 512; a 1 x 1 source scored BC 0.9999). `limits.min_source_side`.
DEFAULT_MIN_SOURCE_SIDE = 16


@dataclass
class ImageLimits:
    """Process-wide input limits, set once per run from the config (`set_limits`). DataLoader workers started by
    fork inherit them; the edit stage also passes them explicitly, so spawned workers apply them too."""

    max_pixels: int = DEFAULT_MAX_PIXELS
    min_source_side: int = DEFAULT_MIN_SOURCE_SIDE


LIMITS = ImageLimits()


def set_limits(max_pixels: int | None = None, min_source_side: int | None = None) -> None:
    """Change the limits every later `load_rgb` / `load_mask` call checks (None keeps the current value)."""
    for name, key, lowest, value in (("max_pixels", "limits.max_source_pixels", 1, max_pixels),
                                     ("min_source_side", "limits.min_source_side", 0, min_source_side)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
            raise ValueError(f"{key} must be a {'positive' if lowest else 'non-negative'} integer, got {value!r}")
        setattr(LIMITS, name, value)


def _check_header(path: Path, im: Image.Image, what: str, min_side: int = 0, max_pixels: int | None = None) -> None:
    """Refuse from the header alone, before any pixel is decoded."""
    w, h = im.size
    limit = LIMITS.max_pixels if max_pixels is None else max_pixels
    if w * h > limit:
        raise ImageInputError(
            f"{path}: {what} is {w}x{h} = {w * h:,} pixels, over the limit of {limit:,} "
            "(limits.max_source_pixels); downscale it, or raise the limit if you have the memory (scoring needs "
            "about 340 bytes per pixel)"
        )
    if min(w, h) < min_side:
        raise ImageInputError(
            f"{path}: {what} is {w}x{h}, smaller than the minimum side of {min_side} px (limits.min_source_side); "
            "such a source cannot be edited or scored meaningfully"
        )


def _bomb_error(path: Path, what: str, err: Exception) -> ImageInputError:
    return ImageInputError(f"{path}: {what} header claims too many pixels, over the limit of {LIMITS.max_pixels:,} "
                           f"(limits.max_source_pixels; PIL: {err})")


def _to_uint8(arr: np.ndarray) -> np.ndarray:
    """16-bit integer data: the full range 0..65535 maps onto 0..255."""
    return np.clip(np.round(arr.astype(np.float64) / 257.0), 0, 255).astype(np.uint8)


def load_rgb(path: str | Path, data: bytes | None = None, *, min_side: int = 0,
             max_pixels: int | None = None) -> Image.Image:
    """Open `path` as an 8-bit RGB image (see module docstring for the conversions). Pass `data` when the file's
    bytes were already read (e.g. to hash them); `path` then only names the file in errors. The pixel limit is
    checked from the header before decoding (`max_pixels`, default `LIMITS.max_pixels`); `min_side` (the edit
    stage passes `LIMITS.min_source_side` for sources) refuses tiny images."""
    import io

    path = Path(path)
    if data is None and not path.is_file():
        raise ImageInputError(f"{path}: image file not found (check the query set folder or re-run its download)")
    try:
        with Image.open(io.BytesIO(data) if data is not None else path) as im:
            _check_header(path, im, "image", min_side, max_pixels)
            im.load()
            mode = im.mode
            if mode == "RGB":
                return im.copy()
            if mode in ("L", "P", "1", "CMYK", "YCbCr", "LA", "PA", "RGBA", "RGBa", "La"):
                if im.mode == "P":
                    im = im.convert("RGBA")
                if "A" in im.mode:
                    alpha = np.asarray(im.getchannel("A"))
                    if alpha.min() < 255:
                        raise ImageInputError(
                            f"{path}: image has transparent pixels (mode {mode}); flatten it onto the background "
                            "you intend (e.g. PIL `Image.alpha_composite`) and save as RGB"
                        )
                    im = im.convert("RGB" if im.mode in ("RGBA", "RGBa", "PA") else "L")
                return im.convert("RGB")
            if mode.startswith("I") or mode == "F":
                if mode == "F":
                    raise ImageInputError(f"{path}: floating-point image (mode F) has no defined range; save it as 8-bit")
                arr = _to_uint8(np.asarray(im))
                return Image.fromarray(arr, mode="L").convert("RGB")
            raise ImageInputError(f"{path}: unsupported image mode {mode}; save it as 8-bit RGB")
    except ImageInputError:
        raise
    except Image.DecompressionBombError as err:
        raise _bomb_error(path, "image", err) from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, MemoryError) as err:
        raise ImageInputError(f"{path}: cannot decode image ({type(err).__name__}: {err}); the file is corrupt or not an image") from None


def load_mask(path: str | Path, size: tuple[int, int] | None = None) -> np.ndarray:
    """Load a mask PNG as a bool array (nonzero = inside). `size` (W, H) is checked, never silently resized."""
    path = Path(path)
    if not path.is_file():
        raise ImageInputError(f"{path}: mask file not found (check the query set folder or rebuild the set)")
    try:
        with Image.open(path) as im:
            _check_header(path, im, "mask")
            arr = np.asarray(im.convert("L")) if im.mode not in ("1", "L") else np.asarray(im)
    except ImageInputError:
        raise
    except Image.DecompressionBombError as err:
        raise _bomb_error(path, "mask", err) from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, MemoryError) as err:
        raise ImageInputError(f"{path}: cannot decode mask ({type(err).__name__}: {err}); the file is corrupt or not "
                              "an image: rebuild the set") from None
    if size is not None and (arr.shape[1], arr.shape[0]) != tuple(size):
        raise ImageInputError(f"{path}: mask is {arr.shape[1]}x{arr.shape[0]}, image is {size[0]}x{size[1]}; a mask "
                              "must have its image's size (it is never resized): rebuild the set")
    return arr > 0


def save_png(image: Image.Image, path: Path, compress_level: int = 6) -> None:
    """Save atomically as PNG (lossless at every level; deterministic bytes for the same pixels and level).

    `compress_level` trades size for speed (zlib 0-9, PIL's default 6). Pixels are identical at every level.
    """
    with atomic_path(path) as tmp:
        image.save(tmp, format="PNG", compress_level=compress_level)


def save_mask(mask: np.ndarray, path: Path) -> None:
    save_png(Image.fromarray(np.where(mask, 255, 0).astype(np.uint8), mode="L"), path)


def to_float_tensor(image: Image.Image):
    """PIL RGB -> torch float32 (3, H, W) in [0, 1], a channels-last view (`float_chw`)."""
    return float_chw(np.array(image if image.mode == "RGB" else image.convert("RGB")))


def float_chw(arr: np.ndarray):
    """uint8 (H, W, 3) -> float32 (3, H, W) in [0, 1], as a channels-last view of the (H, W, 3) floats (the layout
    the suites' reductions follow): each value is float32(x) / 255, converted once, with no float64 and no second
    buffer. `arr` must be writable; its memory is not reused."""
    import torch

    return torch.from_numpy(arr).float().div_(255).permute(2, 0, 1)


def save_bitmask(mask: np.ndarray, path: Path) -> None:
    """Save a bool mask as a 1-bit PNG (atomically): ~4x faster and smaller than `save_mask`; `load_mask` reads both."""
    with atomic_path(path) as tmp:
        Image.fromarray(np.ascontiguousarray(mask, dtype=bool)).save(tmp, format="PNG")  # bool arrays become mode "1"


def save_jpeg(image: Image.Image, path: Path, quality: int = 95) -> None:
    """Save atomically as JPEG without chroma subsampling (for query-set images whose sources are JPEGs)."""
    with atomic_path(path) as tmp:
        image.save(tmp, format="JPEG", quality=quality, subsampling=0)
