"""`editmeter launch`: one run (or a sweep of runs) sharded across N workers by a Hydra launcher, then one aggregate.

    editmeter launch --workers 8 editor=ip2p queryset=hatie                 # local: one process per GPU (joblib)
    editmeter launch --workers 64 --launcher slurm editor=ip2p queryset=hatie hydra.launcher.partition=gpu
    editmeter launch --workers 2 editor=ip2p editor.guidance_scale=5,7.5    # a sweep: 2 settings x 2 shards

It is a Hydra multirun over `shard.index=range(N)` with `shard.count=N` and the stages without `aggregate`, crossed
with any sweep in the overrides, through the launcher config `configs/hydra/launcher/<launcher>.yaml`:

- `local` (joblib): up to `--workers` jobs at once on this machine. With GPUs (`--gpus 8` or `--gpus 0,2,5`, default:
  those `nvidia-smi` lists or `CUDA_VISIBLE_DEVICES` names) each job runs as a fresh process pinned to one GPU with
  `CUDA_VISIBLE_DEVICES` (joblib reuses its workers, and CUDA reads that variable once per process), the GPU picked
  from the shard index and leased with a lock so two jobs never share one; without GPUs, N CPU workers.
- `slurm` (submitit): one Slurm array task per job, one GPU each (Slurm sets `CUDA_VISIBLE_DEVICES`); partition,
  time limit, memory and the rest are `hydra.launcher.*` overrides. The launch submits and watches the array itself
  (`benchmark.commands.slurm`: the request checked against the partition's nodes, squeue instead of sacct, cancelled,
  crashed and requeued tasks, jobs an earlier launch finished left out) rather than through Hydra's plugin.
- `slurm_local` (submitit's local executor): the Slurm code path on this machine, for tests.

Before any worker starts, the launch refuses `--gpus` beyond the GPUs this machine shows (local launcher), runs the
preflight once per sweep setting over every shard's queries (`launch_preflight`), and checks the budget once
(`benchmark.plan.budget.check_launch_budget`: every shard's queries and loads, every sweep setting), stopping when it is
over `budget.max_gpu_hours`; the workers then run with `preflight=false budget.accept=true`. Shards write into the
same run folder (see docs/scale.md for what makes that safe). Each job writes its exit status to
`editmeter_status.json` in its Hydra job folder; after the multirun the launch reads them all, rebuilds the
leaderboards once from the complete run folders, and exits 1 when a job failed or left no status.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmark.commands.run import ENV_GPUS, ENV_LOCKS, STATUS_FILE
from benchmark.plan.run_plan import RunPlan

LAUNCHERS = ("local", "slurm", "slurm_local")
RESERVED = ("shard.index", "shard.count", "hydra/launcher", "hydra.sweep.dir")


class LaunchError(ValueError):
    """A launch request that cannot run as given; the message says why and what to pass instead."""


# -- the launch ----------------------------------------------------------------------------------------------------

def visible_gpus() -> list[str]:
    """GPU ids this machine offers: `CUDA_VISIBLE_DEVICES` when set, else the indices `nvidia-smi -L` lists."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g.strip() for g in env.split(",") if g.strip() and g.strip() != "-1"]
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, _ in enumerate(s for s in out.splitlines() if s.startswith("GPU "))]


def parse_gpus(spec: str | None, *, check: bool = True) -> list[str]:
    """`--gpus`: a count (`8`: the first 8 visible GPUs), a list of visible ids (`0,2,5`), `none` (CPU workers) or
    None (detect: every visible GPU). With `check` (the local launcher, which pins each job to one of this
    machine's GPUs) a count above the visible GPUs, or an id not among them, is a LaunchError naming what is
    visible, raised before any worker starts; without it (Slurm: the nodes have the GPUs), a count is ids 0..N-1."""
    if spec is None:
        return visible_gpus()
    spec = spec.strip()
    if spec.lower() in ("", "none", "0", "cpu"):
        return []
    if spec.isdigit():
        ids = [str(i) for i in range(int(spec))]
    else:
        ids = [g.strip() for g in spec.split(",")]
        if not all(ids) or len(set(ids)) != len(ids):
            raise LaunchError(f"--gpus {spec!r}: want a count (8), a list of distinct ids (0,2,5) or none")
    if not check:
        return ids
    visible = visible_gpus()
    if spec.isdigit() and len(ids) <= len(visible):
        return visible[:len(ids)]  # under CUDA_VISIBLE_DEVICES=4,5 a count of 2 is GPUs 4 and 5, not 0 and 1
    if not spec.isdigit() and set(ids) <= set(visible):
        return ids
    wanted = f"{len(ids)} GPUs" if spec.isdigit() else f"GPU(s) {','.join(g for g in ids if g not in visible)}"
    offer = (f"pass at most --gpus {len(visible)} (ids {','.join(visible)}), or " if visible else "pass ")
    raise LaunchError(f"--gpus {spec} asks for {wanted}, but {_visible_note(visible)}: the local launcher pins each "
                      f"job to one of this machine's GPUs. Fix: {offer}--gpus none for CPU workers (--workers N), "
                      "or --launcher slurm to run on a cluster's GPUs")


def _visible_note(visible: Sequence[str]) -> str:
    """Where the visible GPUs were found, for a refusal: "CUDA_VISIBLE_DEVICES='0,1' names 2 GPU(s) (0,1)"."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    found = f"{len(visible)} GPU(s) ({','.join(visible)})" if visible else "no GPU"
    if env is not None:
        return f"CUDA_VISIBLE_DEVICES={env!r} names {found}"
    if shutil.which("nvidia-smi"):
        return f"nvidia-smi -L lists {found}"
    return f"this machine shows {found} (no nvidia-smi, and CUDA_VISIBLE_DEVICES is unset)"


def jobs_of(overrides: Sequence[str]) -> list[list[str]]:
    """Every job's overrides of a multirun over `overrides` (Hydra's basic sweeper: cartesian product)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(list(overrides))
    return [job for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]


def build_multirun(overrides: Sequence[str], *, workers: int, launcher: str, gpus: Sequence[str],
                   sweep_dir: Path) -> list[str]:
    """The `editmeter run --multirun` arguments of a launch (its shard and launcher overrides appended)."""
    if workers < 1:
        raise LaunchError(f"--workers {workers}: need at least 1")
    if launcher not in LAUNCHERS:
        raise LaunchError(f"--launcher {launcher!r}: choose one of {', '.join(LAUNCHERS)}")
    taken = [o for o in overrides if o.lstrip("+~").split("=", 1)[0] in RESERVED]
    if taken:
        raise LaunchError(f"{taken[0]!r}: the launch sets the shards, the launcher and the sweep folder itself "
                          "(use --workers / --launcher; every other key may be overridden)")
    stages = _shard_stages(overrides)
    args = [o for o in overrides if not o.startswith("stages=")]
    args += [f"shard.count={workers}", f"shard.index=range(0,{workers})", f"stages=[{','.join(stages)}]",
             f"hydra/launcher={launcher}", f"hydra.sweep.dir={sweep_dir}"]
    if launcher == "local":
        args.append(f"hydra.launcher.n_jobs={len(gpus) or workers}")  # pinned: one job per GPU at a time
    # set by Hydra in each job's process (not inherited from ours: joblib may reuse workers of an earlier launch)
    args += [f"++hydra.job.env_set.{ENV_GPUS}='{','.join(gpus)}'", f"++hydra.job.env_set.{ENV_LOCKS}='{sweep_dir}'"]
    return ["--multirun", *args]


def _stages(overrides: Sequence[str]) -> list[str]:
    given = [o.split("=", 1)[1] for o in overrides if o.startswith("stages=")]
    if not given:
        return ["edit", "score", "aggregate"]
    return [s.strip() for s in given[-1].strip("[]").split(",") if s.strip()]


def _shard_stages(overrides: Sequence[str]) -> list[str]:
    stages = [s for s in _stages(overrides) if s != "aggregate"]
    if not stages:
        raise LaunchError("stages has nothing to shard (only aggregate): run `editmeter run stages=[aggregate]`")
    return stages


def collect_statuses(sweep_dir: Path, n_jobs: int) -> tuple[list[dict[str, Any]], int]:
    """The status records the jobs left under `sweep_dir`, and how many of the `n_jobs` left none."""
    records = []
    for p in sorted(sweep_dir.glob(f"*/{STATUS_FILE}")):
        try:
            records.append(json.loads(p.read_text(encoding="utf-8")) | {"job_dir": str(p.parent)})
        except (OSError, ValueError) as err:
            records.append({"status": 1, "job_dir": str(p.parent), "error": f"unreadable status: {err}"})
    return records, max(0, n_jobs - len(records))


def launch_runs(overrides: Sequence[str], workers: int) -> list[tuple[RunPlan, Any, str, str]]:
    """The runs of a launch, one per sweep setting (its shards are one run): (its plan, with `shard.count=workers`,
    the full query set, editor, metrics), for the launch's preflight and budget check. Settings whose preflight is
    off are left out (`preflight=false` skips the preflight and the budget, as in `editmeter run`)."""
    from benchmark.plan.config import compose, read_plan
    from benchmark.plan.resolved import load_queries

    runs, seen, sets = [], set(), {}
    for job in jobs_of(list(overrides)) if overrides else [[]]:
        job = [o for o in job if not o.startswith(("hydra", "shard."))]
        key = tuple(sorted(job))
        if key in seen:
            continue
        seen.add(key)
        cfg, choices = compose([*job, f"shard.count={workers}", "shard.index=0"])
        plan = read_plan(cfg, choices["editor"])
        if not plan.preflight.enabled:
            continue
        qkey = json.dumps(plan.queryset, sort_keys=True, default=str)
        if qkey not in sets:  # a sweep over editor settings loads (and hashes) its query set once
            sets[qkey] = load_queries(plan)
        runs.append((plan, sets[qkey], choices["editor"], choices.get("metrics", "")))
    return runs


def launch_selection(plan: RunPlan, full: Any) -> Any:
    """The queries of all the shards of a launch's run (each shard's first `limit`), in the set's order."""
    import dataclasses

    selected = {q.id for q in plan.all_shards(full)}
    return dataclasses.replace(full, queries=tuple(q for q in full.queries if q.id in selected))


def launch_preflight(runs: list[tuple[RunPlan, Any, str, str]]) -> list[str]:
    """The launch's one preflight, before any worker starts: for each run of `launch_runs` (one per sweep setting),
    the checks `editmeter run` makes before its first edit (`check_plan`, `check_applicable`,
    `run_preflight`) over the queries of all its shards. The first failure raises its RunError (one message, exit
    status 1, no job folder); returns the lines to print. The workers then run with preflight=false."""
    from benchmark.plan.config import check_plan
    from benchmark.plan.preflight import run_preflight
    from benchmark.plan.resolved import check_applicable

    lines = []
    for plan, full, editor, metrics in runs:
        check_plan(plan)
        check_applicable(plan, full)
        line = run_preflight(plan, launch_selection(plan, full), editor=editor, metrics=metrics or "<metrics>")
        lines.append(line.replace("[editmeter] preflight", f"[editmeter] preflight ({full.name} on {editor})", 1)
                     if len(runs) > 1 else line)
    return lines


def launch(overrides: Sequence[str], *, workers: int, launcher: str = "local", gpus: Sequence[str] = (),
           gpus_flag: str | None = None, **budget_kw: Any) -> int:
    """Run the preflight and check the budget once for the whole launch, run the multirun, then aggregate once;
    returns the exit status (1 when a job failed or left no status). A preflight failure (`PreflightError`, or a
    `SettingError`) or an over-budget launch (`OverBudget`) is raised before any worker starts (`budget_kw`: `ask`,
    `interactive`, `gpu_name` of `benchmark.plan.budget.check_launch_budget`, for tests). `gpus_flag`: the `--gpus`
    argument as given (Slurm: `none` submits no GPU request; see `benchmark.commands.slurm.plan`)."""
    from benchmark.plan.config import check_keys, check_overrides, compose, read_plan

    overrides = [o for o in overrides if o not in ("-m", "--multirun")]
    check_overrides(overrides)
    check_keys(overrides)
    # the results folder and the aggregation settings, from the first job's config (they are not swept)
    first = jobs_of(overrides)[0] if overrides else []
    plan = read_plan(compose([o for o in first if not o.startswith("hydra")])[0])
    results = plan.results.resolve()
    sweep_dir = results / "hydra" / f"launch-{time.strftime('%Y-%m-%d_%H-%M-%S')}-{uuid.uuid4().hex[:6]}"
    args = build_multirun(overrides, workers=workers, launcher=launcher, gpus=gpus if launcher == "local" else (),
                          sweep_dir=sweep_dir)
    from benchmark.plan.budget import check_launch_budget

    # the budget is the launch's, not each worker's: its estimate counts every shard's queries and loads (and every
    # sweep setting), a refusal stops the launch here, and the workers run with budget.accept=true (they print
    # their estimate, never ask or refuse: they are not on a terminal)
    runs = launch_runs(overrides, workers)
    # the preflight is the launch's too: every job of a launch shares its results folder, weights cache and query
    # set, so one missing piece is one message here, in seconds, instead of the same failure from every job (the
    # launch host must see the folders the jobs write, as it reads their statuses and aggregates them)
    for line in launch_preflight(runs):
        print(line, flush=True)
    for line in check_launch_budget(runs, **budget_kw):
        print(line, flush=True)
    args = [a for a in args if not a.startswith(("budget.accept=", "preflight="))]
    args += ["budget.accept=true", "preflight=false"]
    n_jobs = len(jobs_of(args[1:]))  # the slurm launcher submits only those no earlier launch finished
    pin = launcher == "local" and bool(gpus)
    # Slurm: the folder is named once the request passed its checks (sinfo) and the array is submitted into it
    print(f"[editmeter] launch: {n_jobs} job(s) ({workers} shard(s) per run) via {launcher}"
          + (f", GPUs {','.join(gpus)}" if pin else ", no GPU pinning")
          + ("" if launcher == "slurm" else f"; job folders in {sweep_dir}"), flush=True)
    logs: dict[str, str] = {}  # job folder -> its Slurm log, for the failure lines
    if launcher == "slurm":
        n_jobs, logs = _slurm_launch(args, sweep_dir, results, gpus_flag)
    else:
        _run_multirun(args)
    records, missing = collect_statuses(sweep_dir, n_jobs)
    failed = [r for r in records if r.get("status")]
    for r in failed:
        log = f"; log: {logs[r['job_dir']]}" if r["job_dir"] in logs else ""
        print(f"[editmeter] launch: job {r['job_dir']} exited with {r.get('status')} "
              f"({' '.join(r.get('overrides', []))}){log}", file=sys.stderr)
    if missing:
        print(f"[editmeter] launch: {missing} of {n_jobs} job(s) left no status (killed or crashed before the end); "
              f"see their logs under {sweep_dir}", file=sys.stderr)
    if "aggregate" in _stages(overrides):
        from benchmark.stages.aggregate import write_leaderboards

        written = write_leaderboards(results, None, plan.aggregate.bootstrap_resamples, plan.aggregate.bootstrap_seed)
        print(f"[editmeter] aggregate: wrote {', '.join(p.name for p in written.values())} in {results}"
              + (" (some jobs failed: their rows are marked PARTIAL)" if failed or missing else ""))
    return 1 if failed or missing else 0


def _run_multirun(args: list[str]) -> None:
    """The multirun through a Hydra launcher plugin, in this process (local, slurm_local)."""
    from benchmark.commands.run import main as run_main

    saved = {k: os.environ.get(k) for k in (ENV_GPUS, ENV_LOCKS)}  # in-process jobs set them here
    try:
        try:
            run_main(args)
        except SystemExit as exc:  # the in-process jobs' worst status; the status files say the same
            if exc.code not in (0, None):
                print(f"[editmeter] launch: the multirun exited with {exc.code}", file=sys.stderr)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _slurm_launch(args: list[str], sweep_dir: Path, results: Path, gpus_flag: str | None) -> tuple[int, dict]:
    """The multirun's jobs as one Slurm array (`benchmark.commands.slurm`): the request checked against the partition,
    jobs an earlier launch into the same results folder finished left out, then submitted and watched. Returns
    (the number of jobs submitted, {job folder: log}); a SlurmError (exit 2) when it cannot run as given."""
    from omegaconf import OmegaConf

    from benchmark.commands import slurm as S
    from benchmark.plan.config import compose

    jobs = jobs_of(args[1:])
    explicit = [o.lstrip("+~").split("=", 1)[0].removeprefix("hydra.launcher.") for o in args[1:]
                if o.lstrip("+~").startswith("hydra.launcher.")]
    # the launcher's keys as Hydra composes them (its schema refuses a mistyped key), with the user's overrides
    cfg, _ = compose([o for o in jobs[0] if o.lstrip("+~").startswith(("hydra/launcher", "hydra.launcher."))])
    params = OmegaConf.to_container(cfg.hydra.launcher, resolve=False)
    params, lines, partition = S.plan(params, gpus_flag=gpus_flag, explicit=explicit)
    for line in lines:
        print(line, flush=True)
    own = ("hydra/launcher", "hydra.launcher.", "hydra.sweep.dir")
    tasks = [[o for o in job if not o.lstrip("+~").startswith(own)] for job in jobs]
    done = S.finished_jobs(results, STATUS_FILE)
    todo = [i for i, job in enumerate(tasks) if tuple(sorted(o for o in job if not o.lstrip("+~").startswith(
        "hydra"))) not in done]
    if len(todo) < len(tasks):
        print(f"[editmeter] slurm: {len(tasks) - len(todo)} of {len(tasks)} job(s) finished in an earlier launch "
              f"into {results}: submitting {len(todo)}", flush=True)
    if not todo:
        return 0, {}
    print(S.accounting_note(), flush=True)
    print(f"[editmeter] slurm: submitting {len(todo)} job(s); job folders in {sweep_dir}", flush=True)
    record, ended = S.run_array([tasks[i] for i in todo], params, sweep_dir, todo, partition)
    logs = {t["job_dir"]: S.log_of(t) for t in record["tasks"]}
    for task in record["tasks"]:
        if task["num"] in ended and not (Path(task["job_dir"]) / STATUS_FILE).exists():
            print(f"[editmeter] launch: shard {task['shard'][0]}/{task['shard'][1]} (task {task['task_id']}) "
                  f"{ended[task['num']]}; log: {S.log_of(task)}. The same command again runs only the shards "
                  "that did not finish", file=sys.stderr)
    return len(todo), logs


def main(argv: Sequence[str] | None = None) -> int:
    """`editmeter launch [--workers N] [--launcher local|slurm|slurm_local] [--gpus SPEC] [overrides ...]`."""
    from benchmark.io.errors import RunError
    from benchmark.plan.config import UnknownOptionError

    ap = argparse.ArgumentParser(prog="editmeter launch", description="Shard a run (or a sweep) across N workers "
                                 "through a Hydra launcher, then rebuild the leaderboards once.")
    ap.add_argument("--workers", type=int, default=None,
                    help="shards per run (default: the number of GPUs, else 1)")
    ap.add_argument("--launcher", default="local", choices=LAUNCHERS, help="configs/hydra/launcher/<name>.yaml")
    ap.add_argument("--gpus", default=None, help="local launcher: a count (8), ids (0,2,5) or none; default: every "
                    "visible GPU (more than this machine shows is refused). slurm: none submits no GPU request")
    ap.add_argument("--status", metavar="JOB_FOLDER", default=None,
                    help="print the state of a Slurm launch's tasks (pending, running, requeued, done, failed) from "
                    "its job folder (<paths.results>/hydra/launch-...), then exit")
    ap.add_argument("overrides", nargs="*", help="config overrides, as for `editmeter run` (sweeps allowed)")
    args = ap.parse_args(argv)
    from benchmark.commands.slurm import SlurmError, status_lines

    try:
        if args.status is not None:
            if args.overrides:
                raise LaunchError("--status takes a job folder and no overrides")
            from benchmark.commands.run import STATUS_FILE as status_file

            print("\n".join(status_lines(Path(args.status), status_file)))
            return 0
        gpus = parse_gpus(args.gpus, check=args.launcher == "local")
        workers = args.workers if args.workers is not None else max(1, len(gpus))
        return launch(args.overrides, workers=workers, launcher=args.launcher, gpus=gpus, gpus_flag=args.gpus)
    except (LaunchError, UnknownOptionError, SlurmError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # a Slurm launch said where its tasks stand; local workers end with this process
        return 130
    except RunError as err:  # the launch's preflight error or budget refusal: no worker started
        print(f"[editmeter] error: {err}", file=sys.stderr)
        return err.exit_code


if __name__ == "__main__":
    sys.exit(main())
