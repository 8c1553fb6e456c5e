"""Issue 11, result side: completeness is explicit, nothing under results/ is executed or trusted unchecked,
scores follow the edit bytes, and no leaderboard value depends on shards, part order or interruptions."""

import json
import os
import re
import shutil
import sys
import time

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT, run_demo
from PIL import Image

from benchmark.io.fileio import remove_stale_tmp
from benchmark.io.score_cache import INDEX_COLUMNS, INDEX_FILE, QUARANTINE_DIR, ResultsWarning
from benchmark.querysets.io import load_queryset, write_queries
from benchmark.stages.aggregate import write_leaderboards
from benchmark.tables.leaderboard import build_tables, collect_runs, format_table

TABLE_NAMES = ("leaderboard.csv", "leaderboard_by_type.csv", "leaderboard_by_class.csv")
SIG = "msig"
SHA = "ab" * 32


# -- synthetic run folders ---------------------------------------------------------------------------------------

def _meta(**over):
    meta = {"queryset": "toy", "queryset_hash": "f" * 64, "queryset_size": 0, "editor": "ed", "editor_sig": "e1",
            "prompt_kind": "instruction", "profile": "tiny", "seed": 0, "metric_sig": SIG, "git_sha": "abc",
            "versions": {"x": "1"}, "device": "cpu", "metric_order": ["m"], "column_order": ["m"],
            "metrics": {"m": {"version": "1", "higher_is_better": True, "description": "toy"}}, "suite": None}
    return meta | over


def make_run(results, ids, parts, editor="ed", excluded=(), **meta_over):
    """A run folder with run.json, the query index of `ids` (types t0/t1 alternating) and the given parts."""
    run_dir = results / "runs" / "toy-ffffffffff" / f"{editor}-e1"
    folder = run_dir / "scores" / SIG
    folder.mkdir(parents=True)
    rows = [[q, f"img{i // 2}", f"t{i % 2}", "cls", "not scored" if q in excluded else ""] for i, q in enumerate(ids)]
    (folder / INDEX_FILE).write_text(json.dumps({"format": 1, "queryset": "toy", "queryset_hash": "f" * 64,
                                                 "n_total": len(ids), "columns": INDEX_COLUMNS, "rows": rows}))
    (run_dir / "run.json").write_text(json.dumps(_meta(editor=editor, queryset_size=len(ids)) | meta_over))
    for n, df in enumerate(parts):
        df.to_parquet(folder / f"part-{n:020d}-1-00000.parquet", index=False)
    return run_dir


def rows(ids, status="ok", values=None, **extra):
    i = {q: n for n, q in enumerate(sorted(ids))}
    df = pd.DataFrame({"query_id": list(ids), "image_id": [f"img{i[q] // 2}" for q in ids],
                       "edit_type": [f"t{i[q] % 2}" for q in ids], "object_class": "cls", "status": status,
                       "reason": "", "edit_sha256": SHA if status == "ok" else ""})
    df["m"] = values if values is not None else np.linspace(0, 1, len(ids))
    for k, v in extra.items():
        df[k] = v
    return df


IDS = [f"q{i:02d}" for i in range(10)]


def overall(results):
    runs = collect_runs(results, SIG)
    return build_tables(runs, 200, 0)["leaderboard.csv"]


# -- completeness ------------------------------------------------------------------------------------------------

def test_counts_are_against_the_full_query_set(tmp_path):
    part = pd.concat([rows(IDS[:4]), rows(IDS[4:5], "failed", [np.nan]), rows(IDS[5:6], "missing", [np.nan])])
    make_run(tmp_path, IDS, [part])
    r = overall(tmp_path).iloc[0]
    assert (r["n_selected"], r["n_total"], r["n_ok"], r["n_failed"], r["n_missing"]) == (6, 10, 4, 1, 5)
    assert not r["complete"] and r["mark"] == "PARTIAL 5/10"
    by_type = build_tables(collect_runs(tmp_path, SIG), 200, 0)["leaderboard_by_type.csv"]
    assert list(by_type["n_total"]) == [5, 5] and not by_type["complete"].any()


def test_a_full_run_is_complete_and_excluded_queries_are_not_owed(tmp_path):
    part = pd.concat([rows(IDS[:8]), rows(IDS[8:9], "failed", [np.nan]), rows(IDS[9:], "excluded", [np.nan])])
    make_run(tmp_path, IDS, [part], excluded={IDS[9]})
    r = overall(tmp_path).iloc[0]
    assert (r["n_total"], r["n_ok"], r["n_failed"], r["n_missing"], r["complete"], r["mark"]) == (9, 8, 1, 0, True, "")


def test_partial_rows_sort_after_complete_ones_and_show_marks_them(tmp_path):
    make_run(tmp_path, IDS, [rows(IDS[:3])], editor="aaa")  # alphabetically first, but partial
    make_run(tmp_path, IDS, [rows(IDS)], editor="zzz")
    write_leaderboards(tmp_path, SIG, 100, 0)
    for name in TABLE_NAMES:
        df = pd.read_csv(tmp_path / name)
        assert {"n_selected", "n_total", "n_missing", "complete", "mark"} <= set(df.columns), name
        assert list(df.drop_duplicates("editor")["editor"]) == ["zzz", "aaa"], name
        assert df.loc[df["editor"] == "aaa", "mark"].str.startswith("PARTIAL").all(), name
    shown = format_table(tmp_path)
    assert shown.index("zzz") < shown.index("partial runs") < shown.index("aaa")
    assert "PARTIAL 3/10" in shown


def test_show_flags_tables_older_than_the_score_parts(tmp_path):
    run_dir = make_run(tmp_path, IDS, [rows(IDS)], editor_sig="0123456789")
    write_leaderboards(tmp_path, SIG, 100, 0)
    shown = format_table(tmp_path)
    assert "NOTE" not in shown and "01234567" in shown  # an all-digit signature keeps its leading zero
    later = run_dir / "scores" / SIG / "part-99999999999999999999-1-00000.parquet"
    rows(IDS[:2], values=[5.0, 5.0]).to_parquet(later, index=False)  # scored again, not aggregated since
    t = (tmp_path / "leaderboard.csv").stat().st_mtime + 10
    os.utime(later, (t, t))
    shown = format_table(tmp_path)
    assert shown.startswith(f"NOTE: 1 score part(s) were written after leaderboard.csv (e.g. {later})")
    assert "stages=[aggregate]" in shown
    write_leaderboards(tmp_path, SIG, 100, 0)
    os.utime(tmp_path / "leaderboard.csv", (t + 1, t + 1))
    assert "NOTE" not in format_table(tmp_path)
    (tmp_path / "leaderboard_metrics.csv").unlink()
    assert "leaderboard_metrics.csv is missing, so no metric column is shown" in format_table(tmp_path)


def test_query_index_ids_are_built_once():
    # callers test membership once per query: rebuilding the set on each access made a 10k-query check take 4 s
    from benchmark.io.score_cache import QueryIndex

    idx = QueryIndex("toy", "f" * 64, tuple((q, None, None, None, "") for q in IDS))
    assert idx.ids is idx.ids and idx.ids == frozenset(IDS)


# -- nothing executed, nothing trusted unchecked -----------------------------------------------------------------

def test_run_json_summary_path_is_never_imported(tmp_path, monkeypatch):
    (tmp_path / "planted_summary.py").write_text("import pathlib\npathlib.Path(__file__).with_suffix('.ran').touch()\n"
                                                 "def f(*a, **k):\n    return {'m': 1e9}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    suite = {"name": "planted", "summary": "planted_summary:f", "components": {}}
    make_run(tmp_path, IDS, [rows(IDS)], suite=suite)
    with pytest.warns(ResultsWarning, match="unknown suite 'planted'"):
        r = overall(tmp_path).iloc[0]
    assert "planted_summary" not in sys.modules and not (tmp_path / "planted_summary.ran").exists()
    assert "UNKNOWN SUITE" in r["mark"] and r["m"] == pytest.approx(0.5)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "bad_json", "missing_field", "wrong_type", "scored_not_a_dict",
                                    "scored_entry_malformed"])
def test_a_broken_run_json_skips_that_run_only(tmp_path, damage):
    bad = make_run(tmp_path, IDS, [rows(IDS)], editor="bad")
    make_run(tmp_path, IDS, [rows(IDS)], editor="good")
    text = (bad / "run.json").read_text()
    meta = json.loads(text)
    (bad / "run.json").write_bytes({
        "garbage": os.urandom(64), "truncated": text[: len(text) // 2].encode(), "bad_json": b"[" * 100000,
        "missing_field": json.dumps({k: v for k, v in meta.items() if k != "editor_sig"}).encode(),
        "wrong_type": json.dumps(meta | {"queryset_size": "10"}).encode(),
        "scored_not_a_dict": json.dumps(meta | {"scored": ["m"]}).encode(),
        "scored_entry_malformed": json.dumps(meta | {"scored": {SIG: {"metrics": {"m": 5}}}}).encode()}[damage])
    with pytest.warns(ResultsWarning, match=r"bad-e1.run\.json.*skipped"):
        df = overall(tmp_path)
    assert list(df["editor"]) == ["good"]


def _object_part():
    import pyarrow as pa
    import pyarrow.parquet as pq

    def write(path):
        df = rows(IDS[:3])
        df["m"] = ["1", "2", "x"]  # numbers as strings: an object array
        pq.write_table(pa.Table.from_pandas(df), path)
    return write


PLANTED = {
    "extra ids": (lambda p: rows(["q00", "evil1", "evil2"], values=[99.0] * 3).to_parquet(p), "not in this run"),
    "garbage": (lambda p: p.write_bytes(b"PAR1" + os.urandom(300)), "not a readable Parquet"),
    "truncated": (lambda p: (rows(IDS[:5]).to_parquet(p), p.write_bytes(p.read_bytes()[:-40])), "not a readable"),
    "object array": (_object_part(), "wrong type"),
    "missing column": (lambda p: rows(IDS[:3]).drop(columns="edit_sha256").to_parquet(p), "missing required"),
    "bad status": (lambda p: rows(IDS[:3], status="great").to_parquet(p), "unknown status"),
    "ok without sha": (lambda p: rows(IDS[:3]).assign(edit_sha256="").to_parquet(p), "edit_sha256"),
    # not a regular file: a FIFO would block the reader forever, a symlink would read rows from outside the run
    "directory": (lambda p: p.mkdir(), "a directory"),
    "fifo": (lambda p: os.mkfifo(p), "a FIFO"),
    "symlink": (lambda p: (rows(IDS[:3], values=[99.0] * 3).to_parquet(p.with_name("elsewhere")),
                           p.symlink_to(p.with_name("elsewhere"))), "a symbolic link"),
}


@pytest.mark.timeout(60, method="thread")  # a FIFO read blocks in C, past a signal
@pytest.mark.parametrize("case", list(PLANTED))
def test_a_planted_or_damaged_part_is_quarantined_with_a_reason(tmp_path, case):
    plant, why = PLANTED[case]
    run_dir = make_run(tmp_path, IDS, [rows(IDS, values=np.full(10, 0.5))])
    planted = run_dir / "scores" / SIG / "part-99999999999999999999-1-00000.parquet"  # sorts last: would win
    plant(planted)
    with pytest.warns(ResultsWarning, match=why):
        r = overall(tmp_path).iloc[0]
    assert r["m"] == 0.5 and r["n_ok"] == 10 and r["complete"]  # the honest rows, untouched
    assert not planted.exists()
    moved = run_dir / "scores" / SIG / QUARANTINE_DIR / planted.name
    assert os.path.lexists(moved) and why in (moved.parent / f"{planted.name}.reason.txt").read_text()
    overall(tmp_path)  # and the next read is clean: no crash, nothing left to quarantine


def test_a_bad_query_index_skips_the_run(tmp_path):
    run_dir = make_run(tmp_path, IDS, [rows(IDS)])
    (run_dir / "scores" / SIG / INDEX_FILE).write_text('{"format": 1, "rows": "x"}')
    with pytest.warns(ResultsWarning, match="queries.json"):
        assert overall(tmp_path).empty


# -- order independence -------------------------------------------------------------------------------------------

def _hatie_like(ids, rng):
    crit = {c: rng.random(len(ids)) for c in ("OF", "BF", "OC", "BC")}
    df = rows(ids, **crit)
    df["_fid_edit"] = [rng.normal(size=4).astype(np.float32) for _ in ids]
    df["_fid_src"] = [rng.normal(size=4).astype(np.float32) for _ in ids]
    return df


def test_tables_do_not_depend_on_how_rows_are_split_into_parts(tmp_path):
    from benchmark.metrics.hatie.suite import COLUMN_INFO

    ids = [f"q{i:03d}" for i in range(60)]
    full = _hatie_like(ids, np.random.default_rng(0))
    suite = {"name": "hatie", "components": {"iq": "on"}}
    meta = {"metric_order": ["OF", "BF", "OC", "BC"], "column_order": list(COLUMN_INFO), "suite": suite,
            "metrics": {c: {"version": "1", "higher_is_better": hib, "description": d}
                        for c, (hib, d) in COLUMN_INFO.items()}}
    out = []
    for n, split in enumerate([[full], [full.iloc[::-1]], [full.iloc[1::2], full.iloc[::2]],
                               [full.sample(frac=1, random_state=3).iloc[i::3] for i in range(3)]]):
        make_run(tmp_path / str(n), ids, split, **meta)
        out.append(build_tables(collect_runs(tmp_path / str(n), SIG), 300, 0))
    for name in TABLE_NAMES:
        for other in out[1:]:
            pd.testing.assert_frame_equal(out[0][name], other[name])
    assert np.isfinite(out[0]["leaderboard.csv"]["IQ_se"]).all()


# -- score stage: current, recomputed -----------------------------------------------------------------------------

def mini_demo(tmp_path, n):
    """A copy of the demo set with its first `n` queries (name: demo)."""
    src = load_queryset(ROOT / "datasets" / "demo")
    root = tmp_path / "qs"
    shutil.copytree(ROOT / "datasets" / "demo", root)
    write_queries(root / "queries.jsonl", src.queries[:n])
    return root


def _stage_setup(tmp_path, n=6):
    from benchmark.stages.edit import run_edit_stage
    from editors.identity import IdentityEditor

    qs = load_queryset(mini_demo(tmp_path, n))
    run_edit_stage(qs, IdentityEditor(), tmp_path / "run", seed=0, progress=False)
    return qs


def test_changed_edit_bytes_are_rescored(tmp_path):
    from benchmark.metrics.pixel import PixelMetric
    from benchmark.stages.edit import edit_path
    from benchmark.stages.score import read_scores, run_score_stage

    qs = _stage_setup(tmp_path)
    metrics = {"l1": PixelMetric("l1")}
    run_score_stage(qs, tmp_path / "run", metrics, "sig", progress=False)
    q = qs.queries[2]
    path = edit_path(tmp_path / "run", q.id)
    img = Image.open(path).convert("RGB")
    Image.fromarray(255 - np.asarray(img)).save(path)  # same name, new bytes
    st = run_score_stage(qs, tmp_path / "run", metrics, "sig", progress=False)
    assert (st.computed, st.reused) == (1, 5)
    df = read_scores(tmp_path / "run", "sig").set_index("query_id")
    assert df.loc[q.id, "l1"] > 0.1 and (df.drop(index=q.id)["l1"] == 0).all()
    import hashlib
    assert df.loc[q.id, "edit_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_failed_row_follows_the_latest_failure_reason(tmp_path):
    from benchmark.io.fileio import append_jsonl
    from benchmark.metrics.pixel import PixelMetric
    from benchmark.stages.edit import EDITS_LOG, edit_path
    from benchmark.stages.score import read_scores, run_score_stage

    qs = _stage_setup(tmp_path)
    metrics = {"l1": PixelMetric("l1")}
    q = qs.queries[0]
    edit_path(tmp_path / "run", q.id).unlink()
    for reason in ("ValueError: first try", "RuntimeError: the retry failed otherwise"):
        append_jsonl(tmp_path / "run" / EDITS_LOG, [{"query_id": q.id, "status": "failed", "seed": 0, "reason": reason}])
        run_score_stage(qs, tmp_path / "run", metrics, "sig", progress=False)
        row = read_scores(tmp_path / "run", "sig").set_index("query_id").loc[q.id]
        assert (row["status"], row["reason"]) == ("failed", reason)
    assert run_score_stage(qs, tmp_path / "run", metrics, "sig", progress=False).reused == len(qs)


def test_a_rerun_hashes_only_the_edits_written_since(tmp_path, monkeypatch):
    import benchmark.io.filehash as fh
    from benchmark.metrics.pixel import PixelMetric
    from benchmark.stages.edit import edit_path
    from benchmark.stages.score import run_score_stage

    qs = _stage_setup(tmp_path)
    metrics = {"l1": PixelMetric("l1")}
    reads = []
    real = fh.sha256_file
    monkeypatch.setattr(fh, "sha256_file", lambda p: reads.append(os.path.basename(p)) or real(p))
    run_score_stage(qs, tmp_path / "run", metrics, "sig", progress=False)
    assert sorted(reads) == sorted(f"{q.id}.png" for q in qs.queries)
    reads.clear()
    assert run_score_stage(qs, tmp_path / "run", metrics, "sig", progress=False).reused == len(qs)
    assert reads == []  # nothing changed: no edit is read again to be hashed
    q = qs.queries[1]
    Image.new("RGB", Image.open(edit_path(tmp_path / "run", q.id)).size, (9, 9, 9)).save(edit_path(tmp_path / "run", q.id))
    st = run_score_stage(qs, tmp_path / "run", metrics, "sig", progress=False)
    assert reads == [f"{q.id}.png"] and (st.computed, st.reused) == (1, len(qs) - 1)


@pytest.mark.parametrize("bad", ["{not json", '["a list"]', '{"query_id": 3, "status": "ok"}'])
def test_a_corrupt_edit_log_is_one_error_naming_it_and_the_fix(tmp_path, bad):
    from benchmark.io.errors import CorruptRunFile
    from benchmark.stages.edit import EDITS_LOG, latest_records

    _stage_setup(tmp_path, n=3)
    log = tmp_path / "run" / EDITS_LOG
    lines = log.read_text().splitlines()
    log.write_text("\n".join([lines[0], bad, *lines[1:]]) + "\n")  # not the last line: not a torn write
    with pytest.raises(CorruptRunFile, match=rf"{re.escape(str(log))}.*Move {re.escape(str(log))} aside and rerun"):
        latest_records(tmp_path / "run")


def test_a_garbage_part_is_moved_aside_and_its_rows_recomputed(tmp_path):
    from benchmark.metrics.pixel import PixelMetric
    from benchmark.stages.score import read_scores, run_score_stage, scores_dir

    qs = _stage_setup(tmp_path)
    metrics = {"l1": PixelMetric("l1")}
    run_score_stage(qs, tmp_path / "run", metrics, "sig", progress=False)
    (part,) = scores_dir(tmp_path / "run", "sig").glob("part-*.parquet")
    part.write_bytes(b"garbage")
    with pytest.warns(ResultsWarning, match=part.name):
        st = run_score_stage(qs, tmp_path / "run", metrics, "sig", progress=False)
    assert st.computed == 6 and len(read_scores(tmp_path / "run", "sig")) == 6
    assert (part.parent / QUARANTINE_DIR / part.name).is_file()


def test_stale_tmp_files_are_removed_and_nothing_else(tmp_path):
    import subprocess

    from benchmark.io.fileio import _TMP_OWNER, TMP_NAME, _host, atomic_path

    dead = subprocess.Popen(["true"])
    dead.wait()
    host, now = _host(), time.time()
    with atomic_path(tmp_path / "real.txt") as real_tmp:  # the pattern remove_stale_tmp matches is atomic_path's own
        pass
    files = {  # name -> (age in s, expected to be removed)
        "edits/.q1.png.ab12cd_3.tmp": (3600, True),  # old, from before the owner was recorded
        f"edits/.q2.png.{host}-{dead.pid}.abcdefgh.tmp": (1, True),  # its writer on this host is gone
        f".run.json.{host}-{os.getppid()}.zzzzzzzz.tmp": (1, False),  # a live writer (a concurrent shard)
        ".run.json.otherhost-1.zzzzzzzz.tmp": (1, False),  # another machine's writer, still fresh
        f".x.{host}-{dead.pid}.abcdefgh.tmp": (-5, False),  # newer than the run start
        "edits/notes.tmp": (3600, False),  # not atomic_path's pattern
        f"edits/.q3.png.{host}-{os.getpid()}.abcdefgh.tmp": (1, True),  # this process, from before this run
    }
    files_list = list(files)
    for name, (age, _) in files.items():
        p = tmp_path / name
        p.parent.mkdir(exist_ok=True)
        p.write_text("x")
        os.utime(p, (now - age, now - age))
    assert not real_tmp.exists() and (tmp_path / "real.txt").exists()
    owner = _TMP_OWNER.fullmatch(real_tmp.name)
    assert TMP_NAME.fullmatch(real_tmp.name) and owner and owner["pid"] == str(os.getpid())
    top = remove_stale_tmp(tmp_path, now, recursive=False)
    assert top == [] and (tmp_path / files_list[0]).exists()  # the old one is in edits/: not at the top level
    assert remove_stale_tmp(tmp_path, now) == sorted(tmp_path / n for n, (_, gone) in files.items() if gone)
    assert all((tmp_path / n).exists() for n, (_, gone) in files.items() if not gone)


# -- end to end: selections, shards, resumption ------------------------------------------------------------------

def _tables(results):
    return {n: (results / n).read_text() for n in TABLE_NAMES}


def test_limit_then_full_run_ends_complete_and_equals_an_uninterrupted_run(tmp_path):
    root = mini_demo(tmp_path, 10)
    args = (f"queryset.root={root}",)
    run_demo(tmp_path / "a", "overedit", *args, "limit=5")
    for name in TABLE_NAMES:
        df = pd.read_csv(tmp_path / "a" / name, keep_default_na=False)
        # a group is complete exactly when none of its queries is missing; every other row carries the mark
        assert (df["complete"] == (df["n_missing"] == 0)).all() and not df["complete"].all(), name
        assert (df["mark"].str.startswith("PARTIAL") == ~df["complete"]).all(), name
        assert df["n_total"].sum() == 10 or name == "leaderboard_by_class.csv", name
    assert pd.read_csv(tmp_path / "a" / TABLE_NAMES[0])["mark"].iloc[0] == "PARTIAL 5/10"
    run_demo(tmp_path / "a", "overedit", *args)
    run_demo(tmp_path / "b", "overedit", *args)
    assert pd.read_csv(tmp_path / "a" / TABLE_NAMES[0])["complete"].all()
    assert _tables(tmp_path / "a") == _tables(tmp_path / "b")


def test_k_shards_merged_equal_one_run_on_every_value(tmp_path):
    root = mini_demo(tmp_path, 14)
    results = {}
    for k in (1, 2, 3):
        out = tmp_path / f"k{k}"
        for i in range(k):
            run_demo(out, "overedit", f"queryset.root={root}", f"shard.index={i}", f"shard.count={k}",
                     f"batch_size={3 + i}")
        results[k] = _tables(out)
        assert pd.read_csv(out / TABLE_NAMES[0])["complete"].all()
    assert results[1] == results[2] == results[3]
