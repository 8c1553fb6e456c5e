"""The HTML report (`editmeter report`): a static folder that opens offline, built from a results folder.
`build_report` writes it; `benchmark.commands.report.build` documents the folder's layout."""

from benchmark.commands.report.build import ReportError, build_report, main

__all__ = ["ReportError", "build_report", "main"]
