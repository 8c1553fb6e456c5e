"""One engine: models loaded once per process, features encoded once per unique encoder input across suites, and one
run scored by several suites (metrics=standard) with rows equal to separate runs of each suite."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import run_demo

from benchmark.metrics.features import FeatureCache, embed_images, embed_texts, shared_cache, tensor_digest


class CountingEncoder:
    """A stand-in encoder (mean colour as the feature) that counts what it is asked to encode: the unit under test
    is the cache, not a model."""

    def __init__(self, name="counting"):
        self.name, self.seen = name, 0

    def embed_images(self, x):
        self.seen += len(x)
        return x.mean(dim=(2, 3))

    def embed_texts(self, texts):
        self.seen += len(texts)
        return torch.tensor([[float(len(t)), 1.0] for t in texts])


def test_inputs_are_encoded_once_by_content():
    cache, enc = FeatureCache(2**20), CountingEncoder()
    a, b = torch.rand(3, 8, 8), torch.rand(3, 8, 8)
    out = embed_images(enc, [a, b, a.clone(), torch.rand(3, 4, 4)], cache=cache, batch_size=2)
    assert enc.seen == 3 and torch.equal(out[0], out[2]) and out[3].shape == (3,)
    embed_images(enc, [b, a], cache=cache)
    assert enc.seen == 3 and cache.hits == 2
    assert dict(cache.forward_items) == {"test_one_engine.CountingEncoder|counting||": 3}
    other = CountingEncoder("other")  # another encoder never reuses these features
    embed_images(other, [a], cache=cache)
    assert other.seen == 1
    embed_texts(enc, ["x", "yy", "x"], cache=cache)
    embed_texts(enc, ["yy"], cache=cache)
    assert enc.seen == 5
    assert tensor_digest(a) != tensor_digest(a.double()) and tensor_digest(a) == tensor_digest(a.clone())


def test_feature_cache_is_bounded_and_evicts_least_recent():
    one = FeatureCache._size(torch.zeros(16))
    cache = FeatureCache(3 * one)
    for k in "abcd":
        cache.put("s", k, torch.zeros(16))
        if k == "b":
            cache.get("s", "a")  # touch a: b becomes the oldest
    assert len(cache) == 3 and cache.nbytes <= cache.budget
    assert cache.get("s", "b") is None and cache.get("s", "a") is not None
    view = torch.zeros(1000, 16)[0]  # a row of a batch: only its own bytes are kept
    cache.put("s", "v", view)
    assert cache.get("s", "v").untyped_storage().nbytes() == 16 * 4


def test_a_model_shared_by_two_suites_is_loaded_once():
    from hydra.utils import instantiate

    from benchmark.commands.run import compose
    from benchmark.models.clip import load_clip

    cfg, _ = compose(["metrics=standard", "profile=tiny", "device=cpu"])
    hatie, conv = instantiate(cfg.metrics.hatie), instantiate(cfg.metrics.conventional)
    before = load_clip.cache_info()
    a, b = hatie._get("clip"), conv._get("clip")
    after = load_clip.cache_info()
    assert a is b and after.misses - before.misses <= 1 and after.hits > before.hits


@pytest.fixture(scope="module")
def runs(tmp_path_factory, single_thread_torch):
    """metrics=standard in one process vs metrics=hatie and metrics=conventional as two fresh processes (feature
    cache cleared; models stay loaded, which changes no number) on a 512 px demo set (HATIE's own size)."""
    from benchmark.querysets.demo import build

    qs = build(tmp_path_factory.mktemp("qs512"), n_images=1, size=512, editval=False)
    common = ("oracle", f"queryset.root={qs}", f"editor.scene_graphs={qs}/scene_graphs.json")
    no_lpips = "metrics.conventional.lpips=null"  # LPIPS: a full-size AlexNet at 512 px, slow on CPU
    cache = shared_cache()
    cache.clear()
    together_dir = tmp_path_factory.mktemp("together")
    together = run_demo(together_dir, *common, "metrics=standard", no_lpips)
    shared = sum(cache.forward_items.values())
    cache.clear()
    apart_dir = tmp_path_factory.mktemp("apart")
    apart = {}
    separate = 0
    for suite in ("hatie", "conventional"):
        apart[suite] = run_demo(apart_dir, *common, f"metrics={suite}", *([no_lpips] if suite == "conventional" else []))
        separate += sum(cache.forward_items.values())
        cache.clear()
    return together, together_dir, apart, apart_dir, shared, separate


def test_one_process_encodes_no_input_twice_and_hatie_shares_no_clip_input(runs):
    """HATIE resizes floats (its authors' code), the conventional suite 8-bit images (MagicBrush's script): their
    CLIP inputs differ, so one process encodes exactly what the two do (each suite's own repeats are shared in both:
    tests/test_one_engine_suites.py measures suites that do share inputs)."""
    _, _, _, _, shared, separate = runs
    assert 0 < shared == separate


def test_each_suite_is_its_own_metric_set_with_the_signature_of_a_separate_run(runs):
    together, together_dir, apart, _, _, _ = runs
    assert together["metric_sigs"] == {s: apart[s]["metric_sig"] for s in ("hatie", "conventional")}
    meta = json.loads((Path(together["run_dir"]) / "run.json").read_text())
    scored = meta["scored"]
    assert {v["metric_set"] for v in scored.values()} == {"hatie", "conventional"}
    for suite, sig in together["metric_sigs"].items():
        assert scored[sig]["suite"]["name"] == suite
    assert set(together["scores"]) == {"hatie", "conventional"}


def _rows(summary, sig):
    from benchmark.stages.score import read_scores

    return read_scores(Path(summary["run_dir"]), sig).sort_values("query_id").reset_index(drop=True)


def test_rows_equal_separate_runs(runs):
    together, together_dir, apart, apart_dir, _, _ = runs
    for suite in ("hatie", "conventional"):
        sig = together["metric_sigs"][suite]
        a, b = _rows(together, sig), _rows(apart[suite], sig)
        assert len(a) == 7 and list(a.columns) == list(b.columns) and (a["status"] == "ok").all()
        feats = [c for c in a.columns if c.startswith("_")]
        num = [c for c in a.columns if c not in feats and pd.api.types.is_numeric_dtype(a[c])]
        text = [c for c in a.columns if c not in feats and c not in num]
        assert a[text].equals(b[text]), suite
        # one process against separate runs: 0 apart measured here (tests/helpers/spread_probe.py, the
        # project's 2-core machine); 1e-5 ~ 100 float32 ulps of scores <= 1
        assert np.allclose(a[num].to_numpy(float), b[num].to_numpy(float), atol=1e-5, equal_nan=True), suite
    lb_a = pd.read_csv(together_dir / "leaderboard.csv").sort_values("metric_set").reset_index(drop=True)
    lb_b = pd.read_csv(apart_dir / "leaderboard.csv").sort_values("metric_set").reset_index(drop=True)
    assert list(lb_a["metric_set"]) == ["conventional", "hatie"]
    cols = ["metric_set", "metric_sig", "editor_sig", "n_ok", "n_total", "clip_i", "md", "Total", "BC"]
    assert lb_a[cols].equals(lb_b[cols]) or np.allclose(
        lb_a[cols[5:]].to_numpy(float), lb_b[cols[5:]].to_numpy(float), atol=1e-5, equal_nan=True)
    assert lb_a[cols[:5]].equals(lb_b[cols[:5]])


def test_mixing_pairwise_metrics_and_suites_is_refused():
    from benchmark.commands.run import _metric_sets

    class Suite:
        info = None

        def score_queries(self):
            pass

    with pytest.raises(ValueError, match="pairwise"):
        _metric_sets({}, {"hatie": Suite(), "l1": object()}, "mixed", None, lambda m: hasattr(m, "score_queries"))


def test_hatie_engine_batching_with_a_cold_cache():
    """tests/test_hatie.py's batch-size-1 run now finds the batched run's CLIP / DINOv2 features in the process-wide
    cache; this keeps the batch-size comparison of those features honest (cache cleared between the two)."""
    from benchmark.metrics.hatie.engine import SimilarityEngine
    from benchmark.models.clip import load_clip
    from benchmark.models.dino import load_dino
    from benchmark.models.perceptual import load_lpips

    g = torch.Generator().manual_seed(0)
    images = {f"k{i}": torch.rand(3, 48, 48, generator=g) for i in range(6)}
    pairs = [("k0", "k1"), ("k2", "k3"), ("k4", "k5"), ("k0", "k5")]
    out = []
    for bs in (16, 1):
        shared_cache().clear()
        eng = SimilarityEngine(load_clip("tiny"), load_dino("tiny"), load_lpips("tiny"), batch_size=bs)
        out.append(eng.pair_similarities(pairs, images))
        assert sum(shared_cache().forward_items.values()) == 12  # 6 images x (CLIP, DINOv2), nothing from cache
    for pk in pairs:
        for name in ("clip", "dino", "lpips", "l2"):
            assert out[0][pk][name] == pytest.approx(out[1][pk][name], abs=1e-5)
