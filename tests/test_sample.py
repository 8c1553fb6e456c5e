"""Stratified samples as query sets of their own (issue 26): seeded, nested, stratified by edit type and class,
own name and hash; bad requests are errors that say what to give instead."""

from collections import Counter

import pytest
from conftest import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmark.querysets.io import QuerySetError, load_queryset
from benchmark.querysets.sample import SampleError, draw_sample, sample_order
from benchmark.types import HATIE_TYPES, ObjectRef, Query

DEMO = ROOT / "datasets" / "demo"
CLASSES = ("cat", "dog", "cup", "car")


def _queries(sizes: dict[tuple[str, str], int]) -> list[Query]:
    """Synthetic queries: `sizes[(edit type, class)]` of each (obj_rep: the class is the edited object's)."""
    out = []
    for (etype, cls), n in sorted(sizes.items()):
        for i in range(n):
            out.append(Query(id=f"{etype}-{cls}-{i}", image=f"images/{i}.png", edit_type=etype, instruction="x",
                             image_id=str(i), target=ObjectRef(id="1", name=cls), new_class="tree",
                             attribute_before="red", attribute_after="blue"))
    return out


strata = st.dictionaries(st.tuples(st.sampled_from(("obj_rep", "obj_remove", "attr_chg")), st.sampled_from(CLASSES)),
                         st.integers(1, 12), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(strata, st.integers(0, 2**31), st.data())
def test_nested_same_seed_same_sample_and_strata_counts(sizes, seed, data):
    queries = _queries(sizes)
    total = len(queries)
    if total < 2:
        return
    small = data.draw(st.integers(1, total - 1))
    large = data.draw(st.integers(small, total - 1))
    a, _ = draw_sample(queries, small, seed=seed)
    b, _ = draw_sample(queries, large, seed=seed)
    assert len(a) == small and len(b) == large
    assert {q.id for q in a} <= {q.id for q in b}  # nested: a larger sample extends a smaller one
    assert [q.id for q in draw_sample(queries, small, seed=seed)[0]] == [q.id for q in a]  # same seed, same sample
    # every edit type gets its share of N (Sainte-Laguë rounding: within one query of N x share)
    per_type = Counter(q.edit_type for q in queries)
    got = Counter(q.edit_type for q in b)
    for etype, m in per_type.items():
        assert abs(got[etype] - large * m / total) < 1 + 1e-9, (etype, got, per_type)


@settings(max_examples=40, deadline=None)
@given(strata, st.integers(0, 2**31))
def test_stratum_counts_never_shrink_as_n_grows(sizes, seed):
    queries = _queries(sizes)
    order = sample_order(queries, seed)
    assert sorted(q.id for q in order) == sorted(q.id for q in queries)  # every query once
    seen: Counter = Counter()
    for q in order:  # a prefix of the order is the sample: counts only grow, one stratum at a time
        seen[(q.edit_type, q.object_class)] += 1
    assert seen == Counter((q.edit_type, q.object_class) for q in queries)


def test_equal_strata_get_equal_counts():
    queries = _queries({("obj_rep", c): 10 for c in CLASSES})
    got = Counter(q.object_class for q in draw_sample(queries, 20, seed=3)[0])
    assert set(got.values()) == {5}


def test_different_seeds_give_different_samples():
    queries = _queries({("obj_rep", "cat"): 40})
    assert {q.id for q in draw_sample(queries, 10, seed=0)[0]} != {q.id for q in draw_sample(queries, 10, seed=1)[0]}


def test_demo_sample_28_is_4_per_hatie_type_nested_in_56_with_its_own_name_and_hash():
    full = load_queryset(DEMO, name="demo")
    s28 = load_queryset(DEMO, name="demo", sample=28, sample_types="hatie")
    s56 = load_queryset(DEMO, name="demo", sample=56, sample_types="hatie")
    assert Counter(q.edit_type for q in s28) == {t: 4 for t in HATIE_TYPES}
    assert Counter(q.edit_type for q in s56) == {t: 8 for t in HATIE_TYPES}
    assert {q.id for q in s28} <= {q.id for q in s56}
    assert s28.name == "demo-sample28-seed0" and s56.name == "demo-sample56-seed0"
    assert len({full.hash, s28.hash, s56.hash}) == 3
    info = s28.meta["sample"]
    assert (info["n"], info["set_size"], info["pool"], info["seed"], info["parent"]) == (28, 133, 112, 0, "demo")
    # a fraction names the same set as its count
    quarter = load_queryset(DEMO, name="demo", sample=0.25, sample_types="hatie")
    assert (quarter.name, quarter.hash) == (s28.name, s28.hash)


def test_the_demo_config_samples_its_hatie_queries():
    from hydra.utils import instantiate

    from benchmark.run import compose

    cfg, _ = compose(["queryset=demo", "queryset.sample=28"])
    qs = instantiate(cfg.queryset)
    assert len(qs) == 28 and qs.name == "demo-sample28-seed0"


@pytest.mark.parametrize("request_, message", [
    (200, "larger than the 112 queries"),
    (0, "at least one query"),
    (1.5, "between 0 and 1"),
    ("ten", "a number of queries"),
    (0.001, "less than one query"),
])
def test_bad_requests_are_errors_naming_the_fix(request_, message):
    with pytest.raises(QuerySetError, match=message):
        load_queryset(DEMO, name="demo", sample=request_, sample_types="hatie")


def test_a_sample_of_every_query_is_refused():
    queries = _queries({("obj_rep", "cat"): 5})
    with pytest.raises(SampleError, match="whole set"):
        draw_sample(queries, 5)


def test_unknown_type_family_is_an_error():
    with pytest.raises(SampleError, match="family"):
        draw_sample(_queries({("obj_rep", "cat"): 5}), 2, types="hatei")


def _run(results, editor, *extra):
    from benchmark.run import compose, run_pipeline

    cfg, _ = compose([f"editor={editor}", "queryset=demo", "profile=tiny", "metrics=basic", f"paths.results={results}",
                      "progress=false", "aggregate.bootstrap_resamples=100", *extra])
    return run_pipeline(cfg, editor)


def test_a_sample_run_is_complete_says_so_and_compare_pairs_only_on_one_sample(tmp_path, capsys):
    import json
    from pathlib import Path

    import pandas as pd

    from benchmark import cli
    from benchmark.show import render

    results = tmp_path / "results"
    summary = _run(results, "identity", "queryset.sample=7")
    _run(results, "oracle", "queryset.sample=7")
    _run(results, "oracle", "queryset.sample=14")
    meta = json.loads((Path(summary["run_dir"]) / "run.json").read_text())
    assert meta["queryset"] == "demo-sample7-seed0" and meta["queryset_size"] == 7
    assert (meta["sample"]["set_size"], meta["sample"]["seed"], meta["sample"]["parent"]) == (133, 0, "demo")
    df = pd.read_csv(results / "leaderboard.csv")
    rows = df[df["queryset"] == "demo-sample7-seed0"]
    assert rows["complete"].all() and (rows["n_total"] == 7).all() and (rows["sample_of"] == 133).all()
    assert "a stratified sample" in render(results, "demo-sample7-seed0")
    capsys.readouterr()
    # identity has runs on sample 7 only: the pair is the sample-7 one, never oracle's sample-14 run
    assert cli.main(["compare", "--results", str(results), "identity", "oracle", "--resamples", "200"]) == 0
    out = capsys.readouterr().out
    assert "shared: 7 of 7 queries" in out
