"""The HTML report without a browser: what it writes, what it marks (PARTIAL, STALE, failures), the thumbnail
cache, the grid's index, the comparison matrix from a compare_runs-shaped frame, and its refusals."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from report_results import report_results

from benchmark.commands.report import ReportError, build_report
from benchmark.commands.report.html import chart_specs, comparison_html, criteria_html


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    return report_results(tmp_path_factory.getbasetemp())


@pytest.fixture()
def own_results(results, tmp_path) -> Path:
    """A copy a test may change."""
    return Path(shutil.copytree(results, tmp_path / "results"))


@pytest.fixture()
def no_compare(monkeypatch):
    monkeypatch.setitem(sys.modules, "benchmark.commands.compare", None)  # import fails as it does without the module


def _chunks(out: Path) -> list[dict]:
    rows = []
    for path in sorted(out.glob("data/grid/*/chunk-*.js")):
        m = re.fullmatch(r'EM\.chunk\("[^"]+",\d+,(.*)\);\n', path.read_text(encoding="utf-8"), re.S)
        assert m, path
        rows += json.loads(m.group(1))
    return rows


def _meta(out: Path) -> dict:
    text = (out / "data" / "meta.js").read_text(encoding="utf-8")
    return json.loads(text[len("EM.meta = "):-2])


def test_report_shows_every_run_marks_partial_rows_and_links_existing_files(results, tmp_path, no_compare):
    out = tmp_path / "report"
    summary = build_report(results, out, page_size=5)
    page = (out / "index.html").read_text(encoding="utf-8")
    assert summary["runs"] == 3 and summary["queries"] == 14
    assert "comparison not available" in page  # the guarded import failed: a visible note, the rest is built
    # the partial run (limit=6) carries the leaderboard's own mark, in a row styled as partial
    assert re.search(r'<tr class="partial">(?:(?!</tr>).)*overedit(?:(?!</tr>).)*PARTIAL 10/14', page, re.S)
    assert page.count('<tr class="complete">') >= 2
    meta = _meta(out)
    grid = meta["grids"][0]
    assert grid["n"] == 14 and grid["chunk"] == 5 and grid["n_chunks"] == 3 and grid["has_gt"]
    rows = _chunks(out)
    assert len(rows) == 14
    for row in rows:  # every thumbnail the page will load exists; every full-size link resolves
        for pair in (row["src"], row["gt"]):
            if pair:
                assert (out / pair[0]).is_file() and (out / pair[1]).resolve().is_file()
        for run, cell in zip(grid["runs"], row["c"], strict=True):
            if "t" in cell:
                assert (out / cell["t"]).is_file()
                assert (out / (run["edits"] + row["id"] + ".png")).resolve().is_file()
    statuses = {r["editor"] + r["sig"]: r["counts"] for r in grid["runs"]}
    assert sorted(statuses.values(), key=str) == sorted(
        [{"ok": 14}, {"ok": 10, "missing": 4}, {"ok": 10, "failed": 4}], key=str)
    charts = [c for c in meta["charts"] if c["table"] == "by_type"]
    assert charts and all(len(c["groups"]) == 7 for c in charts)
    partial = [s for c in charts for s in c["series"] if s["label"].startswith("overedit")]
    marks = [v[3] for s in partial for v in s["v"] if v]  # the by-type table's own marks, group by group
    assert "PARTIAL 1/2" in marks and "" in marks


def test_failure_gallery_lists_each_failed_query_with_reason_and_traceback(results, tmp_path, no_compare):
    out = tmp_path / "report"
    build_report(results, out)
    text = (out / "data" / "failures.js").read_text(encoding="utf-8")
    failures = {f["key"]: f for f in json.loads(text[len("EM.failures = "):-2])}
    failed = [f for f in failures.values() if f["n"]]
    assert len(failed) == 1 and failed[0]["n"] == 4 and len(failed[0]["shown"]) == 4
    for item in failed[0]["shown"]:
        assert item["r"] == f"ValueError: bad query {item['id']}" and item["e"] == "ValueError"
        assert "Traceback (most recent call last)" in item["tb"] and "failing_editor.py" in item["tb"]
        assert item["t"] is None and (out / item["src"][0]).is_file()  # no edit; the source is shown
    assert (out / failed[0]["log"]).resolve().is_file()


def test_grid_ranges_cover_the_order_and_make_filters_contiguous(results, tmp_path, no_compare):
    out = tmp_path / "report"
    build_report(results, out, page_size=4)
    grid, rows = _meta(out)["grids"][0], _chunks(out)
    assert [r["id"] for r in rows] == sorted((r["id"] for r in rows),
                                             key=lambda i: next((r["ty"], r["cl"], i) for r in rows if r["id"] == i))
    pos = 0
    for t, c, start, count in grid["ranges"]:
        assert start == pos
        assert {(r["ty"], r["cl"]) for r in rows[start:start + count]} == {(grid["types"][t], grid["classes"][c])}
        pos += count
    assert pos == len(rows)
    for t in range(len(grid["types"])):  # a type filter is one contiguous block
        starts = [s for tt, _, s, _ in grid["ranges"] if tt == t]
        assert starts == sorted(starts) and len({tt for tt, *_ in grid["ranges"]}) == len(grid["types"])


def test_rebuild_reuses_thumbnails_and_marks_an_edit_changed_since_scoring(own_results, tmp_path, no_compare):
    from PIL import Image

    out = tmp_path / "report"
    first = build_report(own_results, out)
    assert first["thumbnails_made"] > 0 and first["thumbnails_failed"] == 0
    again = build_report(own_results, out)
    assert again["thumbnails_made"] == 0 and again["thumbnails_reused"] == first["thumbnails_made"]
    edit = next(own_results.glob("runs/*/overedit-*/edits/*.png"))
    Image.new("RGB", Image.open(edit).size, (255, 0, 0)).save(edit)  # changed after it was scored
    third = build_report(own_results, out)
    assert third["thumbnails_made"] == 1
    grid = _meta(out)["grids"][0]
    col = next(i for i, r in enumerate(grid["runs"]) if r["editor"] == "overedit")
    row = next(r for r in _chunks(out) if r["id"] == edit.stem)
    assert row["c"][col]["x"] == [1]  # its scores are shown as stale, never as current
    stale = [r for r in _chunks(out) if any("x" in c for c in r["c"])]
    assert [r["id"] for r in stale] == [edit.stem]


def test_tables_newer_than_scores_are_marked_stale(own_results, tmp_path, no_compare):
    import os

    part = next(own_results.glob("runs/*/overedit-*/scores/*/part-*.parquet"))
    later = (own_results / "leaderboard.csv").stat().st_mtime_ns + 10**9
    os.utime(part, ns=(later, later))
    out = tmp_path / "report"
    build_report(own_results, out)
    page = (out / "index.html").read_text(encoding="utf-8")
    assert "STALE: 1 score part(s) were written after leaderboard.csv" in page and 'class="lb stale"' in page
    assert all(c["stale"] for c in _meta(out)["charts"])


def test_a_query_set_whose_files_changed_is_not_shown_as_the_runs_sources(results, tmp_path, no_compare):
    from benchmark.commands.report.collect import resolve_queryset

    qs, why = resolve_queryset("demo_mini", "0" * 64)
    assert qs is None and "the runs were made on 0000000000" in why
    loaded, _ = resolve_queryset("demo_mini", _meta_hash(results))
    changed = dataclasses.replace(loaded, hash="f" * 64)
    out = tmp_path / "report"
    build_report(results, out, querysets={"demo_mini": changed})
    rows = _chunks(out)
    assert all(r["src"] is None and r["gt"] is None for r in rows) and all(len(r["c"]) == 3 for r in rows)
    assert "now has hash ffffffffff" in (out / "index.html").read_text(encoding="utf-8")


def _meta_hash(results: Path) -> str:
    return json.loads(next(results.glob("runs/*/*/run.json")).read_text())["queryset_hash"]


def test_output_folder_that_is_not_a_report_is_refused(results, tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(ReportError, match="not a report folder"):
        build_report(results, tmp_path / "mine")
    with pytest.raises(ReportError, match="would contain the results folder"):
        build_report(results, results.parent)
    with pytest.raises(ReportError, match="nothing to report"):
        build_report(tmp_path / "empty", tmp_path / "out")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_cli_report_subcommand(results, tmp_path, capsys, no_compare):
    from benchmark.commands import cli

    assert cli.main(["report", "--results", str(results), "--out", str(tmp_path / "r"), "--page-size", "3"]) == 0
    out = capsys.readouterr().out
    assert "3 run folder(s), 14 queries" in out and "comparison not available" in out
    assert (tmp_path / "r" / "index.html").is_file()
    assert cli.main(["report", "--results", str(tmp_path / "nothing")]) == 2


def test_compare_runs_errors_become_a_visible_note(results, tmp_path, monkeypatch):
    import types

    fake = types.ModuleType("benchmark.commands.compare")

    def compare_runs(*args, **kwargs):
        raise RuntimeError("boom")

    fake.compare_runs = compare_runs
    monkeypatch.setitem(sys.modules, "benchmark.commands.compare", fake)
    build_report(results, tmp_path / "r")
    assert "comparison not available: compare_runs failed (RuntimeError: boom)" in (
        tmp_path / "r" / "index.html").read_text(encoding="utf-8")


# -- sections from frames -----------------------------------------------------------------------------------------

def _comparison_frame() -> pd.DataFrame:
    base = dict(metric_set="basic", metric="psnr", higher_is_better=True, n_shared=14, test="wilcoxon", ties=1)
    rows = [
        base | dict(by=None, group=None, run_a="r1", run_b="r2", editor_a="identity", editor_b="overedit",
                    mean_a=30.0, mean_b=20.0, diff=10.0, ci_low=8.0, ci_high=12.0, p_value=0.001, p_adjusted=0.002,
                    win_a=12, win_b=1, win_rate_a=0.86, win_ci_low=0.6, win_ci_high=0.95, complete=True),
        base | dict(by=None, group=None, run_a="r1", run_b="r3", editor_a="identity", editor_b="sdedit",
                    mean_a=30.0, mean_b=29.9, diff=0.1, ci_low=-0.5, ci_high=0.7, p_value=0.6, p_adjusted=0.6,
                    win_a=6, win_b=7, win_rate_a=0.43, win_ci_low=0.2, win_ci_high=0.7, complete=False),
        base | dict(by="edit_type", group="obj_add", run_a="r1", run_b="r2", editor_a="identity",
                    editor_b="overedit", mean_a=30.0, mean_b=21.0, diff=9.0, ci_low=7.0, ci_high=11.0,
                    p_value=0.01, p_adjusted=0.02, win_a=2, win_b=0, win_rate_a=1.0, win_ci_low=0.3,
                    win_ci_high=1.0, complete=True),
    ]
    return pd.DataFrame(rows)


def test_comparison_matrix_mirrors_pairs_and_marks_significance_and_partial_pairs():
    df = _comparison_frame()
    df.attrs["notes"] = ["PARTIAL: sdedit has 3 of its 14 queries not yet edited"]
    html = comparison_html(df)
    assert '<p class="note warn">PARTIAL: sdedit has 3 of its 14 queries not yet edited</p>' in html
    matrix = html[html.index('<table class="matrix">'):html.index("</table>")]
    rows = re.findall(r"<tr><th>([^<]*)</th>(.*?)</tr>", matrix[matrix.index("<tbody>"):], re.S)
    assert [r[0] for r in rows] == ["identity (r1)", "overedit (r2)", "sdedit (r3)"]
    cells = {r[0]: re.findall(r"<td([^>]*)>(.*?)</td>", r[1], re.S) for r in rows}
    ident, over = cells["identity (r1)"], cells["overedit (r2)"]
    assert 'class="better"' in ident[1][0] and "<b>10</b>" in ident[1][1] and "[8, 12]" in ident[1][1]
    assert 'class="worse"' in over[0][0] and "<b>-10</b>" in over[0][1] and "[-12, -8]" in over[0][1]
    assert "W/L/T 12/1/1" in ident[1][1] and "W/L/T 1/12/1" in over[0][1]
    assert "PARTIAL" in ident[2][1] and "better" not in ident[2][0]  # not significant, and not complete
    assert "n/a" in over[2][1]  # a pair compare_runs did not return is not invented
    assert "per edit type / object class (1 rows)" in html and "obj_add" in html


def test_comparison_with_a_lower_is_better_metric_colours_by_direction():
    df = _comparison_frame().assign(metric="l1", higher_is_better=False)
    html = comparison_html(df[df["by"].isna()])
    first = re.search(r"<tr><th>identity \(r1\)</th>(.*?)</tr>", html, re.S).group(1)
    assert 'class="worse"' in first  # a larger l1 is worse


def _lb_frames():
    from benchmark.commands.report.collect import Leaderboards

    ident = dict(queryset="demo", queryset_hash="ab" * 32, metric_set="hatie", prompt_kind="instruction",
                 profile="tiny", seed=0)
    rows = [ident | dict(editor="identity", editor_sig="d40608", complete=True, mark="", OF=0.2, OF_se=0.1, OF_n=14,
                         BF=0.02, BF_se=0.002, BF_n=4, OC=0.0, OC_se=0.0, OC_n=8, BC=1.0, BC_se=0.0, BC_n=14,
                         IQ=0.99, IQ_se=1e-4, Total=0.48, Total_se=0.02),
            ident | dict(editor="overedit", editor_sig="2d8b86", complete=False, mark="PARTIAL 10/14", OF=0.3,
                         OF_se=0.1, OF_n=6, BF=0.01, BF_se=0.001, BF_n=2, OC=0.1, OC_se=0.05, OC_n=4, BC=0.6,
                         BC_se=0.08, BC_n=6, IQ=np.nan, IQ_se=np.nan, Total=np.nan, Total_se=np.nan)]
    by_type = pd.DataFrame([r | dict(edit_type=t, score=v, score_se=0.01, score_n=2)
                            for r in rows for t, v in (("obj_add", 0.5), ("bg_chg", 0.4))])
    metrics = pd.DataFrame([dict(metric=m, metric_set="hatie", higher_is_better=True)
                            for m in ("Total", "OF", "BF", "OC", "BC", "IQ", "score")])
    return Leaderboards({"overall": pd.DataFrame(rows), "by_type": by_type, "by_class": None}, metrics)


def test_criteria_breakdown_and_charts_carry_errors_and_partial_marks():
    lb = _lb_frames()
    html = criteria_html(lb)
    assert "OF↑" in html and "IQ↑" in html and "0.2±0.1" in html and "PARTIAL 10/14" in html
    specs = {s["id"].split("|")[0]: s for s in chart_specs(lb)}
    crit = specs["criteria"]
    assert crit["groups"] == ["OF", "BF", "OC", "BC", "IQ"]
    ident, over = crit["series"]
    assert ident["v"][0][:3] == [0.2, 0.1, 14.0] and ident["v"][0][3] == ""
    assert over["v"][0][3] == "PARTIAL 10/14" and over["v"][4][0] is None  # IQ undefined: no bar, not a zero
    by_type = specs["by_type"]
    assert by_type["metric"] == "score" and by_type["groups"] == ["bg_chg", "obj_add"]
    assert [v[0] for v in by_type["series"][0]["v"]] == [0.4, 0.5]


def test_grid_values_keep_four_significant_digits_and_never_invent_numbers():
    from benchmark.commands.report.grid import round_sig

    rng = np.random.default_rng(0)
    x = rng.normal(size=500) * 10.0 ** rng.integers(-8, 8, 500)
    out = round_sig(np.concatenate([x, [0.0, np.nan, np.inf, -np.inf]]))
    assert all(abs(a - b) <= 5e-4 * abs(b) for a, b in zip(out[:500], x, strict=True))
    assert list(out[500:]) == [0.0, None, None, None]


def test_an_unreadable_image_gets_no_thumbnail_link_but_its_reason(own_results, tmp_path, no_compare):
    edit = next(own_results.glob("runs/*/overedit-*/edits/*.png"))
    edit.write_bytes(b"not a png")
    out = tmp_path / "report"
    summary = build_report(own_results, out)
    assert summary["thumbnails_failed"] == 1
    grid = _meta(out)["grids"][0]
    col = next(i for i, r in enumerate(grid["runs"]) if r["editor"] == "overedit")
    cell = next(r for r in _chunks(out) if r["id"] == edit.stem)["c"][col]
    assert "t" not in cell and cell["tr"].startswith("unreadable image: UnidentifiedImageError")
    assert cell["x"] == [1]  # and its scores are for other bytes


def test_report_with_the_real_compare_runs(results, tmp_path):
    """Where benchmark.commands.compare exists, the matrix is built from it: one matrix per compared metric, the partial
    run's note and PARTIAL cells, and the per-type rows."""
    pytest.importorskip("benchmark.commands.compare")
    build_report(results, tmp_path / "r")
    page = (tmp_path / "r" / "index.html").read_text(encoding="utf-8")
    assert "comparison not available" not in page
    assert page.count('<table class="matrix">') == 10  # the ten basic metrics; hatie has no second run
    assert re.search(r'<p class="note warn">PARTIAL: overedit-\w+ has 4 of its 14 queries', page)
    assert '<span class="badge partial">PARTIAL</span>' in page and "per edit type / object class" in page


def test_runs_of_two_query_sets_get_one_comparison_each(own_results, tmp_path):
    """A results folder holding two query sets (as after `make demo`) is compared set by set, never refused as a
    whole for mixing sets."""
    pytest.importorskip("benchmark.commands.compare")
    from benchmark.commands.run import compose, run_pipeline

    for editor in ("identity", "overedit"):
        cfg, choices = compose(["queryset=demo_editval", "profile=tiny", f"paths.results={own_results}",
                                "progress=false", "aggregate.bootstrap_resamples=50", f"editor={editor}",
                                "metrics=basic", "limit=4"])
        run_pipeline(cfg, choices["editor"])
    build_report(own_results, tmp_path / "r")
    page = (tmp_path / "r" / "index.html").read_text(encoding="utf-8")
    assert "comparison not available" not in page and "different query sets" not in page
    assert "queryset=demo_mini · metrics=basic" in page and "queryset=demo_editval · metrics=basic" in page


# ------------------------------------------------------------------------------ sweeps and meta-evaluation sections
def _sweep_csv(path: Path) -> None:
    """A 2 x 2 sweep of one editor (guidance x image guidance), one metric; one point partial; per-type rows too."""
    rows = []
    for g in (5.0, 7.5):
        for ig in (1.0, 1.5):
            partial = g == 7.5 and ig == 1.5
            value = 0.2 + g / 100 + ig / 10
            for et in ("", "obj_add"):
                rows.append({"queryset": "qs", "metric_set": "basic", "prompt_kind": "instruction", "profile": "tiny",
                             "editor": "ip2p", "varying": "guidance_scale;image_guidance_scale",
                             "set.guidance_scale": g, "set.image_guidance_scale": ig, "edit_type": et,
                             "metric": "clip", "value": value + (0.5 if et else 0.0), "se": 0.01,
                             "n": 3 if partial else 14, "complete": not partial,
                             "mark": "PARTIAL 3/14" if partial else "", "editor_sig": f"sig{g}{ig}", "seed": 0})
    pd.DataFrame(rows).to_csv(path, index=False)


def test_sweeps_section_draws_every_curve_with_error_bars_and_hollow_partial_points(tmp_path):
    from benchmark.commands.report.sweeps import read_sweeps, sweeps_html

    _sweep_csv(tmp_path / "leaderboard_sweeps.csv")
    metrics = pd.DataFrame([{"metric_set": "basic", "metric": "clip", "higher_is_better": True}])
    df, notes = read_sweeps(tmp_path)
    page = sweeps_html(df, notes, metrics)
    assert not notes
    svgs = re.findall(r"<svg class=\"sweep\".*?</svg>", page, re.S)
    assert len(svgs) == 2  # one chart per varying setting (one editor, one metric)
    assert "clip vs guidance_scale" in page and "clip vs image_guidance_scale" in page and "clip ↑" in page
    for chart in svgs:
        assert chart.count('<g class="series"') == 2  # a line per value of the other setting
        circles = re.findall(r'<circle class="(pt[^"]*)" cx="[\d.]+" cy="([\d.]+)"[^>]*><title>([^<]*)</title>', chart)
        assert len(circles) == 4  # per-type rows (value + 0.5) are not drawn
        assert [c[0] for c in circles].count("pt partial") == 1
        assert all(("PARTIAL 3/14" in t) == (c == "pt partial") for c, _, t in circles)
        assert chart.count('class="err"') == 4
        # a higher value is drawn higher (smaller y) in the same chart: the y axis is monotone
        vals = [float(re.search(r"=[^:]+: ([\d.]+)", t).group(1)) for _, _, t in circles]
        ys = [float(y) for _, y, _ in circles]
        assert sorted(range(4), key=lambda i: vals[i]) == sorted(range(4), key=lambda i: -ys[i])
    assert "0.35±0.01" in page and "0.425±0.01" in page  # 0.2 + 7.5/100 + 1.5/10: the partial point's value
    assert page.count('<span class="badge partial">PARTIAL 3/14</span>') == 2  # in both charts' point tables
    assert "0.925" not in page and "0.85±" not in page  # a per-type value never reaches the overall curves


def test_sweeps_section_notes_absent_empty_and_malformed_files(tmp_path):
    from benchmark.commands.report.sweeps import read_sweeps, sweeps_html

    df, notes = read_sweeps(tmp_path)
    assert df is None and "No sweeps" in sweeps_html(df, notes)
    path = tmp_path / "leaderboard_sweeps.csv"
    _sweep_csv(path)
    header = path.read_text().splitlines()[0]
    path.write_text(header + "\n")  # what aggregation writes when no editor's rows differ in settings
    df, notes = read_sweeps(tmp_path)
    assert not notes and "No sweeps: no editor" in sweeps_html(df, notes)
    path.write_text("queryset,editor\nqs,ip2p\n")
    df, notes = read_sweeps(tmp_path)
    page = sweeps_html(df, notes)
    assert df is None and str(path) in page and "missing column" in page and "<svg" not in page
    _sweep_csv(path)
    lines = path.read_text().splitlines()
    cells = lines[1].split(",")
    cells[header.split(",").index("value")] = "oops"
    path.write_text("\n".join([lines[0], ",".join(cells), *lines[2:]]) + "\n")
    df, notes = read_sweeps(tmp_path)
    page = sweeps_html(df, notes)
    assert "column value holds non-numbers on line(s) 2" in page and str(path) in page
    assert page.count("<circle") == 6  # the bad point (in both charts) is left out, not drawn as a guess


def _metaeval_table(folder: Path) -> Path:
    from types import SimpleNamespace

    from benchmark.commands.metaeval.table import write_table

    rows = [{"metric": "basic/l1", "higher_is_better": False, "n_queries": 13500, "n_excluded": 2, "gt_first": 0.75,
             "gt_first_lo": 0.5, "gt_first_hi": 0.9, "pref_gt": 0.8, "pref_gt_lo": float("nan"),
             "pref_gt_hi": float("nan")},
            {"metric": "basic/psnr", "higher_is_better": True, "n_queries": 14, "n_excluded": 0, "gt_first": 0.25,
             "gt_first_lo": 0.125, "gt_first_hi": 0.375, "pref_gt": 0.3, "pref_gt_lo": 0.2, "pref_gt_hi": 0.4}]
    qs = SimpleNamespace(name="demo_mini", hash="ab" * 32)
    return write_table(folder, "gt-selection", rows, queryset=qs, profile="tiny", resamples=200, confidence=0.95,
                       seed=3, inputs={}, extra={"metric_sigs": {"basic": "0123456789ab"}, "counts": {"selected": 14}})


def test_metaeval_section_shows_each_table_with_intervals_and_provenance(tmp_path):
    from benchmark.commands.report.metaeval import metaeval_html, read_metaeval

    assert "No meta-evaluation tables yet" in metaeval_html(read_metaeval(tmp_path)[0])
    path = _metaeval_table(tmp_path / "metaeval")
    (tmp_path / "metaeval" / "work").mkdir()  # the scored candidates' folder is not a table
    tables, _ = read_metaeval(tmp_path)
    page = metaeval_html(tables)
    assert len(tables) == 1 and not tables[0].notes
    assert "gt-selection · queryset=demo_mini" in page and path.name in page
    assert "0.75 <small>[0.5, 0.9]</small>" in page and "0.25 <small>[0.125, 0.375]</small>" in page
    assert "0.8 <small>[no interval]</small>" in page  # an empty interval is said, not invented
    assert "basic/l1↓" in page and "basic/psnr↑" in page
    assert "ab" * 32 in page and "resamples</dt><dd>200" in page and "seed</dt><dd>3" in page
    assert "selected 14" in page and "random weights" in page  # sidecar counts; the tiny-profile warning
    assert "<td class=\"num\">13500</td>" in page  # a count as written
    assert read_metaeval(tmp_path, queryset="other")[0] == []


def test_metaeval_section_notes_malformed_files_and_never_invents_numbers(tmp_path):
    from benchmark.commands.report.metaeval import metaeval_html, read_metaeval

    folder = tmp_path / "metaeval"
    good = _metaeval_table(folder)
    (folder / "binary.csv").write_bytes(b"\xff\xfe\x00garbage\x00")
    (folder / "nocols.csv").write_text("a,b\n1,2\n")
    bad_json = good.with_name("bad-json.csv")
    shutil.copy(good, bad_json)
    bad_json.with_suffix(".json").write_text("{not json")
    other = good.with_name("other-sidecar.csv")
    shutil.copy(good, other)
    side = json.loads(good.with_suffix(".json").read_text()) | {"queryset_hash": "cd" * 32}
    other.with_suffix(".json").write_text(json.dumps(side))
    no_side = good.with_name("no-sidecar.csv")
    text = good.read_text().replace("0.75,0.5,0.9", "0.75,0.5,lots")
    assert text != good.read_text()
    no_side.write_text(text)
    tables, _ = read_metaeval(tmp_path)
    page = metaeval_html(tables)
    assert len(tables) == 6
    notes = {t.path.name: " ".join(t.notes) for t in tables}
    assert notes[good.name] == ""
    assert "not a readable CSV" in notes["binary.csv"] and "missing column(s) metric, test, queryset" in notes["nocols.csv"]
    assert "not readable JSON" in notes["bad-json.csv"]
    assert "do not belong together" in notes["other-sidecar.csv"]
    assert "is missing" in notes["no-sidecar.csv"] and "gt_first_hi holds non-numbers (lots)" in notes["no-sidecar.csv"]
    for name in notes:
        if notes[name]:
            assert str(folder / name) in page or str((folder / name).with_suffix(".json")) in page
    assert page.count('class="num invalid">invalid</td>') == 1  # the row with the bad bound; not a guessed interval
    assert page.count("0.75 <small>[0.5, 0.9]</small>") == 3  # good, bad-json and other-sidecar show their rows


def test_report_links_sweeps_and_metaeval_sections(own_results, tmp_path, no_compare):
    _sweep_csv(own_results / "leaderboard_sweeps.csv")
    _metaeval_table(own_results / "metaeval")
    out = tmp_path / "report"
    build_report(own_results, out, page_size=5)
    page = (out / "index.html").read_text(encoding="utf-8")
    assert '<a href="#sweeps">Sweeps</a>' in page and '<a href="#metaeval">Meta-evaluation</a>' in page
    assert '<section id="sweeps">' in page and '<section id="metaeval">' in page
    assert page.count('<svg class="sweep"') == 2 and "0.75 <small>[0.5, 0.9]</small>" in page


def test_sweep_of_one_setting_folds_a_curve_per_edit_type(tmp_path):
    from benchmark.commands.report.sweeps import read_sweeps, sweeps_html

    rows = [{"queryset": "qs", "metric_set": "hatie", "prompt_kind": "instruction", "profile": "tiny", "editor": "p2p",
             "varying": "tau", "set.tau": tau, "edit_type": et, "metric": "BC", "value": v, "se": "", "n": 2,
             "complete": True, "mark": "", "editor_sig": f"s{tau}", "seed": 0}
            for tau, base in ((0.2, 0.5), (0.4, 0.6), (0.8, 0.7))
            for et, v in (("", base), ("obj_add", base + 0.01), ("bg_chg", base - 0.2))]
    pd.DataFrame(rows).to_csv(tmp_path / "leaderboard_sweeps.csv", index=False)
    page = sweeps_html(*read_sweeps(tmp_path))
    main, folded = page.split('<details class="per-type">')
    assert main.count('<svg class="sweep"') == 1 and main.count("<circle") == 3 and 'class="err"' not in main
    assert folded.count('<svg class="sweep"') == 1 and folded.count('<g class="series"') == 2
    assert folded.count("<circle") == 6 and "obj_add" in folded and "bg_chg" in folded
    assert "tau=0.4: 0.61" in folded and "tau=0.8: 0.5" in folded  # bg_chg at tau 0.8: 0.7 - 0.2
    xs = [float(x) for x in re.findall(r'<circle class="pt" cx="([\d.]+)"', main)]
    assert xs[1] - xs[0] == pytest.approx((xs[2] - xs[1]) / 2, abs=0.2)  # numeric setting placed by value


# ---- a newcomer's first report (issue 23) ---------------------------------------------------------------------

def _pairs(n_runs: int = 4, metrics=("OF", "BC")):
    """compare_runs-shaped rows: every pair of `n_runs` runs, per metric, plus one skipped-pair note per pair."""
    import itertools

    import pandas as pd

    runs = [f"ed{i}-{'abcdef0123456789'[i] * 12}" for i in range(n_runs)]
    rows = [{"queryset": "demo_mini", "metric_set": "hatie", "metric": m, "higher_is_better": True, "by": "",
             "group": "", "run_a": a, "run_b": b, "editor_a": a.split("-")[0], "editor_b": b.split("-")[0],
             "n_shared": 14, "diff": 0.1, "ci_low": 0.0, "ci_high": 0.2, "p_adjusted": 0.5, "win_a": 3, "win_b": 2,
             "ties": 9, "complete": True} for m in metrics for a, b in itertools.combinations(runs, 2)]
    df = pd.DataFrame(rows)
    df.attrs["notes"] = [f"metric set basic: pair not compared, ed{i} is instruction-based and x{i} description-based"
                         for i in range(25)] + ["metric set hatie: Total, IQ are model-level scores, left out"]
    return df


def test_comparison_has_one_line_for_skipped_pairs_and_one_visible_matrix_per_set():
    from benchmark.commands.report.html import comparison_html

    html = comparison_html(_pairs())
    assert html.count("pair not compared") == 25 and html.count('class="note warn"') == 1  # only the other note
    assert "25 pair(s) not compared" in html.split("<ul>")[0]  # one summary line, the list folded under it
    assert html.count('class="cmp-matrix"') == 2 and html.count("hidden>") == 1  # OF shown, BC behind the selector
    assert '<select class="cmp-select"' in html and "OF↑</option>" in html and "BC↑</option>" in html


def test_one_signature_abbreviation_everywhere():
    from types import SimpleNamespace

    import pandas as pd

    from benchmark.commands.report.html import chart_specs, comparison_html, leaderboard_table, short_sig

    sig = "0123456789abcdef"
    assert short_sig(sig) == "01234567"
    matrix = comparison_html(_pairs(2, ("OF",)))
    assert "ed0 (aaaaaaaa)" in matrix and "ed1 (bbbbbbbb)" in matrix
    row = {"queryset": "q", "metric_set": "hatie", "prompt_kind": "instruction", "profile": "tiny", "editor": "e",
           "editor_sig": sig, "complete": True, "mark": "", "n_ok": 1, "n_failed": 0, "n_missing": 0, "OF": 0.5,
           "BF": 0.4, "edit_type": "attr_chg"}
    metrics = pd.DataFrame([{"metric_set": "hatie", "metric": m, "higher_is_better": True} for m in ("OF", "BF")])
    table = leaderboard_table(pd.DataFrame([row]), metrics, "hatie")
    assert ">01234567<" in table and "012345<" not in table
    lb = SimpleNamespace(tables={"overall": pd.DataFrame([row]), "by_type": pd.DataFrame([row])}, metrics=metrics,
                         stale=False)
    specs = chart_specs(lb)
    assert {s["series"][0]["label"] for s in specs} == {"e (01234567)"}
    assert {s["metric"] for s in specs if s["table"] == "criteria"} == {"HATIE criteria"}  # not "criteria · criteria"


def test_provenance_lists_editor_info_as_keys_not_raw_json():
    from types import SimpleNamespace

    from benchmark.commands.report.html import provenance_html

    meta = {"editor": "overedit", "editor_sig": "ab" * 6, "queryset": "demo", "queryset_hash": "cd" * 32,
            "profile": "tiny", "seed": 0, "git_sha": "ef" * 20, "device": "cpu", "versions": {"torch": "2"},
            "editor_info": {"name": "overedit", "noise_std": 12.0, "sched": {"steps": 5}}}
    html = provenance_html([SimpleNamespace(meta=meta, scorings=[], notes=[])])
    assert '<dl class="info">' in html and "<dt>sched.steps</dt><dd>5</dd>" in html
    assert '{"name"' not in html and "&quot;name&quot;" not in html
    assert html.startswith('<div class="scroll">')


def test_a_run_without_scored_queries_no_longer_takes_out_the_comparison(own_results, tmp_path, capsys):
    """A `score` of an empty folder (the run exists, no query scored) made the report's whole comparison section
    "compare_runs failed (... share no query ...)", and `make report` said nothing. The run is left out with one
    line, printed too; each stage prints a line as it starts (a rebuild can take a minute)."""
    from benchmark.commands import cli

    (tmp_path / "none").mkdir()
    cli.main(["score", "--edits", str(tmp_path / "none"), "--name", "nothing", "queryset=demo_mini",
              "profile=tiny", "metrics=basic", f"paths.results={own_results}", "progress=false",
              "aggregate.bootstrap_resamples=20"])
    assert list((own_results / "runs").glob("*/nothing-*/run.json"))
    capsys.readouterr()
    assert cli.main(["report", "--results", str(own_results), "--out", str(tmp_path / "r")]) == 0
    captured = capsys.readouterr()
    assert "compare_runs failed" not in captured.out
    assert "[report] comparison: metric set basic:" in captured.out and "nothing-" in captured.out
    assert "[report] thumbnails ..." in captured.err and "[report] comparing the runs" in captured.err
    page = (tmp_path / "r" / "index.html").read_text(encoding="utf-8")
    assert "no query scored ok" in page and "compare_runs failed" not in page
