"""The EditVal suite: OWL-ViT stand-ins (model pair, best box, batching), the demo world's EditVal queries with the
oracle detector (oracle edit passes every rule, identity fails every one and keeps DINO = 1), FID per type from
per-row features (shards merge), and the pipeline's tables."""

import math

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import ROOT
from test_model_pairs import config_diff, meta, switch_diff

from benchmark.io import editval_rules as R
from benchmark.metrics.editval.suite import BOX_PREFIX, COLUMN_INFO, FID_EDIT, FID_SOURCE, EditValSuite
from benchmark.plan.config import read_plan
from benchmark.querysets.demo import EDITVAL_DEMO_TYPES, load_editval_demo

DEMO = ROOT / "datasets" / "demo"


@pytest.fixture(scope="module")
def ev_qs():
    return load_editval_demo(str(DEMO))


def _suite(detector="oracle", **kw):
    from functools import partial

    from benchmark.metrics.editval.oracle import load_oracle_detector
    from benchmark.models.dino_v1 import load_dino_v1
    from benchmark.models.inception import load_fid_extractor
    from benchmark.models.owlvit import load_owlvit

    det = partial(load_oracle_detector, root=str(DEMO)) if detector == "oracle" else \
        partial(load_owlvit, weights="tiny") if detector == "owlvit" else detector
    return EditValSuite(detector=det, dino=partial(load_dino_v1, weights="tiny"),
                        fid=partial(load_fid_extractor, weights="tiny"), device="cpu", **kw)


def _score(suite, qs, paths, queries=None):
    queries = list(queries or qs.queries)
    rows = [r for b in suite.score_queries(qs, queries, paths(queries), work_dir=None, progress=False) for r in b]
    return pd.DataFrame(rows).set_index("query_id").loc[[q.id for q in queries]]


# -- OWL-ViT ------------------------------------------------------------------------------------------------

OWL_SIZES = {"text_config.hidden_size", "text_config.intermediate_size", "text_config.num_hidden_layers",
             "text_config.num_attention_heads", "vision_config.hidden_size", "vision_config.intermediate_size",
             "vision_config.num_hidden_layers", "vision_config.num_attention_heads", "vision_config.image_size",
             "projection_dim"}


def test_owlvit_pair_only_sizes_differ():
    from transformers import OwlViTConfig, OwlViTForObjectDetection

    from benchmark.models.owlvit import BASE_CONFIG, BASE_PROCESSOR, TOKENIZER_MAX_LENGTH, load_owlvit

    real = meta(lambda: OwlViTForObjectDetection(OwlViTConfig(**BASE_CONFIG)))
    tiny = load_owlvit("tiny")
    assert config_diff(real.config.to_dict(), tiny.model.config.to_dict(), OWL_SIZES) == []
    assert switch_diff(real, tiny.model) == []
    assert real.config.text_config.hidden_act == "quick_gelu" == tiny.model.config.vision_config.hidden_act
    ip = tiny.processor.image_processor
    for k, v in BASE_PROCESSOR.items():
        if k not in ("size", "crop_size"):
            got = getattr(ip, k)
            assert (list(got) if isinstance(got, tuple | list) else got) == v, k
    side = tiny.model.config.vision_config.image_size
    assert (ip.size["height"], ip.size["width"]) == (side, side)   # the input follows the tower, as 768 does
    tok = tiny.processor.tokenizer
    assert (tok.model_max_length, tok.pad_token, tok.pad_token_id) == (TOKENIZER_MAX_LENGTH, "!", 0)
    assert tok.convert_tokens_to_ids(["<|startoftext|>", "<|endoftext|>"]) == [49406, 49407]


@pytest.mark.weights
def test_pinned_owlvit_files_match_the_written_config_and_detect_on_real_weights():
    """Checks the constants `random` / tiny are built from against the pinned hub files, and that the real model
    runs through the detector (needs the weights: `editmeter weights metrics=editval`)."""
    from PIL import Image
    from transformers import OwlViTConfig

    from benchmark.models.owlvit import BASE_CONFIG, BASE_PROCESSOR, OWLVIT_ID, OWLVIT_REVISION, load_owlvit

    real = OwlViTConfig.from_pretrained(OWLVIT_ID, revision=OWLVIT_REVISION)
    assert config_diff(OwlViTConfig(**BASE_CONFIG).to_dict(), real.to_dict(), set()) == []
    det = load_owlvit("pretrained")
    ip = det.processor.image_processor
    for k, v in BASE_PROCESSOR.items():
        got = getattr(ip, k)
        got = dict(got) if k in ("size", "crop_size") else list(got) if isinstance(got, tuple | list) else got
        assert got == v, k
    assert (det.processor.tokenizer.model_max_length, det.processor.tokenizer.pad_token) == (16, "!")
    (res,) = det.detect([Image.open(DEMO / "images" / "demo000.png").convert("RGB")], [["stop sign"]])
    assert 0 <= res["stop sign"][0] <= 1


def test_best_per_query_takes_the_best_box_as_corners_in_pixels():
    from benchmark.models.owlvit import best_per_query

    logits = torch.tensor([[0.0, 3.0], [5.0, -1.0], [1.0, 2.0]])      # query 0: box 1 best; query 1: box 0
    boxes = torch.tensor([[0.5, 0.5, 0.2, 0.2], [0.5, 0.25, 0.2, 0.1], [0.9, 0.9, 0.1, 0.1]])
    (s0, b0), (s1, b1) = best_per_query(logits, boxes, (200, 400))    # (height, width)
    assert s0 == pytest.approx(torch.sigmoid(torch.tensor(5.0)).item()) and s1 == pytest.approx(0.9526, abs=1e-4)
    assert b0 == pytest.approx((160.0, 40.0, 240.0, 60.0))            # y from the top, scaled by the height
    assert b1 == pytest.approx((160.0, 80.0, 240.0, 120.0))
    # not the last box above a threshold: box 2 scores 0.73 / 0.88 for the two queries, both above 0.1


def test_owlvit_detect_is_batch_and_company_invariant_and_asks_whole_names():
    from PIL import Image

    from benchmark.models.owlvit import load_owlvit

    det = load_owlvit("tiny")
    rng = np.random.default_rng(0)
    ims = [Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)) for h, w in ((64, 96), (80, 80))]
    seen = []
    proc = det.processor

    class Spy:
        def __call__(self, **kw):
            seen.extend(t for ts in kw["text"] for t in ts)
            return proc(**kw)

    det.processor = Spy()
    try:
        together = det.detect(ims, [["wine glass", "stop sign"], ["cup"]])
        alone = det.detect(ims[:1], [["stop sign"]])
    finally:
        det.processor = proc
    assert "a photo of a wine glass" in seen and "a photo of a stop sign" in seen
    assert together[0]["stop sign"][0] == pytest.approx(alone[0]["stop sign"][0], abs=1e-5)
    assert together[0]["stop sign"][1] == pytest.approx(alone[0]["stop sign"][1], abs=1e-3)
    for d in together:
        for score, box in d.values():
            assert 0 <= score <= 1 and R.check_box(box)


# -- the demo world's EditVal queries ---------------------------------------------------------------------

def test_demo_has_every_rule_type_with_exact_ground_truth(ev_qs):
    types = {q.edit_type for q in ev_qs.queries}
    assert set(R.RULE_TYPES) <= types and types <= set(EDITVAL_DEMO_TYPES)
    assert {q.relation for q in ev_qs.queries if q.edit_type == "positional_addition"} == {"left", "right", "below",
                                                                                            "on top"}
    assert {q.relation for q in ev_qs.queries if q.edit_type == "position_replacement"} == {"left", "right", "center"}
    # two or more queries on distinct sources per type, so every type has an FID
    for t in types:
        assert len({q.image_id for q in ev_qs.queries if q.edit_type == t}) >= 2, t


def test_demo_keeps_the_hatie_queries_and_demo_mini(demo_qs):
    from benchmark.querysets.io import load_queryset

    hatie = [q for q in demo_qs.queries if q.edit_type not in EDITVAL_DEMO_TYPES]
    assert len(hatie) == 112 and list(demo_qs.queries[:112]) == hatie   # appended after them
    mini = load_queryset(DEMO, name="demo_mini", first=14)
    assert [q.id for q in mini.queries] == [q.id for q in hatie[:14]]


def test_oracle_edit_passes_every_rule_and_identity_fails_every_one(ev_qs):
    suite = _suite()
    oracle = _score(suite, ev_qs, lambda qs: [ev_qs.path(q.target_image) for q in qs])
    identity = _score(suite, ev_qs, lambda qs: [ev_qs.path(q.image) for q in qs])
    ruled = [q.id for q in ev_qs.queries if R.has_rule(q)]
    unruled = [q.id for q in ev_qs.queries if not R.has_rule(q)]
    assert (oracle["status"] == "ok").all() and (identity["status"] == "ok").all()
    assert (oracle.loc[ruled, "accuracy"] == 1).all(), oracle.loc[ruled, "accuracy"]
    assert (identity.loc[ruled, "accuracy"] == 0).all(), identity.loc[ruled, "accuracy"]
    assert oracle.loc[unruled, "accuracy"].isna().all() and identity.loc[unruled, "accuracy"].isna().all()
    # identity: DINO context exactly preserved; a real change lowers it
    assert np.allclose(identity["DINO_context"], 1.0, atol=1e-9)
    assert (oracle["DINO_context"] < 1).all()
    # detections are recorded per role, in the original's pixel frame
    row = oracle.loc["demo000-ev-positional_addition"]
    cls, new = row[BOX_PREFIX + R.CLASS_EDIT], row[BOX_PREFIX + R.NEW_EDIT]
    assert R.center(tuple(new))[1] > R.center(tuple(cls))[1]   # "below": the cake's centre has the larger y
    absent = identity.loc["demo000-ev-positional_addition"]
    assert np.isnan(absent[BOX_PREFIX + R.NEW_EDIT]).all() and absent["raw_score_" + R.NEW_EDIT] == 0


def test_oracle_detector_refuses_images_it_cannot_read(ev_qs, tmp_path):
    from PIL import Image

    q = ev_qs.queries[0]
    noisy = np.asarray(Image.open(ev_qs.path(q.target_image)).convert("RGB")).copy()
    noisy[0, 0] ^= 1   # one bit off an exact render
    Image.fromarray(noisy).save(tmp_path / "e.png")
    row = _score(_suite(), ev_qs, lambda qs: [tmp_path / "e.png"], [q]).iloc[0]
    assert row["status"] == "failed" and "oracle detector reads only exact renders" in row["reason"]


def test_edit_boxes_are_moved_into_the_original_frame(ev_qs, tmp_path):
    """A 2x larger edit: its boxes are halved before the rules compare them with the original's."""
    from PIL import Image

    class Fixed:  # test double: the same relative box in every image
        def detect(self, images, names):
            return [{n: (0.9, (0.25 * im.width, 0.5 * im.height, 0.5 * im.width, 0.75 * im.height)) for n in ns}
                    for im, ns in zip(images, names, strict=True)]

    q = next(q for q in ev_qs.queries if q.edit_type == "size")
    src = Image.open(ev_qs.path(q.image)).convert("RGB")
    src.resize((2 * src.width, 2 * src.height)).save(tmp_path / "big.png")
    row = _score(_suite(lambda device: Fixed()), ev_qs, lambda qs: [tmp_path / "big.png"], [q]).iloc[0]
    w, h = src.size
    assert tuple(row[BOX_PREFIX + R.CLASS_EDIT]) == pytest.approx((0.25 * w, 0.5 * h, 0.5 * w, 0.75 * h))
    assert row["accuracy"] == 0  # the same box relative to the image: not resized


def test_scores_do_not_depend_on_batching(ev_qs):
    from benchmark.metrics.features import shared_cache

    paths = lambda qs: [ev_qs.path(q.target_image) for q in qs]  # noqa: E731
    shared_cache().clear()  # a cold feature cache for each run: both batchings really encode
    big = _score(_suite(), ev_qs, paths)
    shared_cache().clear()
    small = _score(_suite(batch_size=1, chunk_size=1, cache_size=1), ev_qs, paths)
    assert big["accuracy"].equals(small["accuracy"])
    # float32 features at batch sizes 8 and 1: 0 apart (features cached per image), measured here
    # (tests/helpers/spread_probe.py, the project's 2-core machine); the tolerances are ~100 float32 ulps of
    # cosines (<= 1) and of FID features (~1-10)
    assert np.allclose(big["DINO_context"], small["DINO_context"], atol=1e-5)
    assert np.allclose(np.stack(big[FID_EDIT]), np.stack(small[FID_EDIT]), atol=1e-4)


def test_suite_with_the_tiny_owlvit_runs(ev_qs):
    rows = _score(_suite("owlvit"), ev_qs, lambda qs: [ev_qs.path(q.target_image) for q in qs], ev_qs.queries[:6])
    assert (rows["status"] == "ok").all()
    ruled = rows[[R.has_rule(q) for q in ev_qs.queries[:6]]]
    assert ruled["accuracy"].isin([0.0, 1.0]).all() and len(ruled)
    assert ruled.filter(like="raw_score_").notna().any().all()


# -- FID per type and the declared columns --------------------------------------------------------------------

def _fid_rows(n_types=2, per_type=4, dim=3, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for t in range(n_types):
        for i in range(per_type):
            rows.append({"query_id": f"q{t}{i}", "image_id": f"img{i}", "edit_type": f"type{t}",
                         FID_EDIT: rng.normal(size=dim) + t, FID_SOURCE: rng.normal(size=dim)})
    return pd.DataFrame(rows)


def test_fid_per_type_merges_shards_and_averages_types():
    from benchmark.metrics.editval.summary import fid_by_type, summarize
    from benchmark.metrics.fid import fid

    df = _fid_rows()
    shards = pd.concat([df.iloc[::2], df.iloc[1::2]]).sort_values("query_id")
    assert fid_by_type(shards) == pytest.approx(fid_by_type(df.sort_values("query_id")))
    per = fid_by_type(df)
    t0 = df[df["edit_type"] == "type0"]
    assert per["type0"] == pytest.approx(fid(np.stack(t0.drop_duplicates("image_id")[FID_SOURCE]), np.stack(t0[FID_EDIT])))
    out = summarize(df, {}, {}, overall=True)
    assert out["FID_type"] == pytest.approx(np.mean(list(per.values()))) and out["FID_type_types"] == 2
    one = summarize(df.iloc[:1], {}, {}, overall=False)   # one edit: undefined, not zero
    assert math.isnan(one["FID_type"]) and one["FID_type_types"] == 0


def test_columns_are_declared():
    assert EditValSuite.columns == ("accuracy", "DINO_context")
    assert {c: v[0] for c, v in COLUMN_INFO.items()} == {"accuracy": True, "DINO_context": True, "FID_type": False}
    from benchmark.tables.summaries import known_suites

    assert "editval" in known_suites()


def test_configs_compose_and_weights_lists_owlvit():
    from hydra.utils import instantiate

    from benchmark.commands.run import compose
    from benchmark.plan.weights import resolve

    cfg, _ = compose(["metrics=editval", "profile=pretrained", "queryset=demo_editval"])
    ids = {c.source: c.revision for c in resolve(read_plan(cfg))}
    assert ids["google/owlvit-base-patch32"] == "cbc355fb364588351c5d51c7f74465e8e7ec6f72"
    assert "facebook/dino-vitb16" in ids
    cfg, _ = compose(["metrics=editval_oracle", "profile=tiny"])
    suite = instantiate(cfg.metrics.editval)
    assert suite.settings == R.RuleSettings() and "load_oracle_detector" in suite.components()["detector"]


def test_pipeline_tables_for_oracle_and_identity(tmp_path):
    from benchmark.commands.run import compose, run_pipeline

    for editor in ("oracle", "identity"):
        cfg, choices = compose([f"editor={editor}", "queryset=demo_editval", "profile=tiny", "metrics=editval_oracle",
                                f"paths.results={tmp_path}", "progress=false", "aggregate.bootstrap_resamples=50"])
        run_pipeline(cfg, choices["editor"])
    lb = pd.read_csv(tmp_path / "leaderboard.csv").set_index("editor")
    assert lb["complete"].all() and (lb["n_ok"] == 21).all()
    assert lb.loc["oracle", "accuracy"] == 1 and lb.loc["identity", "accuracy"] == 0
    assert lb.loc["identity", "DINO_context"] == pytest.approx(1.0) and lb.loc["oracle", "FID_type"] > 0
    assert lb.loc["oracle", "accuracy_n"] == sum(R.has_rule(q) for q in load_editval_demo(str(DEMO)).queries)
    by_type = pd.read_csv(tmp_path / "leaderboard_by_type.csv")
    assert by_type["FID_type"].notna().all()
    metrics = pd.read_csv(tmp_path / "leaderboard_metrics.csv").set_index("metric")
    assert not metrics.loc["FID_type", "higher_is_better"] and metrics.loc["accuracy", "higher_is_better"]


def test_real_shaped_editval_set_with_the_tiny_owlvit(tmp_path):
    """The EditVal builder's hand-made set (all 13 types, COCO-style names): every query is scored, rule types get
    0 / 1, the others NaN, and the detector is asked for whole natural names."""
    from functools import partial

    from test_editval_builder import fixture

    from benchmark.models.owlvit import load_owlvit
    from benchmark.querysets.editval import build
    from benchmark.querysets.io import load_queryset

    ev, ann, images = fixture(tmp_path)
    build(ev, ann, tmp_path / "out", images_dir=images, progress=False)
    qs = load_queryset(tmp_path / "out")
    asked = []
    det = load_owlvit("tiny")

    class Spy:
        def detect(self, images, names):
            asked.extend(n for ns in names for n in ns)
            return det.detect(images, names)

    rows = _score(_suite(partial(lambda device: Spy())), qs, lambda q: [qs.path(x.image) for x in q])
    assert (rows["status"] == "ok").all()
    ruled = [R.has_rule(q) for q in qs.queries]
    assert rows.loc[ruled, "accuracy"].isin([0.0, 1.0]).all() and rows.loc[[not r for r in ruled], "accuracy"].isna().all()
    assert {"bench", "bag", "cup", "ball", "chair", "cushion"} <= set(asked) and not any("_" in n for n in asked)
    assert np.allclose(rows["DINO_context"], 1.0)   # identity edits
