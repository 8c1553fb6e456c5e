"""A test-only editor that reads each query's edit mask through `Editor.query_file` and paints the masked pixels
white: an editor that needs more of a query than its source (docs/editors.md)."""

from __future__ import annotations

import numpy as np
from PIL import Image

from editors.identity import IdentityEditor


class PaintsTheMask(IdentityEditor):
    def edit(self, queries, images, *, seeds):
        out = []
        for q, im in zip(queries, images, strict=True):
            mask = np.asarray(Image.open(self.query_file(q, "edit_mask")).convert("L")) > 127
            pixels = np.asarray(im.convert("RGB")).copy()
            pixels[mask] = 255
            out.append(Image.fromarray(pixels))
        return out
