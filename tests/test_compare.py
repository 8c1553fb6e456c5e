"""Paired comparison (`editmeter compare`): planted differences, symmetry, coverage, shared queries, refusals."""

from __future__ import annotations

import itertools
import json
import re
import shlex
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from benchmark.commands import cli
from benchmark.commands.compare import COLUMNS, CompareError, compare_runs, format_comparison
from benchmark.io.score_cache import write_query_index
from benchmark.io.stats import bootstrap_mean_ci, holm, sign_flip_p, wilcoxon_p, wilson_interval

QHASH = "a" * 64
TYPES = ("obj_add", "bg_chg", "style_chg")


def make_run(results: Path, editor: str, values: dict[str, np.ndarray], *, sig: str | None = None,
             status: list[str] | None = None, qhash: str = QHASH, metric_set: str = "basic", metric_sig: str = "m" * 12,
             higher: dict[str, bool] | None = None, model_level: dict[str, bool] | None = None,
             prompt_kind: str = "instruction", drop_columns: tuple[str, ...] = (), queryset: str = "toy") -> Path:
    """A scored run folder as the pipeline writes it: run.json, scores/<sig>/queries.json and one Parquet part.
    Query i has edit type TYPES[i % 3]; `status[i]` 'missing' leaves query i without a score row."""
    n = len(next(iter(values.values())))
    higher = higher or {m: True for m in values}
    model_level = model_level or {}
    queries = [SimpleNamespace(id=f"q{i:04d}", image_id=f"img{i // 3}", edit_type=TYPES[i % 3],
                               object_class="cat" if i % 2 else "dog") for i in range(n)]
    run_dir = results / "runs" / f"{queryset}-{qhash[:10]}" / f"{editor}-{sig or editor[:1] * 12}"
    folder = run_dir / "scores" / metric_sig
    folder.mkdir(parents=True)
    write_query_index(folder, SimpleNamespace(name=queryset, hash=qhash, queries=queries))
    status = status or ["ok"] * n
    rows = pd.DataFrame({"query_id": [q.id for q in queries], "image_id": [q.image_id for q in queries],
                         "edit_type": [q.edit_type for q in queries], "object_class": [q.object_class for q in queries],
                         "status": status, "reason": ["" if s == "ok" else "boom" for s in status],
                         "edit_sha256": ["0" * 64 if s == "ok" else "" for s in status]})
    for m, v in values.items():
        if m not in drop_columns:
            rows[m] = np.where(rows["status"] == "ok", np.asarray(v, dtype=np.float64), np.nan)
    rows = rows[rows["status"] != "missing"]
    rows.to_parquet(folder / "part-00000000000000000001-1-00000.parquet", index=False)
    meta_metrics = {m: {"higher_is_better": h, "version": "1", "description": m} for m, h in higher.items()}
    meta_metrics |= {m: {"higher_is_better": h, "version": "1", "description": m} for m, h in model_level.items()}
    scoring = {"metric_set": metric_set, "metric_order": list(values), "column_order": [*model_level, *values],
               "metrics": meta_metrics, "suite": {"name": "toysuite", "components": {}} if model_level else None}
    meta = {"queryset": queryset, "queryset_hash": qhash, "queryset_size": n, "editor": editor,
            "editor_sig": run_dir.name.split("-", 1)[1], "prompt_kind": prompt_kind, "profile": "tiny", "seed": 0,
            "metric_sig": metric_sig, **scoring, "scored": {metric_sig: scoring}, "git_sha": "x", "versions": {},
            "device": "cpu"}
    (run_dir / "run.json").write_text(json.dumps(meta))
    return run_dir


def planted(n: int = 120, delta: float = 0.3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    base = rng.normal(size=n)  # per-query difficulty, shared by both editors: what pairing removes
    return base + delta + rng.normal(scale=0.5, size=n), base + rng.normal(scale=0.5, size=n)


def row(df: pd.DataFrame, metric: str = "m", group: str = "all", run_a: str | None = None) -> pd.Series:
    sel = df[(df["metric"] == metric) & (df["group"] == group)]
    if run_a is not None:
        sel = sel[sel["editor_a"] == run_a]
    assert len(sel) == 1
    return sel.iloc[0]


def test_a_planted_difference_is_detected_in_the_metrics_direction(tmp_path):
    a, b = planted()
    # "err" is lower-is-better: A's smaller errors are A's wins
    make_run(tmp_path, "alpha", {"m": a, "err": -a}, higher={"m": True, "err": False})
    make_run(tmp_path, "beta", {"m": b, "err": -b}, higher={"m": True, "err": False})
    df = compare_runs(tmp_path, ["alpha", "beta"], n_resamples=2000)
    assert list(df.columns) == COLUMNS and len(df) == 2
    for metric, sign in (("m", 1), ("err", -1)):
        r = row(df, metric)
        assert r["diff"] == pytest.approx(sign * (a.mean() - b.mean()))
        assert r["ci_low"] < r["diff"] < r["ci_high"] and (r["ci_low"] > 0 if sign > 0 else r["ci_high"] < 0)
        assert r["p_value"] < 1e-3 and r["p_adjusted"] < 1e-3 and r["test"] == "Wilcoxon signed-rank"
        assert r["win_a"] > r["win_b"] and r["win_a"] + r["win_b"] + r["ties"] == r["n_shared"] == 120
        assert r["win_ci_low"] < r["win_rate_a"] == r["win_a"] / 120 < r["win_ci_high"] and r["complete"]
    text = format_comparison(df)
    assert "m↑" in text and "err↓" in text and "Wilcoxon signed-rank" in text and "[" in text


def test_no_difference_is_not_significant(tmp_path):
    a, b = planted(delta=0.0, seed=3)
    make_run(tmp_path, "alpha", {"m": a})
    make_run(tmp_path, "beta", {"m": b})
    r = row(compare_runs(tmp_path, ["alpha", "beta"], n_resamples=2000))
    assert r["ci_low"] < 0 < r["ci_high"] and r["p_value"] > 0.05


def test_a_run_against_an_identical_one_differs_by_nothing(tmp_path):
    a, _ = planted()
    make_run(tmp_path, "alpha", {"m": a})
    make_run(tmp_path, "clone", {"m": a})
    for test in ("wilcoxon", "permutation"):
        r = row(compare_runs(tmp_path, ["alpha", "clone"], n_resamples=500, test=test))
        assert (r["diff"], r["ci_low"], r["ci_high"], r["p_value"]) == (0.0, 0.0, 0.0, 1.0)
        assert (r["win_a"], r["win_b"], r["ties"], r["win_rate_a"]) == (0, 0, 120, 0.0)


def test_rounding_noise_is_a_tie_not_a_win(tmp_path):
    a, _ = planted()
    make_run(tmp_path, "alpha", {"m": a})
    make_run(tmp_path, "noisy", {"m": a + np.random.default_rng(1).normal(scale=1e-8, size=len(a))})
    r = row(compare_runs(tmp_path, ["alpha", "noisy"], n_resamples=200))
    assert (r["win_a"], r["win_b"], r["ties"], r["p_value"]) == (0, 0, 120, 1.0) and abs(r["diff"]) < 1e-8


def test_swapping_a_and_b_negates_differences_and_swaps_wins(tmp_path):
    a, b = planted(delta=0.1)
    make_run(tmp_path, "alpha", {"m": a})
    make_run(tmp_path, "beta", {"m": b})
    for test in ("wilcoxon", "permutation"):
        ab = row(compare_runs(tmp_path, ["alpha", "beta"], n_resamples=1000, test=test, by="type"), group="bg_chg")
        ba = row(compare_runs(tmp_path, ["beta", "alpha"], n_resamples=1000, test=test, by="type"), group="bg_chg")
        assert (ba["mean_a"], ba["mean_b"], ba["diff"]) == (ab["mean_b"], ab["mean_a"], -ab["diff"])
        assert ba["ci_low"] == pytest.approx(-ab["ci_high"]) and ba["ci_high"] == pytest.approx(-ab["ci_low"])
        assert (ba["win_a"], ba["win_b"], ba["ties"], ba["p_value"]) == (ab["win_b"], ab["win_a"], ab["ties"], ab["p_value"])
        assert ba["win_rate_a"] == ab["win_b"] / ab["n_shared"]


def test_bootstrap_interval_covers_the_true_difference_at_about_the_nominal_rate():
    rng = np.random.default_rng(7)
    delta, reps = 0.25, 300
    covered = 0
    for k in range(reps):
        d = delta + rng.standard_t(df=5, size=40)  # heavy-ish tails, as per-query scores often have
        low, high = bootstrap_mean_ci(d, 1000, seed=k)
        covered += bool(low[0] <= delta <= high[0])
    assert 0.89 <= covered / reps <= 0.98  # nominal 0.95; the percentile bootstrap runs a little short at n=40


def test_paired_tests_hold_their_level_under_the_null():
    rng = np.random.default_rng(11)
    p_w = [wilcoxon_p(rng.normal(size=30)) for _ in range(300)]
    p_s = [sign_flip_p(rng.normal(size=30), 300, k) for k in range(150)]
    assert 0.02 <= np.mean(np.array(p_w) < 0.05) <= 0.09 and 0.01 <= np.mean(np.array(p_s) < 0.05) <= 0.10


def test_only_queries_ok_in_both_runs_are_paired_and_the_rest_are_counted(tmp_path):
    a, b = planted(n=60)
    sa, sb = ["ok"] * 60, ["ok"] * 60
    sa[0] = sa[1] = sa[2] = "failed"
    sb[10] = sb[11] = "missing"  # not scored yet: B is partial
    b = b.copy()
    b[:3] = 1e6  # B's values on A's failures must not enter any mean
    make_run(tmp_path, "alpha", {"m": a}, status=sa)
    make_run(tmp_path, "beta", {"m": b}, status=sb)
    df = compare_runs(tmp_path, ["alpha", "beta"], n_resamples=500)
    keep = np.ones(60, bool)
    keep[[0, 1, 2, 10, 11]] = False
    r = row(df)
    assert r["n_shared"] == 55 and r["mean_b"] == pytest.approx(b[keep].mean()) and not r["complete"]
    cov = df.attrs["coverage"][0]
    assert (cov["n_scope"], cov["n_shared"], cov["a_failed"], cov["b_not_done"], cov["a_not_done"]) == (60, 55, 3, 2, 0)
    text = format_comparison(df)
    assert text.startswith("PARTIAL: beta-") and "dropped 5 (A failed 3, B not done 2)" in text
    assert [line.split()[0] for line in text.splitlines() if line.endswith("PARTIAL")] == ["m↑"]  # the row is marked


def test_groups_split_the_shared_queries_and_form_their_own_holm_family(tmp_path):
    a, b = planted(n=90)
    make_run(tmp_path, "alpha", {"m": a, "m2": a * 2})
    make_run(tmp_path, "beta", {"m": b, "m2": b * 2})
    make_run(tmp_path, "gamma", {"m": b + 0.5, "m2": b})
    df = compare_runs(tmp_path, ["alpha", "beta", "gamma"], by="type", n_resamples=300)
    assert len(df) == 3 * 2 * (1 + len(TYPES))  # pairs x metrics x (all + types)
    assert list(df[["editor_a", "editor_b"]].drop_duplicates().itertuples(index=False, name=None)) == [
        ("alpha", "beta"), ("alpha", "gamma"), ("beta", "gamma")]
    groups = df[df["by"] == "edit_type"]
    assert set(groups["group"]) == set(TYPES)
    total = df[df["by"] == ""].set_index(["metric", "run_a", "run_b"])["n_shared"]
    assert groups.groupby(["metric", "run_a", "run_b"])["n_shared"].sum().equals(total.sort_index())
    for _, family in df.groupby("by"):
        assert (family["p_adjusted"].to_numpy() == holm(family["p_value"].to_numpy())).all()


def test_a_pairs_numbers_do_not_depend_on_the_other_runs_compared(tmp_path):
    a, b = planted(n=50)
    make_run(tmp_path, "alpha", {"m": a})
    make_run(tmp_path, "beta", {"m": b}, status=["ok"] * 45 + ["failed"] * 5)
    make_run(tmp_path, "gamma", {"m": a - b}, status=["failed"] * 5 + ["ok"] * 45)
    two = compare_runs(tmp_path, ["alpha", "beta"], n_resamples=500)
    three = compare_runs(tmp_path, ["alpha", "beta", "gamma"], n_resamples=500)
    same = three[(three["editor_a"] == "alpha") & (three["editor_b"] == "beta")].reset_index(drop=True)
    # only the multiple-comparison adjustment sees the larger family
    pd.testing.assert_frame_equal(two.drop(columns="p_adjusted"), same.drop(columns="p_adjusted"))
    assert (same["p_adjusted"] >= two["p_adjusted"]).all()


def test_refuses_runs_of_different_query_sets(tmp_path, capsys):
    a, b = planted(n=20)
    make_run(tmp_path, "alpha", {"m": a})
    make_run(tmp_path, "beta", {"m": b}, qhash="b" * 64)
    with pytest.raises(CompareError, match="different query sets"):
        compare_runs(tmp_path, ["alpha", "beta"])
    assert cli.main(["compare", "--results", str(tmp_path), "alpha", "beta"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: the runs are of different query sets")


def test_refuses_runs_without_a_shared_query(tmp_path):
    a, b = planted(n=20)
    make_run(tmp_path, "alpha", {"m": a}, status=["ok"] * 10 + ["failed"] * 10)
    make_run(tmp_path, "beta", {"m": b}, status=["failed"] * 10 + ["ok"] * 10)
    with pytest.raises(CompareError, match="share no query"):
        compare_runs(tmp_path, ["alpha", "beta"])


def test_refuses_a_metric_missing_from_one_run(tmp_path):
    a, b = planted(n=20)
    make_run(tmp_path, "alpha", {"m": a, "m2": a})
    make_run(tmp_path, "beta", {"m": b, "m2": b}, drop_columns=("m2",))
    with pytest.raises(CompareError, match="'m2' .* missing from run .*beta.* score rows"):
        compare_runs(tmp_path, ["alpha", "beta"])
    assert len(compare_runs(tmp_path, ["alpha", "beta"], metrics=["m"], n_resamples=100)) == 1
    with pytest.raises(CompareError, match="'nope' is not a per-query metric"):
        compare_runs(tmp_path, ["alpha", "beta"], metrics=["nope"])


def test_refuses_scores_of_different_metric_configurations(tmp_path):
    a, b = planted(n=20)
    make_run(tmp_path, "alpha", {"m": a})
    make_run(tmp_path, "beta", {"m": b}, metric_sig="n" * 12)
    with pytest.raises(CompareError, match="different metric configurations"):
        compare_runs(tmp_path, ["alpha", "beta"])


def test_model_level_suite_scores_are_named_and_not_paired(tmp_path):
    a, b = planted(n=30)
    kw = {"metric_set": "toysuite", "model_level": {"Total": True, "FID": False}}
    make_run(tmp_path, "alpha", {"OF": a}, **kw)
    make_run(tmp_path, "beta", {"OF": b}, **kw)
    make_run(tmp_path, "delta", {"OF": b}, prompt_kind="description", **kw)
    df = compare_runs(tmp_path, ["alpha", "beta"], n_resamples=100)
    assert list(df["metric"]) == ["OF"]
    assert any("Total, FID are model-level" in n for n in df.attrs["notes"])
    assert "Total, FID are model-level" in format_comparison(df)
    with pytest.raises(CompareError, match="'Total' .* cannot be paired per query"):
        compare_runs(tmp_path, ["alpha", "beta"], metrics=["Total"])
    with pytest.raises(CompareError, match="not comparable"):  # a suite's two editor families
        compare_runs(tmp_path, ["alpha", "delta"])
    everything = compare_runs(tmp_path, n_resamples=100)  # unnamed runs: the cross-family pairs are left out
    assert set(zip(everything["editor_a"], everything["editor_b"], strict=True)) == {("alpha", "beta")}


def test_runs_are_named_by_editor_or_by_folder_when_an_editor_has_several(tmp_path):
    a, b = planted(n=20)
    make_run(tmp_path, "alpha", {"m": a}, sig="111111111111")
    make_run(tmp_path, "alpha", {"m": b}, sig="222222222222")
    with pytest.raises(CompareError, match="'alpha' names 2 run folders"):
        compare_runs(tmp_path, ["alpha", "alpha-1111"])
    df = compare_runs(tmp_path, ["alpha-1111", "alpha-222222222222"], n_resamples=100)
    assert (df["run_a"].iloc[0], df["run_b"].iloc[0]) == ("alpha-111111111111", "alpha-222222222222")
    with pytest.raises(CompareError, match="unknown editor 'zeta'"):
        compare_runs(tmp_path, ["zeta", "alpha-1111"])
    with pytest.raises(CompareError, match="named twice"):
        compare_runs(tmp_path, ["alpha-1111", "alpha-111111111111"])


def test_cli_prints_the_table_and_writes_the_csv(tmp_path, capsys):
    a, b = planted(n=30)
    make_run(tmp_path, "alpha", {"m": a})
    make_run(tmp_path, "beta", {"m": b})
    out = tmp_path / "cmp.csv"
    assert cli.main(["compare", "--results", str(tmp_path), "alpha", "beta", "--by", "class", "--resamples", "200",
                     "--seed", "3", "--csv", str(out)]) == 0
    text = capsys.readouterr().out
    assert "A = alpha" in text and "cat" in text and "200 resamples of queries, seed 3" in text
    df = pd.read_csv(out)
    assert list(df.columns) == COLUMNS and set(df["by"].fillna("")) == {"", "class"}
    assert format_comparison(df).splitlines()[3].startswith("m↑      cat")  # the CSV read back prints the same way


def test_holm_and_wilson_against_hand_computed_values():
    p = np.array([0.01, 0.04, np.nan, 0.03, 0.5])
    # sorted 0.01, 0.03, 0.04, 0.5 with m = 4: 0.04, 0.09, max(0.09, 0.08), 0.5
    np.testing.assert_allclose(holm(p), [0.04, 0.09, np.nan, 0.09, 0.5])
    low, high = wilson_interval(0, 10)
    assert low == 0.0 and high == pytest.approx(0.2775, abs=1e-4)
    assert wilson_interval(7, 20) == pytest.approx(tuple(1 - x for x in reversed(wilson_interval(13, 20))))


def test_compares_real_run_folders_of_the_pipeline(tmp_path):
    """identity leaves the image unchanged, overedit perturbs it: identity wins every outside-mask pixel metric.
    `limit` keeps the test fast and leaves both runs partial, which every row must say."""
    from benchmark.commands.run import compose, run_pipeline

    for editor in ("identity", "overedit"):
        cfg, _ = compose([f"editor={editor}", "queryset=demo_mini", "profile=tiny", "metrics=basic",
                          f"paths.results={tmp_path}", "progress=false", "aggregate.bootstrap_resamples=50", "limit=5", "preflight=false"])
        run_pipeline(cfg, editor)
    df = compare_runs(tmp_path, ["identity", "overedit"], by="type", n_resamples=500)
    overall = df[df["by"] == ""].set_index("metric")
    assert not df["complete"].any() and (overall["n_shared"] == 5).all()
    assert format_comparison(df).startswith("PARTIAL: identity-")
    for m in ("l1_out", "psnr_out", "ssim_out"):
        r = overall.loc[m]
        assert r["win_a"] == r["n_shared"] and r["ties"] == 0 and (r["diff"] > 0) == r["higher_is_better"]
        assert not (r["ci_low"] <= 0 <= r["ci_high"])


def test_compare_reads_only_the_per_query_columns(tmp_path):
    """HATIE-like per-row feature columns (`_`-prefixed lists) are never read by a comparison: at full scale they
    are hundreds of MB per run; the scores it pairs are the same either way."""
    from benchmark.tables.leaderboard import collect_runs

    res = tmp_path / "res"
    run_dir = make_run(res, "A", {"m": np.linspace(0, 1, 20)})
    part = next(run_dir.glob("scores/*/part-*.parquet"))
    rows = pd.read_parquet(part)
    rows["_fid_edit"] = [np.full(8, 0.5, dtype=np.float32)] * len(rows)  # like HATIE's per-row features
    rows.to_parquet(part, index=False)
    full = collect_runs(res)[0].scores
    lean = collect_runs(res, per_query_only=True)[0].scores
    assert any(c.startswith("_") for c in full.columns)
    assert not any(c.startswith("_") for c in lean.columns)
    assert lean["m"].tolist() == full["m"].tolist()


# ------------------------------------------------------------------------------- issue 22 item 9, issue 23
def _exact_signed_rank_p(d: np.ndarray) -> float:
    """Wilcoxon's two-sided exact p by enumerating every sign pattern, zero differences dropped first (Wilcoxon's
    own rule); the magnitudes must be distinct. Written from the definition, independent of scipy and the code."""
    nz = d[d != 0]
    ranks = np.argsort(np.argsort(np.abs(nz))) + 1
    t = ranks[nz > 0].sum()
    null = np.array([sum(r for r, s in zip(ranks, signs, strict=True) if s)
                     for signs in itertools.product((0, 1), repeat=len(nz))])
    return min(1.0, 2 * min((null <= t).mean(), (null >= t).mean()))


def test_wilcoxon_drops_the_zero_differences_when_only_some_are_zero(tmp_path):
    # 8 differences of distinct sizes and 5 exact zeros: zero_method "pratt" or "zsplit" (or keeping the zeros in
    # the ranking) gives another p-value than Wilcoxon's rule of dropping them
    d = np.array([0.9, -0.2, 1.3, 0.5, 0.7, -1.1, 1.6, 0.3, 0, 0, 0, 0, 0])
    base = np.random.default_rng(5).normal(size=len(d))
    make_run(tmp_path, "alpha", {"m": base + d})
    make_run(tmp_path, "beta", {"m": base})
    r = row(compare_runs(tmp_path, ["alpha", "beta"], n_resamples=100))
    expected = _exact_signed_rank_p(d)
    assert expected == pytest.approx(19 / 128)  # T+ = 29 of 36 over 2^8 sign patterns, by hand
    assert r["p_value"] == pytest.approx(expected, rel=1e-12)
    assert (r["win_a"], r["win_b"], r["ties"]) == (6, 2, 5)
    assert wilcoxon_p(d) == pytest.approx(expected, rel=1e-12)


def test_the_csv_keeps_full_precision(tmp_path, capsys):
    a, b = planted(n=30)
    make_run(tmp_path, "alpha", {"m": a})
    make_run(tmp_path, "beta", {"m": b})
    out = tmp_path / "cmp.csv"
    assert cli.main(["compare", "--results", str(tmp_path), "alpha", "beta", "--resamples", "200",
                     "--csv", str(out)]) == 0
    back = pd.read_csv(out, float_precision="round_trip")  # pandas' default parser may miss the last bit
    r = back.iloc[0]
    # the means straight from the planted values, not from the code's own frame: 6 significant digits lose them
    assert (r["mean_a"], r["mean_b"]) == (float(np.mean(a)), float(np.mean(b)))
    fresh = row(compare_runs(tmp_path, ["alpha", "beta"], n_resamples=200))
    for c in ("diff", "ci_low", "ci_high", "p_value", "win_ci_low", "win_ci_high"):
        assert r[c] == fresh[c], c


def test_ties_show_in_the_win_rate_so_an_all_tie_never_reads_as_a_loss(tmp_path):
    a, b = planted(n=20)
    b = b.copy()
    b[:5] = a[:5]  # 5 of 20 tied
    make_run(tmp_path, "alpha", {"m": a})
    make_run(tmp_path, "clone", {"m": a})
    make_run(tmp_path, "beta", {"m": b})
    same = format_comparison(compare_runs(tmp_path, ["alpha", "clone"], n_resamples=100))
    line = next(x for x in same.splitlines() if x.startswith("m↑"))
    assert "all 20 tied" in line and "0% [" not in line
    some = format_comparison(compare_runs(tmp_path, ["alpha", "beta"], n_resamples=100))
    line = next(x for x in some.splitlines() if x.startswith("m↑"))
    assert "25% tied" in line


def test_an_editor_run_on_two_query_sets_is_taken_from_the_one_holding_both(tmp_path, capsys):
    """`make demo` runs identity on demo_mini and demo_editval, overedit on demo_mini only: `compare identity
    overedit` means demo_mini."""
    a, b = planted(n=12)
    make_run(tmp_path, "identity", {"m": a}, queryset="mini", qhash="1" * 64)
    make_run(tmp_path, "overedit", {"m": b}, queryset="mini", qhash="1" * 64)
    make_run(tmp_path, "identity", {"m": a}, queryset="editval", qhash="2" * 64)
    make_run(tmp_path, "oracle", {"m": b}, queryset="editval", qhash="2" * 64)
    df = compare_runs(tmp_path, ["identity", "overedit"], n_resamples=100)
    assert df.attrs["queryset"] == "mini" and row(df)["n_shared"] == 12
    assert compare_runs(tmp_path, ["oracle", "identity"], n_resamples=100).attrs["queryset"] == "editval"
    with pytest.raises(CompareError, match=r"unknown editor 'overedt'.*Did you mean 'overedit'"):
        compare_runs(tmp_path, ["identity", "overedt"])  # unknown, even beside a name that spans two sets
    with pytest.raises(CompareError, match=r"different query sets .*no query set holds runs of all"):
        compare_runs(tmp_path, ["overedit", "oracle"])


def test_two_query_sets_holding_both_editors_are_listed_with_a_command_that_works(tmp_path, capsys):
    a, b = planted(n=12)
    for qs, h in (("mini", "1"), ("editval", "2")):
        make_run(tmp_path, "identity", {"m": a}, queryset=qs, qhash=h * 64)
        make_run(tmp_path, "overedit", {"m": b}, queryset=qs, qhash=h * 64)
    # a query set rebuilt from other files: the same name, another hash, so --queryset cannot tell them apart
    make_run(tmp_path, "identity", {"m": a}, queryset="mini", qhash="3" * 64)
    make_run(tmp_path, "overedit", {"m": b}, queryset="mini", qhash="3" * 64)
    assert cli.main(["compare", "--results", str(tmp_path), "identity", "overedit"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "3 query sets hold runs of all of identity, overedit" in err
    commands = re.findall(r"`(editmeter compare [^`]+)`", err)
    assert "editmeter compare identity overedit --queryset editval" in commands and len(commands) == 3
    for command in commands:  # each suggestion runs, on its own query set
        assert cli.main(["compare", "--results", str(tmp_path), *shlex.split(command)[2:], "--resamples", "50"]) == 0
        assert "shared: 12 of 12" in capsys.readouterr().out


def _scored_twice(results: Path, editor: str, values: dict[str, np.ndarray], prompt_kind: str) -> None:
    """One run folder scored with a suite (which splits editor families) and with the family-blind basic set."""
    run_dir = make_run(results, editor, values, metric_set="toysuite", metric_sig="s" * 12, prompt_kind=prompt_kind,
                       model_level={"Total": True})
    suite = json.loads((run_dir / "run.json").read_text())["scored"]
    make_run(results, editor, values, metric_sig="b" * 12, prompt_kind=prompt_kind)
    meta = json.loads((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(json.dumps(meta | {"scored": meta["scored"] | suite}))


def test_a_cross_family_refusal_names_the_metric_set_that_compares_them(tmp_path):
    """Named runs of two editor families: the suite's refusal says which of their shared metric sets compares them
    (`--metric-set basic`), and that set does; with no such set scored, it says to score one."""
    a, b = planted(n=30)
    _scored_twice(tmp_path, "alpha", {"OF": a}, "instruction")
    _scored_twice(tmp_path, "delta", {"OF": b}, "description")
    for mset in (None, "toysuite"):
        with pytest.raises(CompareError, match=r"not comparable; .*: --metric-set basic$"):
            compare_runs(tmp_path, ["alpha", "delta"], metric_set=mset)
    df = compare_runs(tmp_path, ["alpha", "delta"], metric_set="basic", n_resamples=100)
    assert set(df["metric_set"]) == {"basic"} and list(df["metric"].unique()) == ["OF"]
    only_suite = tmp_path / "only_suite"
    make_run(only_suite, "alpha", {"OF": a}, metric_set="toysuite", model_level={"Total": True})
    make_run(only_suite, "delta", {"OF": b}, metric_set="toysuite", model_level={"Total": True},
             prompt_kind="description")
    with pytest.raises(CompareError, match=r"not comparable; .*\(metrics=basic\) .*--metric-set basic$"):
        compare_runs(only_suite, ["alpha", "delta"])


def test_a_small_significant_difference_shows_its_digits(tmp_path):
    """clip_i near 1 with B lower by ~4e-5 on every query printed "1.000 vs 1.000, diff 0.000 [0.000, 0.000],
    better A": the difference and its CI get two significant digits, and the means as many decimals."""
    rng = np.random.default_rng(0)
    b = 0.999 + rng.uniform(0, 1e-3, size=60)
    a = b + 4e-5 + rng.uniform(-5e-6, 5e-6, size=60)
    make_run(tmp_path, "alpha", {"clip_i": a})
    make_run(tmp_path, "beta", {"clip_i": b})
    df = compare_runs(tmp_path, ["alpha", "beta"], n_resamples=200)
    r = row(df, "clip_i")
    text = format_comparison(df)
    line = next(ln for ln in text.splitlines() if ln.startswith("clip_i"))
    diff = f"{r['diff']:.6f}"
    assert diff in line and f"[{r['ci_low']:.6f}, {r['ci_high']:.6f}]" in line, line
    assert float(diff) != 0 and " A" in line  # the verdict and a difference that shows
    assert f"{r['mean_a']:.6f}" in line and f"{r['mean_b']:.6f}" in line
    # a tiny difference beyond 12 decimals goes to scientific notation instead of a row of zeros
    from benchmark.commands.compare import _diff_decimals, _num

    assert _num(3e-14, _diff_decimals([3e-14], 4)) == "3.00e-14"


def test_the_note_on_model_level_scores_does_not_promise_ses_that_show_does_not_print(tmp_path):
    make_run(tmp_path, "alpha", {"m": np.arange(6.0)}, model_level={"Total": True})
    make_run(tmp_path, "beta", {"m": np.arange(6.0) + 1}, model_level={"Total": True})
    notes = " ".join(compare_runs(tmp_path, ["alpha", "beta"], n_resamples=50).attrs["notes"])
    assert "Total" in notes and "unpaired bootstrap SE" not in notes and "no per-query SE" in notes


def test_a_run_without_scored_queries_is_left_out_of_every_run_comparison_and_can_be_removed(tmp_path, capsys):
    """A `score` of an empty folder made a run with no ok row, and the report's comparison of every run then failed
    as a whole (CompareError: share no query). It is left out with one note; `editmeter remove` deletes it and
    rebuilds the tables."""
    a, b = planted(n=12)
    make_run(tmp_path, "alpha", {"m": a})
    make_run(tmp_path, "beta", {"m": b})
    make_run(tmp_path, "empty", {"m": a}, status=["failed"] * 12)
    df = compare_runs(tmp_path, n_resamples=50)
    assert set(zip(df["editor_a"], df["editor_b"], strict=True)) == {("alpha", "beta")}
    notes = [n for n in df.attrs["notes"] if "no query scored ok" in n]
    assert len(notes) == 1 and "empty" in notes[0] and "editmeter remove" in notes[0]
    with pytest.raises(CompareError, match="share no query"):  # named explicitly: still a refusal
        compare_runs(tmp_path, ["alpha", "empty"], n_resamples=50)
    assert cli.main(["remove", "empty", "--results", str(tmp_path)]) == 2  # off a terminal: needs --yes
    assert "--yes" in capsys.readouterr().err
    assert cli.main(["remove", "emtpy", "--results", str(tmp_path), "--yes"]) == 2
    assert "Did you mean 'empty'" in capsys.readouterr().err
    assert cli.main(["remove", "empty", "--results", str(tmp_path), "--yes", "--resamples", "20"]) == 0
    assert not list((tmp_path / "runs").glob("*/empty-*")) and len(list((tmp_path / "runs").glob("*/*"))) == 2
    board = pd.read_csv(tmp_path / "leaderboard.csv")
    assert sorted(board["editor"]) == ["alpha", "beta"]
