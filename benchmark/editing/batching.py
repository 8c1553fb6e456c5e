"""Run a batch function with CUDA out-of-memory handling: halve the batch and retry before giving up."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")
log = logging.getLogger(__name__)


def _is_oom(err: BaseException) -> bool:
    import torch

    return isinstance(err, torch.cuda.OutOfMemoryError)


class HalvingRunner:
    """Calls `fn(chunk)` on chunks of at most `max_batch` items; on CUDA OOM halves the chunk and retries.

    The smallest size that worked is remembered, so one OOM does not cost a failed attempt on every later batch.
    A single item that still runs out of memory re-raises: the harness records that query as failed.
    """

    def __init__(self, max_batch: int | None = None) -> None:
        """`max_batch`: largest chunk tried first (None: the whole call's items)."""
        self.max_batch = max_batch

    def __call__(self, fn: Callable[[Sequence[T]], list[R]], items: Sequence[T]) -> list[R]:
        """`fn`'s results for all `items`, in order (`fn` must return one result per item of its chunk)."""
        out: list[R] = []
        i = 0
        while i < len(items):
            size = min(self.max_batch or len(items), len(items) - i)
            chunk = items[i : i + size]
            try:
                res = fn(chunk)
            except Exception as err:
                if not _is_oom(err) or size == 1:
                    raise
                import torch

                torch.cuda.empty_cache()
                self.max_batch = max(1, size // 2)
                log.warning("CUDA out of memory at batch %d; retrying with batch %d", size, self.max_batch)
                continue
            out += res
            i += size
        return out
