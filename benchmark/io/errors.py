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
