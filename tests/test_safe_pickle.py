"""The restricted unpickler: plain data and numpy arrays load, anything that names another global is refused."""

import os
import pickle

import numpy as np
import pytest

from benchmark.safe_pickle import UnsafePickleError, restricted_load, restricted_loads


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_plain_data_and_numpy_round_trip(protocol):
    data = {"q": [{"id": 1, "type": "obj_rep", "original": ["3143517", "person"], "x": 1.5, "ok": True}],
            "mask": np.eye(4, dtype=bool), "u8": np.arange(6, dtype=np.uint8).reshape(2, 3), "s": np.float32(2.5),
            "t": (1, None), "set": {1, 2}, "b": b"\x00\xff"}
    out = restricted_loads(pickle.dumps(data, protocol=protocol))
    assert out["q"] == data["q"] and out["t"] == data["t"] and out["set"] == data["set"] and out["b"] == data["b"]
    assert out["mask"].dtype == bool and np.array_equal(out["mask"], data["mask"])
    assert np.array_equal(out["u8"], data["u8"]) and out["s"] == np.float32(2.5)


class _RunsCode:
    def __reduce__(self):
        return (os.system, ("echo this must never run",))


class _Custom:
    pass


@pytest.mark.parametrize(("payload", "name"), [
    (_RunsCode(), "system"),
    (_Custom(), "_Custom"),
    (pickle.dumps(eval) and {"f": eval}, "builtins.eval"),
])
def test_malicious_or_foreign_globals_are_refused(tmp_path, payload, name):
    path = tmp_path / "evil.pkl"
    path.write_bytes(pickle.dumps(payload))
    with pytest.raises(UnsafePickleError, match=rf"{path}: refused to load global .*{name}"):
        restricted_load(path)


def test_hand_written_reduce_opcode_is_refused():
    # GLOBAL 'subprocess check_output' + REDUCE, written by hand: no class of ours involved.
    evil = b"csubprocess\ncheck_output\n(S'true'\ntR."
    with pytest.raises(UnsafePickleError, match="subprocess.check_output"):
        restricted_loads(evil)
