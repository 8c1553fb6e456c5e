"""`overedit`: changes everything, the "excessively modified" anchor.

It mirrors the image, shifts every colour channel and adds seeded noise, so content and context are both lost
while the image stays a plausible picture of the same size. Works on any query set.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal

import numpy as np
from PIL import Image

from benchmark.editing.editor import Editor
from benchmark.io.types import Query


class OverEditEditor(Editor):
    """Args:
    mirror: flip left-right.
    channel_roll: rotate the RGB channels by this many places (0-2).
    invert: invert colours (255 - x).
    noise_std: standard deviation of per-pixel Gaussian noise in 8-bit levels, drawn from the query's generator.
    """

    prompt_kind: ClassVar[Literal["instruction", "description"]] = "instruction"

    def __init__(self, mirror: bool, channel_roll: int, invert: bool, noise_std: float) -> None:
        self.mirror = bool(mirror)
        self.channel_roll = int(channel_roll)
        self.invert = bool(invert)
        self.noise_std = float(noise_std)

    def edit(self, queries: Sequence[Query], images: Sequence[Image.Image], *, seeds: Sequence[int]) -> list[Image.Image]:
        import torch

        from benchmark.editing.editor import generators

        out = []
        for im, gen in zip(images, generators(seeds), strict=True):
            x = np.asarray(im.convert("RGB"), dtype=np.float32)
            if self.mirror:
                x = x[:, ::-1]
            x = np.roll(x, self.channel_roll, axis=2)
            if self.invert:
                x = 255.0 - x
            if self.noise_std > 0:
                noise = torch.randn(x.shape, generator=gen, dtype=torch.float32).numpy()
                x = x + self.noise_std * noise
            out.append(Image.fromarray(np.clip(np.round(x), 0, 255).astype(np.uint8), mode="RGB"))
        return out

    def info(self) -> dict[str, Any]:
        return {
            "name": "overedit", "weights": None, "mirror": self.mirror, "channel_roll": self.channel_roll,
            "invert": self.invert, "noise_std": self.noise_std,
        }
