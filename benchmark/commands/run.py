"""Pipeline: queries -> edit -> score -> aggregate. Command line: `editmeter run` (benchmark.commands.cli).

    editmeter run editor=identity queryset=demo profile=tiny [any Hydra override]
    editmeter run --multirun editor=identity,oracle,overedit queryset=demo profile=tiny

`python -m benchmark.commands.run ...` is an alias of `editmeter run ...`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.plan.config import (
    CONFIG_DIR,
    UnknownOptionError,
    check_keys,
    check_overrides,
    compose,  # noqa: F401 (re-exported: `from benchmark.commands.run import compose, run_pipeline` in tests and notebooks)
    register_resolvers,
)
from benchmark.plan.resolved import Components, Resolved
from benchmark.plan.run_plan import RunPlan

register_resolvers()
_NOTED: set[str] = set()  # profiles whose "these numbers do not rank editors" note was printed


class StageTimer:
    """Wall time per named stage, in order."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0

    def table(self) -> str:
        """One line: each stage's seconds in order, then the total."""
        parts = [f"{name} {sec:.2f} s" for name, sec in self.seconds.items()]
        return f"{', '.join(parts)}; total {sum(self.seconds.values()):.2f} s"


def run_pipeline(cfg: Any, editor_name: str) -> dict[str, Any]:
    """Run the configured stages for one editor on one query set; returns a summary dict. The config is read once,
    here (`benchmark.plan.config.plan_run`: the run's checks, its input limits); `execute` runs the plan.

    Raises `PreflightError` (benchmark.io.errors) before any edit when a component is missing, `CorruptRunFile` when
    the run folder's edit log is malformed, and `TooManyFailures` after the last stage when, in the edit stage or in
    one metric set's scoring, the share of failed queries exceeds `max_failed_fraction` or all failed; entry points turn each into its message and exit status 1
    (`run_and_report`)."""
    from benchmark.plan.config import plan_run

    return execute(plan_run(cfg, editor_name))


@dataclass
class Invocation:
    """One invocation of a plan: what its steps share (its id, start time, progress setting, stage timer)."""

    plan: RunPlan
    run_id: str
    started: float
    progress: bool
    timer: StageTimer


@dataclass
class RunFolder:
    """The run folder an invocation writes, with what names it: the editor's and the metric sets' signatures."""

    path: Path
    editor_sig: str
    rewrites: bool  # the editor rewrites instructions (it enters the signature and marks the rows)
    editor_key: dict[str, Any]  # the signature's parts (benchmark.plan.config.editor_key): setting, code, edit format
    metric_sets: list[tuple[str, str, dict[str, Any], Any]]  # (label, metric signature, metrics, suite or None)


def execute(plan: RunPlan) -> dict[str, Any]:
    """Run a plan's stages, in order, for its editor on its query set; returns the summary dict (`run_pipeline`)."""
    from benchmark.io.protocols import check_editor_protocol, check_sessions_for
    from benchmark.plan.resolved import resolve

    run = _begin(plan)
    with run.timer("load queries"):  # the query set, its shards and the components, resolved once for every step
        resolved = resolve(plan)
        full, qs = resolved.full, resolved.selection
        check_sessions_for(plan.protocol, full)  # multi_turn on a set without sessions: refused before any work
    if plan.preflight.enabled:
        with run.timer("preflight"):
            _preflight(plan, resolved)
    with run.timer("load editor"):
        editor, metrics = _build_components(plan, resolved.components)
    check_editor_protocol(plan.protocol, editor.info())
    folder = _open_run_folder(run, full, editor, metrics, resolved.components.editor_code)
    reuse = _reuse_nested(run, full, qs, folder) if "edit" in plan.stages and full.meta.get("sample") else None
    _write_run_meta(run, full, qs, editor, folder)
    _say_selection(full, qs, folder, reuse)
    summary: dict[str, Any] = {"run_dir": str(folder.path), "run_id": run.run_id, "editor_sig": folder.editor_sig,
                               "metric_sig": folder.metric_sets[0][1],
                               "metric_sigs": {label: ms for label, ms, _, _ in folder.metric_sets}}
    if "edit" in plan.stages:
        summary["edit"] = _edit(run, qs, editor, folder)
    if "score" in plan.stages:
        summary["scores"] = _score(run, full, qs, editor, folder)
        summary["score"] = summary["scores"][folder.metric_sets[0][0]]
    if "aggregate" in plan.stages:
        summary["tables"] = _aggregate(run)
    _finish(run, summary, full, folder)
    return summary


def _begin(plan: RunPlan) -> Invocation:
    """A new invocation of `plan`: its id, and its first line."""
    from benchmark.io.console import progress_enabled

    run = Invocation(plan, uuid.uuid4().hex[:12], time.time(), progress_enabled(plan.progress), StageTimer())
    print(f"[editmeter] editor={plan.editor.label} profile={plan.profile} (weights: {plan.profile_weights}) "
          f"run_id={run.run_id}")
    return run


def _preflight(plan: RunPlan, resolved: Resolved) -> None:
    """The checks before the first edit, then the budget (benchmark.plan.preflight, benchmark.plan.budget), on the
    run's resolved queries and components."""
    from benchmark.plan.budget import check_budget
    from benchmark.plan.preflight import run_preflight

    print(run_preflight(plan, resolved.selection, editor=plan.editor.label,
                        metrics=plan.metrics_option or "<metrics>", editor_option=plan.editor.option))
    print(check_budget(plan, resolved.full, editor=plan.editor.label, metrics=plan.metrics_option,
                       components=resolved.components, shards=resolved.shards))


def _build_components(plan: RunPlan, components: Components) -> tuple[Any, dict[str, Any]]:
    """The editor (a config its class cannot take: an error naming the file) and the metrics (built when the run was
    resolved: a metric config that could not be built raises its error here)."""
    from benchmark.plan import config

    editor = config.build_editor(plan.editor)  # looked up at call time: tests wrap it
    if getattr(editor, "reuse_inversions", False):  # shared by every run under these results (sweeps, shards)
        from benchmark.editing.inversion_store import INVERSIONS_DIR, InversionStore

        editor.inversion_store = InversionStore(plan.results / INVERSIONS_DIR)
    return editor, components.built_metrics()


def _open_run_folder(run: Invocation, full: Any, editor: Any, metrics: dict[str, Any], code: str) -> RunFolder:
    """The run folder the signatures name (`code`: the editor's code digest, resolved with the run), created, with
    the leftovers of killed writers removed."""
    from benchmark.editing.base import warn_coarse_strengths
    from benchmark.io.fileio import remove_stale_tmp
    from benchmark.io.hashing import stable_hash
    from benchmark.plan.config import editor_key, metric_signature
    from benchmark.stages.edit import rewrites_instruction
    from benchmark.stages.score import is_suite

    plan = run.plan
    rewrites = rewrites_instruction(editor)  # declared by the editor: enters the signature, marks the rows
    key = editor_key(plan.editor.config, editor.info(), plan.seed, plan.profile, rewrites, plan.protocol, code)
    sig = stable_hash(key)  # benchmark.plan.config.editor_signature
    warn_coarse_strengths(editor.info())  # a strength the few tiny steps round away: say so before editing
    metric_sets = _metric_sets(plan.metrics, metrics, plan.metrics_option, metric_signature, is_suite)
    run_dir = plan.results / "runs" / f"{full.name}-{full.short_hash}" / f"{plan.editor.label}-{sig}"
    run_dir.mkdir(parents=True, exist_ok=True)
    # leftovers of writers killed before their rename: in the run folder, and the leaderboards' own
    remove_stale_tmp(run_dir, run.started)
    remove_stale_tmp(plan.results, run.started, recursive=False)
    if getattr(editor, "inversion_store", None) is not None:  # and the shared inversions' (a killed inversion pass)
        remove_stale_tmp(editor.inversion_store.root, run.started)
    return RunFolder(run_dir, sig, rewrites, key, metric_sets)


def _reuse_nested(run: Invocation, full: Any, qs: Any, folder: RunFolder) -> Any:
    """A sample: bring in the edits of smaller nested samples (benchmark.stages.reuse)."""
    from benchmark.stages.reuse import reuse_nested_edits

    with run.timer("reuse"):
        return reuse_nested_edits(qs, full, run.plan.results, folder.path, seed=int(run.plan.seed), run_id=run.run_id)


def _write_run_meta(run: Invocation, full: Any, qs: Any, editor: Any, folder: RunFolder) -> None:
    """run.json: what the run folder holds and how it was made (docs/results.md)."""
    from datetime import datetime, timezone

    from benchmark.io.fileio import atomic_write_text
    from benchmark.io.hashing import canonical_json
    from benchmark.io.locking import locked
    from benchmark.io.provenance import provenance
    from benchmark.plan.config import portable
    from benchmark.tables.leaderboard import RUN_META

    plan, run_dir = run.plan, folder.path
    scorings = {ms: _scoring(label, group, suite) for label, ms, group, suite in folder.metric_sets}
    scoring = scorings[folder.metric_sets[0][1]]  # run.json's top-level fields: the first set's (`scored` lists every set)
    meta = {
        "queryset": full.name, "queryset_hash": full.hash, "queryset_size": len(full),
        "sample": full.meta.get("sample"),  # a sampled set (queryset.sample): its draw and the set it came from
        # the config that loaded the set (a sample, a language split, a build under another root): what the report
        # loads to show the set's sources and ground truth
        "queryset_config": portable(plan.queryset),
        "selection": {"shard": [int(plan.selection.shard_index), int(plan.selection.shard_count)],
                      "limit": plan.selection.limit, "n_selected": len(qs),
                      # the edit batches (benchmark.stages.edit.fixed_batches): `editmeter verify` re-edits in them
                      "batch_size": int(plan.batch_size)},
        "editor": plan.editor.label, "editor_sig": folder.editor_sig, "editor_key": folder.editor_key,
        "editor_option": plan.editor.option,  # the editor config file's name (configs/editor/<option>.yaml)
        "prompt_kind": editor.prompt_kind, "profile": plan.profile, "seed": int(plan.seed),
        "rewrites_instruction": folder.rewrites, "protocol": plan.protocol,
        "editor_config": portable(plan.editor.config), "editor_info": portable(editor.info()),
        "metric_sig": folder.metric_sets[0][1],
        # the editor keys set on the command line (a sweep's settings: docs/scale.md), e.g. editor.guidance_scale=5
        "editor_overrides": list(plan.editor_overrides),
        **scoring,
        # the device the models ran on: the editor's when it has a model, else the metric models' (`device`)
        **provenance(str(editor.info().get("device") or _metric_device(plan.device))),
        "updated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    # shards of one run (benchmark.commands.launch) update run.json concurrently: read and write under one lock
    with locked(run_dir / RUN_META):
        # every metric set this folder was scored with, so a second suite never hides the first one's rows
        meta["scored"] = _earlier_scorings(run_dir / RUN_META) | scorings
        # each invocation's counted edit work (run id -> entry), added after its edit stage: kept across invocations
        if edit_work := _earlier_edit_work(run_dir / RUN_META):
            meta["edit_work"] = edit_work
        # a sample's edits reused from smaller samples, per source run (each reused edit's record names its source)
        if full.meta.get("sample") and (reused_from := _reuse_summary(run_dir)):
            meta["reused_from"] = reused_from
        # edits adopted from an earlier run of this setting after a verified sample (benchmark.stages.carry)
        if carried_from := _carry_summary(run_dir):
            meta["carried_from"] = carried_from
        atomic_write_text(run_dir / RUN_META, canonical_json(meta) + "\n")


def _metric_device(device: str) -> str:
    """The metric models' device (`device`: auto = cuda when available)."""
    from benchmark.models.diffusion import resolve_device

    return resolve_device(device)


def _say_selection(full: Any, qs: Any, folder: RunFolder, reuse: Any) -> None:
    print(f"[editmeter] {len(qs)} queries of {full.name} (hash {full.short_hash}) -> {folder.path}")
    if reuse is not None and (reuse.reused or reuse.skipped):
        used = ", ".join(f"{n['edits']} from {rel}" for rel, n in reuse.sources.items()) or "none"
        skipped = f"; not used: {'; '.join(reuse.skipped)}" if reuse.skipped else ""
        print(f"[editmeter] reuse: {reuse.reused} edits of smaller nested samples ({used}){skipped}")


def _edit(run: Invocation, qs: Any, editor: Any, folder: RunFolder) -> Any:
    """The edit stage of the run's protocol (benchmark.stages.edit, or benchmark.stages.turns for multi_turn);
    returns its stats."""
    from benchmark.io.protocols import chains_turns
    from benchmark.stages.turns import edit_stage
    from benchmark.tables.leaderboard import RUN_META

    plan = run.plan
    if plan.carry.mode == "carry" and (plan.protocol == "single_turn" or chains_turns(plan.protocol, editor)):
        _carry(run, qs, editor, folder)
    with run.timer("edit"):  # multi_turn: turn t edited from turn t-1's edit (benchmark.stages.turns)
        st = edit_stage(plan.protocol, editor)(qs, editor, folder.path, seed=plan.seed, batch_size=plan.batch_size,
                                               num_workers=plan.num_workers, retry_failed=plan.retry_failed,
                                               run_id=run.run_id, progress=run.progress, fail_fast=plan.fail_fast)
    others = f", {st.by_others} by another worker" if st.by_others else ""
    work = f"; {st.work_summary()}" if st.work else ""
    # `computed` counts the failed queries too: "edited" counts only the edits made
    earlier = (f", {st.failed_before} failed earlier (retry_failed=true edits them again)" if st.failed_before
               else "")
    missing = f", {st.missing} missing (no edit in the folder)" if st.missing else ""
    print(f"[editmeter] edit: {st.computed - st.failed} edited, {st.failed} failed, {st.skipped} already done"
          f"{earlier}{missing}{others}{work}")
    if st.work:
        _record_edit_work(folder.path / RUN_META, run.run_id, st)
    if st.failed_total:
        print(f"[editmeter] {st.failure_summary()}")
    return st


def _carry(run: Invocation, qs: Any, editor: Any, folder: RunFolder) -> None:
    """Carry-over (benchmark.stages.carry): an earlier run of this setting whose code differs gives its edits once a
    re-edited sample is identical; its line, and run.json's `carried_from` and `edit_work` updated."""
    from benchmark.io.protocols import MULTI_TURN, SINGLE_TURN, chains_turns
    from benchmark.io.provenance import git_sha
    from benchmark.plan.config import setting_of_run
    from benchmark.stages.carry import carry_over
    from benchmark.stages.edit import run_edit_stage
    from benchmark.tables.leaderboard import RUN_META

    plan = run.plan

    def edit(sample: Any, turn_inputs: Any = None) -> Any:
        return run_edit_stage(sample, editor, folder.path, seed=plan.seed, batch_size=plan.batch_size,
                              num_workers=plan.num_workers, retry_failed=plan.retry_failed, run_id=run.run_id,
                              progress=run.progress, fail_fast=plan.fail_fast, turn_inputs=turn_inputs)

    # multi_turn: the sample is re-edited wave by wave from the earlier run's previous turns (carry.reedit_sample)
    protocol = MULTI_TURN if chains_turns(plan.protocol, editor) else SINGLE_TURN
    with run.timer("carry-over"):
        st = carry_over(qs, folder.path, plan.results, setting=folder.editor_key["setting"],
                        setting_of_run=setting_of_run, seed=int(plan.seed), batch_size=int(plan.batch_size),
                        sample=int(plan.carry.sample), tolerance=int(plan.carry.tolerance), run_id=run.run_id,
                        edit=edit, git_sha=git_sha(), protocol=protocol)
    if line := st.line():
        print(line)
    if st.edit_stats is not None and st.edit_stats.work:
        _record_edit_work(folder.path / RUN_META, run.run_id, st.edit_stats)
    if st.adopted:
        _write_carry_meta(folder.path / RUN_META)


def _write_carry_meta(path: Path) -> None:
    """run.json's `carried_from`, after carry-over adopted edits, under the run folder's lock."""
    from benchmark.io.fileio import atomic_write_text
    from benchmark.io.hashing import canonical_json
    from benchmark.io.locking import locked

    with locked(path):
        try:
            meta = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError):
            return  # the next invocation rewrites it
        if isinstance(meta, dict):
            meta["carried_from"] = _carry_summary(path.parent)
            atomic_write_text(path, canonical_json(meta) + "\n")


def _carry_summary(run_dir: Path) -> dict[str, Any]:
    """run.json's `carried_from` (benchmark.stages.carry.carry_summary); {} when the log is unreadable."""
    from benchmark.stages.carry import carry_summary

    try:
        return carry_summary(run_dir)
    except Exception:  # noqa: BLE001 - a corrupt log is the edit stage's error to report
        return {}


def _score(run: Invocation, full: Any, qs: Any, editor: Any, folder: RunFolder) -> dict[str, Any]:
    """The score stage, once per metric set (several suites: one edit, scored by each, models and features
    shared); returns each set's stats by label."""
    from benchmark.stages.score import run_score_stage, run_suite_stage

    plan, scores = run.plan, {}
    for label, ms, group, suite in folder.metric_sets:
        common = {"num_workers": plan.num_workers, "progress": run.progress, "full_set": full, "run_id": run.run_id,
                  "label": label, "fail_fast": plan.fail_fast}
        with run.timer("score" if len(folder.metric_sets) == 1 else f"score {label}"):
            if suite is not None:
                sc = run_suite_stage(qs, folder.path, suite, ms, prompt_kind=editor.prompt_kind, **common)
            else:
                sc = run_score_stage(qs, folder.path, group, ms, batch_size=plan.batch_size, **common)
        scores[label] = sc
        others = f", {sc.by_others} by another worker" if sc.by_others else ""
        print(f"[editmeter] score {label}: {sc.computed - sc.failed} scored, {sc.failed} failed, {sc.reused} reused{others} "
              f"({sc.model_seconds:.2f} s in metrics)")
        if sc.failed_total:
            print(f"[editmeter] score {label}: {sc.failure_summary()}")
    return scores


def _aggregate(run: Invocation) -> dict[str, str]:
    """The leaderboards, rebuilt from every run folder under the results (benchmark.stages.aggregate)."""
    from benchmark.stages.aggregate import write_leaderboards

    plan = run.plan
    with run.timer("aggregate"):
        written = write_leaderboards(plan.results, None, plan.aggregate.bootstrap_resamples,
                                     plan.aggregate.bootstrap_seed)
    print(f"[editmeter] aggregate: wrote {', '.join(p.name for p in written.values())} in {plan.results}")
    return {k: str(v) for k, v in written.items()}


def _finish(run: Invocation, summary: dict[str, Any], full: Any, folder: RunFolder) -> None:
    """The closing lines (timings, the tiny profile's note, a partial run's word), then the verdict: raise
    TooManyFailures when the run must not exit 0."""
    from benchmark.io.errors import TooManyFailures

    plan = run.plan
    print(f"[editmeter] timings ({plan.editor.label}): {run.timer.table()}")
    if plan.profile != "pretrained" and plan.profile not in _NOTED:  # once per process, not once per sweep job
        _NOTED.add(plan.profile)
        print(f"[editmeter] NOTE: profile={plan.profile}: weights are {plan.profile_weights}; "
              "these numbers test the pipeline, they do not rank real editors.")
    summary["timings"] = dict(run.timer.seconds)
    judged = [("edit", summary["edit"])] if "edit" in summary else []
    judged += [(f"score {label}", sc) for label, sc in summary.get("scores", {}).items()]
    verdict = _failure_verdict(judged, float(plan.max_failed_fraction))
    if not verdict and "tables" in summary and "score" not in plan.stages:  # no scoring judged: the rows themselves
        verdict = _aggregate_verdict(Path(summary["tables"]["leaderboard.csv"]), full.hash, folder.editor_sig,
                                     summary["metric_sigs"])
    if verdict:
        raise TooManyFailures(verdict)
    if "edit" in summary and summary["edit"].missing:  # the closing word on a run that covers part of its set
        st = summary["edit"]
        print(f"[editmeter] PARTIAL: {st.missing} of {st.total} queries have no edit (not attempted, not failed); "
              "the leaderboard counts them in n_missing and marks the rows PARTIAL")


def _aggregate_verdict(leaderboard: Path, queryset_hash: str, editor_sig: str, metric_sigs: dict[str, str]) -> str:
    """Why an invocation that aggregated without scoring must not exit 0 ('' when it may): a metric set of this run
    has no leaderboard row, or its row covers no edited-and-scored query (every score part quarantined, or none
    written yet): the table's `PARTIAL 0/n`, said in the exit status too."""
    import pandas as pd

    lb = pd.read_csv(leaderboard, dtype=str, keep_default_na=False)
    mine = lb[(lb["queryset_hash"] == queryset_hash) & (lb["editor_sig"] == editor_sig)] if len(lb) else lb
    empty = []
    for label, ms in metric_sigs.items():
        rows = mine[mine["metric_sig"] == ms] if len(mine) else mine
        if not len(rows):
            empty.append(f"{label or 'metrics'}: no row")
        elif all(int(r["n_ok"] or 0) + int(r["n_failed"] or 0) == 0 for _, r in rows.iterrows()):
            empty.append(f"{label or 'metrics'}: {rows.iloc[0]['mark'] or 'no scored query'}")
    if not empty:
        return ""
    return (f"aggregate: this run's leaderboard rows cover no scored query ({'; '.join(empty)}). Rerun its command "
            "with the score stage (stages=[edit,score,aggregate]) to score it again; a quarantined part's reason is "
            "in the warning above and its .reason.txt")


def _metric_sets(metrics_cfg: dict[str, Any], metrics: dict[str, Any], choice: str, signature: Any,
                 is_suite: Any) -> list[tuple[str, str, dict[str, Any], Any]]:
    """[(metric_set label, metric signature, metrics, suite or None)] of a metrics config: pairwise metrics or one
    suite form one set labelled by the config's name; a config listing several suites (e.g. `standard`: hatie and
    conventional) gives one set per suite, labelled and signed exactly as the suite's own config (`metrics=hatie`)
    would be, so its rows and score cache are those of a separate run of that suite."""
    suites = [k for k, m in metrics.items() if is_suite(m)]
    if suites and len(suites) < len(metrics):
        raise ValueError("a metrics config holds either pairwise metrics or suites (e.g. hatie, conventional), "
                         f"not both; it lists suites {suites} and pairwise {sorted(set(metrics) - set(suites))}")
    if len(suites) <= 1:
        sig = signature(metrics_cfg, {k: m.info for k, m in metrics.items()})
        return [(choice, sig, metrics, metrics[suites[0]] if suites else None)]
    return [(k, signature({k: metrics_cfg[k]}, {k: metrics[k].info}), {k: metrics[k]}, metrics[k]) for k in suites]


def _scoring(label: str, metrics: dict[str, Any], suite: Any) -> dict[str, Any]:
    """run.json's view of one metric set (`scored` entry): label, column order and meaning, suite components."""
    return {
        "metric_set": label,
        "metric_order": list(suite.columns) if suite else list(metrics),
        "column_order": list(suite.column_info) if suite else list(metrics),  # run.json's dicts are key-sorted
        "metrics": _metric_meta(metrics, suite),
        "suite": {"name": suite.info.name, "components": suite.components()} if suite else None,  # summary: benchmark.tables.summaries
    }


def _earlier_scorings(path: Path) -> dict[str, Any]:
    """The metric sets an existing run.json records (`scored`), or {} when it is absent or unusable (a broken one is
    rewritten; aggregation warns about it in the meantime)."""
    from benchmark.io.score_cache import BadCacheFile
    from benchmark.tables.leaderboard import load_run_meta, scorings

    if not path.is_file():
        return {}
    try:
        views = scorings(load_run_meta(path))
    except BadCacheFile:
        return {}
    keys = ("metric_set", "metric_order", "column_order", "metrics", "suite")
    return {sig: {k: v[k] for k in keys if k in v} for sig, v in views.items()}


def _earlier_edit_work(path: Path) -> dict[str, Any]:
    """The `edit_work` entries an existing run.json records, or {} when it has none or is unreadable."""
    try:
        earlier = json.loads(path.read_text(encoding="utf-8")).get("edit_work")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError, RecursionError):
        return {}
    return earlier if isinstance(earlier, dict) else {}


def _record_edit_work(path: Path, run_id: str, st: Any) -> None:
    """Add this invocation's counted edit work to run.json's `edit_work` (run id -> {queries, work, per_query}:
    docs/results.md, "Counting the work"), under the run folder's lock (shards write the same file)."""
    from benchmark.io.fileio import atomic_write_text
    from benchmark.io.hashing import canonical_json
    from benchmark.io.locking import locked

    entry = {"queries": st.computed, "work": dict(st.work), "per_query": st.work_per_query()}
    with locked(path):
        try:
            meta = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError):
            return  # written by this invocation before its edit stage; unreadable now: the next invocation rewrites it
        if not isinstance(meta, dict):
            return
        meta["edit_work"] = {**_earlier_edit_work(path), run_id: entry}
        atomic_write_text(path, canonical_json(meta) + "\n")


def _reuse_summary(run_dir: Path) -> dict[str, Any]:
    """run.json's `reused_from`, counted from the edit log (benchmark.stages.reuse.reuse_summary); a corrupt log
    is left to the edit and score stages to report."""
    from benchmark.io.errors import CorruptRunFile
    from benchmark.stages.reuse import reuse_summary

    try:
        return reuse_summary(run_dir)
    except CorruptRunFile:
        return {}


def _failure_verdict(stages: list[tuple[str, Any]], max_fraction: float) -> str:
    """Why this run must not exit 0 ('' when it may): in a stage (the edit stage, or one metric set's scoring) more
    than `max_fraction` of its queries failed, or all did. A metric set whose failed rows are all failed edits is
    left out when the edit stage already says so (the same queries, the same reasons)."""
    fired = [(name, st, why) for name, st in stages if (why := _too_many(st, max_fraction))]
    edit_fired = any(name == "edit" for name, *_ in fired)
    fired = [(name, st, why) for name, st, why in fired
             if not (edit_fired and name != "edit" and st.failed_total == getattr(st, "edit_failed", 0))]
    if not fired:
        return ""
    parts = "; ".join(f"{name}: {summary} ({why})" if (summary := st.failure_summary()) else f"{name}: {why}"
                      for name, st, why in fired)
    if all(not st.failed_total for _, st, _ in fired):  # nothing failed: nothing was there to edit or score
        return (f"{parts}. Nothing was scored. For edits made elsewhere, name each file by its query id "
                "(<query id>.png or <prefix>_<query id>.png) in the folder given (docs/cli.md, editmeter score).")
    return (f"{parts}. The run is not trustworthy; its tables were written but they leave the failed queries out. "
            "Fix the cause, then rerun (with retry_failed=true when edits failed; fail_fast=true stops at the first "
            "failure with its traceback; max_failed_fraction=<share> accepts more failures).")


def _too_many(st: Any, max_fraction: float) -> str:
    """'every query failed' or '<share> > max_failed_fraction=<x>' when a stage's failures fail the run, 'no query
    has an edit' when every query is missing (an editor with no output for any of them), else ''. The share is of
    the queries attempted: missing ones (`Editor.missing`) are neither failed nor counted."""
    total = getattr(st, "attempted", st.total)
    if st.total and not total:
        return f"no query has an edit: {st.total} of {st.total} missing"
    if not total or not st.failed_total:
        return ""
    share = st.failed_total / total
    if st.failed_total < total and share <= max_fraction:
        return ""
    return "every query failed" if st.failed_total == total else f"{share:.0%} > max_failed_fraction={max_fraction:g}"


def run_and_report(cfg: Any, editor_name: str) -> int:
    """`run_pipeline` for entry points: a RunError (preflight, corrupt run file, too many failures) becomes its
    message on stderr and exit status 1, without a traceback. In a --multirun sweep the next job still runs."""
    from benchmark.io.errors import run_error_in

    try:
        run_pipeline(cfg, editor_name)
    except Exception as exc:  # noqa: BLE001 - only RunErrors are turned into messages; the rest re-raise
        err = run_error_in(exc)
        if err is None:
            raise
        print(f"[editmeter] error: {err}", file=sys.stderr, flush=True)
        return err.exit_code
    return 0


def _metric_meta(metrics: dict[str, Any], suite: Any) -> dict[str, Any]:
    """run.json's `metrics`: what each leaderboard column means and which direction is better."""
    if suite is None:
        from benchmark.stages.score import metric_meta

        return metric_meta(metrics)
    version = f"{suite.info.name}-{suite.info.version}"
    counts = set(getattr(suite, "count_columns", ()) or ())
    headline = getattr(suite, "headline", None)
    # `count`: a count of rows (no better direction to show); `headline`: the column a section is sorted by
    return {c: {"version": version, "higher_is_better": hib, "description": desc}
            | ({"count": True} if c in counts else {}) | ({"headline": True} if c == headline else {})
            for c, (hib, desc) in suite.column_info.items()}


# -- multirun jobs (`editmeter launch` collects their status files) ---------------------------------------

STATUS_FILE = "editmeter_status.json"
ENV_GPUS = "EDITMETER_GPUS"        # set in a launch's jobs: the GPUs to pin them to ("" = none: run in-process)
ENV_LOCKS = "EDITMETER_LAUNCH_DIR"  # set in a launch's jobs: the launch's job folder (GPU lease locks below it)


def run_job(cfg: Any, editor_name: str) -> int:
    """One Hydra job of `editmeter run`: run it (pinned to a GPU when a local launch asked for that) and, inside a
    multirun, record its exit status in the job folder for the launch to collect. Returns the exit status."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hc = HydraConfig.get()
    if hc.mode != RunMode.MULTIRUN:
        return run_and_report(cfg, editor_name)
    t0 = time.time()
    gpus = [g for g in os.environ.get(ENV_GPUS, "").split(",") if g]
    gpu = None
    if gpus:
        with lease_gpu(gpus, int(cfg.shard.index), Path(os.environ.get(ENV_LOCKS) or hc.sweep.dir) / ".gpu-locks"
                       ) as gpu:
            status = _pinned(list(hc.overrides.task), hc.runtime.output_dir, gpu)
    elif os.environ.get(ENV_LOCKS):  # under a launch: a crash is this job's status, the other jobs go on
        try:
            status = run_and_report(cfg, editor_name)
        except Exception:  # noqa: BLE001 (any bug of one job; its traceback is printed, the launch exits 1)
            traceback.print_exc()
            status = 1
    else:
        status = run_and_report(cfg, editor_name)
    record = {"status": status, "overrides": list(hc.overrides.task), "shard": [int(cfg.shard.index),
              int(cfg.shard.count)], "gpu": gpu, "seconds": round(time.time() - t0, 3), "pid": os.getpid()}
    from benchmark.io.fileio import atomic_write_text

    atomic_write_text(Path(hc.runtime.output_dir) / STATUS_FILE, json.dumps(record, sort_keys=True) + "\n")
    return status


@contextmanager
def lease_gpu(gpus: Sequence[str], index: int, lock_dir: Path, poll_s: float = 0.2) -> Iterator[str]:
    """Hold one of `gpus` for the block: the one the shard index picks (index mod len) when free, else the next free
    one (a sweep runs several settings' shards at once); waits while all are held. A lock per GPU (flock), so
    concurrent jobs never share one and a killed job frees its GPU."""
    import fcntl

    lock_dir.mkdir(parents=True, exist_ok=True)
    order = [gpus[(index + k) % len(gpus)] for k in range(len(gpus))]
    while True:
        for g in order:
            fd = os.open(lock_dir / f".gpu-{g}.lock", os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            try:
                yield g
            finally:
                os.close(fd)
            return
        time.sleep(poll_s)


def _pinned(overrides: list[str], output_dir: str, gpu: str) -> int:
    """Run one job's overrides as a fresh `editmeter run` process that sees only `gpu` (set before torch starts)."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=gpu)
    env.pop(ENV_GPUS, None)
    cmd = [sys.executable, "-m", "benchmark.commands.run", *overrides, f"hydra.run.dir={output_dir}"]
    return subprocess.run(cmd, env=env, check=False).returncode


def _hydra_entry() -> None:
    import hydra
    from hydra.core.hydra_config import HydraConfig

    from benchmark.io.console import progress_enabled, quiet_third_party

    statuses: list[int] = []  # one per job; the process exits with the worst after the whole sweep

    @hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="config")
    def _main(cfg: Any) -> None:
        quiet_third_party(progress_enabled(cfg.progress))
        statuses.append(run_job(cfg, HydraConfig.get().runtime.choices["editor"]))

    _main()
    if any(statuses):
        sys.exit(max(statuses))


def main(argv: list[str] | None = None) -> int:
    """`editmeter run [--multirun] [overrides]`: check the overrides (group options, key names), then run Hydra.

    Returns the exit status (Hydra's own errors and `--help` exit through SystemExit, as Hydra does).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    overrides = [a for a in args if not a.startswith("-")]
    if not any(a in ("-h", "--help", "--hydra-help") for a in args):
        try:
            check_overrides(overrides)
            check_keys(overrides)
        except UnknownOptionError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
    # Hydra's parser takes overrides only after its flags; --multirun may stand anywhere here.
    args = [a for a in args if a in ("-m", "--multirun")] + [a for a in args if a not in ("-m", "--multirun")]
    saved = sys.argv
    sys.argv = ["editmeter run", *args]  # Hydra parses sys.argv
    try:
        _hydra_entry()
    finally:
        sys.argv = saved
    return 0


if __name__ == "__main__":
    sys.exit(main())
