"""What a run prints: progress bars only on a terminal, third-party chatter turned down, our own warnings kept.

Third-party libraries read their verbosity from the environment when first imported, so `quiet_third_party`
only sets environment defaults (cheap: nothing heavy is imported here) and a warnings filter; a variable the user
has set wins, e.g. `DIFFUSERS_VERBOSITY=warning editmeter run ...` brings diffusers' advisories back.
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from typing import Any, TextIO

# Environment defaults for runs. Each library's INFO/advisory output (diffusers: "safety checker disabled",
# pipeline deprecations; transformers: load reports) is noise in a benchmark log; errors still show.
THIRD_PARTY_ENV = {
    "DIFFUSERS_VERBOSITY": "error",
    "TRANSFORMERS_VERBOSITY": "error",
    "HF_HUB_VERBOSITY": "warning",
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
}
# Libraries whose DeprecationWarning / FutureWarning are about their own internals, not about editmeter's
# inputs or results. Warnings raised from benchmark/ or editors/ are never filtered.
THIRD_PARTY_MODULES = ("diffusers", "transformers", "huggingface_hub", "open_clip", "timm", "torchvision", "lpips",
                       "pytorch_fid", "accelerate", "torch")
PROGRESS_CHOICES = ("auto", "true", "false")
# Packages whose warning categories are editmeter's own (a quarantined cache file, a skipped result): the console
# prints those in its own style, without Python's source path and line, which tell a user nothing.
OWN_PACKAGES = ("benchmark", "editors")
WARNING_PREFIX = "[editmeter] warning: "


def progress_enabled(setting: Any = "auto", stream: TextIO | None = None) -> bool:
    """Resolve the `progress` key: `true`/`false`, or `auto` = bars only when stderr is a terminal.

    Off when not a terminal so redirected output and log files never get tqdm's carriage-return frames.
    """
    if isinstance(setting, bool):
        return setting
    text = str(setting).strip().lower()
    if text not in PROGRESS_CHOICES:
        raise ValueError(f"progress={setting!r}: expected one of {', '.join(PROGRESS_CHOICES)}")
    if text != "auto":
        return text == "true"
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def quiet_third_party(progress: bool) -> None:
    """Turn down third-party verbosity for a run (environment defaults + warning filters; idempotent).

    Third-party loading bars ("Loading weights", "Loading pipeline components") are always off. Off a terminal
    every third-party bar is off through tqdm's own `TQDM_DISABLE` default (editmeter's bars pass `disable=`
    explicitly and follow `progress`). On a terminal the Hub's download bars stay on: a first online run may
    download gigabytes of weights and should show it.
    """
    own_warning_style()
    for key, value in THIRD_PARTY_ENV.items():
        os.environ.setdefault(key, value)
    if not progress:
        os.environ.setdefault("TQDM_DISABLE", "1")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    else:
        _loading_bars_off()
    for module in THIRD_PARTY_MODULES:
        for category in (DeprecationWarning, FutureWarning):
            warnings.filterwarnings("ignore", category=category, module=rf"{module}(\.|$)")


def own_warning_style() -> None:
    """Print editmeter's own warnings as `[editmeter] warning: <message>` (idempotent). Only the text is changed
    (`warnings.formatwarning`): filters, `-W` options and recording (`catch_warnings(record=True)`,
    `pytest.warns`) still see every warning, and other packages' warnings keep Python's format."""
    warnings.formatwarning = _format_warning


_python_format = warnings.formatwarning  # the format of every other package's warnings


def _format_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                    line: str | None = None) -> str:
    if category.__module__.split(".")[0] in OWN_PACKAGES:
        return f"{WARNING_PREFIX}{message}\n"
    return _python_format(message, category, filename, lineno, line)


def _loading_bars_off() -> None:
    """diffusers' and transformers' loading bars off, the Hub's download bars left as they were (terminal only:
    this imports both libraries, which a run imports anyway)."""
    try:
        from huggingface_hub.utils import are_progress_bars_disabled, enable_progress_bars
    except ImportError:
        return
    hub_off = are_progress_bars_disabled()
    for name in ("diffusers.utils.logging", "transformers.utils.logging"):
        try:
            __import__(name, fromlist=["disable_progress_bar"]).disable_progress_bar()
        except ImportError:
            continue
    if not hub_off:
        enable_progress_bars()  # transformers' switch also turns the Hub's bars off


# What makes one failure's message differ from another's of the same cause: temporary file names (benchmark.io.fileio's
# atomic writes: ".<name>.<host>-<pid>.<8 random>.tmp"; tempfile's "tmp<8 random>") and object addresses (0x7f...)
_TEMP_NAME = re.compile(r"\.[^/\s'\"]+?\.(?:[A-Za-z0-9-]+-[0-9]+\.)?[a-z0-9_]{8}\.tmp\b|\btmp[a-z0-9_]{8}\b")
_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]{6,}\b")


def reason_group(text: str) -> str:
    """A failure's message as a summary groups it: temporary file names become "<temporary file>" and object
    addresses "0x…", so one cause hit by many queries is counted once (the full message stays in the log)."""
    return _ADDRESS.sub("0x…", _TEMP_NAME.sub("<temporary file>", text))


def shorten(text: str, limit: int = 200) -> str:
    """`text` as it is when it fits in `limit` characters; else cut at the last word boundary before the limit and
    marked with "…" (a reason cut mid-word reads as another word: "aspect rat")."""
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    cut = head.rstrip()
    if not text[limit - 1].isspace():  # the limit falls inside a word: drop that word's start
        space = max(cut.rfind(" "), cut.rfind("\n"), cut.rfind("\t"))
        cut = cut[:space] if space > 0 else cut
    return cut.rstrip(" ,;:") + "…"
