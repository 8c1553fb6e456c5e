"""The demo world's oracle segmenter (a test double: exact renders only) and the scoring benchmark's arithmetic."""

from __future__ import annotations

import importlib.util
from functools import partial
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "datasets" / "demo"


@pytest.fixture(scope="module")
def oracle():
    from benchmark.metrics.hatie.oracle import OracleSegmenter

    return OracleSegmenter(DEMO)


def _input(path):
    from benchmark.io.imageio import load_rgb
    from benchmark.metrics.hatie.suite import segmenter_input

    return segmenter_input(load_rgb(path))


def test_a_source_image_segments_into_its_ground_truth_masks(demo_qs, oracle):
    """For a source image the oracle's masks are the query set's ground-truth masks at 512 px."""
    import torch
    import torch.nn.functional as F

    from benchmark.io.imageio import load_mask, load_rgb

    q = next(q for q in demo_qs.queries if q.edit_type == "attr_chg")
    seg = oracle.segment([_input(demo_qs.path(q.image))])[0]
    src = load_rgb(demo_qs.path(q.image))
    names = [o.name for o in q.editable_objects]
    assert q.target.name in seg
    for o in q.editable_objects:
        if names.count(o.name) != 1:
            continue  # a repeated class keeps only its largest instance
        gt = torch.from_numpy(load_mask(demo_qs.path(o.mask), src.size)).float()
        gt512 = F.interpolate(gt[None, None], size=(512, 512), mode="nearest")[0, 0].numpy().astype(bool)
        assert np.array_equal(seg[o.name].mask, gt512), o.name
        assert seg[o.name].score == 1.0


def test_a_target_segments_into_its_edited_scene(demo_qs, oracle):
    """obj_add's target has the new class; obj_remove's target lacks the removed object (when it was unique)."""
    add = next(q for q in demo_qs.queries if q.edit_type == "obj_add")
    seg = oracle.segment([_input(demo_qs.path(add.target_image))])[0]
    assert add.new_class in seg and add.anchor.name in seg
    rem = next(q for q in demo_qs.queries if q.edit_type == "obj_remove"
               and [o.name for o in q.editable_objects].count(q.target.name) == 1)
    assert rem.target.name not in oracle.segment([_input(demo_qs.path(rem.target_image))])[0]


def test_any_other_image_is_refused_not_guessed(demo_qs, oracle):
    q = demo_qs.queries[0]
    img = _input(demo_qs.path(q.image)).copy()
    img[0, 0, 0] ^= 1  # one bit off an exact render
    with pytest.raises(ValueError, match="not an exact render"):
        oracle.segment([img])


def test_ground_truth_edits_reach_the_detected_branches(demo_qs, tmp_path):
    """Scored through the suite with tiny backbones, the demo's ground-truth edits take the detected branch of
    every object task whose target is still there (random-weight Mask R-CNN would detect almost nothing)."""
    from benchmark.metrics.hatie.oracle import load_oracle_segmenter
    from benchmark.metrics.hatie.suite import HatieSuite
    from benchmark.models.clip import load_clip
    from benchmark.models.dino import load_dino
    from benchmark.models.perceptual import load_lpips

    suite = HatieSuite(segmenter=partial(load_oracle_segmenter, root=str(DEMO)), clip=partial(load_clip, "tiny"),
                       dino=partial(load_dino, "tiny"), lpips=partial(load_lpips, "tiny"), fid=None, device="cpu")
    queries = [next(q for q in demo_qs.queries if q.edit_type == t)
               for t in ("attr_chg", "obj_resize", "obj_rep", "obj_add", "bg_chg")]
    rows = [r for rs in suite.score_queries(demo_qs, queries, [demo_qs.path(q.target_image) for q in queries],
                                            work_dir=tmp_path, progress=False) for r in rs]
    branch = {r["query_id"]: r["branch"] for r in rows}
    for q in queries:
        want = f"{len(q.editable_objects)}/{len(q.editable_objects)} detected" if q.edit_type == "bg_chg" else "detected"
        assert branch[q.id] == want, q.id
    assert suite.segmenter_signature.startswith("oracle-demo-render")


def _bench():
    spec = importlib.util.spec_from_file_location("bench_hatie", ROOT / "scripts" / "bench" / "bench_hatie.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _mode(qps, share, items, seconds, n=10):
    return {"queries": n, "queries_per_s": qps, "forward_share": share, "forward_items_per_query": items,
            "forward_s": seconds}


def test_the_benchmark_splits_its_ratio_into_reuse_batching_and_the_rest():
    """reuse x batching x rest equals batched / per-query, whatever the numbers (it is an identity of the
    definitions); and a loop that only encodes more inputs at the same cost shows up as reuse alone."""
    bench = _bench()
    rng = np.random.default_rng(0)
    for _ in range(20):
        n = 10
        items_b = {"clip image": rng.uniform(1, 4), "dino": rng.uniform(1, 4), "lpips pair": rng.uniform(1, 2)}
        items_1 = {k: v * rng.uniform(1, 2) for k, v in items_b.items()}
        spi_b = {"clip forward": rng.uniform(0.05, 0.1), "dino forward": rng.uniform(0.3, 0.5),
                 "lpips forward": rng.uniform(0.001, 0.01)}
        spi_1 = {k: v * rng.uniform(1, 1.5) for k, v in spi_b.items()}
        key = {"clip forward": "clip image", "dino forward": "dino", "lpips forward": "lpips pair"}
        sec_b = {k: spi_b[k] * items_b[key[k]] * n for k in spi_b}
        sec_1 = {k: spi_1[k] * items_1[key[k]] * n for k in spi_1}
        share_b, share_1 = rng.uniform(0.8, 1), rng.uniform(0.8, 1)
        b = _mode(n / (sum(sec_b.values()) / share_b), share_b, items_b, sec_b)
        one = _mode(n / (sum(sec_1.values()) / share_1), share_1, items_1, sec_1)
        d = bench.decompose(b, one)
        assert d["reuse"] * d["batching"] * d["rest"] == pytest.approx(d["total"], rel=1e-9)
    same_cost = _mode(10 / 8.0, 1.0, {"dino": 2.0}, {"dino forward": 10 * 2.0 * 0.4})
    twice = _mode(10 / 16.0, 1.0, {"dino": 4.0}, {"dino forward": 10 * 4.0 * 0.4})
    d = bench.decompose(same_cost, twice)
    assert d["reuse"] == pytest.approx(2.0) and d["batching"] == pytest.approx(1.0) and d["total"] == pytest.approx(2.0)


def _host_only(demo_qs, tmp_path):
    """(the bench module, a tiny-model HATIE suite factory, score(suite, queries) -> rows by query id, one query of
    each HATIE type)."""
    from benchmark.io.types import HATIE_TYPES
    from benchmark.metrics.features import shared_cache
    from benchmark.metrics.hatie.oracle import load_oracle_segmenter
    from benchmark.metrics.hatie.suite import HatieSuite
    from benchmark.models.clip import load_clip
    from benchmark.models.dino import load_dino
    from benchmark.models.inception import load_fid_extractor
    from benchmark.models.perceptual import load_lpips

    def suite():
        return HatieSuite(segmenter=partial(load_oracle_segmenter, root=str(DEMO)), clip=partial(load_clip, "tiny"),
                          dino=partial(load_dino, "tiny"), lpips=partial(load_lpips, "tiny"),
                          fid=partial(load_fid_extractor, "tiny"), device="cpu", chunk_size=4)

    def score(s, queries):
        shared_cache().clear()
        return {r["query_id"]: r for rows in s.score_queries(demo_qs, queries, [demo_qs.path(q.target_image)
                                                                               for q in queries],
                                                             work_dir=tmp_path, progress=False) for r in rows}

    return _bench(), suite, score, [next(q for q in demo_qs.queries if q.edit_type == t) for t in HATIE_TYPES]


def test_the_host_only_bench_replays_the_real_pass_without_calling_a_backbone(demo_qs, tmp_path):
    """`bench_hatie.py --host-only`: a replayed pass makes the same inputs as a real one (so it gets the same rows,
    float for float on a CPU), and no call reaches a real backbone; an input the recording pass never saw is an
    error."""
    from benchmark.io.types import HATIE_TYPES

    bench, suite, score, queries = _host_only(demo_qs, tmp_path)
    real = score(suite(), queries)
    replayed_suite, replay = suite(), bench.Replay()
    replay.install(replayed_suite)
    recorded = score(replayed_suite, queries)
    calls = replay.real_calls
    replay.recording = False
    replayed = score(replayed_suite, queries)
    assert calls > 0 and replay.real_calls == calls
    assert real.keys() == recorded.keys() == replayed.keys() and len(real) == len(HATIE_TYPES)
    for qid, row in real.items():
        assert bench._same_row(recorded[qid], row, rtol=0, atol=0), qid
        assert bench._same_row(replayed[qid], row, rtol=0, atol=0), qid
    other = next(q for q in demo_qs.queries if q.edit_type == "attr_chg" and q.image != queries[0].image)
    with pytest.raises(KeyError):
        score(replayed_suite, [other])


def test_the_host_only_replay_allows_a_gpus_last_bits_and_refuses_another_pass(demo_qs, tmp_path):
    """On a GPU the features of one input differ in the last bits from batch to batch, so the replayed sub-scores
    differ slightly from the recording pass's (as here, every recorded feature nudged by ~1e-6 of itself): the
    check accepts that and reports the deviation. Features far from the recorded ones (5% noise: other scores, or
    other inputs that the recording never saw), another branch, a count or a float moved by 1e-3 are refused."""
    import torch

    bench, suite, score, queries = _host_only(demo_qs, tmp_path)
    queries = queries[:3]  # obj_add (detected), obj_remove, attr_chg: three workflows are enough here
    replayed_suite, replay = suite(), bench.Replay()
    replay.install(replayed_suite)
    recorded = score(replayed_suite, queries)
    replay.recording = False
    exact = dict(replay.table)
    gen = torch.Generator().manual_seed(0)

    def noisy(scale):
        return {k: v * (1 + scale * torch.randn(v.shape, generator=gen, dtype=v.dtype)) for k, v in exact.items()}

    replay.table = noisy(1e-6)
    nudged = score(replayed_suite, queries)
    assert nudged.keys() == recorded.keys()
    assert all(bench._same_row(nudged[q], recorded[q]) for q in nudged)
    assert not all(bench._same_row(nudged[q], recorded[q], rtol=0, atol=0) for q in nudged)  # the nudge shows
    assert 0 < bench.check_replayed(list(nudged.values()), recorded) < bench.REPLAY_ATOL
    replay.table = noisy(0.05)
    try:  # other scores are refused by the check, other inputs (another branch or level) by the lookup
        other = score(replayed_suite, queries)
    except KeyError:
        pass
    else:
        with pytest.raises(RuntimeError, match="the replayed pass scored otherwise than the recording pass"):
            bench.check_replayed(list(other.values()), recorded)
    qid, row = next(iter(recorded.items()))
    key = next(k for k, v in row.items() if isinstance(v, float) and v == v)
    assert bench._same_row({**row, key: row[key] + 1e-12}, row)
    assert not bench._same_row({**row, key: row[key] + 1e-3}, row)
    assert not bench._same_row({**row, key: float("nan")}, row)
    assert not bench._same_row({**row, "branch": "not_detected" if row["branch"] == "detected" else "detected"}, row)
    assert not bench._same_row({**row, "status": "failed"}, row)
    assert not bench._same_row({"query_id": "q", "n": 4, "x": 0.5}, {"query_id": "q", "n": 3, "x": 0.5})  # counts
    with pytest.raises(RuntimeError, match=rf"query {qid}: the replayed pass scored otherwise .*{key}"):
        bench.check_replayed([{**row, key: row[key] + 1e-3}], recorded)
