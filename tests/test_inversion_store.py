"""The inversion store: content-addressed safetensors files, validated on read, claimed while computed; P2P shares
one inversion per source across its queries, reruns and sweeps, with PNGs byte-identical to inverting per query."""

import threading
import time

import pytest
import torch

from benchmark.editing.inversion_store import FILE_FORMAT, InversionStore, inversion_key

pytestmark = pytest.mark.usefixtures("single_thread_torch")

KIND = "test-kind"
EXPECTED = {"x": ((1, 2), "float32"), "e": ((3,), "float32")}


def tensors(v: float):
    return {"x": torch.full((1, 2), v), "e": torch.arange(3, dtype=torch.float32) + v}


def test_key_covers_every_part_and_kind():
    base = dict(image="abc", source_caption="a cat", steps=50)
    k = inversion_key(KIND, **base)
    assert k == inversion_key(KIND, **dict(reversed(list(base.items()))))  # order of parts does not matter
    assert len({k, inversion_key("other", **base), inversion_key(KIND, **{**base, "steps": 49}),
                inversion_key(KIND, **{**base, "image": "abd"})}) == 4


def test_round_trip_is_exact_and_repeated_keys_are_computed_once(tmp_path):
    store = InversionStore(tmp_path)
    calls = []

    def compute(idx):
        calls.append(idx)
        return [tensors(float(i) + 0.1) for i in idx]

    out, computed, reused = store.get_or_compute(["a", "a", "b"], KIND, EXPECTED, compute)
    assert calls == [[0, 2]] and (computed, reused) == (2, 1)
    assert torch.equal(out[0]["x"], tensors(0.1)["x"]) and torch.equal(out[1]["e"], out[0]["e"])
    assert torch.equal(out[2]["e"], tensors(2.1)["e"])
    again, computed, reused = store.get_or_compute(["b", "a"], KIND, EXPECTED, compute)
    assert calls == [[0, 2]] and (computed, reused) == (0, 2)
    assert torch.equal(again[0]["e"], out[2]["e"])
    assert not list(tmp_path.rglob("*.tmp"))  # written atomically, nothing left over


@pytest.mark.parametrize("spoil", ["truncate", "pickle", "other key", "nan", "shape", "extra tensor", "dtype"])
def test_a_bad_file_is_quarantined_and_recomputed(tmp_path, spoil):
    import pickle

    from safetensors.torch import save

    store = InversionStore(tmp_path)
    store.put("a", KIND, tensors(1.0))
    path = store.path("a")
    if spoil == "truncate":
        path.write_bytes(path.read_bytes()[:-5])
    elif spoil == "pickle":
        path.write_bytes(pickle.dumps({"x": 1}))
    elif spoil == "other key":
        store.put("b", KIND, tensors(1.0))
        path.write_bytes(store.path("b").read_bytes())
    elif spoil == "nan":
        store.put("a", KIND, {"x": torch.tensor([[1.0, float("nan")]]), "e": torch.zeros(3)})
    elif spoil == "shape":
        store.put("a", KIND, {"x": torch.zeros(2, 1), "e": torch.zeros(3)})
    elif spoil == "dtype":  # the right names and shapes, another dtype: caught by the full read too
        store.put("a", KIND, {"x": torch.zeros(1, 2, dtype=torch.float64), "e": torch.zeros(3)})
    else:
        path.write_bytes(save({**tensors(1.0), "z": torch.zeros(1)}, metadata={"format": FILE_FORMAT,
                                                                            "kind": KIND, "key": "a"}))
    with pytest.warns(UserWarning, match="computed again"):
        assert store.get("a", KIND, EXPECTED) is None
    assert not path.exists() and list((path.parent / "quarantine").glob("a.safetensors*.reason.txt"))
    out, computed, _ = store.get_or_compute(["a"], KIND, EXPECTED, lambda idx: [tensors(7.0)])
    assert computed == 1 and torch.equal(out[0]["x"], tensors(7.0)["x"])


def test_missing_reads_headers_only(tmp_path):
    """The inversion pass asks which sources lack a file with the right header; values are checked when read."""
    store = InversionStore(tmp_path)
    store.put("a", KIND, tensors(1.0))
    store.put("b", KIND, {"x": torch.zeros(2, 1), "e": torch.zeros(3)})  # a wrong shape
    store.put("n", KIND, {"x": torch.tensor([[1.0, float("nan")]]), "e": torch.zeros(3)})  # a bad value
    store.put("k", "another kind", tensors(1.0))
    assert store.missing(["a", "b", "c", "n", "k"], KIND, EXPECTED) == ["b", "c", "k"]


def test_a_key_another_worker_holds_is_waited_for_and_read(tmp_path):
    """Two workers never compute one source twice: the second waits for the first's claim, then reads its file."""
    store, other = InversionStore(tmp_path), InversionStore(tmp_path)
    assert other.claims.try_claim(["a"])  # the other worker is computing "a"
    result = {}

    def second_worker():
        result["out"] = store.get_or_compute(["a", "b"], KIND, EXPECTED, lambda idx: [tensors(5.0) for _ in idx])

    t = threading.Thread(target=second_worker)
    t.start()
    time.sleep(0.5)
    assert t.is_alive()  # "b" is done, "a" is waited for
    other.put("a", KIND, tensors(9.0))
    other.claims.release(["a"])
    t.join(timeout=30)
    out, computed, reused = result["out"]
    assert (computed, reused) == (1, 1) and torch.equal(out[0]["x"], tensors(9.0)["x"])


def test_a_key_whose_holder_died_without_writing_is_computed(tmp_path):
    store, other = InversionStore(tmp_path), InversionStore(tmp_path)
    assert other.claims.try_claim(["a"])
    threading.Timer(0.3, lambda: other.claims.release(["a"])).start()  # it stops without writing
    out, computed, _ = store.get_or_compute(["a"], KIND, EXPECTED, lambda idx: [tensors(3.0)])
    assert computed == 1 and torch.equal(out[0]["x"], tensors(3.0)["x"]) and store.path("a").is_file()


# --- P2P through the harness ---------------------------------------------------------------------------------------

def _pngs(summary_dir):
    return {p.name: p.read_bytes() for p in sorted(summary_dir.glob("runs/*/*/edits/*.png"))}


def _run(results, *extra):
    from conftest import run_demo

    return run_demo(results, "p2p", "queryset=demo_mini", "limit=3", "stages=[edit]", *extra)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_p2p_with_shared_inversions_equals_one_inversion_per_query_byte_for_byte(tmp_path, dtype):
    """The first 3 queries of one demo scene share one source: inverted once (not 3 times), and every PNG is the one each
    query's own inversion gives (batch size 1, so both ways run the same kernels)."""
    args = ("batch_size=1", f"editor.dtype={dtype}")
    own = _run(tmp_path / "own", "editor.reuse_inversions=false", *args)["edit"]
    shared = _run(tmp_path / "shared", *args)["edit"]
    assert own.work["inversions_computed"] == 3 and own.work["inversions_reused"] == 0
    assert (shared.work["inversions_computed"], shared.work["inversions_reused"]) == (1, 3)
    a, b = _pngs(tmp_path / "own"), _pngs(tmp_path / "shared")
    assert len(a) == 3 and a == b
    assert len(list((tmp_path / "shared" / "inversions").rglob("*.safetensors"))) == 1


def test_a_sweep_of_editing_settings_inverts_nothing_again(tmp_path):
    import os

    # a killed writer's leftover in the store (an old temp file of a process that no longer runs) is cleared
    leftover = tmp_path / "inversions" / "ab" / ".abcd.safetensors.nohost-999999999.abcdefgh.tmp"
    leftover.parent.mkdir(parents=True)
    leftover.write_bytes(b"half an inversion")
    os.utime(leftover, (1e9, 1e9))
    first = _run(tmp_path, "batch_size=4")["edit"]
    assert not leftover.exists()
    assert first.work["inversions_computed"] == 1
    for tau in (0.5, 0.8):
        sweep = _run(tmp_path, "batch_size=4", f"editor.self_replace_steps={tau}")["edit"]
        assert sweep.computed == 3 and sweep.work["inversions_computed"] == 0
        assert sweep.work["inversions_reused"] == 3
    changed = _run(tmp_path, "batch_size=4", "editor.null_text_lr=0.02")["edit"]  # an inversion setting
    assert changed.work["inversions_computed"] == 1


KEY_SCRIPT = """
import sys
from hydra.utils import instantiate
from benchmark.plan.config import compose
from benchmark.editing.base import Item
from benchmark.io.imageio import load_rgb
from benchmark.querysets.io import load_queryset
qs = load_queryset(sys.argv[1])
q = qs.queries[0]
for name in sys.argv[2:]:
    cfg, _ = compose(["editor=" + name, "profile=tiny"])
    editor = instantiate(cfg.editor)
    item = Item(q, editor.prepare(load_rgb(qs.path(q.image))), 0)
    before = editor.inversion_key(item)
    if name == "ledits":
        editor.edit([q], [load_rgb(qs.path(q.image))], seeds=[0])  # invert() changes the pipeline's scheduler config
    assert editor.inversion_key(item) == before, name + ": the key changed after an edit"
    print(name, before)
"""


def test_an_inversion_has_one_key_in_every_process():
    """Keys must not depend on the process: diffusers' scheduler configs carry a list built from a set, whose order
    follows the string hash seed (a sweep's second process found nothing the first stored). p2p and LEDITS++ in one
    process per hash seed (a process start and the imports cost more than the editors)."""
    import os
    import subprocess
    import sys

    from conftest import ROOT

    keys = []
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "HF_HUB_OFFLINE": "1"}
        out = subprocess.run([sys.executable, "-c", KEY_SCRIPT, str(ROOT / "datasets" / "demo"), "p2p", "ledits"],
                             env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        keys.append(out.stdout.strip().splitlines()[-2:])
    assert [k.split()[0] for k in keys[0]] == ["p2p", "ledits"] and keys[0] == keys[1], keys


@pytest.mark.slow  # the default suite kills a run inside its inversion stage in tests/test_inversion_resume.py
def test_kill9_while_inverting_loses_nothing_and_trusts_nothing_half_written(tmp_path):
    """SIGKILL a real p2p run while it computes its one inversion (its claim is held), rerun it: the rerun computes
    the inversion once more, nothing half-written is read, and the PNGs equal an uninterrupted run's."""
    import os
    import signal
    import subprocess
    import sys

    from conftest import ROOT, child_pythonpath

    def cmd(results):
        return [sys.executable, "-m", "benchmark.commands.run", "editor=p2p", "queryset=demo_mini", "limit=3", "profile=tiny",
                "stages=[edit]", "batch_size=1", f"paths.results={results}", "progress=false"]

    env = dict(os.environ, PYTHONPATH=child_pythonpath(ROOT), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    killed, clean = tmp_path / "killed", tmp_path / "clean"
    proc = subprocess.Popen(cmd(killed), cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    claims = killed / "inversions" / "claims"
    deadline = time.time() + 180
    while time.time() < deadline and proc.poll() is None and not list(claims.glob("*.claim")):
        time.sleep(0.005)
    assert proc.poll() is None, "the run ended before its inversion was claimed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # almost always killed before its file was renamed in (a loaded machine may poll late: then it is whole)
    stored = len(list((killed / "inversions").rglob("*.safetensors")))
    again = subprocess.run(cmd(killed), cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"inversions: {1 - stored} computed, 3 reused" in again.stdout
    assert not list((killed / "inversions").rglob("*.tmp"))
    assert subprocess.run(cmd(clean), cwd=ROOT, env=env, capture_output=True, timeout=600).returncode == 0
    assert _pngs(killed) == _pngs(clean) and len(_pngs(clean)) == 3


def _respoiled(path, change) -> bytes:
    """The file at `path` with its JSON header replaced by `change(header)` (the tensor bytes kept)."""
    import json

    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    text = json.dumps(change(json.loads(raw[8:8 + n]))).encode()
    return len(text).to_bytes(8, "little") + text + raw[8 + n:]


def test_tampered_values_under_the_right_key_and_header_are_quarantined(tmp_path):
    """Zeroed tensors under the right key, names, shapes and dtypes: the header check passes them (it reads no
    values), the content digest written with the file does not, so the inversion is computed again."""
    store = InversionStore(tmp_path)
    store.put("a", KIND, tensors(1.0))
    path = store.path("a")
    raw = bytearray(path.read_bytes())
    n = int.from_bytes(raw[:8], "little")
    raw[8 + n:] = bytes(len(raw) - 8 - n)
    path.write_bytes(bytes(raw))
    assert store.missing(["a"], KIND, EXPECTED) == []  # the header is right
    with pytest.warns(UserWarning, match="content digest"):
        assert store.get("a", KIND, EXPECTED) is None
    out, computed, reused = store.get_or_compute(["a"], KIND, EXPECTED, lambda idx: [tensors(1.0)])
    assert (computed, reused) == (1, 0) and torch.equal(out[0]["x"], tensors(1.0)["x"])


def test_a_file_written_without_a_digest_is_recomputed(tmp_path):
    """Files of the first format (no digest) cannot prove their content: they are computed again, said so."""
    from safetensors.torch import save

    store = InversionStore(tmp_path)
    store.path("a").parent.mkdir(parents=True)
    store.path("a").write_bytes(save(tensors(1.0), metadata={"format": "editmeter-inversion/1", "kind": KIND,
                                                             "key": "a"}))
    assert store.missing(["a"], KIND, EXPECTED) == ["a"]
    with pytest.warns(UserWarning, match="without a content digest"):
        assert store.get("a", KIND, EXPECTED) is None


def test_a_header_check_refuses_the_right_shape_in_the_wrong_dtype(tmp_path):
    store = InversionStore(tmp_path)
    store.put("a", KIND, {"x": torch.zeros(1, 2, dtype=torch.float16), "e": torch.zeros(3)})
    store.put("b", KIND, tensors(1.0))
    assert store.missing(["a", "b"], KIND, EXPECTED) == ["a"]


@pytest.mark.parametrize("change", [
    lambda h: h | {"__metadata__": "a string"},
    lambda h: h | {"x": 7},
    lambda h: h | {"x": {"dtype": "F32", "shape": 3, "data_offsets": h["x"]["data_offsets"]}},
    lambda h: [h],
], ids=["metadata a string", "tensor entry an int", "shape an int", "header a list"])
def test_a_malformed_header_is_a_bad_file_and_its_neighbours_are_untouched(tmp_path, change):
    """A header of the wrong JSON shape makes the header check say 'missing' (it raised AttributeError past the
    check, and the inversion pass left the batch's good sources to be inverted again); the full read quarantines
    it; the good file beside it is read as it is."""
    store = InversionStore(tmp_path)
    store.put("a", KIND, tensors(1.0))
    store.put("b", KIND, tensors(2.0))
    path = store.path("a")
    path.write_bytes(_respoiled(path, change))
    assert store.missing(["a", "b"], KIND, EXPECTED) == ["a"]
    with pytest.warns(UserWarning, match="computed again"):
        assert store.get("a", KIND, EXPECTED) is None
    calls = []
    out, computed, reused = store.get_or_compute(["a", "b"], KIND, EXPECTED,
                                                 lambda idx: calls.append(idx) or [tensors(5.0) for _ in idx])
    assert calls == [[0]] and (computed, reused) == (1, 1) and torch.equal(out[1]["x"], tensors(2.0)["x"])
