"""Incremental aggregation: cached per-run rows give the bytes of a full rebuild, and only changed runs recompute."""

import json
import os
import random
import shutil

import pandas as pd
import pytest
from synthetic_runs import add_part, ids, make_run, scoring

from benchmark.io.score_cache import ResultsWarning
from benchmark.stages.aggregate import write_leaderboards
from benchmark.tables import aggregate_cache
from benchmark.tables.aggregate_cache import CACHE_DIR, summarise
from benchmark.tables.leaderboard import tables_from_summaries

R, SEED = 50, 0  # bootstrap resamples: enough to make every SE differ by seed


def files(results):
    """Every table's bytes."""
    return {p.name: p.read_bytes() for p in sorted(results.glob("leaderboard*.csv"))}


def rebuild(results, n=R, seed=SEED):
    """A full rebuild (no cache) and the cached build; asserts they are the same bytes; returns the cache stats."""
    write_leaderboards(results, None, n, seed, cache=False)
    full = files(results)
    write_leaderboards(results, None, n, seed)
    assert files(results) == full
    return aggregate_cache.LAST_STATS


@pytest.fixture
def five(tmp_path):
    for k in range(4):
        make_run(tmp_path, "ed", {"guidance_scale": 5.0 + k}, metric_sets=("basic",), partial=k % 2)
    make_run(tmp_path, "hat", {"steps": 10}, metric_sets=("basic", "hatie"))
    return tmp_path


def test_cached_tables_are_byte_identical_to_a_full_rebuild(five):
    first = rebuild(five)
    assert (first.reused, first.computed) == (0, 6)  # 4 basic runs + one run with two metric sets
    again = rebuild(five)
    assert (again.reused, again.computed) == (6, 0)
    assert len(list((five / CACHE_DIR).glob("*.json"))) == 6
    lb = pd.read_csv(five / "leaderboard.csv")
    assert {"Total", "psnr_se", "set.guidance_scale"} <= set(lb.columns)


def test_adding_one_run_recomputes_only_that_run(five):
    rebuild(five)
    new = make_run(five, "ed", {"guidance_scale": 9.0})
    stats = rebuild(five)
    assert (stats.reused, stats.computed) == (6, 1) and stats.computed_runs == [f"{new.relative_to(five).as_posix()} [sigbasic]"]
    assert (pd.read_csv(five / "leaderboard.csv")["set.guidance_scale"] == 9.0).sum() == 1


def test_a_rescored_run_is_recomputed_and_its_rows_change(five):
    rebuild(five)
    run = sorted((five / "runs").glob("*/ed-*"))[0]
    before = pd.read_csv(five / "leaderboard.csv").set_index("editor_sig").loc[run.name[3:], "psnr"]
    add_part(run, "basic", ids(12), shift=10.0)
    stats = rebuild(five)
    assert (stats.reused, stats.computed) == (5, 1)
    after = pd.read_csv(five / "leaderboard.csv").set_index("editor_sig").loc[run.name[3:], "psnr"]
    assert after > 10 > before


def test_a_deleted_run_leaves_the_tables_and_the_cache(five):
    rebuild(five)
    run = sorted((five / "runs").glob("*/hat-*"))[0]
    shutil.rmtree(run)
    stats = rebuild(five)
    assert (stats.computed, stats.pruned) == (0, 2)  # its two metric sets' entries are deleted
    lb = pd.read_csv(five / "leaderboard.csv")
    assert "hat" not in set(lb["editor"]) and "Total" not in lb
    assert len(list((five / CACHE_DIR).glob("*.json"))) == 4


def test_changed_resamples_or_seed_recompute_every_run(five):
    rebuild(five)
    assert summarise(five, None, R + 1, SEED)[1].computed == 6
    assert summarise(five, None, R + 1, SEED + 1)[1].computed == 6
    assert rebuild(five, n=R + 1, seed=SEED + 1).computed == 0


def test_changed_code_or_run_json_recomputes_but_a_new_timestamp_does_not(five, monkeypatch):
    rebuild(five)
    meta_path = sorted((five / "runs").glob("*/ed-*/run.json"))[0]
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps(meta | {"updated_at": "2027-01-01T00:00:00"}))
    assert summarise(five, None, R, SEED)[1].computed == 0
    # nor does the counted work of another invocation (a rerun that edited nothing records zeros there)
    work = {"queries": 0, "work": {"unet_forward": 0}, "per_query": {}}
    meta_path.write_text(json.dumps(meta | {"edit_work": {"0123456789ab": work}}))
    assert summarise(five, None, R, SEED)[1].computed == 0
    meta_path.write_text(json.dumps(meta | {"editor_info": meta["editor_info"] | {"guidance_scale": 1.0}}))
    assert summarise(five, None, R, SEED)[1].computed == 1
    monkeypatch.setattr(aggregate_cache, "code_version", lambda: "another version of the code")
    assert summarise(five, None, R, SEED)[1].computed == 6


def _entry(results):
    return sorted((results / CACHE_DIR).glob("*.json"))[0]


DAMAGE = {
    "garbage": lambda p: p.write_bytes(os.urandom(200)),
    "truncated": lambda p: p.write_bytes(p.read_bytes()[:-50]),
    "not an object": lambda p: p.write_text("[1, 2]"),
    "other format": lambda p: p.write_text(json.dumps(json.loads(p.read_text()) | {"format": 99})),
    # one number changed, checksum kept: the checksum no longer matches
    "edited value": lambda p: p.write_text(p.read_text().replace('"n_ok":', '"n_ok":1', 1)),
    "missing table": lambda p: p.write_text(json.dumps(
        (e := json.loads(p.read_text())) | {"rows": {k: v for k, v in e["rows"].items() if k != "leaderboard.csv"}})),
    "non-scalar cell": lambda p: p.write_text(json.dumps(
        (e := json.loads(p.read_text())) | {"rows": {k: [r | {"n_ok": [1]} for r in v] for k, v in e["rows"].items()}})),
}


def test_a_damaged_cache_entry_is_recomputed_with_a_warning(five):
    rebuild(five)
    for damage, apply in DAMAGE.items():
        apply(_entry(five))
        with pytest.warns(ResultsWarning, match="aggregate cache entry not used"):
            _, stats = summarise(five, None, R, SEED)
        assert (stats.reused, stats.computed, stats.damaged) == (5, 1, 1), damage
    assert rebuild(five).computed == 0  # rewritten: clean again, and the tables are those of a full rebuild


def test_an_entry_of_another_run_in_a_slot_is_not_used(five):
    rebuild(five)
    a, b = sorted((five / CACHE_DIR).glob("*.json"))[:2]
    b.write_bytes(a.read_bytes())
    with pytest.warns(ResultsWarning, match="entry of another run"):
        assert rebuild(five).computed == 1


def test_rows_computed_while_a_part_is_written_are_not_stored(five, monkeypatch):
    from benchmark.tables import leaderboard

    run = sorted((five / "runs").glob("*/ed-*"))[0]
    real = leaderboard.run_rows

    def with_a_shard_writing(r, n, seed):
        if r.path == run:  # a shard adds a part after the parts were read
            add_part(run, "basic", ids(3), shift=5.0)
        return real(r, n, seed)

    monkeypatch.setattr(leaderboard, "run_rows", with_a_shard_writing)
    summarise(five, None, R, SEED)
    monkeypatch.setattr(leaderboard, "run_rows", real)
    stats = rebuild(five)
    assert stats.computed == 1 and stats.computed_runs[0].startswith(run.relative_to(five).as_posix())


def test_a_quarantined_part_is_cached_without_it(five):
    run = sorted((five / "runs").glob("*/ed-*"))[0]
    bad = run / "scores" / "sigbasic" / "part-50000000000000000000-1-00000.parquet"
    bad.write_bytes(b"PAR1 not parquet")
    with pytest.warns(ResultsWarning, match="not a readable Parquet"):
        summarise(five, None, R, SEED)  # quarantined while its run's rows are computed: stored without it
    assert not bad.exists() and rebuild(five).computed == 0


def test_tables_do_not_depend_on_the_order_of_the_runs(five):
    summaries, _ = summarise(five, None, R, SEED)
    expected = tables_from_summaries(summaries)
    for k in range(3):
        shuffled = summaries[:]
        random.Random(k).shuffle(shuffled)
        got = tables_from_summaries(shuffled)
        for name, df in expected.items():
            pd.testing.assert_frame_equal(got[name], df)


def test_a_read_only_results_folder_still_gets_tables(five, monkeypatch):
    from benchmark.io import fileio

    def refuse(path, text):
        if CACHE_DIR in str(path):
            raise PermissionError("read-only")
        return real(path, text)

    real = fileio.atomic_write_text
    monkeypatch.setattr(fileio, "atomic_write_text", refuse)
    with pytest.warns(ResultsWarning, match="could not write the aggregate cache entry"):
        summaries, stats = summarise(five, None, R, SEED)
    assert stats.computed == 6 and len(summaries) == 6


def test_metric_sig_filter_uses_the_cache_and_keeps_other_entries(five):
    rebuild(five)
    _, stats = summarise(five, scoring("hatie")[0], R, SEED)
    assert (stats.reused, stats.computed, stats.pruned) == (1, 0, 0)
    assert len(list((five / CACHE_DIR).glob("*.json"))) == 6


def test_the_same_scores_under_a_new_editor_signature_keep_their_standard_errors(tmp_path):
    # carry-over moves a run's edits to a new key; the same scores must give the same bootstrap SEs
    run_dir = make_run(tmp_path, "ed", {"steps": 10}, metric_sets=("basic",))
    before, _ = summarise(tmp_path, None, R, SEED)
    meta = json.loads((run_dir / "run.json").read_text())
    meta["editor_sig"] = "f" * 10
    moved = run_dir.with_name("ed-" + "f" * 10)
    run_dir.rename(moved)
    (moved / "run.json").write_text(json.dumps(meta, sort_keys=True))
    after, _ = summarise(tmp_path, None, R, SEED)
    for name, rows in before[0].rows.items():
        ses = [{k: v for k, v in row.items() if k.endswith("_se")} for row in rows]
        assert ses == [{k: v for k, v in row.items() if k.endswith("_se")} for row in after[0].rows[name]], name
        assert any(s for s in ses) or name != "leaderboard.csv"
