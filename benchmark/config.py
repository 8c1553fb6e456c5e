"""Config helpers: the config tree's location, name validation with suggestions, and config signatures."""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from typing import Any

from benchmark.provenance import PROJECT_ROOT

CONFIG_DIR = PROJECT_ROOT / "configs"
# Config groups whose option names users type on the command line.
CHECKED_GROUPS = ("editor", "queryset", "metrics", "profile")
_ROOT_TOKEN = "<root>"


class UnknownOptionError(ValueError):
    """A config group option does not exist; the message lists the valid names."""


def register_resolvers() -> None:
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("em_root"):
        OmegaConf.register_new_resolver("em_root", lambda: str(PROJECT_ROOT))


def options(group: str) -> list[str]:
    """Names of the options of a config group (its YAML files)."""
    return sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml"))


def check_option(group: str, name: str) -> None:
    valid = options(group)
    if name in valid:
        return
    close = difflib.get_close_matches(name, valid, n=3, cutoff=0.5)
    hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    raise UnknownOptionError(f"unknown {group} {name!r}.{hint} Valid {group} names: {', '.join(valid)}")


_OVERRIDE_RE = re.compile(r"^(?:\+|\+\+)?(?P<group>[a-z_]+)=(?P<value>[^=]*)$")


def check_overrides(overrides: Sequence[str]) -> None:
    """Validate group selections such as `editor=ip2p` (also sweeps `editor=a,b`) before Hydra composes anything."""
    for ov in overrides:
        m = _OVERRIDE_RE.match(ov)
        if not m or m["group"] not in CHECKED_GROUPS:
            continue
        for name in m["value"].split(","):
            if name:
                check_option(m["group"], name.strip())


def portable(obj: Any) -> Any:
    """Replace the checkout's absolute path by `<root>` so signatures match across clones."""
    if isinstance(obj, dict):
        return {k: portable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [portable(v) for v in obj]
    if isinstance(obj, str):
        return obj.replace(str(PROJECT_ROOT), _ROOT_TOKEN)
    return obj


def editor_signature(editor_cfg: dict[str, Any], info: dict[str, Any], seed: int, profile: str) -> str:
    """Hash of everything that determines an editor's outputs: full config, provenance info, seed, weight profile."""
    from benchmark.hashing import stable_hash

    return stable_hash({"config": portable(editor_cfg), "info": portable(info), "seed": int(seed), "profile": profile})


# Settings that change speed, not scores: left out of the metric signature so shards run with different batch
# sizes, workers or devices merge into one set of scores.
NON_SEMANTIC_KEYS = frozenset({"batch_size", "chunk_size", "cache_size", "num_workers", "device"})


def _semantic(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _semantic(v) for k, v in obj.items() if k not in NON_SEMANTIC_KEYS}
    if isinstance(obj, list):
        return [_semantic(v) for v in obj]
    return obj


def metric_signature(metrics_cfg: dict[str, Any], infos: dict[str, Any]) -> str:
    from benchmark.hashing import stable_hash

    payload: dict[str, Any] = {"config": portable(_semantic(metrics_cfg)),
                               "versions": {k: i.version for k, i in infos.items()}}
    # What the config leaves to run time (HATIE's `segmenter.backend: auto` -> detectron2 or torchvision, and its
    # weights): shards resolved differently must never share a signature. Absent for metrics that resolve nothing.
    identity = {k: i.identity for k, i in infos.items() if getattr(i, "identity", None)}
    if identity:
        payload["identity"] = identity
    return stable_hash(payload)
