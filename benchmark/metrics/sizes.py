"""What the pixel-aligned metrics do with an edit whose size differs from its source's (docs/metrics.md, "An edit of
another size").

Edits made elsewhere keep the size their model made them at (`Editor.any_output_size`), and each suite declares its
rule: HATIE resizes every image to 512 x 512 as its release does (docs/hatie.md); metrics that compare pixels with
the source or the ground-truth target (`metrics=basic`, the pixel and LPIPS columns of `metrics=conventional`) use
`fit_to_source` below; suites that only feed an encoder its own input recipe (CLIP, DINO, the judge) take the edit
as it is.
"""

from __future__ import annotations

from typing import Any

# Largest relative change of aspect ratio (width / height) that `fit_to_source` resizes over. Models snap their
# output to a grid (multiples of 8 to 64 px, a list of ~1 MP buckets), which moves the ratio of a typical photo by
# up to ~4%; beyond 5% a resize would visibly stretch the edit, and pixel metrics would compare unaligned pixels.
MAX_ASPECT_CHANGE = 0.05
# Smallest edit side, as a fraction of the source's, that `fit_to_source` scales up. Models make edits at 256 px to
# ~1 MP, so a typical source is at most 4x larger on a side; an edit 8x smaller (a 1x1 or 16 px image for a 512 px
# source) is not an edit at the source's content, and its bicubic upscale would be scored as if it were.
MIN_SIDE_FRACTION = 1 / 8


def aspect_change(size: tuple[int, int], reference: tuple[int, int]) -> float:
    """Relative change of width / height from `reference` to `size`, symmetric: max(r, 1 / r) - 1."""
    r = (size[0] / size[1]) / (reference[0] / reference[1])
    return max(r, 1 / r) - 1


def fit_to_source(edit: Any, size: tuple[int, int], what: str = "edit") -> Any:
    """The PIL `edit` at the source's `size` (width, height): itself when the sizes agree, else resized with PIL's
    bicubic filter, as MagicBrush's `evaluation/image_eval.py` resizes a generated image to its reference before
    L1 / L2. An edit whose aspect ratio differs by more than MAX_ASPECT_CHANGE, or whose sides are under
    MIN_SIDE_FRACTION of the source's, is refused (ImageInputError naming both sizes): stretching it, or blowing up
    a thumbnail, would not be the same edit."""
    from PIL import Image

    from benchmark.io.imageio import ImageInputError

    if edit.size == tuple(size):
        return edit
    change = aspect_change(edit.size, size)
    if change > MAX_ASPECT_CHANGE:
        raise ImageInputError(
            f"{what} is {edit.size[0]}x{edit.size[1]}, source is {size[0]}x{size[1]}: their aspect ratios differ by "
            f"{change:.0%}, over the {MAX_ASPECT_CHANGE:.0%} that is resized to the source's size (pixel metrics "
            "compare aligned pixels); make the edit at the source's aspect ratio, or crop it to it")
    if min(edit.size[0] / size[0], edit.size[1] / size[1]) < MIN_SIDE_FRACTION:
        raise ImageInputError(
            f"{what} is {edit.size[0]}x{edit.size[1]}, source is {size[0]}x{size[1]}: its sides are under "
            f"1/{round(1 / MIN_SIDE_FRACTION)} of the source's, too small to scale up to the source's size for pixel "
            "metrics; make the edit at (or near) the source's size")
    return edit.resize(tuple(size), Image.Resampling.BICUBIC)
