"""Budgeted runs (issue 26): the preflight estimates the run's cost from configs/costs.yaml; over budget it stops
before editing with the estimate and the sample option; under budget, tiny runs and unknown costs proceed."""

import pytest

from benchmark.commands.run import compose, run_pipeline
from benchmark.plan import budget as B
from benchmark.plan.config import options, read_plan

BASE = ("queryset=demo", "progress=false", "aggregate.bootstrap_resamples=200", "stages=[edit]")


def _cfg(tmp_path, *extra):
    cfg, choices = compose([*BASE, f"paths.results={tmp_path / 'results'}", *extra])
    return cfg, choices["editor"]


def _full(cfg):
    from benchmark.plan.preflight import load_selection

    return load_selection(read_plan(cfg))[0]


def test_every_cost_row_says_where_it_was_measured():
    table = B.load_costs()
    for group in ("editors", "metrics"):
        for name, sizes in table[group].items():
            for size, rows in sizes.items():
                for cls in rows:
                    cost = B.lookup(table, group, name, size, cls)
                    assert cost is not None and len(cost.source) > 10, (group, name, size, cls)
    # the H100 rows are measurements: p2p's is gpu-check's on an H100 (configs/costs.yaml says so), split into an
    # inversion part per source and an edit part per query that add up to the measured 46.2 s per query
    p2p = B.lookup(table, "editors", "p2p", "real", "h100")
    assert p2p.s_per_query + p2p.s_per_source == pytest.approx(46.2) and "gpu-check" in p2p.source


@pytest.mark.parametrize("size", ["real", "tiny"])
def test_the_p2p_split_follows_the_unet_evaluations(size):
    """s_per_source / s_per_query is the inversion's UNet work over the edit's (forward+backward = 3 forwards):
    (4n + 3nk) / 4n at the steps n and null-text inner steps k of that size."""
    n, k = {"real": (50, 10), "tiny": (3, 2)}[size]
    cls = "h100" if size == "real" else "cpu"
    row = B.lookup(B.load_costs(), "editors", "p2p", size, cls)
    inversion, edit = 4 * n + 3 * n * k, 4 * n
    assert row.s_per_source / row.s_unshared == pytest.approx(inversion / (inversion + edit), abs=0.005)


def test_over_budget_refuses_non_interactively_with_the_estimate_and_the_sample_option(tmp_path):
    cfg, _ = _cfg(tmp_path, "editor=p2p", "profile=random", "editor.device=cuda", "budget.max_gpu_hours=0.25")
    with pytest.raises(B.OverBudget) as info:
        B.check_budget(read_plan(cfg), _full(cfg), editor="p2p", metrics="hatie", gpu_name=lambda: "NVIDIA H100 80GB HBM3",
                       interactive=lambda: False)
    msg = str(info.value)
    # 133 x (4.86 + 0.09) s + 16 sources x 41.34 s + 44 s = 0.38 h > 0.25
    assert "133 queries to do" in msg and "4.86 s edit" in msg and "16 sources x 41.34 s inversion" in msg
    assert "h100 hours" in msg
    assert "queryset.sample=" in msg and "budget.max_gpu_hours=" in msg and "budget.accept=true" in msg


def test_over_budget_on_a_terminal_asks(tmp_path):
    cfg, _ = _cfg(tmp_path, "editor=p2p", "profile=random", "editor.device=cuda", "budget.max_gpu_hours=0.25")
    kw = {"gpu_name": lambda: "NVIDIA H100", "interactive": lambda: True}
    line = B.check_budget(read_plan(cfg), _full(cfg), editor="p2p", metrics="hatie", ask=lambda q: True, **kw)
    assert "confirmed" in line
    with pytest.raises(B.OverBudget):
        B.check_budget(read_plan(cfg), _full(cfg), editor="p2p", metrics="hatie", ask=lambda q: False, **kw)


def test_the_suggested_sample_fits_the_budget(tmp_path):
    cfg, _ = _cfg(tmp_path, "editor=p2p", "profile=random", "editor.device=cuda", "budget.max_gpu_hours=1")
    est, _ = B.estimate(read_plan(cfg), _full(cfg), editor="p2p", metrics="hatie", gpu_name=lambda: "H100")
    n = B.largest_sample(est, 1.0)
    assert 0 < n < 133 and (n * est.per_query + est.cost.load_s) / 3600 <= 1.0
    assert f"queryset.sample={n} " in B.refusal(est, 1.0, "demo")


@pytest.mark.parametrize("extra", [("budget.max_gpu_hours=4",), ("budget.accept=true",), ("queryset.sample=28",)])
def test_allowed_or_sampled_runs_proceed(tmp_path, extra):
    # the whole set is over 0.25 h (above); a sample of 28 queries on 14 sources is 0.21 h
    cfg, _ = _cfg(tmp_path, "editor=p2p", "profile=random", "editor.device=cuda", "budget.max_gpu_hours=0.25", *extra)
    line = B.check_budget(read_plan(cfg), _full(cfg), editor="p2p", metrics="hatie", gpu_name=lambda: "NVIDIA H100",
                          interactive=lambda: False)
    assert line.startswith("[editmeter] budget: ~")


def test_an_unlisted_gpu_borrows_the_h100_rows_and_says_so(tmp_path):
    cfg, _ = _cfg(tmp_path, "editor=ip2p", "profile=random", "editor.device=cuda")
    line = B.check_budget(read_plan(cfg), _full(cfg), editor="ip2p", metrics="basic", gpu_name=lambda: "NVIDIA A100-SXM4-40GB")
    assert "A100" in line and "h100 rows" in line


def test_unknown_cost_is_reported_not_blocked_with_how_to_measure_it_there(tmp_path):
    cfg, _ = _cfg(tmp_path, "editor=ip2p", "profile=random", "budget.max_gpu_hours=0")
    line = B.check_budget(read_plan(cfg), _full(cfg), editor="ip2p", metrics="basic", interactive=lambda: False)
    # on a CPU the measurement is a small run (gpu-check measures nothing without CUDA)
    assert "cost unknown" in line and "editmeter run editor=ip2p" in line and "gpu-check" not in line
    # the suggested command runs the same profile: without profile=random it would load the real weights
    assert "editmeter run editor=ip2p queryset=demo queryset.sample=14 profile=random " in line
    cfg, _ = _cfg(tmp_path, "editor=omnigen", "profile=random", "editor.device=cuda", "budget.max_gpu_hours=0")
    line = B.check_budget(read_plan(cfg), _full(cfg), editor="omnigen", metrics="basic", gpu_name=lambda: "NVIDIA H100",
                          interactive=lambda: False)
    assert "cost unknown" in line and "on h100" in line and "gpu-check" in line


def test_done_queries_are_not_counted_again(tmp_path, capsys):
    cfg, editor = _cfg(tmp_path, "editor=identity", "profile=tiny", "limit=5")
    run_pipeline(cfg, editor)
    cfg, _ = _cfg(tmp_path, "editor=identity", "profile=tiny", "limit=8")
    est, _ = B.estimate(read_plan(cfg), _full(cfg), editor="identity", metrics="basic")
    assert (est.todo, est.done) == (3, 5)


def test_an_over_budget_run_stops_before_editing(tmp_path, monkeypatch, capsys):
    """The whole pipeline: the budget refusal comes from the preflight, before the editor is built."""
    monkeypatch.setattr(B, "_interactive", lambda: False)
    cfg, editor = _cfg(tmp_path, "editor=ip2p", "profile=tiny", "budget.max_gpu_hours=0.0001")
    with pytest.raises(B.OverBudget, match="queryset.sample="):
        run_pipeline(cfg, editor)
    assert not (tmp_path / "results" / "runs").exists()


def test_a_tiny_demo_run_proceeds_and_prints_its_estimate(tmp_path, capsys):
    cfg, editor = _cfg(tmp_path, "editor=identity", "profile=tiny", "limit=2")
    run_pipeline(cfg, editor)
    assert "[editmeter] budget: identity loads no model: its 2 queries to do take seconds" in capsys.readouterr().out


@pytest.mark.parametrize(("extra", "pool"), [((), 112), (("queryset.sample_types=[obj_add]",), 16),
                                             (("queryset=demo_mini",), 13)])
def test_the_suggested_sample_never_exceeds_the_pool_it_is_drawn_from(tmp_path, extra, pool):
    """3 h fits ~124 p2p queries, more than the demo's 112 HATIE-type queries its samples draw from (sample_types:
    hatie), or the 16 of a restricted pool; demo_mini draws from all its 14, and a sample of all is refused: 13."""
    cfg, _ = _cfg(tmp_path, "editor=p2p", "profile=random", "editor.device=cuda", "budget.max_gpu_hours=3", *extra)
    full = _full(cfg)
    est, _ = B.estimate(read_plan(cfg), full, editor="p2p", metrics="hatie", gpu_name=lambda: "H100")
    n = B.largest_sample(est, 3.0)
    assert est.pool == pool and n == min(pool, int((3 * 3600 - 44) / est.per_query))
    if est.hours > 3:
        assert f"queryset.sample={n} " in B.refusal(est, 3.0, full.name)
    # the suggestion is a sample the set accepts
    from hydra.utils import instantiate

    from benchmark.commands.run import compose

    cfg2, _ = compose([*BASE, f"paths.results={tmp_path / 'results'}", *extra, f"queryset.sample={n}"])
    assert len(instantiate(cfg2.queryset)) == n


def test_an_extended_sample_counts_the_smaller_samples_edits_as_done(tmp_path):
    """sample=28 then sample=56: the estimate counts only the 28 queries the larger run will edit (it reuses the
    rest, benchmark.stages.reuse)."""
    cfg, editor = _cfg(tmp_path, "editor=identity", "profile=tiny", "queryset.sample=28")
    run_pipeline(cfg, editor)
    cfg, _ = _cfg(tmp_path, "editor=identity", "profile=tiny", "queryset.sample=56")
    est, _ = B.estimate(read_plan(cfg), _full(cfg), editor="identity", metrics="basic")
    assert (est.todo, est.done) == (28, 28)
    cfg, _ = _cfg(tmp_path, "editor=identity", "profile=tiny", "queryset.sample=56", "seed=1")  # another seed: none
    est, _ = B.estimate(read_plan(cfg), _full(cfg), editor="identity", metrics="basic")
    assert (est.todo, est.done) == (56, 0)


def _declares_device(editor: str) -> bool:
    """Whether the editor's YAML has a `device` key (a model editor); a weight-free one has none to set."""
    from omegaconf import OmegaConf

    from benchmark.plan.config import CONFIG_DIR

    return "device" in OmegaConf.load(CONFIG_DIR / "editor" / f"{editor}.yaml")


@pytest.mark.parametrize("editor", options("editor"))
def test_every_editor_gets_its_tiny_cost_row_or_runs_unblocked_saying_how_to_measure_it(tmp_path, editor):
    """Derived from what each editor declares, so an editor added as docs/editors.md says passes: with a tiny row in
    configs/costs.yaml the tiny estimate uses it (a model editor's on the CPU); without one, the budget line says
    `cost unknown` and how to measure it, and never blocks, even at a zero budget (docs/running.md#budget)."""
    device = ("editor.device=cpu",) if _declares_device(editor) else ()
    cfg, _ = _cfg(tmp_path, f"editor={editor}", "profile=tiny", *device, "budget.max_gpu_hours=0")
    table = B.load_costs()
    est, note = B.estimate(read_plan(cfg), _full(cfg), editor=editor, metrics="basic", table=table)
    row = B.lookup(table, "editors", editor, "tiny", "cpu")
    if B.weight_free(read_plan(cfg).editor.config) and row is None:  # loads no model: no row, no "measure it"
        assert est is not None and est.hours == 0 and "loads no model" in est.describe(), note
    elif row is not None:
        assert est is not None and est.cost == row, note
        assert not device or est.device_class == "cpu"
    else:
        assert est is None and note.startswith(f"cost unknown: configs/costs.yaml has no row for editor {editor} ")
        assert f"editmeter run editor={editor} queryset=demo" in note and note.endswith("and add it")
        line = B.check_budget(read_plan(cfg), _full(cfg), editor=editor, metrics="basic", interactive=lambda: False)
        assert line == f"[editmeter] budget: {note}"


def _sources(queries):
    return len({(q.image, q.source_caption) for q in queries})


@pytest.mark.parametrize("extra", [("queryset=demo_mini",), ("queryset=demo_mini", "limit=9"), ("limit=40",),
                                   ("queryset.sample=28",), ("shard.count=3",)])
def test_an_inversion_sharing_editor_pays_one_inversion_per_source(tmp_path, extra):
    """P2P inverts each (source image, source caption) once for all its queries: the estimate counts the distinct
    sources of the queries to do (demo_mini: 7 queries per source, 1 inversion each) for the inversion part and
    every query for the edit part."""
    from benchmark.plan.preflight import load_selection

    cfg, _ = _cfg(tmp_path, "editor=p2p", "profile=random", "editor.device=cuda", *extra)
    full, _ = load_selection(read_plan(cfg))
    est, _ = B.estimate(read_plan(cfg), full, editor="p2p", metrics="hatie", gpu_name=lambda: "H100")
    count = int(cfg.shard.count)
    queries = [q for i in range(count) for q in full.shard(i, count).subset(cfg.limit)]
    assert est.todo == len(queries) and est.sources == _sources(queries) < len(queries)
    row, score = est.cost, est.score.s_per_query
    assert est.hours * 3600 == pytest.approx(len(queries) * (row.s_per_query + score)
                                             + est.sources * row.s_per_source + count * row.load_s)
    assert f"{est.sources} sources x {row.s_per_source:g} s inversion" in est.describe()
    if extra == ("queryset=demo_mini",):
        assert (est.todo, est.sources) == (14, 2)


def test_without_sharing_every_query_pays_the_whole_row(tmp_path):
    """An editor whose class does not share inversions (ip2p), or P2P with the sharing turned off, pays its whole
    per-query cost on every query."""
    cfg, _ = _cfg(tmp_path, "editor=p2p", "profile=random", "editor.device=cuda", "queryset=demo_mini",
                  "editor.reuse_inversions=false")
    est, _ = B.estimate(read_plan(cfg), _full(cfg), editor="p2p", metrics="hatie", gpu_name=lambda: "H100")
    assert est.sources is None and est.hours * 3600 == pytest.approx(14 * est.per_query + est.cost.load_s)
    assert est.per_query == pytest.approx(46.2 + est.score.s_per_query)
    cfg, _ = _cfg(tmp_path, "editor=ip2p", "profile=random", "editor.device=cuda", "queryset=demo_mini")
    est, _ = B.estimate(read_plan(cfg), _full(cfg), editor="ip2p", metrics="hatie", gpu_name=lambda: "H100")
    assert est.sources is None and "inversion" not in est.describe()


@pytest.mark.parametrize("size, cls, steps, inner", [("real", "h100", 50, 10), ("tiny", "cpu", 3, 2)])
def test_p2p_inversion_setting_picks_its_row_scaled_by_unet_work(tmp_path, size, cls, steps, inner):
    """The p2p rows measure null-text inversion; `editor.inversion=negative_prompt | direct` take the row's
    `by_setting` variants: the same seconds per forward-equivalent UNet evaluation, over n (negative-prompt) or 3n
    (direct) evaluations per source instead of 4n + 3nk; the edit part per query is unchanged."""
    table = B.load_costs()
    base = B.lookup(table, "editors", "p2p", size, cls)
    null_text = 4 * steps + 3 * steps * inner
    for inversion, work in (("null_text", null_text), ("negative_prompt", steps), ("direct", 3 * steps)):
        row = B.lookup(table, "editors", "p2p", size, cls, {"inversion": inversion})
        assert row.s_per_query == base.s_per_query and row.load_s == base.load_s
        assert row.s_per_source == pytest.approx(base.s_per_source * work / null_text, rel=0.01)
        assert ("ESTIMATED" in row.source) == (inversion != "null_text")
    cfg, _ = _cfg(tmp_path, "editor=p2p", "profile=random", "editor.device=cuda", "queryset=demo_mini",
                  "editor.inversion=direct")
    est, _ = B.estimate(read_plan(cfg), _full(cfg), editor="p2p", metrics="hatie", gpu_name=lambda: "H100")
    assert f"{est.sources} sources x 3.65 s inversion" in est.describe()


# ----------------------------------------------------------------------------------- the judge's cost (issue 43 §8)
def test_image_token_rules_by_hand():
    from benchmark.plan.judge_budget import openai_image_tokens, qwen_image_tokens

    # OpenAI's published examples at detail high: 1024 x 1024 -> 768 x 768, 4 tiles; 2048 x 4096 -> 768 x 1536, 6
    assert openai_image_tokens(1024, 1024) == 85 + 170 * 4 and openai_image_tokens(2048, 4096) == 85 + 170 * 6
    assert openai_image_tokens(256, 256) == 85 + 170  # never scaled up: one tile
    # Qwen2.5-VL: sides rounded to multiples of 28, one token per 28 x 28 patch: 1000 -> 1008 = 36 patches a side
    assert qwen_image_tokens(1000, 1000) == 36 * 36 and qwen_image_tokens(256, 256) == 9 * 9


def _demo():
    """The demo set as it is (load_selection would refuse a GEdit-only suite on it before the budget is asked)."""
    from benchmark.io.provenance import PROJECT_ROOT
    from benchmark.querysets.io import load_queryset

    return load_queryset(PROJECT_ROOT / "datasets" / "demo")


def _judge_lines(tmp_path, *extra):
    cfg, editor = _cfg(tmp_path, "editor=identity", "profile=tiny", "stages=[edit,score]", "limit=5", *extra)
    line = B.check_budget(read_plan(cfg), _demo(), editor=editor, metrics="x", interactive=lambda: False)
    return [ln for ln in line.splitlines() if "budget: judge" in ln], cfg


@pytest.mark.parametrize(("metrics", "per_query", "images", "reply"), [
    (("metrics=gedit",), 2, 3, 512),                                                  # SC [source, edit] + PQ [edit]
    (("metrics=imgedit",), 1, 2, 512),                                                # one prompt, two images
    (("metrics=editscore", "metrics.editscore.num_pass=4"), 8, 12, 512),              # SC + PQ per pass
    (("metrics=gedit", "metrics/gedit_judge@metrics.gedit.backbone=openai"), 2, 3, 1400),
    (("metrics=kris", "metrics/kris_judge@metrics.kris.backbone=openai"), 3, 5, 1000),  # VC, IF, VQ
])
def test_the_budget_line_gives_the_judge_requests_and_tokens_per_query(tmp_path, metrics, per_query, images, reply):
    from benchmark.plan.judge_budget import openai_image_tokens, qwen_image_tokens, source_sizes

    lines, cfg = _judge_lines(tmp_path, *metrics)
    assert len(lines) == 1, lines
    line = lines[0]
    assert f"{per_query} request(s) per query, {per_query * 5:,} for the 5 selected queries" in line
    full = _demo()
    sizes = source_sizes(full, full.subset(5).queries)
    count = openai_image_tokens if "openai" in " ".join(metrics) else qwen_image_tokens
    per_image = sum(count(w, h) for w, h in sizes) / len(sizes)
    assert f"~{images * per_image:,.0f} image tokens per query ({images} images x ~{per_image:,.0f}" in line
    assert f"replies <= {per_query * reply:,} tokens per query (max {reply} per request)" in line
    assert line.endswith("an estimate")


def test_no_judge_line_without_a_judged_suite_or_without_scoring(tmp_path):
    assert _judge_lines(tmp_path, "metrics=basic")[0] == []
    cfg, editor = _cfg(tmp_path, "editor=identity", "profile=tiny", "metrics=gedit", "limit=5")  # stages=[edit]
    assert "judge" not in B.check_budget(read_plan(cfg), _demo(), editor=editor, metrics="gedit")


def test_the_prompt_text_is_bounded_by_the_pinned_file_when_it_is_there(tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("x" * 4000, encoding="utf-8")
    line = _judge_lines(tmp_path, "metrics=gedit", f"metrics.gedit.prompts_file={prompts}")[0][0]
    assert "prompt text <= ~2,000 tokens per query" in line and "M prompt tokens in all" in line  # 2 x 4000 / 4
    line = _judge_lines(tmp_path, "metrics=gedit", f"metrics.gedit.prompts_file={tmp_path / 'absent.txt'}")[0][0]
    assert "prompt text not counted (prompt file not fetched)" in line


def test_a_launch_prints_the_judge_cost_of_each_run(tmp_path):
    cfg, editor = _cfg(tmp_path, "editor=identity", "profile=tiny", "stages=[edit,score]", "limit=5", "metrics=gedit")
    lines = B.check_launch_budget([(read_plan(cfg), _demo(), editor, "gedit")], interactive=lambda: False)
    judge = [ln for ln in lines if "judge gedit" in ln]
    assert len(judge) == 1 and judge[0].startswith("[editmeter] budget: demo on identity: judge gedit")
    assert "2 request(s) per query, 10 for the 5 selected queries" in judge[0]


def test_the_suggested_sample_of_a_session_set_counts_whole_sessions_that_fit(tmp_path):
    """demo_sessions (4 sessions of 2-3 turns) samples in sessions: the pool is its sessions, and the suggested N is
    counted at the longest session's turns, so that any N sessions fit; the suggested sample loads."""
    cfg, _ = _cfg(tmp_path, "queryset=demo_sessions", "editor=p2p", "profile=random", "editor.device=cuda",
                  "budget.max_gpu_hours=1")
    full = _full(cfg)
    est, _ = B.estimate(read_plan(cfg), full, editor="p2p", metrics="hatie", gpu_name=lambda: "H100")
    assert (est.pool, est.unit_queries, est.todo) == (3, 3, 10)  # 4 sessions, less the whole set; 3 turns at most
    assert est.per_query > 1
    hours = (2 * 3 * est.per_query + est.cost.load_s + 1) / 3600  # two sessions of 3 turns, and a second to spare
    n = B.largest_sample(est, hours)
    assert n == 2 and f"queryset.sample={n} " in B.refusal(est, hours, "demo_sessions")
    assert B.largest_sample(est, hours - 2 / 3600) == 1  # 6 queries' worth no longer fits two whole 3-turn sessions
    sampled, _ = _cfg(tmp_path, "queryset=demo_sessions", f"queryset.sample={n}")
    picked = _full(sampled)
    assert len({q.session for q in picked.queries}) == n and len(picked.queries) <= n * 3
    assert B.sample_pool(None, picked) == 3  # a smaller sample draws from the same 3


@pytest.mark.parametrize("editor", ["identity", "oracle", "overedit"])
def test_a_weight_free_editor_needs_no_cost_row_and_gets_no_measure_it_noise(tmp_path, editor):
    """identity, oracle and overedit load no model (no `weights` key): no row, no "cost unknown ... measure it"
    (issue 58: overedit edits 14 queries in 0.13 s); with a scoring row the line still estimates the scoring."""
    assert editor not in B.load_costs()["editors"]
    cfg, _ = _cfg(tmp_path, f"editor={editor}", "profile=tiny", "budget.max_gpu_hours=0")
    line = B.check_budget(read_plan(cfg), _full(cfg), editor=editor, metrics="basic", interactive=lambda: False)
    assert line == (f"[editmeter] budget: {editor} loads no model: its 133 queries to do take seconds on any machine "
                    "(no device hours to estimate)")
    cfg, _ = _cfg(tmp_path, f"editor={editor}", "profile=random", "metrics=hatie")  # real size: no row either
    est, _ = B.estimate(read_plan(cfg), _full(cfg), editor=editor, metrics="hatie")
    assert est.hours == 0 and est.describe().startswith(f"{editor} loads no model")


def test_a_weight_free_editor_still_pays_its_scoring():
    """Scored where the table has a scoring row (HATIE on an H100), the no-model editor's line is an estimate."""
    table = B.load_costs()
    est = B.Estimate("overedit", "h100", 133, 0, 1, B.Cost(0.0, 0.0, "", confidence=B.NO_MODEL),
                     B.lookup(table, "metrics", "hatie", "real", "h100"))
    assert est.hours == pytest.approx(133 * 0.09 / 3600)
    assert est.describe() == ("~0.00 h100 hours, wall ~12 s: 133 queries to do x (overedit loads no model + 0.09 s "
                              "scoring); scoring cost measured on h100")


@pytest.mark.parametrize(("extra", "said"), [
    (("editor=ip2p", "profile=tiny"), "an order of magnitude (measured on a busy shared cpu)"),
    (("editor=ip2p", "profile=random", "editor.device=cuda"), "measured on h100"),
    (("editor=rf_solver", "profile=random", "editor.device=cuda"), "an estimate, not measured on h100"),
])
def test_the_budget_line_says_how_sure_it_is_not_the_measurement_notes(tmp_path, extra, said):
    """The line gives the estimate and how sure it is (the row's `confidence`); where, when and under what load the
    row was measured stays in configs/costs.yaml (issue 58: "shared 2-core CPU, 2026-11-24 ..., NOISY")."""
    cfg, editor = _cfg(tmp_path, *extra)
    line = B.check_budget(read_plan(cfg), _full(cfg), editor=editor, metrics="basic", gpu_name=lambda: "NVIDIA H100",
                          interactive=lambda: False, ask=lambda q: True)
    assert line.startswith("[editmeter] budget: ~") and line.endswith(said), line
    for note in ("2026", "NOISY", "load average", "gpu-check", "ESTIMATED", "["):
        assert note not in line.removeprefix("[editmeter] "), (note, line)
    cfg, editor = _cfg(tmp_path, *extra, "metrics=hatie")
    line = B.check_budget(read_plan(cfg), _full(cfg), editor=editor, metrics="hatie", gpu_name=lambda: "NVIDIA H100",
                          interactive=lambda: False, ask=lambda q: True)
    if "cuda" in " ".join(extra):
        assert line.endswith(f"edit cost {said}; scoring cost measured on h100"), line


def test_a_cost_row_without_a_known_confidence_is_refused_naming_the_row(tmp_path):
    table = B.load_costs()
    row = dict(table["editors"]["ip2p"]["tiny"]["cpu"])
    for bad in (None, "exact"):
        table["editors"]["ip2p"]["tiny"]["cpu"] = {**row, "confidence": bad} if bad else \
            {k: v for k, v in row.items() if k != "confidence"}
        with pytest.raises(B.PreflightError, match=r"editors\.ip2p\.tiny\.cpu.*confidence"):
            B.lookup(table, "editors", "ip2p", "tiny", "cpu")
