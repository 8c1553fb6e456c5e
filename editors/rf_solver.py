"""`rf_solver`: RF-Solver-Edit (Wang et al. 2024, "Taming Rectified Flow for Inversion and Editing",
arXiv:2411.04746) on FLUX.1 [dev]. Description-based: source_caption (inversion), target_caption (sampling).

The second-order RF-Solver for inversion and sampling, and its feature sharing: the self-attention values of the
single-stream blocks 20-37, kept during the last `inject` inversion steps, replace the target's during the first
`inject` sampling steps (benchmark.editing.flow_edit has the details, docs/flow-editors.md the settings' sources).
"""

from __future__ import annotations

from typing import ClassVar

from benchmark.editing.flow_edit import FlowEditor


class RFSolverEditor(FlowEditor):
    """RF-Solver-Edit: `FlowEditor` with the authors' settings from configs/editor/rf_solver.yaml."""

    name: ClassVar[str] = "rf_solver"
