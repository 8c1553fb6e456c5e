"""What every metric suite does with its learned components: build each from its factory once, on first use, and
account load and forward-pass time in `timings` (the score stage reports `model_seconds` from it); and score their
queries through the shared chunk loop."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any


class LazyComponents:
    """Mixin for suites that hold `_factories` (name -> factory(device=) or None), `_models` (a dict), `device` and
    `timings` (a dict of seconds)."""

    _factories: dict[str, Callable[..., Any] | None]
    _models: dict[str, Any]
    device: str
    timings: dict[str, float]
    # The components whose forward passes follow the suite's `precision` (benchmark.metrics.precision); a suite
    # that offers the option sets both. Detectors and segmenters stay out: their thresholds amplify drift.
    reduced_components: tuple[str, ...] = ()
    precision: str = "fp32"
    # the shared chunk loop's settings (`_score_chunks`; `chunking.check_loading` checks the last two)
    chunk_size: int
    load_threads: int
    prefetch: bool

    def _get(self, name: str) -> Any:
        """The component `name`, built on first use (None when its factory is None: the component is off)."""
        from benchmark.metrics.precision import with_precision

        if name not in self._models:
            f = self._factories[name]
            t0 = time.perf_counter()
            model = None if f is None else f(device=self.device)
            self._models[name] = with_precision(model, self.precision) if name in self.reduced_components else model
            self.timings[f"load {name}"] = time.perf_counter() - t0
        return self._models[name]

    def step_seconds(self) -> dict[str, float]:
        """Seconds of the non-forward steps the suite timed (`load images`, `cache keys`, `batch assembly`, its own
        steps); model loads and forward passes excluded. What the bench scripts print per query."""
        model = self.model_seconds() if hasattr(self, "model_seconds") else {}
        return {k: v for k, v in self.timings.items()
                if k not in model and "forward" not in k and (k == "load images" or not k.startswith("load "))}

    def _score_chunks(self, samples: Any, score: Callable[[list[Any]], list[dict[str, Any]]], *, desc: str,
                      num_workers: int, progress: bool) -> Iterator[list[dict[str, Any]]]:
        """`score` over consecutive chunks of `samples` through the shared chunk loop (`chunking.score_in_chunks`),
        with the suite's chunk size, loading settings and `timings`."""
        from benchmark.metrics.chunking import score_in_chunks

        return score_in_chunks(samples, score, chunk_size=self.chunk_size, desc=desc, num_workers=num_workers,
                               progress=progress, timings=self.timings, load_threads=self.load_threads,
                               prefetch=self.prefetch)

    def _timer(self, key: str) -> Callable[[Callable[[], Any]], Any]:
        """A wrapper that runs a forward call and adds its time to `timings[key]`."""
        def run(fn: Callable[[], Any]) -> Any:
            t0 = time.perf_counter()
            out = fn()
            self.timings[key] = self.timings.get(key, 0.0) + time.perf_counter() - t0
            return out

        return run
