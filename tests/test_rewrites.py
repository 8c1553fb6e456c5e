"""Rewrite-then-edit is marked (issue 43 §6, docs/editors.md "Editors that rewrite the instruction"): an editor that
declares `rewrites_instruction` hands back the text per query; the edit records keep it, the declaration enters the
editor signature, and the leaderboard column, `editmeter show` and the report mark its rows, through the real
pipeline with a tiny test editor that appends a phrase; an editor that does not rewrite is unmarked. Edits made
elsewhere declare it with `editmeter score --rewritten FILE`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import HELPERS, ROOT, child_pythonpath, run_demo
from rewriting_editor import PHRASE

from benchmark.stages.edit import EDITS_LOG

FAST = ("limit=3", "metrics=basic", "batch_size=2")


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / EDITS_LOG).read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def results(tmp_path_factory, demo_qs):
    root = tmp_path_factory.mktemp("rewrites")
    rewriter = run_demo(root, "identity", "editor._target_=rewriting_editor.AppendsPhrase", *FAST)
    plain = run_demo(root, "identity", *FAST)
    return root, Path(rewriter["run_dir"]), Path(plain["run_dir"])


def test_records_keep_each_rewritten_text_and_plain_records_have_none(results, demo_qs):
    _, rewriter, plain = results
    by_id = {q.id: q for q in demo_qs}
    recs = _records(rewriter)
    assert len(recs) == 3 and all(r["status"] == "ok" for r in recs)
    assert all(r["rewritten"] == by_id[r["query_id"]].instruction + PHRASE for r in recs)
    assert all("rewritten" not in r for r in _records(plain))  # other editors' records keep their old form
    assert json.loads((rewriter / "run.json").read_text())["rewrites_instruction"] is True
    assert json.loads((plain / "run.json").read_text())["rewrites_instruction"] is False


def test_the_declaration_enters_the_editor_signature():
    from benchmark.plan.config import editor_signature

    cfg = {"_target_": "editors.identity.IdentityEditor"}
    plain = editor_signature(cfg, {"name": "identity"}, 0, "tiny")
    assert editor_signature(cfg, {"name": "identity"}, 0, "tiny", False) == plain  # unchanged for the others
    assert editor_signature(cfg, {"name": "identity"}, 0, "tiny", True) != plain


def test_leaderboard_column_show_and_report_mark_the_rewriting_row_only(results, tmp_path):
    from benchmark.commands.report import build_report
    from benchmark.tables.show import REWRITE_NOTE, render

    root, rewriter, plain = results
    lb = pd.read_csv(root / "leaderboard.csv")
    marks = dict(zip(lb["editor_sig"].str[:8], lb["rewrites_instruction"], strict=True))
    sig_r, sig_p = rewriter.name.rsplit("-", 1)[1][:8], plain.name.rsplit("-", 1)[1][:8]
    assert bool(marks[sig_r]) is True and bool(marks[sig_p]) is False
    for name in ("leaderboard_by_type.csv", "leaderboard_by_class.csv"):
        t = pd.read_csv(root / name)
        assert set(t.loc[t["editor_sig"].str[:8] == sig_r, "rewrites_instruction"]) == {True}
    text = render(root)
    lines = text.splitlines()
    assert [ln for ln in lines if sig_r in ln][0].startswith("identity [rewrites]")
    assert [ln for ln in lines if sig_p in ln][0].startswith("identity ") and "[rewrites]" not in [
        ln for ln in lines if sig_p in ln][0]
    assert text.count(REWRITE_NOTE) == 1
    build_report(root, tmp_path / "report")
    page = (tmp_path / "report" / "index.html").read_text(encoding="utf-8")
    rows = [r.split("</tr>")[0] for r in page.split("<tr") if "identity" in r.split("</tr>")[0] and "<code" in r]
    marked = [r for r in rows if "REWRITES INSTRUCTIONS" in r]
    assert marked and all(sig_r in r for r in marked) and not any(sig_p in r and "REWRITES" in r for r in rows)


def test_an_editor_that_declares_but_hands_back_no_text_fails_each_query_naming_the_contract(tmp_path, demo_qs):
    from benchmark.io.errors import TooManyFailures

    with pytest.raises(TooManyFailures):
        run_demo(tmp_path, "identity", "editor._target_=rewriting_editor.ForgetsTheText", "limit=2",
                 "stages=[edit]")
    recs = _records(next(tmp_path.glob("runs/*/*/")))
    assert [r["status"] for r in recs] == ["failed", "failed"]
    assert all("declares rewrites_instruction but recorded no rewritten instruction" in r["reason"] for r in recs)


def test_edits_made_elsewhere_declare_the_rewrite_with_a_jsonl_through_the_cli(tmp_path, demo_qs, capsys):
    from PIL import Image

    queries = list(demo_qs)[:2]
    edits = tmp_path / "edits"
    edits.mkdir()
    for q in queries:
        with Image.open(demo_qs.path(q.image)) as im:
            im.convert("RGB").save(edits / f"{q.id}.png")
    rewritten = tmp_path / "rewritten.jsonl"
    rewritten.write_text("".join(json.dumps({"query_id": q.id, "instruction": "enhanced: " + q.instruction}) + "\n"
                                 for q in queries), encoding="utf-8")
    env = {"PYTHONPATH": child_pythonpath(ROOT, HELPERS), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    common = ["--edits", str(edits), "queryset=demo", "profile=tiny", "metrics=basic", "limit=2", "progress=false",
              f"paths.results={tmp_path / 'res'}", "aggregate.bootstrap_resamples=50"]

    def score(*extra: str) -> int:  # the CLI's own function, in this process (the first one runs as a user's)
        from benchmark.commands.cli import main

        return main(["score", *extra, *common])

    done = subprocess.run([sys.executable, "-m", "benchmark.commands.cli", "score", "--name", "enhanced", "--rewritten",
                           str(rewritten), *common], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    run_dir = next((tmp_path / "res").glob("runs/*/enhanced-*/"))
    recs = {r["query_id"]: r for r in _records(run_dir)}
    assert {k: r["rewritten"] for k, r in recs.items()} == {q.id: "enhanced: " + q.instruction for q in queries}
    assert score("--name", "asgiven") == 0
    lb = pd.read_csv(tmp_path / "res" / "leaderboard.csv")
    assert dict(zip(lb["editor"], lb["rewrites_instruction"].astype(bool), strict=True)) == {
        "enhanced": True, "asgiven": False}
    # a file that misses one edited query: that query fails, naming the contract; a malformed file: a plain error
    rewritten.write_text(json.dumps({"query_id": queries[0].id, "instruction": "x"}) + "\n", encoding="utf-8")
    score("--name", "halfdeclared", "--rewritten", str(rewritten), "max_failed_fraction=1")
    run_dir = next((tmp_path / "res").glob("runs/*/halfdeclared-*/"))
    recs = {r["query_id"]: r for r in _records(run_dir)}
    assert recs[queries[0].id]["rewritten"] == "x" and recs[queries[1].id]["status"] == "failed"
    assert "recorded no rewritten instruction" in recs[queries[1].id]["reason"]
    rewritten.write_text("not json\n", encoding="utf-8")
    capsys.readouterr()
    assert score("--name", "broken", "--rewritten", str(rewritten)) == 2
    assert "line 1: not JSON" in capsys.readouterr().err


def test_a_failed_batch_leaves_no_text_behind_the_retries_record_their_own(tmp_path, demo_qs):
    from rewriting_editor import FailsItsBatches

    from benchmark.stages.edit import run_edit_stage

    qs = demo_qs.subset(2)
    first, second = (q.id for q in qs.queries)
    editor = FailsItsBatches(fail_alone=[first])
    st = run_edit_stage(qs, editor, tmp_path, seed=0, batch_size=2, progress=False)
    recs = {r["query_id"]: r for r in _records(tmp_path)}
    assert st.failed == 1 and recs[first]["status"] == "failed" and "rewritten" not in recs[first]
    assert recs[second]["rewritten"] == qs.queries[1].instruction + PHRASE  # its own retry's text
    assert editor.take_rewrites([first, second]) == {}  # the failed batch's texts were dropped, none is left over
