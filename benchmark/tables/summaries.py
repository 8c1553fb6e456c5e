"""Registry of model-level summaries of metric suites, keyed by suite name.

A suite's summary (e.g. HATIE's IQ and Total) is code: it is looked up here by the suite name recorded in
`run.json`, never imported from a path stored under results/ (a results folder is data, not code). An unknown
name gets no summary; the aggregation marks the row instead of running anything.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

SummaryFn = Callable[..., dict[str, Any]]


def _hatie() -> SummaryFn:
    from benchmark.metrics.hatie.summary import summarize

    return summarize


def _conventional() -> SummaryFn:
    from benchmark.metrics.conventional.summary import summarize

    return summarize


def _augclip() -> SummaryFn:
    from benchmark.metrics.augclip.summary import summarize

    return summarize


def _editval() -> SummaryFn:
    from benchmark.metrics.editval.summary import summarize

    return summarize


def _bpm() -> SummaryFn:
    from benchmark.metrics.bpm.summary import summarize

    return summarize


def _judge() -> SummaryFn:
    from benchmark.metrics.judge.summary import summarize

    return summarize


def _gedit() -> SummaryFn:
    from benchmark.metrics.gedit.summary import summarize

    return summarize


def _imgedit() -> SummaryFn:
    from benchmark.metrics.imgedit.summary import summarize

    return summarize


def _kris() -> SummaryFn:
    from benchmark.metrics.kris.summary import summarize

    return summarize


def _rise() -> SummaryFn:
    from benchmark.metrics.rise.summary import summarize

    return summarize


def _editscore() -> SummaryFn:
    from benchmark.metrics.editscore.summary import summarize

    return summarize


def _editreward() -> SummaryFn:
    from benchmark.metrics.editreward.summary import summarize

    return summarize


def _pie() -> SummaryFn:
    from benchmark.metrics.pie.summary import summarize

    return summarize


# suite name -> loader of its summary function (lazy: the HATIE summary imports scipy / torch helpers)
_REGISTRY: dict[str, Callable[[], SummaryFn]] = {"hatie": _hatie, "conventional": _conventional, "editval": _editval,
                                                  "augclip": _augclip, "bpm": _bpm, "judge": _judge,
                                                  "gedit": _gedit, "imgedit": _imgedit, "kris": _kris, "rise": _rise,
                                                  "pie": _pie,
                                                  "editscore": _editscore, "editreward": _editreward}


def known_suites() -> list[str]:
    """Names of the suites that have a model-level summary."""
    return sorted(_REGISTRY)


def suite_summary(name: str) -> SummaryFn | None:
    """The summary function of suite `name`, or None when no suite of that name is registered."""
    loader = _REGISTRY.get(name)
    return loader() if loader is not None else None
