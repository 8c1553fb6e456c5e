"""InstructPix2Pix-style editing (IP2P and its fine-tunes such as MagicBrush): one pipeline class, two checkpoints.

How a source is sized for the model (`resize`):

- `aspect` (default): what InstructPix2Pix's `edit_cli.py` does, and MagicBrush's inference script with it. The
  source is scaled so that its longer side would be `resolution`; the shorter side is then rounded *up* to a
  multiple of `size_multiple` (64), the scale recomputed from it, and both sides rounded *down* to that multiple
  (`model_size`, Python float arithmetic kept as the script has it). The source is centre-cropped to that aspect
  ratio and resized with Lanczos (`PIL.ImageOps.fit`). The authors keep the output at that size; here it goes back
  into the part of the source the model saw (`fit_box`, resized bicubically to its size in source pixels), and the
  strips the crop removed keep the source's pixels, so the harness gets an image of the source's size, aligned.
- `square`: every source squashed to `resolution` x `resolution` (bicubic) and the output stretched back; the
  convention of the other diffusion editors here, and of diffusers-based reimplementations.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Literal

from PIL import Image

from benchmark.editing.base import DiffusionEditor, Item, to_pil

RESIZE_MODES = ("aspect", "square")


def model_size(width: int, height: int, resolution: int, multiple: int = 64) -> tuple[int, int]:
    """(w, h) that InstructPix2Pix's edit_cli.py feeds its model for a `width` x `height` source.

    The float operations are the script's, in its order, so the sizes match it exactly, including where rounding
    of `side * scale` lands just under a multiple and loses one (a square 49 px source gives 448, not 512, at 512).
    """
    short = min(width, height)
    scale = math.ceil(short * (resolution / max(width, height)) / multiple) * multiple / short
    w, h = (int(side * scale // multiple) * multiple for side in (width, height))
    if w <= 0 or h <= 0:
        raise ValueError(f"a {width}x{height} source gives an empty model input ({w}x{h}) at resolution {resolution}, "
                         f"multiple {multiple}")
    return w, h


def fit_box(source: tuple[int, int], size: tuple[int, int]) -> tuple[float, float, float, float]:
    """The region of a `source` (w, h) that `PIL.ImageOps.fit(image, size)` resizes (centred, no bleed): the
    largest centred box of `size`'s aspect ratio, (left, top, right, bottom) in source pixels."""
    sw, sh = source
    ratio, src_ratio = size[0] / size[1], sw / sh
    if src_ratio == ratio:
        cw, ch = float(sw), float(sh)
    elif src_ratio > ratio:  # wider than the model input: the sides are cropped
        cw, ch = ratio * sh, float(sh)
    else:                    # taller: top and bottom are cropped
        cw, ch = float(sw), sw / ratio
    left, top = (sw - cw) * 0.5, (sh - ch) * 0.5
    return left, top, left + cw, top + ch


def paste_back(output: Any, source: Image.Image, box: tuple[float, float, float, float]) -> Image.Image:
    """`output` (float (H, W, 3) in [0, 1], the model's view of `box`) resized into `box` (rounded to whole pixels)
    of a copy of `source`; outside the box the source's own pixels. Quantised once, as `to_pil` does."""
    left, top, right, bottom = (round(v) for v in box)
    if (left, top, right, bottom) == (0, 0, *source.size):
        return to_pil(output, source.size)
    canvas = source.convert("RGB").copy()
    canvas.paste(to_pil(output, (right - left, bottom - top)), (left, top))
    return canvas


class Pix2PixEditor(DiffusionEditor):
    """`StableDiffusionInstructPix2PixPipeline` with classifier-free guidance on text (sT) and image (sI).

    Args (besides DiffusionEditor's): scheduler (diffusers class name), steps, guidance_scale (sT),
    image_guidance_scale (sI), resize ('aspect': the authors' sizes, 'square': resolution x resolution; see the
    module docstring), size_multiple (the multiple of the 'aspect' sides; the authors' 64).
    """

    prompt_kind: ClassVar[Literal["instruction", "description"]] = "instruction"
    family: ClassVar[str] = "ip2p"

    def __init__(self, *, scheduler: str, steps: int, guidance_scale: float, image_guidance_scale: float,
                 resize: str, size_multiple: int, **common: Any) -> None:
        """Loads the `ip2p` pipeline (DiffusionEditor) and sets its scheduler."""
        from benchmark.models.diffusion import set_scheduler

        if resize not in RESIZE_MODES:
            raise ValueError(f"editor {self.name!r}: resize={resize!r}; expected one of {', '.join(RESIZE_MODES)}")
        super().__init__(**common)
        self.scheduler, self.steps = scheduler, int(steps)
        self.guidance_scale, self.image_guidance_scale = float(guidance_scale), float(image_guidance_scale)
        self.resize, self.size_multiple = resize, int(size_multiple)
        set_scheduler(self.pipe, scheduler)

    def model_size(self, source: tuple[int, int]) -> tuple[int, int]:
        """(w, h) the model sees for a source of size `source`."""
        if self.resize == "square":
            return self.resolution, self.resolution
        return model_size(*source, self.resolution, self.size_multiple)

    def prepare(self, image: Image.Image) -> Image.Image:
        """'aspect': centre crop to the authors' size, Lanczos (ImageOps.fit); 'square': DiffusionEditor's."""
        if self.resize == "square":
            return super().prepare(image)
        from PIL import ImageOps

        return ImageOps.fit(image.convert("RGB"), self.model_size(image.size), method=Image.Resampling.LANCZOS)

    def finisher(self, output: Any, source: Image.Image) -> Callable[[], Image.Image]:
        """'aspect': the output back into the cropped region of the source (`paste_back`); 'square': `to_pil`."""
        if self.resize == "square":
            return super().finisher(output, source)
        import functools

        return functools.partial(paste_back, output, source, fit_box(source.size, self.model_size(source.size)))

    def _edit_chunk(self, items: Sequence[Item]) -> list[Any]:
        """One (H, W, 3) float image in [0, 1] per item: the instruction-guided edit, start noise drawn per query.
        Items of one model size run as one batch (sources of other aspect ratios get other sizes)."""
        import torch

        out: list[Any] = [None] * len(items)
        groups: dict[tuple[int, int], list[int]] = {}
        for i, it in enumerate(items):
            groups.setdefault(it.image.size, []).append(i)
        for (w, h), idx in groups.items():
            group = [items[i] for i in idx]
            gens = self.generators(group)
            with torch.inference_mode():
                images = self.pipe(
                    prompt=[it.query.instruction for it in group], image=[it.image for it in group],
                    num_inference_steps=self.steps, guidance_scale=self.guidance_scale,
                    image_guidance_scale=self.image_guidance_scale, generator=gens,
                    latents=self.initial_latents(group, gens, size=(w, h)), output_type="np",
                ).images
            for i, im in zip(idx, images, strict=True):
                out[i] = im
        return out

    def hyperparameters(self) -> dict[str, Any]:
        """Sampler settings and input sizing that shape the output (merged into `info()`)."""
        sizing = ({"resize": "aspect", "size_multiple": self.size_multiple} if self.resize == "aspect"
                  else {"resize": "square"})
        return {"scheduler": self.scheduler, "steps": self.steps, "guidance_scale": self.guidance_scale,
                "image_guidance_scale": self.image_guidance_scale, **sizing}
