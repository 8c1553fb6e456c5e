"""The run plan (benchmark.plan.run_plan, benchmark.plan.config.read_plan): the config read once, into frozen typed values; and
the results a run wrote before the plan existed are the results a run finds after it (same signatures, same
folders, nothing edited or scored again)."""

import dataclasses
import json

import pytest

from benchmark.commands.run import compose, execute, run_pipeline
from benchmark.plan.config import SettingError, plan_run, read_plan
from benchmark.plan.run_plan import RunPlan

DEMO = ("queryset=demo_mini", "profile=tiny", "progress=false", "aggregate.bootstrap_resamples=200")

# The query-set hash pinned from the code before the run plan existed (commit 7550a39, `main` then); the identity
# editor's signature from the first commit of the key scheme that follows the pixels (scheme 2,
# benchmark.plan.code_identity: runs of scheme 1 are carried over, tests/test_carry.py); the oracle's and the metric
# signatures from the commit that moved the modules into one package per layer (import statements reduced to the names
# they bind, in a fixed order; metric signatures hold the code that computes the values). By running on that checkout:
#   cfg, ch = compose(["editor=identity", *DEMO, "paths.results=<tmp>"]); s = run_pipeline(cfg, ch["editor"])
#   -> s["editor_sig"], s["metric_sig"], run.json's queryset_hash
# (and editor=oracle with metrics=hatie_oracle stages=[edit,score] for the second pair). They change, legitimately,
# when the code that makes an editor's pixels changes (editors/identity.py, Editor's edit path, load_rgb, save_png,
# query_seed: benchmark.plan.code_identity), when a metric's version, config or the code that computes its values changes
# (benchmark.plan.code_identity.metric_code_identity), or when the demo_mini files change.
PINNED = {
    "identity": "220940a7f9cf",  # editor=identity, profile=tiny, seed 0
    "basic": "bb173f35c76b",  # metrics=basic
    "demo_mini": "6e4fedcfe48b26819132d4a1fceb28ba9d4c10cc65ca22a4c6557ffd8177ccf1",  # the query set's hash
    # editor=oracle: from fde9f3a on, where two strings of benchmark/querysets/demo.py (whose rendering the oracle
    # runs) came to name `editmeter data build demo`; the same pixels (docs/results.md, "How often keys change")
    "oracle": "dba05f1f29ae",
    "hatie_oracle": "b54ff8b6de7e",  # metrics=hatie_oracle
}
HOW_TO_UPDATE = ("a signature or hash differs from the value pinned before the run plan was introduced. If this "
                 "change is meant to change what an edit or a score depends on (an editor's code, a metric's "
                 "version, the demo files), rerun the commands in the comment above PINNED and update it; otherwise "
                 "the change would make every existing run edit and score again")


def _plan(tmp_path, *extra):
    cfg, choices = compose([*DEMO, f"paths.results={tmp_path / 'results'}", *extra])
    return cfg, choices


def test_a_demo_run_keeps_the_pinned_signatures_and_a_rerun_reuses_every_edit_and_score(tmp_path):
    cfg, choices = _plan(tmp_path, "editor=identity")
    first = run_pipeline(cfg, choices["editor"])
    meta = json.loads((tmp_path / "results" / "runs" / f"demo_mini-{PINNED['demo_mini'][:10]}" /
                       f"identity-{PINNED['identity']}" / "run.json").read_text())
    assert (first["editor_sig"], first["metric_sig"], meta["queryset_hash"]) == (
        PINNED["identity"], PINNED["basic"], PINNED["demo_mini"]), HOW_TO_UPDATE
    assert first["edit"].computed == 14 and first["score"].computed == 14
    again = run_pipeline(cfg, choices["editor"])
    assert again["run_dir"] == first["run_dir"]
    assert (again["edit"].computed, again["edit"].skipped) == (0, 14)  # no edit made
    assert (again["score"].computed, again["score"].reused) == (0, 14)  # no score computed


def test_a_suite_and_a_second_editor_keep_their_pinned_signatures(tmp_path):
    cfg, choices = _plan(tmp_path, "editor=oracle", "metrics=hatie_oracle", "stages=[edit]")
    summary = run_pipeline(cfg, choices["editor"])
    assert (summary["editor_sig"], summary["metric_sig"]) == (PINNED["oracle"], PINNED["hatie_oracle"]), HOW_TO_UPDATE


def test_the_plan_reads_each_key_once_into_typed_values(tmp_path):
    cfg, choices = _plan(tmp_path, "editor=overedit", "seed=3", "limit=5", "shard.count=2", "shard.index=1",
                         "stages=[edit,score]", "preflight=false", "budget.max_gpu_hours=2", "budget.accept=true",
                         "batch_size=2", "fail_fast=true", "max_failed_fraction=0.5", "limits.min_source_side=8",
                         "editor.noise_std=0.5", "metrics=hatie_oracle", "preflight_opts.sample=4")
    plan = read_plan(cfg)
    assert plan.editor.label == plan.editor.option == "overedit"
    assert plan.editor.file == "configs/editor/overedit.yaml" and plan.editor.target.startswith("editors.overedit.")
    assert plan.editor.config["noise_std"] == 0.5 and isinstance(plan.editor.config, dict)
    assert plan.editor_overrides == ("editor.noise_std=0.5",)
    assert (plan.seed, plan.selection.shard_index, plan.selection.shard_count, plan.selection.limit) == (3, 1, 2, 5)
    assert plan.stages == ("edit", "score") and plan.batch_size == 2 and plan.fail_fast is True
    assert plan.preflight.enabled is False and plan.preflight.sample == 4
    assert (plan.budget.max_gpu_hours, plan.budget.accept) == (2, True)
    assert plan.max_failed_fraction == 0.5 and plan.limits.min_source_side == 8
    assert plan.metrics_option == "hatie_oracle" and set(plan.metrics) == {"hatie"}
    assert all(isinstance(node, dict) for node in plan.metrics.values())  # plain values, no config nodes
    assert plan.results == tmp_path / "results" and plan.profile == "tiny" and plan.profile_weights == "random"
    assert plan.queryset["name"] == "demo_mini"
    assert read_plan(cfg, "my-label").editor.label == "my-label"  # a run label other than the option
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.seed = 4  # type: ignore[misc]


def test_the_protocol_is_single_turn_unless_the_config_says_otherwise(tmp_path):
    cfg, _ = _plan(tmp_path)
    assert read_plan(cfg).protocol == "single_turn"
    cfg, _ = _plan(tmp_path, "protocol=multi_turn")
    assert read_plan(cfg).protocol == "multi_turn"


def test_the_plan_checks_run_before_any_work_with_their_messages(tmp_path):
    """`plan_run` holds the run's config checks: a dtype the editor cannot take is refused while the plan is built,
    with the message the check always had, and nothing is created under the results."""
    cfg, choices = _plan(tmp_path, "editor=sdedit", "editor.dtype=fp17")
    with pytest.raises(SettingError, match="fp17"):
        plan_run(cfg, choices["editor"])
    assert not (tmp_path / "results").exists()


def test_execute_runs_from_the_plan_alone(tmp_path):
    """The stages take the plan: once it is read, changing the config object (a top-level key, a path, an editor
    key) changes nothing, so the plan holds values, not views of the config."""
    cfg, choices = _plan(tmp_path, "editor=overedit", "limit=3", "stages=[edit]")
    plan = plan_run(cfg, choices["editor"])
    assert isinstance(plan, RunPlan)
    cfg.limit = 1
    cfg.paths.results = str(tmp_path / "elsewhere")
    cfg.editor.noise_std = 99.0
    summary = execute(plan)
    assert summary["edit"].total == 3 and summary["run_dir"].startswith(str(tmp_path / "results"))
    assert not (tmp_path / "elsewhere").exists()
    meta = json.loads((tmp_path / summary["run_dir"] / "run.json").read_text())
    assert meta["editor_config"]["noise_std"] == plan.editor.config["noise_std"] == 12.0
