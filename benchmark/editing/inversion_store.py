"""A content-addressed store of per-source inversions, shared by queries, reruns, shards and sweeps.

An inversion (P2P's DDIM trajectory end and null-text embeddings, ...) depends only on the source image, its caption,
the model and the inversion's own settings, never on the target: the queries of one source, a rerun, another shard
and every sweep of an editing-only setting (P2P's tau, cross_replace_steps, mode, reweight) can share it.

- Key: a hash of everything that determines the inversion (`inversion_key`): the caller passes the image's pixel
  digest, the caption, the weights' provenance, scheduler, steps, guidance, every optimisation setting, dtype, device
  class and library versions. Nothing outside the key may change the stored tensors: inversions are computed one
  source at a time (benchmark.editing.source_inversions), never beside other sources, and the key says so
  (`BATCHING`), so inversions an earlier editmeter computed in batches (values that depended on the batch) are
  never read under the same key.
- Files: `<root>/<key[:2]>/<key>.safetensors` (never a pickle), written atomically (temp file, fsync, rename); the
  metadata repeats the key and the kind.
- Content digest: the metadata holds a sha256 of every tensor's name, dtype, shape and bytes (`tensor_digest`), so
  a file whose values were changed after writing (zeroed, rescaled, swapped) is caught although its key, header
  and shapes are right.
- Reading validates: the path holds a regular file (a directory, FIFO, socket or symlink there is quarantined like
  a corrupt file; a FIFO is never opened), safetensors' header (no code runs), the key in the metadata, the tensor names, shapes and
  dtypes the caller expects, the content digest, every value finite. A file that fails (a malformed header
  included) is moved to `quarantine/` with its reason and the inversion is computed again; the other sources of
  the batch are untouched.
- Claims: a worker claims a key before computing it (`benchmark.io.locking.Claims` in `<root>/claims/`), so two workers
  (shards, identical runs) never compute one source twice; the other waits for the claim to go and reads the file.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmark.io.fileio import not_a_regular_file
from benchmark.io.hashing import stable_hash

FORMAT = "editmeter-inversion/1"  # part of every key: inversions of one setting keep their key across file formats
# part of every key: how an inversion's batch was composed. Before it, the inversion pass inverted up to batch_size
# sources together, and a source's values depended on its batch-mates (x_T up to 2e-5, null-text embeddings 1e-3)
BATCHING = "one-source"
FILE_FORMAT = "editmeter-inversion-file/2"  # the file's metadata: /2 added the content digest
INVERSIONS_DIR = "inversions"  # under the results folder: every run there (sweeps, shards, reruns) shares it
log = logging.getLogger(__name__)


def inversion_key(kind: str, **parts: Any) -> str:
    """The store key of one inversion: a hash of its kind and of every part that determines it (JSON-able)."""
    return stable_hash({"format": FORMAT, "batching": BATCHING, "kind": kind, **parts}, length=40)


class BadInversionFile(ValueError):
    """A stored inversion failed validation; the message says why."""


class InversionStore:
    """Stored inversions under `root` (created on first write). See the module docstring for the layout."""

    def __init__(self, root: str | Path) -> None:
        """`root`: the store's folder, e.g. `<results>/inversions` (shared by every run under those results)."""
        from benchmark.io.locking import Claims

        self.root = Path(root)
        self.claims = Claims(self.root / "claims")

    def path(self, key: str) -> Path:
        """Where the inversion of `key` lives."""
        return self.root / key[:2] / f"{key}.safetensors"

    def get(self, key: str, kind: str, expected: Mapping[str, tuple[tuple[int, ...], str]]) -> dict[str, Any] | None:
        """The stored tensors of `key` (CPU), or None when absent or invalid (an invalid file is quarantined).

        `expected`: {tensor name: (shape, dtype name)}; a file with other names, shapes or dtypes is invalid."""
        path = self.path(key)
        try:
            irregular = not_a_regular_file(path)
            if irregular is None:
                return _read(path, key, kind, expected)
            reason = irregular
        except FileNotFoundError:
            return None
        except BadInversionFile as err:
            reason = str(err)
        from benchmark.io.score_cache import quarantine

        quarantine(path, reason, then="the inversion will be computed again")
        return None

    def missing(self, keys: Sequence[str], kind: str, expected: Mapping[str, tuple[tuple[int, ...], str]]
                ) -> list[str]:
        """The keys of `keys` without a stored file whose header (metadata, tensor names, shapes, dtypes) is right.
        Reads only the headers, not the values: a file whose values are bad is found when `get` reads it."""
        out = []
        for key in keys:
            path = self.path(key)
            try:
                ok = not_a_regular_file(path) is None and _header_ok(path, key, kind, expected)
            except (OSError, ValueError):  # _header_ok turns a malformed header into False; this is the read itself
                ok = False
            if not ok:
                out.append(key)
        return out

    def put(self, key: str, kind: str, tensors: Mapping[str, Any]) -> None:
        """Write `tensors` (moved to the CPU, contiguous) as the inversion of `key`, atomically."""
        from safetensors.torch import save

        from benchmark.io.fileio import atomic_write

        cpu = {k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}
        data = save(cpu, metadata={"format": FILE_FORMAT, "kind": kind, "key": key, "digest": tensor_digest(cpu)})
        atomic_write(self.path(key), lambda fh: fh.write(data))

    def get_or_compute(self, keys: Sequence[str], kind: str, expected: Mapping[str, tuple[tuple[int, ...], str]],
                       compute: Callable[[list[int]], list[dict[str, Any]]]) -> tuple[list[dict[str, Any]], int, int]:
        """The inversions of `keys` (in order; repeated keys are computed once): read from the store, or computed by
        `compute(indices into keys)` (one dict of tensors per index, in order), stored, and read back.

        Returns (tensors per key, computed, reused): `computed` counts the distinct keys computed here, `reused`
        the keys read from the store (a repeated key counts once per repeat). Keys another worker holds are waited
        for after this worker's own are done (so no claim is held while waiting), then read, or computed here
        when that worker stopped without writing them."""
        first: dict[str, int] = {}
        for i, k in enumerate(keys):
            first.setdefault(k, i)
        found: dict[str, dict[str, Any]] = {}
        pending = [k for k in first if not self._take(k, kind, expected, found)]
        computed = self._compute_claimed([k for k in pending if self.claims.try_claim([k])], first, kind, expected,
                                         compute, found)
        others = [k for k in pending if k not in found]
        for k in others:  # held by another worker: wait for it to finish (or die), then read what it wrote
            self.claims.wait([k])
        left = [k for k in others if not self._take(k, kind, expected, found)]
        computed += self._compute_claimed([k for k in left if self.claims.try_claim([k])], first, kind, expected,
                                          compute, found)
        missing = [k for k in first if k not in found]
        if missing:  # claimed again by a third worker meanwhile: compute here without storing
            for k, tensors in zip(missing, compute([first[k] for k in missing]), strict=True):
                found[k] = {n: t.detach().to("cpu") for n, t in tensors.items()}
            computed += len(missing)
        return [found[k] for k in keys], computed, len(keys) - computed

    def _compute_claimed(self, claimed: list[str], first: dict[str, int], kind: str,
                         expected: Mapping[str, tuple[tuple[int, ...], str]],
                         compute: Callable[[list[int]], list[dict[str, Any]]], found: dict[str, dict[str, Any]]) -> int:
        """Compute, store and read back the claimed keys not stored meanwhile; release the claims; how many."""
        try:
            todo = [k for k in claimed if not self._take(k, kind, expected, found)]  # another may have just finished
            if todo:
                for k, tensors in zip(todo, compute([first[k] for k in todo]), strict=True):
                    self.put(k, kind, tensors)
                    if not self._take(k, kind, expected, found):
                        raise BadInversionFile(f"{self.path(k)}: the inversion just written does not read back")
            return len(todo)
        finally:
            self.claims.release(claimed)

    def _take(self, key: str, kind: str, expected: Mapping[str, tuple[tuple[int, ...], str]],
              found: dict[str, dict[str, Any]]) -> bool:
        tensors = self.get(key, kind, expected)
        if tensors is not None:
            found[key] = tensors
        return tensors is not None


def tensor_digest(tensors: Mapping[str, Any]) -> str:
    """sha256 over the tensors in name order: each one's name, dtype, shape and raw bytes (CPU tensors)."""
    import hashlib

    import torch

    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        h.update(f"{name}|{str(t.dtype).removeprefix('torch.')}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())  # bytes, whatever the dtype (bf16 included)
    return h.hexdigest()


def _read(path: Path, key: str, kind: str, expected: Mapping[str, tuple[tuple[int, ...], str]]) -> dict[str, Any]:
    import torch
    from safetensors import SafetensorError
    from safetensors.torch import load

    try:
        raw = path.read_bytes()
        tensors = load(raw)
        meta = _metadata(raw)
    except (SafetensorError, OSError, ValueError) as err:  # json's errors are ValueErrors
        raise BadInversionFile(f"not a readable safetensors file ({err})") from None
    if meta.get("format") == FORMAT:
        raise BadInversionFile("written by an earlier editmeter, without a content digest")
    if meta.get("format") != FILE_FORMAT or meta.get("kind") != kind or meta.get("key") != key:
        raise BadInversionFile(f"metadata {meta} is not that of a {kind} inversion with key {key}")
    if set(tensors) != set(expected):
        raise BadInversionFile(f"tensors {sorted(tensors)}, expected {sorted(expected)}")
    for name, (shape, dtype) in expected.items():
        t = tensors[name]
        if tuple(t.shape) != tuple(shape) or str(t.dtype).removeprefix("torch.") != dtype:
            raise BadInversionFile(f"{name} is {tuple(t.shape)} {t.dtype}, expected {tuple(shape)} {dtype}")
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise BadInversionFile(f"{name} holds a NaN or an infinity")
    if meta.get("digest") != tensor_digest(tensors):
        raise BadInversionFile("its tensors do not match the content digest written with them (changed after "
                               "writing)")
    return tensors


_DTYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64", "I64": "int64"}


def _header_ok(path: Path, key: str, kind: str, expected: Mapping[str, tuple[tuple[int, ...], str]]) -> bool:
    """Whether a safetensors file's header says it holds `key`'s tensors as `expected` (its values unread)."""
    import json

    with open(path, "rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
        if not 0 < n <= 1 << 20:
            return False
        header = json.loads(fh.read(n))
    # any JSON can stand here: a header of the wrong shape is a bad file, not an error of the inversion pass
    if not isinstance(header, dict):
        return False
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict) or meta.get("format") != FILE_FORMAT or meta.get("kind") != kind \
            or meta.get("key") != key or set(header) != set(expected):
        return False
    entries = [header[k] for k in expected]
    if not all(isinstance(e, dict) and isinstance(e.get("shape"), list) for e in entries):
        return False
    return all(tuple(e["shape"]) == tuple(shape) and _DTYPES.get(e.get("dtype")) == dtype
               for e, (shape, dtype) in zip(entries, expected.values(), strict=True))


def _metadata(raw: bytes) -> dict[str, str]:
    """The `__metadata__` of a safetensors file's JSON header (already parsed once by `load`)."""
    import json

    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    meta = (header.get("__metadata__") if isinstance(header, dict) else None) or {}
    if not isinstance(meta, dict):
        raise ValueError(f"its __metadata__ is a {type(meta).__name__}, not an object")
    return {str(k): str(v) for k, v in meta.items()}
