"""EditReward as a judge (metrics=editreward, docs/judge.md "EditReward"): the prompt files read with ast and pinned
by sha256, the tiny reward model loaded through the real path (base from_pretrained, reward token, resized
embeddings, strict state-dict load), the authors' forward (reward-token pooling, float32 heads, the mean of the two
heads, plain text positions instead of M-RoPE), their image sizes, batch independence, and the suite end to end."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import pytest

from benchmark.metrics.editreward.protocol import ProtocolError, load_prompts
from benchmark.plan.config import read_plan

ROOT = Path(__file__).resolve().parents[1]
FAKE_COMMIT = "feedface" * 5
# our own wording in the files' form (module-level string assignments); never the authors' text
TEST_PROMPTS = '''"""test prompts"""
INSTRUCTION_EDIT_FOLLOWING = """You judge whether an edit follows its instruction.
Instruction: {text_prompt}
"""
INSTRUCTION_EDIT_QUALITY = "You judge how natural the edited image looks (instruction: {text_prompt})."
INSTRUCTION_EDIT_OVERALL = "unused {text_prompt}"
def never_run(): raise SystemExit("never executed")
'''
TEST_COLLATOR = '''import os
prompt_with_special_token = """
Give the rating here: <|Reward|>

END
"""
prompt_without_special_token = "unused"
class NotRun:
    x = os.getcwd()
'''


def write(folder: Path, prompts: str = TEST_PROMPTS, collator: str = TEST_COLLATOR) -> dict[str, str]:
    folder.mkdir(parents=True, exist_ok=True)
    p, c = folder / "editreward_prompts.txt", folder / "editreward_collator.txt"
    p.write_text(prompts, encoding="utf-8")
    c.write_text(collator, encoding="utf-8")
    return {"path": str(p), "sha256": hashlib.sha256(prompts.encode()).hexdigest(), "commit": FAKE_COMMIT,
            "suffix_path": str(c), "suffix_sha256": hashlib.sha256(collator.encode()).hexdigest()}


def prompts_in(folder: Path, **texts: str):
    return load_prompts(**write(folder, **texts))


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    return prompts_in(tmp_path_factory.mktemp("er_prompts"))


SMALL = 16 * 28 * 28  # images of 16 merged patches keep the forward tests fast; the official size has its own test


@pytest.fixture(scope="module")
def scorer():
    from benchmark.models.editreward import EditRewardScorer

    return EditRewardScorer(weights="tiny", dtype="float32", device="cpu", batch_size=3, image_pixels=SMALL)


def images(n: int = 3):
    """Sources and edits of different sizes and colours (so prompts of one batch pad differently)."""
    from PIL import Image

    sizes = [(640, 480), (512, 512), (300, 500), (200, 90)]
    src = [Image.new("RGB", sizes[i % 4], (40 * i, 200 - 30 * i, 90)) for i in range(n)]
    edit = [Image.new("RGB", sizes[(i + 1) % 4], (200 - 40 * i, 30 * i, 60)) for i in range(n)]
    return src, edit


INSTRUCTIONS = ["make it red", "add a small cat on the left of the bottle", "remove the dog"]


# ------------------------------------------------------------------------------------------------------ prompts
def test_prompts_are_read_with_ast_and_each_head_gets_its_prompt_then_the_suffix(prompts):
    assert prompts.texts("turn {x} blue") == [
        "You judge whether an edit follows its instruction.\nInstruction: turn {x} blue\n"
        "\nGive the rating here: <|Reward|>\n\nEND\n",
        "You judge how natural the edited image looks (instruction: turn {x} blue)."
        "\nGive the rating here: <|Reward|>\n\nEND\n"]


def test_prompt_files_are_refused_when_a_checksum_differs_or_a_field_is_missing(tmp_path):
    args = write(tmp_path / "a")
    Path(args["path"]).write_text(TEST_PROMPTS.replace("natural", "real"), encoding="utf-8")
    with pytest.raises(ProtocolError, match="not the pinned protocol.*make data NAME=editreward_judge"):
        load_prompts(**args)
    args = write(tmp_path / "b")
    with pytest.raises(ProtocolError, match="sha256 .*expected 0{64}"):
        load_prompts(**{**args, "suffix_sha256": "0" * 64})
    with pytest.raises(ProtocolError, match="40-hex commit"):
        load_prompts(**{**args, "commit": "main"})
    with pytest.raises(ProtocolError, match="is missing: fetch it with `make data NAME=editreward_judge`"):
        load_prompts(**{**args, "suffix_path": str(tmp_path / "none.txt")})
    with pytest.raises(ProtocolError, match="no string assignment of INSTRUCTION_EDIT_QUALITY"):
        prompts_in(tmp_path / "c", prompts=TEST_PROMPTS.replace("INSTRUCTION_EDIT_QUALITY", "OTHER"))
    with pytest.raises(ProtocolError, match="INSTRUCTION_EDIT_FOLLOWING has no {text_prompt}"):
        prompts_in(tmp_path / "d", prompts=TEST_PROMPTS.replace("Instruction: {text_prompt}", "no field"))
    with pytest.raises(ProtocolError, match="must hold the reward token <\\|Reward\\|> once"):
        prompts_in(tmp_path / "e", collator=TEST_COLLATOR.replace("<|Reward|>", ""))


def test_the_manifest_fetches_the_files_the_config_pins():
    from benchmark.commands.run import compose
    from benchmark.io.download import load_manifest

    cfg = compose(["metrics=editreward"])[0].metrics.editreward
    files = {f.name: f for f in load_manifest("editreward_judge").files}
    base = f"https://raw.githubusercontent.com/TIGER-AI-Lab/EditReward/{cfg.prompts_commit}/EditReward/dataset/"
    for key, sha, name in (("prompts_file", "prompts_sha256", "prompts.py"),
                           ("suffix_file", "suffix_sha256", "data_collator_qwen_edit.py")):
        entry = files[Path(cfg[key]).name]
        assert Path(cfg[key]).parent == ROOT / "datasets" / "editreward_judge" / "downloads"
        assert entry.sha256 == cfg[sha] and entry.size and entry.url == base + name
    assert cfg.prompts_sha256 == "1a64bd01924d69fe1bb4b1664d33a32c06c5fbc7230ed7cb67f253183322c7aa"
    assert files["editreward_prompts.txt"].size == 11685
    assert cfg.backbone.image_pixels == 256 * 28 * 28 and cfg.backbone.dtype == "bfloat16"


# ---------------------------------------------------------------------------------------------------- the model
def test_tiny_loads_through_the_real_path_with_the_checkpoint_key_names_and_a_strict_load(scorer):
    import torch
    from transformers import Qwen2_5_VLForConditionalGeneration

    from benchmark.models.editreward import REWARD_TOKEN, _tiny_checkpoint, load_strict, read_checkpoint
    from benchmark.models.vlm import vlm_location

    model, proc = scorer.loaded()
    location, _ = vlm_location("tiny")
    path = _tiny_checkpoint(location)
    assert path.name == "model.safetensors"
    state = read_checkpoint(path)
    # the names of the authors' checkpoint (transformers 4.57): no renaming needed in this transformers
    prefixes = {k.split(".")[0] + "." + k.split(".")[1] for k in state}
    assert prefixes == {"model.visual", "model.language_model", "lm_head.weight", "rm_heads.head_0",
                        "rm_heads.head_1"}
    assert {k for k in state if k.startswith("rm_heads.head_0.")} == {
        f"rm_heads.head_0.{i}.{w}" for i in (0, 3, 5) for w in ("weight", "bias")}
    assert set(model.state_dict()) == set(state)
    # the reward token was added and the embeddings resized to the tokenizer (one more row than the base)
    base = Qwen2_5_VLForConditionalGeneration.from_pretrained(location)
    assert model.reward_token_id == proc.tokenizer.convert_tokens_to_ids(REWARD_TOKEN) == len(proc.tokenizer) - 1
    emb = model.get_input_embeddings().weight
    assert emb.shape[0] == len(proc.tokenizer) == base.get_input_embeddings().weight.shape[0] + 1
    # the checkpoint's (bf16-saved) weights are what the model holds
    assert torch.equal(emb, state["model.language_model.embed_tokens.weight"].float())
    assert torch.equal(model.rm_heads.head_1[5].weight, state["rm_heads.head_1.5.weight"])
    assert proc.tokenizer.padding_side == "right"
    # a missing key or an extra key is refused; a {"model": ...} wrapper is unwrapped (as the authors' loader)
    missing = {k: v for k, v in state.items() if k != "rm_heads.head_1.5.bias"}
    with pytest.raises(ValueError, match="Missing key.*rm_heads.head_1.5.bias"):
        load_strict(model, missing, path)
    with pytest.raises(ValueError, match="Unexpected key.*rm_head.0.weight"):
        load_strict(model, {**state, "rm_head.0.weight": state["rm_heads.head_0.0.weight"]}, path)
    torch.save({"model": state}, path.parent.parent / "er_wrapped_test.pth")
    try:
        assert set(read_checkpoint(path.parent.parent / "er_wrapped_test.pth")) == set(state)
    finally:
        (path.parent.parent / "er_wrapped_test.pth").unlink()


def test_base_weights_load_under_this_transformers_names():
    """The base checkpoint's older key names (`model.layers.*`, `visual.*`) are renamed for the subclass as for its
    parent: every base weight arrives (none left at its random initialisation)."""
    import torch
    from transformers import Qwen2_5_VLForConditionalGeneration

    from benchmark.models.editreward import _assemble
    from benchmark.models.vlm import vlm_location

    location, kw = vlm_location("tiny")
    base = Qwen2_5_VLForConditionalGeneration.from_pretrained(location, dtype=torch.float32)
    model, _ = _assemble(location, kw, "float32", "sdpa")
    ours, theirs = model.state_dict(), base.state_dict()
    for k, v in theirs.items():
        got = ours[k][: v.shape[0]] if "embed_tokens" in k or k == "lm_head.weight" else ours[k]
        assert torch.equal(got, v), k


def test_the_reward_is_read_at_the_reward_token(tmp_path, scorer):
    """Right padding and a causal model: text after the reward token cannot change the reward, text before does."""
    src, edit = images(2)
    base = scorer.reward(INSTRUCTIONS[:2], src, edit, prompts_in(tmp_path / "a"))[0]
    after = prompts_in(tmp_path / "b", collator=TEST_COLLATOR.replace("END", "STOP HERE"))
    before = prompts_in(tmp_path / "c", collator=TEST_COLLATOR.replace("rating here", "score here"))
    # the same up to float rounding (a longer sequence takes other kernel paths)
    assert (scorer.reward(INSTRUCTIONS[:2], src, edit, after)[0] - base).abs().max() < 1e-6
    assert (scorer.reward(INSTRUCTIONS[:2], src, edit, before)[0] - base).abs().min() > 1e-4


def test_two_heads_each_on_its_prompt_and_the_reward_is_their_mean(prompts, scorer):
    import torch

    from benchmark.models.editreward_model import pool_heads

    # pooling: the mean over heads of (mean, log sigma), worked by hand
    per_head = torch.tensor([[[1.0, -2.0], [3.0, 0.5]], [[2.0, 0.0], [-1.0, 1.5]]])
    assert pool_heads(per_head).tolist() == [[1.5, -1.0], [1.0, 1.0]]
    src, edit = images(2)
    heads = scorer.head_outputs(INSTRUCTIONS[:2], src, edit, prompts)
    mean, log_sigma = scorer.reward(INSTRUCTIONS[:2], src, edit, prompts)
    assert heads.shape == (2, 2, 2) and heads.dtype == torch.float32
    assert torch.allclose(mean, heads[:, :, 0].mean(0)) and torch.allclose(log_sigma, heads[:, :, 1].mean(0))
    # head 0 reads the following prompt, head 1 the quality prompt: run by hand on one batch each
    model, _ = scorer.loaded()
    batches = scorer.encode(INSTRUCTIONS[:2], src, edit, prompts)
    with torch.inference_mode():
        h0 = model.rm_heads["head_0"](model.hidden_at_reward_token(batches[0]))
        h1 = model.rm_heads["head_1"](model.hidden_at_reward_token(batches[1]))
        crossed = model.rm_heads["head_0"](model.hidden_at_reward_token(batches[1]))
    assert torch.allclose(heads[0], h0) and torch.allclose(heads[1], h1)
    assert not torch.allclose(crossed, h0)


def test_a_reward_does_not_depend_on_its_batch_neighbours(prompts, scorer):
    from benchmark.models.editreward import EditRewardScorer

    src, edit = images(3)
    three = scorer.reward(INSTRUCTIONS, src, edit, prompts)
    one = EditRewardScorer(weights="tiny", dtype="float32", device="cpu", batch_size=1, image_pixels=SMALL)
    singles = one.reward(INSTRUCTIONS, src, edit, prompts)
    for a, b in zip(three, singles, strict=True):
        assert (a - b).abs().max() < 1e-5
    assert one.identity == scorer.identity  # batch size is speed, not identity


def test_bf16_on_cpu_keeps_the_heads_in_float32(prompts):
    import torch

    from benchmark.models.editreward import EditRewardScorer

    bf = EditRewardScorer(weights="tiny", dtype="bfloat16", device="cpu", image_pixels=SMALL)
    model, _ = bf.loaded()
    assert model.dtype == torch.bfloat16 and model.model.visual.dtype == torch.bfloat16
    assert {p.dtype for p in model.rm_heads.parameters()} == {torch.float32}
    src, edit = images(2)
    heads = bf.head_outputs(INSTRUCTIONS[:2], src, edit, prompts)
    assert heads.dtype == torch.float32 and torch.isfinite(heads).all()
    f32 = EditRewardScorer(weights="tiny", dtype="float32", device="cpu", image_pixels=SMALL).reward(
        INSTRUCTIONS[:2], src, edit, prompts)
    assert (bf.reward(INSTRUCTIONS[:2], src, edit, prompts)[0] - f32[0]).abs().max() < 0.05  # bf16 rounding only


def test_the_authors_bf16_cast_rounds_the_rotary_frequencies_and_the_vision_angles_are_bf16_products():
    """The authors cast the whole model with `model.to(torch.bfloat16)`: the rotary inverse frequencies (buffers)
    become bf16, and transformers 4.57's vision rotary multiplies positions by them in bf16. In float32 the angles
    are transformers' own."""
    import torch
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLVisionRotaryEmbedding

    from benchmark.models.editreward import EditRewardScorer

    bf, _ = EditRewardScorer(weights="tiny", dtype="bfloat16", device="cpu").loaded()
    f32, _ = EditRewardScorer(weights="tiny", dtype="float32", device="cpu").loaded()
    for name in ("model.visual.rotary_pos_emb.inv_freq", "model.language_model.rotary_emb.inv_freq"):
        want = dict(f32.named_buffers())[name].to(torch.bfloat16)
        assert torch.equal(dict(bf.named_buffers())[name], want), name
    pos = torch.stack([torch.arange(32), torch.arange(32).flip(0)], dim=1)  # (N, 2): h, w of 32 patches
    rot = bf.model.visual.rotary_pos_emb
    cos, _ = rot(torch.zeros(1, dtype=torch.bfloat16), pos)
    inv = rot.inv_freq
    by_hand = (pos[:, 0, None].to(torch.bfloat16) * inv).cos()  # the h half: bf16 product, bf16 cos
    assert cos.dtype == torch.bfloat16 and torch.equal(cos[:, : inv.numel()], by_hand)
    theirs, _ = Qwen2_5_VLVisionRotaryEmbedding.forward(rot, torch.zeros(1, dtype=torch.bfloat16), pos)
    assert not torch.equal(cos.float(), theirs.float())  # transformers 5 multiplies in float32
    rot32 = f32.model.visual.rotary_pos_emb
    ours32, theirs32 = rot32(torch.zeros(1), pos), Qwen2_5_VLVisionRotaryEmbedding.forward(rot32, torch.zeros(1), pos)
    assert all(torch.equal(a, b) for a, b in zip(ours32, theirs32, strict=True))


def test_both_images_are_resized_to_the_authors_256_patch_area(prompts, scorer):
    from PIL import Image

    from benchmark.models.editreward import EditRewardScorer, editreward_image

    # 640 x 480: rounded to 644 x 476 (over 200,704 px), so scaled by sqrt(307200 / 200704) and floored to
    # multiples of 28: 504 x 364 = 18 x 13 merged patches. 512 x 512: 448 x 448 = 16 x 16 = 256.
    assert editreward_image(Image.new("RGB", (640, 480))).size == (504, 364)
    assert editreward_image(Image.new("RGB", (512, 512))).size == (448, 448)
    # small ones grow, each side rounded up: 588 x 364 = 21 x 13 merged patches, past 256 (as the authors' code)
    assert editreward_image(Image.new("RGB", (100, 60))).size == (588, 364)
    rgba = Image.new("RGBA", (448, 448), (10, 20, 30, 0))
    assert editreward_image(rgba).getpixel((5, 5)) == (10, 20, 30)  # convert("RGB"): alpha dropped, not composited
    official = EditRewardScorer(weights="tiny", dtype="float32", device="cpu")
    assert official.image_pixels == 200704
    enc = official.encode(["x"], [Image.new("RGB", (640, 480))], [Image.new("RGB", (512, 512))], prompts)
    for batch in enc:  # the processor keeps those sizes: 14-px patches, a 2 x 2 merge
        assert batch["image_grid_thw"].tolist() == [[1, 26, 36], [1, 32, 32]]
        assert batch["pixel_values"].shape[0] == 26 * 36 + 32 * 32
        image_pad = scorer.loaded()[0].config.image_token_id
        assert int((batch["input_ids"] == image_pad).sum()) == (26 * 36 + 32 * 32) // 4


def test_text_positions_not_mrope_reach_the_language_model(prompts, scorer):
    """The authors' call gives the language model only embeddings and the mask: transformers 4.57 then numbers the
    tokens 0, 1, ... on all three rotary sections. Pinned: our positions by hand, and the reward equals a forward
    with those positions and differs from one with Qwen2.5-VL's M-RoPE positions."""
    import torch

    from benchmark.models.editreward_model import official_position_ids

    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]])
    pos = official_position_ids(mask)
    assert pos.shape == (3, 2, 6) and (pos[0] == pos[1]).all() and (pos[1] == pos[2]).all()
    assert pos[0].tolist() == [[0, 1, 2, 3, 1, 1], [0, 1, 2, 3, 4, 5]]

    model, _ = scorer.loaded()
    src, edit = images(1)
    enc = scorer.encode(INSTRUCTIONS[:1], src, edit, prompts)[0]
    with torch.inference_mode():
        ours = model.rm_heads["head_0"](model.hidden_at_reward_token(enc))
        ids, m = enc["input_ids"], enc["attention_mask"]
        embeds = model.get_input_embeddings()(ids)
        feats = torch.cat(list(model.model.get_image_features(enc["pixel_values"], enc["image_grid_thw"],
                                                              return_dict=True).pooler_output))
        embeds = embeds.masked_scatter((ids == model.config.image_token_id).unsqueeze(-1).expand_as(embeds), feats)

        def head_with(positions):
            h = model.model.language_model(inputs_embeds=embeds, attention_mask=m, position_ids=positions,
                                           use_cache=False).last_hidden_state
            return model.rm_heads["head_0"](h[ids == model.reward_token_id])

        plain = torch.arange(ids.shape[1]).view(1, 1, -1).expand(3, 1, -1)
        mrope, _ = model.model.get_rope_index(ids, image_grid_thw=enc["image_grid_thw"], attention_mask=m,
                                              mm_token_type_ids=enc["mm_token_type_ids"])
        assert not torch.equal(mrope, plain)  # the image grid would give M-RoPE positions of its own
        assert torch.allclose(ours, head_with(plain), atol=1e-6)
        assert not torch.allclose(ours, head_with(mrope), atol=1e-4)


# ---------------------------------------------------------------------------------------------------- the suite
def _suite(tmp_path: Path, **backbone):
    from hydra.utils import instantiate

    from benchmark.commands.run import compose

    files = write(tmp_path / "prompts")
    cfg, _ = compose(["metrics=editreward", "profile=tiny", "device=cpu",
                      f"metrics.editreward.prompts_file={files['path']}",
                      f"metrics.editreward.prompts_sha256={files['sha256']}",
                      f"metrics.editreward.prompts_commit={FAKE_COMMIT}",
                      f"metrics.editreward.suffix_file={files['suffix_path']}",
                      f"metrics.editreward.suffix_sha256={files['suffix_sha256']}",
                      *(f"metrics.editreward.backbone.{k}={v}" for k, v in backbone.items())])
    return instantiate(cfg.metrics.editreward)


def test_score_images_gives_the_scorers_reward_and_a_failure_row_for_a_special_token(tmp_path, prompts):
    from benchmark.io.types import Query
    from benchmark.models.editreward import EditRewardScorer

    suite = _suite(tmp_path, dtype="float32", image_pixels=SMALL)
    assert suite.judge_column == "ER" and suite.info.name == "editreward"
    src, edit = images(3)
    queries = [Query(id=f"q{i}", image="", edit_type="judged", instruction=t) for i, t in enumerate(INSTRUCTIONS)]
    bad = Query(id="bad", image="", edit_type="judged", instruction="add <|Reward|> twice")
    pad = Query(id="pad", image="", edit_type="judged", instruction="put <|image_pad|> here")
    rows = {r["query_id"]: r for r in suite.score_images([*zip(queries, src, edit, strict=True),
                                                          (bad, src[0], edit[0]), (pad, src[1], edit[1])])}
    for key, token in (("bad", "<|Reward|>"), ("pad", "<|image_pad|>")):
        assert rows[key]["status"] == "failed" and token in rows[key]["reason"] and math.isnan(rows[key]["ER"])
    want = EditRewardScorer(weights="tiny", dtype="float32", device="cpu", image_pixels=SMALL).reward(
        INSTRUCTIONS, src, edit, prompts)
    for i in range(3):
        r = rows[f"q{i}"]
        assert r["status"] == "ok" and r["ER"] == pytest.approx(float(want[0][i]), abs=1e-6)
        assert r["ER_log_sigma"] == pytest.approx(float(want[1][i]), abs=1e-6)
        assert r["ER"] == pytest.approx((r["ER_following"] + r["ER_quality"]) / 2, abs=1e-6)
    assert suite.applies_to(queries[0], "") and not suite.applies_to(Query(id="n", image="", edit_type="x"), "")
    assert "EditReward@" + FAKE_COMMIT in suite.identity and "TIGER-Lab/EditReward-Qwen2.5-VL-7B-tiny" in suite.identity


def test_metrics_editreward_runs_end_to_end_on_the_demo_set(tmp_path, restore_logging):
    import pandas as pd

    from benchmark.commands.run import compose, run_pipeline
    from benchmark.stages.score import read_scores

    files = write(tmp_path / "prompts")
    cfg, choices = compose(["editor=identity", "queryset=demo_mini", "metrics=editreward", "profile=tiny",
                            "limit=3", f"paths.results={tmp_path / 'results'}", "progress=false",
                            "aggregate.bootstrap_resamples=50", "metrics.editreward.backbone.dtype=float32",
                            f"metrics.editreward.prompts_file={files['path']}",
                            f"metrics.editreward.prompts_sha256={files['sha256']}",
                            f"metrics.editreward.prompts_commit={FAKE_COMMIT}",
                            f"metrics.editreward.suffix_file={files['suffix_path']}",
                            f"metrics.editreward.suffix_sha256={files['suffix_sha256']}"])
    summary = run_pipeline(cfg, choices["editor"])
    assert summary["score"].computed == 3 and summary["score"].failed == 0
    rows = read_scores(Path(summary["run_dir"]), summary["metric_sig"])
    assert (rows["status"] == "ok").all() and rows["ER"].notna().all()
    board = pd.read_csv(tmp_path / "results" / "leaderboard.csv").iloc[0]
    assert board["ER"] == pytest.approx(rows["ER"].mean(), abs=1e-6)  # a plain mean over the queries
    assert "TIGER-Lab/EditReward-Qwen2.5-VL-7B-tiny" in board["components"] and FAKE_COMMIT in board["components"]


def tiger_set(folder: Path) -> Path:
    """TIGER's EditReward-Bench in its release format: 2 groups of 2 edits (one a tie of identical edits)."""
    import json

    from PIL import Image

    (folder / "images").mkdir(parents=True)
    for name, colour in (("src", (10, 10, 10)), ("red", (200, 30, 30)), ("blue", (30, 30, 200))):
        Image.new("RGB", (40, 30), colour).save(folder / "images" / f"{name}.png")

    def item(prompt, ranking, *edits):
        return {"prompt": prompt, "path_src": "images/src.png", "paths_generated": [f"images/{e}.png" for e in edits],
                "human_vote": {"ranking": ranking}}

    (folder / "EditReward_Bench_2pair.json").write_text(json.dumps([
        item("make it red", "A>B", "red", "blue"), item("make it blue", "A=B=Good", "blue", "blue")]))
    return folder


def test_metaeval_judges_scores_every_edit_with_the_tiny_reward_model(tmp_path):
    import pandas as pd

    from benchmark.commands.cli import main

    files = write(tmp_path / "prompts")
    assert main(["metaeval", "judges", "--judges", "editreward", "--sets", f"tiger={tiger_set(tmp_path / 'tiger')}",
                 "profile=tiny", f"paths.results={tmp_path / 'results'}", "--resamples", "0",
                 f"metrics.editreward.prompts_file={files['path']}", f"metrics.editreward.prompts_sha256={files['sha256']}",
                 f"metrics.editreward.prompts_commit={FAKE_COMMIT}", f"metrics.editreward.suffix_file={files['suffix_path']}",
                 f"metrics.editreward.suffix_sha256={files['suffix_sha256']}",
                 "metrics.editreward.backbone.dtype=float32", f"metrics.editreward.backbone.image_pixels={SMALL}"]) == 0
    table = pd.read_csv(next((tmp_path / "results" / "metaeval").glob("judges-*.csv")))
    row = table[(table.judge == "editreward") & (table.subtask == "all")].iloc[0]
    assert row.n_unscored == 0 and row.n_pairs == 2 and 0 <= row.value <= 1  # every edit scored, by ER


def test_the_weights_command_lists_the_base_and_the_checkpoint():
    from benchmark.commands.run import compose
    from benchmark.plan import weights as W

    cfg, _ = compose(["editor=identity", "metrics=editreward", "profile=pretrained"])
    found = {(c.source, c.revision): c for c in W.resolve(read_plan(cfg), "identity")}
    assert ("Qwen/Qwen2.5-VL-7B-Instruct", "cc594898137f460bfe9f0759e9844b3ce807cfb5") in found
    ck = found[("TIGER-Lab/EditReward-Qwen2.5-VL-7B", "51b92ab5246295637c4ab3bd71e54a26f0a5189d")]
    assert ck.kind == "hf-file" and set(ck.files) == {"model.safetensors", "model.pth"}


def test_missing_real_weights_are_named_with_their_pinned_revision(monkeypatch, tmp_path):
    from benchmark.io.model_cache import WeightsUnavailableError
    from benchmark.models.editreward import CHECKPOINT_ID, CHECKPOINT_REVISION, checkpoint_path

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))  # an empty cache, offline (conftest)
    with pytest.raises(WeightsUnavailableError, match=f"{CHECKPOINT_ID}@{CHECKPOINT_REVISION}"):
        checkpoint_path(CHECKPOINT_ID, CHECKPOINT_REVISION)


@pytest.mark.weights
def test_the_real_checkpoint_loads_strictly_and_scores(tmp_path):
    """Needs the pinned base and checkpoint in the HF cache (`editmeter weights metrics=editreward`) and the
    authors' prompt files (`make data NAME=editreward_judge`); about 17 GB of memory in bf16."""
    import torch
    from PIL import Image

    from benchmark.commands.run import compose
    from benchmark.models.editreward import EditRewardScorer

    cfg = compose(["metrics=editreward"])[0].metrics.editreward
    real = load_prompts(cfg.prompts_file, cfg.prompts_sha256, cfg.prompts_commit, cfg.suffix_file, cfg.suffix_sha256)
    scorer = EditRewardScorer(weights="pretrained", device="cuda" if torch.cuda.is_available() else "cpu")
    model, proc = scorer.loaded()
    assert model.get_input_embeddings().weight.shape[0] == len(proc.tokenizer)
    src = Image.new("RGB", (512, 512), (30, 120, 200))
    mean, log_sigma = scorer.reward(["Make the sky red", "Make the sky red"], [src, src],
                                    [Image.new("RGB", (512, 512), (200, 40, 30)), src], real)
    assert torch.isfinite(mean).all() and torch.isfinite(log_sigma).all()
