"""The .npy header reader of cached segmentations: numpy's answer for every header numpy writes, a refusal for
anything else, and no `ast` (CPython 3.11's AST construction is not thread-safe; loader threads read these files
together)."""

from __future__ import annotations

import ast
import io
import threading

import numpy as np
import pytest

from benchmark.io.npy_header import read_npy_header

DTYPES = [bool, np.uint8, np.int64, np.float64, np.float32, ">i4", "<U32", "<U64", "S5", np.complex64]
SHAPES = [(), (0,), (5,), (0, 4), (3, 7, 2), (1, 1, 1, 1)]
VERSIONS = [(1, 0), (2, 0), (3, 0)]


def _npy(arr: np.ndarray, version: tuple[int, int]) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr, version=version)
    return buf.getvalue()


def _numpy_reads(data: bytes) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    fh = io.BytesIO(data)
    fmt = np.lib.format
    version = fmt.read_magic(fh)
    # numpy's public readers (a version 3 header is version 2's, utf-8 encoded: ASCII for every plain dtype)
    shape, fortran, dtype = (fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0)(fh)
    return shape, fortran, dtype, fh.tell()


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_header_numpy_writes_reads_as_numpy_reads_it(dtype, version):
    for shape in SHAPES:
        for order in "CF":
            arr = np.zeros(shape, dtype=dtype, order=order)
            if arr.ndim > 1 and order == "F":
                arr = np.asfortranarray(np.arange(arr.size).reshape(shape).astype(dtype))
            data = _npy(arr, version)
            fh = io.BytesIO(data)
            got = read_npy_header(fh)
            want = _numpy_reads(data)
            assert (*got, fh.tell()) == want, (dtype, shape, order, version)
            # positioned at the data: the bytes that follow are the array's
            rest = np.frombuffer(fh.read(), dtype=got[2], count=arr.size).reshape(got[0], order="F" if got[1] else "C")
            assert np.array_equal(rest, arr)


def _header(text: str, version: int = 1) -> bytes:
    body = text.encode("latin1")
    return b"\x93NUMPY" + bytes([version, 0]) + (len(body).to_bytes(2, "little") if version == 1 else
                                                    len(body).to_bytes(4, "little")) + body


REFUSED = {
    "bad magic": b"\x93NUMPX\x01\x00" + b"\x10\x00" + b"{}" * 8,
    "no header length": b"\x93NUMPY\x01\x00\x10",
    "truncated header": _header("{'descr': '<i8', 'fortran_order': False, 'shape': (), }\n")[:-5],
    "version 4": _header("{'descr': '<i8', 'fortran_order': False, 'shape': (), }\n", version=4),
    "minor version": b"\x93NUMPY\x01\x01" + _header("{'descr': '<i8', 'fortran_order': False, 'shape': (), }\n")[8:],
    "structured dtype": _header("{'descr': [('a', '<i4')], 'fortran_order': False, 'shape': (2,), }\n"),
    "extra key": _header("{'descr': '<i8', 'fortran_order': False, 'shape': (), 'x': 1, }\n"),
    "missing key": _header("{'descr': '<i8', 'shape': (), }\n"),
    "keys out of order": _header("{'shape': (), 'descr': '<i8', 'fortran_order': False, }\n"),
    "shape not a tuple": _header("{'descr': '<i8', 'fortran_order': False, 'shape': (2), }\n"),
    "negative size": _header("{'descr': '<i8', 'fortran_order': False, 'shape': (-2,), }\n"),
    "size beyond int64": _header("{'descr': '<i8', 'fortran_order': False, 'shape': (" + "9" * 30 + ",), }\n"),
    "expression": _header("{'descr': '<i8', 'fortran_order': False, 'shape': (2+3,), }\n"),
    "unknown dtype": _header("{'descr': '<q9', 'fortran_order': False, 'shape': (), }\n"),
    "no newline": _header("{'descr': '<i8', 'fortran_order': False, 'shape': (), }"),
    "huge header": b"\x93NUMPY\x02\x00" + (10**8).to_bytes(4, "little") + b" " * 100,
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_anything_else_is_refused(name):
    with pytest.raises(ValueError):
        read_npy_header(io.BytesIO(REFUSED[name]))


def test_object_dtype_is_read_for_the_caller_to_refuse():
    """An object array's header is well formed; the segmentation reader refuses it by its dtype (hasobject)."""
    shape, _, dtype = read_npy_header(io.BytesIO(_header("{'descr': '|O', 'fortran_order': False, 'shape': (2,), }\n")))
    assert shape == (2,) and dtype.hasobject


def test_cached_segmentations_are_read_without_ast(tmp_path, monkeypatch):
    """numpy's header parser goes through ast.literal_eval, whose AST construction is not thread-safe in CPython
    3.11 ("SystemError: AST constructor recursion depth mismatch" from two loader threads): the segmentation reader
    must not use it."""
    import torch

    from benchmark.models.segmenter import Detection, bbox_from_mask, load_segmentation, save_segmentation

    m = torch.zeros(64, 64, dtype=torch.bool)
    m[10:20, 30:40] = True
    box = bbox_from_mask(m.numpy())
    seg = {"cup": Detection("cup", 0.5, box, m.numpy())}
    save_segmentation(seg, tmp_path / "s.npz", edit_sha256="ab" * 32, segmenter="sig", shape=(64, 64))

    def no_ast(*_a, **_k):
        raise AssertionError("the segmentation reader parsed a header with ast")

    monkeypatch.setattr(ast, "literal_eval", no_ast)
    monkeypatch.setattr(ast, "parse", no_ast)
    errors: list[BaseException] = []

    def read_many() -> None:
        try:
            for _ in range(50):
                back = load_segmentation(tmp_path / "s.npz", edit_sha256="ab" * 32, segmenter="sig", shape=(64, 64))
                assert back["cup"].bbox == box and np.array_equal(back["cup"].mask, m.numpy())
        except BaseException as err:  # noqa: BLE001 - reported below, from the main thread
            errors.append(err)

    threads = [threading.Thread(target=read_many) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    monkeypatch.undo()  # pytest's own failure report parses source with ast
    assert not errors, errors[0]
