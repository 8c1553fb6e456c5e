"""BPM: the rule-based instruction parser, every region branch with oracle masks (add, remove, move each way,
enlarge, shrink, unchanged, an unwanted move in the other axis), the semantic terms, the set-level normalisation,
and the suite end to end on the demo set with tiny random detector / SAM / CLIP."""

import math

import numpy as np
import pandas as pd
import pytest
from conftest import run_demo

from benchmark.io.types import ObjectRef, Query
from benchmark.metrics.bpm.suite import BpmSuite, _Loaded
from benchmark.metrics.bpm.summary import summarize
from benchmark.models.instructions import (
    ParsedEdit,
    ParseError,
    RuleParser,
    from_query,
    parse_llm_answer,
)
from benchmark.models.locate import OracleLocator, box_of
from benchmark.plan.config import read_plan

S = 128  # image side


def scene(seed=0):
    yy, xx = np.meshgrid(np.linspace(0, 1, S), np.linspace(0, 1, S), indexing="ij")
    img = np.stack([0.2 + 0.5 * xx, 0.3 + 0.4 * yy, 0.6 - 0.3 * xx * yy], -1)
    return (img * 255).astype(np.uint8)


def square(img, box, color):
    """Paint a box; returns (image, mask)."""
    img = img.copy()
    m = np.zeros((S, S), dtype=bool)
    x0, y0, x1, y1 = box
    m[y0:y1, x0:x1] = True
    img[m] = color
    return img, m


@pytest.fixture(scope="module")
def suite():
    from benchmark.models.clip import load_clip

    oracle = OracleLocator()
    s = BpmSuite(clip=lambda device: load_clip("tiny", "ViT-B-16-quickgelu", "openai"),
                 locator=lambda device: oracle, device="cpu", original_masks="detector")
    s.oracle = oracle
    return s


def case(suite, qid, instruction, before=None, after=None, o1=None, o2=None, color=(200, 30, 30),
         color2=None, edit_noise=0.0):
    """One free-form query with a registered original object `o1` at box `before` and edit object `o2` at `after`."""
    bg = scene()
    orig, edit = bg, bg
    if before is not None:
        orig, m1 = square(bg, before, color)
        suite.oracle.register(orig, o1, m1)
    if after is not None:
        edit, m2 = square(bg, after, color2 or color)
        if edit_noise:
            edit = np.clip(edit.astype(float) + edit_noise * 255, 0, 255).astype(np.uint8)
        suite.oracle.register(edit, o2, m2)
    q = Query(id=qid, image=f"{qid}.png", edit_type="free_form", instruction=instruction)
    return _Loaded(q, original=orig, edit=edit)


def score(suite, *items):
    rows = suite._score_chunk(list(items))
    return {r["query_id"]: r for r in rows}


C = (44, 44, 84, 84)  # a 40 px object in the middle


@pytest.mark.parametrize("instruction,after,expect", [
    ("move the cat to the left", (4, 44, 44, 84), 1),
    ("move the cat to the right", (84, 44, 124, 84), 1),
    ("move the cat up", (44, 4, 84, 44), 1),
    ("move the cat down", (44, 84, 84, 124), 1),
    ("move the cat to the left", (84, 44, 124, 84), 0),     # the wrong way
    ("move the cat up", (44, 84, 84, 124), 0),              # the wrong way
    ("move the cat to the left", (4, 74, 44, 114), 0),      # left, but an unwanted move down too
    ("move the cat to the right", (52, 44, 92, 84), 0),     # shifted 8 px: IoU 0.67, not a salient move
])
def test_moves(suite, instruction, after, expect):
    r = score(suite, case(suite, "m", instruction, C, after, "cat", "cat"))["m"]
    assert r["status"] == "ok" and r["S_position"] == expect
    assert r["S_size"] == 1  # same area: the size did not change, as asked


@pytest.mark.parametrize("instruction,after,expect", [
    ("make the dog bigger", (34, 34, 94, 94), 1),
    ("make the dog smaller", (54, 54, 74, 74), 1),
    ("make the dog bigger", (54, 54, 74, 74), 0),
    ("make the dog smaller", (34, 34, 94, 94), 0),
    ("make the dog bigger", (43, 43, 85, 85), 0),   # +10% area: below the 1.2 ratio
])
def test_sizes(suite, instruction, after, expect):
    r = score(suite, case(suite, "s", instruction, C, after, "dog", "dog"))["s"]
    assert r["S_size"] == expect and r["area_ratio"] == pytest.approx(
        (after[2] - after[0]) * (after[3] - after[1]) / 1600)


def test_unchanged_replacement(suite):
    same = score(suite, case(suite, "u", "turn the dog into a cat", C, C, "dog", "cat", color2=(20, 200, 20)))["u"]
    assert (same["S_position"], same["S_size"], same["S_region"]) == (1, 1, 2)
    moved = score(suite, case(suite, "v", "turn the dog into a cat", C, (4, 4, 44, 44), "dog", "cat"))["v"]
    assert moved["S_position"] == 0 and moved["S_size"] == 1  # an unasked move is caught
    grown = score(suite, case(suite, "w", "turn the dog into a cat", C, (24, 24, 104, 104), "dog", "cat"))["w"]
    assert grown["S_size"] == 0


def test_add_and_remove_defaults(suite):
    add = score(suite, case(suite, "a", "add a hat", after=(10, 10, 30, 30), o2="hat"))["a"]
    assert (add["S_position"], add["S_size"], add["edit_found"], add["kind"]) == (1, 1, 1, 0)  # size: full score
    assert add["iou"] == 1  # the original box defaults to the edited one
    missing = score(suite, case(suite, "b", "add a hat"))["b"]  # nothing was added
    assert (missing["status"], missing["S_position"], missing["S_size"], missing["edit_found"]) == ("ok", 0, 0, 0)
    rem = score(suite, case(suite, "r", "remove the car", before=C, o1="car"))["r"]
    assert (rem["S_position"], rem["S_size"], rem["kind"]) == (1, 1, 2)  # position: full score; edit := original


def test_relative_addition_uses_the_reference(suite):
    bg = scene()
    orig, m_ref = square(bg, C, (10, 10, 200))
    suite.oracle.register(orig, "bottle", m_ref)
    left, m_left = square(orig, (4, 48, 40, 80), (250, 120, 0))
    suite.oracle.register(left, "pizza", m_left)
    right, m_right = square(orig, (88, 48, 124, 80), (250, 120, 0))
    suite.oracle.register(right, "pizza", m_right)
    q = Query(id="p", image="p.png", edit_type="free_form", instruction="add a pizza to the left of the bottle")
    ok = score(suite, _Loaded(q, original=orig, edit=left))["p"]
    bad = score(suite, _Loaded(q, original=orig, edit=right))["p"]
    assert ok["S_position"] == 1 and bad["S_position"] == 0


def test_failures_are_rows_with_reasons(suite):
    rows = score(suite, case(suite, "x", "xyzzy frobnicate"), case(suite, "y", "remove the car"))
    assert rows["x"]["status"] == "failed" and "does not recognise" in rows["x"]["reason"]
    assert rows["y"]["status"] == "failed" and "'car' was not found in the original" in rows["y"]["reason"]


def test_semantic_terms(suite):
    same = score(suite, case(suite, "p1", "turn the dog into a cat", C, C, "dog", "cat", color2=(20, 200, 20)))["p1"]
    assert same["S_preserve"] == 1.0  # nothing changed outside the objects' masks
    noisy = score(suite, case(suite, "p2", "turn the dog into a cat", C, C, "dog", "cat", color2=(20, 200, 20),
                              edit_noise=0.1))["p2"]
    assert noisy["S_preserve"] == pytest.approx(1 - 0.1**2, abs=2e-3)
    assert -1 <= same["S_modify"] <= 1
    # an unchanged crop has no image direction: S_modify is undefined (missing), never a made-up number
    flat = score(suite, case(suite, "p3", "turn the dog into a cat", C, C, "dog", "cat"))["p3"]
    assert math.isnan(flat["S_modify"]) and math.isnan(flat["BPM_fixed"])
    w = 0.7
    assert same["BPM_fixed"] == pytest.approx(w * ((same["S_modify"] + 1) / 2 + same["S_preserve"]) + (1 - w) * 2)


def test_rows_do_not_depend_on_chunking(suite):
    items = [case(suite, f"k{i}", "make the dog bigger", C, (34 - i, 34, 94, 94), "dog", "dog", color2=(0, 0, 255))
             for i in range(3)]
    together = score(suite, *items)
    apart = {k: v for it in items for k, v in score(suite, it).items()}
    for k in together:
        assert together[k] == pytest.approx(apart[k], nan_ok=True)


def test_global_edits_are_excluded(suite):
    assert not suite.applies_to(Query(id="g", image="g.png", edit_type="bg_chg", background="sea"), "instruction")
    assert suite.applies_to(Query(id="f", image="f.png", edit_type="free_form", instruction="x"), "instruction")


# -- parsing --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text,want", [
    ("make the dog bigger", ("dog", "dog", "larger", "unchanged")),
    ("Move the cat to the left.", ("cat", "cat", "unchanged", "left")),
    ("add a hat", (None, "hat", "unchanged", "unchanged")),
    ("remove the car", ("car", None, "unchanged", "unchanged")),
    ("turn the dog into a cat", ("dog", "cat", "unchanged", "unchanged")),
    ("Replace the clock with a street sign", ("clock", "street sign", "unchanged", "unchanged")),
    ("shrink the tree", ("tree", "tree", "smaller", "unchanged")),
    ("move the ball up", ("ball", "ball", "unchanged", "up")),
    ("What if the man was a woman?", ("man", "woman", "unchanged", "unchanged")),
    ("please get rid of the people in the background", ("people", None, "unchanged", "unchanged")),
    ("add a pizza to the left of the bottle", (None, "pizza", "unchanged", "left")),
])
def test_rule_parser(text, want):
    p = RuleParser().parse(text)
    assert (p.source_object, p.target_object, p.size, p.position) == want


def test_rule_parser_attribute_changes_and_refusals():
    p = RuleParser().parse("make the car red")
    assert (p.o1_text, p.o2_text, p.source_object, p.target_object) == ("car", "red car", "car", "car")
    for text in ("make it snowy", "xyzzy", ""):
        with pytest.raises(ParseError):
            RuleParser().parse(text)


def test_parse_from_query_fields():
    t = ObjectRef("1", "cup")
    add = from_query(Query(id="a", image="i", edit_type="obj_add", new_class="vase", relation="to the right of",
                           anchor=t))
    assert (add.kind, add.target_object, add.position, add.reference) == ("add", "vase", "right", "cup")
    res = from_query(Query(id="r", image="i", edit_type="obj_resize", target=t, size_change="shrink"))
    assert (res.size, res.source_object) == ("smaller", "cup")
    attr = from_query(Query(id="c", image="i", edit_type="attr_chg", target=t, attribute_before="red",
                            attribute_after="blue"))
    assert (attr.o1_text, attr.o2_text) == ("red cup", "blue cup")
    with pytest.raises(ParseError, match="global edits are excluded"):
        from_query(Query(id="b", image="i", edit_type="bg_chg", background="sea"))


def test_llm_answers_are_parsed_or_refused():
    got = parse_llm_answer('sure: {"source_object": "clock", "target_object": null, "size": "unchanged", '
                           '"position": "left"} done')
    assert got == ParsedEdit("clock", None, position="left")
    for bad in ("", "{}", '{"source_object": null, "target_object": null}', '{"source_object": "a", "size": "huge"}'):
        with pytest.raises(ParseError):
            parse_llm_answer(bad)


def test_tiny_llm_parser_garbage_is_a_reason():
    from benchmark.models.instructions import LLMInstructionParser

    out = LLMInstructionParser("tiny", max_new_tokens=8).parse_many(["xyzzy"])
    assert isinstance(out[0], str) and "no usable JSON" in out[0]


# -- normalisation ----------------------------------------------------------------------------------------------

def frame(mod, pre, reg, w=0.7):
    return pd.DataFrame({"S_modify": mod, "S_preserve": pre, "S_region": reg, "semantic_weight": w})


def test_minmax_normalisation_by_hand():
    out = summarize(frame([0.0, 0.5, 1.0], [0.9, 0.8, 1.0], [2, 1, 0]), {}, {}, overall=True)
    sem = np.array([0, 0.5, 1]) + np.array([0.5, 0, 1])
    assert out["S_semantic"] == pytest.approx(sem.mean())
    assert out["BPM"] == pytest.approx((0.7 * sem + 0.3 * np.array([2, 1, 0])).mean())
    assert out["BPM_n"] == 3 and out["BPM_se"] > 0


def test_minmax_is_invariant_to_affine_changes_and_undefined_without_spread():
    rng = np.random.default_rng(0)
    mod, pre, reg = rng.uniform(-1, 1, 20), rng.uniform(0.5, 1, 20), rng.integers(0, 3, 20)
    a = summarize(frame(mod, pre, reg), {}, {}, overall=True, seed=1)
    b = summarize(frame(3 * mod + 1, 0.5 * pre - 2, reg), {}, {}, overall=True, seed=1)
    assert a["BPM"] == pytest.approx(b["BPM"]) and a["BPM_se"] == pytest.approx(b["BPM_se"])
    flat = summarize(frame([0.2, 0.2], [0.9, 0.8], [1, 1]), {}, {}, overall=True)
    assert math.isnan(flat["BPM"]) and flat["BPM_n"] == 2
    nan_rows = summarize(frame([0.1, math.nan, 0.3], [0.9, 0.8, 0.7], [1, 1, 2]), {}, {}, overall=True)
    assert nan_rows["BPM_n"] == 2


# -- end to end -------------------------------------------------------------------------------------------------

def test_suite_on_the_demo_set_with_tiny_models(tmp_path):
    summary = run_demo(tmp_path, "identity", "metrics=bpm", "limit=7")
    from pathlib import Path

    from benchmark.stages.score import read_scores

    scores = read_scores(Path(summary["run_dir"]), summary["metric_sig"])
    kinds = dict(zip(scores["edit_type"], scores["status"], strict=True))
    assert kinds["bg_chg"] == "excluded" and kinds["style_chg"] == "excluded"
    ok = scores[scores["status"] == "ok"]
    assert len(ok) >= 1
    assert ok[ok["kind"] != 0]["orig_from_gt"].eq(1).all()  # the demo set's masks locate o1 in the original
    assert set(ok["S_region"].dropna()) <= {0, 1, 2}
    lb = pd.read_csv(tmp_path / "leaderboard.csv")
    assert {"BPM", "BPM_fixed", "S_semantic", "S_region"} <= set(lb.columns)


def test_box_of():
    m = np.zeros((5, 6), dtype=bool)
    m[1:3, 2:5] = True
    assert box_of(m) == (2, 1, 5, 3) and box_of(np.zeros((2, 2), bool)) is None


def test_ground_truth_masks_of_the_original_are_used_by_role():
    """`original_masks: queryset`: o1 and the reference come from the query set's masks (nothing is registered
    with the oracle for the original), matched by role even when the target and anchor share a class."""
    from benchmark.models.clip import load_clip

    oracle = OracleLocator()
    s = BpmSuite(clip=lambda device: load_clip("tiny", "ViT-B-16-quickgelu", "openai"), locator=lambda device: oracle,
                 device="cpu", original_masks="queryset")
    bg = scene()
    orig, m_t = square(bg, C, (200, 30, 30))
    edit, m_e = square(bg, (34, 34, 94, 94), (200, 30, 30))
    oracle.register(edit, "cup", m_e)
    cup = ObjectRef("1", "cup", mask="m.png")
    q = Query(id="g1", image="g.png", edit_type="obj_resize", target=cup, size_change="enlarge")
    r = score(s, _Loaded(q, original=orig, edit=edit, gt={"target": m_t}))["g1"]
    assert (r["status"], r["orig_from_gt"], r["S_size"]) == ("ok", 1, 1)
    # positional addition of a cup left of another cup: the reference is the anchor's mask, not the target's
    _, m_anchor = square(bg, (84, 44, 124, 84), (0, 0, 0))
    add_edit, m_new = square(bg, (4, 44, 44, 84), (200, 30, 30))
    oracle.register(add_edit, "cup", m_new)
    q2 = Query(id="g2", image="g.png", edit_type="obj_add", new_class="cup", relation="to the left of",
               anchor=ObjectRef("2", "cup", mask="a.png"), target=None)
    r2 = score(s, _Loaded(q2, original=bg, edit=add_edit, gt={"anchor": m_anchor, "target": m_new}))["g2"]
    assert (r2["status"], r2["S_position"]) == ("ok", 1)


@pytest.mark.parametrize("metrics", ["bpm", "augclip_llm"])
def test_weights_resolves_every_checkpoint_pinned(metrics):
    """`editmeter weights` lists the detector, SAM, CLIP and LLM checkpoints, hub models at pinned commits."""
    from omegaconf import OmegaConf

    from benchmark.commands.run import compose
    from benchmark.plan import weights as W

    cfg, _ = compose(["editor=identity", f"metrics={metrics}", "profile=pretrained"])
    found = W.resolve(read_plan(cfg), "identity")
    nodes = {f"metrics {p}" for p, n in W._walk(OmegaConf.to_container(cfg.metrics, resolve=True), "")
             if n.get("weights") == "pretrained"}
    assert {c.component for c in found} == nodes and all(c.kind != "unknown" for c in found)
    assert all(W._COMMIT.fullmatch(c.revision) for c in found if c.kind == "hf-model")
