"""`editmeter metaeval drift`: one results folder of 3 weight-free editors on a GEdit-Bench fixture (English, 5
queries), scored with metrics=gedit by two scripted judges (tests/helpers/colour_judge.py: replies chosen by the
edit's colour), compared through the CLI against numbers worked out by hand; a judge against an identical later
version of itself, and A and B swapped, as properties; the errors; imgedit and KRIS-Bench (a dimension defined on
some tasks only) as other judged suites; pairing (only rows ok under both judges, on the same edit bytes), the
default choice of A, and the per-reply provenance columns on hand-made rows."""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from conftest import child_pythonpath
from omegaconf import open_dict
from test_gedit_builder import gedit_dataset
from test_gedit_protocol import FAKE_COMMIT, write_prompts

ROOT = Path(__file__).resolve().parents[1]

# the edits' colours: identity keeps each source's colour, overedit (noise 0) rolls the RGB channels by 1 or 2
R, G, B, BR, TL, PU, GY = "200,30,30", "30,200,30", "30,30,200", "120,90,10", "10,120,90", "90,10,120", "90,90,90"
EDITS = {  # query (k1, k2, k3, t1, k5) -> edit colour, per editor
    "identity": [R, G, B, BR, GY],
    "roll1": [G, B, R, TL, GY],   # overedit channel_roll=1
    "roll2": [B, R, G, PU, GY],   # overedit channel_roll=2
}
EDITORS = {"identity": ["editor=identity"],
           "roll1": ["editor=overedit", "editor.noise_std=0", "editor.channel_roll=1"],
           "roll2": ["editor=overedit", "editor.noise_std=0", "editor.channel_roll=2"]}
FAIL = "I cannot judge this."  # does not parse: a failure row, never a score


def s(v: int) -> str:
    return f'{{"score": [{v}, {v}]}}'


SC_A = {R: 8, G: 6, B: 4, BR: 7, TL: 3, PU: 5, GY: 2}
PQ_A = {R: 5, G: 6, B: 9, BR: 7, TL: 5, PU: None, GY: 8}     # PU fails under A: roll2's t1
SC_B = {R: 8, G: 5, B: 6, BR: 5, TL: 4, PU: 5, GY: None}     # GY fails under B: every editor's k5
PQ_B = {R: 5, G: 6, B: 9, BR: 6, TL: 7, PU: 4, GY: 8}


def judge(sc: dict, pq: dict, version: str) -> dict:
    return {"_target_": "colour_judge.ColourJudge", "version": version,
            "sc": {c: FAIL if v is None else s(v) for c, v in sc.items()},
            "pq": {c: FAIL if v is None else s(v) for c, v in pq.items()}}


def score_all(root: Path, prompts: Path, sha: str, results: Path, backbone: dict, *extra: str,
              editors: tuple[str, ...] = tuple(EDITORS)) -> None:
    from benchmark.commands.run import compose, run_pipeline

    for editor in (EDITORS[e] for e in editors):
        cfg, choices = compose([*editor, *extra, "queryset=gedit", f"queryset.root={root}", "queryset.language=en",
                                "metrics=gedit", "profile=tiny", f"paths.results={results}", "progress=false",
                                "aggregate.bootstrap_resamples=20", "max_failed_fraction=1.0",
                                f"metrics.gedit.prompts_file={prompts}", f"metrics.gedit.prompts_sha256={sha}",
                                f"metrics.gedit.prompts_commit={FAKE_COMMIT}"])
        with open_dict(cfg):
            cfg.metrics.gedit.backbone = backbone
        run_pipeline(cfg, choices["editor"])


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """`two`: scored by judge A, then by judge B; `three`: the same plus A's replies under another version (A2)."""
    from benchmark.querysets.gedit import build

    tmp = tmp_path_factory.mktemp("drift")
    build(gedit_dataset(tmp), tmp / "gedit")
    prompts, sha = write_prompts(tmp)
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        for backbone in (judge(SC_A, PQ_A, "A"), judge(SC_B, PQ_B, "B")):
            score_all(tmp / "gedit", prompts, sha, tmp / "two", backbone)
        shutil.copytree(tmp / "two", tmp / "three")
        score_all(tmp / "gedit", prompts, sha, tmp / "three", judge(SC_A, PQ_A, "A2"))
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    sigs = {}
    for d in ("two", "three"):
        run = next((tmp / d / "runs").glob("gedit-en-*/identity-*"))
        meta = json.loads((run / "run.json").read_text())
        sigs |= {entry["suite"]["components"]["judge"].split("-")[2].split("@")[0]: sig
                 for sig, entry in meta["scored"].items()}
    return SimpleNamespace(two=tmp / "two", three=tmp / "three", sig=sigs, root=tmp / "gedit", prompts=prompts,
                           sha=sha)


def drift(capsys, *argv: str) -> tuple[int, str, str]:
    from benchmark.commands.cli import main

    rc = main(["metaeval", "drift", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def tables(out: str) -> dict[str, pd.DataFrame]:
    path = Path(next(line for line in out.splitlines() if line.startswith("[metaeval] wrote ")).split()[2])
    stem = path.with_suffix("")
    return {"main": pd.read_csv(path), "ranks": pd.read_csv(stem.with_name(stem.name + "-ranks.csv")),
            "changes": pd.read_csv(stem.with_name(stem.name + "-changes.csv")),
            "side": json.loads(path.with_suffix(".json").read_text())}


def row(df: pd.DataFrame, dim: str, scope: str = "all") -> pd.Series:
    return df[(df["dimension"] == dim) & (df["scope"] == scope)].iloc[0]


def paired_values(sc: dict, pq: dict, editor: str) -> list[tuple[float, float, float]]:
    """(SC, PQ, O) of the editor's samples scored ok under both judges (k1, k2, k3, t1; t1 of roll2 failed under A,
    every k5 under B)."""
    colours = EDITS[editor][:3] if editor == "roll2" else EDITS[editor][:4]
    return [(sc[c], pq[c], math.sqrt(sc[c] * pq[c])) for c in colours]


def test_two_scripted_judges_give_the_hand_worked_drift_through_the_cli(folders):
    from scipy.stats import spearmanr

    env = {**os.environ, "PYTHONPATH": child_pythonpath(ROOT), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "benchmark.commands.cli", "metaeval", "drift",
                           f"paths.results={folders.two}"], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    # docs/metaeval.md's worked example is this output (tests/helpers/docs_blocks.py: placeholders, `...`)
    from docs_blocks import blocks_of, mismatch

    (doc,) = [blk for blk in blocks_of(ROOT / "docs" / "metaeval.md") if blk.mode == "fixture"]
    assert mismatch(doc.commands[0].shown, out.splitlines()) is None, (mismatch(doc.commands[0].shown,
                                                                               out.splitlines()), out)
    a, b = folders.sig["A"], folders.sig["B"]
    # the only two judges: A is the one scored first, and both are named with what the rows say about them
    assert "A is the one scored first" in out
    assert f"A = {a}  judge colour-judge-A@test, 3 run folder(s)" in out
    assert f"B = {b}  judge colour-judge-B@test, 3 run folder(s)" in out
    # what the rows say about each reply: scripted replies carry no fingerprint; the model is recorded when the rows
    # have the column (judged suites write it), else "not recorded"
    run = next(folders.two.glob("runs/gedit-en-*/identity-*"))
    columns = pd.read_parquet(next((run / "scores" / a).glob("part-*.parquet"))).columns
    lines = out.splitlines()
    for side in "AB":
        at = next(i for i, line in enumerate(lines) if line.startswith(f"  {side} = "))
        rows_line = lines[at + 2]  # the judge, its backbone, then what its rows record
        assert rows_line.startswith("      rows: ")
        assert "judge_fingerprint not recorded" in rows_line
        assert (f"judge_model: colour-judge-{side}@test (" in rows_line if "judge_model" in columns
                else "judge_model not recorded" in rows_line)
    # 15 samples: roll2's t1 failed under A, k5 of all three under B; failures are counted, never paired
    assert ("paired: 11 sample(s) scored ok under both judges; not paired (never scored as a number): 1 failed under "
            "A, 3 failed under B, 0 failed under both, 0 missing") in out
    assert "from 10000 paired bootstrap resamples over queries, seed 0" in out
    t = tables(out)
    main = t["main"]
    # G_SC, all 11 pairs (A -> B): identity 8->8, 6->5, 4->6, 7->5; roll1 6->5, 4->6, 8->8, 3->4; roll2 4->6, 8->8,
    # 6->5. Differences 0,-1,2,-2, -1,2,0,1, 2,0,-1: sum 2; equal 3 (the red edits); |d| <= 1: 7
    sc = row(main, "G_SC")
    assert (sc["n_paired"], sc["failed_a"], sc["failed_b"], sc["failed_both"], sc["missing"]) == (11, 1, 3, 0, 0)
    assert sc["shift"] == pytest.approx(2 / 11, abs=1e-6)
    assert sc["shift_lo"] <= sc["shift"] <= sc["shift_hi"] and sc["shift_lo"] < sc["shift_hi"]
    assert sc["exact"] == pytest.approx(3 / 11, abs=1e-6) and sc["within"] == pytest.approx(7 / 11, abs=1e-6)
    a_sc = [8, 6, 4, 7, 6, 4, 8, 3, 4, 8, 6]
    b_sc = [8, 5, 6, 5, 5, 6, 8, 4, 6, 8, 5]
    assert sc["spearman"] == pytest.approx(spearmanr(a_sc, b_sc).statistic, abs=1e-5)
    assert (sc["mean_a"], sc["mean_b"]) == pytest.approx((64 / 11, 66 / 11), abs=1e-5)
    # G_PQ: only the brown (7 -> 6) and teal (5 -> 7) edits move: shift (-1 + 2) / 11, 9 of 11 equal, 10 within 1
    pq = row(main, "G_PQ")
    assert (pq["shift"], pq["exact"], pq["within"]) == pytest.approx((1 / 11, 9 / 11, 10 / 11), abs=1e-6)
    # G_O = sqrt(SC x PQ) per sample
    o_a = [v[2] for e in EDITS for v in paired_values(SC_A, PQ_A, e)]
    o_b = [v[2] for e in EDITS for v in paired_values(SC_B, PQ_B, e)]
    assert row(main, "G_O")["shift"] == pytest.approx((sum(o_b) - sum(o_a)) / 11, abs=1e-5)
    # per editor: identity's SC 25/4 -> 24/4, its one failure under B counted on its own row
    ident = row(main, "G_SC", "identity")
    assert (ident["n_paired"], ident["shift"], ident["failed_a"], ident["failed_b"]) == (4, pytest.approx(-0.25), 0, 1)

    # ranks: SC means A: identity 25/4, roll2 18/3, roll1 21/4; B: identity 24/4, roll2 19/3, roll1 23/4
    ranks = t["ranks"]
    roll1, roll2 = (ranks.loc[ranks["run"].str.startswith("overedit") & (ranks["n_paired"] == n), "run"].iloc[0]
                    for n in (4, 3))
    label = {"identity": "identity", "roll1": roll1, "roll2": roll2}

    def ranked(dim):
        r = ranks[ranks["dimension"] == dim].set_index("run")
        return {e: (r.loc[label[e], "mean_a"], r.loc[label[e], "rank_a"], r.loc[label[e], "mean_b"],
                    r.loc[label[e], "rank_b"]) for e in label}

    assert ranked("G_SC") == {"identity": pytest.approx((6.25, 1, 6.0, 2)), "roll2": pytest.approx((6.0, 2, 19 / 3, 1)),
                              "roll1": pytest.approx((5.25, 3, 5.75, 3))}
    # PQ means A: identity 27/4, roll2 20/3, roll1 25/4; B: identity 26/4, roll2 20/3, roll1 27/4: reversed
    assert ranked("G_PQ") == {"identity": pytest.approx((6.75, 1, 6.5, 3)),
                              "roll2": pytest.approx((20 / 3, 2, 20 / 3, 2)),
                              "roll1": pytest.approx((6.25, 3, 6.75, 1))}
    # Kendall's tau: SC one discordant pair of three, (2 - 1) / 3; PQ every pair discordant
    taus = t["side"]["kendall_tau"]
    assert (taus["G_SC"], taus["G_PQ"]) == pytest.approx((1 / 3, -1.0))
    assert "Kendall's tau between the rankings: G_O 0.333, G_SC 0.333, G_PQ -1.000" in out
    # the flipped pairs, with the difference of their means under each judge and its interval
    ch = t["changes"]
    sc_flips = ch[ch["dimension"] == "G_SC"]
    assert len(sc_flips) == 1
    f = sc_flips.iloc[0]
    assert {f["run_x"], f["run_y"]} == {"identity", roll2} and f["change"] == "reversed"
    sign = 1 if f["run_x"] == "identity" else -1
    assert (f["diff_a"], f["diff_b"]) == pytest.approx((sign * 0.25, sign * (6 - 19 / 3)), abs=1e-5)
    assert f["diff_a_lo"] <= f["diff_a"] <= f["diff_a_hi"] and f["diff_b_lo"] <= f["diff_b"] <= f["diff_b_hi"]
    assert len(ch[ch["dimension"] == "G_PQ"]) == 3 and row(main, "G_PQ")["n_order_changes"] == 3
    assert "order changes (difference x - y of the means, under each judge)" in out
    # the suite's own leaderboard figures from the same paired samples: on the intersection subset (k1 text change,
    # k3 subject add; k5 failed under B) SC is (8 + 4) / 2 = 6 for identity and (6 + 8) / 2 = 7 for roll1 under A,
    # (8 + 6) / 2 = 7 and (5 + 8) / 2 = 6.5 under B: reversed; O ties them under A ((sqrt 40 + 6) / 2 for both)
    board = ch[ch["kind"] == "leaderboard figure"].set_index("dimension")
    got = board.loc["GEdit_SC_en_intersection"]
    assert {got["run_x"], got["run_y"]} == {"identity", roll1} and got["change"] == "reversed"
    sign = 1 if got["run_x"] == "identity" else -1
    assert (got["diff_a"], got["diff_b"]) == pytest.approx((sign * -1.0, sign * 0.5))
    tied = ch[(ch["dimension"] == "GEdit_O_en_intersection") & (ch["change"] == "tied under A")]
    assert len(tied) == 1 and {tied.iloc[0]["run_x"], tied.iloc[0]["run_y"]} == {"identity", roll1}
    assert "ranks by the suite's leaderboard figures" in out
    # provenance: each judge's signature, name and rows; the seed
    side = t["side"]
    assert side["judges"]["A"]["sig"] == a and side["judges"]["B"]["judge"] == "colour-judge-B@test"
    assert side["judges"]["A"]["rows"]["judge_fingerprint"] == "not recorded" and side["seed"] == 0


def test_a_rerun_with_the_same_seed_gives_the_same_table_and_the_seed_moves_only_the_intervals(folders, capsys):
    args = [f"paths.results={folders.two}", "--resamples", "300"]
    first = tables(drift(capsys, *args, "--seed", "7")[1])["main"]
    again = tables(drift(capsys, *args, "--seed", "7")[1])["main"]
    rc, out, _ = drift(capsys, *args, "--seed", "8")
    other = tables(out)["main"]
    assert rc == 0 and "from 300 paired bootstrap resamples over queries, seed 8" in out
    keep = [c for c in first if c not in ("created_at",)]
    pd.testing.assert_frame_equal(first[keep], again[keep])
    assert list(first["shift"]) == list(other["shift"]) and list(first["shift_lo"]) != list(other["shift_lo"])


def test_a_judge_against_an_identical_later_version_of_itself_shows_no_drift(folders, capsys):
    rc, out, err = drift(capsys, f"paths.results={folders.three}", "--a", folders.sig["A"][:6], "--b",
                         "colour-judge-A2@test", "--resamples", "200")
    assert rc == 0, err
    t = tables(out)
    main = t["main"]
    # both fail on roll2's t1: failed under both, never a score; the other 14 samples agree exactly
    every = main[main["scope"] == "all"]
    assert set(every["n_paired"]) == {14} and set(every["failed_both"]) == {1}
    assert (main["shift"] == 0).all() and (main["shift_lo"] == 0).all() and (main["shift_hi"] == 0).all()
    assert (main["exact"] == 1).all() and (main["within"] == 1).all()
    assert (main.loc[main["scope"] == "all", "spearman"] == 1).all()
    assert list(t["side"]["kendall_tau"].values()) == pytest.approx([1, 1, 1])
    assert len(t["changes"]) == 0 and "order changes: none" in out
    ranks = t["ranks"]
    assert (ranks["rank_a"] == ranks["rank_b"]).all() and (ranks["mean_a"] == ranks["mean_b"]).all()


def test_swapping_a_and_b_negates_the_shift_and_swaps_the_rankings(folders, capsys):
    a, b = folders.sig["A"], folders.sig["B"]
    fwd = tables(drift(capsys, f"paths.results={folders.two}", "--a", a, "--b", b, "--resamples", "300")[1])
    rc, out, _ = drift(capsys, f"paths.results={folders.two}", "--a", "colour-judge-B@test", "--b",
                       "colour-judge-A@test", "--resamples", "300")
    assert rc == 0 and f"A = {b}" in out
    back = tables(out)
    m1, m2 = fwd["main"], back["main"]
    assert list(m2["shift"]) == pytest.approx([-x for x in m1["shift"]])
    # one set of resampled queries: the interval is mirrored
    assert list(m2["shift_lo"]) == pytest.approx([-x for x in m1["shift_hi"]])
    for col in ("exact", "within", "spearman", "n_paired", "failed_both", "missing"):
        assert list(m2[col]) == pytest.approx(list(m1[col]), nan_ok=True)
    assert list(m2["failed_a"]) == list(m1["failed_b"])
    r1, r2 = fwd["ranks"], back["ranks"]
    assert list(r2["rank_a"]) == list(r1["rank_b"]) and list(r2["mean_b"]) == list(r1["mean_a"])
    assert back["side"]["kendall_tau"] == pytest.approx(fwd["side"]["kendall_tau"])
    c1, c2 = fwd["changes"], back["changes"]
    assert list(c2["diff_a"]) == pytest.approx(list(c1["diff_b"]))
    assert list(zip(c2["run_x"], c2["run_y"], strict=True)) == list(zip(c1["run_x"], c1["run_y"], strict=True))


def test_bad_selections_are_one_error_naming_the_choices(folders, capsys, tmp_path):
    rc, _, err = drift(capsys, f"paths.results={folders.three}")
    assert rc == 2 and "has 3 judges (metric signatures); pick two with --a and --b" in err
    assert all(sig in err for sig in folders.sig.values()) and "colour-judge-A2@test" in err
    rc, _, err = drift(capsys, f"paths.results={folders.three}", "--a", "nosuchjudge", "--b", folders.sig["B"])
    assert rc == 2 and "--a nosuchjudge: no judge of gedit on gedit-en" in err and folders.sig["A"] in err
    rc, _, err = drift(capsys, f"paths.results={folders.two}", "--a", folders.sig["A"], "--b", "colour-judge-A@test")
    assert rc == 2 and "name the same judge" in err
    rc, _, err = drift(capsys, f"paths.results={folders.two}", "--metrics", "imgedit")
    assert rc == 2 and "--metrics imgedit: no such runs" in err and "gedit on gedit-en" in err
    rc, _, err = drift(capsys, f"paths.results={folders.two}", "queryset=demo")
    assert rc == 2 and "queryset=demo: drift reads scored runs" in err
    rc, _, err = drift(capsys, f"paths.results={tmp_path}")
    assert rc == 2 and "no scored runs under" in err
    rc, _, err = drift(capsys, f"paths.results={folders.two}", "--within", "-1")
    assert rc == 2 and "--within -1.0" in err


def test_per_reply_provenance_is_counted_per_value_and_named_not_recorded_when_absent():
    from benchmark.commands.metaeval.drift import describe_provenance, provenance

    rows = pd.DataFrame({"query_id": ["q1", "q2", "q3", "q4"], "status": ["ok", "failed", "ok", "missing"],
                         "judge_model": ["gpt-4.1", "gpt-4.1", "gpt-4.1", None],
                         "judge_answered_by": ["gpt-4.1-2025-04-14", "", "gpt-4.1-2025-04-14;gpt-4.1-2025-06-01",
                                               None],
                         "judge_fingerprint": ["fp_a", "fp_b", None, None],
                         "judge_version": ["", "", "", ""]})
    prov = provenance([rows])
    assert prov["judge_model"] == {"values": {"gpt-4.1": 3}, "rows_without": 0}  # the missing row is not judged
    # a row whose two replies came from two snapshots counts for each
    assert prov["judge_answered_by"] == {"values": {"gpt-4.1-2025-04-14": 2, "gpt-4.1-2025-06-01": 1},
                                         "rows_without": 1}
    assert prov["judge_fingerprint"] == {"values": {"fp_a": 1, "fp_b": 1}, "rows_without": 1}
    assert prov["judge_version"] == "not recorded"  # the column is there, empty on every row
    text = describe_provenance(prov)
    assert "judge_model: gpt-4.1 (3 rows)" in text
    assert "judge_fingerprint: fp_a (1 row), fp_b (1 row), not recorded on 1 row(s)" in text
    bare = provenance([rows[["query_id", "status"]]])
    assert set(bare.values()) == {"not recorded"}


def _judge(sig: str, scores: pd.DataFrame, first_ns: int = 0, name: str = "j"):
    from benchmark.commands.metaeval.drift import Judge

    meta = {"metric_order": ["S"], "metrics": {"S": {"higher_is_better": True}}, "editor": "ed"}
    run = SimpleNamespace(path=Path("/r/ed-1"), meta=meta, scores=scores)
    return Judge(sig, [(Path("/r/ed-1/run.json"), meta)], name=name, first_scored_ns=first_ns, runs=[run])


def test_only_rows_ok_under_both_judges_are_paired_even_when_a_failure_row_holds_a_number():
    from benchmark.commands.metaeval.drift import pair_scores

    # q2's failure row holds 0 (a suite that wrote one): it is a failure, never a score
    # q8's edit was replaced between the two scorings: the judges saw other bytes
    a = pd.DataFrame({"query_id": ["q1", "q2", "q3", "q4", "q5", "q6", "q8"],
                      "status": ["ok", "failed", "ok", "missing", "excluded", "failed", "ok"],
                      "edit_sha256": ["e1", "e2", "e3", "", "", "e6", "e8"],
                      "S": [5.0, 0.0, 3.0, None, None, None, 1.0]})
    b = pd.DataFrame({"query_id": ["q1", "q2", "q3", "q4", "q5", "q6", "q7", "q8"],
                      "status": ["ok", "ok", "failed", "ok", "excluded", "failed", "ok", "ok"],
                      "edit_sha256": ["e1", "e2", "e3", "e4", "", "e6", "e7", "e8-new"],
                      "S": [6.0, 7.0, 0.0, 2.0, None, None, 4.0, 9.0]})
    p = pair_scores(_judge("aaa", a), _judge("bbb", b))
    assert list(p.frame["query_id"]) == ["q1"] and list(p.frame["S_b"] - p.frame["S_a"]) == [1.0]
    # q2 failed under A, q3 under B, q6 under both; q4 and q7 have no ok/failed row under A; q5 is not owed
    assert p.dropped == {"ed": {"failed_a": 1, "failed_b": 1, "failed_both": 1, "missing": 2, "other_edit": 1}}


def test_by_default_a_is_the_judge_scored_first_whatever_the_signatures_spell():
    from benchmark.commands.metaeval.drift import DriftError, Group, pick_judges

    rows = pd.DataFrame({"query_id": ["q1"], "status": ["ok"], "edit_sha256": ["e1"], "S": [1.0]})
    early, late = _judge("fff", rows, first_ns=10, name="m@1"), _judge("000", rows, first_ns=20, name="m@2")
    group = Group("suite", "set", "0" * 64, {"000": late, "fff": early})
    a, b, how = pick_judges(group, None, None)
    assert (a.sig, b.sig) == ("fff", "000") and "A is the one scored first" in how
    assert [j.sig for j in pick_judges(group, None, "fff")[:2]] == ["000", "fff"]  # --b alone: A is the other
    assert [j.sig for j in pick_judges(group, "m@2", "m@1")[:2]] == ["000", "fff"]  # by judge name
    group.judges["f00"] = _judge("f00", rows, name="m@3")
    with pytest.raises(DriftError, match="has 3 judges .*fff .*000 .*f00 .*first scored unknown"):
        pick_judges(group, None, None)
    with pytest.raises(DriftError, match="--a f: 2 judges of suite on set .* match; give a signature prefix"):
        pick_judges(group, "f", "000")


def test_any_judged_suite_imgedit_with_two_judges_of_one_name(tmp_path, capsys, restore_logging):
    """imgedit's one per-sample column and its leaderboard figures; two judges with the same name are told apart by
    their signature prefix."""
    import test_imgedit as ti

    from benchmark.commands.run import compose, run_pipeline
    from benchmark.querysets.imgedit import build

    edits, images = ti.release(tmp_path)
    build(edits, images, tmp_path / "imgedit")
    prompts, sha = ti.write_prompts(tmp_path)
    # B reads "Remove the dog" as 3.0 (A: 1.33), and answers "Make the man wave", which A's reply fails
    later = ti.REPLIES | {"Remove the dog": "A: 3\nB: 3\nC: 3", "Make the man wave": "A: 4\nB: 4\nC: 4"}
    for replies in (ti.REPLIES, later):
        cfg, choices = compose(["editor=identity", "queryset=imgedit", f"queryset.root={tmp_path / 'imgedit'}",
                                "metrics=imgedit", "profile=tiny", f"paths.results={tmp_path / 'results'}",
                                "progress=false", "aggregate.bootstrap_resamples=20", "max_failed_fraction=1.0",
                                f"metrics.imgedit.prompts_file={prompts}", f"metrics.imgedit.prompts_sha256={sha}",
                                f"metrics.imgedit.prompts_commit={ti.FAKE_COMMIT}"])
        with open_dict(cfg):
            cfg.metrics.imgedit.backbone = {"_target_": "scripted_judge.ScriptedReplies", "replies": replies}
        run_pipeline(cfg, choices["editor"])
    rc, _, err = drift(capsys, f"paths.results={tmp_path / 'results'}", "--a", "scripted-replies@test")
    assert rc == 2 and "--a scripted-replies@test: 2 judges of imgedit on imgedit" in err and "give a signature" in err
    rc, out, err = drift(capsys, f"paths.results={tmp_path / 'results'}", "--resamples", "200")
    assert rc == 0, err
    t = tables(out)
    ie = row(t["main"], "IE_score")
    assert (ie["n_paired"], ie["failed_a"], ie["failed_b"]) == (10, 1, 0)
    assert ie["shift"] == pytest.approx((3.0 - 1.33) / 10) and ie["exact"] == pytest.approx(0.9)
    assert math.isnan(ie["kendall_tau"])  # one editor: no ranking to compare
    figures = t["ranks"][t["ranks"]["kind"] == "leaderboard figure"].set_index("dimension")
    # the remove type's figure: its one paired edit, 1.33 under A and 3.0 under B
    assert (figures.loc["ImgEdit_remove", "mean_a"], figures.loc["ImgEdit_remove", "mean_b"]) == (1.33, 3.0)


def test_kris_drift_pairs_its_knowledge_dimension_only_where_it_is_defined(tmp_path, capsys, restore_logging):
    """KRIS-Bench's K_KP exists on its knowledge tasks only: elsewhere it is undefined, counted, never paired."""
    import test_kris as tk

    from benchmark.commands.run import compose, run_pipeline
    from benchmark.querysets.kris import build

    build(tk.release(tmp_path), tmp_path / "kris")
    prompts, sha = tk.write_prompts(tmp_path)
    chem1, chem2 = tk._q("chemistry", "1"), tk._q("chemistry", "2")
    # B answers chemistry 1's consistency (A's reply fails) and reads chemistry 2's knowledge as 5 (A: 3)
    later = tk.REPLIES | {f"VC:{chem1}": '{"consistency_score": 4}',
                          f"DUAL:{chem2}": "Instruction_Score: 5\nknowledge score: 5"}
    for replies in (tk.REPLIES, later):
        cfg, choices = compose(["editor=identity", "queryset=kris", f"queryset.root={tmp_path / 'kris'}",
                                "metrics=kris", "profile=tiny", f"paths.results={tmp_path / 'results'}",
                                "progress=false", "aggregate.bootstrap_resamples=20", "max_failed_fraction=1.0",
                                f"metrics.kris.prompts_file={prompts}", f"metrics.kris.prompts_sha256={sha}",
                                f"metrics.kris.prompts_commit={tk.FAKE_COMMIT}"])
        with open_dict(cfg):
            cfg.metrics.kris.backbone = {"_target_": "scripted_judge.MarkedReplies", "replies": replies}
        run_pipeline(cfg, choices["editor"])
    rc, out, err = drift(capsys, f"paths.results={tmp_path / 'results'}", "--resamples", "200")
    assert rc == 0, err
    main = tables(out)["main"]
    # 9 scored edits: chemistry 1 failed under A only, multi-instruction 2 under both; 7 paired
    kp, vc = row(main, "K_KP"), row(main, "K_VC")
    assert (vc["n_paired"], vc["failed_a"], vc["failed_b"], vc["failed_both"]) == (7, 1, 0, 1)
    assert (vc["shift"], vc["exact"]) == (0.0, 1.0)
    # knowledge: chemistry 2 (3 -> 5) and humanities 1 (1 -> 1); the other 5 paired edits have none
    assert (kp["n_paired"], kp["n_undefined"], kp["shift"], kp["exact"]) == (2, 5, 1.0, 0.5)
    figures = tables(out)["ranks"].set_index("dimension")
    assert (figures.loc["KRIS_natural_KP", "mean_a"], figures.loc["KRIS_natural_KP", "mean_b"]) == (50.0, 100.0)


def test_float_noise_is_a_tie_in_the_ranks_kendalls_tau_and_the_order_table():
    """Two editors whose figures differ by float noise (4.666666666666666 vs 4.666666666666667) are tied everywhere:
    one rank, tau-b counting the pair as tied (7 / sqrt(9 x 10) = 0.738, not (8 - 2) / 10 = 0.600) and `tied under
    A` in the order table; the same as for exactly equal figures."""
    import numpy as np

    from benchmark.commands.metaeval.drift_stats import order_table

    runs = ["e1", "e2", "e3", "e4", "e5"]
    b = np.array([2.0, 1.0, 3.0, 5.0, 4.0])
    noisy = order_table("d", runs, np.array([1.0, 2.0, 3.0, 4.666666666666666, 4.666666666666667]), b, True)
    exact = order_table("d", runs, np.array([1.0, 2.0, 3.0, 4.666666666666667, 4.666666666666667]), b, True)
    for t in (noisy, exact):
        assert [(r["rank_a"], r["rank_b"]) for r in t["ranks"]] == [(5, 4), (4, 5), (3, 3), (1, 1), (1, 2)]
        assert t["kendall_tau"] == pytest.approx(7 / math.sqrt(90), abs=1e-12)
        assert [(c["run_x"], c["run_y"], c["change"]) for c in t["changes"]] == [
            ("e1", "e2", "reversed"), ("e4", "e5", "tied under A")]
    # lower is better: the mirror image (every figure negated) ranks the same
    mirror = order_table("d", runs, -np.array([1.0, 2.0, 3.0, 4.666666666666666, 4.666666666666667]), -b, False)
    assert [(r["rank_a"], r["rank_b"]) for r in mirror["ranks"]] == [(5, 4), (4, 5), (3, 3), (1, 1), (1, 2)]
    assert mirror["kendall_tau"] == noisy["kendall_tau"]
    # a difference the tolerance does not cover stays an order
    apart = order_table("d", runs, np.array([1.0, 2.0, 3.0, 4.6666, 4.6667]), b, True)
    assert apart["kendall_tau"] == pytest.approx(0.6) and [r["rank_a"] for r in apart["ranks"]] == [5, 4, 3, 2, 1]


def test_a_run_that_scored_nothing_is_no_judge_and_the_csvs_keep_full_precision(folders, capsys, tmp_path,
                                                                                 restore_logging):
    """An edit-only run (stages=[edit]) under a third judge's config records its signature in run.json without
    scoring: drift still finds two judges and picks A and B by default. The CSVs read back the exact means."""
    import numpy as np

    results = Path(shutil.copytree(folders.two, tmp_path / "results"))
    score_all(folders.root, folders.prompts, folders.sha, results, judge(SC_A, PQ_A, "A3"), "stages=[edit]",
              editors=("identity",))
    meta = json.loads(next(results.glob("runs/gedit-en-*/identity-*/run.json")).read_text())
    assert len(meta["scored"]) == 3  # the third signature is recorded, its score stage never ran
    rc, out, err = drift(capsys, f"paths.results={results}", "--resamples", "20")
    assert rc == 0, err
    assert "A is the one scored first" in out and "3 judges" not in out + err
    ranks = pd.read_csv(Path(next(line for line in out.splitlines() if line.startswith("[metaeval] wrote "))
                             .split()[2].replace(".csv", "-ranks.csv")))
    o_a = {e: np.mean([v[2] for v in paired_values(SC_A, PQ_A, e)]) for e in EDITS}
    got = ranks[(ranks["dimension"] == "G_O") & (ranks["run"] == "identity")].iloc[0]
    assert got["mean_a"] == pytest.approx(o_a["identity"], rel=1e-12)  # 6 significant digits were 1e-6 off
