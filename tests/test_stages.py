"""Edit and score stages: failures are data, reruns skip finished work, nothing written is lost."""

import dataclasses
import json
import shutil

import numpy as np
from conftest import ROOT
from PIL import Image

from benchmark.editing.editor import Editor
from benchmark.querysets.io import load_queryset, write_queries
from benchmark.stages.edit import EDITS_LOG, edit_path, latest_records, run_edit_stage
from benchmark.stages.score import read_scores, run_score_stage


class Scripted(Editor):
    """Identity editor that misbehaves on chosen queries, and counts what it is asked to edit."""

    prompt_kind = "instruction"

    def __init__(self, behaviour=None):
        self.behaviour = behaviour or {}
        self.calls: list[str] = []

    def edit(self, queries, images, *, seeds):
        self.calls += [q.id for q in queries]
        out = []
        for q, im in zip(queries, images, strict=True):
            kind = self.behaviour.get(q.id)
            if kind == "raise":
                raise RuntimeError(f"boom on {q.id}")
            if kind == "black":
                out.append(Image.new("RGB", im.size))
            elif kind == "small":
                out.append(im.resize((8, 8)))
            elif kind == "gray":
                out.append(im.convert("L"))
            else:
                out.append(im.copy())
        return out

    def info(self):
        return {"name": "scripted"}


def small_set(tmp_path, n=10):
    """A copy of the first `n` demo queries (and their files) that tests may damage."""
    src = load_queryset(ROOT / "datasets" / "demo")
    root = tmp_path / "qs"
    shutil.copytree(ROOT / "datasets" / "demo", root)
    write_queries(root / "queries.jsonl", src.queries[:n])
    return load_queryset(root)


def test_failures_are_recorded_and_the_run_goes_on(tmp_path):
    qs = small_set(tmp_path)
    ids = [q.id for q in qs]
    bad = {ids[1]: "raise", ids[3]: "black", ids[5]: "small", ids[6]: "gray"}
    editor = Scripted(bad)
    stats = run_edit_stage(qs, editor, tmp_path / "run", seed=0, batch_size=4, progress=False)
    assert (stats.computed, stats.failed) == (10, 4)
    recs = latest_records(tmp_path / "run")
    assert recs[ids[1]]["reason"].startswith("RuntimeError: boom on")
    assert "all-black" in recs[ids[3]]["reason"]
    assert "8x8" in recs[ids[5]]["reason"]
    assert "mode L" in recs[ids[6]]["reason"]
    for q in qs:
        assert edit_path(tmp_path / "run", q.id).is_file() == (q.id not in bad)
    assert not list((tmp_path / "run" / "edits").glob("*.tmp")), "no temp files left behind"


class Deferred(Scripted):
    """Scripted, through the two-phase interface: `prepare` runs ahead, finishers run on the stage's writer."""

    def __init__(self, behaviour=None):
        super().__init__(behaviour)
        self.prepare_threads: set[str] = set()
        self.prepared: list[tuple[int, int]] = []

    def prepare(self, image):
        import threading

        self.prepare_threads.add(threading.current_thread().name)
        return image.size

    def edit_deferred(self, queries, images, *, seeds, prepared=None):
        self.prepared += list(prepared)
        out = []
        for q, im in zip(queries, self.edit(queries, images, seeds=seeds), strict=True):
            if self.behaviour.get(q.id) == "finish-raise":
                out.append(lambda q=q: (_ for _ in ()).throw(RuntimeError(f"cannot finish {q.id}")))
            else:
                out.append(lambda im=im: im)
        return out


def test_deferred_finishing_failures_are_per_query_and_the_log_keeps_query_order(tmp_path):
    qs = small_set(tmp_path)
    ids = [q.id for q in qs]
    # the last batch (ids 8, 9) is finished on two threads: a failure there must be recorded like any other
    bad = {ids[1]: "finish-raise", ids[4]: "raise", ids[9]: "finish-raise", ids[8]: "black"}
    editor = Deferred(bad)
    stats = run_edit_stage(qs, editor, tmp_path / "run", seed=0, batch_size=4, progress=False)
    assert (stats.computed, stats.failed) == (10, 4)
    recs = latest_records(tmp_path / "run")
    assert recs[ids[1]]["reason"] == f"RuntimeError: cannot finish {ids[1]}"
    assert recs[ids[9]]["reason"] == f"RuntimeError: cannot finish {ids[9]}"
    assert recs[ids[4]]["reason"].startswith("RuntimeError: boom on") and "all-black" in recs[ids[8]]["reason"]
    for q in qs:
        assert edit_path(tmp_path / "run", q.id).is_file() == (q.id not in bad)
    logged = [json.loads(line)["query_id"] for line in (tmp_path / "run" / EDITS_LOG).read_text().splitlines()]
    assert logged == ids
    # prepare ran once per source, ahead of the model, off the main thread; its results reached edit_deferred
    assert editor.prepare_threads and all(t.startswith("edit-reader") for t in editor.prepare_threads)
    assert set(editor.prepared) == {(256, 256)}


def test_deferred_outputs_equal_edit_outputs_through_the_stage(tmp_path):
    qs = small_set(tmp_path, 6)
    run_edit_stage(qs, Scripted(), tmp_path / "plain", seed=0, batch_size=4, progress=False)
    run_edit_stage(qs, Deferred(), tmp_path / "deferred", seed=0, batch_size=4, progress=False)
    for q in qs:
        assert edit_path(tmp_path / "plain", q.id).read_bytes() == edit_path(tmp_path / "deferred", q.id).read_bytes()


def test_a_source_that_cannot_be_prepared_is_a_failure_and_never_edited(tmp_path):
    class Unpreparable(Deferred):
        def prepare(self, image):
            raise ValueError("no model size for this image")

    qs = small_set(tmp_path, 3)
    editor = Unpreparable()
    stats = run_edit_stage(qs, editor, tmp_path / "run", seed=0, batch_size=2, progress=False)
    assert stats.failed == 3 and editor.calls == []
    recs = latest_records(tmp_path / "run")
    assert all(r["reason"] == "ValueError in Unpreparable.prepare: no model size for this image" for r in recs.values())


def test_rerun_skips_finished_and_failed_work(tmp_path):
    qs = small_set(tmp_path)
    first = Scripted({qs.queries[2].id: "raise"})
    run_edit_stage(qs, first, tmp_path / "run", seed=0, batch_size=3, progress=False)
    mtimes = {p: p.stat().st_mtime_ns for p in (tmp_path / "run" / "edits").iterdir()}
    second = Scripted()
    stats = run_edit_stage(qs, second, tmp_path / "run", seed=0, batch_size=3, progress=False)
    # 9 done; the failed one is left as it is and counted apart (a failed edit is not "already done")
    assert second.calls == [] and (stats.skipped, stats.failed_before) == (9, 1)
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "run" / "edits").iterdir()} == mtimes
    third = Scripted()
    run_edit_stage(qs, third, tmp_path / "run", seed=0, batch_size=3, retry_failed=True, progress=False)
    assert third.calls == [qs.queries[2].id]


def test_lost_record_is_recovered_not_recomputed(tmp_path):
    qs = small_set(tmp_path, 3)
    run_edit_stage(qs, Scripted(), tmp_path / "run", seed=0, progress=False)
    log = tmp_path / "run" / EDITS_LOG
    lines = log.read_text().splitlines()
    log.write_text("\n".join(lines[:2]) + "\n" + lines[2][:10])  # torn last line, as after kill -9
    editor = Scripted()
    run_edit_stage(qs, editor, tmp_path / "run", seed=0, progress=False)
    assert editor.calls == []
    rec = latest_records(tmp_path / "run")[qs.queries[2].id]
    assert rec["status"] == "ok" and rec["recovered"] is True


def test_bad_source_images_become_failures(tmp_path):
    qs = small_set(tmp_path, 4)
    images = {q.image for q in qs}
    assert len(images) == 1  # the first queries share one image: damage a copy per query instead
    root = qs.root
    variants = {}
    for i, q in enumerate(qs.queries):
        name = f"images/variant{i}.png"
        variants[q.id] = name
        shutil.copy(root / q.image, root / name)
    (root / variants[qs.queries[0].id]).write_bytes(b"not an image")
    rgba = np.dstack([np.asarray(Image.open(root / qs.queries[2].image)), np.full((256, 256), 7, np.uint8)])
    Image.fromarray(rgba, mode="RGBA").save(root / variants[qs.queries[2].id])
    Image.open(root / qs.queries[3].image).convert("L").save(root / variants[qs.queries[3].id])
    write_queries(root / "queries.jsonl", [dataclasses.replace(q, image=variants[q.id]) for q in qs.queries])
    qs = load_queryset(root)
    (root / variants[qs.queries[1].id]).unlink()  # after loading: a set with a missing file does not load
    editor = Scripted()
    stats = run_edit_stage(qs, editor, tmp_path / "run", seed=0, batch_size=4, progress=False)
    recs = latest_records(tmp_path / "run")
    assert stats.failed == 3 and editor.calls == [qs.queries[3].id]  # grayscale is converted, documented
    assert "corrupt or not an image" in recs[qs.queries[0].id]["reason"]
    assert "not found" in recs[qs.queries[1].id]["reason"]
    assert "transparent" in recs[qs.queries[2].id]["reason"]
    # scoring goes on and records the failures with their reasons
    from benchmark.metrics.pixel import PixelMetric

    run_score_stage(qs, tmp_path / "run", {"l1": PixelMetric("l1")}, "sig", progress=False)
    df = read_scores(tmp_path / "run", "sig")
    assert sorted(df["status"]) == ["failed", "failed", "failed", "ok"]
    assert df.loc[df["status"] == "ok", "l1"].iloc[0] == 0


def test_score_stage_resumes_and_rescores_changed_status(tmp_path):
    from benchmark.metrics.pixel import PixelMetric

    qs = small_set(tmp_path, 6)
    run_edit_stage(qs, Scripted({qs.queries[0].id: "raise"}), tmp_path / "run", seed=0, progress=False)
    metrics = {"l1": PixelMetric("l1")}
    s1 = run_score_stage(qs, tmp_path / "run", metrics, "sig", progress=False)
    s2 = run_score_stage(qs, tmp_path / "run", metrics, "sig", progress=False)
    assert (s1.computed, s2.computed, s2.reused) == (5, 0, 6)
    run_edit_stage(qs, Scripted(), tmp_path / "run", seed=0, retry_failed=True, progress=False)
    s3 = run_score_stage(qs, tmp_path / "run", metrics, "sig", progress=False)
    assert s3.computed == 1
    df = read_scores(tmp_path / "run", "sig")
    assert len(df) == 6 and (df["status"] == "ok").all()
    assert json.loads((tmp_path / "run" / "scores" / "sig" / "metrics.json").read_text())["l1"]["higher_is_better"] is False


def test_batch_size_does_not_change_outputs(tmp_path):
    qs = small_set(tmp_path, 7)
    from hydra.utils import instantiate

    from benchmark.commands.run import compose

    cfg, _ = compose(["editor=overedit", "profile=tiny"])
    for bs in (1, 4):
        run_edit_stage(qs, instantiate(cfg.editor), tmp_path / f"bs{bs}", seed=3, batch_size=bs, progress=False)
    for q in qs:
        a = np.asarray(Image.open(edit_path(tmp_path / "bs1", q.id)))
        b = np.asarray(Image.open(edit_path(tmp_path / "bs4", q.id)))
        assert np.array_equal(a, b)



class BatchStamp(Editor):
    """Stamps each output with the size of the batch it ran in: the extreme of a batch-dependent editor."""

    prompt_kind = "instruction"

    def __init__(self):
        self.batches: list[list[str]] = []

    def edit(self, queries, images, *, seeds):
        self.batches.append([q.id for q in queries])
        return [Image.new("RGB", im.size, (20 * len(queries), 7, 7)) for im in images]

    def info(self):
        return {"name": "batch-stamp"}


def test_a_resumed_run_edits_the_batches_an_uninterrupted_run_edits(tmp_path):
    qs = small_set(tmp_path, n=10)
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    run_edit_stage(qs, BatchStamp(), whole, seed=0, batch_size=4, progress=False)
    # a kill in the middle of batch 2 (queries 4-7): batch 1 and half of batch 2 were written
    shutil.copytree(whole, resumed)
    for q in qs.queries[6:]:
        edit_path(resumed, q.id).unlink()
    (resumed / EDITS_LOG).write_text("".join(line + "\n" for line in (resumed / EDITS_LOG).read_text().splitlines()[:6]))
    editor = BatchStamp()
    stats = run_edit_stage(qs, editor, resumed, seed=0, batch_size=4, progress=False)
    ids = [q.id for q in qs.queries]
    assert editor.batches == [ids[4:8], ids[8:10]]  # batch 2 whole again (4 and 5 ride along), then batch 3
    assert stats.computed == 4 and stats.skipped == 6
    for q in qs.queries:
        assert edit_path(resumed, q.id).read_bytes() == edit_path(whole, q.id).read_bytes(), q.id
    recs = [json.loads(line) for line in (resumed / EDITS_LOG).read_text().splitlines()]
    assert [r["query_id"] for r in recs[6:]] == ids[6:]  # passengers are neither rewritten nor logged again
