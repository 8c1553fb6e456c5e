"""Concurrent workers on one run folder claim each query before working on it (issue 22.13): two identical runs
started at once edit and score every query exactly once, and their union equals a single run byte for byte; a
kill -9'd worker's claims are free at once, and the survivor finishes its queries."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pandas as pd
from conftest import HELPERS, ROOT, child_pythonpath

from benchmark.io.locking import Claims
from benchmark.metrics.pixel import PixelMetric
from benchmark.stages.edit import EDITS_LOG, claims_dir, run_edit_stage
from benchmark.stages.score import read_scores, run_score_stage


class _CountingSlow:
    """Identity with a delay per batch that records every query it edits (shared by all workers of a test)."""

    prompt_kind = "instruction"

    def __init__(self, seen: list[str], delay_s: float = 0.02) -> None:
        self.seen, self.delay_s = seen, delay_s

    def prepare(self, image):
        return None

    def check_prompts(self, queries):
        pass

    def edit_deferred(self, queries, images, *, seeds, prepared=None):
        time.sleep(self.delay_s)
        self.seen.extend(q.id for q in queries)
        return [lambda im=im: im.copy() for im in images]


def _together(*jobs):
    """Run the jobs in threads started at once; re-raise the first error."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(jobs))

    def go(job):
        barrier.wait()
        try:
            job()
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=go, args=(j,)) for j in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    if errors:
        raise errors[0]


def _edits(run_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((run_dir / "edits").glob("*.png"))}


def test_two_workers_at_once_edit_and_score_each_query_exactly_once(tmp_path, demo_qs):
    qs = demo_qs.subset(20)
    seen: list[str] = []
    metrics = {"l1": PixelMetric("l1"), "psnr": PixelMetric("psnr")}
    run = tmp_path / "both"
    stats = []

    def worker():
        st = run_edit_stage(qs, _CountingSlow(seen), run, seed=0, batch_size=3, progress=False)
        sc = run_score_stage(qs, run, metrics, "sig", progress=False)
        stats.append((st, sc))

    _together(worker, worker)
    # edited exactly once: the editor saw each query once (passengers aside: none, the slots split cleanly)
    assert sorted(seen) == sorted(q.id for q in qs.queries), Counter(seen).most_common(3)
    records = [json.loads(line) for line in (run / EDITS_LOG).read_text().splitlines()]
    assert Counter(r["query_id"] for r in records) == Counter({q.id: 1 for q in qs.queries})
    assert sum(st.computed for st, _ in stats) == 20 and sum(st.computed + st.by_others for st, _ in stats) == 40
    # scored exactly once: every stored row is unique, and the two workers' counts add up
    parts = list((run / "scores" / "sig").glob("part-*.parquet"))
    ids = [qid for p in parts for qid in pd.read_parquet(p, columns=["query_id"])["query_id"]]
    assert Counter(ids) == Counter({q.id: 1 for q in qs.queries})
    assert sorted(sc.computed for _, sc in stats) in ([0, 20], [20, 0]) or sum(sc.computed for _, sc in stats) == 20
    # the union equals one worker alone, byte for byte (edits) and value for value (scores)
    alone = tmp_path / "alone"
    run_edit_stage(qs, _CountingSlow([]), alone, seed=0, batch_size=3, progress=False)
    run_score_stage(qs, alone, metrics, "sig", progress=False)
    assert _edits(run) == _edits(alone) and len(_edits(run)) == 20
    cols = ["query_id", "status", "edit_sha256", "l1", "psnr"]
    a, b = (read_scores(r, "sig")[cols].sort_values("query_id").reset_index(drop=True) for r in (run, alone))
    pd.testing.assert_frame_equal(a, b)
    assert not list(claims_dir(run, "edit").glob("*.claim"))  # every claim was given back


def test_a_query_held_by_another_worker_is_waited_for_not_redone(tmp_path, demo_qs):
    """A worker that finds a slot claimed puts it off, and once the claim goes, takes up only what is left."""
    qs = demo_qs.subset(4)
    held = Claims(claims_dir(tmp_path, "edit"))
    assert held.try_claim([qs.queries[0].id])
    seen: list[str] = []
    done = threading.Event()

    def worker():
        run_edit_stage(qs, _CountingSlow(seen), tmp_path, seed=0, batch_size=2, progress=False)
        done.set()

    t = threading.Thread(target=worker)
    t.start()
    time.sleep(1.0)
    assert not done.is_set() and sorted(seen) == sorted(q.id for q in qs.queries[2:])  # the free slot only
    held.release([qs.queries[0].id])  # the holder gave up without editing (as a killed worker does)
    t.join(60)
    assert done.is_set() and sorted(seen) == sorted(q.id for q in qs.queries)


def test_claims_are_all_or_nothing_and_die_with_their_process(tmp_path):
    a, b = Claims(tmp_path), Claims(tmp_path)
    assert a.try_claim(["q1"]) and not b.try_claim(["q0", "q1"])
    assert b.try_claim(["q0"])  # b's failed attempt gave q0 back
    a.release(["q1"])
    b.release_all()
    assert not list(tmp_path.glob("*.claim"))
    # a process holding a claim is killed: its claim is free at once, although its file stays
    code = ("import sys, time; sys.path.insert(0, sys.argv[1]); from pathlib import Path;"
            "from benchmark.io.locking import Claims; c = Claims(Path(sys.argv[2])); assert c.try_claim(['q9']);"
            "print('held', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(ROOT), str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        assert not Claims(tmp_path).try_claim(["q9"])
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert (tmp_path / "q9.claim").is_file() and Claims(tmp_path).try_claim(["q9"])


def test_kill9_worker_while_another_runs_the_survivor_finishes_everything(tmp_path, demo_qs):
    """Two real runs at once; one is SIGKILLed mid edit stage. The survivor, already running, takes up the dead
    worker's queries and finishes the set: every query edited and scored once per record, none missing."""
    env = dict(os.environ, PYTHONPATH=child_pythonpath(HELPERS, ROOT), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "benchmark.commands.run", "editor=identity", "queryset=demo_mini", "profile=tiny",
           "metrics=basic", f"paths.results={tmp_path}", "progress=false", "batch_size=2", "stages=[edit,score]",
           "editor._target_=slow_editor.SlowIdentity", "+editor.delay_s=0.4"]
    victim = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        claims = lambda: list(tmp_path.glob("runs/*/*/claims/edit/*.claim"))  # noqa: E731
        end = time.time() + 120
        while not claims() and time.time() < end and victim.poll() is None:
            time.sleep(0.01)
        assert claims(), "the victim never claimed a query"
        survivor = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True)
        time.sleep(3.0)  # the survivor has started and found the victim's claims held
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait()
    out, _ = survivor.communicate(timeout=180)
    assert survivor.returncode == 0, out
    run = next(tmp_path.glob("runs/*/*"))
    records = [json.loads(line) for line in (run / EDITS_LOG).read_text().splitlines()]
    assert {r["query_id"] for r in records} == {p.stem for p in (run / "edits").glob("*.png")}
    assert len({p.stem for p in (run / "edits").glob("*.png")}) == 14
    assert Counter(r["query_id"] for r in records if not r.get("recovered")).most_common(1)[0][1] == 1
    rows = read_scores(run, next((run / "scores").iterdir()).name)
    assert len(rows) == 14 and (rows["status"] == "ok").all()


def test_an_edit_another_worker_is_still_logging_gets_one_record_not_a_recovered_one(tmp_path, demo_qs):
    """Two identical runs at once: worker A has written two PNGs of its batch and not yet logged them (it logs a
    batch after writing its PNGs, and holds the batch's claims until then) when worker B starts. B must not record
    them as `recovered` (A's own records follow: two records for one query), nor edit them; once A's claims go, the
    PNG A logged keeps its one record, and the PNG A left unlogged (killed between the write and the log) gets
    exactly one `recovered` record."""
    from dataclasses import asdict

    from PIL import Image

    from benchmark.io.fileio import append_jsonl
    from benchmark.io.types import EditRecord
    from benchmark.stages.edit import edit_path

    qs = demo_qs.subset(4)
    logged_by_a, lost_by_a = qs.queries[0].id, qs.queries[1].id
    a = Claims(claims_dir(tmp_path, "edit"))
    assert a.try_claim([logged_by_a, lost_by_a])
    for qid in (logged_by_a, lost_by_a):
        edit_path(tmp_path, qid).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (8, 8), (9, 9, 9)).save(edit_path(tmp_path, qid))
    seen: list[str] = []
    done = threading.Event()

    def worker_b():
        run_edit_stage(qs, _CountingSlow(seen), tmp_path, seed=0, batch_size=2, progress=False)
        done.set()

    def ids() -> Counter:
        log = tmp_path / EDITS_LOG
        return Counter(json.loads(line)["query_id"] for line in log.read_text().splitlines()) if log.is_file() \
            else Counter()

    t = threading.Thread(target=worker_b)
    t.start()
    free = {q.id for q in qs.queries[2:]}
    end = time.time() + 60
    while not free <= set(ids()) and time.time() < end:
        time.sleep(0.02)
    time.sleep(0.3)
    # B edited its own slot and waits: nothing logged for A's two queries while A holds them
    assert not done.is_set() and set(ids()) == free and sorted(seen) == sorted(free)
    append_jsonl(tmp_path / EDITS_LOG, [asdict(EditRecord(logged_by_a, "ok", 0, seconds=1.0, run_id="A"))])
    a.release([logged_by_a, lost_by_a])
    t.join(60)
    assert done.is_set()
    records = [json.loads(line) for line in (tmp_path / EDITS_LOG).read_text().splitlines()]
    assert Counter(r["query_id"] for r in records) == Counter({q.id: 1 for q in qs.queries})
    by_id = {r["query_id"]: r for r in records}
    assert by_id[logged_by_a]["run_id"] == "A" and not by_id[logged_by_a]["recovered"]
    assert by_id[lost_by_a]["recovered"] and by_id[lost_by_a]["run_id"] != "A"
    assert sorted(seen) == sorted(free)  # neither of A's queries was edited again
    assert not list(claims_dir(tmp_path, "edit").glob("*.claim"))
