"""Errors that end a run with a clear one-paragraph message and exit status 1 (no traceback for the user)."""

from __future__ import annotations


class RunError(RuntimeError):
    """A run cannot start, or finished but must not be trusted as whole: the entry point prints the message and
    exits with status 1 instead of showing a traceback."""

    exit_code = 1


class PreflightError(RunError):
    """A component of the run is missing; raised before the first edit. The message names it and the fix."""


class TooManyFailures(RunError):
    """The share of failed queries exceeds `max_failed_fraction` (or every query failed)."""


class CorruptRunFile(RunError):
    """A file of a run folder that a rerun cannot repair by itself is malformed; the message names it and the fix."""


def run_error_in(exc: BaseException) -> RunError | None:
    """The RunError behind `exc`: itself, or one it was raised from or during (Hydra's `instantiate` wraps what a
    constructor raises in its InstantiationException); None when there is none."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, RunError):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None
