"""`editmeter metaeval judges`: each human-preference set's agreement measure on hand-worked numbers (strict
pairwise accuracy macro over subtasks, accuracy with tie calibration, accuracy without ties, TIGER's ranking rule),
the importers on fixtures written in each set's real format, and the command end to end on every set with a
scripted GEdit backbone whose scores are known, plus the tiny random-weight probability-readout judge."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from scripted_judge import ScriptedJudge
from test_gedit_protocol import FAKE_COMMIT, write_prompts

from benchmark.commands.metaeval import judges as J

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "datasets" / "demo"


def _point(stat, n):
    return float(stat(np.ones((1, n)))[0])


# ------------------------------------------------------------------------------------------- hand-worked measures
def test_strict_accuracy_is_per_subtask_then_the_plain_mean_and_a_judge_tie_is_wrong():
    h = np.array([1, 1, 1, 1])
    d = np.array([1.0, -1.0, 0.0, 2.0])  # subtask a: right, wrong, tie (wrong); subtask b: right
    assert _point(J.macro_strict(h, d, ["a", "a", "a", "b"]), 4) == pytest.approx((1 / 3 + 1) / 2)  # not 2/4


def test_accuracy_with_ties_takes_the_best_threshold_over_zero_and_every_gap():
    h = np.array([1, 0, -1, 1])
    d = np.array([0.5, 0.1, -2.0, 0.0])
    # eps 0: 2/4 (the people tie is not a judge tie, the judge tie is not people's); eps 0.1: 3/4; 0.5: 2/4; 2: 1/4
    assert J.tie_correct(h, d).mean(axis=0).tolist() == [0.5, 0.75, 0.5, 0.25]
    assert _point(J.accuracy_with_ties(h, d), 4) == 0.75


def test_accuracy_without_ties_drops_people_ties_and_counts_a_judge_tie_as_discordant():
    h = np.array([1, 0, -1, 1])
    d = np.array([0.5, 0.1, -2.0, 0.0])
    assert _point(J.accuracy_without_ties(h, d), 4) == pytest.approx(2 / 3)


def test_two_afc_counts_a_judge_tie_half_and_drops_people_ties():
    assert _point(J.agreement_2afc(np.array([1, -1, 0, 1]), np.array([1.0, 1.0, 5.0, 0.0])), 4) == pytest.approx(0.5)


@pytest.mark.parametrize(("ranking", "i", "j", "want"), [
    ("A>B", 0, 1, 1), ("B>A", 0, 1, -1), ("A<B", 0, 1, -1), ("A=B=Good", 0, 1, 0), ("A=B=Bad", 0, 1, 0),
    ("C>A>B", 0, 1, 1), ("C>A>B", 0, 2, -1), ("C>A>B", 1, 2, -1), ("D>B>A>C", 2, 3, -1), ("D>B>A>C", 0, 2, 1)])
def test_tiger_rankings_give_pairwise_verdicts_as_the_authors_read_them(ranking, i, j, want):
    assert J.tiger_verdict(ranking, i, j) == want


@pytest.mark.parametrize(("ranking", "want"), [("A>B", (0, 1)), ("B>A", (1, 0)), ("A<B", (1, 0)),
                                             ("A=B=Good", None), ("A=B=Bad", None), ("C>A>B", (2, 0, 1)),
                                             ("D>B>A>C", (3, 1, 0, 2))])
def test_tiger_rankings_give_peoples_whole_order_as_get_gt_ranking(ranking, want):
    assert J.tiger_order(ranking) == want


def test_the_judges_order_puts_the_later_edit_first_on_equal_scores_as_argsort_reversed():
    assert J.model_order([0.2, 0.9, 0.5]) == (1, 2, 0)
    assert J.model_order([0.5, 0.5]) == (1, 0)  # so "B>A" counts as ranked right on a judge tie
    assert J.model_order([1.0, 3.0, 3.0, 0.0]) == (2, 1, 0, 3)


def test_strict_ranking_takes_the_two_edit_tie_threshold_from_the_pairwise_accuracy_with_ties():
    # three two-edit groups and one of three edits. Two-edit verdicts / differences: A>B d=1, tie d=0.4, tie d=2.
    # Thresholds 0: 1/3; 0.4: 2/3; 1: 2/3 (A>B now a judge tie: wrong); 2: 2/3. The first maximum is eps = 0.4, so
    # the tie with d=2 is not a judge tie: groups right: A>B (fixed), tie 0.4, not tie 2, the 3-edit group (fixed).
    tie = np.array([False, True, True, False])
    h = np.array([1.0, 0.0, 0.0, np.nan])
    d = np.array([1.0, 0.4, 2.0, np.nan])
    fixed = np.array([True, False, False, True])
    assert _point(J.strict_ranking(tie, h, d, fixed), 4) == pytest.approx(3 / 4)
    # a resample without the d=0.4 tie: thresholds 0: 1/2 (the A>B pair right, the d=2 tie not), 1: 0 (A>B tied),
    # 2: 1/2 -> eps 0; the d=2 tie is wrong: 2 right groups of 3 drawn
    assert J.strict_ranking(tie, h, d, fixed)(np.array([[1.0, 0.0, 1.0, 1.0]])).tolist() == pytest.approx([2 / 3])


def test_a_statistic_under_resampling_weights_counts_a_drawn_group_twice():
    h, d = np.array([1, 1]), np.array([1.0, -1.0])
    w = np.array([[2.0, 0.0], [1.0, 2.0]])
    assert J.accuracy_without_ties(h, d)(w).tolist() == pytest.approx([1.0, 1 / 3])


# ------------------------------------------------------------------------------------------------------ fixtures
COLOURS = {"red": (200, 30, 30), "green": (30, 200, 30), "blue": (30, 30, 200), "gray": (90, 90, 90),
           "src": (10, 10, 10)}
# the scripted GEdit backbone: every SC reply [4, 4]; PQ by the edit's colour, so O = sqrt(4 x PQ):
# red (PQ 9) > green = gray (PQ 5) > blue (PQ 2)
PQ = {"200,30,30": '{"score": [9, 9]}', "30,200,30": '{"score": [5, 6]}', "90,90,90": '{"score": [7, 5]}',
      "30,30,200": '{"score": [2, 8]}', "10,10,10": '{"score": [1, 1]}'}


def _png(colour: str) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), COLOURS[colour]).save(buf, format="PNG")
    return buf.getvalue()


def _cell(colour: str) -> dict:
    return {"bytes": _png(colour), "path": f"{colour}.png"}


def _parquet(path: Path, rows: list[dict]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def editscore_fixture(root: Path) -> Path:
    """EditScore's EditReward-Bench rows; color_alter: right, wrong (1/2); style_change: right (1): macro 3/4."""
    def row(n, task, better, worse, dim="overall"):
        return {"key": [f"k{n}a", f"k{n}b"], "instruction": f"edit {n}", "input_image": _cell("src"),
                "output_images": [_cell(better), _cell(worse)], "task_type": task, "dimension": dim}

    return _parquet(root / "editscore" / "data" / "train-00000-of-00001.parquet", [
        row(1, "color_alter", "red", "blue"), row(2, "color_alter", "blue", "red"),
        row(3, "style_change", "green", "blue"), row(4, "style_change", "blue", "red", dim="consistency"),
        row(5, "color_alter", "red", "blue", dim="prompt_following"),
        row(6, "style_change", "blue", "green", dim="prompt_following")])


def tiger_fixture(root: Path) -> Path:
    """TIGER's EditReward-Bench: 2 edits: right, people tie = judge tie, wrong; 3 edits C>A>B: all right."""
    folder = root / "tiger"
    (folder / "images").mkdir(parents=True)
    for c in COLOURS:
        (folder / "images" / f"{c}.png").write_bytes(_png(c))

    def item(n, ranking, *edits):
        return {"prompt": f"tiger {n}", "path_src": "images/src.png",
                "paths_generated": [f"images/{e}.png" for e in edits], "human_vote": {"ranking": ranking}}

    (folder / "EditReward_Bench_2pair.json").write_text(json.dumps([
        item(1, "A>B", "red", "blue"), item(2, "A=B=Good", "green", "gray"), item(3, "B>A", "red", "green")]))
    (folder / "EditReward_Bench_3pair.json").write_text(json.dumps([item(4, "C>A>B", "green", "blue", "red")]))
    return folder


def genai_fixture(root: Path) -> Path:
    """GenAI-Bench image_edition votes: right, wrong, tie (judge tie), both bad (judge tie): 3/4 at eps 0."""
    def row(n, left, right, vote):
        return {"source_prompt": "s", "target_prompt": "t", "instruct_prompt": f"genai {n}",
                "source_image": _cell("src"), "left_output_image": _cell(left), "right_output_image": _cell(right),
                "left_model": "m1", "right_model": "m2", "vote_type": vote}

    return _parquet(root / "genai" / "image_edition" / "test_v1-00000-of-00001.parquet", [
        row(1, "red", "blue", "leftvote"), row(2, "red", "green", "rightvote"), row(3, "green", "gray", "tievote"),
        row(4, "blue", "blue", "bothbad_vote")])


def imagenhub_fixture(root: Path) -> tuple[list[str], list[str]]:
    """Ratings of editors e1 (red) and e2 (blue) on two demo queries: people prefer e1, then e2: 2AFC 1/2."""
    qs = [json.loads(x) for x in (DEMO / "queries.jsonl").read_text().splitlines()[:2]]
    for ed, colour in (("e1", "red"), ("e2", "blue")):
        (root / "edits" / ed).mkdir(parents=True)
        for q in qs:
            (root / "edits" / ed / f"{q['id']}.png").write_bytes(_png(colour))
    (root / "r1.tsv").write_text("uid\te1\te2\n" + f"{qs[0]['id']}.png\t[1, 1]\t[0, 0]\n"
                                 + f"{qs[1]['id']}.png\t[0, 0]\t[1, 1]\n")
    return ["--ratings", str(root / "r1.tsv"), "--images", str(root / "edits")], [q["instruction"] for q in qs]


def test_importers_read_each_format_into_groups_with_peoples_verdicts(tmp_path):
    es = J.read_editscore(editscore_fixture(tmp_path).parent)
    assert [g.subtask for g in es.groups] == ["color_alter", "color_alter", "style_change"]  # one dimension
    assert all(g.comparisons == ((0, 1, 1),) for g in es.groups) and es.counts == {"rows": 6, "pairs": 3}
    tg = J.read_tiger(tiger_fixture(tmp_path))
    assert [g.comparisons for g in tg.groups] == [((0, 1, 1),), ((0, 1, 0),), ((0, 1, -1),),
                                                  ((0, 1, 1), (0, 2, -1), (1, 2, -1))]
    assert tg.counts == {"groups": 4, "pairs": 6} and tg.groups[3].subtask == "3-Pair"
    gn = J.read_genai(genai_fixture(tmp_path))
    assert [g.comparisons[0][2] for g in gn.groups] == [1, -1, 0, 0]
    assert J.load_image(gn.groups[0].edits[0]).getpixel((0, 0)) == COLOURS["red"]


def test_importers_name_the_bad_file_and_row(tmp_path):
    folder = tiger_fixture(tmp_path)
    (folder / "EditReward_Bench_3pair.json").write_text(json.dumps([{"prompt": "x", "path_src": "images/src.png",
        "paths_generated": ["images/red.png", "images/blue.png", "images/gone.png"],
        "human_vote": {"ranking": "A>B"}}]))
    with pytest.raises(J.JudgeSetError, match=r"EditReward_Bench_3pair.json item 0: ranking 'A>B' does not order"):
        J.read_tiger(folder)
    bad = _parquet(tmp_path / "g.parquet", [{"instruct_prompt": "x", "source_image": _cell("src"),
                                             "left_output_image": _cell("red"), "right_output_image": _cell("red"),
                                             "vote_type": "maybe"}])
    with pytest.raises(J.JudgeSetError, match=r"row 0: vote_type 'maybe'"):
        J.read_genai(bad)
    with pytest.raises(J.JudgeSetError, match=r"missing column\(s\) vote_type"):
        J.read_genai(_parquet(tmp_path / "h.parquet", [{"instruct_prompt": "x", "source_image": _cell("src"),
                                                        "left_output_image": _cell("red"),
                                                        "right_output_image": _cell("red")}]))


# ---------------------------------------------------------------------------------------------------- end to end
def _cli(*args: str) -> int:
    from benchmark.commands.cli import main

    return main(["metaeval", "judges", *args])


def _table(tmp_path: Path):
    import pandas as pd

    path = next((tmp_path / "results" / "metaeval").glob("judges-*.csv"))
    return pd.read_csv(path), json.loads(path.with_suffix(".json").read_text())


def test_cli_judges_every_set_with_a_scripted_gedit_backbone_gives_the_hand_worked_numbers(tmp_path, monkeypatch,
                                                                                             capsys):
    ih_args, ih_instructions = imagenhub_fixture(tmp_path)
    instructions = [*ih_instructions, *(f"edit {n}" for n in range(1, 5)), *(f"tiger {n}" for n in range(1, 5)),
                    *(f"genai {n}" for n in range(1, 5))]
    build = J.build_judge

    def scripted(name, overrides):  # metrics=gedit's protocol, its backbone's replies scripted
        judge = build(name, overrides)
        judge.suite.backbone = ScriptedJudge(sc=dict.fromkeys(instructions, '{"score": [4, 4]}'), pq=PQ)
        return judge

    monkeypatch.setattr(J, "build_judge", scripted)
    prompts, sha = write_prompts(tmp_path)
    assert _cli("--judges", "gedit", "--sets", f"editscore={editscore_fixture(tmp_path).parent.parent}",
                f"tiger={tiger_fixture(tmp_path)}", f"genai={genai_fixture(tmp_path)}", "imagenhub", *ih_args,
                "queryset=demo_mini", "profile=tiny", f"paths.results={tmp_path / 'results'}", "progress=false",
                f"metrics.gedit.prompts_file={prompts}", f"metrics.gedit.prompts_sha256={sha}",
                f"metrics.gedit.prompts_commit={FAKE_COMMIT}", "--resamples", "200") == 0
    df, side = _table(tmp_path)
    got = {(r.set, r.subtask): r.value for r in df.itertuples() if r.judge == "gedit"}
    assert got == pytest.approx({("editscore", "all (macro)"): 0.75, ("editscore", "color_alter"): 0.5,
                                 ("editscore", "style_change"): 1.0, ("tiger", "all"): 5 / 6,
                                 ("tiger", "2-Pair"): 2 / 3, ("tiger", "3-Pair"): 1.0, ("genai", "all"): 0.75,
                                 # groups ranked wholly right: A>B yes, the tie yes (eps 0 is the best threshold),
                                 # B>A no, C>A>B yes
                                 ("tiger", "all (strict ranking)"): 0.75, ("tiger", "2-Pair (strict ranking)"): 2 / 3,
                                 ("tiger", "3-Pair (strict ranking)"): 1.0,
                                 ("imagenhub", "all"): 0.5})
    assert (df[df.judge == "gedit"].n_unscored == 0).all()
    head = df[(df.judge == "gedit") & (df.subtask == "all (macro)")].iloc[0]
    assert head.value_lo <= head.value <= head.value_hi
    published = df[df.judge.str.startswith("published")]
    assert set(published.set) == {"genai", "tiger"} and published.source.str.contains("@").all()
    assert "editscore" not in set(published.set)  # no figure listed that was not read from its source
    assert FAKE_COMMIT in side["metric_sigs"]["gedit"] and side["counts"]["genai/votes"] == 4
    out = capsys.readouterr().out
    assert "published: GPT-4o" in out and "strict pairwise accuracy" not in out  # the table shows values, not prose


def test_cli_judges_a_reply_that_does_not_parse_leaves_its_pairs_unscored_and_says_so(tmp_path, monkeypatch,
                                                                                        capsys):
    build = J.build_judge

    def scripted(name, overrides):
        judge = build(name, overrides)
        replies = {f"genai {n}": '{"score": [4, 4]}' for n in range(1, 5)} | {"genai 2": "no idea"}
        judge.suite.backbone = ScriptedJudge(sc=replies, pq=PQ)
        return judge

    monkeypatch.setattr(J, "build_judge", scripted)
    prompts, sha = write_prompts(tmp_path)
    assert _cli("--judges", "gedit", "--sets", f"genai={genai_fixture(tmp_path)}", "profile=tiny",
                f"paths.results={tmp_path / 'results'}", f"metrics.gedit.prompts_file={prompts}",
                f"metrics.gedit.prompts_sha256={sha}", f"metrics.gedit.prompts_commit={FAKE_COMMIT}",
                "--resamples", "0") == 0
    df, side = _table(tmp_path)
    row = df[df.judge == "gedit"].iloc[0]
    assert (row.n_pairs, row.n_unscored) == (3, 1) and row.value == pytest.approx(1.0)  # the wrong vote fell out
    assert side["edits_failed"] == {"gedit/genai": 2}
    assert "2 edit(s) failed to score" in capsys.readouterr().out


def test_cli_judges_the_tiny_probability_readout_judge_scores_every_edit(tmp_path, single_thread_torch):
    assert _cli("--judges", "judge", "--sets", f"genai={genai_fixture(tmp_path)}", "profile=tiny",
                f"paths.results={tmp_path / 'results'}", "metrics.judge.resolution=56", "--resamples", "50") == 0
    df, _ = _table(tmp_path)
    row = df[df.judge == "judge"].iloc[0]
    assert row.n_unscored == 0 and row.n_pairs == 4 and 0 <= row.value <= 1 and math.isfinite(row.value)


def test_cli_judges_bad_set_spec_and_unknown_judge_exit_2(tmp_path, capsys):
    assert _cli("--sets", "tiger", "profile=tiny") == 2
    assert "--sets tiger: want editscore=PATH" in capsys.readouterr().err
    assert _cli("--judges", "basic", "--sets", f"genai={genai_fixture(tmp_path)}", "profile=tiny",
                f"paths.results={tmp_path / 'results'}") == 2
    assert "metrics=basic is not a judge that scores single edits" in capsys.readouterr().err


def test_editscores_set_compares_the_judges_column_of_the_chosen_dimension_and_refuses_a_missing_one():
    from benchmark.commands.metaeval.scoring import MetaevalError

    es, tiger = J.HumanSet("editscore", [], []), J.HumanSet("tiger", [], [])
    learned = J.Judge("learned", None, "O", "sig", {"overall": "O", "prompt_following": "PF", "consistency": "C"})
    assert [learned.column_for(es, d) for d in J.EDITSCORE_DIMENSIONS] == ["PF", "C", "O"]
    assert learned.column_for(tiger, "consistency") == "O"  # other sets: the judge's own column
    plain = J.Judge("gedit", None, "G_O", "sig", {"overall": "G_O"})
    assert plain.column_for(es, "overall") == "G_O"
    with pytest.raises(MetaevalError, match="gedit has no consistency score"):
        plain.column_for(es, "consistency")


def _scripted_gedit_on_genai(tmp_path, monkeypatch) -> tuple[list, tuple[str, ...]]:
    """`metaeval judges --judges gedit` on the GenAI fixture with a scripted backbone per judge built: (the
    backbones, in build order, and the CLI arguments)."""
    build = J.build_judge
    backbones: list = []

    def scripted(name, overrides):
        judge = build(name, overrides)
        judge.suite.backbone = ScriptedJudge(sc={f"genai {n}": '{"score": [4, 4]}' for n in range(1, 5)}, pq=PQ)
        backbones.append(judge.suite.backbone)
        return judge

    monkeypatch.setattr(J, "build_judge", scripted)
    prompts, sha = write_prompts(tmp_path)
    args = ("--judges", "gedit", "--sets", f"genai={genai_fixture(tmp_path)}", "profile=tiny",
            f"paths.results={tmp_path / 'results'}", f"metrics.gedit.prompts_file={prompts}",
            f"metrics.gedit.prompts_sha256={sha}", f"metrics.gedit.prompts_commit={FAKE_COMMIT}", "--resamples", "0")
    return backbones, args


def test_cli_judges_keeps_each_edits_row_so_a_rerun_judges_nothing_again_and_a_torn_line_is_skipped(
        tmp_path, monkeypatch, capsys):
    backbones, args = _scripted_gedit_on_genai(tmp_path, monkeypatch)
    assert _cli(*args) == 0
    first, _ = _table(tmp_path)
    # 8 edits, 7 distinct (instruction, source, edit) contents: "genai 4" shows the same blue edit twice
    assert sum(backbones[0].calls) == 14  # two prompts per distinct edit
    (cache,) = (tmp_path / "results" / "metaeval" / "judge_scores").glob("*.jsonl")
    lines = cache.read_text().splitlines()
    assert len(lines) == 7
    cache.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][: len(lines[-1]) // 2])  # a kill mid-line
    capsys.readouterr()
    assert _cli(*args) == 0
    assert sum(backbones[1].calls) == 2  # only the torn record is judged again
    out = capsys.readouterr().out
    assert "6 edit(s) read from the score cache" in out and "1 unreadable cache line(s) skipped" in out
    second, _ = _table(tmp_path)
    pd.testing.assert_series_equal(second.value, first.value)
    assert _cli(*args, "--no-cache") == 0 and sum(backbones[2].calls) == 14
    # another judge signature (here the suite's next version) never reads those rows
    from benchmark.io.types import MetricInfo
    from benchmark.metrics.gedit.suite import GEditSuite

    monkeypatch.setattr(GEditSuite, "info", MetricInfo("gedit", "9.9", True, description="next"))
    assert _cli(*args) == 0 and sum(backbones[3].calls) == 14


def test_cli_judges_rejudges_a_cache_line_whose_scores_were_edited_and_clears_a_killed_runs_temp_file(
        tmp_path, monkeypatch, capsys):
    """A cache line edited by hand (a score set to 9.99, another to NaN written as null) keeps valid JSON and the
    right key, but not the digest written with it: it is judged again and the table is unchanged. A temp file left
    by a killed run (its writer's pid gone) in metaeval/ is removed by the next table write."""
    import json

    backbones, args = _scripted_gedit_on_genai(tmp_path, monkeypatch)
    assert _cli(*args) == 0
    first, _ = _table(tmp_path)
    (cache,) = (tmp_path / "results" / "metaeval" / "judge_scores").glob("*.jsonl")
    recs = [json.loads(line) for line in cache.read_text().splitlines()]
    ok = [r for r in recs if r["status"] == "ok"]
    ok[0]["scores"]["G_O"], ok[1]["scores"]["G_SC"] = 9.99, None
    cache.write_text("".join(json.dumps(r) + "\n" for r in recs))
    from benchmark.io.fileio import _host

    stray = tmp_path / "results" / "metaeval" / f".judges-genai-0123456789ab.csv.{_host()}-999999999.abcd1234.tmp"
    stray.write_text("half a table")
    capsys.readouterr()
    assert _cli(*args) == 0
    assert sum(backbones[1].calls) == 4  # the two edited records, two prompts each
    assert "2 unreadable cache line(s) skipped" in capsys.readouterr().out
    second, _ = _table(tmp_path)
    pd.testing.assert_series_equal(second.value, first.value)
    assert not stray.exists()


class ColourScript:
    """An EditScore backbone double: the SC reply's two scores (prompt following, consistency) by the edit's colour,
    every PQ reply [25, 25]."""

    SC = {"200,30,30": "[25, 5]", "30,30,200": "[5, 25]", "30,200,30": "[15, 15]"}
    name = "colour-script@test"
    identity = "colour-script@test|v1"

    def generate(self, requests, seeds=None):
        out = []
        for images, _ in requests:
            colour = ",".join(map(str, max(images[-1].convert("RGB").getcolors(1 << 16))[1]))
            out.append(self.SC[colour] if len(images) == 2 else "[25, 25]")
        return out


@pytest.mark.parametrize(("dimension", "want"), [
    # prompt_following rows: red (PF 25 -> 10) over blue (2): right; blue (2) over green (6): wrong -> (1 + 0) / 2
    ("prompt_following", {"all (macro)": 0.5, "color_alter": 1.0, "style_change": 0.0}),
    # consistency row: blue (C 25 -> 10) over red (2): right
    ("consistency", {"all (macro)": 1.0, "style_change": 1.0}),
    # overall rows: O = sqrt(min(SC) x PQ) on 0..10: red 4.47 vs blue 4.47 (tie: wrong), blue 4.47 vs red (wrong),
    # green 7.75 vs blue: right
    ("overall", {"all (macro)": 0.5, "color_alter": 0.0, "style_change": 1.0})])
def test_cli_judges_editscore_compares_its_own_score_of_the_chosen_dimension(tmp_path, monkeypatch, dimension, want):
    from test_editscore_judge import FAKE_COMMIT as ES_COMMIT
    from test_editscore_judge import write_prompts as write_es_prompts

    build = J.build_judge

    def scripted(name, overrides):
        judge = build(name, overrides)
        judge.suite.backbone = ColourScript()
        return judge

    monkeypatch.setattr(J, "build_judge", scripted)
    prompts, sha = write_es_prompts(tmp_path)
    assert _cli("--judges", "editscore", "--sets", f"editscore={editscore_fixture(tmp_path).parent.parent}",
                "--dimension", dimension, "profile=tiny", f"paths.results={tmp_path / 'results'}",
                f"metrics.editscore.prompts_file={prompts}", f"metrics.editscore.prompts_sha256={sha}",
                f"metrics.editscore.prompts_commit={ES_COMMIT}", "--resamples", "0") == 0
    df, side = _table(tmp_path)
    assert {r.subtask: r.value for r in df.itertuples()} == pytest.approx(want)
    assert side["columns"] == {"editscore/editscore": {"prompt_following": "ES_prompt_following",
                                                       "consistency": "ES_consistency",
                                                       "overall": "ES_overall"}[dimension]}


def test_cli_judges_refuses_a_dimension_the_judge_does_not_score_before_judging(tmp_path, capsys):
    prompts, sha = write_prompts(tmp_path)
    assert _cli("--judges", "gedit", "--sets", f"editscore={editscore_fixture(tmp_path).parent.parent}",
                "--dimension", "consistency", "profile=tiny", f"paths.results={tmp_path / 'results'}",
                f"metrics.gedit.prompts_file={prompts}", f"metrics.gedit.prompts_sha256={sha}",
                f"metrics.gedit.prompts_commit={FAKE_COMMIT}") == 2
    assert "gedit has no consistency score" in capsys.readouterr().err


def test_cli_judges_the_tiny_learned_judges_on_fixture_pairs_of_every_set(tmp_path, single_thread_torch):
    from test_editreward_judge import FAKE_COMMIT as ER_COMMIT
    from test_editreward_judge import SMALL
    from test_editreward_judge import write as write_er_prompts
    from test_editscore_judge import FAKE_COMMIT as ES_COMMIT
    from test_editscore_judge import write_prompts as write_es_prompts

    ih_args, _ = imagenhub_fixture(tmp_path)
    es_prompts, es_sha = write_es_prompts(tmp_path)
    er = write_er_prompts(tmp_path / "er_prompts")
    assert _cli("--judges", "editscore,editreward", "--sets", f"editscore={editscore_fixture(tmp_path).parent.parent}",
                f"tiger={tiger_fixture(tmp_path)}", f"genai={genai_fixture(tmp_path)}", "imagenhub", *ih_args,
                "queryset=demo_mini", "profile=tiny", f"paths.results={tmp_path / 'results'}", "--resamples", "20",
                f"metrics.editscore.prompts_file={es_prompts}", f"metrics.editscore.prompts_sha256={es_sha}",
                f"metrics.editscore.prompts_commit={ES_COMMIT}", "metrics.editscore.backbone.max_new_tokens=8",
                "metrics.editscore.backbone.dtype=float32",
                f"metrics.editreward.prompts_file={er['path']}", f"metrics.editreward.prompts_sha256={er['sha256']}",
                f"metrics.editreward.prompts_commit={ER_COMMIT}", f"metrics.editreward.suffix_file={er['suffix_path']}",
                f"metrics.editreward.suffix_sha256={er['suffix_sha256']}", "metrics.editreward.backbone.dtype=float32",
                f"metrics.editreward.backbone.image_pixels={SMALL}") == 0
    df, side = _table(tmp_path)
    heads = df[df.subtask.isin(["all", "all (macro)"]) & ~df.judge.str.startswith("published")]
    assert {(r.judge, r.set) for r in heads.itertuples()} == {
        (j, s) for j in ("editscore", "editreward") for s in ("editscore", "tiger", "genai", "imagenhub")}
    reward = heads[heads.judge == "editreward"]
    assert (reward.n_unscored == 0).all() and reward.value.between(0, 1).all()  # a reward for every edit
    # random weights write bytes, not EditScore's JSON: every edit is a failure row and its pairs are unscored
    sampled = heads[heads.judge == "editscore"]
    assert (sampled.n_unscored > 0).all() and side["edits_failed"]["editscore/genai"] == 8
    assert side["columns"]["editreward/editscore"] == "ER" and side["columns"]["editscore/tiger"] == "ES_overall"


def test_cli_judges_a_missing_prompt_file_stops_before_any_edit_is_judged(tmp_path, capsys):
    assert _cli("--judges", "gedit", "--sets", f"genai={genai_fixture(tmp_path)}", "profile=tiny",
                f"paths.results={tmp_path / 'results'}", f"metrics.gedit.prompts_file={tmp_path / 'nowhere.txt'}",
                "metrics.gedit.prompts_sha256=" + "0" * 64, f"metrics.gedit.prompts_commit={FAKE_COMMIT}") == 2
    assert "--judges gedit: GEdit-Bench's prompt file" in capsys.readouterr().err
    assert not (tmp_path / "results" / "metaeval" / "judge_scores").exists()


def test_redirected_output_of_judges_gets_no_third_party_loading_bar(tmp_path):
    """`metaeval judges` loading the tiny EditReward through transformers printed "Loading weights: 100%| 57/57"
    into redirected output; bars are promised only on a terminal, as in `editmeter run`."""
    import os
    import subprocess
    import sys

    from test_editreward_judge import FAKE_COMMIT as ER_COMMIT
    from test_editreward_judge import SMALL
    from test_editreward_judge import write as write_er_prompts

    er = write_er_prompts(tmp_path / "er_prompts")
    args = ["--judges", "editreward", "--sets", f"genai={genai_fixture(tmp_path)}", "queryset=demo_mini",
            "profile=tiny", f"paths.results={tmp_path / 'results'}", "--resamples", "0",
            f"metrics.editreward.prompts_file={er['path']}", f"metrics.editreward.prompts_sha256={er['sha256']}",
            f"metrics.editreward.prompts_commit={ER_COMMIT}", f"metrics.editreward.suffix_file={er['suffix_path']}",
            f"metrics.editreward.suffix_sha256={er['suffix_sha256']}", "metrics.editreward.backbone.dtype=float32",
            f"metrics.editreward.backbone.image_pixels={SMALL}"]
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", PYTHONPATH=str(root))
    env.pop("TQDM_DISABLE", None)
    proc = subprocess.run([sys.executable, "-m", "benchmark.commands.cli", "metaeval", "judges", *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Loading weights" not in proc.stderr + proc.stdout and "\r" not in proc.stderr
