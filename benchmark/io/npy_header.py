"""The header of a .npy array (a member of an .npz archive), read without numpy's header parser.

numpy parses the header's dict with `ast.literal_eval`, and CPython 3.11's AST construction is not safe to run on two
threads at once: two loader threads reading cached segmentations together failed, about once in a thousand reads,
with "SystemError: AST constructor recursion depth mismatch". This reader accepts exactly the header numpy writes
for a plain array (a dtype string, the order flag, a tuple of sizes) and refuses anything else with ValueError; a
cache file it refuses is recomputed, never trusted.
"""

from __future__ import annotations

import re
import struct
from typing import IO

import numpy as np

MAGIC = b"\x93NUMPY"
# the longest header a plain array of at most 32 dimensions can have (numpy's own limit is 10,000 bytes)
MAX_HEADER_BYTES = 10_000
# numpy writes the keys sorted, each value's repr, ", " after each, then spaces to its alignment and one newline
_HEADER = re.compile(r"\{'descr': '([<>|=][A-Za-z]\d*)', 'fortran_order': (True|False), "
                     r"'shape': \((|\d{1,18},|\d{1,18}(?:, \d{1,18})+)\), \} *\n")
# major version -> (bytes of the header length, text encoding)
_VERSIONS = {1: (2, "latin1"), 2: (4, "latin1"), 3: (4, "utf8")}


def read_npy_header(fh: IO[bytes]) -> tuple[tuple[int, ...], bool, np.dtype]:
    """(shape, fortran order, dtype) of the array whose .npy bytes `fh` is at the start of; leaves `fh` at the
    array's data. Raises ValueError for anything but a header numpy writes for a plain (unstructured) dtype."""
    magic = fh.read(len(MAGIC) + 2)
    if len(magic) != len(MAGIC) + 2 or magic[: len(MAGIC)] != MAGIC:
        raise ValueError("not a .npy array (bad magic string)")
    major, minor = magic[-2], magic[-1]
    if major not in _VERSIONS or minor != 0:
        raise ValueError(f".npy format version {major}.{minor} is not one numpy writes")
    width, encoding = _VERSIONS[major]
    raw_len = fh.read(width)
    if len(raw_len) != width:
        raise ValueError(".npy header is truncated")
    (length,) = struct.unpack("<H" if width == 2 else "<I", raw_len)
    if length > MAX_HEADER_BYTES:
        raise ValueError(f".npy header of {length} bytes is longer than any plain array's")
    raw = fh.read(length)
    if len(raw) != length:
        raise ValueError(".npy header is truncated")
    match = _HEADER.fullmatch(raw.decode(encoding, errors="replace"))
    if match is None:
        raise ValueError(f"not the .npy header of a plain array: {raw[:120]!r}")
    descr, fortran, sizes = match.groups()
    shape = tuple(int(s) for s in sizes.split(",") if s.strip())
    try:
        dtype = np.dtype(descr)
    except TypeError as err:
        raise ValueError(f".npy header names an unknown dtype {descr!r}") from err
    return shape, fortran == "True", dtype
