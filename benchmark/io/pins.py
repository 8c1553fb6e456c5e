"""The user's pins: what a user pinned on their machine for a third party's file or revision that this repository
cannot pin (the KRIS-Bench prompt file's sha256, RISEBench-360's hub revision), kept in a user-level file and never
in the repository's configs.

    editmeter data pin kris --file datasets/kris/downloads/kris_prompts.txt   # after reviewing the file
    editmeter data pin rise --revision <40-hex commit of the hub dataset PhoenixZ/RISEBench>

The file is `$EDITMETER_PINS` when set, else `$XDG_CONFIG_HOME/editmeter/pins.json` (`~/.config/editmeter/pins.json`).
It holds one JSON object:

    {"kris": {"<Kris_Bench commit>": {"prompts_sha256": "<64 hex>", "prompts_file": "<absolute path>"}},
     "rise": {"revision": "<40 hex>"}}

The configs read it through the `em_pin` resolver (`configs/metrics/kris.yaml`: a pin applies only to the commit it
was made for), the downloads through `hub_revision` (`benchmark.io.download.load_manifest`). A value given on the
command line (`metrics.kris.prompts_sha256=...`) still wins. docs/judge.md, "Pinning what the repository cannot".
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from benchmark.io.errors import RunError

PINS_ENV = "EDITMETER_PINS"
COMMIT = re.compile(r"[0-9a-f]{40}")
SHA256 = re.compile(r"[0-9a-f]{64}")
MAX_BYTES = 1 << 20


class PinError(RunError, ValueError):
    """The pins file is unreadable or a pin is malformed; the message names the file and the fix."""


def pins_path() -> Path:
    """Where the pins live: $EDITMETER_PINS, else $XDG_CONFIG_HOME/editmeter/pins.json (~/.config by default)."""
    if os.environ.get(PINS_ENV):
        return Path(os.environ[PINS_ENV]).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "editmeter" / "pins.json"


def read_pins(path: Path | None = None) -> dict[str, Any]:
    """The pins (an empty mapping when the file does not exist); PinError naming the file when it is unreadable."""
    path = pins_path() if path is None else path
    if not path.exists():
        return {}
    fix = f"fix or delete it, then pin again (`editmeter data pin ...`; {PINS_ENV} moves it)"
    if not path.is_file() or path.stat().st_size > MAX_BYTES:
        raise PinError(f"pins file {path} is not a regular file of at most {MAX_BYTES:,} bytes: {fix}")
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise PinError(f"pins file {path} is not readable JSON ({type(err).__name__}: {err}): {fix}") from None
    if not isinstance(obj, dict) or not all(isinstance(v, dict) for v in obj.values()):
        raise PinError(f"pins file {path} must hold one JSON object of objects: {fix}")
    return obj


def write_pin(section: str, key: str | None, values: dict[str, Any], path: Path | None = None) -> Path:
    """Set `values` in the pins file, under `section` (and `key` within it when given), keeping every other pin;
    written atomically. Returns the file's path."""
    from benchmark.io.fileio import atomic_write_text

    path = pins_path() if path is None else path
    pins = read_pins(path)
    entry = pins.setdefault(section, {})
    if key is not None:
        entry = entry.setdefault(key, {})
        if not isinstance(entry, dict):
            raise PinError(f"pins file {path}: {section}.{key} is not an object; delete it and pin again")
    entry.update(values)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(pins, indent=1, sort_keys=True) + "\n")
    return path


def pinned(section: str, key: str | None, field: str, default: Any = None) -> Any:
    """One pinned value (`section`[.`key`].`field`), or `default` where nothing is pinned. The `em_pin` resolver:
    `${em_pin:kris,${.prompts_commit},prompts_sha256,null}`."""
    entry = read_pins().get(section, {})
    if key is not None:
        entry = entry.get(key, {}) if isinstance(entry, dict) else {}
    value = entry.get(field) if isinstance(entry, dict) else None
    return default if value is None else value


def hub_revision(name: str) -> str | None:
    """The hub revision pinned for the data set `name` (`editmeter data pin rise --revision`), checked."""
    rev = pinned(name, None, "revision")
    if rev is not None and (not isinstance(rev, str) or not COMMIT.fullmatch(rev)):
        raise PinError(f"pins file {pins_path()}: {name}.revision {rev!r} is not a 40-hex commit; pin it again with "
                       f"`editmeter data pin {name} --revision <commit>`")
    return rev
