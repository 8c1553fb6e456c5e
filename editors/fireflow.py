"""`fireflow`: FireFlow (Deng et al. 2024, "FireFlow: Fast Inversion of Rectified Flow for Image Semantic Editing",
arXiv:2412.07517) on FLUX.1 [dev]. Description-based: source_caption (inversion), target_caption (sampling).

FireFlow's solver reuses each step's midpoint velocity as the next step's starting velocity (second order at one
transformer evaluation per step after the first), with RF-Solver-Edit's value sharing over all 38 single-stream
blocks for the first sampling step (benchmark.editing.flow_edit; docs/flow-editors.md).
"""

from __future__ import annotations

from typing import ClassVar

from benchmark.editing.flow_edit import FlowEditor


class FireFlowEditor(FlowEditor):
    """FireFlow: `FlowEditor` with the authors' settings from configs/editor/fireflow.yaml."""

    name: ClassVar[str] = "fireflow"
