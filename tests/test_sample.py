"""Stratified samples as query sets of their own (issue 26): seeded, nested, stratified by edit type and class,
own name and hash; bad requests are errors that say what to give instead."""

from collections import Counter

import pytest
from conftest import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmark.io.types import HATIE_TYPES, ObjectRef, Query
from benchmark.querysets.io import QuerySetError, load_queryset
from benchmark.querysets.sample import SampleError, draw_sample, sample_order

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

    from benchmark.commands.run import compose

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
    from benchmark.commands.run import compose, run_pipeline

    cfg, _ = compose([f"editor={editor}", "queryset=demo", "profile=tiny", "metrics=basic", f"paths.results={results}",
                      "progress=false", "aggregate.bootstrap_resamples=100", *extra])
    return run_pipeline(cfg, editor)


def test_a_sample_run_is_complete_says_so_and_compare_pairs_only_on_one_sample(tmp_path, capsys):
    import json
    from pathlib import Path

    import pandas as pd

    from benchmark.commands import cli
    from benchmark.tables.show import render

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


# -- extending a sample reuses the smaller sample's edits (benchmark.stages.reuse) ----------------------------------

def _count_edits(monkeypatch, cls):
    """Count the queries `cls` edits (every model call of the edit stage goes through edit_deferred)."""
    edited: list[str] = []
    original = cls.edit_deferred

    def counting(self, queries, *args, **kwargs):
        edited.extend(q.id for q in queries)
        return original(self, queries, *args, **kwargs)

    monkeypatch.setattr(cls, "edit_deferred", counting)
    return edited


def _edit_log(run_dir):
    import json

    lines = (run_dir / "edits.jsonl").read_text().splitlines()
    return {r["query_id"]: r for r in map(json.loads, lines)}


def test_extending_a_sample_edits_only_the_new_queries_and_reuses_the_same_edits(tmp_path, monkeypatch):
    import json
    from pathlib import Path

    from editors.oracle import OracleEditor

    edited = _count_edits(monkeypatch, OracleEditor)
    results = tmp_path / "results"
    small = _run(results, "oracle", "queryset.sample=28", "stages=[edit]")
    s28 = set(edited)
    assert len(s28) == 28
    edited.clear()
    large = _run(results, "oracle", "queryset.sample=56", "stages=[edit]")
    ids56 = {q.id for q in load_queryset(DEMO, name="demo", sample=56, sample_types="hatie")}
    # only the 28 new queries went through the editor; the 28 of the smaller sample were reused
    assert sorted(edited) == sorted(ids56 - s28)
    assert large["edit"].computed == 28 and large["edit"].skipped == 28
    run_dir, src_dir = Path(large["run_dir"]), Path(small["run_dir"])
    log = _edit_log(run_dir)
    source = src_dir.relative_to(results).as_posix()
    assert {q for q, r in log.items() if r.get("reused_from")} == s28
    assert all(log[q]["reused_from"]["run"] == source for q in s28)
    assert json.loads((run_dir / "run.json").read_text())["reused_from"][source]["edits"] == 28
    # a run of sample 56 from scratch makes the same edits (oracle: no weights, exact), byte for byte
    edited.clear()
    scratch = _run(tmp_path / "scratch", "oracle", "queryset.sample=56", "stages=[edit]")
    assert len(edited) == 56
    for qid in ids56:
        name = f"edits/{qid}.png"
        assert (run_dir / name).read_bytes() == (Path(scratch["run_dir"]) / name).read_bytes(), qid
    # a third run finds everything done: nothing is edited or brought in again
    edited.clear()
    again = _run(results, "oracle", "queryset.sample=56", "stages=[edit]")
    assert edited == [] and again["edit"].skipped == 56 and len(_edit_log(run_dir)) == 56


def test_an_extended_sample_scores_every_query_itself_and_its_rows_equal_a_run_from_scratch(tmp_path):
    import pandas as pd

    results = tmp_path / "results"
    _run(results, "oracle", "queryset.sample=7", "stages=[edit]")
    large = _run(results, "oracle", "queryset.sample=14")
    assert large["edit"].computed == 7
    # scores are never reused: every query of the new set is scored in its own run (FID is a set-level metric)
    assert large["score"].computed == 14 and large["score"].reused == 0
    _run(tmp_path / "scratch", "oracle", "queryset.sample=14")
    for table in ("leaderboard.csv", "leaderboard_by_type.csv"):
        a, b = (pd.read_csv(r / table) for r in (results, tmp_path / "scratch"))
        volatile = [c for c in a if c.endswith(("_at", "run_id"))]
        pd.testing.assert_frame_equal(a.drop(columns=volatile), b.drop(columns=volatile))


def test_extending_a_sample_of_a_diffusion_editor_stays_within_the_batch_tolerance(tmp_path, monkeypatch):
    """Tiny InstructPix2Pix at batch size 3: the reused edits ran in the smaller run's batches and the new ones in
    batches of new queries only, so a pixel may differ from a run from scratch by the batch tolerance (one 8-bit
    level, tests/test_editors.py), never more. The edits are compared, not the rows: the rows are the scores of
    these PNGs, and a level's difference moves them by an amount no test threshold could pin."""
    from pathlib import Path

    import hydra.utils
    import numpy as np
    from PIL import Image
    from test_editors import batch_tolerance_levels

    from editors.ip2p import InstructPix2PixEditor

    built: dict = {}
    instantiate = hydra.utils.instantiate

    def once(node, *args, **kwargs):  # one editor object for the three runs: the test times its load only once
        if str(node.get("_target_", "")).endswith("InstructPix2PixEditor"):
            return built.setdefault("ip2p", instantiate(node, *args, **kwargs))
        return instantiate(node, *args, **kwargs)

    monkeypatch.setattr(hydra.utils, "instantiate", once)
    edited = _count_edits(monkeypatch, InstructPix2PixEditor)
    extra = ("stages=[edit]", "batch_size=3", "preflight=false")
    results = tmp_path / "results"
    _run(results, "ip2p", "queryset.sample=4", *extra)
    large = _run(results, "ip2p", "queryset.sample=8", *extra)
    assert len(edited) == 8  # 4 + the 4 new ones
    scratch = _run(tmp_path / "scratch", "ip2p", "queryset.sample=8", *extra)
    assert large["editor_sig"] == scratch["editor_sig"]
    worst = 0
    for png in sorted((Path(scratch["run_dir"]) / "edits").glob("*.png")):
        a = np.asarray(Image.open(png), dtype=np.int16)
        b = np.asarray(Image.open(Path(large["run_dir"]) / "edits" / png.name), dtype=np.int16)
        worst = max(worst, int(np.abs(a - b).max()))
    assert worst <= batch_tolerance_levels()


# -- every query-set config takes the sample keys -------------------------------------------------------------------

SAMPLE_KEYS = {"sample": None, "sample_seed": 0}


def test_every_query_set_config_takes_the_same_sample_keys():
    from omegaconf import OmegaConf

    configs = sorted((ROOT / "configs" / "queryset").glob("*.yaml"))
    assert len(configs) >= 7
    for path in configs:
        node = OmegaConf.load(path)
        assert {k: node.get(k, "absent") for k in SAMPLE_KEYS} == SAMPLE_KEYS, path.name
        assert "sample_types" in node, path.name


def test_demo_editval_takes_a_sample_nested_stratified_and_its_own_set():
    from hydra.utils import instantiate

    from benchmark.commands.run import compose

    def load(*extra):
        cfg, _ = compose(["queryset=demo_editval", *extra])
        return instantiate(cfg.queryset)

    full, s9, s18 = load(), load("queryset.sample=9"), load("queryset.sample=18")
    assert (len(full), len(s9), len(s18)) == (21, 9, 18)
    assert s9.name == "demo_editval-sample9-seed0" and len({full.hash, s9.hash, s18.hash}) == 3
    assert {q.id for q in s9} <= {q.id for q in s18} <= {q.id for q in full}
    types = Counter(q.edit_type for q in full)
    assert Counter(q.edit_type for q in s9) == Counter(dict.fromkeys(types, 1))  # 9 types: one query of each
    info = s9.meta["sample"]
    assert (info["parent"], info["set_size"], info["pool"], info["n"]) == ("demo_editval", 21, 21, 9)
    # the same sample whichever way it is asked for; a bad request names the set and the fix
    assert load("queryset.sample=9", "queryset.sample_seed=0").hash == s9.hash
    with pytest.raises(Exception, match="demo_editval: sample=21 takes all"):
        load("queryset.sample=21")


def test_reuse_checks_each_edit_and_its_source_and_survives_a_lost_record(tmp_path, monkeypatch, capsys):
    import json
    from pathlib import Path

    from PIL import Image

    from editors.identity import IdentityEditor

    edited = _count_edits(monkeypatch, IdentityEditor)
    results = tmp_path / "results"
    small = Path(_run(results, "identity", "queryset.sample=7", "stages=[edit]")["run_dir"])
    bad = sorted((small / "edits").glob("*.png"))[0]
    Image.new("RGB", (20, 20), (9, 9, 9)).save(bad)  # not the source's size: fails the edit stage's own check
    edited.clear()
    large = Path(_run(results, "identity", "queryset.sample=14", "stages=[edit]")["run_dir"])
    assert len(edited) == 8 and bad.stem in edited  # the 7 new queries and the one whose edit failed the check
    log = _edit_log(large)
    assert sum("reused_from" in r for r in log.values()) == 6
    # a kill between the reused PNGs and their records: the rerun logs them again, edits nothing
    lines = (large / "edits.jsonl").read_text().splitlines()
    (large / "edits.jsonl").write_text("".join(f"{x}\n" for x in lines if "reused_from" not in x))
    edited.clear()
    _run(results, "identity", "queryset.sample=14", "stages=[edit]")
    assert edited == [] and sum("reused_from" in r for r in _edit_log(large).values()) == 6
    assert json.loads((large / "run.json").read_text())["reused_from"][small.relative_to(results).as_posix()][
        "edits"] == 6
    # a source whose recorded query-set hash no longer matches its queries is not used, and the console says why
    meta = json.loads((small / "run.json").read_text())
    (small / "run.json").write_text(json.dumps({**meta, "queryset_hash": "0" * 64}))
    capsys.readouterr()
    edited.clear()
    _run(tmp_path / "results", "identity", "queryset.sample=28", "stages=[edit]")
    assert "hash differs" in capsys.readouterr().out
