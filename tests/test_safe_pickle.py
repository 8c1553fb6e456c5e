"""The restricted unpickler: plain data and numpy arrays load; other globals, allocation bombs and oversized
inputs are refused before anything is built."""

import os
import pickle
import re
import tracemalloc

import numpy as np
import pytest

from benchmark.io.safe_pickle import ALLOWED_GLOBALS, UnsafePickleError, restricted_load, restricted_loads


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_plain_data_and_numpy_round_trip(protocol):
    data = {"q": [{"id": 1, "type": "obj_rep", "original": ["3143517", "person"], "x": 1.5, "ok": True}],
            "mask": np.eye(4, dtype=bool), "u8": np.arange(6, dtype=np.uint8).reshape(2, 3), "s": np.float32(2.5),
            "f": np.ones((3, 2), np.float64, order="F"), "bbox": [np.int64(3), np.int32(-4)], "t": (1, None),
            "b": b"\x00\xff"}
    out = restricted_loads(pickle.dumps(data, protocol=protocol))
    assert out["q"] == data["q"] and out["t"] == data["t"] and out["b"] == data["b"]
    assert out["mask"].dtype == bool and np.array_equal(out["mask"], data["mask"])
    assert np.array_equal(out["u8"], data["u8"]) and out["s"] == np.float32(2.5) and np.array_equal(out["f"], data["f"])
    assert out["bbox"] == [3, -4] and out["bbox"][0].dtype == np.int64
    dumped = pickle.dumps(out["mask"])  # loaded data re-pickles as plain arrays, readable by the restricted loader
    assert b"safe_pickle" not in dumped and np.array_equal(restricted_loads(dumped), data["mask"])


def test_allow_list_is_numpy_rebuilders_and_latin1_only():
    modules = {m for m, _ in ALLOWED_GLOBALS}
    assert modules <= {"numpy", "numpy.core.multiarray", "numpy._core.multiarray", "numpy.core.numeric",
                       "numpy._core.numeric", "_codecs"}
    assert ("builtins", "bytearray") not in ALLOWED_GLOBALS and ("builtins", "set") not in ALLOWED_GLOBALS


class _Reduce:
    def __init__(self, fn, args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return (self.fn, self.args)


class _Custom:
    pass


RECONSTRUCT = np._core.multiarray._reconstruct


@pytest.mark.parametrize(("payload", "reason"), [
    (_Reduce(os.system, ("echo this must never run",)), "refused to load global .*system"),
    (_Custom(), "refused opcode NEWOBJ"),  # an instance of any class: refused by the static scan
    ({"f": eval}, "builtin.*eval"),
    (_Reduce(bytearray, (3_000_000_000,)), "builtin.*bytearray"),  # 3 GB from a 60-byte file
    ({1, 2}, "builtin.*set"),  # protocol 2: not something the release's files contain
    (_Reduce(np.ndarray, ((10**10,),)), r"call of numpy.ndarray"),  # np.empty of 10 GB
    (_Reduce(RECONSTRUCT, (np.ndarray, (10**10,), b"b")), r"refused numpy._reconstruct"),
    (np.array([1, "a"], dtype=object), "refused numpy dtype"),
    (np.array(["abc"]), "refused numpy dtype"),
    (np.zeros(2, dtype=[("a", "i4"), ("b", "f4")]), "refused numpy"),
    (_Reduce(__import__("_codecs").encode, ("x" * 100, "zlib")), "refused _codecs.encode"),
])
def test_malicious_or_foreign_pickles_are_refused(tmp_path, payload, reason):
    path = tmp_path / "evil.pkl"
    path.write_bytes(pickle.dumps(payload, protocol=2))
    tracemalloc.start()
    try:
        with pytest.raises(UnsafePickleError, match=rf"{re.escape(str(path))}: .*{reason}"):
            restricted_load(path)
        assert tracemalloc.get_traced_memory()[1] < 50 * 2**20  # nothing big was allocated on the way
    finally:
        tracemalloc.stop()


def test_array_state_whose_data_does_not_match_its_shape_is_refused():
    good = pickle.dumps(np.zeros((4, 4), np.uint8), protocol=4)
    bad = good.replace(b"K\x04K\x04\x86", b"K\x04K\x08\x86")  # claim 4 x 8 with 16 bytes of data
    assert bad != good
    with pytest.raises(UnsafePickleError, match="data length does not match"):
        restricted_loads(bad)


def test_hand_written_reduce_and_object_opcodes_are_refused():
    # GLOBAL 'subprocess check_output' + REDUCE, written by hand: no class of ours involved.
    with pytest.raises(UnsafePickleError, match="subprocess.check_output"):
        restricted_loads(b"csubprocess\ncheck_output\n(S'true'\ntR.")
    with pytest.raises(UnsafePickleError, match="refused opcode INST"):  # INST builds any class by name
        restricted_loads(b"(S'true'\nisubprocess\ncheck_output\n.")
    with pytest.raises(UnsafePickleError, match="not a well-formed pickle"):
        restricted_loads(b"\x80\x04\x95")


def test_size_limits(tmp_path):
    path = tmp_path / "big.pkl"
    path.write_bytes(pickle.dumps(["x" * 1000] * 3))
    with pytest.raises(UnsafePickleError, match="exceeds the limit"):
        restricted_load(path, max_bytes=100)
    with pytest.raises(UnsafePickleError, match="max_item_bytes"):
        restricted_load(path, max_item_bytes=999)
    with pytest.raises(UnsafePickleError, match="max_opcodes"):
        restricted_load(path, max_opcodes=5)
    assert restricted_load(path) == ["x" * 1000] * 3
