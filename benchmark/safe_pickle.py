"""A restricted unpickler for third-party pickle files (the released HATIE query set and masks).

A pickle can run any callable it names, so loading one from a stranger is running their code. The released HATIE
files are pickles, so editmeter reads them only through `RestrictedUnpickler`: plain containers, strings and numbers
need no globals at all, and the only globals it resolves are the few numpy functions that rebuild arrays, dtypes
and scalars. Anything else is refused with `UnsafePickleError` naming the global. Every pickle load in this
repository goes through this module (a project hook checks it).
"""

from __future__ import annotations

import io
import os
import pickle
from pathlib import Path
from typing import Any

# (module, name) pairs a plain-data pickle may reference. numpy moved `core` to `_core` in 2.0; pickles written
# with either spelling name the same functions.
_NUMPY_GLOBALS: frozenset[tuple[str, str]] = frozenset(
    (mod, name)
    for mod in ("numpy.core.multiarray", "numpy._core.multiarray")
    for name in ("_reconstruct", "scalar")
) | frozenset({
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("numpy.core.numeric", "_frombuffer"),
    ("numpy._core.numeric", "_frombuffer"),
})
# Builtins that only rebuild plain values (protocol 0-1 pickles spell containers and a few types this way).
_BUILTIN_GLOBALS: frozenset[tuple[str, str]] = frozenset(
    (mod, name)
    for mod in ("builtins", "__builtin__")
    for name in ("set", "frozenset", "complex", "bytearray", "slice", "range")
) | frozenset({
    # protocol 0-2 pickles spell a bytes object as _codecs.encode(text, "latin1"): a pure string-to-bytes call
    ("_codecs", "encode"),
})
ALLOWED_GLOBALS: frozenset[tuple[str, str]] = _NUMPY_GLOBALS | _BUILTIN_GLOBALS


class UnsafePickleError(pickle.UnpicklingError):
    """A pickle referenced a global outside the allow-list; the message names it and the file."""


class RestrictedUnpickler(pickle.Unpickler):
    """`pickle.Unpickler` that resolves only the globals in `ALLOWED_GLOBALS` (plain data and numpy arrays)."""

    def __init__(self, file: Any, *, source: str = "<stream>") -> None:
        super().__init__(file)
        self._source = source

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in ALLOWED_GLOBALS:
            if module.startswith("numpy"):
                import numpy  # noqa: F401  (the module must be importable for the lookup below)

            return super().find_class(module, name)
        raise UnsafePickleError(
            f"{self._source}: refused to load global {module}.{name}: this restricted unpickler accepts only plain "
            "containers, strings, numbers and numpy arrays. The file is not a plain-data pickle (or was tampered "
            "with); do not load it with the standard pickle module"
        )

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafePickleError(f"{self._source}: refused persistent id {pid!r} (not plain data)")


def restricted_load(path: str | os.PathLike[str]) -> Any:
    """Load a plain-data pickle file through `RestrictedUnpickler` (restricted: no arbitrary globals)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: pickle file not found")
    with path.open("rb") as fh:
        return RestrictedUnpickler(fh, source=str(path)).load()  # restricted: allow-listed globals only


def restricted_loads(data: bytes, source: str = "<bytes>") -> Any:
    """Restricted counterpart of `pickle.loads` for in-memory data."""
    return RestrictedUnpickler(io.BytesIO(data), source=source).load()  # restricted: allow-listed globals only
