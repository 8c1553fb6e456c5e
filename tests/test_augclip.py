"""AugCLIP: the arithmetic on constructed features (ideal edit, separation, clipped weights, identity edit), the
three attribute sources and their cache, and the suite end to end on the demo set with tiny random backbones."""

import json
import math

import numpy as np
import pytest
from conftest import run_demo

from benchmark.io.types import ObjectRef, Query
from benchmark.metrics.augclip import core
from benchmark.metrics.augclip.attributes import (
    AttributeCache,
    AttributeFileError,
    AttributeParseError,
    Attributes,
    FileExtractor,
    StructuredExtractor,
    parse_attribute_list,
)

RNG = np.random.default_rng(0)


def unit(x):
    x = np.asarray(x, np.float64)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def cluster(center, n, spread=0.1, rng=RNG):
    return unit(center + spread * rng.standard_normal((n, len(center))))


def features(d=16, n_s=5, n_t=6, spread=0.1, seed=0):
    """Source image + D_S near e0, target text + D_T near e1."""
    rng = np.random.default_rng(seed)
    e0, e1 = np.eye(d)[0], np.eye(d)[1]
    s = unit(e0 + spread * rng.standard_normal(d))
    anchor = unit(e1 + spread * rng.standard_normal(d))
    return s, anchor, cluster(e0, n_s, spread, rng), cluster(e1, n_t, spread, rng)


# -- arithmetic -----------------------------------------------------------------------------------------------

def test_attribute_weights_follow_the_definition():
    s = unit([[1, 0], [1, 1]])
    t = unit([[0, 1], [-1, 1]])
    a_s, a_t = core.attribute_weights(s, t)
    cs = lambda u, v: float(unit(u) @ unit(v))  # noqa: E731
    assert a_s[0] == pytest.approx(cs(s[0], s[1]) - cs(s[0], t[0]) - cs(s[0], t[1]))
    assert a_t[1] == pytest.approx(cs(t[1], t[0]) - cs(t[1], s[0]) - cs(t[1], s[1]))


def leaning_features(seed, d=16, n_s=5, n_t=6, spread=0.2, lean=0.6):
    """Like `features`, but the target set leans towards the source (cos ~0.5 between the centres), so the
    collision term moves the weights and with them the hyperplane."""
    rng = np.random.default_rng(seed)
    e0, e1 = np.eye(d)[0], unit(lean * np.eye(d)[0] + np.eye(d)[1])
    return (unit(e0 + spread * rng.standard_normal(d)), unit(e1 + spread * rng.standard_normal(d)),
            cluster(e0, n_s, spread, rng), cluster(e1, n_t, spread, rng))


def ideal_edit_by_hand(s, anchor, d_s, d_t, C=1.0, min_weight=1e-3):
    """The paper's ideal edit s + v written out from its definition, sharing nothing with `core` but sklearn's SVC:
    alpha(x) = sum of cs(x, u) over the other members u of x's set - sum of cs(x, w) over the opposite set,
    clipped from below at min_weight; a weighted linear SVM, source -1 / target +1; v = -(w.s + b) / |w|^2 w."""
    from sklearn.svm import SVC

    src, tgt = [s, *d_s], [anchor, *d_t]
    cs = lambda u, v: float(unit(u) @ unit(v))  # noqa: E731

    def alpha(x, i, own, other):
        return sum(cs(x, u) for j, u in enumerate(own) if j != i) - sum(cs(x, w) for w in other)

    weights = [alpha(x, i, src, tgt) for i, x in enumerate(src)] + [alpha(x, i, tgt, src) for i, x in enumerate(tgt)]
    svm = SVC(kernel="linear", C=C).fit(np.vstack(src + tgt), [-1] * len(src) + [1] * len(tgt),
                                       sample_weight=np.maximum(weights, min_weight))
    w, b = svm.coef_.ravel(), float(svm.intercept_[0])
    return s - (w @ s + b) / (w @ w) * w


def test_the_ideal_edit_scores_one():
    # the ideal edit comes from the definition, not from the code's own v: a flipped v, or weights without the
    # collision term, move the code's target away from it (to 0.92..0.98 and lower here)
    for seed in range(5):
        s, anchor, d_s, d_t = leaning_features(seed)
        ideal = ideal_edit_by_hand(s, anchor, d_s, d_t)
        # 1e-6: libsvm stops at its own tolerance, so two fits on rounding-different weights agree to ~1e-8
        assert core.augclip(s, ideal, anchor, d_s, d_t).score == pytest.approx(1.0, abs=1e-6)
        assert core.augclip(s, unit(ideal), anchor, d_s, d_t).score == pytest.approx(1.0, abs=1e-6)  # scale-free
        other = unit(ideal + 0.5 * RNG.standard_normal(len(s)))
        assert core.augclip(s, other, anchor, d_s, d_t).score < 1 - 1e-3


def test_the_hyperplane_separates_the_sets_and_v_lands_on_it():
    s, anchor, d_s, d_t = features(spread=0.15, seed=1)
    r = core.augclip(s, s, anchor, d_s, d_t, C=10.0)
    w, b = r.plane.w, r.plane.b
    src = np.vstack([s, d_s])
    tgt = np.vstack([anchor, d_t])
    assert (src @ w + b < 0).all() and (tgt @ w + b > 0).all()
    assert r.plane.misclassified == 0 and r.source_margin < 0
    assert float(w @ (s + r.v) + b) == pytest.approx(0.0, abs=1e-9)  # on the hyperplane
    # minimal: v is parallel to w (any other move onto the plane is longer)
    assert abs(core.cosine(r.v, w)) == pytest.approx(1.0, abs=1e-9)
    # an edit on the target side, near the source, beats an edit that became the target text outright
    toward = unit(s + 1.5 * r.v)
    assert core.augclip(s, toward, anchor, d_s, d_t, C=10.0).score > core.augclip(s, anchor, anchor, d_s, d_t, C=10.0).score


def test_negative_weights_are_clipped_and_counted():
    s, anchor, d_s, d_t = features()
    # two source attributes that look like the target set: their collision outweighs their importance
    d_s = np.vstack([d_s, cluster(np.eye(16)[1], 2, 0.05)])
    a_s, a_t = core.attribute_weights(np.vstack([s, d_s]), np.vstack([anchor, d_t]))
    expected = int((np.concatenate([a_s, a_t]) < 1e-3).sum())
    assert expected >= 2
    r = core.augclip(s, s, anchor, d_s, d_t, min_weight=1e-3)
    assert r.plane.n_clipped == expected
    assert math.isfinite(r.score)
    # a lone element in its set has no importance, only collision: clipped whenever it leans towards the other set
    lone_s = unit(s + 0.5 * anchor)
    a_lone, _ = core.attribute_weights(lone_s[None], np.vstack([anchor, d_t]))
    assert a_lone[0] == pytest.approx(-float((np.vstack([anchor, d_t]) @ lone_s).sum())) and a_lone[0] < 0
    lone = core.augclip(lone_s, lone_s, anchor, np.zeros((0, 16)), d_t)
    assert lone.plane.n_clipped >= 1 and lone.n_source == 1


def test_identity_edit_scores_the_cosine_between_source_and_its_move():
    """Documented behaviour: an unchanged image scores (1 + s.v) / |s + v| (1 only when v = 0)."""
    s, anchor, d_s, d_t = leaning_features(seed=2)
    ideal = ideal_edit_by_hand(s, anchor, d_s, d_t)  # s + v from the definition, not the code's v
    r = core.augclip(s, s, anchor, d_s, d_t)
    # 1e-3: libsvm's stopping tolerance leaves v uncertain by ~1e-4 between two fits (a flipped v is off by 0.3)
    assert r.score == pytest.approx(float(s @ ideal) / np.linalg.norm(ideal), abs=1e-3)
    assert r.score < 1 - 1e-3 and np.linalg.norm(r.v) > 0


def test_bad_settings_and_indistinguishable_sets():
    s, anchor, d_s, d_t = features()
    with pytest.raises(ValueError, match="min_weight"):
        core.augclip(s, s, anchor, d_s, d_t, min_weight=0)
    with pytest.raises(core.AugClipError, match="indistinguishable"):
        core.augclip(s, s, s, d_s, d_s)


# -- attributes -----------------------------------------------------------------------------------------------

def test_parse_attribute_list_is_robust():
    assert parse_attribute_list('Sure! ["A dog is large", "A dog is brown"] hope this helps') == \
        ("A dog is large", "A dog is brown")
    assert parse_attribute_list("OUTPUT: ['A cat is small', 'A cat is white',]") == ("A cat is small", "A cat is white")
    assert parse_attribute_list("[1, 2] then\n- a red car\n- a wet road\n") == ("a red car", "a wet road")
    assert parse_attribute_list('["a", "A", " a "]') == ("a",)  # duplicates go
    assert len(parse_attribute_list(json.dumps([f"x{i}" for i in range(40)]), max_items=5)) == 5
    for garbage in ("", "\n\n\n", "ÿÿ[[[", "[]", '["", " "]', "{'a': 1}"):
        with pytest.raises(AttributeParseError, match="no list of attributes"):
            parse_attribute_list(garbage)


def q_(**kw):
    base = dict(id="q1", image="images/a.png", edit_type="obj_rep", instruction="Replace the cup with a vase.",
                source_caption="a red cup on a table", target_caption="a red vase on a table",
                target=ObjectRef("1", "cup"), new_class="vase")
    return Query(**(base | kw))


def test_structured_extractor_uses_the_query_fields():
    ex = StructuredExtractor()
    a = ex.attributes(q_())
    assert "a cup" in a.source and "a red cup on a table" in a.source
    assert "a vase" in a.target and "a red vase on a table" in a.target
    b = ex.attributes(q_(edit_type="attr_chg", new_class=None, attribute_before="red", attribute_after="blue"))
    assert "a red cup" in b.source and "a blue cup" in b.target
    c = ex.attributes(Query(id="m", image="i.png", edit_type="free_form", instruction="turn the dog into a cat"))
    assert c.source == ("a dog",) and c.target == ("a cat", "turn the dog into a cat")  # BPM's rule parser
    bare = StructuredExtractor(use_instruction_parser=False)
    assert bare.attributes(Query(id="m", image="i.png", edit_type="free_form", instruction="make it pop")).target == \
        ("make it pop",)
    assert bare.signature != ex.signature and "rules-v1" in ex.signature
    assert ex.attributes(q_()) == a  # deterministic


def test_file_extractor_and_its_validation(tmp_path):
    p = tmp_path / "attrs.json"
    p.write_text(json.dumps({"extractor": "gpt-4v", "queries": {"q1": {"source": ["a cup"], "target": ["a vase"]}}}))
    ex = FileExtractor(p)
    assert ex.extract([q_(), q_(id="q2")]) == [Attributes(("a cup",), ("a vase",)), f"no attributes for query q2 in {p}"]
    assert ex.signature.startswith("file:gpt-4v|sha256:")
    p.write_text(json.dumps({"extractor": "gpt-4v", "queries": {"q1": {"source": "a cup", "target": []}}}))
    with pytest.raises(AttributeFileError, match=r"attrs.json: queries.q1.source must be a list"):
        FileExtractor(p)


def test_attribute_cache_roundtrip_staleness_and_validation(tmp_path):
    p = tmp_path / "cache.json"
    c = AttributeCache(p)
    a = Attributes(("a cup",), ("a vase",))
    c.put("sig", {q_(): a})
    assert AttributeCache(p).get("sig", q_()) == a
    assert AttributeCache(p).get("other-sig", q_()) is None
    assert AttributeCache(p).get("sig", q_(target_caption="changed")) is None  # the query changed: never stale
    p.write_text(json.dumps({"format": "editmeter-augclip-attribute-cache", "version": 1,
                             "entries": {"sig": {"q1": {"query": "x", "source": [3], "target": []}}}}))
    with pytest.raises(AttributeFileError, match=r"cache.json: entries\['sig'\]\['q1'\].source"):
        AttributeCache(p)


def test_tiny_llm_garbage_is_a_failure_and_good_output_parses(monkeypatch):
    from benchmark.metrics.augclip.llm import llm_signature, load_llm_extractor

    ex = load_llm_extractor("tiny", max_new_tokens=8)
    assert ex.signature == llm_signature("tiny", max_new_tokens=8)
    got = ex.extract([q_()])
    assert isinstance(got[0], str) and "no list of attributes" in got[0] and "source attributes" in got[0]
    monkeypatch.setattr(ex, "_generate", lambda prompts: ['["A cup is red"]', "- A vase is red\n- A vase is tall"])
    assert ex.extract([q_()]) == [Attributes(("A cup is red",), ("A vase is red", "A vase is tall"))]


# -- the suite ------------------------------------------------------------------------------------------------

def test_suite_on_the_demo_set(tmp_path):
    summary = run_demo(tmp_path, "identity", "metrics=augclip", "limit=14")
    df = __import__("pandas").read_csv(tmp_path / "leaderboard.csv")
    row = df.iloc[0]
    assert row["n_ok"] == 14 and math.isfinite(row["AugCLIP"]) and "clipped_weights" in df
    assert 0 <= row["clipped_queries"] <= 14
    from benchmark.stages.score import read_scores

    scores = read_scores(__import__("pathlib").Path(summary["run_dir"]), summary["metric_sig"])
    ok = scores[scores["status"] == "ok"]
    assert len(ok) == 14 and ok["clipped_weights"].ge(0).all() and ok["target_text_field"].eq(0).all()
    assert (ok["AugCLIP"] < 1).all()  # identity edits: the source is never its own ideal edit (v != 0)
    assert (ok["n_target_set"] > 1).all() and (ok["n_source_set"] > 1).all()


FILE_EXTRACTOR = "benchmark.metrics.augclip.attributes.FileExtractor"


def test_extractor_is_part_of_the_signature(tmp_path):
    from benchmark.commands.run import compose

    p = tmp_path / "a.json"
    p.write_text(json.dumps({"extractor": "x", "queries": {}}))
    sigs = set()
    for extra in (["metrics=augclip"], ["metrics=augclip", f"metrics.augclip.extractor._target_={FILE_EXTRACTOR}",
                                        f"+metrics.augclip.extractor.path={p}"], ["metrics=augclip_llm"]):
        cfg, _ = compose(["profile=tiny", *extra])
        from hydra.utils import instantiate

        suite = instantiate(cfg.metrics.augclip)
        sigs.add(json.dumps(suite.info.identity))
    assert len(sigs) == 3


def test_a_corrupt_cache_fails_before_any_work(tmp_path):
    from hydra.utils import instantiate

    from benchmark.commands.run import compose

    bad = tmp_path / "c.json"
    bad.write_text("{not json")
    cfg, _ = compose(["metrics=augclip", "profile=tiny", f"metrics.augclip.attribute_cache={bad}"])
    with pytest.raises(Exception) as info:  # Hydra wraps what the constructor raises
        instantiate(cfg.metrics.augclip)
    cause = info.value if isinstance(info.value, AttributeFileError) else info.value.__cause__
    assert isinstance(cause, AttributeFileError) and "c.json: unreadable attribute cache" in str(cause)


def test_summary_counts_clipped_weights():
    import pandas as pd

    from benchmark.metrics.augclip.summary import summarize

    out = summarize(pd.DataFrame({"AugCLIP": [0.1, 0.2, 0.3], "clipped_weights": [0, 2, 1]}), {}, {}, overall=True)
    assert out == {"clipped_queries": 2, "clipped_weights": 3}


def test_target_anchor_edit_puts_the_edit_in_the_target_set():
    """`target_anchor: edit` (the paper's App. B code) uses E(edit) instead of E(target text) in the target set."""
    from benchmark.metrics.augclip.suite import AugClipSuite

    def suite(anchor):
        return AugClipSuite(clip=lambda device: None, extractor=StructuredExtractor, target_anchor=anchor,
                            device="cpu")

    s, text, d_s, d_t = features(seed=3)
    e = unit(s + 0.3 * text)
    a, b = suite("text").score_features(s, e, text, d_s, d_t), suite("edit").score_features(s, e, text, d_s, d_t)
    assert a["AugCLIP"] != pytest.approx(b["AugCLIP"])
    assert b["AugCLIP"] == pytest.approx(core.augclip(s, e, e, d_s, d_t).score)
    with pytest.raises(ValueError, match="target_anchor"):
        suite("caption")
