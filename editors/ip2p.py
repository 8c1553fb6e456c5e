"""`ip2p`: InstructPix2Pix (Brooks et al. 2023), instruction-based, through diffusers."""

from __future__ import annotations

from typing import ClassVar

from benchmark.editing.ip2p import Pix2PixEditor


class InstructPix2PixEditor(Pix2PixEditor):
    """InstructPix2Pix weights (configs/editor/ip2p.yaml) on the shared `Pix2PixEditor`; args are Pix2PixEditor's."""

    name: ClassVar[str] = "ip2p"
