"""Editor settings as flat scalars, and the settings that tell two leaderboard rows of one editor apart.

A run folder records its editor's `info()` (`editor_info`) and resolved config (`editor_config`) in run.json.
Flattened (`dotted.keys` -> scalar), the keys whose values differ among the rows of one editor become leaderboard
columns named `set.<key>` (e.g. `set.guidance_scale`), so two rows of one editor differ by a visible setting
rather than by a hash alone.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

Scalar = str | int | float | bool | None
PREFIX = "set."  # column name prefix of a setting


def _scalar(value: Any) -> Scalar:
    """`value` as one scalar: numbers, strings, booleans and None stay; anything else becomes compact JSON."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)  # NaN never equals itself: compare it as text
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _flatten(obj: Mapping[str, Any], prefix: str, out: dict[str, Scalar]) -> None:
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            _flatten(value, f"{name}.", out)
        else:
            out[name] = _scalar(value)


def flat_settings(info: dict[str, Any], config: dict[str, Any] | None = None) -> dict[str, Scalar]:
    """`info` (an editor's `info()`) flattened to `dotted.keys` -> scalar (lists become JSON text), plus the keys of
    `config` (its resolved config) that `info` lacks. Keys come out sorted."""
    out: dict[str, Scalar] = {}
    if isinstance(config, Mapping):
        _flatten(config, "", out)
    if isinstance(info, Mapping):
        _flatten(info, "", out)  # info wins: it holds what the editor resolved (device: auto -> cuda)
    return dict(sorted(out.items()))


def _same(a: Scalar, b: Scalar) -> bool:
    # 1 and 1.0 are one setting; True and 1 are not; NaN is NaN
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def varying_settings(settings: Iterable[Mapping[str, Scalar]]) -> list[str]:
    """Sorted keys whose value differs among `settings` (one flat dict per row); a key some rows lack varies."""
    rows = list(settings)
    keys = sorted({k for row in rows for k in row})
    missing = object()
    out = []
    for key in keys:
        values = [row.get(key, missing) for row in rows]
        first = values[0]
        if any(v is missing for v in values) or not all(_same(first, v) for v in values[1:]):  # type: ignore[arg-type]
            out.append(key)
    return out


def column(key: str) -> str:
    """The leaderboard column of setting `key`."""
    return PREFIX + key
