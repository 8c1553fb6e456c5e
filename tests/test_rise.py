"""RISEBench (queryset=rise, metrics=rise; docs/querysets.md#risebench, docs/judge.md "RISEBench's protocol"): the
importer on fixtures in both releases' layouts (RISEBench-360 from the hub, RISEBench-64 from the repository) and
on hostile variants; the official `extract` on hand-made replies; the per-sample score and solved rule and the
accuracy table on hand-worked numbers; the requests, byte-equal to what the official `eval_vanilla` builds from the
(stand-in) prompt file; the manifest's pins; and scripted runs through compose + run_pipeline, `editmeter run`
and `editmeter score` as a user types them, against the same hand-worked numbers."""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import open_dict

from benchmark.io.rise_protocol import (
    PROMPT_NAMES,
    ProtocolError,
    ReplyError,
    load_prompts,
    official_numbers,
    official_table,
    parse_reply,
    requests_for,
    sample_scores,
)
from benchmark.querysets.rise import RiseFormatError, build

ROOT = Path(__file__).resolve().parents[1]
HELPERS = ROOT / "tests" / "helpers"
FAKE_COMMIT = "c0ffee00" * 5
RAW = ("prompt_generation", "prompt_spatial_qual", "prompt_logical_img_wo_q")  # sent without .format
WITH_REFERENCE = ("prompt_reasoning", "prompt_reasoning_w_input", "prompt_spatial_ref", "prompt_spatial_ref_w_input",
                  "prompt_logical_cons_ans", "prompt_logical_txt")


def stand_in_prompts() -> str:
    """Our own text in utils.py's form: code around module-level prompt strings with the official placeholders."""
    out = ["import base64\n\n\ndef encode(img):\n    return base64.b64encode(img)\n\n"]
    for name in PROMPT_NAMES:
        body = f"STAND-IN {name}\nJudge the images and end with 'Final Score: X'.\n"
        if name not in RAW:
            body += "Instruction: {instruct}\n"
        if name in WITH_REFERENCE:
            body += "Reference: {reference}\n"
        out.append(f'{name} = """{body}"""\n\n')
    return "".join(out)


def write_prompts(folder: Path) -> tuple[Path, str]:
    raw = stand_in_prompts().encode()
    path = folder / "rise_prompts.txt"
    path.write_bytes(raw)
    return path, hashlib.sha256(raw).hexdigest()


def official_strings() -> dict[str, str]:
    """What the official `from utils import *` binds, for our stand-in file (ours: safe to run here)."""
    ns: dict = {}
    exec(stand_in_prompts(), ns)  # noqa: S102 (our own stand-in text, never the authors' file)
    return {n: ns[n] for n in PROMPT_NAMES}


# --------------------------------------------------------------------------------------------------- fixtures
# RISEBench-360's layout: datav2_total_w_subtask.json, images under data/ (the unpacked data.zip). Each sample's
# source has its own colour (the scripted judge picks a reply by it); "ref" is the reference image's colour.
HUB = [
    ({"index": "temporal_reasoning_1", "category": "temporal_reasoning", "subtask": "Life Progression",
      "instruction": "Draw the banana a year later.", "reference": "A rotten, blackened banana."}, (200, 30, 30), None),
    ({"index": "temporal_reasoning_2", "category": "temporal_reasoning", "subtask": "Material Progression",
      "instruction": "Draw the iron bar after ten rainy years.", "reference": "A rusty bar.", "reasoning_img": True},
     (30, 200, 30), None),
    ({"index": "causal_reasoning_1", "category": "causal_reasoning", "subtask": "State Transition",
      "instruction": "Draw the ice after an hour in the sun.", "reference": "A puddle.", "consistency_free": True},
     (30, 30, 200), None),
    ({"index": "causal_reasoning_2", "category": "causal_reasoning", "subtask": "Physics Manifestation",
      "instruction": "Draw the glass after it falls.", "reference": "Shattered glass."}, (200, 200, 30), None),
    ({"index": "causal_reasoning_3", "category": "causal_reasoning", "subtask": "State Transition",
      "instruction": "Draw the candle after a night.", "reference": "A melted candle."}, (200, 30, 200), None),
    ({"index": "spatial_reasoning_1", "category": "spatial_reasoning", "subtask": "Component Assembly",
      "instruction": "Assemble the parts."}, (30, 200, 200), (10, 10, 10)),
    ({"index": "spatial_reasoning_2", "category": "spatial_reasoning", "subtask": "Object Arrangement",
      "instruction": "Stack the cubes by size.", "reference": "Cubes, large to small.", "reasoning_img": True},
     (120, 30, 30), None),
    ({"index": "spatial_reasoning_3", "category": "spatial_reasoning", "subtask": "Layout Reasoning",
      "instruction": "Put the sofa by the window.", "reference": "The sofa by the window."}, (30, 120, 30), None),
    ({"index": "logical_reasoning_1", "category": "logical_reasoning", "subtask": "Mathematical Derivation",
      "instruction": "Draw the shortest path from 1 to 4.", "reference_txt": "From node 1 to 2, then to 4."},
     (30, 30, 120), None),
    ({"index": "logical_reasoning_2", "category": "logical_reasoning", "subtask": "Puzzle Solving",
      "instruction": "Solve the maze in blue."}, (120, 120, 30), (20, 20, 20)),
    ({"index": "logical_reasoning_3", "category": "logical_reasoning", "subtask": "Puzzle Solving",
      "instruction": "Finish the tic-tac-toe.", "reasoning_wo_ins": True}, (120, 30, 120), (40, 40, 40)),
    ({"index": "logical_reasoning_4", "category": "logical_reasoning", "subtask": "Pattern Prediction",
      "instruction": "Draw the next shape.", "reference_txt": "A red triangle."}, (30, 120, 120), None),
]
# RISEBench-64's layout: data/data_total.json beside data/<category>_images/, no subtask and no flag columns
REPO = [
    ({"index": "temporal_reasoning_1", "category": "temporal_reasoning", "instruction": "Draw it a year later.",
      "reference": "A rotten banana."}, (200, 30, 30), None),
    ({"index": "spatial_reasoning_1", "category": "spatial_reasoning", "instruction": "Assemble the parts."},
     (30, 200, 200), (10, 10, 10)),
    ({"index": "logical_reasoning_1", "category": "logical_reasoning", "instruction": "Solve the maze in blue."},
     (120, 120, 30), (20, 20, 20)),
    ({"index": "logical_reasoning_2", "category": "logical_reasoning", "instruction": "Draw the shortest path.",
      "reference_txt": "From node 1 to 2, then to 4."}, (30, 30, 120), None),
]


def release(folder: Path, samples=HUB, *, layout: str = "hub", size=(48, 32)) -> Path:
    """The release's JSON list and images in its layout; returns the JSON file."""
    from PIL import Image

    image_root = folder / "data"
    rows = []
    for sample, colour, ref in samples:
        cat, n = sample["category"], sample["index"].rsplit("_", 1)[1]
        row = {**sample, "image": sample.get("image", f"{cat}_images/{n}.png")}
        if ref is not None:
            row.setdefault("reference_img", f"{cat}_images/{n}_ref.png")
            (image_root / row["reference_img"]).parent.mkdir(parents=True, exist_ok=True)
            Image.new("RGBA", size, (*ref, 255)).save(image_root / row["reference_img"])
        if isinstance(row["image"], str) and ".." not in row["image"]:
            (image_root / row["image"]).parent.mkdir(parents=True, exist_ok=True)
            if not (image_root / row["image"]).exists():
                Image.new("RGB", size, colour).save(image_root / row["image"])
        rows.append(row)
    path = folder / ("datav2_total_w_subtask.json" if layout == "hub" else "data/data_total.json")
    path.write_text(json.dumps(rows, indent=4), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rise_hub")
    data = release(tmp / "downloads")
    meta = build(data, tmp / "rise")
    return tmp / "rise", meta


# ------------------------------------------------------------------------------------------------------ parsing
@pytest.mark.parametrize(("reply", "numbers"), [
    ("Step 1: ...\n**Final Score:** **4**", [4]),
    ("final score: 3", [3]),                                       # IGNORECASE
    ("**Final Score**: **1**\n", [1]),
    ("Final Score: 5/5", [5]),                                     # stops at '/'
    ("Final Score: 4.5", [4]),                                     # stops at '.'
    ("Final Score: 4, 5", [4, 5]),
    ("Final Score: out of 5 ... Final Score: 2", [2]),             # the first one with digits
    ("Final Scores: 5", [5]),                                      # 'Final Score' then 's': the plural pattern
    ("Final Scores: none", []),                                    # the plural with no digits: []
    ("The image is fine. Score: 5", None),                         # neither phrase
    ("I'm sorry, I can't help with that.", None),                  # a refusal
    ("Failed to obtain answer via API. ", None),                   # the official script's failed call
    ("Final Score: \u0663", [3]),                                  # a non-ASCII digit: re's \d and int() take it
])
def test_numbers_are_read_as_the_official_extract_reads_them(reply, numbers):
    assert official_numbers(reply) == numbers


@pytest.mark.parametrize(("reply", "scale", "why"), [
    ("I'm sorry, I can't help with that.", (1, 5), "no number after 'Final Score'.*unsolved"),
    ("Final Scores: none", (1, 5), "no number"),
    ("Final Score: 4, 5", (1, 5), r"2 numbers \[4, 5\].*length error"),
    ("Final Score: 7", (1, 5), r"score 7 outside 1..5 \(the official script scores it as it is\)"),
    ("Final Score: 0", (1, 5), "score 0 outside 1..5"),
    ("Final Score: 2", (0, 1), r"score 2 outside 0..1 \(the official script scores it as 5\)"),
])
def test_replies_the_official_parser_would_not_score_as_one_in_range_number_are_errors(reply, scale, why):
    with pytest.raises(ReplyError, match=why):
        parse_reply(reply, scale)


def test_logical_zero_is_a_score_not_a_failure():
    assert parse_reply("**Final Score**: **0**", (0, 1)) == 0  # the official `not [0]` is False: it is kept


# ------------------------------------------------------------------------------------------------- per sample
NAN = "nan"


@pytest.mark.parametrize(("etype", "hints", "scores", "want"), [
    # the file has a consistency_free column and this sample no value: the official bool(NaN) is True, so the
    # score ignores consistency (0.2 x 5 + 0.8 x 3); solved still needs consistency 5
    ("rise_temporal", {"consistency_free": NAN}, {"consistency": 4, "reasoning": 3, "plausibility": 5},
     {"score": 3.4, "solved": 0.0, "consistency": 4.0}),
    # no such column (RISEBench-64): 0.3 x 4 + 0.5 x 5 + 0.2 x 5
    ("rise_temporal", {}, {"consistency": 4, "reasoning": 5, "plausibility": 5}, {"score": 4.7, "solved": 0.0}),
    ("rise_spatial", {}, {"consistency": 5, "reasoning": 5, "plausibility": 5}, {"score": 5.0, "solved": 1.0}),
    # consistency-free: not judged on consistency; solved with reasoning and plausibility 5 (the April 2026 fix)
    ("rise_causal", {"consistency_free": "true"}, {"reasoning": 5, "plausibility": 5},
     {"score": 5.0, "solved": 1.0}),
    # consistency_free false is still a value (pd.isna(False) is False): no consistency judged, solved without it,
    # but bool(False) picks the three-term score, NaN with no consistency
    ("rise_causal", {"consistency_free": "false"}, {"reasoning": 5, "plausibility": 5},
     {"score": math.nan, "solved": 1.0}),
    # reasoning 1 halves the score, at least 1: (0.2 x 2 + 0.8 x 1) / 2 = 0.6 -> 1
    ("rise_causal", {"consistency_free": NAN}, {"consistency": 5, "reasoning": 1, "plausibility": 2},
     {"score": 1.0, "solved": 0.0}),
    ("rise_spatial", {}, {"consistency": 5, "reasoning": 1, "plausibility": 5}, {"score": 1.5, "solved": 0.0}),  # 3 / 2
    # logical: 0/1 -> 1/5; 0.3 x 5 + 0.7 x 5; (0.3 x 5 + 0.7 x 1) / 2 = 1.1; 0.3 x 1 + 0.7 x 5 = 3.8
    ("rise_logical", {}, {"consistency": 1, "reasoning": 1}, {"score": 5.0, "solved": 1.0, "reasoning": 5.0}),
    ("rise_logical", {}, {"consistency": 1, "reasoning": 0}, {"score": 1.1, "solved": 0.0, "reasoning": 1.0}),
    ("rise_logical", {"consistency_free": NAN}, {"consistency": 0, "reasoning": 1}, {"score": 3.8, "solved": 0.0}),
])
def test_sample_score_and_solved_by_the_official_rules(etype, hints, scores, want):
    got = sample_scores(etype, hints, scores)
    for k, v in want.items():
        assert (math.isnan(got[k]) if math.isnan(v) else got[k] == pytest.approx(v, abs=1e-12)), (k, got)


def test_accuracy_score_and_the_category_and_subtask_table_by_hand():
    rows = pd.DataFrame([
        {"edit_type": "rise_temporal", "rise_subtask": "Life Progression", "RISE_solved": 1.0, "RISE_score": 5.0,
         "RISE_reasoning": 5.0, "RISE_consistency": 5.0, "RISE_plausibility": 5.0},
        {"edit_type": "rise_temporal", "rise_subtask": "Life Progression", "RISE_solved": 0.0, "RISE_score": 3.4,
         "RISE_reasoning": 3.0, "RISE_consistency": 4.0, "RISE_plausibility": 5.0},
        {"edit_type": "rise_causal", "rise_subtask": "State Transition", "RISE_solved": 1.0, "RISE_score": 5.0,
         "RISE_reasoning": 5.0, "RISE_consistency": math.nan, "RISE_plausibility": 5.0},
        {"edit_type": "rise_logical", "rise_subtask": "Puzzle Solving", "RISE_solved": 0.0, "RISE_score": 1.1,
         "RISE_reasoning": 1.0, "RISE_consistency": 5.0, "RISE_plausibility": math.nan},
    ])
    t = official_table(rows)
    assert t["RISE_accuracy"] == 0.5 and t["RISE_score"] == pytest.approx(14.5 / 4)
    assert t["RISE_score_pct"] == pytest.approx(25 * (14.5 / 4 - 1))
    assert (t["RISE_temporal_accuracy"], t["RISE_temporal_score"]) == (0.5, pytest.approx(4.2))
    assert t["RISE_causal_accuracy"] == 1.0 and t["RISE_logical_score"] == pytest.approx(1.1)
    assert math.isnan(t["RISE_spatial_accuracy"]) and math.isnan(t["RISE_spatial_score_pct"])
    assert t["RISE_consistency"] == pytest.approx(14 / 3)  # NaN skipped, as pandas' mean
    assert t["RISE_plausibility"] == 5.0 and t["RISE_logical_reasoning"] == 1.0
    assert t["RISE_temp_life_progression_accuracy"] == 0.5
    assert t["RISE_causal_state_transition_score"] == 5.0
    assert math.isnan(t["RISE_spa_viewpoint_generation_accuracy"])


# ------------------------------------------------------------------------------------------------------ prompts
def test_prompt_file_is_read_with_ast_and_refused_when_altered(tmp_path):
    path, sha = write_prompts(tmp_path)
    prompts = load_prompts(path, sha, FAKE_COMMIT)
    assert dict(prompts.texts) == official_strings()
    with pytest.raises(ProtocolError, match="sha256 .* expected 0{64}.*make data NAME=rise"):
        load_prompts(path, "0" * 64, FAKE_COMMIT)
    with pytest.raises(ProtocolError, match="40-hex commit"):
        load_prompts(path, sha, "main")
    short = path.with_name("short.txt")
    short.write_text(stand_in_prompts().replace("prompt_logical_img_wo_q =", "other ="))
    with pytest.raises(ProtocolError, match="no string assignment of prompt_logical_img_wo_q"):
        load_prompts(short, hashlib.sha256(short.read_bytes()).hexdigest(), FAKE_COMMIT)


def test_the_manifest_fetches_the_file_the_config_pins():
    from benchmark.commands.run import compose
    from benchmark.io.download import load_manifest

    cfg = compose(["metrics=rise"])[0].metrics.rise
    files = {f.name: f for f in load_manifest("rise").files}
    entry = files[Path(cfg.prompts_file).name]
    assert Path(cfg.prompts_file).parent == ROOT / "datasets" / "rise" / "downloads"
    assert cfg.prompts_commit == "ce8cba37a2ed73a6d9770f0ef86023ae528ec254"  # the April 2026 fix of gpt_eval.py
    assert entry.sha256 == cfg.prompts_sha256 and entry.size == 26579 and not entry.name.endswith(".py")
    assert entry.url == f"https://raw.githubusercontent.com/PhoenixZ810/RISEBench/{cfg.prompts_commit}/utils.py"
    assert files["data.zip"].extract and "NOT pinned" in load_manifest("rise").manual
    openai = compose(["metrics=rise", "metrics/rise_judge@metrics.rise.backbone=openai"])[0].metrics.rise.backbone
    assert (openai.model, openai.max_tokens, openai.temperature, openai.n, openai.image_detail, openai.image_format,
            openai.seed, openai.system, openai.text_first) == ("gpt-4.1-2025-04-14", 4096, 0, 1, "high", "jpeg",
                                                                None, None, True)


def _hints(sample: dict, columns: set[str]) -> dict[str, str]:
    """The judge hints the importer keeps, by hand: texts, and each flag column's cell ("nan" where absent)."""
    out = {k: sample[k] for k in ("reference", "reference_txt", "subtask") if k in sample}
    for flag in ("consistency_free", "reasoning_img", "reasoning_wo_ins"):
        if flag in columns:
            out[flag] = json.dumps(sample[flag]) if flag in sample else "nan"
    if "reference_img" in columns:
        out["reference_img"] = "true" if "reference_img" in sample else "nan"
    return out


def test_requests_are_byte_equal_to_what_the_official_eval_vanilla_builds():
    """Per category and field, the official prompt (its .format as the script calls it) and its images in order."""
    from benchmark.io.rise_protocol import Prompts

    p = official_strings()
    prompts = Prompts(texts=p, commit=FAKE_COMMIT, sha256="0" * 64)
    columns = {"consistency_free", "reasoning_img", "reasoning_wo_ins", "reference_img", "subtask"}
    by_index = {s["index"]: {**s, **({"reference_img": "x.png"} if ref else {})} for s, _c, ref in HUB}

    def got(index, hub=True):
        s = by_index[index] if hub else {x["index"]: x for x, _c, _r in REPO}[index] | (
            {"reference_img": "x.png"} if index in ("spatial_reasoning_1", "logical_reasoning_1") else {})
        etype = "rise_" + s["category"].split("_")[0]
        cols = columns if hub else {"reference_img"}
        return [(r.dimension, r.images, r.text) for r in requests_for(etype, s["instruction"], _hints(s, cols), prompts)]

    t1, t2, c1 = by_index["temporal_reasoning_1"], by_index["temporal_reasoning_2"], by_index["causal_reasoning_1"]
    assert got("temporal_reasoning_1") == [
        ("consistency", ("source", "edit"), p["prompt_consist"].format(instruct=t1["instruction"])),
        ("reasoning", ("edit",), p["prompt_reasoning"].format(instruct=t1["instruction"], reference=t1["reference"])),
        ("plausibility", ("edit",), p["prompt_generation"])]
    assert got("temporal_reasoning_2")[1] == ("reasoning", ("source", "edit"), p["prompt_reasoning_w_input"].format(
        instruct=t2["instruction"], reference=t2["reference"]))
    assert [d for d, _i, _t in got("causal_reasoning_1")] == ["reasoning", "plausibility"]  # consistency-free
    assert got("causal_reasoning_1")[0][2] == p["prompt_reasoning"].format(instruct=c1["instruction"],
                                                                         reference=c1["reference"])
    s1, s2, s3 = (by_index[f"spatial_reasoning_{i}"] for i in (1, 2, 3))
    assert got("spatial_reasoning_1") == [  # the reference image replaces the source in both image requests
        ("consistency", ("reference", "edit"), p["prompt_spatial_cons"].format(instruct=s1["instruction"])),
        ("reasoning", ("reference", "edit"), p["prompt_spatial_ref_img"].format(instruct=s1["instruction"])),
        ("plausibility", ("edit",), p["prompt_spatial_qual"])]
    assert got("spatial_reasoning_2")[1] == ("reasoning", ("source", "edit"), p["prompt_spatial_ref_w_input"].format(
        instruct=s2["instruction"], reference=s2["reference"]))
    assert got("spatial_reasoning_3")[1] == ("reasoning", ("edit",), p["prompt_spatial_ref"].format(
        instruct=s3["instruction"], reference=s3["reference"]))
    l1 = by_index["logical_reasoning_1"]
    assert got("logical_reasoning_1") == [
        ("consistency", ("source", "edit"), p["prompt_logical_cons_ans"].format(instruct=l1["instruction"],
                                                                                 reference=l1["reference_txt"])),
        ("reasoning", ("edit",), p["prompt_logical_txt"].format(instruct=l1["instruction"],
                                                               reference=l1["reference_txt"]))]
    # the hub file has a reasoning_wo_ins column: every logical sample with a reference image gets the prompt
    # without the question, whatever its own cell (the official `'reasoning_wo_ins' in item`)
    for i in (2, 3):
        li = by_index[f"logical_reasoning_{i}"]
        assert got(f"logical_reasoning_{i}") == [
            ("consistency", ("reference", "edit"), p["prompt_logical_cons"].format(instruct=li["instruction"])),
            ("reasoning", ("reference", "edit"), p["prompt_logical_img_wo_q"])]
    # RISEBench-64 has no such column: the prompt with the question
    assert got("logical_reasoning_1", hub=False)[1] == ("reasoning", ("reference", "edit"), p[
        "prompt_logical_img"].format(instruct="Solve the maze in blue."))


# ----------------------------------------------------------------------------------------------------- importer
def test_the_hub_release_becomes_one_query_per_sample_with_its_hints(hub):
    from benchmark.querysets.io import load_queryset

    root, meta = hub
    qs = load_queryset(root, name="rise")
    by_id = {q.id: q for q in qs.queries}
    assert sorted(by_id) == sorted(f"rise-{s['index']}" for s, _c, _r in HUB)
    columns = {k for s, _c, _r in HUB for k in s} | {"reference_img"}
    for s, _c, ref in HUB:
        q = by_id[f"rise-{s['index']}"]
        assert q.edit_type == "rise_" + s["category"].split("_")[0] and q.instruction == s["instruction"]
        assert dict(q.judge_hints) == _hints({**s, **({"reference_img": "x"} if ref else {})}, columns)
        assert (q.reference_image is not None) == (ref is not None) and q.target_image is None
        assert q.target_caption == ""  # the reference answer never reaches a description-based editor
    from PIL import Image

    ref = Image.open(qs.path(by_id["rise-spatial_reasoning_1"].reference_image))
    assert ref.mode == "RGB" and ref.getpixel((0, 0)) == (10, 10, 10)
    assert meta["release"] is None and meta["full_release"] is False and "NOT a full release" in meta["description"]
    assert meta["counts"]["subtasks"]["Puzzle Solving"] == 2 and meta["counts"]["reference_images"] == 3
    assert meta["scored_by"][0] == "rise"


def test_the_repository_release_layout_builds_too(tmp_path):
    from benchmark.querysets.io import load_queryset

    data = release(tmp_path / "RISEBench", REPO, layout="repo")
    assert data == tmp_path / "RISEBench" / "data" / "data_total.json"
    build(data, tmp_path / "rise64")
    qs = load_queryset(tmp_path / "rise64")
    hints = {q.id: dict(q.judge_hints) for q in qs.queries}
    assert hints["rise-temporal_reasoning_1"] == {"reference": "A rotten banana.", "reference_img": "nan"}
    assert hints["rise-logical_reasoning_1"] == {"reference_img": "true"}


def _hostile(tmp: Path, change) -> Path:
    data = release(tmp, HUB)
    rows = json.loads(data.read_text())
    change(rows)
    data.write_text(json.dumps(rows), encoding="utf-8")
    return data


@pytest.mark.parametrize(("change", "why"), [
    (lambda r: r[0].update(index="../evil"), r"index '../evil' is not allowed"),
    (lambda r: r[1].update(index="temporal_reasoning_1"), "also names sample 0"),
    (lambda r: r[0].update(category="moral_reasoning"), "category 'moral_reasoning' is not one of"),
    (lambda r: r[0].update(image="../../etc/passwd"), "must not contain '..'"),
    (lambda r: r[0].update(image="/etc/passwd"), "must be relative"),
    (lambda r: r[0].update(image="temporal_reasoning_images/none.png"), "none.png not found"),
    (lambda r: r[0].update(instruction="  "), "instruction must be non-empty text"),
    (lambda r: r[0].pop("reference"), "temporal_reasoning sample without a reference image needs reference"),
    (lambda r: r[8].pop("reference_txt"), "logical sample needs reference_txt or a reference image"),
    (lambda r: r[8].update(consistency_free=True), "consistency-free logical sample"),
    (lambda r: r[0].update(reference=5), "reference must be text"),
    (lambda r: r[0].update(answer_img="x.png"), r"unknown field\(s\) \['answer_img'\]"),
])
def test_hostile_samples_are_refused_by_name_and_nothing_is_written(tmp_path, change, why):
    data = _hostile(tmp_path / "dl", change)
    with pytest.raises(RiseFormatError, match=why) as err:
        build(data, tmp_path / "out")
    assert "1 of 12 samples refused; nothing was written" in str(err.value)
    assert not (tmp_path / "out" / "queries.jsonl").exists()


def test_every_refused_sample_is_counted_and_named_and_links_out_of_the_root_are_refused(tmp_path):
    from PIL import Image

    def change(rows):
        rows[0]["category"] = "x"
        rows[3]["instruction"] = ""
        rows[5]["image"] = "temporal_reasoning_images/outside.png"

    data = _hostile(tmp_path / "dl", change)
    Image.new("RGB", (8, 8)).save(tmp_path / "secret.png")
    os.symlink(tmp_path / "secret.png", tmp_path / "dl" / "data" / "temporal_reasoning_images" / "outside.png")
    with pytest.raises(RiseFormatError, match="3 of 12 samples refused") as err:
        build(data, tmp_path / "out")
    msg = str(err.value)
    assert "sample 0 (index 'temporal_reasoning_1')" in msg and "sample 3 (index 'causal_reasoning_2')" in msg
    assert "leads outside the image root" in msg


def test_a_transparent_source_and_an_unreadable_json_are_refused(tmp_path):
    from PIL import Image

    data = release(tmp_path / "dl")
    Image.new("RGBA", (48, 32), (1, 2, 3, 0)).save(tmp_path / "dl" / "data" / "temporal_reasoning_images" / "1.png")
    with pytest.raises(RiseFormatError, match="transparent pixels"):
        build(data, tmp_path / "out")
    data.write_text('[{"index": "a", "index": "b"}]')
    with pytest.raises(RiseFormatError, match=r"key\(s\) \['index'\] in one JSON object"):
        build(data, tmp_path / "out")
    data.write_text('{"index": "a"}')
    with pytest.raises(RiseFormatError, match="non-empty JSON list"):
        build(data, tmp_path / "out")


def test_query_hints_are_validated_when_a_set_is_read():
    from benchmark.querysets.io import query_from_dict, query_to_dict

    base = {"id": "rise-x", "image": "images/a.png", "edit_type": "rise_temporal", "instruction": "Age it."}
    q = query_from_dict({**base, "judge_hints": {"subtask": "Life Progression", "reference": "Old."},
                         "reference_image": "references/r.png"})
    assert q.judge_hints == (("reference", "Old."), ("subtask", "Life Progression")) and q.hint("subtask")
    assert query_from_dict(query_to_dict(q)) == q and "judge_hints" not in query_to_dict(query_from_dict(base))
    for bad, why in (({"judge_hints": {"a": 1}}, "must be text"), ({"judge_hints": ["x"]}, "must be an object"),
                     ({"judge_hints": {"../x": "y"}}, "judge hint name"),
                     ({"reference_image": "../r.png"}, "must not contain")):
        with pytest.raises(ValueError, match=why):
            query_from_dict({**base, **bad})


# ------------------------------------------------------------------------------------------------------ pipeline
_STANDARD = "STAND-IN prompt_"


def _key(prompt: str, colour) -> str:
    return f"{_STANDARD}{prompt}|{','.join(map(str, colour))}"


COLOUR = {s["index"]: c for s, c, _r in HUB}
# (index, [(prompt, reply)]): the scripted judge's replies, by prompt and the edit's colour (identity editor)
SCRIPT = {
    "temporal_reasoning_1": [("consist", "**Final Score:** **5**"), ("reasoning", "Final Score: 5"),
                             ("generation", "**Final Score**: 5")],                       # solved, score 5
    "temporal_reasoning_2": [("consist", "Final Score: 4"), ("reasoning_w_input", "final score: 3"),
                             ("generation", "Final Score: 5")],                           # 0.2*5 + 0.8*3 = 3.4
    "causal_reasoning_1": [("reasoning", "Final Score: 5"), ("generation", "Final Score: 5")],  # free: solved, 5
    "causal_reasoning_2": [("consist", "Final Score: 5"), ("reasoning", "Final Score: 1"),
                           ("generation", "Final Score: 2")],                             # (0.4+0.8)/2 -> 1
    "causal_reasoning_3": [("consist", "Final Score: 5"), ("reasoning", "Final Score: 4, 5"),
                           ("generation", "Final Score: 5")],                             # failure: 2 numbers
    "spatial_reasoning_1": [("spatial_cons", "Done.\nFinal Scores: 5"), ("spatial_ref_img", "Final Score: 5"),
                            ("spatial_qual", "Final Score: 4")],                          # 0.8 + 4 = 4.8
    "spatial_reasoning_2": [("spatial_cons", "Final Score: 5"),
                            ("spatial_ref_w_input", "I'm sorry, I can't help with that."),
                            ("spatial_qual", "Final Score: 5")],                          # failure: refusal
    "spatial_reasoning_3": [("spatial_cons", "Final Score: 5"), ("spatial_ref", "Final Score: 7"),
                            ("spatial_qual", "Final Score: 5")],                          # failure: out of range
    "logical_reasoning_1": [("logical_cons_ans", "Final Score: 1"), ("logical_txt", "**Final Score**: **1**")],  # 5
    "logical_reasoning_2": [("logical_cons", "Final Score: 1"), ("logical_img_wo_q", "Final Score: 0")],  # 1.1
    "logical_reasoning_3": [("logical_cons", "Final Score: 0"), ("logical_img_wo_q", "Final Score: 1")],  # 3.8
    "logical_reasoning_4": [("logical_cons_ans", "Final Score: 1"), ("logical_txt", "Final Score: 2")],  # failure
}
FAILED = {"causal_reasoning_3": "2 numbers [4, 5]", "spatial_reasoning_2": "no number after 'Final Score'",
          "spatial_reasoning_3": "score 7 outside 1..5", "logical_reasoning_4": "score 2 outside 0..1"}
# ok rows: solved 1,0,1,0,0,1,0,0; scores 5, 3.4, 5, 1, 4.8, 5, 1.1, 3.8 (sum 29.1)
WANT = {"RISE_accuracy": 3 / 8, "RISE_score": 29.1 / 8, "RISE_score_pct": 25 * (29.1 / 8 - 1),
        "RISE_temporal_accuracy": 0.5, "RISE_temporal_score": 4.2, "RISE_causal_accuracy": 0.5,
        "RISE_causal_score": 3.0, "RISE_spatial_accuracy": 0.0, "RISE_spatial_score": 4.8,
        "RISE_logical_accuracy": 1 / 3, "RISE_logical_score": 9.9 / 3,
        "RISE_reasoning": 30 / 8, "RISE_consistency": 30 / 7, "RISE_plausibility": 21 / 5,
        "RISE_logic_puzzle_solving_accuracy": 0.0, "RISE_logic_puzzle_solving_score": 2.45,
        "RISE_causal_state_transition_accuracy": 1.0, "RISE_causal_state_transition_score": 5.0}


def write_script(folder: Path) -> Path:
    replies = {_key(prompt, COLOUR[index]): reply for index, pairs in SCRIPT.items() for prompt, reply in pairs}
    path = folder / "replies.json"
    path.write_text(json.dumps(replies), encoding="utf-8")
    return path


def _overrides(root: Path, tmp_path: Path) -> list[str]:
    prompts, sha = write_prompts(tmp_path)
    return ["queryset=rise", f"queryset.root={root}", "metrics=rise", "profile=tiny",
            f"paths.results={tmp_path / 'results'}", "progress=false", "aggregate.bootstrap_resamples=50",
            "max_failed_fraction=1.0", f"metrics.rise.prompts_file={prompts}", f"metrics.rise.prompts_sha256={sha}",
            f"metrics.rise.prompts_commit={FAKE_COMMIT}"]


def _check_board(results: Path, row_name: str | None = None) -> pd.Series:
    board = pd.read_csv(results / "leaderboard.csv")
    row = board.iloc[0] if row_name is None else board.set_index("editor").loc[row_name]
    assert (row["n_ok"], row["n_failed"]) == (8, 4)
    for k, v in WANT.items():
        assert row[k] == pytest.approx(v, rel=1e-5, abs=1e-6), k  # leaderboard.csv keeps 6 significant digits
    assert math.isnan(row["RISE_spa_viewpoint_generation_accuracy"])
    return row


def test_scripted_replies_give_the_hand_worked_rise_table_and_failure_rows_keep_their_replies(
        hub, tmp_path, restore_logging):
    from benchmark.commands.run import compose, run_pipeline
    from benchmark.stages.score import read_scores

    log = tmp_path / "requests.jsonl"
    cfg, choices = compose(["editor=identity", *_overrides(hub[0], tmp_path)])
    with open_dict(cfg):
        cfg.metrics.rise.backbone = {"_target_": "scripted_judge.ScriptedByPrompt",
                                     "replies_file": str(write_script(tmp_path)), "log_file": str(log)}
    summary = run_pipeline(cfg, choices["editor"])
    assert summary["score"].failed == 4 and summary["score"].computed == len(HUB)
    rows = read_scores(Path(summary["run_dir"]), summary["metric_sig"]).set_index("query_id")
    for index, why in FAILED.items():
        row = rows.loc[f"rise-{index}"]
        assert row["status"] == "failed" and why in row["reason"] and math.isnan(row["RISE_score"])
        for _prompt, reply in SCRIPT[index]:  # every reply kept, the unparsable one included
            assert reply in {row[f"rise_reply_{d}"] for d in ("consistency", "reasoning", "plausibility")}
    ok = rows.loc["rise-causal_reasoning_1"]
    assert (ok["RISE_solved"], ok["RISE_score"], ok["rise_subtask"]) == (1.0, 5.0, "State Transition")
    assert math.isnan(ok["RISE_consistency"]) and ok["rise_reply_consistency"] == ""
    assert rows.loc["rise-temporal_reasoning_2", "RISE_score"] == pytest.approx(3.4)
    board = _check_board(tmp_path / "results")
    assert "scripted-by-prompt@test" in board["components"] and FAKE_COMMIT in board["components"]
    # what the judge got: 32 requests, images at most 768 px, the reference image for spatial_reasoning_1's
    # consistency and reasoning requests, the edit last
    sent = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(sent) == sum(len(v) for v in SCRIPT.values())
    s1 = [r for r in sent if r["colours"][-1] == ",".join(map(str, COLOUR["spatial_reasoning_1"]))]
    assert [r["colours"][0] for r in s1 if len(r["colours"]) == 2] == ["10,10,10", "10,10,10"]
    t1 = [r["text"] for r in sent if r["key"] == _key("reasoning", COLOUR["temporal_reasoning_1"])]
    assert t1 == [official_strings()["prompt_reasoning"].format(instruct="Draw the banana a year later.",
                                                                reference="A rotten, blackened banana.")]


def test_the_official_image_size_is_a_thumbnail_within_768():
    from PIL import Image

    from benchmark.metrics.rise.suite import official_size

    big = Image.new("RGB", (1000, 500), (1, 2, 3))
    assert official_size(big).size == (768, 384) and big.size == (1000, 500)
    assert official_size(Image.new("RGB", (40, 30))).size == (40, 30)  # never enlarged


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=f"{ROOT}{os.pathsep}{HELPERS}")
    return subprocess.run([sys.executable, "-m", "benchmark.commands.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_editmeter_run_and_score_as_a_user_types_them(hub, tmp_path, restore_logging, monkeypatch):
    """`editmeter run` with metrics=rise (in a subprocess, as typed), then `editmeter score` of a folder of edits
    made elsewhere (the same argv through the CLI's entry point, in this process), the scripted judge selected on the
    command line: both give the hand-worked table on the leaderboard."""
    from PIL import Image

    from benchmark.commands import cli
    from benchmark.querysets.io import load_queryset

    replies = write_script(tmp_path)
    judge = ["metrics.rise.backbone._target_=scripted_judge.ScriptedByPrompt",
             f"+metrics.rise.backbone.replies_file={replies}"]
    proc = _cli("run", "editor=identity", *_overrides(hub[0], tmp_path), *judge, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    _check_board(tmp_path / "results", "identity")
    edits = tmp_path / "their_edits"
    edits.mkdir()
    qs = load_queryset(hub[0])
    for q in qs.queries:  # the sources as the edits: the same replies, the same table
        Image.open(qs.path(q.image)).save(edits / f"{q.id}.png")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["score", "--edits", str(edits), "--name", "their-model", *_overrides(hub[0], tmp_path),
                     *judge]) == 0
    _check_board(tmp_path / "results", "their-model")


def test_the_openai_backbone_sends_what_the_official_script_sends(hub, tmp_path, restore_logging, monkeypatch):
    """gpt_eval.py's request: model gpt-4.1-2025-04-14, one user turn, the text then the images as JPEG data URLs
    with detail "high", max_tokens 4096, n 1, temperature 0, no seed, no system turn."""
    from local_servers import serving
    from openai_server import OpenAIServer

    from benchmark.commands.run import compose, run_pipeline

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with serving(OpenAIServer(lambda images, text, system, max_tokens: "Final Score: 5",
                              served="gpt-4.1-2025-04-14")) as srv:
        cfg, choices = compose(["editor=identity", *_overrides(hub[0], tmp_path), "limit=1",
                                "metrics/rise_judge@metrics.rise.backbone=openai",
                                f"metrics.rise.backbone.base_url={srv.url}", "metrics.rise.backbone.backoff_s=0"])
        run_pipeline(cfg, choices["editor"])
    body = srv.payloads[0]
    assert set(body) == {"model", "messages", "max_tokens", "n", "temperature"}
    assert (body["model"], body["max_tokens"], body["n"], body["temperature"]) == ("gpt-4.1-2025-04-14", 4096, 1, 0)
    (turn,) = body["messages"]
    assert turn["role"] == "user" and turn["content"][0]["type"] == "text"
    images = [c["image_url"] for c in turn["content"][1:]]
    assert images and all(i["detail"] == "high" and i["url"].startswith("data:image/jpeg;base64,") for i in images)
    assert srv.auth[-1] == "Bearer sk-test"
    # the very bytes the official encode_image_to_base64 makes of the release's files: RGBA / P converted to RGB,
    # thumbnail to 768, JPEG at PIL's defaults
    import base64
    import io

    from PIL import Image

    def official_b64(path: Path) -> str:
        img = Image.open(path)
        img = img.convert("RGB") if img.mode in ("RGBA", "P") else img
        img.thumbnail((768, 768))
        buf = io.BytesIO()
        img.save(buf, format="JPEG")
        return base64.b64encode(buf.getvalue()).decode()

    files = Path(hub[1]["source"]["images"]).rglob("*.png")
    sent = {i["url"].split(",", 1)[1] for body in srv.payloads for c in body["messages"][0]["content"][1:]
            for i in [c["image_url"]]}
    assert sent <= {official_b64(f) for f in files}


def test_rise_is_refused_up_front_on_a_set_without_rise_categories(tmp_path):
    from benchmark.commands.run import compose, run_pipeline
    from benchmark.io.errors import PreflightError

    cfg, choices = compose(["editor=identity", "queryset=demo_mini", "metrics=rise", "profile=tiny",
                            f"paths.results={tmp_path}", "progress=false"])
    with pytest.raises(PreflightError, match="a RISEBench category with an instruction"):
        run_pipeline(cfg, choices["editor"])


def test_the_rule_before_the_april_2026_fix_is_a_named_option():
    """gpt_eval.py before ce8cba37 required consistency 5 of every temporal, causal and spatial sample: a
    consistency-free one was never solved. On this file's scripted replies that moves causal accuracy from 0.5 to 0
    and overall from 3/8 to 2/8 (the official script at f25d5f48 gives the same, run beside it)."""
    from benchmark.metrics.rise.suite import RiseSuite

    free = {"consistency_free": "true"}
    assert sample_scores("rise_causal", free, {"reasoning": 5, "plausibility": 5})["solved"] == 1.0
    before = sample_scores("rise_causal", free, {"reasoning": 5, "plausibility": 5}, "2025-04")
    assert before["solved"] == 0.0 and before["score"] == 5.0  # the score was never affected
    assert sample_scores("rise_spatial", {}, {"consistency": 5, "reasoning": 5, "plausibility": 5},
                         "2025-04")["solved"] == 1.0
    with pytest.raises(ValueError, match="completion must be one of"):
        sample_scores("rise_causal", free, {"reasoning": 5, "plausibility": 5}, "2024")
    class Backbone:
        name = identity = "stub"

    kw = {"backbone": Backbone(), "prompts_file": "x", "prompts_commit": FAKE_COMMIT, "prompts_sha256": "0" * 64,
          "device": "cpu"}
    assert "completion=2025-04" in RiseSuite(completion="2025-04", **kw).protocol
    assert "completion=2026-04" in RiseSuite(**kw).protocol


def test_a_failed_judge_call_is_a_failure_row_of_its_kind_and_rows_name_their_judge(hub, tmp_path):
    """metrics=rise through the judged suites' shared reading: a call that failed after its retries is a failure
    row naming `call_failed` and its error, never a score; an answered row carries the per-reply provenance."""
    from PIL import Image

    from benchmark.metrics.rise.suite import RisePair, RiseSuite
    from benchmark.models.judge_reply import CALL_FAILED, JudgeReply
    from benchmark.querysets.io import load_queryset

    qs = load_queryset(hub[0], name="rise")
    q = next(q for q in qs.queries if q.edit_type != "rise_logical" and not q.reference_image)

    class Backbone:
        name = identity = "stub-judge"

        def __init__(self, fail: bool) -> None:
            self.fail = fail

        def generate(self, requests):
            if self.fail:
                return [JudgeReply("", model=self.name, failure=CALL_FAILED, error="HTTP 503 after 5 retries")
                        for _ in requests]
            return [JudgeReply("Final Score: 5", model=self.name, answered_by="snap-2", fingerprint="fp_y")
                    for _ in requests]

    prompts, sha = write_prompts(tmp_path)
    suite = RiseSuite(backbone=Backbone(True), prompts_file=str(prompts), prompts_commit=FAKE_COMMIT,
                      prompts_sha256=sha, device="cpu")
    src = Image.open(qs.path(q.image)).convert("RGB")
    (row,) = suite._score_chunk([RisePair(q, src, src)])
    assert row["status"] == "failed" and row["judge_failure"] == CALL_FAILED and "HTTP 503" in row["reason"]
    assert math.isnan(row["RISE_score"])
    suite.backbone = Backbone(False)
    (row,) = suite._score_chunk([RisePair(q, src, src)])
    assert row["status"] == "ok" and row["judge_failure"] == ""
    assert (row["judge_model"], row["judge_answered_by"], row["judge_fingerprint"]) == ("stub-judge", "snap-2", "fp_y")


def test_pinning_the_hub_revision_is_one_command_and_the_download_uses_it(tmp_path, monkeypatch, capsys):
    """`editmeter data pin rise --revision R`: written to the user's pins file; the manifest's RISEBench-360 URLs then
    name R instead of main (the prompt file's URL keeps its own commit). A branch name is refused, nothing written."""
    from benchmark.commands import cli
    from benchmark.io.download import load_manifest

    pins = tmp_path / "pins.json"
    monkeypatch.setenv("EDITMETER_PINS", str(pins))
    before = {f.name: f.url for f in load_manifest("rise").files}
    assert cli.main(["data", "pin", "rise", "--revision", "main"]) == 2
    assert "not a 40-hex commit" in capsys.readouterr().err and not pins.exists()
    rev = "0123456789abcdef" * 2 + "01234567"
    assert cli.main(["data", "pin", "rise", "--revision", rev]) == 0
    assert json.loads(pins.read_text()) == {"rise": {"revision": rev}}
    manifest = load_manifest("rise")
    after = {f.name: f.url for f in manifest.files}
    hub = [n for n, u in before.items() if "/resolve/main/" in u]
    assert sorted(hub) == ["data.zip", "datav2_total_w_subtask.json"]
    assert all(after[n] == before[n].replace("/resolve/main/", f"/resolve/{rev}/") for n in hub)
    assert after["rise_prompts.txt"] == before["rise_prompts.txt"] and rev in manifest.pinned
