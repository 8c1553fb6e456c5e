"""GEdit-Bench by its official protocol (metrics=gedit, docs/judge.md): the official parser's behaviour on hand-made
replies, SC / PQ / O per sample, the per-group then macro aggregation per language and subset on hand-made numbers,
the prompt file's checksum refusal, the signature, and runs on a GEdit-Bench fixture (a scripted backbone against
numbers worked out by hand; the tiny random-weight Qwen2.5-VL, whose unparseable replies become failure rows)."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf, open_dict
from test_gedit_builder import ROWS, ZH_TEXT, gedit_dataset, run_script

from benchmark.metrics.gedit.protocol import (
    ProtocolError,
    ReplyError,
    load_prompts,
    official_means,
    parse_reply,
    sample_scores,
    summary_keys,
)

ROOT = Path(__file__).resolve().parents[1]
FAKE_COMMIT = "feedface" * 5  # 40 hex digits (all-digit text would reach the config as a number)
# our own wording, in the release file's form (module-level string assignments); never the authors' text
TEST_PROMPTS = '''# test prompts
_context_no_delimit = """Rate AI-edited images. Reply as {"score": [...], "reasoning": "..."}."""

_prompts_0shot_two_image_edit_rule = """RULES: the first image is the original, the second the edit."""

_prompts_0shot_tie_rule_SC = """
Two scores from 0 to 10: editing success, then over-editing.
Editing instruction: <instruction>
"""

_prompts_0shot_rule_PQ = """RULES: two scores from 0 to 10: naturalness, then artifacts."""

_unused = "anything" + "else"
def not_run(): raise SystemExit("never executed")
'''


def write_prompts(folder: Path, text: str = TEST_PROMPTS) -> tuple[Path, str]:
    path = folder / "viescore_prompts.txt"
    path.write_text(text, encoding="utf-8")
    return path, hashlib.sha256(text.encode()).hexdigest()


# ------------------------------------------------------------------------------------------------------- parsing
@pytest.mark.parametrize(("reply", "scores"), [
    ('{"score": [7, 3], "reasoning": "ok"}', [7, 3]),                                 # well-formed
    ('{\n"score" : [4, 10],\n"reasoning" : "two lines"\n}', [4, 10]),                  # the prompt's own layout
    ('Sure! {"score": [8, 6], "reasoning": "fine"} Hope this helps.', [8, 6]),         # extra text around the JSON
    ('```json\n{"score": [5, 2], "reasoning": "x"}\n```', [5, 2]),                     # a markdown fence
    ('a ||V^=^V|| {"score": [5, 9], "reasoning": "x"} ||V^=^V|| b {"score": [0, 0]}', [5, 9]),  # between delimiters
    ('{"score": 6, "reasoning": "one number"}', [6]),                                   # a bare score becomes a list
    ('{"score": [7.5, 6], "reasoning": "halves"}', [7.5, 6]),                           # floats are kept
    ("[6, 0]", [6, 0]),                                                                 # a bare list of two
    ("My scores are [6,0] overall", [6, 0]),                                            # ... anywhere in the text
    ("7", [7]),                                                                         # a bare integer
    (" 7\n", [7]),                                                                      # int() strips whitespace
    ("{score: 7, reasoning: good}", [7]),                                               # repaired by fix_json
    ('{"score": [7, 5]', [7, 5]),                                      # unclosed object: its list is read
])
def test_replies_parse_as_the_official_parser_reads_them(reply, scores):
    assert parse_reply(reply) == scores


@pytest.mark.parametrize(("reply", "why"), [
    ("I cannot judge these images.", "no JSON object"),              # official: False, then a random guess
    ("[6, 0, 1]", "no JSON object"),                                  # only a list of exactly two is read
    ("11", "no JSON object"),                                         # a bare integer must lie in 0..10
    ("{'score': [7, 5]}", "does not parse"),                          # single quotes: fix_json cannot repair
    ("{score: [7, 5]}", "does not parse"),                            # fix_json breaks a bare list (as officially)
    ("{rating: 7}", "no 'score'"),                                    # fix_json parses it; the official code crashes
    ('{"score": [], "reasoning": ""}', "not a non-empty list"),       # official: min([]) raises
    ('{"score": [NaN, 5]}', "not a number"),
    ('{"score": [true, 5]}', "not a number"),
    ('{"score": ["8", 5]}', "not a number"),                          # official: min() of mixed types raises
    ('{"score": [12, 5]}', "outside 0..10"),                          # named deviation: official keeps 12
    ("||V^=^V||||V^=^V||", "nothing between the delimiters"),
    ("rate_limit_exceeded", "rate-limit"),
])
def test_replies_the_official_parser_cannot_read_are_errors_not_guesses(reply, why):
    with pytest.raises(ReplyError, match=why):
        parse_reply(reply)


def test_a_sample_is_min_of_each_list_and_the_geometric_mean_of_the_minima():
    assert sample_scores([7, 3], [9, 4]) == (3, 4, math.sqrt(12))
    assert sample_scores([5], [8, 8]) == (5, 8, math.sqrt(40))
    assert sample_scores([0, 9], [10, 10])[2] == 0  # one zero sinks the overall score


# --------------------------------------------------------------------------------------------------- aggregation
def test_official_means_are_per_group_means_then_their_macro_average_per_language_and_subset():
    # (edit_type, language, intersection, SC, PQ), O = sqrt(SC x PQ) per sample
    rows = [("gedit_color_alter", "en", True, 4, 9), ("gedit_color_alter", "en", False, 8, 2),
            ("gedit_text_change", "en", True, 1, 1), ("gedit_color_alter", "cn", False, 9, 4)]
    df = pd.DataFrame(rows, columns=["edit_type", "language", "intersection", "G_SC", "G_PQ"])
    df["G_O"] = (df["G_SC"] * df["G_PQ"]) ** 0.5
    got = official_means(df)
    assert list(got) == summary_keys()
    # EN: color_alter SC (4 + 8) / 2 = 6, PQ (9 + 2) / 2 = 5.5, O (6 + 4) / 2 = 5; text_change 1, 1, 1
    assert (got["GEdit_SC_en"], got["GEdit_PQ_en"], got["GEdit_O_en"]) == (3.5, 3.25, 3.0)
    # not the mean over samples (13 / 3), nor O from the means (sqrt(3.5 x 3.25))
    assert got["GEdit_SC_en"] != pytest.approx(13 / 3) and got["GEdit_O_en"] != pytest.approx(math.sqrt(3.5 * 3.25))
    # EN intersection: color_alter's first row (4, 9, 6) and text_change (1, 1, 1)
    assert (got["GEdit_SC_en_intersection"], got["GEdit_PQ_en_intersection"], got["GEdit_O_en_intersection"]) == (
        2.5, 5.0, 3.5)
    assert (got["GEdit_SC_cn"], got["GEdit_PQ_cn"], got["GEdit_O_cn"]) == (9.0, 4.0, 6.0)
    assert all(math.isnan(got[f"GEdit_{m}_cn_intersection"]) for m in ("SC", "PQ", "O"))  # no CN row there
    # metamorphic: rows of a third language, or duplicating every row of one group, leave the figures alone
    assert official_means(pd.concat([df, df.assign(language="fr")])) == got
    doubled = pd.concat([df, df[df["edit_type"] == "gedit_text_change"]])
    assert official_means(doubled) == got


# ------------------------------------------------------------------------------------------------------- prompts
def test_prompt_file_is_read_without_running_it_and_refused_when_its_checksum_differs(tmp_path):
    path, sha = write_prompts(tmp_path)
    p = load_prompts(path, sha, FAKE_COMMIT)
    assert p.sc == ('Rate AI-edited images. Reply as {"score": [...], "reasoning": "..."}.\n'
                    "RULES: the first image is the original, the second the edit.\n\n"
                    "Two scores from 0 to 10: editing success, then over-editing.\nEditing instruction: <instruction>\n")
    assert p.sc_for("make it red").endswith("Editing instruction: make it red\n")
    assert p.pq.endswith("\nRULES: two scores from 0 to 10: naturalness, then artifacts.")
    path.write_text(TEST_PROMPTS.replace("0 to 10", "1 to 10", 1))  # one changed word
    with pytest.raises(ProtocolError, match=f"expected {sha} .*not the pinned protocol.*make data NAME=gedit"):
        load_prompts(path, sha, FAKE_COMMIT)
    with pytest.raises(ProtocolError, match="is missing: fetch it with `make data NAME=gedit`"):
        load_prompts(tmp_path / "nothing.txt", sha, FAKE_COMMIT)
    with pytest.raises(ProtocolError, match="40-hex commit"):
        load_prompts(path, sha, "main")
    short, short_sha = write_prompts(tmp_path, TEST_PROMPTS.replace("_prompts_0shot_rule_PQ", "_other"))
    with pytest.raises(ProtocolError, match="no string assignment of _prompts_0shot_rule_PQ"):
        load_prompts(short, short_sha, FAKE_COMMIT)


def test_the_manifest_fetches_the_prompt_file_the_config_pins():
    from benchmark.commands.run import compose
    from benchmark.io.download import load_manifest

    cfg = compose(["metrics=gedit"])[0].metrics.gedit
    entry = next(f for f in load_manifest("gedit").files if f.name == Path(cfg.prompts_file).name)
    assert Path(cfg.prompts_file).parent == ROOT / "datasets" / "gedit" / "downloads"  # where make data puts it
    assert entry.sha256 == cfg.prompts_sha256 and entry.size and not entry.name.endswith(".py")
    assert entry.url == ("https://raw.githubusercontent.com/stepfun-ai/Step1X-Edit/"
                         f"{cfg.prompts_commit}/GEdit-Bench/viescore/vie_prompts.py")
    assert cfg.backbone.max_new_tokens == 512 and cfg.backbone.model_id == "Qwen/Qwen2.5-VL-72B-Instruct-AWQ"


def test_protocol_and_backbone_identity_enter_the_signature():
    from hydra.utils import instantiate

    from benchmark.commands.run import compose
    from benchmark.plan.config import metric_signature

    sigs = set()
    for extra in ([], [f"metrics.gedit.prompts_commit={FAKE_COMMIT}"], [f"metrics.gedit.prompts_sha256={'a' * 64}"],
                  ["metrics.gedit.backbone.max_new_tokens=64"],
                  ["metrics.gedit.backbone.model_id=Qwen/Qwen2.5-VL-7B-Instruct", "metrics.gedit.backbone.revision=null"]):
        cfg, _ = compose(["metrics=gedit", "profile=tiny", *extra])
        suite = instantiate(cfg.metrics.gedit)
        sigs.add(metric_signature(OmegaConf.to_container(cfg.metrics, resolve=True), {"gedit": suite.info}))
        assert suite.components()["judge"] == f"{cfg.metrics.gedit.backbone.model_id}-tiny"
    assert len(sigs) == 5


# ------------------------------------------------------------------------------------------------------ pipeline
@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gedit")
    done = run_script(gedit_dataset(tmp), tmp / "gedit")
    assert done.returncode == 0, done.stderr
    return tmp / "gedit"


def _run(built: Path, tmp_path: Path, *extra: str, backbone: dict | None = None):
    from benchmark.commands.run import compose, run_pipeline

    prompts, sha = write_prompts(tmp_path)
    cfg, choices = compose(["editor=identity", "queryset=gedit", f"queryset.root={built}", "queryset.language=both",
                            "metrics=gedit", "profile=tiny", f"paths.results={tmp_path / 'results'}", "progress=false",
                            "aggregate.bootstrap_resamples=50", "max_failed_fraction=1.0",
                            f"metrics.gedit.prompts_file={prompts}", f"metrics.gedit.prompts_sha256={sha}",
                            f"metrics.gedit.prompts_commit={FAKE_COMMIT}", *extra])
    if backbone is not None:
        with open_dict(cfg):
            cfg.metrics.gedit.backbone = backbone
    return run_pipeline(cfg, choices["editor"])


SC_REPLIES = {  # instruction -> the SC reply; SC per sample in the comment
    "Change the sign's text to 'hello'": '{"score": [8, 6], "reasoning": "ok"}',        # 6
    ZH_TEXT: '||V^=^V|| {"score": [9, 9], "reasoning": "好"} ||V^=^V||',               # 9
    "Make the background a beach": "I would say [4, 7]",                                 # 4
    "把背景换成海滩": "5",                                                                 # 5
    "Add a cat on the sofa": "I cannot judge this.",                                     # does not parse: failure row
    "Make it look like autumn": '{"score": [10, 2]}',                                    # 2
    "让它看起来像秋天": '{"score": [7, 7]}',                                                # 7
    "Replace the word 'open' with 'closed'": '{"score": [3, 9]}',                        # 3
    "把“营业”改成“休息”": '{"score": [6, 8]}',                                            # 6
}
PQ_REPLIES = {  # the source's colour (identity edits) -> the PQ reply; PQ per sample in the comment
    "200,30,30": '{"score": [9, 4]}',   # 4   k1 (text_change, intersection)
    "30,200,30": '{"score": [1, 9]}',   # 1   k2 (background_change)
    "30,30,200": '{"score": [8, 8]}',   # 8   k3 (subject-add, intersection, English only; its SC reply fails)
    "120,90,10": '{"score": [9, 9]}',   # 9   t1 (tone_transfer)
    "90,90,90": '{"score": [3, 5]}',    # 3   k5 (text_change, intersection)
}


def test_scripted_replies_give_the_hand_worked_gedit_figures_and_a_failure_row_keeps_its_reply(built, tmp_path,
                                                                                                restore_logging):
    from benchmark.stages.score import read_scores

    summary = _run(built, tmp_path, backbone={"_target_": "scripted_judge.ScriptedJudge", "sc": SC_REPLIES,
                                              "pq": PQ_REPLIES})
    assert summary["score"].failed == 1 and summary["score"].computed == len(ROWS)
    rows = read_scores(Path(summary["run_dir"]), summary["metric_sig"]).set_index("query_id")
    failed = rows[rows["status"] == "failed"]
    assert len(failed) == 1 and failed["sc_reply"].iloc[0] == "I cannot judge this."
    assert "SC reply does not parse" in failed["reason"].iloc[0] and math.isnan(failed["G_O"].iloc[0])
    assert failed["pq_reply"].iloc[0] == PQ_REPLIES["30,30,200"]
    board = pd.read_csv(tmp_path / "results" / "leaderboard.csv").iloc[0]
    assert (board["n_ok"], board["n_failed"]) == (8, 1)
    assert "scripted-judge@test" in board["components"] and FAKE_COMMIT in board["components"]
    r = math.sqrt
    # per sample (SC, PQ, O): EN text_change (6, 4, r24) and (3, 3, 3), background (4, 1, 2), tone (2, 9, r18);
    # CN text_change (9, 4, 6) and (6, 3, r18), background (5, 1, r5), tone (7, 9, r63)
    want = {
        "GEdit_SC_en": (4.5 + 4 + 2) / 3, "GEdit_PQ_en": (3.5 + 1 + 9) / 3,
        "GEdit_O_en": ((r(24) + 3) / 2 + 2 + r(18)) / 3,
        "GEdit_SC_en_intersection": 4.5, "GEdit_PQ_en_intersection": 3.5, "GEdit_O_en_intersection": (r(24) + 3) / 2,
        "GEdit_SC_cn": (7.5 + 5 + 7) / 3, "GEdit_PQ_cn": (3.5 + 1 + 9) / 3,
        "GEdit_O_cn": ((6 + r(18)) / 2 + r(5) + r(63)) / 3,
        "GEdit_SC_cn_intersection": 7.5, "GEdit_PQ_cn_intersection": 3.5, "GEdit_O_cn_intersection": (6 + r(18)) / 2,
    }
    assert {k: board[k] for k in want} == pytest.approx(want, abs=1e-5)  # the CSV keeps 5 decimals
    by_type = pd.read_csv(tmp_path / "results" / "leaderboard_by_type.csv").set_index("edit_type")
    assert by_type.loc["gedit_text_change", "GEdit_O_cn"] == pytest.approx((6 + r(18)) / 2)


def test_tiny_judge_replies_that_do_not_parse_are_failure_rows_with_the_reply(built, tmp_path, restore_logging):
    from benchmark.io.errors import TooManyFailures
    from benchmark.stages.score import read_scores

    # random weights write bytes, not scores: every query fails, which fails the run whatever max_failed_fraction
    with pytest.raises(TooManyFailures, match="does not parse as GEdit-Bench's parser reads it.*every query failed"):
        _run(built, tmp_path, "queryset.language=en", "limit=2", "metrics.gedit.backbone.max_new_tokens=24",
             "metrics.gedit.backbone.dtype=float32")
    run_dir = next((tmp_path / "results" / "runs").glob("gedit-en-*/identity-*"))
    sig = next((run_dir / "scores").iterdir()).name
    rows = read_scores(run_dir, sig)
    failed = rows[rows["status"] == "failed"]
    assert len(rows) == len(failed) == 2
    for _, row in failed.iterrows():
        assert "does not parse as GEdit-Bench's parser reads it" in row["reason"]
        assert isinstance(row["sc_reply"], str) and isinstance(row["pq_reply"], str) and row["sc_reply"]
    board = pd.read_csv(tmp_path / "results" / "leaderboard.csv").iloc[0]
    assert board["n_failed"] == len(failed)
    assert "Qwen/Qwen2.5-VL-72B-Instruct-AWQ-tiny" in board["components"]


def test_gedit_is_refused_up_front_on_a_set_without_gedit_task_types(tmp_path):
    from benchmark.commands.run import compose, run_pipeline
    from benchmark.io.errors import PreflightError

    cfg, choices = compose(["editor=identity", "queryset=demo_mini", "metrics=gedit", "profile=tiny",
                            f"paths.results={tmp_path}", "progress=false"])
    with pytest.raises(PreflightError, match="a GEdit-Bench task type with an instruction"):
        run_pipeline(cfg, choices["editor"])


# ------------------------------------------------------------------------------------------------ the backbone
@pytest.mark.parametrize(("size", "want"), [
    ((32, 32), (56, 56)),          # 28 x 28 is below 4 merged patches: scaled up, ceil to 28s
    ((1000, 10), (1008, 28)),      # a side rounding to 0 becomes 28 first (transformers' own rounding gives 560)
    ((4000, 3000), (4004, 2996)),  # within the bounds: each side to its nearest multiple of 28
    ((8000, 6000), (4116, 3080)),  # above 16,384 patches: beta = sqrt(48e6 / 12845056) = 1.9331, floor to 28s
])
def test_images_are_sized_as_qwen_vl_utils_sizes_them(size, want):
    from benchmark.models.vlm import qwen_vl_utils_size

    assert qwen_vl_utils_size(*size) == want


def test_rgba_goes_over_white_and_extreme_aspect_ratios_are_refused():
    from PIL import Image

    from benchmark.models.vlm import qwen_vl_utils_image, qwen_vl_utils_size

    im = Image.new("RGBA", (56, 56), (10, 20, 30, 0))
    im.putpixel((0, 0), (10, 20, 30, 255))
    out = qwen_vl_utils_image(im)
    assert out.mode == "RGB" and out.size == (56, 56)
    assert out.getpixel((40, 40)) == (255, 255, 255) and out.getpixel((0, 0)) == (10, 20, 30)
    with pytest.raises(ValueError, match="aspect ratio must be below 200"):
        qwen_vl_utils_size(2010, 10)


def test_tiny_text_judge_replies_do_not_depend_on_the_batch_size():
    from PIL import Image

    from benchmark.models.vlm import TextJudge

    red, blue = Image.new("RGB", (40, 30), (200, 30, 30)), Image.new("RGB", (30, 40), (30, 30, 200))
    requests = [([red, blue], "Rate the edit: make it blue"), ([blue], "Rate the image")]
    one = TextJudge(weights="tiny", dtype="float32", device="cpu", max_new_tokens=8)
    two = TextJudge(weights="tiny", dtype="float32", device="cpu", max_new_tokens=8, batch_size=2)
    replies = one.generate(requests)
    assert len(replies) == 2 and all(isinstance(r, str) for r in replies)
    assert two.generate(requests) == replies == one.generate(requests)  # and deterministic
    assert one.identity == two.identity  # batch size is speed, not identity
    assert "max_new_tokens=8" in one.identity and "Qwen2.5-VL-72B-Instruct-AWQ-tiny" in one.identity
    with pytest.raises(ValueError, match="max_new_tokens must be a positive integer"):
        TextJudge(weights="tiny", max_new_tokens=0)
    with pytest.raises(ValueError, match="no revision for the judge model 'org/other'"):
        TextJudge(weights="pretrained", model_id="org/other")
