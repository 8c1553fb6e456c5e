"""What a new user meets in the first hour: the report orders its tables as `show` does, the fixes that errors name
are the right ones, GPU timing scripts say in one line that there is no GPU, metaeval's default runs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from benchmark.plan.config import read_plan

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


# --- the report's leaderboard tables in `show`'s order ---------------------------------------------------------

def _write_tables(results: Path) -> None:
    """Hand-made tables of one section: complete rows a (Total 0.2), b (0.9), c (0.5), d (NaN), a partial row e
    (1.0); file order is by editor name, as the aggregate writes it. By type: two types, orders that differ."""
    base = {"queryset": "demo", "queryset_hash": "q1", "metric_set": "hatie", "prompt_kind": "instruction",
            "profile": "tiny", "n_failed": 0, "metric_sig": "m1"}
    totals = {"a": 0.2, "b": 0.9, "c": 0.5, "d": float("nan"), "e": 1.0}
    rows = [{**base, "editor": e, "editor_sig": f"{e}sig0000", "Total": t, "Total_se": 0.01, "OF": 1 - (t or 0),
             "OF_se": 0.01, "complete": e != "e", "mark": "PARTIAL 3/14" if e == "e" else "",
             "n_ok": 14 if e != "e" else 3, "n_missing": 0 if e != "e" else 11} for e, t in totals.items()]
    pd.DataFrame(rows).to_csv(results / "leaderboard.csv", index=False)
    by_type = [{**r, "edit_type": ty, "Total": (r["Total"] if ty == "obj_add" else 1 - r["Total"])}
               for r in rows for ty in ("obj_add", "style_chg")]
    pd.DataFrame(by_type).to_csv(results / "leaderboard_by_type.csv", index=False)
    pd.DataFrame([{**r, "object_class": "cat"} for r in rows]).to_csv(results / "leaderboard_by_class.csv",
                                                                      index=False)
    pd.DataFrame([{"metric": "OF", "metric_set": "hatie", "higher_is_better": True, "summary": False},
                  {"metric": "Total", "metric_set": "hatie", "higher_is_better": True, "summary": True}]
                 ).to_csv(results / "leaderboard_metrics.csv", index=False)


def _html_orders(html: str) -> list[list[str]]:
    """Editor names per leaderboard table of the page, in row order."""
    tables = re.findall(r'<table class="lb[^"]*">(.*?)</table>', html, flags=re.S)
    return [re.findall(r'<tr class="(?:complete|partial)"><td>([a-e])</td>', t) for t in tables]


def _show_order(text: str) -> list[str]:
    return [ln.split()[0] for ln in text.splitlines() if ln[:2] in {f"{e} " for e in "abcde"}]


def test_report_tables_follow_shows_order_best_first_by_the_headline(tmp_path):
    from benchmark.commands.report.collect import read_leaderboards
    from benchmark.commands.report.html import leaderboards_html
    from benchmark.tables.show import render

    _write_tables(tmp_path)
    lb = read_leaderboards(tmp_path)
    overall, by_type, by_class = _html_orders(leaderboards_html(lb))
    # worked by hand: Total 0.9, 0.5, 0.2, NaN last; the partial row after every complete one
    assert overall == ["b", "c", "a", "d", "e"] == _show_order(render(tmp_path))
    # by type: grouped by type (obj_add, style_chg), best first within each (style_chg's Totals are 1 - Total)
    assert by_type == ["b", "c", "a", "d", "a", "c", "b", "d", "e", "e"] == _show_order(render(tmp_path, by="type"))
    assert by_class == overall


def test_report_criteria_table_follows_the_same_order(tmp_path):
    from benchmark.commands.report.collect import read_leaderboards
    from benchmark.commands.report.html import criteria_html

    _write_tables(tmp_path)
    df = pd.read_csv(tmp_path / "leaderboard.csv")
    df.assign(BF=df["OF"], BF_se=0.01).to_csv(tmp_path / "leaderboard.csv", index=False)
    rows = re.findall(r'<tr class="(?:complete|partial)"><td>([a-e])</td>', criteria_html(read_leaderboards(tmp_path)))
    assert rows == ["b", "c", "a", "d", "e"]


# --- errors name the right fix ---------------------------------------------------------------------------------

@pytest.mark.parametrize("offline", ["1", None])
def test_hub_download_error_names_the_fix_that_applies(monkeypatch, tmp_path, offline):
    import datasets
    from benchmark.io.download import DownloadError, fetch_huggingface

    def refuse(*a, **k):
        raise ConnectionError("offline")

    monkeypatch.setattr(datasets, "load_dataset", refuse)
    if offline:
        monkeypatch.setenv("HF_HUB_OFFLINE", offline)
    else:
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with pytest.raises(DownloadError) as err:
        fetch_huggingface({"repo_id": "osunlp/MagicBrush", "splits": ["dev"]}, tmp_path)
    msg = str(err.value)
    assert "`make data` sets" not in msg  # the Makefile leaves HF_HUB_OFFLINE as it finds it
    assert ("HF_HUB_OFFLINE=0 in front" in msg) == bool(offline)
    assert ("Check your network" in msg) == (not offline)


@pytest.mark.parametrize("name, args", [
    ("magicbrush", ["--dataset", "datasets/magicbrush/downloads/dev", "--split", "dev"]),
    ("gedit", ["--dataset", "datasets/gedit/downloads/train"]),
    ("gqa_hatie", ["--scene-graphs", "nowhere/train_sceneGraphs.json", "--images", "nowhere"]),
    ("editval", ["--editval", "nowhere/object.json", "--coco-annotations", "nowhere/i.json"]),
    ("hatie", ["--queries", "nowhere/q.pkl", "--masks", "nowhere/m.pkl", "--images", "nowhere"]),
])
def test_builders_name_make_data_when_the_download_is_missing(tmp_path, name, args):
    proc = subprocess.run([PY, "-m", "benchmark.commands.cli", "data", "build", name, *args, "--out",
                           str(tmp_path / "out")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert f"make data NAME={name}" in proc.stderr, proc.stderr
    assert "does not exist" in proc.stderr and "Traceback" not in proc.stderr


# --- GPU-only timing scripts on a CPU ----------------------------------------------------------------------------

@pytest.mark.parametrize("script", ["bench/bench_hatie.py", "bench/bench_backbones.py", "tools/precision_drift.py",
                                    "bench/bench_suites.py"])
def test_gpu_timing_scripts_say_in_one_line_there_is_no_cuda(script):
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is here: the scripts would run")
    proc = subprocess.run([PY, f"scripts/{script}", "--device", "cuda"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "no CUDA device visible" in proc.stderr


def test_bench_suites_exits_nonzero_when_a_set_failed():
    proc = subprocess.run([PY, "scripts/bench/bench_suites.py", "--metrics", "nosuchset", "--profile", "tiny",
                           "--per-type", "1", "--repeat", "1"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert "FAILED" in proc.stdout
    assert proc.returncode == 1 and "1 of 1 metric set(s) FAILED: nosuchset" in proc.stderr


# --- metaeval's default under profile=tiny ------------------------------------------------------------------------

def test_metaeval_default_leaves_out_what_tiny_cannot_score_and_says_so(tmp_path):
    from benchmark.commands.metaeval.scoring import Session
    from benchmark.plan.config import options

    over = ["queryset=demo_mini", "profile=tiny", f"paths.results={tmp_path}"]
    default = Session(over, None)
    # demo_mini holds HATIE's seven edit types only: EditVal scores none of them; the tiny LLM writes no attributes
    assert {"augclip_llm", "editval", "editval_oracle"} <= set(default.left_out)
    assert "EditVal" in default.left_out["editval"] and "random weights" in default.left_out["augclip_llm"]
    # the learned judges apply to any instructed edit, but their authors' prompt files are not fetched here
    assert "make data NAME=editscore_judge" in default.left_out["editscore"]
    assert "make data NAME=editreward_judge" in default.left_out["editreward"]
    assert {"basic", "hatie", "hatie_oracle", "augclip"} <= set(default.metric_sets)
    assert not set(default.metric_sets) & set(default.left_out)
    assert set(default.metric_sets) | set(default.left_out) == set(options("metrics"))
    named = Session(over, ["augclip_llm"])  # named, it runs (and fails with its own error)
    assert named.metric_sets == ["augclip_llm"] and not named.left_out
    pretrained = Session(["queryset=demo_mini", "profile=pretrained", f"paths.results={tmp_path}"], None)
    assert "augclip_llm" in pretrained.metric_sets and "editval" in pretrained.left_out  # the skip is tiny's only


# --- the budget line of edits made elsewhere ----------------------------------------------------------------------

def test_budget_of_external_edits_uses_the_external_row_not_a_run_of_their_label(tmp_path):
    from benchmark.commands.run import compose
    from benchmark.plan import budget as B
    from benchmark.plan.preflight import load_selection

    (tmp_path / "edits").mkdir()
    base = ["queryset=demo_mini", "profile=tiny", f"paths.results={tmp_path / 'r'}", "progress=false"]
    cfg, _ = compose([*base, "editor=external", f"editor.folder={tmp_path / 'edits'}", "editor.label=their-model"])
    line = B.check_budget(read_plan(cfg), load_selection(read_plan(cfg))[0], editor="their-model", metrics="basic",
                          interactive=lambda: False)
    assert "cost unknown" not in line and "editor=their-model" not in line, line
    # a label that no `editor=` names (a meta-evaluation candidate) gets no command that cannot run (a model editor's
    # config with no row there: ip2p at real size on a CPU; a weight-free config needs no row, tests/test_budget.py)
    cfg, _ = compose(["queryset=demo_mini", "profile=random", f"paths.results={tmp_path / 'r'}", "progress=false",
                      "editor=ip2p"])
    line = B.check_budget(read_plan(cfg), load_selection(read_plan(cfg))[0], editor="metaeval-gt", metrics="basic",
                          interactive=lambda: False)
    assert "cost unknown" in line and "editor=metaeval-gt" not in line, line


# --- `show` on a folder of many metric sets -----------------------------------------------------------------------

def test_show_on_a_wide_leaderboard_warns_nothing_and_keeps_its_order(tmp_path):
    import warnings

    from benchmark.tables.show import render

    _write_tables(tmp_path)
    narrow = render(tmp_path)
    df = pd.read_csv(tmp_path / "leaderboard.csv")  # another metric set's 120 float columns, NaN in these rows
    df = pd.concat([df, pd.DataFrame({f"x{i}": [float("nan")] * len(df) for i in range(120)})], axis=1)
    df.to_csv(tmp_path / "leaderboard.csv", index=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        wide = render(tmp_path)
    assert [str(w.message)[:40] for w in caught] == []
    assert wide == narrow
