"""A benchmark's prompt file, fetched at a pinned commit of its authors' repository and checked by its checksum.

The judged protocols (metrics=gedit, metrics=imgedit) judge with their authors' prompts, which are not ours to
redistribute: `make data` fetches the file at a pinned commit, and each suite reads it through `read_pinned`, which
refuses a moving branch, a missing file and any file whose bytes are not the pinned ones. The commit and checksum
are part of the metric signature.
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections.abc import Iterable
from pathlib import Path

from benchmark.io.errors import RunError

COMMIT = re.compile(r"[0-9a-f]{40}")
SHA256 = re.compile(r"[0-9a-f]{64}")


class ProtocolError(RunError, ValueError):
    """The prompt file is missing, altered or not in the expected form; the message names the file and the fix (a
    RunError: the entry points print it without a traceback)."""


def check_identity(commit: str, sha256: str, repo: str) -> None:
    """The protocol's identity: a 40-hex commit of `repo` (never a moving branch) and a 64-hex sha256."""
    if not isinstance(commit, str) or not COMMIT.fullmatch(commit):
        raise ProtocolError(f"prompts_commit must be a 40-hex commit of {repo}, not {commit!r}")
    if not isinstance(sha256, str) or not SHA256.fullmatch(sha256):
        raise ProtocolError(f"prompts_sha256 must be 64 lowercase hex digits, not {sha256!r}")


def read_pinned(path: str | Path, sha256: str, commit: str, *, benchmark: str, repo: str, repo_path: str,
                data_name: str, option: str) -> bytes:
    """The bytes of `path` (`repo_path` of `repo` at `commit`, fetched by `make data NAME=<data_name>`), refused
    unless they have `sha256`. `benchmark` names the protocol and `option` the setting that moves the file, in the
    messages."""
    check_identity(commit, sha256, repo)
    path = Path(path)
    if not path.is_file():
        raise ProtocolError(f"{benchmark}'s prompt file {path} is missing: fetch it with `make data NAME={data_name}` "
                            f"({repo_path} of {repo} at {commit}), or set {option}")
    raw = path.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    if digest != sha256:
        sha_option = option.rsplit(".", 1)[0] + ".prompts_sha256"
        raise ProtocolError(
            f"{path}: sha256 {digest} (the file), expected {sha256} (the configured {sha_option}; {repo_path} at "
            f"{commit}). Either the file is not the pinned protocol: delete it and fetch it again with `make data "
            f"NAME={data_name}`; or the configured checksum is wrong (a typo, a truncated paste): check the file "
            f"against {repo_path} of {repo} at {commit}, then set {sha_option}={digest}")
    return raw


def string_assignments(raw: bytes, path: str | Path) -> dict[str, str]:
    """The module-level `name = "..."` assignments of a Python source file's bytes, read with `ast`: the authors'
    prompt modules are data here, never imported or run."""
    try:
        tree = ast.parse(raw.decode("utf-8"), filename=str(path))
    except (UnicodeDecodeError, SyntaxError, ValueError) as err:
        raise ProtocolError(f"{path}: not a readable Python file of string assignments ({err})") from None
    out: dict[str, str] = {}
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            out[node.targets[0].id] = node.value.value
    return out


def read_pinned_strings(path: str | Path, sha256: str, commit: str, names: Iterable[str], *, benchmark: str, repo: str,
                        repo_path: str, data_name: str, option: str) -> dict[str, str]:
    """The string assignments of a pinned Python prompt file (`read_pinned`, then `string_assignments`), refused
    unless every one of `names` is there."""
    raw = read_pinned(path, sha256, commit, benchmark=benchmark, repo=repo, repo_path=repo_path, data_name=data_name,
                      option=option)
    strings = string_assignments(raw, path)
    missing = [n for n in dict.fromkeys(names) if n not in strings]
    if missing:
        raise ProtocolError(f"{path}: no string assignment of {', '.join(missing)} ({repo_path} of {repo})")
    return strings
