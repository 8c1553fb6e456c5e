"""Readable tables: settings columns, sweep data, and `editmeter show`'s --by / --sort / --columns / rounding."""

import math

import pandas as pd
import pytest
from synthetic_runs import make_run

from benchmark.io.settings import flat_settings, varying_settings
from benchmark.stages.aggregate import write_leaderboards
from benchmark.tables.leaderboard import format_table, main
from benchmark.tables.show import ShowError, format_mean_se


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """ed swept over guidance_scale (one run partial), hat with one basic row and two HATIE rows (steps 10, 20)."""
    root = tmp_path_factory.mktemp("show")
    for k, g in enumerate((7.5, 5.0, 10.0)):
        make_run(root, "ed", {"guidance_scale": g, "steps": 10, "tiny": {"layers": 2}}, partial=int(k == 2))
    make_run(root, "hat", {"steps": 10}, metric_sets=("basic", "hatie"))
    make_run(root, "hat", {"steps": 20}, metric_sets=("hatie",))
    make_run(root, "solo", {"strength": 0.5})
    write_leaderboards(root, None, 50, 0)
    return root


# -- settings ------------------------------------------------------------------------------------------------------

def test_flat_settings_flattens_nesting_and_lists_and_info_wins_over_config():
    info = {"guidance_scale": 7.5, "tiny": {"layers": 2, "dims": [32, 64]}, "device": "cuda", "empty": {}}
    config = {"device": "auto", "max_batch": None, "_target_": "editors.ip2p.X"}
    assert flat_settings(info, config) == {"_target_": "editors.ip2p.X", "device": "cuda", "empty": "{}",
                                           "guidance_scale": 7.5, "max_batch": None, "tiny.dims": "[32,64]",
                                           "tiny.layers": 2}


def test_varying_settings_are_the_keys_that_differ_or_that_some_rows_lack():
    rows = [{"a": 1, "b": "x", "c": True}, {"a": 1.0, "b": "y", "c": True}, {"a": 1, "b": "x", "c": 1, "d": None}]
    assert varying_settings(rows) == ["b", "c", "d"]  # 1 == 1.0 is one setting; True and 1 are not
    assert varying_settings(rows[:1]) == [] and varying_settings([]) == []
    assert varying_settings([{"x": math.nan}, {"x": math.nan}]) == []


def test_setting_columns_tell_rows_of_one_editor_apart(results):
    lb = pd.read_csv(results / "leaderboard.csv")
    set_cols = [c for c in lb.columns if c.startswith("set.")]
    assert set_cols == ["set.guidance_scale", "set.steps"]  # tiny.layers, strength: never differ within an editor
    ed = lb[lb["editor"] == "ed"]
    assert sorted(ed["set.guidance_scale"]) == [5.0, 7.5, 10.0]
    assert list(lb.columns[:10]) == ["queryset", "queryset_hash", "metric_set", "editor", "editor_sig", "prompt_kind",
                                     "profile", "seed", "set.guidance_scale", "set.steps"]
    for name in ("leaderboard_by_type.csv", "leaderboard_by_class.csv"):
        assert [c for c in pd.read_csv(results / name).columns if c.startswith("set.")] == set_cols
    metrics = pd.read_csv(results / "leaderboard_metrics.csv").set_index("metric")
    assert list(metrics.loc[["Total", "IQ", "score", "OF", "psnr"], "summary"]) == [True, True, True, False, False]


def test_sweeps_hold_one_row_per_editor_setting_and_metric(results):
    sw = pd.read_csv(results / "leaderboard_sweeps.csv")
    sw[["edit_type", "mark"]] = sw[["edit_type", "mark"]].fillna("")
    assert set(sw["editor"]) == {"ed", "hat"}  # solo has one row: no sweep
    ed = sw[(sw["editor"] == "ed") & (sw["edit_type"] == "") & (sw["metric"] == "psnr")]
    assert list(ed["set.guidance_scale"]) == [5.0, 7.5, 10.0] and set(ed["varying"]) == {"guidance_scale"}
    assert list(ed["complete"]) == [True, True, False] and ed["mark"].iloc[2].startswith("PARTIAL")
    lb = pd.read_csv(results / "leaderboard.csv").set_index("editor_sig")
    for _, r in ed.iterrows():
        assert r["value"] == pytest.approx(lb.loc[r["editor_sig"], "psnr"], rel=1e-5)
        assert r["se"] == pytest.approx(lb.loc[r["editor_sig"], "psnr_se"], rel=1e-5)
        assert r["n"] == lb.loc[r["editor_sig"], "psnr_n"]
    hat = sw[sw["editor"] == "hat"]
    assert set(hat["metric_set"]) == {"hatie"} and {"Total", "OF", "score"} <= set(hat["metric"])
    assert set(sw.loc[sw["edit_type"] != "", "edit_type"]) == {"obj_add", "obj_rep", "bg_chg"}
    assert len(ed) == 3 and len(sw[(sw["editor"] == "ed") & (sw["metric"] == "psnr")]) == 3 * 4  # all + 3 types


# -- show --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("v", "se", "digits", "want"), [
    (1.0, 7.3e-09, 3, "1.00±0"), (0.52349, 0.01234, 3, "0.523±0.012"), (25.31, 0.456, 3, "25.3±0.46"),
    (123.456, 4.56, 3, "123±4.6"), (0.52349, 0.0004, 3, "0.523±0"), (0.52349, 0.0006, 3, "0.523±0.00060"),
    (0.52349, 0.01234, 5, "0.52349±0.012"), (2.5e-05, 1e-06, 3, "2.50e-05±1.0e-06"), (0.0, 0.0, 3, "0.00±0"),
    (float("nan"), 0.1, 3, "nan"), (0.5, float("nan"), 3, "0.500"), (-1.23456, 0.2, 3, "-1.23±0.20"),
])
def test_means_get_three_significant_digits_and_tiny_ses_show_as_zero(v, se, digits, want):
    assert format_mean_se(v, se, digits) == want


def _section(text, title):
    block = text[text.index(title):]
    return block[: block.index("\n\n")] if "\n\n" in block else block


def test_show_sorts_by_the_headline_best_first_and_keeps_partial_rows_apart(results):
    text = format_table(results)
    basic = _section(text, "metrics=basic")
    assert "(sorted by psnr (best first))" in basic and "set.guidance_scale" in basic
    lb = pd.read_csv(results / "leaderboard.csv", dtype={"editor_sig": str})
    done = lb[(lb["metric_set"] == "basic") & lb["complete"]].sort_values("psnr", ascending=False)
    complete_block = basic[: basic.index("partial runs")]
    positions = [complete_block.index(s[:8]) for s in done["editor_sig"]]
    assert positions == sorted(positions)
    assert "PARTIAL 11/12" in basic[basic.index("partial runs"):]
    hatie = _section(text, "metrics=hatie")
    assert "(sorted by Total (best first))" in hatie and "set.steps" in hatie and "set.guidance_scale" not in hatie
    assert "psnr" not in hatie and "e-0" not in text  # each set its own columns; no scientific clutter


def test_show_sort_ascending_for_lower_is_better(results):
    basic = _section(format_table(results, sort="l1"), "metrics=basic")
    lb = pd.read_csv(results / "leaderboard.csv", dtype={"editor_sig": str})
    done = lb[(lb["metric_set"] == "basic") & lb["complete"]].sort_values("l1")
    positions = [basic.index(s[:8]) for s in done["editor_sig"]]
    assert positions == sorted(positions) and "(sorted by l1 (best first))" in basic


def test_show_by_type_and_class_print_the_group_tables(results):
    by_type = format_table(results, by="type")
    assert "edit_type" in by_type and "obj_add" in by_type and "(sorted by score (best first))" in by_type
    by_class = format_table(results, by="class", queryset="toy")
    assert "object_class" in by_class and "cat" in by_class and "dog" in by_class


def test_show_columns_picks_a_subset_but_always_keeps_identity_and_coverage(results):
    text = format_table(results, columns=["l1", "n_ok"])
    basic = _section(text, "metrics=basic")
    header = basic.splitlines()[1].split()
    assert header == ["editor", "sig", "l1↓", "n_ok", "coverage"]
    assert "PARTIAL 11/12" in basic


def test_show_unknown_column_is_one_clear_error_listing_the_valid_ones(results, capsys):
    with pytest.raises(ShowError, match=r"unknown column\(s\) 'psnrr'; valid: n_ok, n_failed, n_missing, set\."):
        format_table(results, columns=["psnr", "psnrr"])
    assert main(["show", "--results", str(results), "--sort", "Totl"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("editmeter show: error: --sort: unknown column 'Totl'; valid: editor,") and "Total" in err
    assert "Traceback" not in err
    assert main(["show", "--results", str(results), "--by", "class", "--columns", "psnr", "--digits", "2"]) == 0
    assert "object_class" in capsys.readouterr().out


def test_show_columns_of_one_metric_set_leave_out_the_other_sets_sections(results):
    text = format_table(results, columns=["l1"])
    assert "metrics=basic" in text and "metrics=hatie" not in text
    both = format_table(results, columns=["l1", "Total"])
    assert "metrics=basic" in both and "metrics=hatie" in both


# -- headlines and counts (every suite's section sorts by its headline, never by a count) --------------------------

@pytest.mark.parametrize(("metrics", "headline", "counts"), [
    ("pie", None, {"n_no_background", "n_no_caption"}),
    ("conventional", None, {"n_no_target", "n_no_mask", "n_dir_undefined"}),
    ("judge", "G_O", set()),
    ("editval", "accuracy", set()),
])
def test_suites_declare_their_headline_and_their_counts_in_run_json(metrics, headline, counts):
    from hydra.utils import instantiate

    from benchmark.commands.run import _metric_meta, compose

    cfg, _ = compose([f"metrics={metrics}", "profile=tiny", "queryset=demo_mini"])
    suite = instantiate(cfg.metrics)[metrics]
    meta = _metric_meta({metrics: suite}, suite)
    assert {c for c, m in meta.items() if m.get("count")} == counts
    assert [c for c, m in meta.items() if m.get("headline")] == ([headline] if headline else [])


def _show_one(tmp_path, metric_set: str, columns: dict[str, dict], rows: list[dict]) -> str:
    """`show`'s text for one section written by hand: leaderboard_metrics.csv from `columns`, leaderboard.csv
    from `rows` (editor -> metric values)."""
    from benchmark.tables.show import render

    meta = [{"metric": m, "metric_set": metric_set, "version": "1", "description": m, **c} for m, c in columns.items()]
    pd.DataFrame(meta).to_csv(tmp_path / "leaderboard_metrics.csv", index=False)
    base = {"queryset": "demo", "metric_set": metric_set, "prompt_kind": "instruction", "profile": "tiny",
            "complete": True, "mark": "", "n_ok": 4, "n_failed": 0, "n_missing": 0}
    pd.DataFrame([base | {"editor_sig": f"{i:016x}"} | r for i, r in enumerate(rows)]).to_csv(
        tmp_path / "leaderboard.csv", index=False)
    return render(tmp_path)


def test_pie_sorts_by_its_headline_and_shows_counts_as_counts(tmp_path):
    """pie was "sorted by n_no_background (best first)", with a ↓ on the count."""
    cols = {"structure_1e3": {"higher_is_better": False, "summary": False},
            "psnr_bg": {"higher_is_better": True, "summary": False},
            "n_no_background": {"higher_is_better": False, "summary": True, "count": True}}
    out = _show_one(tmp_path, "pie", cols, [
        {"editor": "worse", "structure_1e3": 9.0, "psnr_bg": 20.0, "n_no_background": 0},
        {"editor": "better", "structure_1e3": 1.0, "psnr_bg": 30.0, "n_no_background": 3}])
    assert "(sorted by structure_1e3 (best first))" in out
    assert "#n_no_background" in out and "n_no_background↓" not in out
    body = [line.split()[0] for line in out.splitlines() if line.startswith(("worse", "better"))]
    assert body == ["better", "worse"]


def test_a_declared_headline_wins_over_a_summary_and_old_tables_treat_n_columns_as_counts(tmp_path):
    """EditVal's demo table ranked identity above oracle by FID_type (a per-group summary); accuracy is its
    headline. A leaderboard_metrics.csv from before `count` existed still never sorts by an n_* summary."""
    cols = {"accuracy": {"higher_is_better": True, "summary": False, "headline": True},
            "FID_type": {"higher_is_better": False, "summary": True}}
    out = _show_one(tmp_path, "editval", cols, [
        {"editor": "identity", "accuracy": 0.0, "FID_type": 0.0},
        {"editor": "oracle", "accuracy": 1.0, "FID_type": 5.0}])
    assert "(sorted by accuracy (best first))" in out
    assert [line.split()[0] for line in out.splitlines() if line.startswith(("identity", "oracle"))] == \
        ["oracle", "identity"]
    old = {"clip_t": {"higher_is_better": True, "summary": False},
           "n_no_target": {"higher_is_better": False, "summary": True}}
    out = _show_one(tmp_path, "conventional", old, [{"editor": "a", "clip_t": 0.2, "n_no_target": 1}])
    assert "(sorted by clip_t (best first))" in out and "#n_no_target" in out


def test_show_columns_that_hide_the_headline_sort_by_a_shown_column_and_say_so(results):
    """`--columns l1` used to print "sorted by psnr" (the headline it hides) in the order of psnr (issue 58): the rows
    are sorted by the first metric shown, and the title names it; with no metric shown, the title says the
    column it sorts by is not shown."""
    basic = _section(format_table(results, columns=["l1"]), "metrics=basic")
    assert "(sorted by l1 (best first))" in basic and "psnr" not in basic
    lb = pd.read_csv(results / "leaderboard.csv", dtype={"editor_sig": str})
    done = lb[(lb["metric_set"] == "basic") & lb["complete"]].sort_values("l1")  # l1: lower is better
    positions = [basic.index(s[:8]) for s in done["editor_sig"]]
    assert positions == sorted(positions)
    counts = _section(format_table(results, columns=["n_ok"]), "metrics=basic")
    assert "(sorted by psnr (best first, not shown))" in counts
    # asked for explicitly, a hidden column is sorted by and said to be hidden too
    assert "(sorted by psnr (best first, not shown))" in _section(format_table(results, columns=["l1"], sort="psnr"),
                                                                  "metrics=basic")
