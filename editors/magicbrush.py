"""`magicbrush`: InstructPix2Pix fine-tuned on MagicBrush (Zhang et al. 2023); same pipeline class as `ip2p`."""

from __future__ import annotations

from typing import ClassVar

from benchmark.editing.ip2p import Pix2PixEditor


class MagicBrushEditor(Pix2PixEditor):
    """MagicBrush weights (configs/editor/magicbrush.yaml) on the shared `Pix2PixEditor`; args are Pix2PixEditor's."""

    name: ClassVar[str] = "magicbrush"
