"""Step timing shared by the suites and the feature cache (below both, so neither imports the other for it)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def step_time(seconds: dict[str, float] | None, step: str) -> Iterator[None]:
    """Add the wall time of the block to `seconds[step]` (None: time nothing). The bench scripts print these
    non-forward steps per query, so a step that grows is seen without a profiler."""
    if seconds is None:
        yield
        return
    t0 = time.perf_counter()
    try:
        yield
    finally:
        seconds[step] = seconds.get(step, 0.0) + time.perf_counter() - t0
