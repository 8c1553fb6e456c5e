"""The VLM judge (metrics=judge, docs/judge.md): score readout, VIEScore arithmetic, batching, determinism, cache,
signature, bf16 on CPU, the pipeline and meta-evaluation, all on the tiny Qwen2.5-VL (same classes, random weights)."""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from benchmark.metrics.judge import prompts as judge_prompts
from benchmark.metrics.judge.suite import N_SCORES, JudgeSuite, _Loaded, to_judge_input
from benchmark.models.vlm import (
    BASE_CONFIGS,
    PINNED_REVISIONS,
    TINY_TEXT,
    TINY_VISION,
    VLM_ID,
    ScoreReader,
    expected_and_argmax,
    judge_size,
    load_score_reader,
)
from benchmark.plan.config import read_plan

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "datasets" / "demo"
RES = 56  # test resolution: 2 x 2 merged patches per image keeps the tiny model fast


@pytest.fixture(scope="module", autouse=True)
def _one_thread(single_thread_torch):
    yield


def _suite(dtype: str = "float32", **kw) -> JudgeSuite:
    kw.setdefault("resolution", RES)
    return JudgeSuite(vlm=functools.partial(load_score_reader, weights="tiny", dtype=dtype), device="cpu", **kw)


@functools.lru_cache(maxsize=1)
def _items(n: int = 4) -> tuple:
    """The first n demo queries, each with its ground-truth target as the edit (and one identity edit)."""
    from benchmark.querysets.io import load_queryset

    qs = load_queryset(DEMO)
    out = []
    for i, q in enumerate(qs.queries[:n]):
        src = Image.open(qs.path(q.image)).convert("RGB")
        edit = src if i == 0 else Image.open(qs.path(q.target_image)).convert("RGB")
        out.append(_Loaded(q, to_judge_input(src, RES), to_judge_input(edit, RES)))
    return tuple(out)


def _clear_cache():
    from benchmark.metrics.features import shared_cache

    shared_cache().clear()


# ---------------------------------------------------------------------------------------------------- readout
class _Tok:
    def encode(self, text, add_special_tokens=False):
        return [{"<|im_end|>": 12}.get(text, ord(text) - ord("0") if text.isdigit() else 99)]


class _Proc:
    tokenizer = _Tok()


def _dist(v: int, **mass: float) -> torch.Tensor:
    d = torch.zeros(1, v, dtype=torch.float64)
    for k, p in mass.items():
        d[0, int(k.removeprefix("t"))] = p
    return d


def test_readout_reads_every_score_0_to_10_exactly():
    r = ScoreReader(None, _Proc(), name="x")  # digits are ids 0..9, <|im_end|> is 12, "10" is "1" then "0"
    end, zero = {"t12": 1.0}, {"t0": 1.0}
    for k in range(11):
        first = _dist(20, **{f"t{1 if k in (1, 10) else k}": 1.0})
        p, mass = r.readout(first, _dist(20, **(zero if k == 10 else end)))
        assert p.shape == (1, N_SCORES) and p[0, k] == 1.0 and float(mass) == 1.0
    # mass outside the digits is renormalised away and reported; "1" splits by the second position
    p, mass = r.readout(_dist(20, t1=0.3, t5=0.2, t15=0.5), _dist(20, t0=0.25, t12=0.25, t15=0.5))
    assert float(mass) == pytest.approx(0.5)
    assert p[0].tolist() == pytest.approx([0, 0.3, 0, 0, 0, 0.4, 0, 0, 0, 0, 0.3])
    ev, am = expected_and_argmax(p)
    assert float(ev) == pytest.approx(0.3 * 1 + 0.4 * 5 + 0.3 * 10) and int(am) == 5


def test_readout_of_random_distributions_is_a_distribution():
    r = ScoreReader(None, _Proc(), name="x")
    g = torch.Generator().manual_seed(0)
    first = torch.softmax(torch.randn(64, 30, generator=g, dtype=torch.float64), -1)
    second = torch.softmax(torch.randn(64, 30, generator=g, dtype=torch.float64), -1)
    p, mass = r.readout(first, second)
    assert torch.allclose(p.sum(1), torch.ones(64, dtype=torch.float64)) and (p >= 0).all()
    assert torch.allclose(mass, first[:, :10].sum(1))
    ev, am = expected_and_argmax(p)
    assert torch.allclose(ev, (p * torch.arange(11, dtype=torch.float64)).sum(1))
    assert ((ev >= 0) & (ev <= 10)).all() and torch.equal(am, p.argmax(1))


# -------------------------------------------------------------------------------------------- the tiny judge
def test_tiny_judge_scores_follow_viescore():
    _clear_cache()
    suite = _suite()
    items = list(_items())
    rows = suite._score_chunk(items)
    assert [r["query_id"] for r in rows] == [it.query.id for it in items] and all(r["status"] == "ok" for r in rows)
    jobs = [(q, suite.request(it.query), [it.source, it.edit] if q.with_source else [it.edit])
            for it in items for q in suite.prompts.questions]
    probs = torch.stack(suite.judge(jobs))[:, :N_SCORES]
    assert torch.allclose(probs.sum(1), torch.ones(len(jobs), dtype=torch.float64))
    ks = torch.arange(11, dtype=torch.float64)
    for n, row in enumerate(rows):
        sub = {"SC": [], "PQ": []}
        for j, q in enumerate(suite.prompts.questions):
            p = probs[n * 4 + j]
            assert row[q.key] == pytest.approx(float((p * ks).sum()), abs=1e-12) and 0 <= row[q.key] <= 10
            a = row[f"{q.key}_argmax"]
            assert a == int(a) and 0 <= a <= 10 and a == int(p.argmax())
            sub[q.criterion].append((row[q.key], a))
        for suffix, i in (("", 0), ("_argmax", 1)):
            sc, pq = min(v[i] for v in sub["SC"]), min(v[i] for v in sub["PQ"])
            assert row[f"G_SC{suffix}"] == sc and row[f"G_PQ{suffix}"] == pq
            assert row[f"G_O{suffix}"] == pytest.approx(math.sqrt(sc * pq))
        assert 0 < row["score_mass"] <= 1


def test_batch_size_two_runs_and_cache_hits_give_the_same_scores():
    from benchmark.metrics.features import shared_cache

    cols = _suite().columns
    _clear_cache()
    one = _suite(batch_size=1)._score_chunk(list(_items()))
    _clear_cache()
    four = _suite(batch_size=4)._score_chunk(list(_items()))
    for a, b in zip(one, four, strict=True):
        for c in cols:
            assert a[c] == pytest.approx(b[c], abs=1e-4), c
    _clear_cache()
    first = _suite(batch_size=4)._score_chunk(list(_items()))
    assert first == four  # a fresh process (empty cache) judges bit for bit as before
    calls = sum(shared_cache().forward_calls.values())
    again = _suite(batch_size=4)._score_chunk(list(_items()))  # every judgement now a cache hit
    assert sum(shared_cache().forward_calls.values()) == calls and again == first


def test_bf16_on_cpu_takes_dtype_and_device_from_the_model():
    _clear_cache()
    suite = _suite(dtype="bfloat16")
    rows = suite._score_chunk(list(_items(2)))
    assert suite.reader.model.dtype == torch.bfloat16 and suite.reader.dtype == "bfloat16"
    assert all(r["status"] == "ok" and 0 <= r["G_O"] <= 10 for r in rows)


def test_no_request_is_a_failure_row_not_an_exception():
    from dataclasses import replace

    it = _items(1)[0]
    bare = _Loaded(replace(it.query, instruction="", target_caption=""), it.source, it.edit)
    rows = _suite()._score_chunk([bare, it])
    assert rows[0]["status"] == "failed" and "no instruction" in rows[0]["reason"] and rows[1]["status"] == "ok"


# -------------------------------------------------------------------------------------- identity and config
def _signature(*overrides: str) -> str:
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from benchmark.commands.run import compose
    from benchmark.plan.config import metric_signature

    cfg, _ = compose(["metrics=judge", "profile=tiny", *overrides])
    suite = instantiate(cfg.metrics.judge)
    return metric_signature(OmegaConf.to_container(cfg.metrics, resolve=True), {"judge": suite.info})


def test_prompt_version_resolution_dtype_and_model_change_the_signature(monkeypatch):
    base = _signature()
    assert _signature("metrics.judge.batch_size=2", "metrics.judge.chunk_size=3") == base  # speed only
    changed = {_signature("metrics.judge.resolution=224"), _signature("metrics.judge.vlm.dtype=float32"),
               _signature("metrics.judge.vlm.model_id=Qwen/Qwen2.5-VL-3B-Instruct")}
    v2 = judge_prompts.Prompts("v2", judge_prompts.V1.questions, "Request: {text}", judge_prompts.V1.caption_request)
    monkeypatch.setitem(judge_prompts.PROMPT_SETS, "v2", v2)
    changed.add(_signature("metrics.judge.prompt_version=v2"))
    # a reworded prompt under an unchanged version still changes the identity (its digest)
    monkeypatch.setitem(judge_prompts.PROMPT_SETS, "v1", v2.__class__("v1", v2.questions, v2.instruction_request,
                                                                      v2.caption_request))
    changed.add(_signature())
    assert base not in changed and len(changed) == 5


def test_settings_are_checked_before_any_work():
    with pytest.raises(ValueError, match="multiple of 28"):
        _suite(resolution=500)
    with pytest.raises(ValueError, match="unknown judge prompt version 'v9'"):
        _suite(prompt_version="v9")
    with pytest.raises(ValueError, match="revision=<40-hex"):
        load_score_reader(weights="pretrained", model_id="someone/other-vlm")
    with pytest.raises(ValueError, match="judge dtype"):
        load_score_reader(weights="tiny", dtype="int8")
    assert judge_size(512, 256, 448) == (448, 224) and judge_size(100, 1000, 56) == (28, 56)


def test_tiny_differs_from_the_real_config_only_in_sizes():
    from benchmark.models.vlm import _TEXT_COMMON, load_vlm

    model, proc, _ = load_vlm("tiny", dtype="float32")
    real = BASE_CONFIGS[VLM_ID]
    text, vision = model.config.text_config, model.config.vision_config
    # vocabulary: the byte tokenizer's (a size); rope_*: stored as rope_parameters (checked below); sliding_window:
    # transformers stores None when use_sliding_window is false
    sizes = {"vocab_size", "tie_word_embeddings", "rope_scaling", "sliding_window", "rope_theta"}
    for k, v in {**_TEXT_COMMON, **real["text"]}.items():
        if k not in TINY_TEXT and k not in sizes:
            assert getattr(text, k) == v, k
    for k, v in real["vision"].items():
        if k not in TINY_VISION:
            assert list(np.atleast_1d(getattr(vision, k))) == list(np.atleast_1d(v)), k
    assert text.rope_parameters["rope_theta"] == 1e6 and vision.out_hidden_size == text.hidden_size
    assert type(model).__name__ == "Qwen2_5_VLForConditionalGeneration"
    assert type(proc).__name__ == "Qwen2_5_VLProcessor" and proc.image_processor.merge_size == 2
    assert [proc.tokenizer.encode(str(d)) for d in range(10)] == [[15 + d] for d in range(10)]  # Qwen's digit ids


def test_weights_lists_the_pinned_judge_checkpoint():
    from benchmark.commands.run import compose
    from benchmark.plan.weights import resolve

    for extra, (mid, rev) in (([], (VLM_ID, PINNED_REVISIONS[VLM_ID])),
                              (["metrics.judge.vlm.model_id=Qwen/Qwen2.5-VL-3B-Instruct",
                                "metrics.judge.vlm.revision=null"],
                               ("Qwen/Qwen2.5-VL-3B-Instruct", PINNED_REVISIONS["Qwen/Qwen2.5-VL-3B-Instruct"]))):
        cfg, _ = compose(["editor=identity", "metrics=judge", "profile=pretrained", *extra])
        cks = [c for c in resolve(read_plan(cfg), "identity") if c.component.startswith("metrics judge")]
        assert [(c.kind, c.source, c.revision) for c in cks] == [("hf-model", mid, rev)]


# ---------------------------------------------------------------------------------------- pipeline, metaeval
def test_editmeter_run_scores_every_query_and_reruns_identically(tmp_path, restore_logging):
    import pandas as pd

    from benchmark.commands.run import compose, run_pipeline
    from benchmark.stages.score import read_scores

    scores = []
    for i in range(2):  # a second results folder: nothing reused, the same judge scores
        _clear_cache()
        cfg, ch = compose(["editor=identity", "queryset=demo_mini", "profile=tiny", "metrics=judge", "limit=4",
                           f"metrics.judge.resolution={RES}", f"paths.results={tmp_path / str(i)}", "progress=false",
                           "aggregate.bootstrap_resamples=100"])
        summary = run_pipeline(cfg, ch["editor"])
        st = summary["scores"]["judge"]
        assert st.failed_total == 0 and st.computed == 4
        df = read_scores(Path(summary["run_dir"]), summary["metric_sig"]).sort_values("query_id")
        scores.append(df[["query_id", "G_O", "G_SC", "G_PQ", "G_O_argmax"]].reset_index(drop=True))
        board = pd.read_csv(tmp_path / str(i) / "leaderboard.csv")
        assert board.loc[0, "n_ok"] == 4 and 0 <= board.loc[0, "G_O"] <= 10 and "score_mass" in board
    pd.testing.assert_frame_equal(scores[0], scores[1], check_exact=True)


def test_metaeval_sees_the_judge_columns(tmp_path, restore_logging):
    from benchmark.commands.cli import main

    modified = tmp_path / "modified"
    modified.mkdir()
    lines = (DEMO / "queries.jsonl").read_text().splitlines()[:2]
    for q in map(json.loads, lines):
        src = np.asarray(Image.open(DEMO / q["image"]).convert("RGB"))
        Image.fromarray(255 - src).save(modified / f"{q['id']}.png")
    # a `metrics.<suite>.<key>=` override reaches the sets that hold the suite (judge), and is checked against them
    assert main(["metaeval", "gt-selection", "queryset=demo_mini", "profile=tiny", "limit=2",
                 f"paths.results={tmp_path / 'results'}", "progress=false", f"metrics.judge.resolution={RES}",
                 "--metrics", "judge", "--resamples", "50", "--modified", str(modified)]) == 0
    import pandas as pd

    table = pd.read_csv(next((tmp_path / "results" / "metaeval").glob("gt-selection-*.csv"))).set_index("metric")
    assert {"judge/G_O", "judge/G_SC", "judge/G_PQ", "judge/G_O_argmax"} <= set(table.index)
    assert (table.loc["judge/G_O", ["pref_gt", "pref_preserved", "pref_modified"]].sum()) == pytest.approx(1.0)


def test_metaeval_2afc_and_winrate_report_the_judges_agreement_with_people(tmp_path, restore_logging):
    """People's preferences (a pairs CSV: ground truth > noisy ground truth > inverted source, per query) against
    the judge's G_O through `editmeter metaeval 2afc` and `winrate`: one row per judge column, every pair scored.
    (Tiny random weights: the agreement values themselves mean nothing here; the path is what is tested.)"""
    import csv

    import pandas as pd

    from benchmark.commands.cli import main

    rng = np.random.default_rng(0)
    rows = []
    for q in map(json.loads, (DEMO / "queries.jsonl").read_text().splitlines()[:2]):
        tgt = np.asarray(Image.open(DEMO / q["target_image"]).convert("RGB")).astype(float)
        src = np.asarray(Image.open(DEMO / q["image"]).convert("RGB")).astype(float)
        for name, arr in {"gt": tgt, "noisy": tgt + rng.normal(0, 40, tgt.shape), "inverted": 255 - src}.items():
            (tmp_path / "edits" / name).mkdir(parents=True, exist_ok=True)
            Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8)).save(tmp_path / "edits" / name / f"{q['id']}.png")
        for a, b in (("gt", "noisy"), ("gt", "inverted"), ("noisy", "inverted")):
            rows.append({"query_id": q["id"], "image_a": f"edits/{a}/{q['id']}.png",
                         "image_b": f"edits/{b}/{q['id']}.png", "preferred": "a", "editor_a": a, "editor_b": b})
    prefs = tmp_path / "prefs.csv"
    with prefs.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    base = ["queryset=demo_mini", "profile=tiny", f"paths.results={tmp_path / 'results'}", "progress=false",
            f"metrics.judge.resolution={RES}", "--metrics", "judge", "--resamples", "50", "--pairs", str(prefs)]
    for test in ("2afc", "winrate"):
        assert main(["metaeval", test, *base]) == 0
        table = pd.read_csv(next((tmp_path / "results" / "metaeval").glob(f"{test}-*.csv"))).set_index("metric")
        assert {"judge/G_O", "judge/G_SC", "judge/G_PQ"} <= set(table.index)
        if test == "2afc":
            assert table.loc["judge/G_O", "n_pairs"] == 6 and 0 <= table.loc["judge/G_O", "agreement"] <= 1
        else:
            assert table.loc["judge/G_O", "n_editors"] == 3
