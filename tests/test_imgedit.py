"""ImgEdit-Bench Basic (queryset=imgedit, metrics=imgedit; docs/querysets.md, docs/judge.md): the importer on a
fixture in the release's format, the official step 1 parser on hand-made replies, the official per-type and overall
means on hand-made numbers, the prompt file's checksum refusal, the manifest's pins, and a scripted run on the
imported fixture against numbers worked out by hand."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import open_dict

from benchmark.metrics.imgedit.protocol import (
    TYPES,
    ProtocolError,
    ReplyError,
    edit_score,
    load_prompts,
    official_means,
    parse_reply,
)
from benchmark.querysets.imgedit import ImgEditFormatError, build, read_edits

ROOT = Path(__file__).resolve().parents[1]
FAKE_COMMIT = "feedface" * 5
# our own wording in the release file's form ({edit_type: text with <edit_prompt>}); never the authors' text
TEST_PROMPTS = {t: f"Rate this {t} edit with three scores from 1 to 5, one 'Name: score' line each.\n"
                   "INSTRUCTION=<edit_prompt>\nThe images before and after editing follow:\n" for t in TYPES}


def write_prompts(folder: Path, prompts: dict | None = None) -> tuple[Path, str]:
    raw = json.dumps(prompts or TEST_PROMPTS, indent=2).encode()
    path = folder / "prompts.json"
    path.write_bytes(raw)
    return path, hashlib.sha256(raw).hexdigest()


# ------------------------------------------------------------------------------------------------------- parsing
@pytest.mark.parametrize(("reply", "scores", "score"), [
    # the official README's example replies (its printed average for the second, 3.33..., does not match its own
    # code, which gives 9 / 3)
    ("Brief reasoning: No texture change applied; shell remains textured; tortoise geometry unchanged.\n"
     "Prompt Compliance: 1\nVisual Seamlessness: 1\nPhysical & Detail Fidelity: 1", [1, 1, 1], 1.0),
    ("Brief reasoning: No fur change; wrong subject.\nPrompt Compliance: 1\nVisual Seamlessness: 4\n"
     "Physical & Detail Fidelity: 4", [1, 4, 4], 3.0),
    ("  Style Fidelity: 5  \r\nContent Preservation: 4\r\nRendering Quality: 4", [5, 4, 4], 4.33),  # strip, CRLF
    ("Reasoning: good: clean\nA: 2\nB: 3\nC: 3\nOverall: fine", [2, 3, 3], 2.67),  # 3 ': '-parts and words skipped
    ("**A**: 5\nB: 5\nC: 4", [5, 5, 4], 4.67),  # markdown around the name is still 'name: digits'
])
def test_replies_parse_as_the_official_step1_reads_them(reply, scores, score):
    assert parse_reply(reply) == scores
    assert edit_score(scores) == score


@pytest.mark.parametrize(("reply", "why"), [
    ("I cannot rate these images.", "no 'Name: <digits>' line"),
    ("A: 4/5\nB: 5\nC: 5", r"2 scores \[5, 5\], not 3 \(the official step 1 would average them to 5.0\)"),
    ("A: 4\nB: 5\nC: 5\nD: 2", "4 scores"),
    ("A:4\nB:5\nC:5", "no 'Name"),  # no space after the colon: the official split finds nothing
    ("A: 4.5\nB: 5\nC: 5", "2 scores"),  # '4.5' is not isdigit
    ("A: 0\nB: 5\nC: 7", r"score\(s\) \[0, 7\] outside 1..5 \(.*to 4.0\)"),
    ("A: ²\nB: 5\nC: 5", "passes the official isdigit test but is not an integer"),
])
def test_malformed_replies_are_errors_that_say_what_the_official_step1_would_do(reply, why):
    with pytest.raises(ReplyError, match=why):
        parse_reply(reply)


# --------------------------------------------------------------------------------------------------- aggregation
def test_per_type_means_of_rounded_edit_scores_then_the_overall_mean_of_the_nine():
    rows = pd.DataFrame([{"edit_type": f"imgedit_{t}", "IE_score": s} for t, s in [
        ("add", 3.33), ("add", 4.67), ("adjust", 2.33), ("extract", 4.0), ("replace", 3.0), ("remove", 1.33),
        ("background", 5.0), ("style", 4.67), ("style", 4.67), ("style", 4.67), ("compose", 2.33), ("action", 4.33),
        ("action", 1.0), ("action", 1.0)]])
    got = official_means(rows)
    want = {"add": 4.0, "adjust": 2.33, "extract": 4.0, "replace": 3.0, "remove": 1.33, "background": 5.0,
            "style": 4.67, "compose": 2.33, "action": 2.11}  # action: 6.33 / 3 = 2.11
    assert {k: got[f"ImgEdit_{k}"] for k in want} == pytest.approx(want, abs=1e-12)
    # overall: 28.77 / 9 = 3.1966... -> 3.2 (a mean weighted by edits would give 3.31)
    assert got["ImgEdit_overall"] == pytest.approx(3.2, abs=1e-12)
    partial = official_means(rows[rows["edit_type"] != "imgedit_compose"])
    assert math.isnan(partial["ImgEdit_compose"]) and math.isnan(partial["ImgEdit_overall"])
    assert partial["ImgEdit_add"] == 4.0


# ------------------------------------------------------------------------------------------------------ prompts
def test_prompt_file_is_refused_when_its_checksum_differs_or_a_type_is_missing(tmp_path):
    path, sha = write_prompts(tmp_path)
    prompts = load_prompts(path, sha, FAKE_COMMIT)
    assert prompts.for_edit("remove", "Remove the cat") == TEST_PROMPTS["remove"].replace("<edit_prompt>",
                                                                                         "Remove the cat")
    with pytest.raises(ProtocolError, match="sha256 .* expected 0{64}.*make data NAME=imgedit"):
        load_prompts(path, "0" * 64, FAKE_COMMIT)
    with pytest.raises(ProtocolError, match="40-hex commit"):
        load_prompts(path, sha, "main")
    short, short_sha = write_prompts(tmp_path, {t: v for t, v in TEST_PROMPTS.items() if t != "compose"})
    with pytest.raises(ProtocolError, match="no prompt for edit type\\(s\\) compose"):
        load_prompts(short, short_sha, FAKE_COMMIT)
    blank, blank_sha = write_prompts(tmp_path, {**TEST_PROMPTS, "action": "Rate it."})
    with pytest.raises(ProtocolError, match="prompt\\(s\\) of action have no <edit_prompt>"):
        load_prompts(blank, blank_sha, FAKE_COMMIT)


def test_the_manifest_fetches_the_files_the_config_pins():
    from benchmark.commands.run import compose
    from benchmark.io.download import load_manifest

    cfg = compose(["metrics=imgedit"])[0].metrics.imgedit
    files = {f.name: f for f in load_manifest("imgedit").files}
    entry = files[Path(cfg.prompts_file).name]
    assert Path(cfg.prompts_file).parent == ROOT / "datasets" / "imgedit" / "downloads"
    assert entry.sha256 == cfg.prompts_sha256 and entry.size
    base = f"https://raw.githubusercontent.com/PKU-YuanGroup/ImgEdit/{cfg.prompts_commit}/Benchmark/Basic/"
    assert entry.url == base + "prompts.json" and files["basic_edit.json"].url == base + "basic_edit.json"
    assert files["basic_edit.json"].sha256 and files["Benchmark.tar"].url is None  # manual: the manifest says how
    assert cfg.backbone.text_first is True


# ----------------------------------------------------------------------------------------------------- importer
# key -> (source, prompt, edit_type); sources in the release's category folders (one with a space)
EDITS = {
    "11": ("animal/000001.jpg", "Add a red hat to the dog", "add"),
    "12": ("daily object/000002.jpg", "Add a bird on the cup", "add"),
    "21": ("animal/000001.jpg", "Make the dog's fur darker", "adjust"),
    "31": ("daily object/000002.jpg", "Extract the cup", "extract"),
    "41": ("style/000003.jpg", "Replace the tree with a lamp post", "replace"),
    "51": ("animal/000001.jpg", "Remove the dog", "remove"),
    "61": ("style/000003.jpg", "Change the background to a beach", "background"),
    "71": ("style/000003.jpg", "Turn the photo into a watercolour", "style"),
    "81": ("compose/000004.jpg", "Remove the cup and add a plate", "compose"),
    "91": ("animal/000001.jpg", "Make the dog jump", "action"),
    "92": ("compose/000004.jpg", "Make the man wave", "action"),
}
COLOURS = {"animal/000001.jpg": (200, 30, 30), "daily object/000002.jpg": (30, 200, 30),
           "style/000003.jpg": (30, 30, 200), "compose/000004.jpg": (90, 90, 90)}


def release(tmp: Path, edits: dict = EDITS) -> tuple[Path, Path]:
    """basic_edit.json in the release's format, and the sources under an archive-like folder two levels down."""
    from PIL import Image

    path = tmp / "basic_edit.json"
    path.write_text(json.dumps({k: {"id": s, "prompt": p, "edit_type": t} for k, (s, p, t) in edits.items()},
                               indent=4), encoding="utf-8")
    for rel, colour in COLOURS.items():
        dest = tmp / "unpacked" / "Benchmark" / "singleturn" / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (40, 32), colour).save(dest, quality=95)
    return path, tmp / "unpacked"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("imgedit")
    edits, images = release(tmp)
    meta = build(edits, images, tmp / "imgedit")
    return tmp / "imgedit", meta


def test_every_entry_is_a_query_with_its_type_instruction_and_shared_source(built):
    from benchmark.querysets.io import load_queryset

    root, meta = built
    qs = load_queryset(root, name="imgedit")
    by_id = {q.id: q for q in qs.queries}
    assert sorted(by_id) == sorted(f"imgedit-{k}" for k in EDITS)
    for key, (_src, prompt, etype) in EDITS.items():
        q = by_id[f"imgedit-{key}"]
        assert (q.instruction, q.edit_type) == (prompt, f"imgedit_{etype}")
        assert qs.path(q.image).is_file()
    assert by_id["imgedit-11"].image == by_id["imgedit-51"].image != by_id["imgedit-12"].image  # same source, one file
    assert meta["counts"]["images"] == meta["counts"]["sources"] == len(COLOURS)
    assert meta["full_release"] is False and "NOT the full release" in meta["description"]
    assert meta["scored_by"][0] == "imgedit" and "hatie" in meta["not_scored_by"]


@pytest.mark.parametrize(("change", "why"), [
    ({"13": ("animal/000001.jpg", "Paint it", "recolour")}, "edit_type 'recolour' is not one of"),
    ({"x1": ("animal/000001.jpg", "Paint it", "add")}, "keys are decimal numbers"),
    ({"13": ("animal/missing.jpg", "Paint it", "add")}, "missing.jpg not found"),
    ({"13": ("../animal/000001.jpg", "Paint it", "add")}, "must not contain '..'"),
    ({"13": ("animal/000001.jpg", "  ", "add")}, "prompt must be a non-empty string"),
])
def test_bad_entries_are_refused_with_their_key(tmp_path, change, why):
    edits, images = release(tmp_path, {**EDITS, **change})
    with pytest.raises(ImgEditFormatError, match=why):
        build(edits, images, tmp_path / "out")
    assert not (tmp_path / "out" / "queries.jsonl").exists()


def test_duplicate_keys_and_an_image_root_that_is_not_there_are_refused(tmp_path):
    edits, images = release(tmp_path)
    text = edits.read_text(encoding="utf-8")
    edits.write_text(text.replace('"12": {', '"11": {'), encoding="utf-8")
    with pytest.raises(ImgEditFormatError, match=r"duplicate key\(s\) \['11'\]"):
        read_edits(edits)
    edits.write_text(text, encoding="utf-8")
    (tmp_path / "elsewhere").mkdir()
    with pytest.raises(ImgEditFormatError, match="no folder within 3 levels holds 'animal/000001.jpg'"):
        build(edits, tmp_path / "elsewhere", tmp_path / "out")


# ------------------------------------------------------------------------------------------------------ pipeline
def _run(root: Path, tmp_path: Path, *extra: str, backbone: dict | None = None):
    from benchmark.commands.run import compose, run_pipeline

    prompts, sha = write_prompts(tmp_path)
    cfg, choices = compose(["editor=identity", "queryset=imgedit", f"queryset.root={root}", "metrics=imgedit",
                            "profile=tiny", f"paths.results={tmp_path / 'results'}", "progress=false",
                            "aggregate.bootstrap_resamples=50", "max_failed_fraction=1.0",
                            f"metrics.imgedit.prompts_file={prompts}", f"metrics.imgedit.prompts_sha256={sha}",
                            f"metrics.imgedit.prompts_commit={FAKE_COMMIT}", *extra])
    if backbone is not None:
        with open_dict(cfg):
            cfg.metrics.imgedit.backbone = backbone
    return run_pipeline(cfg, choices["editor"])


REPLIES = {  # instruction -> reply; the edit's score in the comment
    "Add a red hat to the dog": "Brief reasoning: ok.\nPrompt Compliance: 3\nVisual Naturalness: 3\nPhysical: 4",  # 3.33
    "Add a bird on the cup": "Prompt Compliance: 5\nVisual Naturalness: 5\nPhysical: 4",              # 4.67
    "Make the dog's fur darker": "Prompt Compliance: 2\nVisual Seamlessness: 2\nFidelity: 3",         # 2.33
    "Extract the cup": "Object Identity: 5\nMask Precision: 4\nVisual Quality: 3\nOverall: good",     # 4.0
    "Replace the tree with a lamp post": "A: 3\nB: 3\nC: 3",                                         # 3.0
    "Remove the dog": "A: 1\nB: 1\nC: 2",                                                            # 1.33
    "Change the background to a beach": "A: 5\nB: 5\nC: 5",                                         # 5.0
    "Turn the photo into a watercolour": "Style Fidelity: 4\nContent Preservation: 5\nRendering: 5",  # 4.67
    "Remove the cup and add a plate": "A: 3\nB: 2\nC: 2",                                            # 2.33
    "Make the dog jump": "Action Fidelity: 5\nIdentity Preservation: 4\nCoherence: 4",               # 4.33
    "Make the man wave": "Action Fidelity: 4/5\nIdentity Preservation: 5\nCoherence: 5",             # failure
}


def test_scripted_replies_give_the_hand_worked_imgedit_figures_and_a_failure_row_keeps_its_reply(
        built, tmp_path, restore_logging):
    from benchmark.stages.score import read_scores

    summary = _run(built[0], tmp_path, backbone={"_target_": "scripted_judge.ScriptedReplies", "replies": REPLIES})
    assert summary["score"].failed == 1 and summary["score"].computed == len(EDITS)
    rows = read_scores(Path(summary["run_dir"]), summary["metric_sig"]).set_index("query_id")
    failed = rows.loc["imgedit-92"]
    assert failed["status"] == "failed" and failed["ie_reply"] == REPLIES["Make the man wave"]
    assert "2 scores [5, 5], not 3" in failed["reason"] and math.isnan(failed["IE_score"])
    assert rows.loc["imgedit-11", "IE_score"] == 3.33 and rows.loc["imgedit-11", "ie_scores"] == "[3, 3, 4]"
    # every judged row names its judge; the failure row its kind (docs/judge.md, "Failures and provenance")
    assert set(rows["judge_model"]) == set(rows["judge_answered_by"]) == {"scripted-replies@test"}
    assert failed["judge_failure"] == "unparseable" and rows.loc["imgedit-11", "judge_failure"] == ""
    board = pd.read_csv(tmp_path / "results" / "leaderboard.csv").iloc[0]
    assert (board["n_ok"], board["n_failed"]) == (10, 1)
    assert "JUDGE FAILED 1/11 (1 unparseable)" in board["mark"]
    assert "scripted-replies@test" in board["components"] and FAKE_COMMIT in board["components"]
    want = {"add": 4.0, "adjust": 2.33, "extract": 4.0, "replace": 3.0, "remove": 1.33, "background": 5.0,
            "style": 4.67, "compose": 2.33, "action": 4.33}
    assert {k: board[f"ImgEdit_{k}"] for k in want} == pytest.approx(want, abs=1e-9)
    assert board["ImgEdit_overall"] == pytest.approx(3.44, abs=1e-9)  # 30.99 / 9 = 3.4433
    by_type = pd.read_csv(tmp_path / "results" / "leaderboard_by_type.csv").set_index("edit_type")
    assert by_type.loc["imgedit_add", "ImgEdit_add"] == 4.0 and math.isnan(by_type.loc["imgedit_add",
                                                                                      "ImgEdit_overall"])


def test_tiny_judge_replies_that_do_not_parse_are_failure_rows_with_the_reply(built, tmp_path, restore_logging):
    from benchmark.io.errors import TooManyFailures
    from benchmark.stages.score import read_scores

    # random weights write bytes, not scores: every query fails, which fails the run whatever max_failed_fraction
    with pytest.raises(TooManyFailures, match="does not hold three 1..5 scores.*every query failed"):
        _run(built[0], tmp_path, "limit=2", "metrics.imgedit.backbone.max_new_tokens=16",
             "metrics.imgedit.backbone.dtype=float32")
    run_dir = next((tmp_path / "results" / "runs").glob("imgedit-*/identity-*"))
    rows = read_scores(run_dir, next((run_dir / "scores").iterdir()).name)
    assert len(rows) == 2 and (rows["status"] == "failed").all()
    assert all(isinstance(r, str) and r for r in rows["ie_reply"])


def test_imgedit_is_refused_up_front_on_a_set_without_imgedit_types(tmp_path):
    from benchmark.commands.run import compose, run_pipeline
    from benchmark.io.errors import PreflightError

    cfg, choices = compose(["editor=identity", "queryset=demo_mini", "metrics=imgedit", "profile=tiny",
                            f"paths.results={tmp_path}", "progress=false"])
    with pytest.raises(PreflightError, match="an ImgEdit-Bench edit type with an instruction"):
        run_pipeline(cfg, choices["editor"])


def test_imgedit_through_the_endpoint_equals_the_in_process_judge(built, tmp_path, restore_logging):
    from local_servers import serving
    from openai_server import OpenAIServer, tiny_text_judge_reply

    from benchmark.io.errors import TooManyFailures
    from benchmark.stages.score import read_scores

    def rows(results):
        run_dir = next((results / "runs").glob("imgedit-*/identity-*"))
        (sig,) = [p.name for p in (run_dir / "scores").iterdir()]
        got = read_scores(run_dir, sig).sort_values("query_id").reset_index(drop=True)
        return got[[c for c in got.columns if c not in ("seconds", "timestamp")]]

    for name in ("local", "endpoint"):
        (tmp_path / name).mkdir()
    # random weights write bytes, not scores: every query is a failure row that keeps its reply, and the run fails
    with pytest.raises(TooManyFailures):
        _run(built[0], tmp_path / "local", "limit=2", "metrics.imgedit.backbone.max_new_tokens=16",
             "metrics.imgedit.backbone.dtype=float32")
    with serving(OpenAIServer(tiny_text_judge_reply(text_first=True), served="tiny-qwen")) as srv:
        with pytest.raises(TooManyFailures):
            _run(built[0], tmp_path / "endpoint", "limit=2", "metrics/imgedit_judge@metrics.imgedit.backbone=endpoint",
                 f"metrics.imgedit.backbone.base_url={srv.url}", "metrics.imgedit.backbone.model=tiny-qwen",
                 "metrics.imgedit.backbone.max_tokens=16", "metrics.imgedit.backbone.backoff_s=0")
    assert srv.calls == 2
    assert [p["type"] for p in srv.payloads[0]["messages"][1]["content"]] == ["text", "image_url", "image_url"]
    local, remote = rows(tmp_path / "local" / "results"), rows(tmp_path / "endpoint" / "results")
    assert len(local) == 2 and local["ie_reply"].str.len().min() > 0
    assert set(remote["judge_model"]) == {"tiny-qwen"} and set(remote["judge_version"]) == {"0.0.test"}
    same = [c for c in local.columns if not c.startswith("judge_") or c == "judge_failure"]  # who answered differs
    pd.testing.assert_frame_equal(local[same], remote[same])  # same replies, same rows
