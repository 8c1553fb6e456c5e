"""Issues 22 and 23: a leaderboard row says when it is FAILED, PARTIAL (with the quarantine reason) or STALE, in the
CSV, `show` and the report; HATIE's Total is never a criteria-only mean; metric metadata is keyed by (metric set,
column); `show --queryset` of an unknown set fails. Synthetic run folders: each test takes well under a second."""

import hashlib
import json
import math
import os

import numpy as np
import pandas as pd
import pytest

from benchmark.commands.report.collect import read_leaderboards
from benchmark.commands.report.html import leaderboards_html
from benchmark.io.score_cache import INDEX_COLUMNS, INDEX_FILE
from benchmark.stages.aggregate import write_leaderboards
from benchmark.tables.leaderboard import main
from benchmark.tables.show import ShowError, render

QS_HASH = "f" * 64
IDS = [f"q{i:02d}" for i in range(10)]
BASIC = {"psnr": True, "l1": False}


def _png(qid: str, version: int = 0) -> bytes:
    """Stand-in edit bytes (the checks hash bytes, they never decode them)."""
    return f"edit {qid} v{version}".encode()


def make_run(results, editor="ed", *, sets=None, status=None, image_ids=None, edits=True, suite=None):
    """A run folder scored with each metric set of `sets` (name -> {column: higher_is_better}), one part per set;
    `status` (query id -> status, default ok) and, with `edits`, an edits folder whose bytes match the rows."""
    sets = sets or {"basic": BASIC}
    run_dir = results / "runs" / f"toy-{QS_HASH[:10]}" / f"{editor}-e{len(editor)}"
    if edits:
        (run_dir / "edits").mkdir(parents=True)
        for q in IDS:
            (run_dir / "edits" / f"{q}.png").write_bytes(_png(q))
    image_ids = image_ids or [f"img{i // 2}" for i in range(len(IDS))]
    status = status or {}
    scored = {}
    for name, columns in sets.items():
        sig = f"sig{name}"
        folder = run_dir / "scores" / sig
        folder.mkdir(parents=True)
        index = [[q, image_ids[i], f"t{i % 2}", "cls", ""] for i, q in enumerate(IDS)]
        (folder / INDEX_FILE).write_text(json.dumps({"format": 1, "queryset": "toy", "queryset_hash": QS_HASH,
                                                     "n_total": len(IDS), "columns": INDEX_COLUMNS, "rows": index}))
        st = [status.get(q, "ok") for q in IDS]
        shas = [hashlib.sha256(_png(q)).hexdigest() if s == "ok" else "" for q, s in zip(IDS, st, strict=True)]
        df = pd.DataFrame({"query_id": IDS, "image_id": image_ids, "edit_type": [r[2] for r in index],
                           "object_class": "cls", "status": st, "reason": ["boom" if s == "failed" else "" for s in st],
                           "edit_sha256": shas})
        for k, col in enumerate(columns):
            df[col] = [np.nan if s != "ok" else 0.1 * i + k for i, s in enumerate(st)]
        if suite:
            df["_fid_edit"] = [np.random.default_rng(i).normal(size=4).astype(np.float32) for i in range(len(IDS))]
            df["_fid_src"] = [np.random.default_rng(100 + i).normal(size=4).astype(np.float32) for i in range(len(IDS))]
        df.to_parquet(folder / "part-00000000000000000001-1-00000.parquet", index=False)
        info = {c: {"version": "1", "higher_is_better": hib, "description": f"{name} {c}"} for c, hib in columns.items()}
        order = list(columns)
        if suite:
            from benchmark.metrics.hatie.suite import COLUMN_INFO

            info |= {c: {"version": "1", "higher_is_better": h, "description": d} for c, (h, d) in COLUMN_INFO.items()
                     if c not in info}
        scored[sig] = {"metric_set": name, "metric_order": order, "column_order": list(info), "metrics": info,
                       "suite": suite}
    last_sig, last = next(reversed(scored.items()))
    meta = {"queryset": "toy", "queryset_hash": QS_HASH, "queryset_size": len(IDS), "editor": editor,
            "editor_sig": f"e{len(editor)}", "prompt_kind": "instruction", "profile": "tiny", "seed": 0,
            "git_sha": "abc", "versions": {"x": "1"}, "device": "cpu", "metric_sig": last_sig, **last, "scored": scored}
    (run_dir / "run.json").write_text(json.dumps(meta))
    return run_dir


def table(results, name="leaderboard.csv"):
    return pd.read_csv(results / name, keep_default_na=False, na_values=[""], dtype={"editor_sig": str})


def aggregate(results, **kw):
    write_leaderboards(results, None, 20, 0, **kw)


# -- item 4: every query failed ----------------------------------------------------------------------------------

def test_a_row_where_every_query_failed_is_marked_failed_everywhere(tmp_path):
    make_run(tmp_path, "broken", status=dict.fromkeys(IDS, "failed"))
    make_run(tmp_path, "half", status=dict.fromkeys(IDS[:3], "failed") | dict.fromkeys(IDS[3:], "missing"))
    aggregate(tmp_path)
    lb = table(tmp_path).set_index("editor")
    assert lb.loc["broken", "mark"] == "FAILED 10/10" and lb.loc["broken", "n_failed"] == 10
    assert lb.loc["half", "mark"] == "PARTIAL 3/10; FAILED 3/3"
    assert table(tmp_path, "leaderboard_by_type.csv").query("editor == 'broken'")["mark"].tolist() == ["FAILED 5/5"] * 2
    shown = render(tmp_path)
    line = next(x for x in shown.splitlines() if x.startswith("broken"))
    assert line.endswith("FAILED 10/10") and "complete" not in line
    html = leaderboards_html(read_leaderboards(tmp_path))
    assert '<span class="badge failed">FAILED 10/10</span>' in html


# -- item 5: the only score part quarantined -------------------------------------------------------------------

def test_a_run_whose_only_part_is_quarantined_stays_partial_with_the_reason(tmp_path):
    run_dir = make_run(tmp_path)
    part = next((run_dir / "scores" / "sigbasic").glob("part-*.parquet"))
    part.write_bytes(b"not parquet")
    with pytest.warns(UserWarning, match="not a readable Parquet file"):
        aggregate(tmp_path)
    r = table(tmp_path).iloc[0]
    assert (r["editor"], r["n_ok"], r["n_missing"], bool(r["complete"])) == ("ed", 0, 10, False)
    assert r["mark"].startswith("PARTIAL 0/10; 1 score part(s) quarantined") and "not a readable Parquet" in r["mark"]
    shown = render(tmp_path)
    assert "partial runs" in shown and "PARTIAL 0/10; 1 score part(s) quarantined" in shown
    assert "PARTIAL 0/10" in leaderboards_html(read_leaderboards(tmp_path))
    aggregate(tmp_path)  # from the cache: the same row
    assert table(tmp_path).iloc[0]["mark"] == r["mark"]


# -- item 6: an edit replaced after scoring --------------------------------------------------------------------

def test_an_edit_replaced_after_scoring_marks_the_row_stale(tmp_path):
    run_dir = make_run(tmp_path)
    aggregate(tmp_path)
    assert bool(table(tmp_path).iloc[0]["complete"]) and "STALE" not in render(tmp_path)
    edit = run_dir / "edits" / f"{IDS[3]}.png"
    edit.write_bytes(_png(IDS[3], version=1))
    later = (tmp_path / "leaderboard.csv").stat().st_mtime + 5
    os.utime(edit, (later, later))
    # show, before any aggregation: the edit is newer than the table (mtime suspects)
    shown = render(tmp_path)
    assert "STALE: 1 edit(s) newer than leaderboard.csv" in shown and "stale runs" in shown
    assert "STALE" in " ".join(read_leaderboards(tmp_path).notes)
    # aggregation (the cache entry too) notices and confirms by hash
    aggregate(tmp_path)
    r = table(tmp_path).iloc[0]
    assert r["mark"] == "STALE 1/10" and not bool(r["complete"])
    assert sorted(table(tmp_path, "leaderboard_by_type.csv")["mark"].fillna("")) == ["", "STALE 1/5"]
    assert "STALE 1/10" in render(tmp_path)
    assert '<span class="badge stale">STALE 1/10</span>' in leaderboards_html(read_leaderboards(tmp_path))
    cached = {n: (tmp_path / n).read_bytes() for n in ("leaderboard.csv", "leaderboard_by_type.csv")}
    aggregate(tmp_path, cache=False)
    assert cached == {n: (tmp_path / n).read_bytes() for n in cached}
    # the old bytes back (new stat, same hash): current again
    edit.write_bytes(_png(IDS[3]))
    aggregate(tmp_path)
    r = table(tmp_path).iloc[0]
    assert pd.isna(r["mark"]) and bool(r["complete"])


# -- item 7: HATIE's Total needs IQ ---------------------------------------------------------------------------

HATIE_SUITE = {"name": "hatie", "components": {"iq": "on"}}


def test_hatie_total_is_nan_with_a_reason_when_fid_cannot_be_computed(tmp_path):
    crit = {"OF": True, "BF": True, "OC": True, "BC": True}
    make_run(tmp_path, "one", sets={"hatie": crit}, suite=HATIE_SUITE, image_ids=["img0"] * len(IDS))
    make_run(tmp_path, "many", sets={"hatie": crit}, suite=HATIE_SUITE)
    aggregate(tmp_path)
    lb = table(tmp_path).set_index("editor")
    one, many = lb.loc["one"], lb.loc["many"]
    assert math.isnan(one["IQ"]) and math.isnan(one["Total"]) and math.isnan(one["Total_se"])
    assert one["mark"].startswith("Total NaN: no IQ") and "here 10 and 1" in one["mark"]
    assert "Total NaN: no IQ" in render(tmp_path)
    from benchmark.metrics.hatie.weights import W_TOTAL

    criteria = sum(W_TOTAL[k] * many[k] for k in crit) / sum(W_TOTAL[k] for k in crit)
    assert many["Total"] == pytest.approx(0.8 * criteria + 0.2 * many["IQ"], rel=1e-5) and pd.isna(many["mark"])


def test_hatie_total_is_nan_when_iq_is_off():
    from benchmark.metrics.hatie.summary import summarize

    ok = pd.DataFrame({"query_id": ["a", "b"], "image_id": ["i", "j"]})
    means, ses = {"OF": 0.5, "BF": 0.5, "OC": 0.5, "BC": 0.5}, dict.fromkeys(("OF", "BF", "OC", "BC"), 0.01)
    out = summarize(ok, means, ses, overall=True, components={"iq": "off"})
    assert math.isnan(out["Total"]) and out["note"].startswith("Total NaN: IQ is off")
    assert summarize(ok, means, ses, overall=False)["score"] == pytest.approx(0.5)  # per group: criteria by design


# -- item 8: two suites sharing a column name -----------------------------------------------------------------

def test_metric_sets_sharing_column_names_each_keep_their_columns(tmp_path):
    conventional = {"clip_i": True, "l1": False}
    make_run(tmp_path, "ed", sets={"basic": BASIC, "conventional": conventional})
    ev = {"rule": True, "dino": True}
    make_run(tmp_path, "ev", sets={"editval": ev})
    make_run(tmp_path, "evo", sets={"editval_oracle": ev})
    aggregate(tmp_path)
    metrics = pd.read_csv(tmp_path / "leaderboard_metrics.csv")
    pairs = set(zip(metrics["metric_set"], metrics["metric"], strict=True))
    assert {("basic", "l1"), ("conventional", "l1"), ("editval", "rule"), ("editval_oracle", "rule")} <= pairs
    assert metrics.loc[(metrics["metric_set"] == "basic") & (metrics["metric"] == "l1"), "description"].item() == "basic l1"
    shown = render(tmp_path)
    for mset, cols in (("basic", ("psnr↑", "l1↓")), ("conventional", ("clip_i↑", "l1↓")),
                       ("editval", ("rule↑", "dino↑")), ("editval_oracle", ("rule↑", "dino↑"))):
        header = shown[shown.index(f"metrics={mset} "):].splitlines()[1].split()
        assert all(c in header for c in cols), (mset, header)


# -- issue 23: show --queryset of an unknown set ---------------------------------------------------------------

def test_show_of_an_unknown_queryset_fails_naming_it_and_the_sets_there(tmp_path, capsys):
    make_run(tmp_path)
    aggregate(tmp_path)
    with pytest.raises(ShowError, match=r"--queryset 'nosuchset': no such query set .*; query sets there: toy$"):
        render(tmp_path, "nosuchset")
    assert main(["show", "--results", str(tmp_path), "--queryset", "nosuchset"]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'nosuchset'" in err and err.endswith("query sets there: toy")
    assert main(["show", "--results", str(tmp_path), "--queryset", "toy"]) == 0
