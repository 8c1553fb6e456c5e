"""Provenance carried by every result row: code version, library versions, device."""

from __future__ import annotations

import functools
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parents[2]
_LIBRARIES = ("torch", "torchvision", "numpy", "pillow", "hydra-core", "diffusers", "transformers", "open_clip_torch")


@functools.lru_cache(maxsize=1)
def git_sha() -> str:
    """HEAD commit, suffixed `-dirty` when tracked files differ from it; `unknown` outside a git checkout."""
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


@functools.lru_cache(maxsize=1)
def library_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    from benchmark import __version__

    out["editmeter"] = __version__
    for name in _LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def device_name(device: str = "cpu") -> str:
    if device.startswith("cuda"):
        import torch

        return f"{device} ({torch.cuda.get_device_name(torch.device(device))})"
    return f"cpu ({platform.machine()})"


def provenance(device: str = "cpu") -> dict[str, Any]:
    return {"git_sha": git_sha(), "versions": library_versions(), "device": device_name(device)}
