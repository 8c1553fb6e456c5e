"""Resume after an interrupted or spoiled inversion equals an uninterrupted run, byte for byte (issue 59).

An inversion used to depend on the sources inverted beside it (batched kernels sum in another order): a run killed
between the two writes of one inversion batch, or a stored inversion quarantined and recomputed, gave PNGs one
level off. Inversions are now computed one source at a time. Every editor that stores inversions
(`SourceInversions`: configs/editor/*.yaml with reuse_inversions) is checked here."""

import os
import shutil
from pathlib import Path

import pytest
import torch

from benchmark.editing.inversion_store import InversionStore, inversion_key
from benchmark.io.locking import Claims

pytestmark = pytest.mark.usefixtures("single_thread_torch")

# two sources in one inversion batch: the first 3 queries of the first demo scene and 1 of the second
ARGS = ("queryset=demo_per_source_3", "limit=4", "batch_size=4", "metrics=basic")
TABLES = ("leaderboard.csv", "leaderboard_by_type.csv", "leaderboard_by_class.csv")
# every editor whose inversions the store keeps; p2p (null-text: the one whose batch changed its values most) runs
# in the default suite, the others (20-60 s each on a shared 2-core machine) with --run-slow
EDITORS = ["p2p", *(pytest.param(e, marks=pytest.mark.slow)
                    for e in ("diffedit", "ledits", "rf_solver", "fireflow", "rf_inversion"))]


class Killed(BaseException):
    """Stands for SIGKILL: no `except Exception` of the harness catches it."""


def _run(results: Path, editor: str):
    from conftest import run_demo

    return run_demo(results, editor, *ARGS)


def _snapshot(results: Path) -> dict[str, bytes]:
    """What a user reads: the leaderboards (less `git_sha`, which a commit made meanwhile would change) and every
    edit PNG."""
    import pandas as pd

    out = {n: pd.read_csv(results / n, dtype=str, keep_default_na=False).drop(columns="git_sha").to_csv().encode()
           for n in TABLES}
    out |= {f"edits/{p.name}": p.read_bytes() for p in results.glob("runs/*/*/edits/*.png")}
    return out


def _stored(results: Path) -> list[Path]:
    return sorted(p for p in (results / "inversions").glob("??/*.safetensors"))


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """editor -> (results folder of its uninterrupted run, snapshot), run once per module."""
    done: dict[str, tuple[Path, dict[str, bytes]]] = {}

    def get(editor: str) -> tuple[Path, dict[str, bytes]]:
        if editor not in done:
            root = tmp_path_factory.mktemp(f"clean-{editor}")
            summary = _run(root, editor)
            assert summary["edit"].work["inversions_computed"] == 2, summary["edit"].work
            snap = _snapshot(root)
            assert sum(k.startswith("edits/") for k in snap) == 4
            done[editor] = (root, snap)
        return done[editor]

    return get


@pytest.mark.parametrize("editor", EDITORS)
def test_killed_between_the_two_inversion_writes_of_a_batch_then_resumed_equals_an_uninterrupted_run(
        tmp_path, monkeypatch, clean, editor):
    """The inversion pass hands both sources over in one batch; the run dies after the first is stored. The resume
    inverts only the other one, and its PNGs and tables are byte-equal to the uninterrupted run's."""
    real_put, puts = InversionStore.put, []

    def put_then_die(self, key, kind, tensors):
        if puts:
            raise Killed
        real_put(self, key, kind, tensors)
        puts.append(key)

    monkeypatch.setattr(InversionStore, "put", put_then_die)
    with pytest.raises(Killed):
        _run(tmp_path, editor)
    monkeypatch.undo()
    assert len(_stored(tmp_path)) == 1 and not list(tmp_path.glob("runs/*/*/edits/*.png"))
    resumed = _run(tmp_path, editor)["edit"]
    assert (resumed.work["inversions_computed"], resumed.failed_total) == (1, 0)
    _, snapshot = clean(editor)
    assert _snapshot(tmp_path) == snapshot


def _zeroed(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    n = int.from_bytes(raw[:8], "little")
    raw[8 + n:] = bytes(len(raw) - 8 - n)  # the header (shapes, key, digest) stays valid
    path.write_bytes(bytes(raw))


def _bad_header(path: Path) -> None:
    raw = path.read_bytes()
    path.write_bytes((1 << 40).to_bytes(8, "little") + raw[8:])


def _truncated(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _directory(path: Path) -> None:
    path.unlink()
    path.mkdir()
    (path / "inside").write_text("a folder where the inversion file should be\n")


def _symlink(path: Path) -> None:
    # the link points to the right bytes: a link is still refused (the store only ever writes regular files)
    elsewhere = path.parent.parent.parent / "elsewhere.safetensors"
    os.replace(path, elsewhere)
    path.symlink_to(elsewhere)


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)  # opening it for reading would block the run forever


PLANTS = {"zeroed tensors under a valid header": _zeroed, "bad header": _bad_header, "truncated": _truncated,
          "directory": _directory, "symlink": _symlink, "fifo": _fifo}
FAST_PLANTS = ("zeroed tensors under a valid header", "directory")  # the rest: ~6 s each, with --run-slow (the
# store-level test below covers every non-regular kind fast)


@pytest.mark.parametrize("plant", [p if p in FAST_PLANTS else pytest.param(p, marks=pytest.mark.slow)
                                   for p in PLANTS])
def test_a_planted_inversion_is_quarantined_and_recomputed_once_with_the_uninterrupted_runs_pngs(
        tmp_path, clean, plant):
    """The uninterrupted run's store, one of its two inversions spoiled: a fresh run over it quarantines that path
    (whatever is there: a file, a folder, a link, a FIFO), inverts that source once for all its queries, fails
    nothing, and its PNGs and tables equal the uninterrupted run's."""
    root, snapshot = clean("p2p")
    shutil.copytree(root / "inversions", tmp_path / "inversions", symlinks=True,
                    ignore=shutil.ignore_patterns("claims", "quarantine"))
    spoiled = _stored(tmp_path)[0]
    PLANTS[plant](spoiled)
    with pytest.warns(UserWarning, match="computed again"):
        stats = _run(tmp_path, "p2p")["edit"]
    assert (stats.work["inversions_computed"], stats.failed_total, stats.computed) == (1, 0, 4)
    assert spoiled.is_file() and not spoiled.is_symlink()
    assert list((spoiled.parent / "quarantine").glob("*.reason.txt"))
    assert _snapshot(tmp_path) == snapshot


@pytest.mark.parametrize("kind", ["directory", "symlink to a good file", "dangling symlink", "fifo", "socket"])
def test_whatever_is_not_a_regular_file_at_an_inversion_path_is_quarantined_and_computed_once(tmp_path, kind):
    """The store's read refuses anything but a regular file (a FIFO is never opened: reading one blocks), moves it
    to quarantine/ with its reason, and the key is computed once for all the queries that ask for it."""
    import socket

    store = InversionStore(tmp_path)
    store.put("a", "k", {"x": torch.ones(2)})
    path = store.path("a")
    good = tmp_path / "good.safetensors"
    os.replace(path, good)
    if kind == "directory":
        path.mkdir()
    elif kind == "symlink to a good file":
        path.symlink_to(good)
    elif kind == "dangling symlink":
        path.symlink_to(tmp_path / "nothing")
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()
    expected = {"x": ((2,), "float32")}
    assert store.missing(["a"], "k", expected) == ["a"]
    calls = []
    with pytest.warns(UserWarning, match="not a regular file"):
        out, computed, reused = store.get_or_compute(["a", "a", "a"], "k", expected,
                                                     lambda idx: calls.append(idx) or [{"x": torch.ones(2)}])
    assert calls == [[0]] and (computed, reused) == (1, 2) and torch.equal(out[2]["x"], torch.ones(2))
    assert path.is_file() and not path.is_symlink()
    reasons = list((path.parent / "quarantine").glob("*.reason.txt"))
    assert len(reasons) == 1 and "not a regular file" in reasons[0].read_text()


def test_the_key_says_inversions_are_made_one_source_at_a_time():
    """Stored inversions of an editmeter that inverted sources in batches must not be read as this one's: the key
    has a part for the batching, so the same parts give another key than the old scheme's."""
    from benchmark.editing import inversion_store
    from benchmark.io.hashing import stable_hash

    old = stable_hash({"format": inversion_store.FORMAT, "kind": "k", "a": 1}, length=40)
    assert inversion_key("k", a=1) != old
    assert inversion_store.BATCHING in {"one-source"}


def test_an_editor_computes_each_inversion_alone_whatever_it_is_handed(tmp_path):
    """`_compute_each` hands the editor's `_compute_inversions` one source at a time, for the store's misses and
    without a store alike, so no inversion is ever computed beside another."""
    from benchmark.editing.source_inversions import SourceInversions

    class Probe(SourceInversions):
        def __init__(self):
            self.work, self.seen = {}, []
            self._init_source_inversions(False)

        def _compute_inversions(self, items):
            self.seen.append(len(items))
            return [{"x": torch.full((1,), float(i))} for i in items]

    probe = Probe()
    out = probe._inversions([3, 5, 7])
    assert probe.seen == [1, 1, 1] and [float(o["x"]) for o in out] == [3.0, 5.0, 7.0]


# --- claim files a killed worker left ------------------------------------------------------------------------------

def test_stale_claims_are_removed_and_a_live_workers_claim_is_kept(tmp_path):
    mine, other = Claims(tmp_path), Claims(tmp_path)
    assert other.try_claim(["live"])
    (tmp_path / "dead.claim").write_text("somehost 999999999\n")  # a killed worker's: no lock on it
    assert mine.remove_stale() == ["dead"]
    assert not (tmp_path / "dead.claim").exists() and (tmp_path / "live.claim").exists()
    assert not mine.try_claim(["live"])  # still held: removing stale files never frees a live claim
    other.release(["live"])
    assert mine.try_claim(["live"])
    mine.release_all()
    assert Claims(tmp_path / "absent").remove_stale() == []


def test_a_resumed_run_removes_the_claim_files_of_a_killed_one(tmp_path, monkeypatch, clean):
    """A kill leaves its claim files (edit stage and inversion store); the resume removes them and still matches
    the uninterrupted run."""
    _, snapshot = clean("p2p")
    real_put = InversionStore.put

    def put_then_die(self, key, kind, tensors):
        real_put(self, key, kind, tensors)
        (self.root / "claims").mkdir(parents=True, exist_ok=True)
        for stale in ("0" * 40, "f" * 40):  # as a SIGKILL leaves them: a file, no lock, nobody to remove it
            (self.root / "claims" / f"{stale}.claim").write_text("somehost 999999999\n")
        raise Killed

    monkeypatch.setattr(InversionStore, "put", put_then_die)
    with pytest.raises(Killed):
        _run(tmp_path, "p2p")
    monkeypatch.undo()
    edit_claims = next(tmp_path.glob("runs/*/*")) / "claims" / "edit"
    edit_claims.mkdir(parents=True, exist_ok=True)
    (edit_claims / "some-query.claim").write_text("somehost 999999999\n")
    _run(tmp_path, "p2p")
    assert not list(tmp_path.rglob("*.claim"))
    assert _snapshot(tmp_path) == snapshot


# --- failure summaries -----------------------------------------------------------------------------------------------

def test_a_failure_summary_groups_one_cause_whatever_its_temporary_names_and_addresses(tmp_path):
    """One cause hit by three queries: each message names another temporary file and object address, the summary
    counts it once, and the records keep the full messages."""
    import json

    from conftest import ROOT

    from benchmark.io.console import reason_group
    from benchmark.querysets.io import load_queryset
    from benchmark.stages.edit import EDITS_LOG, _failures

    qs = load_queryset(ROOT / "datasets" / "demo", name="demo_first_3", first=3)
    messages = [f"IsADirectoryError: [Errno 21] Is a directory: '/r/inversions/ab/.ab12.safetensors.node-7-{pid}."
                f"{rnd}.tmp' -> '/r/inversions/ab/ab12.safetensors' (<Thing object at 0x7f{pid}a2b3c4>)"
                for pid, rnd in (("101", "k2j_x9ab"), ("202", "zz81qq0p"), ("303", "a1b2c3d4"))]
    (tmp_path / EDITS_LOG).write_text("".join(
        json.dumps({"query_id": q.id, "status": "failed", "seed": 0, "reason": m, "error_type": "IsADirectoryError"})
        + "\n" for q, m in zip(qs.queries, messages, strict=True)))
    total, reasons = _failures(qs, tmp_path)
    assert total == 3 and len(reasons) == 1 and reasons[0][1] == 3
    assert "<temporary file>" in reasons[0][0] and "0x…" in reasons[0][0] and "ab12.safetensors'" in reasons[0][0]
    assert len({reason_group(m) for m in messages}) == 1 and len(set(messages)) == 3
    # what is not a temporary name or an address stays: two causes stay two
    assert reason_group("ValueError: shape (1, 4)") != reason_group("ValueError: shape (1, 8)")
    assert reason_group("tmpfile.txt missing") == "tmpfile.txt missing"
