"""Exact merging: a run split into k shards, completed in any order, gives the leaderboards of one process.

Shards run in-process (the stages are what is tested; `test_scale.py` tests the launchers that start them).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import random
from pathlib import Path

import numpy as np
import pytest

from benchmark.stages.aggregate import write_leaderboards

RESAMPLES = 50
TABLES = ("leaderboard.csv", "leaderboard_by_type.csv", "leaderboard_by_class.csv", "leaderboard_metrics.csv")


def _run_shards(results: Path, editor: str, metrics: str, k: int, order_seed: int, first: int) -> None:
    from benchmark.commands.run import compose, run_pipeline

    order = list(range(k))
    random.Random(order_seed).shuffle(order)  # any completion order
    for i in order:
        cfg, choices = compose([f"editor={editor}", "queryset=demo_mini", f"queryset.first={first}", "profile=tiny",
                                f"metrics={metrics}", f"paths.results={results}", "progress=false", "preflight=false",
                                "stages=[edit,score]", f"shard.index={i}", f"shard.count={k}"])
        run_pipeline(cfg, choices["editor"])


def _tables(results: Path) -> dict[str, str]:
    write_leaderboards(results, None, RESAMPLES, 0)
    return {t: (results / t).read_text() for t in TABLES}


def _check_k(tmp_path: Path, metrics: str, editors: tuple[str, ...], ks: tuple[int, ...], first: int = 14,
             exact: bool = True) -> dict[int, dict]:
    out = {}
    for k in ks:
        results = tmp_path / f"k{k}"
        for n, editor in enumerate(editors):
            _run_shards(results, editor, metrics, k, order_seed=32 * k + n + 1, first=first)  # k=3, n=0: 2, 1, 0
        out[k] = _tables(results)
    for k in ks[1:]:
        for t in TABLES:
            if exact:
                assert out[k][t] == out[ks[0]][t], f"{metrics}: {t} with {k} shards differs from {ks[0]}"
            else:
                _assert_close(out[k][t], out[ks[0]][t], f"{metrics}: {t} with {k} shards vs {ks[0]}")
    return out


def _assert_close(a: str, b: str, what: str) -> None:
    """Same rows, same text columns, every number within 1e-5 relative (HATIE's raw sub-scores move by ~1e-8 with
    the composition of the batches the backbones ran, which sharding changes: docs/scale.md)."""
    import io

    import pandas as pd

    x, y = pd.read_csv(io.StringIO(a)), pd.read_csv(io.StringIO(b))
    assert list(x.columns) == list(y.columns) and len(x) == len(y), what
    for c in x.columns:
        if x[c].dtype.kind == "f":
            assert np.allclose(x[c], y[c], rtol=1e-5, atol=1e-9, equal_nan=True), f"{what}: {c}"
        else:
            assert x[c].tolist() == y[c].tolist(), f"{what}: {c}"


def _overall(tables: dict[str, str]) -> list[dict]:
    import io

    import pandas as pd

    return pd.read_csv(io.StringIO(tables["leaderboard.csv"])).to_dict("records")


def test_basic_shards_merge_exactly_in_any_order(tmp_path, single_thread_torch):
    """Pixel metrics, 3 shards finishing in the order 2, 1, 0 equal one process (8 queries; k = 1, 2, 3 in
    order: test_trust_results; every k in shuffled orders with both metric sets: the slow test below)."""
    out = _check_k(tmp_path, "basic", ("overedit",), (1, 3), first=8)
    (row,) = _overall(out[1])
    assert row["complete"] and row["n_ok"] == 8 and row["psnr_se"] > 0  # real numbers were compared


def test_hatie_parts_merge_exactly(tmp_path, single_thread_torch):
    """HATIE with the FID features: one process's score rows, re-split into k = 2, 3 parts written in a shuffled
    order (what shards finishing in any order leave), give the same criteria, FID, IQ, IQ_se and Total."""
    import shutil

    import pandas as pd

    from benchmark.stages.score import part_name

    one = tmp_path / "k1"
    _run_shards(one, "overedit", "hatie", 1, order_seed=0, first=8)  # 8 queries on 2 source images
    want = _tables(one)
    (row,) = _overall(want)
    assert row["complete"] and row["FID"] > 0 and row["IQ_se"] > 0 and row["Total"] > 0
    for k in (2, 3):
        results = tmp_path / f"k{k}"
        shutil.copytree(one / "runs", results / "runs")
        (folder,) = [p.parent for p in results.glob("runs/*/*/scores/*/queries.json")]
        parts = sorted(folder.glob("part-*.parquet"))
        rows = pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True)
        for p in parts:
            p.unlink()
        shard = np.random.default_rng(k).permutation(len(rows)) % k
        for n, i in enumerate(random.Random(k).sample(range(k), k)):
            rows[shard == i].to_parquet(folder / part_name(n), index=False)
        assert len(list(folder.glob("part-*.parquet"))) == k
        assert _tables(results) == want, f"{k} parts"




@pytest.mark.slow
@pytest.mark.parametrize("metrics", ["basic", "hatie"])
def test_shards_merge_exactly_k123(tmp_path, single_thread_torch, metrics):
    """End to end on the whole demo_mini set, identity and overedit, k = 1, 2, 3: pixel metrics identical; HATIE
    identical up to its backbones' batch-composition noise (the merge itself is exact: the parts test above)."""
    _check_k(tmp_path, metrics, ("identity", "overedit"), (1, 2, 3), exact=metrics == "basic")


# -- concurrent writers of the shared files of a run folder -------------------------------------------------------

def _update_meta(path: str, key: str, n: int) -> None:
    from benchmark.io.fileio import atomic_write_text
    from benchmark.io.locking import locked

    p = Path(path)
    for i in range(n):
        with locked(p):
            data = json.loads(p.read_text()) if p.is_file() else {}
            data[f"{key}-{i}"] = i
            atomic_write_text(p, json.dumps(data))


def _append(path: str, key: str, n: int) -> None:
    from benchmark.io.fileio import append_jsonl

    for i in range(n):
        append_jsonl(Path(path), [{"w": key, "i": i, "pad": "x" * 5000}])


@pytest.mark.parametrize("target", [_update_meta, _append])
def test_concurrent_shards_lose_no_update(tmp_path, target):
    """Four processes update one run.json-like file (read-modify-write under the lock) or append to one log at
    once: every update survives, every line is whole."""
    path = tmp_path / ("run.json" if target is _update_meta else "edits.jsonl")
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=target, args=(str(path), f"w{w}", 40)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    if target is _update_meta:
        assert len(json.loads(path.read_text())) == 4 * 40
    else:
        from benchmark.io.fileio import read_jsonl_tolerant

        recs = read_jsonl_tolerant(path)
        assert sorted((r["w"], r["i"]) for r in recs) == sorted((f"w{w}", i) for w in range(4) for i in range(40))


def test_run_json_keeps_every_metric_set_of_concurrent_shards(tmp_path):
    """Two shards scored with different metric sets both end up in run.json's `scored` (the read of the earlier
    entries and the write happen under the lock)."""
    from benchmark.commands.run import compose, run_pipeline

    for metrics, i in (("basic", 0), ("hatie", 1)):
        cfg, choices = compose(["editor=identity", "queryset=demo_mini", "profile=tiny", f"metrics={metrics}",
                                f"paths.results={tmp_path}", "progress=false", "preflight=false", "stages=[]",
                                f"shard.index={i}", "shard.count=2"])
        run_pipeline(cfg, choices["editor"])
    (meta,) = tmp_path.glob("runs/*/*/run.json")
    assert len(json.loads(meta.read_text())["scored"]) == 2


def test_part_names_are_unique_across_hosts_and_sortable():
    from benchmark.io.fileio import _host
    from benchmark.stages.score import part_name

    names = [part_name(n) for n in range(3)]
    assert names == sorted(names) and len(set(names)) == 3 and all(_host() in n for n in names)


# -- FID from merged statistics ------------------------------------------------------------------------------------

def test_fid_from_merged_statistics_equals_feature_fid():
    """Statistics merged over any split of the rows give the feature-based FID (and np.cov's covariance)."""
    from benchmark.metrics.fid import FeatureStats, fid_from_stats, frechet_distance

    rng = np.random.default_rng(0)
    ref = rng.gamma(2.0, 0.3, (600, 48)).astype(np.float32)  # non-negative, pool3-like, mean >> spread
    gen = (ref[:500] * 1.1 + rng.normal(0, 0.05, (500, 48))).astype(np.float32)
    exact = frechet_distance(ref.astype(np.float64).mean(0), np.cov(ref.astype(np.float64), rowvar=False),
                             gen.astype(np.float64).mean(0), np.cov(gen.astype(np.float64), rowvar=False))
    for k in (1, 2, 3, 7):
        cuts = np.sort(rng.choice(np.arange(1, 500), k - 1, replace=False))
        parts = [FeatureStats.of(p) for p in np.split(gen, cuts)]
        random.Random(k).shuffle(parts)
        merged = FeatureStats.merge(parts)
        assert merged.n == 500
        assert abs(fid_from_stats(FeatureStats.of(ref), merged) - exact) <= 1e-6 * exact
        assert np.allclose(merged.mean_cov()[1], np.cov(gen.astype(np.float64), rowvar=False), rtol=0, atol=1e-12)


def test_resample_statistics_equal_materialised_resample():
    """A bootstrap resample's count-weighted statistics equal those of the resampled rows themselves."""
    from benchmark.metrics.fid import FeatureStats

    rng = np.random.default_rng(1)
    x = rng.normal(1, 0.5, (300, 16)).astype(np.float32)
    idx = rng.integers(0, 300, 300)
    w = FeatureStats.weighted(x, np.bincount(idx, minlength=300))
    m, c = FeatureStats.of(x[idx]).mean_cov()
    assert w.n == 300 and np.allclose(w.mean_cov()[0], m, atol=1e-12) and np.allclose(w.mean_cov()[1], c, atol=1e-12)
