"""`ip2p`: InstructPix2Pix (Brooks et al. 2023), instruction-based, through diffusers."""

from __future__ import annotations

from typing import ClassVar

from benchmark.editing.ip2p import Pix2PixEditor


class InstructPix2PixEditor(Pix2PixEditor):
    name: ClassVar[str] = "ip2p"
