"""PyTorch's deterministic mode for the editors that need it (those that backpropagate through the model).

Sampling-only editors (IP2P, SDEdit, ...) give byte-identical PNGs on a rerun on one GPU without it: their forward
kernels are deterministic. P2P's null-text inversion and Imagic's optimisation run backward passes, whose CUDA
kernels accumulate gradients with atomic additions in a varying order (convolution weight gradients, attention
backward), so two runs drift apart and the PNGs differ. `deterministic_algorithms` switches PyTorch to
deterministic kernels (strict: an op without one raises and names itself, the query is recorded as failed) and
cuDNN to deterministic convolution algorithms without autotuning; on a CPU it changes nothing measurable.

cuBLAS needs its workspace configured before its first call in the process for deterministic matmuls, so
`configure_cublas()` is called at the start of the `editmeter` command and before an editor loads its model.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

# cuBLAS's documented setting for reproducible results (8 workspaces of 4 MiB per stream; ":16:8" is the smaller one).
CUBLAS_WORKSPACE = ":4096:8"


def configure_cublas() -> None:
    """Set CUBLAS_WORKSPACE_CONFIG unless the user set it (harmless without CUDA; must precede cuBLAS's first use)."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)


@contextmanager
def deterministic_algorithms(enabled: bool) -> Iterator[None]:
    """Within the block, PyTorch uses deterministic algorithms only (when `enabled`); the previous mode is restored."""
    if not enabled:
        yield
        return
    import torch

    configure_cublas()
    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
              torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)
    torch.use_deterministic_algorithms(True, warn_only=False)
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = before[2], before[3]
