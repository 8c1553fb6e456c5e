"""KRIS-Bench (queryset=kris, metrics=kris; docs/querysets.md, docs/judge.md): the importer on a release-format fixture
(the several-input tasks skipped and counted, hostile entries refused), the official scripts' parsers on hand-made
replies (well-formed, malformed, out of range, refusals), summarize.py's normalised means on hand-worked numbers, the
prompts the suite sends against what the official scripts build from the (stand-in) prompt file, and runs through
`editmeter run` and `editmeter score` on the fixture with scripted replies against the same hand-worked figures."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pandas as pd
import pytest

from benchmark.metrics.kris.protocol import (
    ProtocolError,
    ReplyError,
    load_prompts,
    normalize,
    official_means,
    parse_reply,
    summary_keys,
)
from benchmark.querysets.kris import KrisFormatError, build

ROOT = Path(__file__).resolve().parents[1]
FAKE_COMMIT = "feedface" * 5
# our own wording in the release file's form (module-level string assignments, str.format templates with {{ }} for
# literal braces); never the authors' text. Each names its request (KIND=) for the scripted judge.
TEST_PROMPTS = '''# stand-in prompts
prompt_consist = """Judge what stayed the same.
KIND=VC
INSTRUCTION={instruct}
Answer as {{"reasoning": "...", "consistency_score": n}}
"""

prompt_quality = """Judge how the picture looks.
KIND=VQ
Answer as {{"reasoning": "...", "quality_score": n,}}
"""

prompt_instruction_following = """Judge whether the edit did what was asked.
KIND=IF
INSTRUCTION={instruct}
Answer as {{"instruction_score": n, "reasoning": "..."}}
"""

prompt_dual_evaluation = """Judge the edit and the knowledge it shows.
KIND=DUAL
INSTRUCTION={instruct}
EXPLANATION={explanation}
Answer as {{"instruction_score": n, "knowledge_score": n}}
"""

prompt_abnormal_instruction_following = """KIND=ABNORMAL
INSTRUCTION={instruct}
EXPLANATION={explanation}
"""

prompt_view_instruction_following = """Judge the new viewpoint against the reference.
KIND=VIEW
INSTRUCTION={instruct}
"""

prompt_consist_temporal = """KIND=TEMPORAL {N} {instruct}"""
def not_run(): raise SystemExit("never executed")
'''


def write_prompts(folder: Path, text: str = TEST_PROMPTS) -> tuple[Path, str]:
    path = folder / "kris_prompts.txt"
    path.write_text(text, encoding="utf-8")
    return path, hashlib.sha256(text.encode()).hexdigest()


# ------------------------------------------------------------------------------------------------------- parsing
# (task, request, reply, the official script's scores): metrics_common.py for count_change / viewpoint_change,
# metrics_knowledge.py for chemistry
@pytest.mark.parametrize(("task", "request_", "reply", "want"), [
    ("count_change", "VC", '{"reasoning": "ok", "consistency_score": 5}', {"K_VC": 5}),         # well-formed
    ("count_change", "VQ", 'R\n{\n"reasoning": "x",\n"quality_score": 4,\n}', {"K_VQ": 4}),     # the prompt's own
    # trailing comma: not JSON, so the regex steps; '"quality_score": 4' misses the prefix pattern (a quote before
    # the colon), and the first standalone digit 1-5 is 4
    ("count_change", "VC", "Consistency score 3/5", {"K_VC": 3}),                                 # prefix, no colon
    ("count_change", "VC", "Consistency_score：4", {"K_VC": 4}),                                  # full-width colon
    ("count_change", "IF", "I rate it 2 out of 5.", {"K_IF": 2}),
    ("count_change", "IF", '{"instruction_score": "3", "reasoning": "r"}', {"K_IF": 3}),          # int("3")
    ("count_change", "IF", '{"instruction_score": 4.7}', {"K_IF": 4}),                            # int(4.7) truncates
    ("count_change", "IF", '{"instruction_score": NaN} but 5/5 overall', {"K_IF": 5}),            # int(nan) raises:
    # the regex fallback
    ("count_change", "VC", '{"consistency_score": null, "reasoning": "2 changes"}', {"K_VC": 2}),  # null: fallback,
    # the standalone digit in the reasoning
    ("count_change", "VC", '{"reasoning": {"a": 1}, "consistency_score": 2}', {"K_VC": 1}),       # nested braces:
    # no object matches; the first standalone digit is the reasoning's 1
    ("count_change", "VQ", "5", {"K_VQ": 5}),
    ("viewpoint_change", "IF", '{"instruction_score": 1, "reasoning": "wrong view"}', {"K_IF": 1}),
    ("chemistry", "VC", "Consistency score: 4", {"K_VC": 4}),                                     # colon needed
    ("chemistry", "VQ", "quality: 5/5", {"K_VQ": 5}),
    ("chemistry", "VC", "Consistency score 3 then 2", {"K_VC": 3}),                               # no colon: the
    # prefix pattern misses, the first standalone digit is 3
    ("chemistry", "IF", '{"instruction_score": 2, "knowledge_score": 1}', {"K_IF": 2, "K_KP": 1}),
    ("chemistry", "IF", "Instruction_Score: 5\nknowledge score：3", {"K_IF": 5, "K_KP": 3}),  # the fallback
])
def test_replies_parse_as_the_official_scripts_read_them(task, request_, reply, want):
    assert parse_reply(task, request_, reply) == want


# replies the official scripts read as None (the dimension dropped from their means) or keep out of range / as
# true: every one a ReplyError here, whose message says what the official script does
@pytest.mark.parametrize(("task", "request_", "reply", "why"), [
    ("count_change", "VQ", "I'm sorry, I can't help with that.", "no quality_score.*stores None"),  # a refusal
    ("count_change", "VC", "", "empty.*stores None"),                 # the official reply after three failed calls
    ("count_change", "IF", "Score: 8/10", "no instruction_score"),   # 8 and 10 are no digit 1-5
    ("count_change", "VC", '{"consistency_score": 7}', r"outside 1..5 \(the official script keeps it: normalised to "
                                                       r"150\)"),
    ("count_change", "VC", '{"consistency_score": 0}', "outside 1..5"),
    ("count_change", "VC", '{"consistency_score": -1}', "outside 1..5"),
    ("count_change", "IF", '{"instruction_score": true}', "true, not a number .*reads it as 1"),
    ("chemistry", "VC", '{"consistency_score": null, "reasoning": "2 changes"}', "no consistency_score"),  # null:
    # metrics_knowledge.py returns None without the fallback metrics_common.py takes
    ("chemistry", "IF", '{"instruction_score": 4}', "no knowledge_score"),
    ("chemistry", "IF", "instruction score 4, knowledge score 3", "no instruction_score"),  # colons needed
    # the dual prompt's own layout (quoted keys, unquoted reasoning) is no JSON, and its '"instruction_score": 5'
    # has a quote before the colon: the official fallback finds neither score
    ("chemistry", "IF", '{\n"instruction_score": 5,\n"instruction_reasoning": 1. fine\n"knowledge_score": 3\n}',
     "no instruction_score"),
    ("chemistry", "IF", '{"instruction_score": 4, "knowledge_score": 9}', "knowledge_score 9 is outside 1..5"),
])
def test_replies_without_a_usable_score_are_errors_not_scores(task, request_, reply, why):
    with pytest.raises(ReplyError, match=why):
        parse_reply(task, request_, reply)


# --------------------------------------------------------------------------------------------------- aggregation
# the fixture's scored edits (task, VC, VQ, IF, KP) as the scripted judge scores them below
SCORED = [("count_change", 5, 4, 4, None), ("count_change", 3, 5, 2, None), ("anomaly_correction", 4, 2, 3, None),
          ("viewpoint_change", 5, 3, 1, None), ("chemistry", 4, 4, 5, 3), ("humanities", 3, 5, 2, 1),
          ("multi-instruction_execution", 4, 5, 4, None)]
# normalised (s - 1) x 25. attribute: VC [100, 50, 75], VQ [75, 100, 25], IF [75, 25, 50], AVG 575 / 9; spatial:
# 100, 50, 0, AVG 150 / 3; social: 50, 100, 25, KP 0, AVG 175 / 4; natural: 75, 75, 100, KP 50, AVG 300 / 4;
# logical: nothing; decomposition: 75, 100, 75, AVG 250 / 3; factual (575 + 150) / 12, conceptual (175 + 300) / 8,
# procedural 250 / 3; overall (575 + 150 + 175 + 300 + 250) / 23
WANT = {"KRIS_attribute_VC": 75.0, "KRIS_attribute_VQ": 200 / 3, "KRIS_attribute_IF": 50.0,
        "KRIS_attribute_AVG": 575 / 9, "KRIS_spatial_VC": 100.0, "KRIS_spatial_VQ": 50.0, "KRIS_spatial_IF": 0.0,
        "KRIS_spatial_AVG": 50.0, "KRIS_social_VC": 50.0, "KRIS_social_VQ": 100.0, "KRIS_social_IF": 25.0,
        "KRIS_social_KP": 0.0, "KRIS_social_AVG": 43.75, "KRIS_natural_VC": 75.0, "KRIS_natural_VQ": 75.0,
        "KRIS_natural_IF": 100.0, "KRIS_natural_KP": 50.0, "KRIS_natural_AVG": 75.0, "KRIS_decomposition_VC": 75.0,
        "KRIS_decomposition_VQ": 100.0, "KRIS_decomposition_IF": 75.0, "KRIS_decomposition_AVG": 250 / 3,
        "KRIS_factual_AVG": 725 / 12, "KRIS_conceptual_AVG": 59.375, "KRIS_procedural_AVG": 250 / 3,
        "KRIS_overall_AVG": 1450 / 23}
EMPTY = {"KRIS_logical_VC", "KRIS_logical_VQ", "KRIS_logical_IF", "KRIS_logical_KP", "KRIS_logical_AVG"}


def _frame(scored=SCORED) -> pd.DataFrame:
    return pd.DataFrame([{"edit_type": "kris_" + t.replace("-", "_"), "K_VC": vc, "K_VQ": vq, "K_IF": i,
                          "K_KP": math.nan if kp is None else kp} for t, vc, vq, i, kp in scored])


def test_summarize_normalises_then_pools_per_category_meta_category_and_overall():
    got = official_means(_frame())
    assert set(got) == set(WANT) | EMPTY == set(summary_keys())
    assert {k: got[k] for k in WANT} == pytest.approx(WANT, abs=1e-12)
    assert all(math.isnan(got[k]) for k in EMPTY)
    assert [normalize(s) for s in (1, 2, 3, 4, 5)] == [0, 25, 50, 75, 100]
    # pooled, not a mean of task means: a second count_change edit moves the attribute means by its weight
    more = official_means(_frame([*SCORED, ("count_change", 1, 1, 1, None)]))
    assert more["KRIS_attribute_VC"] == pytest.approx(225 / 4) and more["KRIS_attribute_AVG"] == pytest.approx(575 / 12)


def test_only_the_groups_without_an_unsupported_task_claim_the_papers_figure():
    """summarize.py (Bagel a53eea0) counts multi-element_composition in Instruction Decomposition and Temporal
    Prediction in Factual Knowledge: those groups' columns, Procedural and Overall say they are not comparable with
    the paper's; the groups that hold only supported tasks do not."""
    from benchmark.metrics.kris.suite import SUMMARY_INFO

    marked = {k.split("_")[1] for k, (_, desc) in SUMMARY_INFO.items() if "NOT comparable" in desc}
    assert marked == {"decomposition", "factual", "procedural", "overall"}
    assert "multi-element_composition" in SUMMARY_INFO["KRIS_decomposition_IF"][1]
    assert all("NOT comparable" in SUMMARY_INFO[f"KRIS_decomposition_{d}"][1] for d in ("VC", "VQ", "IF", "AVG"))


# ------------------------------------------------------------------------------------------------------ prompts
def test_prompt_file_is_read_without_running_it_and_refused_when_it_is_not_the_pinned_one(tmp_path):
    path, sha = write_prompts(tmp_path)
    prompts = load_prompts(path, sha, FAKE_COMMIT)
    assert prompts.quality.count("{{") == 1  # sent unformatted, as the official scripts send prompt_quality
    with pytest.raises(ProtocolError, match="sha256 .* expected 0{64}.*make data NAME=kris") as err:
        load_prompts(path, "0" * 64, FAKE_COMMIT)
    # both digests and both fixes: fetch the file again, or correct the configured checksum to the file's
    assert f"sha256 {sha} (the file), expected {'0' * 64} (the configured metrics.kris.prompts_sha256" in str(err.value)
    assert f"set metrics.kris.prompts_sha256={sha}" in str(err.value) and "delete it and fetch it again" in str(err.value)
    with pytest.raises(ProtocolError, match="prompts_sha256 is not set.*make data NAME=kris"):
        load_prompts(path, None, FAKE_COMMIT)
    short, short_sha = write_prompts(tmp_path, TEST_PROMPTS.replace("prompt_dual_evaluation =", "other ="))
    with pytest.raises(ProtocolError, match="no string assignment of prompt_dual_evaluation"):
        load_prompts(short, short_sha, FAKE_COMMIT)
    odd, odd_sha = write_prompts(tmp_path, TEST_PROMPTS.replace("KIND=VC", "KIND=VC {frame}"))
    with pytest.raises(ProtocolError, match="prompt_consist does not format"):
        load_prompts(odd, odd_sha, FAKE_COMMIT)


def test_the_manifest_fetches_the_file_the_config_pins():
    from benchmark.commands.run import compose
    from benchmark.io.download import load_manifest

    cfg = compose(["metrics=kris"])[0].metrics.kris
    files = {f.name: f for f in load_manifest("kris").files}
    entry = files[Path(cfg.prompts_file).name]
    assert Path(cfg.prompts_file).parent == ROOT / "datasets" / "kris" / "downloads"
    assert entry.url == (f"https://raw.githubusercontent.com/mercurystraw/Kris_Bench/{cfg.prompts_commit}/"
                         "utils/prompts.py")
    # the checksum is not recorded yet: both say so, and a run without one is refused with the fix
    assert entry.sha256 is None and cfg.prompts_sha256 is None and files["KRIS_Bench"].url is None
    assert cfg.backbone._target_ == "benchmark.models.vlm.TextJudge"


# ----------------------------------------------------------------------------------------------------- importer
# task -> {key: (ori_img, gt_img, ins_en, explain_en)}; one colour per image file
RELEASE = {
    "count_change": {"1": ("1.jpg", "", "Add two apples", ""), "2": ("2.png", "", "Remove one cup", "")},
    "anomaly_correction": {"1": ("1.png", "", "Correct what is wrong", "A clock has twelve hours")},
    "viewpoint_change": {"1": ("1.jpg", "1_gt.jpg", "Draw the top view", "")},
    "chemistry": {"1": ("1.jpg", "", "Drop sodium in water", "It fizzes"),
                  "2": ("2.jpg", "", "Burn the magnesium", "A white flame")},
    "humanities": {"1": ("1.jpg", "", "Dress him for a Roman feast", "A toga")},
    "multi-instruction_execution": {"1": ("1.jpg", "", "Add a hat, then make it red", ""),
                                    "2": ("2.jpg", "", "Remove the car and add a tree", "")},
    "multi-element_composition": {"1": (["1-1.jpg", "1-2.jpg"], "", "Put the dog in the barn", "")},
    "temporal_prediction": {"1": (["1-2.jpg", "1-3.jpg", "1-4.jpg"], "1-1.jpg", "Predict frame 1", "")},
}
COLOURS = {("count_change", "1.jpg"): (200, 40, 40), ("count_change", "2.png"): (40, 200, 40),
           ("anomaly_correction", "1.png"): (40, 40, 200), ("viewpoint_change", "1.jpg"): (200, 200, 40),
           ("viewpoint_change", "1_gt.jpg"): (10, 10, 10), ("chemistry", "1.jpg"): (200, 40, 200),
           ("chemistry", "2.jpg"): (40, 200, 200), ("humanities", "1.jpg"): (120, 120, 120),
           ("multi-instruction_execution", "1.jpg"): (240, 240, 240),
           ("multi-instruction_execution", "2.jpg"): (90, 160, 30)}


def release(tmp: Path, tasks: dict = RELEASE) -> Path:
    """KRIS_Bench/<task>/annotation.json and the images, in the release's format."""
    from PIL import Image

    root = tmp / "KRIS_Bench"
    for task, entries in tasks.items():
        folder = root / task
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "annotation.json").write_text(json.dumps(
            {k: {"ori_img": o, "gt_img": g, "ins_en": i, "explain_en": e} for k, (o, g, i, e) in entries.items()},
            indent=2, ensure_ascii=False), encoding="utf-8")
        for _k, (ori, gt, _i, _e) in entries.items():
            for name in ([*ori] if isinstance(ori, list) else [ori]) + ([gt] if gt else []):
                if not (folder / name).exists():
                    Image.new("RGB", (32, 24), COLOURS.get((task, name), (7, 7, 7))).save(folder / name, quality=95)
    return root


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("kris")
    meta = build(release(tmp), tmp / "kris")
    return tmp / "kris", meta


def test_single_source_entries_become_queries_and_several_input_tasks_are_skipped_and_counted(built):
    from benchmark.querysets.io import load_queryset

    root, meta = built
    qs = load_queryset(root, name="kris")
    by_id = {q.id: q for q in qs.queries}
    assert len(by_id) == 9 and "kris-multi-element_composition-1" not in by_id
    chem = by_id["kris-chemistry-1"]
    assert (chem.edit_type, chem.instruction, chem.explanation) == ("kris_chemistry", "Drop sodium in water",
                                                                    "It fizzes")
    assert by_id["kris-count_change-1"].explanation is None and by_id["kris-count_change-1"].target_image is None
    view = by_id["kris-viewpoint_change-1"]
    assert qs.path(view.target_image).is_file() and view.target_image != view.image
    assert by_id["kris-multi-instruction_execution-2"].edit_type == "kris_multi_instruction_execution"
    assert meta["counts"]["skipped"] == {"multi-element_composition": 1, "temporal_prediction": 1}
    assert "one source image" in meta["counts"]["skipped_reason"]["temporal_prediction"]
    assert meta["counts"]["read"] == 11 and meta["full_release"] is False
    assert "NOT the full release" in meta["description"] and "skipped multi-element_composition (1)" in meta[
        "description"]


def _bad(tmp: Path, task: str, key: str, entry: dict | str) -> Path:
    root = release(tmp)
    path = root / task / "annotation.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data[key] = entry
    path.write_text(json.dumps(data), encoding="utf-8")
    return root


@pytest.mark.parametrize(("task", "key", "entry", "why"), [
    ("chemistry", "x3", {"ori_img": "1.jpg", "ins_en": "Paint it"}, "keys are decimal numbers"),
    ("chemistry", "3", {"ori_img": "../count_change/1.jpg", "ins_en": "Paint it"}, "must not contain '..'"),
    ("chemistry", "3", {"ori_img": "/etc/passwd", "ins_en": "Paint it"}, "must be relative"),
    ("chemistry", "3", {"ori_img": "missing.jpg", "ins_en": "Paint it"}, "missing.jpg not found"),
    ("chemistry", "3", {"ori_img": "1.jpg", "ins_en": "  "}, "ins_en must be a non-empty string"),
    ("chemistry", "3", {"ori_img": ["1.jpg", "2.jpg"], "ins_en": "Mix them"}, "ori_img must be one file name"),
    ("chemistry", "3", {"ori_img": "1.jpg"}, "must be an object with 'ori_img' and 'ins_en'"),
    ("viewpoint_change", "2", {"ori_img": "1.jpg", "gt_img": 5, "ins_en": "Draw it"}, "gt_img must be a string"),
])
def test_bad_entries_are_refused_with_their_task_and_key(tmp_path, task, key, entry, why):
    root = _bad(tmp_path, task, key, entry)
    with pytest.raises(KrisFormatError, match=why):
        build(root, tmp_path / "out")
    assert not (tmp_path / "out" / "queries.jsonl").exists()


def test_unreadable_images_links_out_of_the_release_and_unknown_folders_are_refused(tmp_path):
    root = release(tmp_path / "a")
    (root / "chemistry" / "1.jpg").write_bytes(b"not an image")
    with pytest.raises(KrisFormatError, match="image 1.jpg is not usable"):
        build(root, tmp_path / "out")
    root = release(tmp_path / "b")
    outside = tmp_path / "secret.jpg"
    outside.write_bytes((root / "chemistry" / "2.jpg").read_bytes())
    (root / "chemistry" / "2.jpg").unlink()
    (root / "chemistry" / "2.jpg").symlink_to(outside)
    with pytest.raises(KrisFormatError, match="leads outside the task folder"):
        build(root, tmp_path / "out")
    root = release(tmp_path / "c")
    (root / "cooking").mkdir()
    (root / "cooking" / "annotation.json").write_text("{}", encoding="utf-8")
    with pytest.raises(KrisFormatError, match=r"\['cooking'\] hold an annotation.json but are not KRIS-Bench tasks"):
        build(root, tmp_path / "out")
    with pytest.raises(KrisFormatError, match="not a folder"):
        build(tmp_path / "nowhere", tmp_path / "out")


# ------------------------------------------------------------------------------------------------------ pipeline
def _q(task: str, key: str) -> str:
    return f"{RELEASE[task][key][2]}"


def _c(task: str, name: str) -> str:
    return ",".join(map(str, COLOURS[(task, name)]))


REPLIES = {  # "<request>:<instruction>" or "VQ:<colour>" -> the reply; the scores of SCORED in the comments
    f"VC:{_q('count_change', '1')}": '{"reasoning": "ok", "consistency_score": 5}',      # 5
    f"IF:{_q('count_change', '1')}": "instruction_score: 4",                             # 4
    f"VQ:{_c('count_change', '1.jpg')}": '{"reasoning": "x", "quality_score": 4,}',       # 4 (standalone digit)
    f"VC:{_q('count_change', '2')}": "Consistency score 3/5",                            # 3
    f"IF:{_q('count_change', '2')}": "I rate it 2 out of 5.",                            # 2
    f"VQ:{_c('count_change', '2.png')}": "5",                                            # 5
    f"VC:{_q('anomaly_correction', '1')}": '{"consistency_score": 4}',                   # 4
    f"IF:{_q('anomaly_correction', '1')}": '{"instruction_score": "3", "reasoning": "r"}',  # 3 (the plain prompt)
    f"VQ:{_c('anomaly_correction', '1.png')}": '{"quality_score": 2}',                   # 2
    f"VC:{_q('viewpoint_change', '1')}": "5/5",                                          # 5
    f"VIEW:{_q('viewpoint_change', '1')}": '{"instruction_score": 1, "reasoning": "no"}',  # 1
    f"VQ:{_c('viewpoint_change', '1.jpg')}": "quality score 3",                          # 3
    f"VC:{_q('chemistry', '1')}": '{"consistency_score": null, "reasoning": "2 changes"}',  # failure (knowledge)
    f"DUAL:{_q('chemistry', '1')}": '{"instruction_score": 4, "knowledge_score": 4}',
    f"VQ:{_c('chemistry', '1.jpg')}": '{"quality_score": 4}',
    f"VC:{_q('chemistry', '2')}": "Consistency score: 4",                                # 4
    f"DUAL:{_q('chemistry', '2')}": "Instruction_Score: 5\nknowledge score：3",         # 5, 3
    f"VQ:{_c('chemistry', '2.jpg')}": '{"quality_score": 4}',                            # 4
    f"VC:{_q('humanities', '1')}": '{"consistency_score": 3}',                           # 3
    f"DUAL:{_q('humanities', '1')}": '{"instruction_score": 2, "knowledge_score": 1}',   # 2, 1
    f"VQ:{_c('humanities', '1.jpg')}": "quality: 5/5",                                   # 5
    f"VC:{_q('multi-instruction_execution', '1')}": "Consistency_score：4",               # 4
    f"IF:{_q('multi-instruction_execution', '1')}": '{"instruction_score": 4.7}',        # 4
    f"VQ:{_c('multi-instruction_execution', '1.jpg')}": '{"quality_score": 5}',          # 5
    f"VC:{_q('multi-instruction_execution', '2')}": '{"consistency_score": 5}',
    f"IF:{_q('multi-instruction_execution', '2')}": '{"instruction_score": true}',       # failure: true
    f"VQ:{_c('multi-instruction_execution', '2.jpg')}": "I'm sorry, I can't help with that.",  # failure: refusal
}


def _run(root: Path, tmp_path: Path, *extra: str, backbone: dict | None = None):
    from omegaconf import open_dict

    from benchmark.commands.run import compose, run_pipeline

    prompts, sha = write_prompts(tmp_path)
    cfg, choices = compose(["editor=identity", "queryset=kris", f"queryset.root={root}", "metrics=kris",
                            "profile=tiny", f"paths.results={tmp_path / 'results'}", "progress=false",
                            "aggregate.bootstrap_resamples=50", "max_failed_fraction=1.0",
                            f"metrics.kris.prompts_file={prompts}", f"metrics.kris.prompts_sha256={sha}",
                            f"metrics.kris.prompts_commit={FAKE_COMMIT}", *extra])
    if backbone is not None:
        with open_dict(cfg):
            cfg.metrics.kris.backbone = backbone
    return run_pipeline(cfg, choices["editor"])


def _board(results: Path) -> pd.Series:
    return pd.read_csv(results / "leaderboard.csv").iloc[0]


def test_scripted_replies_give_the_hand_worked_kris_figures_and_failure_rows_keep_their_replies(
        built, tmp_path, restore_logging):
    from benchmark.metrics.kris.suite import TASK_OF
    from benchmark.stages.score import read_scores

    summary = _run(built[0], tmp_path, backbone={"_target_": "scripted_judge.MarkedReplies", "replies": REPLIES})
    assert summary["score"].failed == 2 and summary["score"].computed == 9
    rows = read_scores(Path(summary["run_dir"]), summary["metric_sig"]).set_index("query_id")
    chem = rows.loc["kris-chemistry-1"]
    assert chem["status"] == "failed" and chem["vc_reply"] == REPLIES[f"VC:{_q('chemistry', '1')}"]
    assert "consistency_score" in chem["reason"] and math.isnan(chem["K_IF"])
    assert chem["if_reply"] == REPLIES[f"DUAL:{_q('chemistry', '1')}"]  # every reply kept, the parsed ones too
    multi = rows.loc["kris-multi-instruction_execution-2"]
    assert "true, not a number" in multi["reason"] and "no quality_score" in multi["reason"]
    assert multi["vq_reply"] == "I'm sorry, I can't help with that."
    ok = rows[rows["status"] == "ok"]
    got = sorted((TASK_OF[t], vc, vq, i, None if math.isnan(kp) else kp)
                 for t, vc, vq, i, kp in ok[["edit_type", "K_VC", "K_VQ", "K_IF", "K_KP"]].itertuples(index=False))
    assert got == sorted(SCORED)
    board = _board(tmp_path / "results")
    assert (board["n_ok"], board["n_failed"]) == (7, 2)
    assert "marked-replies@test" in board["components"] and FAKE_COMMIT in board["components"]
    assert {k: board[k] for k in WANT} == pytest.approx(WANT, rel=1e-5, abs=1e-9)  # the CSV keeps 6 digits
    by_type = pd.read_csv(tmp_path / "results" / "leaderboard_by_type.csv").set_index("edit_type")
    assert by_type.loc["kris_count_change", "KRIS_attribute_VC"] == pytest.approx(75.0)  # (100 + 50) / 2


def test_the_suite_sends_the_prompts_the_official_scripts_build(built, tmp_path):
    from PIL import Image
    from scripted_judge import MarkedReplies

    from benchmark.metrics.kris.suite import KrisPair, KrisSuite
    from benchmark.querysets.io import load_queryset

    prompts, sha = write_prompts(tmp_path)
    judge = MarkedReplies(replies=REPLIES)
    suite = KrisSuite(backbone=judge, prompts_file=str(prompts), prompts_sha256=sha, prompts_commit=FAKE_COMMIT)
    qs = load_queryset(built[0], name="kris")
    items = []
    for q in qs.queries:
        src = Image.open(qs.path(q.image)).convert("RGB")
        ref = Image.open(qs.path(q.target_image)).convert("RGB") if q.target_image else None
        items.append(KrisPair(q, src, src, reference=ref))
    suite._score_chunk(items)
    # what metrics_*.py build: template.format(instruct=ins_en[, explanation=explain_en]); prompt_quality unformatted
    ns: dict = {}
    exec(compile(TEST_PROMPTS, "stand-in", "exec"), ns)  # our own stand-in text, run as the scripts import theirs
    sent = {(n, text) for n, text in judge.seen}
    for task, key in (("count_change", "1"), ("anomaly_correction", "1"), ("multi-instruction_execution", "2")):
        ins = RELEASE[task][key][2]
        assert (2, ns["prompt_consist"].format(instruct=ins)) in sent
        assert (2, ns["prompt_instruction_following"].format(instruct=ins)) in sent  # anomaly too: the quirk
    ins, expl = RELEASE["chemistry"]["2"][2:]
    assert (2, ns["prompt_dual_evaluation"].format(instruct=ins, explanation=expl)) in sent
    assert (3, ns["prompt_view_instruction_following"].format(instruct=RELEASE["viewpoint_change"]["1"][2])) in sent
    assert (1, ns["prompt_quality"]) in sent and '{{"reasoning"' in ns["prompt_quality"]
    assert not any("KIND=ABNORMAL" in text for _n, text in judge.seen)
    assert len(judge.seen) == 3 * 9


def _openai_payloads_and_cli(built, tmp_path, monkeypatch, command: list[str]):
    from local_servers import serving
    from openai_server import OpenAIServer
    from scripted_judge import marked_reply

    from benchmark.commands import cli

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    prompts, sha = write_prompts(tmp_path)
    with serving(OpenAIServer(lambda images, text, system, max_tokens: marked_reply(REPLIES, images, text),
                              served="gpt-4o")) as srv:
        argv = [*command, "queryset=kris", f"queryset.root={built[0]}", "metrics=kris", "profile=tiny",
                "metrics/kris_judge@metrics.kris.backbone=openai", f"metrics.kris.backbone.base_url={srv.url}",
                "metrics.kris.backbone.backoff_s=0", f"metrics.kris.prompts_file={prompts}",
                f"metrics.kris.prompts_sha256={sha}", f"metrics.kris.prompts_commit={FAKE_COMMIT}",
                f"paths.results={tmp_path / 'results'}", "progress=false", "aggregate.bootstrap_resamples=50",
                "max_failed_fraction=1.0"]
        try:
            rc = cli.main(argv)
        except SystemExit as stop:
            rc = int(stop.code or 0)
    return rc, srv


def test_editmeter_run_through_the_official_api_judge_sends_the_official_messages(built, tmp_path, monkeypatch,
                                                                                   restore_logging):
    rc, srv = _openai_payloads_and_cli(built, tmp_path, monkeypatch, ["run", "editor=identity"])
    assert rc == 0 and srv.calls == 27
    body = next(p for p in srv.payloads if "KIND=VIEW" in p["messages"][0]["content"][0]["text"])
    assert [m["role"] for m in body["messages"]] == ["user"]  # no system turn
    assert (body["model"], body["max_tokens"], body["stream"]) == ("gpt-4o", 1000, False)
    assert "temperature" not in body and "seed" not in body
    parts = body["messages"][0]["content"]
    assert [p["type"] for p in parts] == ["text", "text", "image_url", "text", "image_url", "text", "image_url"]
    assert [p["text"] for p in parts[1::2]] == ["This is the original image:", "This is the edited image:",
                                                "This is the ground truth image:"]
    assert all(p["image_url"]["url"].startswith("data:image/jpeg;base64,") for p in parts[2::2])
    quality = next(p for p in srv.payloads if "KIND=VQ" in p["messages"][0]["content"][0]["text"])
    assert [p.get("text") for p in quality["messages"][0]["content"]][1] == "This is the edited image:"
    assert {k: _board(tmp_path / "results")[k] for k in WANT} == pytest.approx(WANT, rel=1e-5, abs=1e-9)


def test_editmeter_score_of_an_edits_folder_gives_the_same_figures(built, tmp_path, monkeypatch, restore_logging):
    from PIL import Image

    from benchmark.querysets.io import load_queryset

    qs = load_queryset(built[0], name="kris")
    edits = tmp_path / "theirs"
    edits.mkdir()
    for q in qs.queries:  # identity edits, written as another tool would
        Image.open(qs.path(q.image)).convert("RGB").save(edits / f"{q.id}.png")
    rc, srv = _openai_payloads_and_cli(built, tmp_path, monkeypatch, ["score", "--edits", str(edits), "--name",
                                                                       "theirs"])
    assert rc == 0 and srv.calls == 27
    board = _board(tmp_path / "results")
    assert (board["n_ok"], board["n_failed"]) == (7, 2)
    assert {k: board[k] for k in WANT} == pytest.approx(WANT, rel=1e-5, abs=1e-9)


def test_kris_is_refused_up_front_on_a_set_without_kris_tasks(tmp_path):
    from benchmark.commands.run import compose, run_pipeline
    from benchmark.io.errors import PreflightError

    prompts, sha = write_prompts(tmp_path)
    cfg, choices = compose(["editor=identity", "queryset=demo_mini", "metrics=kris", "profile=tiny",
                            f"paths.results={tmp_path}", "progress=false", f"metrics.kris.prompts_file={prompts}",
                            f"metrics.kris.prompts_sha256={sha}", f"metrics.kris.prompts_commit={FAKE_COMMIT}"])
    with pytest.raises(PreflightError, match="a single-source KRIS-Bench task with an instruction"):
        run_pipeline(cfg, choices["editor"])


def test_the_shipped_config_without_a_checksum_is_refused_through_the_cli_before_any_edit(built, tmp_path, capsys,
                                                                                          restore_logging):
    from benchmark.commands import cli

    try:
        rc = cli.main(["run", "editor=identity", "queryset=kris", f"queryset.root={built[0]}", "metrics=kris",
                       "profile=tiny", f"paths.results={tmp_path}", "progress=false"])
    except SystemExit as stop:
        rc = int(stop.code or 0)
    err = capsys.readouterr().err
    assert rc != 0 and "Traceback" not in err
    assert "metrics.kris.prompts_sha256 is not set" in err and "sha256sum datasets/kris/downloads/kris_prompts.txt" in err
    assert not list(tmp_path.glob("runs/*/*/edits/*.png"))  # nothing edited


def test_the_tiny_local_judge_runs_and_every_row_keeps_its_three_replies(built, tmp_path, restore_logging):
    from benchmark.io.errors import TooManyFailures
    from benchmark.stages.score import read_scores

    try:  # random weights write bytes: a row is a failure, or scored where a stray digit 1-5 reads as a score
        _run(built[0], tmp_path, "limit=2", "metrics.kris.backbone.max_new_tokens=8",
             "metrics.kris.backbone.dtype=float32")
    except TooManyFailures:
        pass
    run_dir = next((tmp_path / "results" / "runs").glob("kris-*/identity-*"))
    rows = read_scores(run_dir, next((run_dir / "scores").iterdir()).name)
    assert len(rows) == 2
    for _i, row in rows.iterrows():
        assert all(isinstance(row[c], str) and row[c] for c in ("vc_reply", "if_reply", "vq_reply"))
        if row["status"] == "ok":
            assert all(1 <= row[c] <= 5 for c in ("K_VC", "K_VQ", "K_IF"))
        else:
            assert "gives no usable score" in row["reason"] and math.isnan(row["K_VC"])


def test_a_task_key_given_twice_is_refused(tmp_path):
    root = release(tmp_path)
    path = root / "chemistry" / "annotation.json"
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace('"2": {', '"1": {'), encoding="utf-8")
    with pytest.raises(KrisFormatError, match=r"duplicate key\(s\) \['1'\]"):
        build(root, tmp_path / "out")


def test_a_refused_or_failed_judge_call_is_a_failure_row_with_its_kind_and_every_row_names_its_judge(built,
                                                                                                   tmp_path):
    """metrics=kris through the judged suites' shared reading (`_read_replies`): a refused call and a call that
    failed after its retries are failure rows naming the kind, never scores; ok rows carry the provenance."""
    from PIL import Image
    from scripted_judge import MarkedReplies

    from benchmark.metrics.kris.suite import KrisPair, KrisSuite
    from benchmark.models.judge_reply import CALL_FAILED, REFUSED, JudgeReply
    from benchmark.querysets.io import load_queryset

    class Failing(MarkedReplies):
        """Answers as MarkedReplies (with a snapshot and fingerprint), but every quality request fails."""

        def generate(self, requests):
            out = []
            for reply, (_images, text) in zip(super().generate(requests), requests, strict=True):
                if "KIND=VQ" in text:
                    out.append(JudgeReply("", model=self.name, failure=CALL_FAILED, error="HTTP 503 after 5 retries"))
                else:
                    out.append(JudgeReply(reply, model=self.name, answered_by="snap-1", fingerprint="fp_x"))
            return out

    prompts, sha = write_prompts(tmp_path)
    suite = KrisSuite(backbone=Failing(replies=REPLIES), prompts_file=str(prompts), prompts_sha256=sha,
                      prompts_commit=FAKE_COMMIT)
    qs = load_queryset(built[0], name="kris")
    src = Image.open(qs.path(qs.queries[0].image)).convert("RGB")
    rows = suite._score_chunk([KrisPair(qs.queries[0], src, src)])
    (row,) = rows
    assert row["status"] == "failed" and row["judge_failure"] == CALL_FAILED
    assert "HTTP 503" in row["reason"] and math.isnan(row["K_VC"])
    assert row["judge_model"] == "marked-replies@test" and row["judge_answered_by"] == "snap-1"
    assert row["judge_fingerprint"] == "fp_x"

    class Refusing(MarkedReplies):
        def generate(self, requests):
            return [JudgeReply("", model=self.name, failure=REFUSED, error="content_filter") for _ in requests]

    suite.backbone = Refusing(replies=REPLIES)
    (row,) = suite._score_chunk([KrisPair(qs.queries[0], src, src)])
    assert row["status"] == "failed" and row["judge_failure"] == REFUSED and "content_filter" in row["reason"]


# ------------------------------------------------------------------------------------------- pinning the prompt file
SHIPPED = ROOT / "configs" / "metrics" / "kris.yaml"


def test_one_pin_command_then_kris_scores_on_the_tiny_profile_without_any_prompt_key(built, tmp_path, monkeypatch,
                                                                                      capsys, restore_logging):
    """`editmeter data pin kris --file F`: the checksum goes to the user's pins file (never the repository's YAML),
    and a run that names no prompts_* key scores with the pinned file: the hand-worked figures."""
    from omegaconf import open_dict

    from benchmark.commands import cli
    from benchmark.commands.run import compose, run_pipeline
    from benchmark.io.download import load_manifest

    pins = tmp_path / "home" / "pins.json"
    monkeypatch.setenv("EDITMETER_PINS", str(pins))
    shipped = SHIPPED.read_bytes()
    prompts, sha = write_prompts(tmp_path)  # our stand-in text in the release file's form
    commit = "9502ee30e121de71fce269b3fd65c59cc144da8e"  # metrics=kris's prompts_commit
    assert cli.main(["data", "pin", "kris", "--file", str(prompts)]) == 0
    out = capsys.readouterr().out
    assert f"sha256 {sha}" in out and str(pins) in out
    assert json.loads(pins.read_text())["kris"][commit] == {"prompts_sha256": sha, "prompts_file": str(prompts)}
    assert SHIPPED.read_bytes() == shipped  # the repository's config is untouched
    # the manifest now checks a fresh download of the file against the pin
    assert {f.name: f.sha256 for f in load_manifest("kris").files}["kris_prompts.txt"] == sha

    cfg, choices = compose(["editor=identity", "queryset=kris", f"queryset.root={built[0]}", "metrics=kris",
                            "profile=tiny", f"paths.results={tmp_path / 'results'}", "progress=false",
                            "aggregate.bootstrap_resamples=50", "max_failed_fraction=1.0"])
    assert (cfg.metrics.kris.prompts_sha256, cfg.metrics.kris.prompts_file) == (sha, str(prompts))
    with open_dict(cfg):
        cfg.metrics.kris.backbone = {"_target_": "scripted_judge.MarkedReplies", "replies": REPLIES}
    summary = run_pipeline(cfg, choices["editor"])
    assert summary["score"].failed == 2 and summary["score"].computed == 9
    board = _board(tmp_path / "results")
    assert commit in board["components"] and sha in board["components"]
    assert {k: board[k] for k in WANT} == pytest.approx(WANT, rel=1e-5, abs=1e-9)
    # a pin is for its commit: another commit is not pinned
    other, _ = compose(["editor=identity", "queryset=kris", f"queryset.root={built[0]}", "metrics=kris",
                        "profile=tiny", f"metrics.kris.prompts_commit={FAKE_COMMIT}"])
    assert other.metrics.kris.prompts_sha256 is None


@pytest.mark.parametrize(("text", "named"), [
    (TEST_PROMPTS.replace("prompt_quality =", "quality_prompt =").replace("prompt_dual_evaluation =", "dual ="),
     "no template prompt_dual_evaluation, prompt_quality"),
    (TEST_PROMPTS.replace("INSTRUCTION={instruct}\nAnswer as {{\"instruction_score\": n, \"reasoning",
                          "INSTRUCTION={instruct} {image}\nAnswer as {{\"instruction_score\": n, \"reasoning"),
     "prompt_instruction_following does not format"),
    ("prompt_consist = 1\n", "no template prompt_consist, prompt_instruction_following"),  # not a string: missing
])
def test_a_prompt_file_without_a_needed_template_is_refused_with_the_missing_names(tmp_path, monkeypatch, capsys,
                                                                                   text, named):
    from benchmark.commands import cli

    pins = tmp_path / "pins.json"
    monkeypatch.setenv("EDITMETER_PINS", str(pins))
    prompts, _ = write_prompts(tmp_path, text)
    assert cli.main(["data", "pin", "kris", "--file", str(prompts)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and named in err and str(prompts) in err, err
    assert not pins.exists()  # nothing written
