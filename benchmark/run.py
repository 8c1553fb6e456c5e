"""Pipeline: queries -> edit -> score -> aggregate. Command line: `editmeter run` (benchmark.cli).

    editmeter run editor=identity queryset=demo profile=tiny [any Hydra override]
    editmeter run --multirun editor=identity,oracle,overedit queryset=demo profile=tiny

`python -m benchmark.run ...` is an alias of `editmeter run ...`.
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
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmark.config import (
    CONFIG_DIR,
    UnknownOptionError,
    apply_run_checks,
    check_keys,
    check_overrides,
    compose,  # noqa: F401 (re-exported: `from benchmark.run import compose, run_pipeline` in tests and notebooks)
    register_resolvers,
)

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


def _metric_device(cfg: Any) -> str:
    """The metric models' device (`device`: auto = cuda when available)."""
    from benchmark.models.diffusion import resolve_device

    return resolve_device(str(cfg.get("device", "auto")))


def run_pipeline(cfg: Any, editor_name: str) -> dict[str, Any]:
    """Run the configured stages for one editor on one query set; returns a summary dict.

    Raises `PreflightError` (benchmark.errors) before any edit when a component is missing, `CorruptRunFile` when
    the run folder's edit log is malformed, and `TooManyFailures` after the last stage when, in the edit stage or in
    one metric set's scoring, the share of failed queries exceeds `max_failed_fraction` or all failed; entry points turn each into its message and exit status 1
    (`run_and_report`)."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from benchmark.budget import check_budget
    from benchmark.config import build_editor, editor_signature, metric_signature, portable
    from benchmark.console import progress_enabled
    from benchmark.editing.base import warn_coarse_strengths
    from benchmark.errors import TooManyFailures
    from benchmark.fileio import atomic_write_text, remove_stale_tmp
    from benchmark.hashing import canonical_json
    from benchmark.leaderboard import RUN_META
    from benchmark.locking import locked
    from benchmark.preflight import load_selection, run_preflight
    from benchmark.protocols import check_sessions_for, run_protocol
    from benchmark.provenance import provenance
    from benchmark.stages.aggregate import write_leaderboards
    from benchmark.stages.edit import rewrites_instruction
    from benchmark.stages.score import is_suite, run_score_stage, run_suite_stage
    from benchmark.stages.turns import edit_stage

    apply_run_checks(cfg, editor_name)  # inputs: refuse an unsafe label, set the input limits, before any work
    protocol = run_protocol(cfg)  # single_turn | multi_turn: in the signature (multi_turn only), run.json, the rows
    timer = StageTimer()
    started = time.time()
    progress = progress_enabled(cfg.progress)
    run_id = uuid.uuid4().hex[:12]
    profile = cfg.profile.name
    print(f"[editmeter] editor={editor_name} profile={profile} (weights: {cfg.profile.weights}) run_id={run_id}")
    with timer("load queries"):
        full, qs = load_selection(cfg)
        check_sessions_for(protocol, full)
    if cfg.get("preflight", True):
        with timer("preflight"):
            choices = _choices(cfg)
            print(run_preflight(cfg, qs, editor=editor_name, metrics=choices.get("metrics", "<metrics>"),
                                editor_option=choices.get("editor")))
            print(check_budget(cfg, full, editor=editor_name, metrics=_choices(cfg).get("metrics", "")))  # the budget
    with timer("load editor"):
        editor = build_editor(cfg)  # a YAML the class cannot take: an error naming the file
        if getattr(editor, "reuse_inversions", False):  # shared by every run under these results (sweeps, shards)
            from benchmark.editing.inversion_store import INVERSIONS_DIR, InversionStore

            editor.inversion_store = InversionStore(Path(cfg.paths.results) / INVERSIONS_DIR)
        metrics = {name: instantiate(node) for name, node in cfg.metrics.items()}
    editor_cfg = OmegaConf.to_container(cfg.editor, resolve=True)
    rewrites = rewrites_instruction(editor)  # declared by the editor: enters the signature, marks the rows
    sig = editor_signature(editor_cfg, editor.info(), cfg.seed, profile, rewrites, protocol)
    warn_coarse_strengths(editor.info())  # a strength the few tiny steps round away: say so before editing
    metric_sets = _metric_sets(OmegaConf.to_container(cfg.metrics, resolve=True), metrics,
                               _choices(cfg).get("metrics", ""), metric_signature, is_suite)
    msig = metric_sets[0][1]
    results = Path(cfg.paths.results)
    run_dir = results / "runs" / f"{full.name}-{full.short_hash}" / f"{editor_name}-{sig}"
    run_dir.mkdir(parents=True, exist_ok=True)
    # leftovers of writers killed before their rename: in the run folder, and the leaderboards' own
    remove_stale_tmp(run_dir, started)
    remove_stale_tmp(results, started, recursive=False)
    if getattr(editor, "inversion_store", None) is not None:  # and the shared inversions' (a killed inversion pass)
        remove_stale_tmp(editor.inversion_store.root, started)
    reuse = None
    if "edit" in cfg.stages and full.meta.get("sample"):  # a sample: bring in the edits of smaller nested samples
        from benchmark.stages.reuse import reuse_nested_edits

        with timer("reuse"):
            reuse = reuse_nested_edits(qs, full, results, run_dir, seed=int(cfg.seed), run_id=run_id)
    scorings = {ms: _scoring(label, group, suite) for label, ms, group, suite in metric_sets}
    scoring = scorings[msig]  # run.json's top-level fields: the first set's (`scored` lists every set)
    meta = {
        "queryset": full.name, "queryset_hash": full.hash, "queryset_size": len(full),
        "sample": full.meta.get("sample"),  # a sampled set (queryset.sample): its draw and the set it came from
        "selection": {"shard": [int(cfg.shard.index), int(cfg.shard.count)], "limit": cfg.limit, "n_selected": len(qs)},
        "editor": editor_name, "editor_sig": sig,
        "prompt_kind": editor.prompt_kind, "profile": profile, "seed": int(cfg.seed),
        "rewrites_instruction": rewrites, "protocol": protocol,
        "editor_config": portable(editor_cfg), "editor_info": portable(editor.info()), "metric_sig": msig,
        # the editor keys set on the command line (a sweep's settings: docs/scale.md), e.g. editor.guidance_scale=5
        "editor_overrides": _editor_overrides(cfg),
        **scoring,
        # the device the models ran on: the editor's when it has a model, else the metric models' (`device`)
        **provenance(str(editor.info().get("device") or _metric_device(cfg))),
        "updated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    # shards of one run (benchmark.launch) update run.json concurrently: read and write under one lock
    with locked(run_dir / RUN_META):
        # every metric set this folder was scored with, so a second suite never hides the first one's rows
        meta["scored"] = _earlier_scorings(run_dir / RUN_META) | scorings
        # each invocation's counted edit work (run id -> entry), added after its edit stage: kept across invocations
        if edit_work := _earlier_edit_work(run_dir / RUN_META):
            meta["edit_work"] = edit_work
        # a sample's edits reused from smaller samples, per source run (each reused edit's record names its source)
        if full.meta.get("sample") and (reused_from := _reuse_summary(run_dir)):
            meta["reused_from"] = reused_from
        atomic_write_text(run_dir / RUN_META, canonical_json(meta) + "\n")
    print(f"[editmeter] {len(qs)} queries of {full.name} (hash {full.short_hash}) -> {run_dir}")
    if reuse is not None and (reuse.reused or reuse.skipped):
        used = ", ".join(f"{n['edits']} from {rel}" for rel, n in reuse.sources.items()) or "none"
        skipped = f"; not used: {'; '.join(reuse.skipped)}" if reuse.skipped else ""
        print(f"[editmeter] reuse: {reuse.reused} edits of smaller nested samples ({used}){skipped}")

    summary: dict[str, Any] = {"run_dir": str(run_dir), "run_id": run_id, "editor_sig": sig, "metric_sig": msig,
                               "metric_sigs": {label: ms for label, ms, _, _ in metric_sets}}
    if "edit" in cfg.stages:
        with timer("edit"):
            st = edit_stage(protocol, editor)(qs, editor, run_dir, seed=cfg.seed, batch_size=cfg.batch_size,
                                      num_workers=cfg.num_workers, retry_failed=cfg.retry_failed, run_id=run_id,
                                      progress=progress, fail_fast=bool(cfg.get("fail_fast", False)))
        summary["edit"] = st
        others = f", {st.by_others} by another worker" if st.by_others else ""
        work = f"; {st.work_summary()}" if st.work else ""
        # `computed` counts the failed queries too: "edited" counts only the edits made
        earlier = (f", {st.failed_before} failed earlier (retry_failed=true edits them again)" if st.failed_before
                   else "")
        missing = f", {st.missing} missing (no edit in the folder)" if st.missing else ""
        print(f"[editmeter] edit: {st.computed - st.failed} edited, {st.failed} failed, {st.skipped} already done"
              f"{earlier}{missing}{others}{work}")
        if st.work:
            _record_edit_work(run_dir / RUN_META, run_id, st)
        if st.failed_total:
            print(f"[editmeter] {st.failure_summary()}")
    if "score" in cfg.stages:
        summary["scores"] = {}
        for label, ms, group, suite in metric_sets:  # several suites: one edit, scored by each (models and features shared)
            common = {"num_workers": cfg.num_workers, "progress": progress, "full_set": full, "run_id": run_id,
                      "label": label, "fail_fast": bool(cfg.get("fail_fast", False))}
            with timer("score" if len(metric_sets) == 1 else f"score {label}"):
                if suite is not None:
                    sc = run_suite_stage(qs, run_dir, suite, ms, prompt_kind=editor.prompt_kind, **common)
                else:
                    sc = run_score_stage(qs, run_dir, group, ms, batch_size=cfg.batch_size, **common)
            summary["scores"][label] = sc
            others = f", {sc.by_others} by another worker" if sc.by_others else ""
            print(f"[editmeter] score {label}: {sc.computed - sc.failed} scored, {sc.failed} failed, {sc.reused} reused{others} "
                  f"({sc.model_seconds:.2f} s in metrics)")
            if sc.failed_total:
                print(f"[editmeter] score {label}: {sc.failure_summary()}")
        summary["score"] = summary["scores"][metric_sets[0][0]]
    if "aggregate" in cfg.stages:
        with timer("aggregate"):
            written = write_leaderboards(results, None, cfg.aggregate.bootstrap_resamples, cfg.aggregate.bootstrap_seed)
        summary["tables"] = {k: str(v) for k, v in written.items()}
        print(f"[editmeter] aggregate: wrote {', '.join(p.name for p in written.values())} in {results}")
    print(f"[editmeter] timings ({editor_name}): {timer.table()}")
    if profile != "pretrained" and profile not in _NOTED:  # once per process, not once per sweep job
        _NOTED.add(profile)
        print(f"[editmeter] NOTE: profile={profile}: weights are {cfg.profile.weights}; "
              "these numbers test the pipeline, they do not rank real editors.")
    summary["timings"] = dict(timer.seconds)
    judged = [("edit", summary["edit"])] if "edit" in summary else []
    judged += [(f"score {label}", sc) for label, sc in summary.get("scores", {}).items()]
    verdict = _failure_verdict(judged, float(cfg.get("max_failed_fraction", 0.1)))
    if not verdict and "tables" in summary and "score" not in cfg.stages:  # no scoring judged: the rows themselves
        verdict = _aggregate_verdict(Path(summary["tables"]["leaderboard.csv"]), full.hash, sig,
                                     summary["metric_sigs"])
    if verdict:
        raise TooManyFailures(verdict)
    if "edit" in summary and summary["edit"].missing:  # the closing word on a run that covers part of its set
        st = summary["edit"]
        print(f"[editmeter] PARTIAL: {st.missing} of {st.total} queries have no edit (not attempted, not failed); "
              "the leaderboard counts them in n_missing and marks the rows PARTIAL")
    return summary


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
        "suite": {"name": suite.info.name, "components": suite.components()} if suite else None,  # summary: benchmark.summaries
    }


def _earlier_scorings(path: Path) -> dict[str, Any]:
    """The metric sets an existing run.json records (`scored`), or {} when it is absent or unusable (a broken one is
    rewritten; aggregation warns about it in the meantime)."""
    from benchmark.leaderboard import load_run_meta, scorings
    from benchmark.stages.score_cache import BadCacheFile

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
    from benchmark.fileio import atomic_write_text
    from benchmark.hashing import canonical_json
    from benchmark.locking import locked

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
    from benchmark.errors import CorruptRunFile
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


def _editor_overrides(cfg: Any) -> list[str]:
    """The `editor.<key>=<value>` overrides of this run (sorted), from Hydra's record of the command line."""
    try:
        if "hydra" in cfg:
            task = list(cfg.hydra.overrides.task)
        else:
            from hydra.core.hydra_config import HydraConfig

            task = list(HydraConfig.get().overrides.task)
    except ValueError:  # not inside a Hydra run
        return []
    return sorted(o for o in task if o.lstrip("+~").startswith("editor."))


def _choices(cfg: Any) -> dict[str, str]:
    """The config group choices (editor, metrics, ...) of a composed or a Hydra-run config."""
    if "hydra" in cfg:
        return dict(cfg.hydra.runtime.choices)
    from hydra.core.hydra_config import HydraConfig

    try:
        return dict(HydraConfig.get().runtime.choices)
    except ValueError:  # not inside a Hydra run
        return {}


def run_and_report(cfg: Any, editor_name: str) -> int:
    """`run_pipeline` for entry points: a RunError (preflight, corrupt run file, too many failures) becomes its
    message on stderr and exit status 1, without a traceback. In a --multirun sweep the next job still runs."""
    try:
        run_pipeline(cfg, editor_name)
    except Exception as exc:  # noqa: BLE001 - only RunErrors are turned into messages; the rest re-raise
        err = _run_error(exc)
        if err is None:
            raise
        print(f"[editmeter] error: {err}", file=sys.stderr, flush=True)
        return err.exit_code
    return 0


def _run_error(exc: BaseException) -> Any:
    """The RunError behind `exc`: itself, or the cause Hydra's `instantiate` wrapped (a metric suite that checks
    its input files when it is built raises inside InstantiationException); None for anything else."""
    from benchmark.errors import RunError

    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, RunError):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None


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
    from benchmark.fileio import atomic_write_text

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
    cmd = [sys.executable, "-m", "benchmark.run", *overrides, f"hydra.run.dir={output_dir}"]
    return subprocess.run(cmd, env=env, check=False).returncode


def _hydra_entry() -> None:
    import hydra
    from hydra.core.hydra_config import HydraConfig

    from benchmark.console import progress_enabled, quiet_third_party

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
