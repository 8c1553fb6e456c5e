"""A chunk's images loaded by several threads are the items one thread loads, in order, and a chunk is loaded only
when it is asked for (never during the scoring of the chunk before it)."""

from __future__ import annotations

import threading
from functools import partial
from importlib import import_module
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmark.metrics.chunking import load_chunks

DEMO = Path(__file__).resolve().parents[1] / "datasets" / "demo"


class _Recorder:
    """A map-style dataset that records which indices were loaded, and by how many threads at once."""

    def __init__(self, n: int) -> None:
        self.n, self.loaded, self.lock = n, [], threading.Lock()

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        with self.lock:
            self.loaded.append(i)
        return i * 10


def test_items_come_in_order_and_a_chunk_loads_only_when_asked_for():
    data = _Recorder(10)
    it = load_chunks(data, chunk_size=4, threads=3)
    first = [next(it) for _ in range(4)]
    assert first == [0, 10, 20, 30]
    assert sorted(data.loaded) == [0, 1, 2, 3]  # the scorer holds chunk 0: nothing of chunk 1 loaded yet
    rest = list(it)
    assert rest == [40, 50, 60, 70, 80, 90] and sorted(data.loaded) == list(range(10))


def test_prefetch_loads_the_next_chunk_while_one_is_scored_and_keeps_the_order():
    import time

    data = _Recorder(10)
    it = load_chunks(data, chunk_size=4, threads=2, prefetch=True)
    first = [next(it) for _ in range(4)]
    assert first == [0, 10, 20, 30]
    deadline = time.monotonic() + 10
    while len(data.loaded) < 8 and time.monotonic() < deadline:  # chunk 1 loads in the background, not chunk 2
        time.sleep(0.01)
    assert sorted(data.loaded) == list(range(8))
    assert list(it) == [40, 50, 60, 70, 80, 90] and sorted(data.loaded) == list(range(10))


def test_a_loop_that_stops_early_does_not_wait_for_loads_nobody_reads():
    import threading

    gate = threading.Event()

    class _Slow(_Recorder):
        def __getitem__(self, i: int) -> int:
            if i >= 2:
                gate.wait(5)  # blocks until the test releases it (or 5 s)
            return super().__getitem__(i)

    data = _Slow(40)
    it = load_chunks(data, chunk_size=20, threads=1, prefetch=True)
    assert next(it) == 0 and next(it) == 10
    threading.Timer(1.0, gate.set).start()  # lets the item the thread is loading finish while close() waits
    it.close()  # the items not started on the one thread (3..39) are cancelled, not loaded
    assert len(data.loaded) <= 3


def test_threaded_loading_gives_the_items_one_thread_gives(demo_qs):
    """Several queries of one source in one chunk: the source is decoded once (the memo's lock) and every item
    equals a sequential load's, tensor for tensor."""
    from benchmark.metrics.hatie.suite import HatieSuite, _HatieSamples

    queries = sorted(demo_qs.queries, key=lambda q: (q.image, q.id))[:12]
    paths = [demo_qs.path(q.target_image) for q in queries]
    threaded = list(load_chunks(_HatieSamples(demo_qs, queries, paths), chunk_size=5, threads=4))
    seq = _HatieSamples(demo_qs, queries, paths)
    assert [it.query.id for it in threaded] == [q.id for q in queries]
    for i, got in enumerate(threaded):
        ref = seq[i]
        assert not got.error and not ref.error
        assert torch.equal(got.original, ref.original) and torch.equal(got.edit, ref.edit)
        assert got.original.stride() == ref.original.stride() and got.edit.stride() == ref.edit.stride()
        assert np.array_equal(got.edit_u8, ref.edit_u8) and got.ids == ref.ids
        assert got.gt_masks.keys() == ref.gt_masks.keys()
        assert all(torch.equal(got.gt_masks[k], ref.gt_masks[k]) for k in got.gt_masks)
    with pytest.raises(ValueError, match="load_threads"):
        HatieSuite(segmenter=None, clip=None, dino=None, lpips=None, load_threads=0)


def test_the_fid_batch_buffer_holds_what_torch_stack_makes():
    """Stacking into the suite's kept buffer gives torch.stack's tensor: values, dtype and (contiguous) strides,
    for decoded (channels-last view) images and contiguous ones, and a smaller last batch."""
    from benchmark.metrics.hatie.oracle import load_oracle_segmenter
    from benchmark.metrics.hatie.suite import HatieSuite

    suite = HatieSuite(segmenter=partial(load_oracle_segmenter, root=str(DEMO)), clip=None, dino=None, lpips=None,
                       batch_size=4)
    g = torch.Generator().manual_seed(0)
    decoded = [(torch.randint(0, 256, (16, 16, 3), generator=g).float() / 255).permute(2, 0, 1) for _ in range(4)]
    for images in (decoded, [x.contiguous() for x in decoded], decoded[:3]):
        ref = torch.stack(images)
        got = torch.stack(images, out=suite._batch_buffer(len(images), images[0]))
        assert torch.equal(got, ref) and got.stride() == ref.stride() and got.dtype == ref.dtype


def _same(a, b) -> bool:
    """Field-by-field equality of two loaded items (tensors and arrays exactly, containers recursively)."""
    import dataclasses

    if dataclasses.is_dataclass(a):
        return type(a) is type(b) and all(_same(getattr(a, f.name), getattr(b, f.name))
                                          for f in dataclasses.fields(a))
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if hasattr(a, "tobytes") and hasattr(a, "size"):  # PIL images
        return a.size == b.size and a.mode == b.mode and a.tobytes() == b.tobytes()
    return a == b


SUITE_SAMPLES = {
    "conventional": lambda qs, q, p: import_module("benchmark.metrics.conventional.suite")._Samples(qs, q, p),
    "editval": lambda qs, q, p: import_module("benchmark.metrics.editval.suite")._Samples(qs, q, p),
    "augclip": lambda qs, q, p: import_module("benchmark.metrics.augclip.suite")._Samples(qs, q, p),
    "bpm": lambda qs, q, p: import_module("benchmark.metrics.bpm.suite")._Samples(qs, q, p, True),
    "judge": lambda qs, q, p: import_module("benchmark.metrics.judge.suite")._Samples(qs, q, p, 56),
}


@pytest.mark.parametrize("suite", sorted(SUITE_SAMPLES))
def test_every_suites_loader_gives_the_same_items_on_threads(suite, demo_qs, tmp_path):
    """The shared chunk loop loads the other suites' chunks on threads too: item for item what one thread loads,
    in order, a missing edit included (its error, not an exception)."""
    from benchmark.metrics.chunking import score_in_chunks

    queries = sorted(demo_qs.queries, key=lambda q: (q.image, q.id))[:9]
    paths = [demo_qs.path(q.target_image) for q in queries]
    paths[4] = tmp_path / "missing.png"
    make = SUITE_SAMPLES[suite]
    seq = [make(demo_qs, queries, paths)[i] for i in range(len(queries))]
    assert seq[4].error and not any(it.error for i, it in enumerate(seq) if i != 4)
    chunks = list(score_in_chunks(make(demo_qs, queries, paths), lambda chunk: chunk, chunk_size=4, desc=suite,
                                  progress=False, load_threads=3))
    assert [len(c) for c in chunks] == [4, 4, 1]
    threaded = [it for c in chunks for it in c]
    assert all(_same(a, b) for a, b in zip(threaded, seq, strict=True))


def test_plans_made_on_the_loader_threads_score_as_the_suites_own(demo_qs, tmp_path):
    """A re-score reads every segmentation from the cache, so the loader threads plan its queries; the first pass
    segments in the suite, which plans them itself. A third pass prefetches: the threads plan the next chunk ahead
    and make its edit-side backbone inputs. A fourth prefetches on a cold cache: the suite segments the next chunk
    before scoring the current one and planning threads make its plans and inputs. All give the same rows, float
    for float."""
    import math

    from benchmark.metrics.features import shared_cache
    from benchmark.metrics.hatie.oracle import load_oracle_segmenter
    from benchmark.metrics.hatie.suite import AHEAD_INPUTS, AHEAD_PLAN, HatieSuite
    from benchmark.models.clip import load_clip
    from benchmark.models.dino import load_dino
    from benchmark.models.perceptual import load_lpips

    queries = [q for t in ("attr_chg", "obj_resize", "obj_rep", "obj_add", "obj_remove", "bg_chg", "style_chg")
               for q in [x for x in demo_qs.queries if x.edit_type == t][:2]]
    paths = [demo_qs.path(q.target_image) for q in queries]
    passes = []
    for prefetch, work in ((False, tmp_path), (False, tmp_path), (True, tmp_path), (True, tmp_path / "cold")):
        shared_cache().clear()
        suite = HatieSuite(segmenter=partial(load_oracle_segmenter, root=str(DEMO)), clip=partial(load_clip, "tiny"),
                           dino=partial(load_dino, "tiny"), lpips=partial(load_lpips, "tiny"), fid=None, device="cpu",
                           chunk_size=8, load_threads=3, prefetch=prefetch)
        rows = [r for rs in suite.score_queries(demo_qs, queries, paths, work_dir=work, progress=False) for r in rs]
        passes.append(({r["query_id"]: r for r in rows}, dict(suite.timings), suite.engine.ready_used))
    shared_cache().clear()
    (first, t1, used1), (second, t2, used2), (third, t3, used3), (fourth, t4, used4) = passes
    assert AHEAD_PLAN not in t1 and "segmenter forward" in t1  # the suite segmented and planned every query
    assert t2.get(AHEAD_PLAN, 0) > 0 and "segmenter forward" not in t2  # the loader planned them all
    assert AHEAD_INPUTS not in t2 and used1 == used2 == 0  # without prefetch no input is made ahead
    assert t3.get(AHEAD_INPUTS, 0) > 0 and used3 > 0  # with it, inputs made ahead were encoded
    assert "segmenter forward" in t4 and t4.get(AHEAD_INPUTS, 0) > 0 and used4 > 0  # segmented, then planned ahead
    assert first.keys() == second.keys() == third.keys() == fourth.keys() and len(first) == len(queries)
    assert any(r["branch"] == "detected" for r in first.values())
    for qid, row in first.items():
        nums = [k for k, v in row.items() if isinstance(v, float)]
        assert nums and row["status"] == "ok"
        for other in (second[qid], third[qid], fourth[qid]):
            assert other["status"] == "ok" and row["branch"] == other["branch"]
            assert all(row[k] == other[k] or (math.isnan(row[k]) and math.isnan(other[k])) for k in nums), qid


# every suite's loading settings: (metric set, suite name in it)
LOADING_SUITES = [("conventional", "conventional"), ("editval_oracle", "editval"), ("augclip", "augclip"),
                  ("bpm", "bpm"), ("judge", "judge"), ("hatie_oracle", "hatie")]


@pytest.mark.parametrize("metrics,name", LOADING_SUITES)
@pytest.mark.parametrize("setting,bad", [("prefetch", "yes"), ("load_threads", 0), ("load_threads", "4")])
def test_every_suite_refuses_a_bad_loading_setting_before_any_work(metrics, name, setting, bad):
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    from benchmark.commands.run import compose

    node = compose([f"metrics={metrics}", "profile=tiny", "device=cpu"])[0].metrics[name]
    assert node[setting] == {"prefetch": False, "load_threads": None}[setting]  # in the YAML: no `+` needed
    node[setting] = bad
    with pytest.raises((ValueError, InstantiationException), match=f"{setting} must be"):
        instantiate(node)


def _rows(suite, qs, queries, paths, work) -> dict:
    return {r["query_id"]: r for rs in suite.score_queries(qs, queries, paths, work_dir=work, progress=False)
            for r in rs}


def _same_row(a: dict, b: dict) -> bool:
    """Column-by-column equality of two result rows (NaN equals NaN; arrays exactly)."""
    import math

    return a.keys() == b.keys() and all(
        (isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y)) or _same(x, y)
        for x, y in ((a[k], b[k]) for k in a))


@pytest.mark.parametrize("metrics,name", [s for s in LOADING_SUITES if s[0] not in ("judge", "hatie_oracle")])
def test_every_suite_scores_the_same_rows_however_it_loads(metrics, name, demo_qs, tmp_path, single_thread_torch):
    """Chunks of 3 loaded by one thread, then by two threads with prefetch (a chunk loads while the one before it is
    scored): equal rows, float for float. Then each query alone, from a fresh loader: equal rows up to the float
    rounding that another batch composition gives. So the originals a loader decodes once for all of their queries
    (`QuerySamples.sources`) are the ones each query would decode, and nothing a chunk does to them reaches the
    next query."""
    import math

    from hydra.utils import instantiate

    from benchmark.commands.run import compose
    from benchmark.metrics.features import shared_cache

    by_source: dict[str, list] = {}
    for q in sorted(demo_qs.queries, key=lambda q: (q.image, q.id)):
        by_source.setdefault(q.image, []).append(q)
    queries = [q for qs_ in list(by_source.values())[:2] for q in qs_[:4]]  # 2 sources, 4 queries each
    node = compose([f"metrics={metrics}", "profile=tiny", "device=cpu"])[0].metrics[name]
    passes = []
    for settings, groups in (({"load_threads": 1, "chunk_size": 3}, [queries]),
                             ({"load_threads": 2, "prefetch": True, "chunk_size": 3}, [queries]),
                             ({"load_threads": 1}, [[q] for q in queries])):
        shared_cache().clear()  # no feature reuse across passes: each pass encodes what it loads
        suite = instantiate(node, **settings)
        rows: dict = {}
        for group in groups:
            rows |= _rows(suite, demo_qs, group, [demo_qs.path(q.target_image) for q in group], tmp_path / "w")
        passes.append(rows)
    one, prefetched, alone = passes
    assert set(one) == {q.id for q in queries} and sum(r["status"] == "ok" for r in one.values()) >= 4
    assert one.keys() == prefetched.keys() and all(_same_row(one[k], prefetched[k]) for k in one)
    assert one.keys() == alone.keys()
    for k, row in one.items():
        assert row.keys() == alone[k].keys()
        for c, x in row.items():
            y = alone[k][c]
            # float32 scores at another batch composition: max 1.4e-6 apart, 11% of the tolerance, measured
            # here (tests/helpers/spread_probe.py, the project's 2-core machine)
            if isinstance(x, float) and isinstance(y, float):
                assert math.isclose(x, y, rel_tol=1e-5, abs_tol=1e-5) or (math.isnan(x) and math.isnan(y)), (k, c)
            elif isinstance(x, np.ndarray):
                assert np.allclose(x, y, rtol=1e-5, atol=1e-5), (k, c)
            else:
                assert x == y, (k, c, x, y)


@pytest.mark.parametrize("suite", sorted(SUITE_SAMPLES))
def test_every_suites_loader_decodes_an_original_once_for_its_queries(suite, demo_qs):
    """Queries arrive sorted by source: each original is decoded (and made into the suite's input) once."""
    by_source: dict[str, list] = {}
    for q in sorted(demo_qs.queries, key=lambda q: (q.image, q.id)):
        by_source.setdefault(q.image, []).append(q)
    queries = [q for qs_ in list(by_source.values())[:3] for q in qs_[:3]]
    samples = SUITE_SAMPLES[suite](demo_qs, queries, [demo_qs.path(q.target_image) for q in queries])
    items = [samples[i] for i in range(len(queries))]
    assert not any(it.error for it in items)
    assert samples.sources.made == 3
