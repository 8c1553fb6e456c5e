"""Meta-evaluation: statistics with known answers, human-judgement readers, weight fitting, the HATIE weight-profile
hook, and the `editmeter metaeval` command end to end on the bundled demo set (pixel metrics)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from benchmark.commands.metaeval import stats
from benchmark.commands.metaeval.evaluate import Boot, fit_rows, gt_selection_row, two_afc_row, winrate_row
from benchmark.commands.metaeval.fit import FitError, grid_search, simplex_grid
from benchmark.commands.metaeval.human import (
    HumanDataError,
    Pair,
    query_id_mapper,
    ratings_to_pairs,
    read_pairs,
    read_ratings,
    with_split,
)

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "datasets" / "demo"
BOOT = Boot(resamples=200, seed=0)


# ------------------------------------------------------------------------------------------------ statistics
def _pairs_from_quality(n_queries: int = 20, editors: int = 4, seed: int = 0):
    """Every editor pair on every query; people prefer the higher hidden quality (ties where equal)."""
    rng = np.random.default_rng(seed)
    qual = rng.normal(size=(n_queries, editors)) + np.arange(editors)  # editor i tends to be better than i-1
    qual[0, 0] = qual[0, 1]  # one planted human tie
    qa, qb, ea, eb, qids = [], [], [], [], []
    for q in range(n_queries):
        for a in range(editors):
            for b in range(a + 1, editors):
                qa.append(qual[q, a])
                qb.append(qual[q, b])
                ea.append(f"e{a}")
                eb.append(f"e{b}")
                qids.append(f"q{q}")
    qa, qb = np.array(qa), np.array(qb)
    return qa, qb, np.sign(qa - qb), ea, eb, qids


def test_2afc_of_the_human_score_is_one_and_of_its_reverse_zero():
    qa, qb, h, _, _, qids = _pairs_from_quality()
    same = two_afc_row("m", True, h, qa, qb, qids, BOOT)
    rev = two_afc_row("m", False, h, qa, qb, qids, BOOT)  # lower-is-better reading of the same numbers
    assert same["agreement"] == 1.0 and same["agreement_lo"] == 1.0
    assert rev["agreement"] == 0.0
    assert same["n_human_ties"] == 1 and same["n_pairs"] == len(h) - 1  # the human tie is left out, counted


def test_2afc_metric_ties_count_half_and_unscored_pairs_are_counted():
    qa, qb, h, _, _, qids = _pairs_from_quality()
    const = two_afc_row("c", True, h, np.zeros_like(qa), np.zeros_like(qb), qids, BOOT)
    assert const["agreement"] == 0.5 and const["metric_ties"] == 1.0
    sa = qa.copy()
    sa[:3] = np.nan
    part = two_afc_row("m", True, h, sa, qb, qids, BOOT)
    assert part["n_unscored"] == 3 and part["agreement"] == 1.0


def test_winrate_correlations_are_one_for_the_human_score_and_minus_one_reversed():
    qa, qb, h, ea, eb, qids = _pairs_from_quality()
    row, rates = winrate_row("m", True, h, qa, qb, ea, eb, qids, BOOT)
    assert row["pearson"] == pytest.approx(1.0) and row["spearman"] == pytest.approx(1.0)
    assert row["kendall"] == pytest.approx(1.0) and row["n_editors"] == 4
    assert all(u == pytest.approx(v) for u, v in rates.values())
    rev, _ = winrate_row("m", False, h, qa, qb, ea, eb, qids, BOOT)
    assert rev["pearson"] == pytest.approx(-1.0) and rev["kendall"] == pytest.approx(-1.0)
    assert rev["pearson_lo"] <= rev["pearson"] <= rev["pearson_hi"]


def test_win_rate_definition_ties_are_half_a_win():
    index = stats.PairIndex.build(["a", "a", "b"], ["b", "c", "c"])
    wr = stats.win_rates(np.array([1.0, 0.0, 1.0]), index, np.ones((1, 3)))[0]
    # a: beat b, tied c -> 1.5/2; b: lost to a, beat c -> 1/2; c: tied a, lost to b -> 0.5/2
    assert wr.tolist() == [0.75, 0.5, 0.25]


def test_gt_selection_shares_split_ties_and_sum_to_one():
    scores = np.array([[3.0, 1.0, 2.0],   # gt best
                       [1.0, 3.0, 2.0],   # preserved best
                       [2.0, 2.0, 1.0],   # gt ties preserved at the top: half each, gt not "first"
                       [1.0, np.nan, 3.0]])  # undefined candidate: excluded
    row = gt_selection_row("m", True, scores, ["a", "b", "c", "d"], BOOT)
    assert row["n_queries"] == 3 and row["n_excluded"] == 1
    assert row["gt_first"] == pytest.approx(1 / 3)
    assert row["pref_gt"] == pytest.approx(1.5 / 3) and row["pref_preserved"] == pytest.approx(1.5 / 3)
    assert row["pref_gt"] + row["pref_preserved"] + row["pref_modified"] == pytest.approx(1.0)
    low = gt_selection_row("m", False, scores, ["a", "b", "c", "d"], BOOT)  # lower is better flips the winner
    assert low["pref_modified"] == pytest.approx(1 / 3) and low["gt_first"] == pytest.approx(1 / 3)


def test_cluster_bootstrap_is_seeded_and_brackets_the_estimate():
    x = np.r_[np.ones(30), np.zeros(10)]
    clusters = stats.query_clusters([f"q{i // 2}" for i in range(40)])
    a = stats.bootstrap(stats.weighted_mean(x), clusters, n_resamples=500, seed=3)
    b = stats.bootstrap(stats.weighted_mean(x), clusters, n_resamples=500, seed=3)
    assert a == b and a[1] < a[0] == 0.75 < a[2]
    assert math.isnan(stats.bootstrap(stats.weighted_mean(x), clusters, n_resamples=0, seed=0)[1])


def test_rowwise_correlations_match_scipy():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(5, 7)), rng.normal(size=(5, 7))
    x[:, 0] = x[:, 1]  # ties
    y[1, 2] = np.nan  # an editor without comparisons in one resample
    from scipy import stats as sp

    # the reference is scipy itself on the entries finite in both (docs/metaeval.md), not the code's own
    # `correlations`, so the two cannot agree on a shared mistake
    reference = {"pearson": sp.pearsonr, "spearman": sp.spearmanr, "kendall": sp.kendalltau}  # kendalltau: tau-b
    for i in range(5):
        ok = np.isfinite(x[i]) & np.isfinite(y[i])
        for kind, fn in reference.items():
            want = float(fn(x[i][ok], y[i][ok]).statistic)
            assert stats.ROWWISE[kind](x, y)[i] == pytest.approx(want, abs=1e-12), (kind, i)
            assert stats.correlations(x[i], y[i])[kind] == pytest.approx(want, abs=1e-12), (kind, i)


def test_correlations_need_three_editors():
    assert math.isnan(stats.correlations(np.array([0.2, 0.8]), np.array([0.1, 0.9]))["pearson"])
    assert stats.correlations(np.array([0.1, 0.5, 0.9]), np.array([1, 2, 3]))["spearman"] == pytest.approx(1.0)


# ------------------------------------------------------------------------------------------------ weight fitting
def _planted(weights, n_editors=5, n_queries=30, seed=1, missing_oc=False):
    rng = np.random.default_rng(seed)
    qual = rng.uniform(0, 1, (n_editors, 4))
    imgs = qual[None] + 0.3 * rng.normal(size=(n_queries, n_editors, 4))
    if missing_oc:  # half the queries define no OC (a task without object consistency)
        imgs[: n_queries // 2, :, 2] = np.nan
    x = imgs.reshape(-1, 4)
    w = np.array(weights)
    present = np.isfinite(x)
    s = np.where(present, x, 0) @ w / (present @ w)
    ia, ib, ea, eb, qids = [], [], [], [], []
    for q in range(n_queries):
        for a in range(n_editors):
            for b in range(a + 1, n_editors):
                ia.append(q * n_editors + a)
                ib.append(q * n_editors + b)
                ea.append(f"e{a}")
                eb.append(f"e{b}")
                qids.append(f"q{q}")
    ia, ib = np.array(ia), np.array(ib)
    return x, ia, ib, np.sign(s[ia] - s[ib]), ea, eb, qids


@pytest.mark.parametrize("missing_oc", [False, True])
def test_grid_search_recovers_planted_weights_within_a_step(missing_oc):
    planted = [0.37, 0.08, 0.21, 0.34]
    x, ia, ib, h, ea, eb, _ = _planted(planted, missing_oc=missing_oc)
    fit = grid_search(x, ia, ib, stats.PairIndex.build(ea, eb), h, ["OF", "BF", "OC", "BC"], step=0.01)
    assert fit.n_grid == math.comb(103, 3)
    assert fit.pearson == pytest.approx(1.0)
    assert max(abs(fit.weights[c] - w) for c, w in zip(["OF", "BF", "OC", "BC"], planted, strict=True)) <= 0.01 + 1e-9


def test_fit_rows_report_held_out_correlations_for_base_and_fitted():
    planted = [0.1, 0.2, 0.3, 0.4]
    x, ia, ib, h, ea, eb, qids = _planted(planted, n_queries=30)
    pairs = [Pair(q, Path("a"), Path("b"), int(v), a, b) for q, v, a, b in zip(qids, h, ea, eb, strict=True)]
    pairs = with_split(pairs, 0.6, seed=0)
    assert {p.split for p in pairs} == {"train", "test"}
    assert all(len({p.split for p in pairs if p.query_id == q}) == 1 for q in set(qids))  # split by query
    rows, weights, r = fit_rows(x[ia], x[ib], pairs, ["OF", "BF", "OC", "BC"],
                                {"OF": 0.25, "BF": 0.25, "OC": 0.25, "BC": 0.25}, 0.05, Boot(50, 0), "fitted")
    assert r == pytest.approx(1.0) and rows[1]["metric"] == "weights=fitted"
    assert rows[1]["test_pearson"] >= rows[0]["test_pearson"] - 1e-9
    assert sum(weights.values()) == pytest.approx(1.0)


def test_simplex_grid_and_bad_inputs():
    g = simplex_grid(3, 0.5)
    assert g.tolist() == [[0, 0, 1], [0, 0.5, 0.5], [0, 1, 0], [0.5, 0, 0.5], [0.5, 0.5, 0], [1, 0, 0]]
    with pytest.raises(FitError, match="whole number"):
        simplex_grid(3, 0.3)
    x = np.ones((4, 2))
    with pytest.raises(FitError, match="at least 3"):
        grid_search(x, np.array([0]), np.array([1]), stats.PairIndex.build(["a"], ["b"]), np.array([1.0]), ["x", "y"])


# ------------------------------------------------------------------------------------------------ human inputs
def _write_csv(path: Path, rows: list[dict], header: list[str] | None = None) -> Path:
    header = header or list(rows[0])
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, header)
        w.writeheader()
        w.writerows(rows)
    return path


def _img(path: Path, value: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (16, 16), (value, value, value)).save(path)
    return path


def test_pairs_csv_majority_vote_orientation_and_folders(tmp_path):
    a, b = _img(tmp_path / "x" / "q1.png"), _img(tmp_path / "y" / "q1.png", 9)
    rows = [{"query_id": "q1", "image_a": "x/q1.png", "image_b": "y", "preferred": "a"},
            {"query_id": "q1", "image_a": "x", "image_b": "y/q1.png", "preferred": "A"},
            {"query_id": "q1", "image_a": "y/q1.png", "image_b": "x/q1.png", "preferred": "a"},  # flipped: a vote for y
            {"query_id": "q1", "image_a": "y/q1.png", "image_b": "x/q1.png", "preferred": "tie"}]
    pairs, counts = read_pairs(_write_csv(tmp_path / "p.csv", rows))
    assert len(pairs) == 1 and counts["rater_disagreements"] == 1
    p = pairs[0]
    assert (p.image_a, p.image_b, p.human, p.votes) == (a.resolve(), b.resolve(), 1, 4)  # 2 vs 1: a wins
    draw, _ = read_pairs(_write_csv(tmp_path / "d.csv", rows[:1] + rows[2:3]))
    assert draw[0].human == 0  # one vote each: a tie


def test_pairs_csv_errors_name_the_column_line_and_fix(tmp_path):
    _img(tmp_path / "x.png")
    with pytest.raises(HumanDataError, match="missing column.*preferred"):
        read_pairs(_write_csv(tmp_path / "a.csv", [{"query_id": "q", "image_a": "x.png", "image_b": "x.png"}]))
    bad = [{"query_id": "q", "image_a": "x.png", "image_b": "nope.png", "preferred": "left"}]
    with pytest.raises(HumanDataError) as err:
        read_pairs(_write_csv(tmp_path / "b.csv", bad))
    assert "line 2: preferred = 'left'" in str(err.value)
    bad[0]["preferred"] = "a"
    with pytest.raises(HumanDataError, match="line 2: image_b = 'nope.png'"):
        read_pairs(_write_csv(tmp_path / "c.csv", bad))
    crit = [{"query_id": "q", "image_a": "x.png", "image_b": "x.png", "preferred": "a", "criterion": c}
            for c in ("overall", "OF")]
    with pytest.raises(HumanDataError, match="--criterion"):
        read_pairs(_write_csv(tmp_path / "d.csv", crit))


def _ratings(path: Path, rows: list[tuple[str, ...]]) -> Path:
    path.write_text("uid\tA\tB\tC\n" + "".join("\t".join(r) + "\n" for r in rows))
    return path


def test_imagenhub_ratings_to_pairs_mean_and_majority(tmp_path):
    for ed in "ABC":
        _img(tmp_path / "img" / ed / "sample_5_1.jpg")
    r1 = _ratings(tmp_path / "r1.tsv", [("sample_5_1.jpg", "[1, 1]", "[0.5, 0.5]", "[0,0]")])
    r2 = _ratings(tmp_path / "r2.tsv", [("sample_5_1.jpg", "[0 , 1]", "[1,1]", "[0, 0]")])
    r3 = _ratings(tmp_path / "r3.tsv", [("sample_5_1.jpg", "[1, 1]", "[0.5,0.5]", "[0, 0.5]")])
    raters = [read_ratings(p) for p in (r1, r2, r3)]
    ids = query_id_mapper("magicbrush-dev")
    pairs, counts = ratings_to_pairs(raters, tmp_path / "img", query_ids=ids)
    assert {p.query_id for p in pairs} == {"mb-dev-5-t1"} and counts["pairs"] == 3
    by = {(p.editor_a, p.editor_b): p.human for p in pairs}
    # overall = sqrt(SC*PQ): A = (1, 0, 1) mean 2/3, B = (0.5, 1, 0.5) mean 2/3: equal means -> tie
    assert by[("A", "B")] == 0 and by[("A", "C")] == 1 and by[("B", "C")] == 1
    maj, _ = ratings_to_pairs(raters, tmp_path / "img", rule="majority", query_ids=ids)
    assert {(p.editor_a, p.editor_b): p.human for p in maj}[("A", "B")] == 1  # A wins two raters of three
    sc, _ = ratings_to_pairs(raters, tmp_path / "img", aspect="PQ", query_ids=ids)
    assert {(p.editor_a, p.editor_b): p.human for p in sc}[("A", "B")] == 1


def test_imagenhub_ratings_errors(tmp_path):
    bad = _ratings(tmp_path / "r.tsv", [("s_1.jpg", "[1, 1]", "[2, 0]", "1,1")])
    with pytest.raises(HumanDataError) as err:
        read_ratings(bad)
    assert "column B" in str(err.value) and "column C" in str(err.value)
    ok = [read_ratings(_ratings(tmp_path / "ok.tsv", [("s_1.jpg", "[1, 1]", "[0, 0]", "[0, 1]")]))]
    with pytest.raises(HumanDataError, match="missing image"):
        ratings_to_pairs(ok, tmp_path / "none")
    pairs, counts = ratings_to_pairs(ok, tmp_path / "none", skip_missing=True)
    assert pairs == [] and counts["pairs_skipped_missing_image"] == 3


# ------------------------------------------------------------------------------------------ HATIE weight profiles
def _profile(path: Path, total: dict, share: float = 0.8, name: str = "mine") -> Path:
    path.write_text(json.dumps({"name": name, "total": total, "criteria_share": share}))
    return path


def test_weight_profile_changes_total_and_nothing_else(tmp_path):
    import pandas as pd

    from benchmark.metrics.hatie.summary import summarize
    from benchmark.metrics.hatie.weights import load_weight_profile

    rng = np.random.default_rng(0)
    ok = pd.DataFrame({"image_id": [f"i{k % 3}" for k in range(8)],
                       "_fid_edit": list(rng.normal(size=(8, 4))), "_fid_src": list(rng.normal(size=(8, 4)))})
    means = {"OF": 0.2, "BF": 0.9, "OC": 0.5, "BC": 0.7}
    ses = dict.fromkeys(means, 0.01)
    prof = load_weight_profile(str(_profile(tmp_path / "p.json", {"OF": 0.7, "BF": 0.1, "OC": 0.1, "BC": 0.1})))
    comps = {"total_weights": prof.record()}
    base = summarize(ok, means, ses, overall=True)
    new = summarize(ok, means, ses, overall=True, components=comps)
    assert new["Total"] != pytest.approx(base["Total"])
    assert {k: v for k, v in new.items() if not k.startswith("Total")} == \
        {k: v for k, v in base.items() if not k.startswith("Total")}
    crit = 0.7 * 0.2 + 0.1 * 0.9 + 0.1 * 0.5 + 0.1 * 0.7
    assert new["Total"] == pytest.approx(0.8 * crit + 0.2 * base["IQ"])
    # the release profile recorded explicitly equals no record at all
    default = {"total_weights": load_weight_profile("default").record()}
    assert summarize(ok, means, ses, overall=True, components=default)["Total"] == base["Total"]
    with pytest.warns(Warning, match="Total and score are left empty"):
        broken = summarize(ok, means, ses, overall=True, components={"total_weights": "{not json"})
    assert math.isnan(broken["Total"])


def test_weight_profile_validation_names_the_file(tmp_path):
    from benchmark.metrics.hatie.weights import WeightProfileError, load_weight_profile

    with pytest.raises(WeightProfileError, match="sum to 1.1"):
        load_weight_profile(str(_profile(tmp_path / "a.json", {"OF": 0.5, "BF": 0.2, "OC": 0.2, "BC": 0.2})))
    with pytest.raises(WeightProfileError, match="exactly OF, BF, OC, BC"):
        load_weight_profile(str(_profile(tmp_path / "b.json", {"OF": 1.0})))
    with pytest.raises(WeightProfileError, match="no file .*nosuch.yaml.*Known profiles: default"):
        load_weight_profile("nosuch")


def test_hatie_config_loads_a_profile_and_records_it(tmp_path):
    from hydra.utils import instantiate

    from benchmark.commands.run import compose

    path = _profile(tmp_path / "p.json", {"OF": 0.25, "BF": 0.25, "OC": 0.25, "BC": 0.25}, name="flat")
    cfg, _ = compose(["metrics=hatie", "profile=tiny", f"metrics.hatie.weights={path}"])
    suite = instantiate(cfg.metrics.hatie)  # factories only: nothing loads
    comp = suite.components()
    assert comp["weights"] == "flat" and json.loads(comp["total_weights"])["total"]["OF"] == 0.25


# ----------------------------------------------------------------------------------------------- command line
def _cli(*args: str) -> int:
    from benchmark.commands.cli import main

    return main(["metaeval", *args])


def _base(tmp_path: Path) -> list[str]:
    return ["queryset=demo_mini", "profile=tiny", f"paths.results={tmp_path / 'results'}", "progress=false",
            "--metrics", "basic", "--resamples", "100"]


def _demo_queries(n: int) -> list[dict]:
    lines = (DEMO / "queries.jsonl").read_text().splitlines()[:n]
    return [json.loads(x) for x in lines]


def _table(tmp_path: Path, test: str):
    import pandas as pd

    path = max((tmp_path / "results" / "metaeval").glob(f"{test}-*.csv"), key=lambda p: p.stat().st_mtime_ns)
    return pd.read_csv(path).set_index("metric"), json.loads(path.with_suffix(".json").read_text())


def test_cli_gt_selection_with_a_user_folder(tmp_path, capsys):
    modified = tmp_path / "modified"
    modified.mkdir()
    for q in _demo_queries(3):  # excessively modified: the inverted source
        src = np.asarray(Image.open(DEMO / q["image"]).convert("RGB"))
        Image.fromarray(255 - src).save(modified / f"{q['id']}.png")
    assert _cli("gt-selection", *_base(tmp_path), "limit=3", "--modified", str(modified), "--preserved", "shift") == 0
    df, side = _table(tmp_path, "gt-selection")
    assert df.loc["basic/psnr_gt_in", "gt_first"] == 1.0  # the ground truth equals itself inside the mask
    assert df.loc["basic/l1_gt_in", "pref_gt"] == 1.0 and df.loc["basic/l1_gt_in", "n_queries"] == 3
    shares = df[["pref_gt", "pref_preserved", "pref_modified"]].sum(axis=1)
    assert np.allclose(shares[df["n_queries"] > 0], 1.0)
    assert (df["profile"] == "tiny").all() and df["note"].str.contains("random weights").all()
    assert side["options"]["preserved_mode"] == "shift" and (df["metric_sig"] == side["metric_sigs"]["basic"]).all()
    assert "gt_first" in capsys.readouterr().out
    assert not (tmp_path / "results" / "runs").exists()  # candidates never reach the leaderboards


def _pairs_csv(tmp_path: Path, n: int = 3) -> Path:
    """Three editors per query: the ground truth (best), the ground truth with noise, the inverted source (worst)."""
    rng = np.random.default_rng(0)
    rows = []
    for q in _demo_queries(n):
        tgt = np.asarray(Image.open(DEMO / q["target_image"]).convert("RGB")).astype(float)
        src = np.asarray(Image.open(DEMO / q["image"]).convert("RGB")).astype(float)
        imgs = {"gt": tgt, "noisy": tgt + rng.normal(0, 40, tgt.shape), "inverted": 255 - src}
        for name, arr in imgs.items():
            _img(tmp_path / "edits" / name / "x.png")
            Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8)).save(tmp_path / "edits" / name / f"{q['id']}.png")
        for a, b in (("gt", "noisy"), ("gt", "inverted"), ("noisy", "inverted")):
            rows.append({"query_id": q["id"], "image_a": f"edits/{a}", "image_b": f"edits/{b}/{q['id']}.png",
                         "preferred": "a", "editor_a": a, "editor_b": b})
    return _write_csv(tmp_path / "prefs.csv", rows)


def test_cli_2afc_and_winrate_from_a_preference_csv(tmp_path):
    prefs = _pairs_csv(tmp_path)
    assert _cli("2afc", *_base(tmp_path), "--pairs", str(prefs)) == 0
    df, side = _table(tmp_path, "2afc")
    assert df.loc["basic/psnr_gt_in", "agreement"] == 1.0 and df.loc["basic/psnr_gt_in", "n_pairs"] == 9
    assert df.loc["basic/l1_gt_in", "agreement"] == 1.0
    assert list(side["inputs"]) == [str(prefs)]
    assert _cli("winrate", *_base(tmp_path), "--pairs", str(prefs)) == 0
    df, side = _table(tmp_path, "winrate")
    assert df.loc["basic/psnr_gt_in", "pearson"] == pytest.approx(1.0)
    assert df.loc["basic/psnr_gt_in", "n_editors"] == 3
    assert side["win_rates"]["basic/psnr_gt_in"]["gt"] == [1.0, 1.0]
    # the same images as ImagenHub-style ratings of two raters (uid = file name, query id = its stem)
    cells = {"gt": "[1, 1]", "noisy": "[0.5, 1]", "inverted": "[0, 0.5]"}
    for r in ("r1", "r2"):
        lines = ["uid\tgt\tnoisy\tinverted"] + [f"{q['id']}.png\t" + "\t".join(cells.values())
                                                 for q in _demo_queries(3)]
        (tmp_path / f"{r}.tsv").write_text("\n".join(lines) + "\n")
    assert _cli("2afc", *_base(tmp_path), "--ratings", str(tmp_path / "r1.tsv"), str(tmp_path / "r2.tsv"),
                "--images", str(tmp_path / "edits")) == 0
    df, side = _table(tmp_path, "2afc")
    assert df.loc["basic/psnr_gt_in", "agreement"] == 1.0 and side["counts"]["pairs"] == 9


def test_cli_bad_inputs_exit_2_with_one_message(tmp_path, capsys):
    prefs = _write_csv(tmp_path / "p.csv", [{"query_id": "q", "image_a": "a.png", "image_b": "b.png"}])
    assert _cli("2afc", *_base(tmp_path), "--pairs", str(prefs)) == 2
    err = capsys.readouterr().err
    assert "missing column(s) preferred" in err and "Traceback" not in err
    _img(tmp_path / "a.png")
    _img(tmp_path / "b.png", 5)
    prefs = _write_csv(tmp_path / "u.csv", [{"query_id": "nosuch", "image_a": "a.png", "image_b": "b.png",
                                             "preferred": "a"}])
    assert _cli("2afc", *_base(tmp_path), "--pairs", str(prefs)) == 2
    assert "not in query set demo_mini" in capsys.readouterr().err
    assert _cli("winrate", *_base(tmp_path), "--pairs", str(prefs)) == 2
    assert "editor_a, editor_b" in capsys.readouterr().err
    assert _cli("gt-selection", *_base(tmp_path), "metrics=hatie") == 2
    assert "--metrics" in capsys.readouterr().err
    assert _cli("gt-selection", "queryset=demo_mini", "--metrics", "basc") == 2
    assert "Did you mean 'basic'" in capsys.readouterr().err


def test_text_only_generator_ignores_the_source(single_thread_torch):
    from benchmark.commands.metaeval.candidates import TextOnlyGenerator, generation_prompt
    from benchmark.querysets.io import load_queryset

    q = load_queryset(DEMO).queries[0]
    gen = TextOnlyGenerator(weights="tiny", model_id="x", revision="x", scheduler="DDIMScheduler", steps=2,
                            guidance_scale=7.5, resolution=32)
    src = Image.open(DEMO / q.image).convert("RGB")
    black = Image.new("RGB", src.size)
    a = gen.edit([q], [src], seeds=[1])[0]
    b = gen.edit([q], [black], seeds=[1])[0]
    assert a.size == src.size and np.array_equal(np.asarray(a), np.asarray(b))  # made from the text alone
    assert generation_prompt(q) == q.target_caption


@pytest.mark.slow
def test_weight_profile_end_to_end_changes_only_total_on_the_leaderboard(tmp_path, single_thread_torch):
    import pandas as pd

    from benchmark.commands.run import compose, run_pipeline

    prof = _profile(tmp_path / "p.json", {"OF": 0.7, "BF": 0.1, "OC": 0.1, "BC": 0.1}, name="of-heavy")
    base = ["editor=overedit", "queryset=demo_mini", "profile=tiny", "metrics=hatie", "progress=false",
            f"paths.results={tmp_path / 'r'}", "aggregate.bootstrap_resamples=200"]
    for extra in ([], [f"metrics.hatie.weights={prof}"]):
        cfg, choices = compose([*base, *extra])
        run_pipeline(cfg, choices["editor"])
    lb = pd.read_csv(tmp_path / "r" / "leaderboard.csv")
    lb = lb[lb["metric_set"] == "hatie"]
    assert len(lb) == 2
    a, b = (lb[lb["components"].str.contains(w)].iloc[0] for w in ('"weights": "default"', '"weights": "of-heavy"'))
    assert a["Total"] != pytest.approx(b["Total"])
    for col in ("OF", "BF", "OC", "BC", "IQ", "FID", "OF_se", "n_ok"):
        assert a[col] == b[col]


def test_cli_fit_weights_writes_a_loadable_profile(tmp_path, monkeypatch, capsys):
    """The fit and the profile it writes; scoring is replaced by planted criteria (scoring is tested above)."""
    from benchmark.commands.metaeval import evaluate
    from benchmark.metrics.hatie.weights import load_weight_profile

    planted = np.array([0.4, 0.1, 0.2, 0.3])
    rng = np.random.default_rng(0)
    qual = rng.uniform(0, 1, (5, 4))
    crit: dict[Path, np.ndarray] = {}
    rows = []
    for q in _demo_queries(14):
        paths = []
        for e in range(5):
            p = _img(tmp_path / "imgs" / f"e{e}" / f"{q['id']}.png", e)
            crit[p.resolve()] = qual[e] + 0.3 * rng.normal(size=4)
            paths.append(p)
        for a in range(5):
            for b in range(a + 1, 5):
                sa, sb = crit[paths[a].resolve()] @ planted, crit[paths[b].resolve()] @ planted
                rows.append({"query_id": q["id"], "image_a": str(paths[a]), "image_b": str(paths[b]),
                             "preferred": "a" if sa > sb else "b", "editor_a": f"e{a}", "editor_b": f"e{b}"})
    prefs = _write_csv(tmp_path / "study.csv", rows)

    def fake_score_pairs(session, pairs):
        cols = [f"hatie/{c}" for c in ("OF", "BF", "OC", "BC")]
        a = np.array([crit[p.image_a] for p in pairs])
        b = np.array([crit[p.image_b] for p in pairs])
        return evaluate.PairScores(dict.fromkeys(cols, True), {c: a[:, i] for i, c in enumerate(cols)},
                                   {c: b[:, i] for i, c in enumerate(cols)}, {"hatie": "sig"}, {"hatie": []})

    monkeypatch.setattr(evaluate, "score_pairs", fake_score_pairs)
    out = tmp_path / "fitted.yaml"
    args = ["fit-weights", "--pairs", str(prefs), "--name", "study", "--out-profile", str(out), "queryset=demo_mini",
            "profile=tiny", f"paths.results={tmp_path / 'results'}", "--resamples", "50", "metaeval.fit.step=0.05"]
    assert _cli(*args) == 0
    prof = load_weight_profile(str(out))
    assert prof.name == "study" and sum(prof.total.values()) == pytest.approx(1.0) and prof.criteria_share == 0.8
    df, side = _table(tmp_path, "fit-weights")
    assert list(df.index) == ["weights=base", "weights=study"] and df.loc["weights=study", "train_pearson"] > 0.9
    assert side["profile_path"] == str(out)
    assert "metrics.hatie.weights=" in capsys.readouterr().out
    assert _cli(*args) == 2  # an existing profile is never replaced silently
    assert "--force" in capsys.readouterr().err


def _ratings_with_a_missing_image(tmp_path: Path, missing: int) -> list[str]:
    """ImagenHub-style ratings of three editors on 3 demo queries, `missing` of editor `noisy`'s images absent."""
    for i, q in enumerate(_demo_queries(3)):
        tgt = np.asarray(Image.open(DEMO / q["target_image"]).convert("RGB"))
        for name, arr in (("gt", tgt), ("noisy", tgt // 2), ("inverted", 255 - tgt)):
            if name == "noisy" and i < missing:
                continue
            (tmp_path / "edits" / name).mkdir(parents=True, exist_ok=True)
            Image.fromarray(arr).save(tmp_path / "edits" / name / f"{q['id']}.png")
    lines = ["uid\tgt\tnoisy\tinverted"] + [f"{q['id']}.png\t[1, 1]\t[0.5, 1]\t[0, 0.5]" for q in _demo_queries(3)]
    (tmp_path / "r1.tsv").write_text("\n".join(lines) + "\n")
    return ["--ratings", str(tmp_path / "r1.tsv"), "--images", str(tmp_path / "edits"), "--skip-missing"]


def test_cli_skip_missing_says_how_many_pairs_it_dropped(tmp_path, capsys):
    # one missing image of 3 editors x 3 samples: its sample loses the 2 pairs that image is in (9 - 2 = 7 judged)
    assert _cli("2afc", *_base(tmp_path), *_ratings_with_a_missing_image(tmp_path, 1)) == 0
    out = capsys.readouterr().out
    assert "pairs_skipped_missing_image 2" in out and "pairs 7" in out
    _, side = _table(tmp_path, "2afc")
    assert side["counts"]["pairs_skipped_missing_image"] == 2 and side["counts"]["pairs"] == 7


def test_cli_skip_missing_that_drops_every_pair_says_so(tmp_path, capsys):
    args = _ratings_with_a_missing_image(tmp_path, 3)  # every sample lacks noisy: only gt-inverted pairs remain
    for f in (tmp_path / "edits" / "inverted").iterdir():
        f.unlink()  # and no inverted image: nothing left to judge
    assert _cli("2afc", *_base(tmp_path), *args) == 2
    err = capsys.readouterr().err
    assert "9" in err and "missing image" in err


def test_a_suite_override_reaches_only_the_sets_that_hold_the_suite(tmp_path):
    from benchmark.commands.metaeval.scoring import MetaevalError, Session, metric_suite

    assert metric_suite("metrics.judge.resolution=224") == "judge" and metric_suite("++metrics.hatie.x=1") == "hatie"
    assert metric_suite("queryset=demo") is None and metric_suite("metrics=basic") is None
    common = ["queryset=demo_mini", "profile=tiny", f"paths.results={tmp_path}"]
    s = Session([*common, "metrics.hatie.weights=default"], ["basic", "hatie"])
    assert "metrics.hatie.weights=default" in s.overrides_for("hatie")
    assert "metrics.hatie.weights=default" not in s.overrides_for("basic")
    with pytest.raises(MetaevalError, match="no metric set of this meta-evaluation has a suite 'judge'"):
        Session([*common, "metrics.judge.resolution=224"], ["basic"])
    with pytest.raises(MetaevalError, match="no_such_key"):
        Session([*common, "metrics.hatie.no_such_key=1"], ["hatie"])
