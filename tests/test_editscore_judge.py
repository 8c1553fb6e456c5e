"""EditScore as a judge (metrics=editscore, docs/judge.md "EditScore"): the official parser's behaviour on hand-made
replies, the per-pass scores and the two reductions on hand-worked numbers, the prompt assembly from a test-written
prompt file, the checksum refusal, the manifest's pins, the tiny base + LoRA judge (loaded through PeftModel and
merged, seeded sampling: reruns and batch neighbours change nothing, bf16 on CPU), and runs through the pipeline
(a scripted seeded backbone against numbers worked out by hand; the tiny judge, whose replies become failure rows)."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import open_dict

from benchmark.metrics.editscore.protocol import (
    ProtocolError,
    ReplyError,
    load_prompts,
    parse_dict,
    parse_reply,
    pass_scores,
    reduce_passes,
)
from benchmark.plan.config import read_plan

ROOT = Path(__file__).resolve().parents[1]
FAKE_COMMIT = "feedface" * 5
# our own wording in the release file's form (module-level string assignments); never the authors' text. The "10"s
# of the context and the editing rule must stay; those of the SC and PQ rules become the score range.
CONTEXT = 'Judge AI images (10 of them at most). Answer as {"reasoning": "...", "score": [...]}.\n'
EDIT_RULE = "RULES: image one is the source, image two the edit.\n"
SC_RULE = "\nTwo scores from 0 to 10: success (10 = perfect), then overediting.\nINSTRUCTION=<instruction>\n"
PQ_RULE = "RULES: two scores from 0 to 10: naturalness, then artifacts.\n"
TEST_PROMPTS = f'''# test prompts
_context_no_delimit_reasoning_first = {CONTEXT!r}
_prompts_0shot_two_image_edit_rule = {EDIT_RULE!r}
_prompts_0shot_tie_rule_SC = {SC_RULE!r}
_prompts_0shot_rule_PQ = {PQ_RULE!r}
_unused = "anything" + "else"
def not_run(): raise SystemExit("never executed")
'''


def write_prompts(folder: Path, text: str = TEST_PROMPTS) -> tuple[Path, str]:
    path = folder / "vie_prompts.txt"
    path.write_text(text, encoding="utf-8")
    return path, hashlib.sha256(text.encode()).hexdigest()


# ------------------------------------------------------------------------------------------------------- parsing
@pytest.mark.parametrize(("reply", "scores", "reasoning"), [
    ('{\n"reasoning" : "fine",\n"score" : [25, 10]\n}', [25, 10], "fine"),              # the prompt's own layout
    ('Sure. {"reasoning": "ok", "score": [8, 6]} Done.', [8, 6], "ok"),                  # text around the JSON
    ('a ||V^=^V|| {"reasoning": "d", "score": [20, 15]} ||V^=^V|| b {"score": [1, 1]}', [20, 15], "d"),  # delimited
    ("Scores: [6, 0].", [6, 0], "the reply is a bare list of scores"),                   # a bare [a, b] list
    (" 7\n", [7], "the reply is a bare number"),                                         # a bare integer 0..10
    ('{\u201creasoning\u201d: \u201cok\u201d, \u201cscore\u201d: [12, 18]}', [12, 18], "ok"),  # smart quotes
    ('{"reasoning": "the "red" car", "score": [18, 22]}', [18, 22], 'the "red" car'),     # json_repair's fix
    ('{"reasoning": "ok", "score": [5, 9}', [5, 9], "ok"),                                # json_repair closes it
    ("{'reasoning': 'single', 'score': [3, 4]}", [3, 4], "single"),                      # python quotes
    ('{"score": 19}', [19], ""),                                                          # a bare score, no reasoning
])
def test_replies_parse_as_the_official_parser_reads_them(reply, scores, reasoning):
    got = parse_reply(reply)
    assert got.scores == scores and got.reasoning == reasoning


@pytest.mark.parametrize(("reply", "why", "min_scores"), [
    ("I cannot judge this.", "no JSON object", 1),
    ("20", "not a bare integer 0..10", 1),  # the official check keeps 0..10 whatever the range
    ("I'm sorry, but I can't assist with that request.", "refusal", 1),
    ("rate_limit_exceeded", "rate-limit", 1),
    ('{"reasoning": "no score here"}', "no 'score'", 1),
    ('{"reasoning": "x" "score": 7}', "'score' is 7, not a list", 1),  # json_repair's dict keeps 7 unwrapped
    ("} then {", "parses to str", 1),
    ('{"reasoning": "one", "score": [12]}', "at least 2", 2),  # SC needs score[1]
    ('{"reasoning": "neg", "score": [-3, 4]}', "negative", 2),
    ('{"reasoning": "text", "score": ["high", 4]}', "not a number", 2),
])
def test_replies_the_official_code_cannot_score_are_errors_not_guesses(reply, why, min_scores):
    with pytest.raises(ReplyError, match=why):
        parse_reply(reply, min_scores=min_scores)


def test_the_fixers_after_json_repair_run_in_the_official_order(monkeypatch):
    import json_repair

    # a strict json_repair: every fixer of the chain gets its turn, each on the previous one's output
    monkeypatch.setattr(json_repair, "loads", json.loads)
    assert parse_dict("{reasoning: ok, score: 7}") == {"reasoning": "ok", "score": [7]}  # fix_json: keys, [7]
    # fix_json wraps the value in more quotes; the reasoning fixer then escapes every inner one
    assert parse_dict('{"score": 4, "reasoning": "a "b" c"}') == {"score": [4], "reasoning": '"a "b" c"'}
    # fix_json also quotes "[4" of a two-score list, which no fixer undoes: the last resort reads the text between
    # the keys (outer quotes and escapes dropped) and the first two numbers after "score"
    assert parse_dict('{"reasoning": "a "b" c", "score": [4, 5]}') == {"reasoning": '"a "b" c"', "score": [4.0, 5.0]}

# -------------------------------------------------------------------------------------------------------- scores
def test_pass_scores_and_both_reductions_on_a_25_point_scale():
    one = pass_scores([20, 15], [25, 10], 25)  # divided by 2.5
    assert one == pytest.approx({"prompt_following": 8, "consistency": 6, "perceptual_quality": 4,
                                 "overall": math.sqrt(6 * 4)})  # min(SC) = 15 -> 6
    two = pass_scores([5, 25], [15, 20], 25)
    assert two == pytest.approx({"prompt_following": 2, "consistency": 10, "perceptual_quality": 6,
                                 "overall": math.sqrt(2 * 6)})
    last = reduce_passes([one, two], "average_last")
    assert last == pytest.approx({"prompt_following": 5, "consistency": 8, "perceptual_quality": 5,
                                  "overall": (math.sqrt(24) + math.sqrt(12)) / 2})
    first = reduce_passes([one, two], "average_first")
    # the official recomputation takes the mean prompt_following (5), not the mean min(SC) (4): sqrt(5 x 5)
    assert first == pytest.approx({**last, "overall": 5.0})
    assert reduce_passes([one], "average_first")["overall"] == pytest.approx(math.sqrt(8 * 4))
    with pytest.raises(ValueError, match="reduction must be one of"):
        reduce_passes([one], "median")


# ------------------------------------------------------------------------------------------------------- prompts
def test_prompts_are_assembled_as_the_official_init_does(tmp_path):
    path, sha = write_prompts(tmp_path)
    p = load_prompts(path, sha, FAKE_COMMIT, score_range=25)
    sc_rule = "\nTwo scores from 0 to 25: success (25 = perfect), then overediting.\nINSTRUCTION=<instruction>\n"
    assert p.sc == "\n".join([CONTEXT, EDIT_RULE, sc_rule])
    assert p.pq == "\n".join([CONTEXT, "RULES: two scores from 0 to 25: naturalness, then artifacts.\n"])
    assert p.sc_for("Make it 10 times redder").endswith("INSTRUCTION=Make it 10 times redder\n")  # after the swap
    assert "10 of them" in p.sc and "10 of them" in p.pq  # the context keeps its "10"
    ten = load_prompts(path, sha, FAKE_COMMIT, score_range=10)
    assert ten.sc == "\n".join([CONTEXT, EDIT_RULE, SC_RULE])


def test_prompt_file_is_refused_when_its_checksum_differs_or_a_part_is_missing(tmp_path):
    path, sha = write_prompts(tmp_path)
    with pytest.raises(ProtocolError, match="sha256 .* expected"):
        load_prompts(path, "0" * 64, FAKE_COMMIT)
    with pytest.raises(ProtocolError, match="make data NAME=editscore_judge"):
        load_prompts(tmp_path / "nope.txt", sha, FAKE_COMMIT)
    with pytest.raises(ProtocolError, match="40-hex commit of VectorSpaceLab/EditScore"):
        load_prompts(path, sha, "main")
    short, short_sha = write_prompts(tmp_path, TEST_PROMPTS.replace("_prompts_0shot_rule_PQ", "_other"))
    with pytest.raises(ProtocolError, match="no string assignment of _prompts_0shot_rule_PQ"):
        load_prompts(short, short_sha, FAKE_COMMIT)


def test_the_manifest_fetches_the_prompt_file_the_config_pins():
    from benchmark.commands.run import compose
    from benchmark.io.download import load_manifest

    cfg = compose(["metrics=editscore"])[0].metrics.editscore
    manifest = load_manifest("editscore_judge")
    (entry,) = manifest.files
    assert entry.name == Path(cfg.prompts_file).name == "vie_prompts.txt" and not manifest.build
    assert Path(cfg.prompts_file).parent == ROOT / "datasets" / "editscore_judge" / "downloads"
    assert entry.sha256 == cfg.prompts_sha256 and entry.size == 2524
    assert entry.url == ("https://raw.githubusercontent.com/VectorSpaceLab/EditScore/"
                         f"{cfg.prompts_commit}/editscore/vie_prompts.py")
    assert (cfg.score_range, cfg.num_pass, cfg.reduction, cfg.seed) == (25, 1, "average_last", 42)
    b = cfg.backbone
    assert (b.temperature, b.top_p, b.top_k, b.max_new_tokens, b.dtype) == (0.7, 0.9, 20, 512, "bfloat16")
    assert (b.adapter_id, b.adapter_revision) == ("EditScore/EditScore-7B", "dcce052accfc75f2d48279c889a71755ecdf737b")


def test_protocol_settings_and_backbone_enter_the_signature():
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from benchmark.commands.run import compose
    from benchmark.plan.config import metric_signature

    sigs = set()
    for extra in ([], ["metrics.editscore.num_pass=4"], ["metrics.editscore.reduction=average_first"],
                  ["metrics.editscore.seed=7"], ["metrics.editscore.score_range=10"],
                  ["metrics.editscore.backbone.temperature=1.0"], [f"metrics.editscore.prompts_commit={FAKE_COMMIT}"]):
        cfg, _ = compose(["metrics=editscore", "profile=tiny", *extra])
        suite = instantiate(cfg.metrics.editscore)
        sigs.add(metric_signature(OmegaConf.to_container(cfg.metrics, resolve=True), {"editscore": suite.info}))
        assert "json_repair=" in suite.protocol
    assert len(sigs) == 7
    assert suite.components()["judge"] == "Qwen/Qwen2.5-VL-7B-Instruct+EditScore/EditScore-7B-tiny"


def test_weights_lists_the_base_and_the_adapter_and_finds_a_cached_adapter(tmp_path, monkeypatch):
    from benchmark.commands.run import compose
    from benchmark.plan import weights

    cfg, _ = compose(["editor=identity", "metrics=editscore"])
    cks = [c for c in weights.resolve(read_plan(cfg), "identity") if c.component.startswith("metrics")]
    assert [(c.source, c.revision) for c in cks] == [
        ("Qwen/Qwen2.5-VL-7B-Instruct", "cc594898137f460bfe9f0759e9844b3ce807cfb5"),
        ("EditScore/EditScore-7B", "dcce052accfc75f2d48279c889a71755ecdf737b")]
    monkeypatch.setattr(weights, "hf_cache_dir", lambda: tmp_path)
    snap = tmp_path / "models--EditScore--EditScore-7B" / "snapshots" / cks[1].revision
    snap.mkdir(parents=True)
    (snap / "adapter_config.json").write_text("{}")
    assert cks[1].location() is None  # no weights file yet
    (snap / "adapter_model.safetensors").write_bytes(b"x")
    assert cks[1].location() == snap  # an adapter folder has adapter_config.json, not config.json


# ------------------------------------------------------------------------------------------------- tiny backbone
def _pair():
    from PIL import Image

    return Image.new("RGB", (40, 30), (200, 30, 30)), Image.new("RGB", (30, 40), (30, 30, 200))


def test_tiny_judge_loads_the_lora_through_peft_and_merges_it(monkeypatch):
    import peft

    from benchmark.models.editscore import ADAPTER_ID, load_editscore
    from benchmark.models.vlm import VLM_ID, load_vlm

    calls = []
    real = peft.PeftModel.from_pretrained

    def spy(model, location, **kwargs):
        calls.append((type(model).__name__, location))
        return real(model, location, **kwargs)

    monkeypatch.setattr(peft.PeftModel, "from_pretrained", spy)
    load_editscore.cache_clear()
    try:
        merged, _, name = load_editscore("tiny", dtype="float32")
    finally:
        load_editscore.cache_clear()  # no cached model built under the spy
    assert name == f"{VLM_ID}+{ADAPTER_ID}-tiny"
    (cls, location), = calls
    assert cls == "Qwen2_5_VLForConditionalGeneration" and (Path(location) / "adapter_config.json").is_file()
    assert type(merged).__name__ == "Qwen2_5_VLForConditionalGeneration"
    assert not any("lora" in n for n, _ in merged.named_modules())  # merged and unloaded
    base = load_vlm("tiny", VLM_ID, None, "float32", "cpu")[0]
    key = "model.language_model.layers.0.self_attn.q_proj.weight"
    b, m = dict(base.named_parameters())[key], dict(merged.named_parameters())[key]
    assert b.shape == m.shape and (b - m).abs().max() > 1e-4  # the LoRA changed the weights
    untouched = "model.language_model.embed_tokens.weight"  # not a LoRA target: as in the base
    assert (dict(base.named_parameters())[untouched] == dict(merged.named_parameters())[untouched]).all()


def test_tiny_judge_replies_are_seeded_per_request_and_do_not_depend_on_neighbours():
    from benchmark.models.editscore import EditScoreJudge

    red, blue = _pair()
    judge = EditScoreJudge(weights="tiny", dtype="float32", device="cpu", max_new_tokens=8)
    sc, pq = ([red, blue], "Rate the edit: make it blue"), ([blue], "Rate the image")
    both = judge.generate([sc, pq], seeds=[42, 43])
    assert len(both) == 2 and all(isinstance(r, str) and r for r in both)
    assert judge.generate([sc, pq], seeds=[42, 43]) == both  # a rerun: the same strings
    assert judge.generate([pq], seeds=[43]) == both[1:]  # alone, or after another request: the same reply
    assert judge.generate([pq, sc], seeds=[43, 42]) == both[::-1]
    samples = {judge.generate([pq], seeds=[s])[0] for s in range(42, 46)}
    assert len(samples) > 1  # sampled, not greedy: the seed matters
    assert judge.generate([pq]) == judge.generate([pq], seeds=[42])  # default: the configured seed
    assert "temperature=0.7,top_p=0.9,top_k=20,max_new_tokens=8" in judge.identity and "|peft=" in judge.identity


def test_tiny_judge_runs_in_bf16_on_cpu():
    from benchmark.models.editscore import EditScoreJudge

    red, blue = _pair()
    judge = EditScoreJudge(weights="tiny", dtype="bfloat16", device="cpu", max_new_tokens=6)
    first = judge.generate([([red, blue], "Rate it"), ([blue], "Rate it")], seeds=[1, 2])
    assert len(first) == 2 and all(isinstance(r, str) for r in first)
    assert judge.generate([([red, blue], "Rate it"), ([blue], "Rate it")], seeds=[1, 2]) == first


def test_chat_text_labels_each_image_as_the_official_helper():
    from benchmark.models.editscore import chat_text

    vis = "<|vision_start|><|image_pad|><|vision_end|>"
    assert chat_text("P", 2) == ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
                                 f"<img1>: {vis}<img2>: {vis}P<|im_end|>\n<|im_start|>assistant\n")
    assert chat_text("Q", 1).count("<img") == 1 and f"<img1>: {vis}Q<|im_end|>" in chat_text("Q", 1)


@pytest.mark.weights
def test_pretrained_editscore_judges_a_pair_with_the_fetched_prompts():
    from hydra.utils import instantiate
    from PIL import Image

    from benchmark.commands.run import compose
    from benchmark.io.types import Query

    cfg, _ = compose(["metrics=editscore", "profile=pretrained"])
    if not Path(cfg.metrics.editscore.prompts_file).is_file():
        pytest.skip("the prompt file is not fetched: make data NAME=editscore_judge")
    suite = instantiate(cfg.metrics.editscore)
    src = Image.new("RGB", (448, 336), (200, 30, 30))
    q = Query(id="w1", image="x.png", instruction="Make the whole image blue.", edit_type="free_form")
    good, bad = suite.score_images([(q, src, Image.new("RGB", (448, 336), (30, 30, 200))), (q, src, src.copy())])
    assert good["status"] == bad["status"] == "ok", (good["reason"], good["es_sc_replies"])
    assert 0 <= bad["ES_prompt_following"] < good["ES_prompt_following"] <= 10  # the unedited image follows less


# ------------------------------------------------------------------------------------------------------ pipeline
SC = {  # instruction -> the SC reply of pass 0 and pass 1
    "Add a pizza to the left of the bottle.": ['{"reasoning": "a", "score": [20, 15]}', "[5, 25]"],
    "Remove the sports ball.": ["I cannot judge this.", '{"reasoning": "b", "score": [10, 10]}'],  # 2 failure rows
    "*": ['{"reasoning": "ok", "score": [25, 25]}', '{"reasoning": "ok", "score": [25, 25]}'],
}
PQ = ['{"reasoning": "p", "score": [25, 10]}', '{"reasoning": "q", "score": [15, 20]}']  # per pass


def _run(tmp_path: Path, *extra: str, backbone: dict | None = None):
    from benchmark.commands.run import compose, run_pipeline

    prompts, sha = write_prompts(tmp_path)
    cfg, choices = compose(["editor=identity", "queryset=demo_mini", "metrics=editscore", "profile=tiny",
                            f"paths.results={tmp_path / 'results'}", "progress=false",
                            "aggregate.bootstrap_resamples=50", "max_failed_fraction=1.0",
                            f"metrics.editscore.prompts_file={prompts}", f"metrics.editscore.prompts_sha256={sha}",
                            f"metrics.editscore.prompts_commit={FAKE_COMMIT}", *extra])
    if backbone is not None:
        with open_dict(cfg):
            cfg.metrics.editscore.backbone = backbone
    return run_pipeline(cfg, choices["editor"])


def test_scripted_two_pass_run_gives_the_hand_worked_scores_and_failure_rows_keep_their_replies(
        tmp_path, restore_logging):
    from benchmark.stages.score import read_scores

    summary = _run(tmp_path, "metrics.editscore.num_pass=2",
                   backbone={"_target_": "scripted_judge.SeededScript", "sc": SC, "pq": PQ})
    assert summary["score"].computed == 14 and summary["score"].failed == 2
    rows = read_scores(Path(summary["run_dir"]), summary["metric_sig"]).set_index("query_id")
    add = rows.loc["demo000-obj_add"]
    assert (add["ES_prompt_following"], add["ES_consistency"], add["ES_perceptual_quality"]) == pytest.approx(
        (5, 8, 5))
    assert add["ES_overall"] == pytest.approx((math.sqrt(24) + math.sqrt(12)) / 2)
    assert json.loads(add["es_sc_scores"]) == [[20, 15], [5, 25]] and json.loads(add["es_sc_replies"]) == SC[
        "Add a pizza to the left of the bottle."]
    failed = rows.loc["demo001-obj_remove"]
    assert failed["status"] == "failed" and math.isnan(failed["ES_overall"])
    assert "pass 0: the SC reply" in failed["reason"] and "pass 1" not in failed["reason"]
    assert json.loads(failed["es_sc_replies"]) == SC["Remove the sports ball."]
    assert json.loads(failed["es_pq_replies"]) == PQ
    other = (math.sqrt(10 * 4) + math.sqrt(10 * 6)) / 2  # SC 25, 25 -> 10; PQ min 10 -> 4, then 15 -> 6
    assert rows.loc["demo001-bg_chg", "ES_overall"] == pytest.approx(other)
    board = pd.read_csv(tmp_path / "results" / "leaderboard.csv").iloc[0]
    assert (board["n_ok"], board["n_failed"]) == (12, 2)
    assert board["ES_overall"] == pytest.approx(((math.sqrt(24) + math.sqrt(12)) / 2 + 11 * other) / 12, abs=1e-5)
    assert "seeded-script@test" in board["components"] and "num_pass=2" in board["components"]


def test_score_images_resizes_the_edit_and_seeds_each_pass(tmp_path):
    from PIL import Image
    from scripted_judge import SeededScript

    from benchmark.io.types import Query
    from benchmark.metrics.editscore.suite import EditScoreSuite

    prompts, sha = write_prompts(tmp_path)
    backbone = SeededScript(sc=SC, pq=PQ, base_seed=7)
    suite = EditScoreSuite(backbone=backbone, prompts_file=str(prompts), prompts_commit=FAKE_COMMIT,
                           prompts_sha256=sha, num_pass=2, reduction="average_first", seed=7, device="cpu")
    q = Query(id="p1", image="x.png", instruction="Add a pizza to the left of the bottle.", edit_type="free_form")
    src, edit = Image.new("RGB", (64, 48), (10, 10, 10)), Image.new("RGBA", (50, 50), (1, 2, 3, 4))
    (row,) = suite.score_images([(q, src, edit)])
    assert row["status"] == "ok" and row["ES_overall"] == pytest.approx(5.0)  # average_first: sqrt(5 x 5)
    assert backbone.seen == [(7, [(64, 48), (64, 48)]), (7, [(64, 48)]), (8, [(64, 48), (64, 48)]), (8, [(64, 48)])]
    assert suite.judge_column == "ES_overall" and set(suite.dimension_columns) == {
        "prompt_following", "consistency", "overall"} and set(suite.dimension_columns.values()) <= set(suite.columns)
    assert suite.applies_to(q, "") and not suite.applies_to(Query(id="p2", image="x.png", instruction=" ", edit_type="free_form"), "")


def test_tiny_judge_replies_that_do_not_parse_are_failure_rows_with_the_replies(tmp_path, restore_logging):
    from benchmark.io.errors import TooManyFailures
    from benchmark.stages.score import read_scores

    # random weights write bytes, not scores: every query fails, which fails the run whatever max_failed_fraction
    with pytest.raises(TooManyFailures, match="as EditScore's parser reads it.*every query failed"):
        _run(tmp_path, "limit=2", "metrics.editscore.backbone.max_new_tokens=12",
             "metrics.editscore.backbone.dtype=float32")
    run_dir = next((tmp_path / "results" / "runs").glob("demo_mini-*/identity-*"))
    rows = read_scores(run_dir, next((run_dir / "scores").iterdir()).name)
    assert len(rows) == 2 and (rows["status"] == "failed").all()
    for _, row in rows.iterrows():
        sc, pq = json.loads(row["es_sc_replies"]), json.loads(row["es_pq_replies"])
        assert len(sc) == len(pq) == 1 and sc[0] and isinstance(pq[0], str)


def test_a_missing_or_altered_prompt_file_stops_the_run_before_the_first_edit(tmp_path, capsys, restore_logging):
    from benchmark.commands.run import compose, run_and_report

    prompts, sha = write_prompts(tmp_path)
    for name, path, digest, why in (("gone", tmp_path / "nowhere.txt", sha, "is missing: fetch it with `make data "
                                     "NAME=editscore_judge`"), ("altered", prompts, "0" * 64, "not the pinned protocol")):
        results = tmp_path / name
        cfg, choices = compose(["editor=identity", "queryset=demo_mini", "metrics=editscore", "profile=tiny",
                                f"paths.results={results}", "progress=false", f"metrics.editscore.prompts_file={path}",
                                f"metrics.editscore.prompts_sha256={digest}",
                                f"metrics.editscore.prompts_commit={FAKE_COMMIT}"])
        assert run_and_report(cfg, choices["editor"]) == 1
        err = capsys.readouterr().err
        assert "preflight: metrics.editscore:" in err and why in err and "Traceback" not in err
        assert not list(results.rglob("*.png"))  # nothing was edited
