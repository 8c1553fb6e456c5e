"""A restricted unpickler for third-party pickle files (the released HATIE query set and masks).

A pickle can run any callable it names, so loading one from a stranger is running their code. The released HATIE
files are pickles, so editmeter reads them only through `restricted_load`, in two passes:

1. A static scan of the opcode stream (`pickletools.genops`, nothing is built): the file size, the number of
   opcodes, and the length of every string / bytes argument are capped, and opcodes that build arbitrary objects
   (INST, OBJ, NEWOBJ, EXT*, persistent ids, out-of-band buffers) are refused.
2. `RestrictedUnpickler`, which resolves only the globals the release's files need, each through a checking
   wrapper. The query pickles (`{image_id: [query dict, ...]}` of str / int / list, written by Python 3's default
   protocol) need no global at all; the editable-object mask pickle holds numpy arrays and numpy integers, which
   need numpy's array / dtype / scalar rebuilders. The wrappers accept only plain numeric dtypes (bool, int, uint,
   float), only numpy's own canonical call shapes, and only data whose length matches the declared shape, so no
   call can allocate more than the file carries (`builtins.bytearray(3_000_000_000)` and `numpy.ndarray((10**10,))`
   are both impossible). `_codecs.encode(text, "latin1")`, how protocol 0-2 spell bytes, is allowed for latin-1
   only (output length = input length).

Anything else is refused with `UnsafePickleError` naming the file and the reason. Every pickle load in this
repository goes through this module (a project hook checks it).
"""

from __future__ import annotations

import io
import os
import pickle
import pickletools
from pathlib import Path
from typing import Any

import numpy as np

# Defaults sized for the release: the query pickles are tens of MB; the mask pickle holds ~50k 512 x 512 masks.
MAX_FILE_BYTES = 64 * 2**30
MAX_OPCODES = 200_000_000
MAX_ITEM_BYTES = 64 * 2**20  # one string / bytes object (a 512 x 512 float64 mask is 2 MiB)
# Opcodes that build objects of arbitrary classes or pull data from outside the stream.
_REFUSED_OPCODES = frozenset({"INST", "OBJ", "NEWOBJ", "NEWOBJ_EX", "EXT1", "EXT2", "EXT4", "PERSID", "BINPERSID",
                              "NEXT_BUFFER", "READONLY_BUFFER"})
_PLAIN_KINDS = "biuf"  # bool, signed / unsigned int, float: what masks, boxes and ids are made of
_MAX_NDIM = 8


class UnsafePickleError(pickle.UnpicklingError):
    """A pickle referenced a global outside the allow-list, or broke a size limit; the message names the file."""


def _plain_dtype(dt: Any, where: str) -> np.dtype:
    if not isinstance(dt, np.dtype) or dt.kind not in _PLAIN_KINDS or dt.fields is not None or \
            dt.subdtype is not None or dt.itemsize not in (1, 2, 4, 8):
        raise UnsafePickleError(f"{where}: refused numpy dtype {dt!r} (only plain bool / int / float)")
    return dt


def _shape(shape: Any, where: str) -> tuple[int, ...]:
    if not isinstance(shape, tuple) or len(shape) > _MAX_NDIM or \
            not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise UnsafePickleError(f"{where}: refused array shape {shape!r}")
    return shape


def _nbytes(shape: tuple[int, ...], dt: np.dtype) -> int:
    n = dt.itemsize
    for d in shape:
        n *= d
    return n


class _CheckedArray(np.ndarray):
    """What `numpy._reconstruct` yields here: an empty array whose `__setstate__` (the pickle's BUILD) checks the
    dtype and that the data's length equals the declared shape before numpy fills it."""

    def __reduce__(self) -> Any:  # re-pickles as a plain ndarray
        return np.asarray(self).__reduce__()

    def __setstate__(self, state: Any) -> None:
        where = f"{getattr(self, '_source', '<stream>')}: numpy array"
        if not isinstance(state, tuple) or len(state) not in (4, 5):
            raise UnsafePickleError(f"{where}: unexpected state")
        shape, dt, _fortran, raw = state[-4:]
        shape, dt = _shape(shape, where), _plain_dtype(dt, where)
        if not isinstance(raw, bytes | bytearray) or len(raw) != _nbytes(shape, dt):
            raise UnsafePickleError(f"{where}: data length does not match shape {shape} of {dt}")
        super().__setstate__(state)


def _wrappers(source: str) -> dict[tuple[str, str], Any]:
    """(module, name) -> the checking stand-in the unpickler hands out for that global."""
    where = source

    def ndarray_token(*args: Any, **kwargs: Any) -> Any:  # `numpy.ndarray` may only be _reconstruct's argument
        raise UnsafePickleError(f"{where}: refused a call of numpy.ndarray{args!r} (allocates without data)")

    def reconstruct(subtype: Any, shape: Any, typecode: Any) -> Any:
        if subtype is not ndarray_token or shape != (0,) or typecode not in (b"b", "b"):
            raise UnsafePickleError(f"{where}: refused numpy._reconstruct{(subtype, shape, typecode)!r}")
        arr = np.ndarray.__new__(_CheckedArray, (0,), "b")
        arr._source = source  # named in errors
        return arr

    def dtype(spec: Any, align: Any = False, copy: Any = True) -> np.dtype:
        if not isinstance(spec, str) or len(spec) > 4 or not isinstance(align, bool) or not isinstance(copy, bool):
            raise UnsafePickleError(f"{where}: refused numpy.dtype{(spec, align, copy)!r}")
        try:
            dt = np.dtype(spec, align, copy)
        except TypeError as err:
            raise UnsafePickleError(f"{where}: refused numpy.dtype({spec!r}): {err}") from None
        return _plain_dtype(dt, where)

    def scalar(dt: Any, data: Any = None) -> Any:
        dt = _plain_dtype(dt, where)
        if not isinstance(data, bytes) or len(data) != dt.itemsize:
            raise UnsafePickleError(f"{where}: refused numpy scalar data for {dt}")
        return np.frombuffer(data, dtype=dt)[0].copy()

    def frombuffer(buf: Any, dt: Any, shape: Any, order: Any) -> np.ndarray:
        dt, shape = _plain_dtype(dt, where), _shape(shape, where)
        if not isinstance(buf, bytes | bytearray) or len(buf) != _nbytes(shape, dt) or order not in ("C", "F"):
            raise UnsafePickleError(f"{where}: refused numpy._frombuffer: data length does not match {shape} {dt}")
        return np.frombuffer(buf, dtype=dt).reshape(shape, order=order).copy()

    def encode(text: Any, encoding: Any = "utf-8") -> bytes:
        if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
            raise UnsafePickleError(f"{where}: refused _codecs.encode with encoding {encoding!r}")
        return text.encode("latin-1")

    out: dict[tuple[str, str], Any] = {("numpy", "ndarray"): ndarray_token, ("numpy", "dtype"): dtype,
                                       ("_codecs", "encode"): encode}
    for core in ("numpy.core", "numpy._core"):  # numpy 2 renamed `core` to `_core`; pickles carry either
        out[(f"{core}.multiarray", "_reconstruct")] = reconstruct
        out[(f"{core}.multiarray", "scalar")] = scalar
        out[(f"{core}.numeric", "_frombuffer")] = frombuffer
    return out


ALLOWED_GLOBALS: frozenset[tuple[str, str]] = frozenset(_wrappers("<doc>"))


class RestrictedUnpickler(pickle.Unpickler):
    """`pickle.Unpickler` that resolves only `ALLOWED_GLOBALS`, each to a checking wrapper (see the module doc)."""

    def __init__(self, file: Any, *, source: str = "<stream>") -> None:
        super().__init__(file)
        self._source = source
        self._allowed = _wrappers(source)

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self._allowed:
            return self._allowed[(module, name)]
        raise UnsafePickleError(
            f"{self._source}: refused to load global {module}.{name}: this restricted unpickler accepts only plain "
            "containers, strings, numbers and numpy arrays of plain dtypes. The file is not a plain-data pickle "
            "(or was tampered with); do not load it with the standard pickle module"
        )

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafePickleError(f"{self._source}: refused persistent id {pid!r} (not plain data)")


def scan(data: Any, source: str, *, max_opcodes: int = MAX_OPCODES, max_item_bytes: int = MAX_ITEM_BYTES) -> None:
    """Static checks of a pickle stream before anything is built (see the module doc, pass 1)."""
    count = 0
    try:
        for op, arg, _ in pickletools.genops(data):
            count += 1
            if count > max_opcodes:
                raise UnsafePickleError(f"{source}: more than {max_opcodes} pickle opcodes (limit max_opcodes)")
            if op.name in _REFUSED_OPCODES:
                raise UnsafePickleError(f"{source}: refused opcode {op.name} (builds arbitrary objects)")
            if isinstance(arg, str | bytes | bytearray) and len(arg) > max_item_bytes:
                raise UnsafePickleError(f"{source}: a {len(arg)}-byte item exceeds max_item_bytes={max_item_bytes}")
    except UnsafePickleError:
        raise
    except (ValueError, EOFError, UnicodeDecodeError) as err:
        raise UnsafePickleError(f"{source}: not a well-formed pickle ({type(err).__name__}: {err})") from None


def restricted_load(path: str | os.PathLike[str], *, max_bytes: int = MAX_FILE_BYTES, max_opcodes: int = MAX_OPCODES,
                    max_item_bytes: int = MAX_ITEM_BYTES) -> Any:
    """Load a plain-data pickle file: size limits, a static scan, then `RestrictedUnpickler`."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: pickle file not found")
    size = path.stat().st_size
    if size > max_bytes:
        raise UnsafePickleError(f"{path}: {size} bytes exceeds the limit of {max_bytes} (max_bytes)")
    with path.open("rb") as fh:
        scan(fh, str(path), max_opcodes=max_opcodes, max_item_bytes=max_item_bytes)
        fh.seek(0)
        return RestrictedUnpickler(fh, source=str(path)).load()  # restricted: allow-listed globals only


def restricted_loads(data: bytes, source: str = "<bytes>", *, max_opcodes: int = MAX_OPCODES,
                     max_item_bytes: int = MAX_ITEM_BYTES) -> Any:
    """Restricted counterpart of `pickle.loads` for in-memory data (same scan and allow-list)."""
    scan(io.BytesIO(data), source, max_opcodes=max_opcodes, max_item_bytes=max_item_bytes)
    return RestrictedUnpickler(io.BytesIO(data), source=source).load()  # restricted: allow-listed globals only
