"""Metric interface: per-sample, stateless, batched, with declared metadata."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from benchmark.io.types import MetricInfo, Query

if TYPE_CHECKING:
    import torch

# Key of a suite summary's result (`benchmark.tables.summaries`): why one of its values is NaN (the leaderboard appends
# it to the row's mark).
SUMMARY_NOTE = "note"

# Inputs a metric can declare in `MetricInfo.needs`.
NEED_SOURCE = "source"
NEED_EDIT = "edit"
NEED_EDIT_MASK = "edit_mask"
NEED_TARGET_IMAGE = "target_image"


@dataclass(frozen=True)
class ScoreBatch:
    """B samples of equal size. Images are float (B, 3, H, W) in [0, 1]; masks are bool (B, H, W).

    `edit_mask` / `target` hold None where the query set lacks them; `has_edit_mask` / `has_target` say which
    samples have real values (the tensors are filled with zeros elsewhere so the batch stays rectangular).
    """

    queries: Sequence[Query]
    source: torch.Tensor
    edit: torch.Tensor
    edit_mask: torch.Tensor | None = None
    has_edit_mask: torch.Tensor | None = None
    target: torch.Tensor | None = None
    has_target: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.queries)


@runtime_checkable
class PairwiseMetric(Protocol):
    """One value per sample (NaN = undefined for that sample), shape (B,)."""

    info: MetricInfo

    def score(self, batch: ScoreBatch) -> torch.Tensor: ...
