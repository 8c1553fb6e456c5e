"""`editmeter launch --launcher slurm`: a launch's jobs as one Slurm job array, submitted with submitit and watched
with squeue, from submission to the last task.

Hydra's submitit plugin submits the array and then waits on each task with submitit's `job.results()`, which asks
`sacct` for states (on a cluster without accounting storage it warns on every call and never learns that a task was
cancelled: the launch would wait for good), aborts the launch at the first task that failed while the others still
run, and cannot tell a job that can never start from one in the queue. So the launch submits the array itself, with
the same `hydra.launcher.*` keys (`configs/hydra/launcher/slurm.yaml`, checked by Hydra's schema) and the same
submitit executor, and does the rest here:

- before submission, the request is checked against the partition's nodes (`sinfo`): a task asking for more CPUs,
  memory or GPUs than any node has is one message naming the `hydra.launcher.*` keys to change; `--gpus none`, or a
  partition without GPUs when no GPU was asked for explicitly, submits no GPU request;
- an sbatch refusal (unknown partition, account, qos or gres) is one line naming the key; the job folder is removed;
- while it waits, states come from squeue (never sacct); a task pending for a reason that never clears
  (`PartitionConfig`, `PartitionTimeLimit`, ...) cancels the array with one message naming the keys;
- each task runs its job as a one-job Hydra multirun (the status file, as every launcher's jobs write it); a task
  that Slurm requeues (preemption, `scontrol requeue`, its time limit through submitit's checkpoint) runs its job
  again and the stages resume where they stopped; the launch waits for it;
- a task that ends without a result (cancelled, killed) or crashes is reported with its shard and log path;
- a task's result file is its end only once squeue no longer lists the task: a copy that Slurm requeued after the
  result was written (pending, or started but not yet running its job) is cancelled, with one line saying so,
  because its work is done; a copy that has begun its job again is waited for (`leftover_copy`).

`slurm.json` in the launch's job folder records the array and each task's shard, job folder and logs; `editmeter
launch --status <job folder>` reads it (`status_lines`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SLURM_FILE = "slurm.json"
# the task's log lines (submitit's stdout log, which Slurm appends to at each start of the task): a start, the
# result file written (success or error), and our own line when the start begins its job
STARTED = "Starting with JobEnvironment"
RESULT_LINES = ("Exiting after successful completion", "Submitted job triggered an exception")
JOB_STARTED = "[editmeter] slurm task: running its job"
# squeue states of a copy that has not started: cancelling it loses no work
WAITING_STATES = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SUSPENDED", "RESV_DEL_HOLD"}
POLL_ENV = "EDITMETER_SLURM_POLL_S"  # seconds between squeue calls while a launch waits (default 5)
# squeue reasons that never clear by waiting: the request exceeds what the partition (or the account's QOS) allows
NEVER = {"PartitionConfig", "PartitionTimeLimit", "PartitionNodeLimit", "BadConstraints", "InvalidAccount",
         "InvalidQOS", "AccountNotAllowed", "QOSNotAllowed", "PartitionDown", "PartitionInactive",
         "DependencyNeverSatisfied"}
RESOURCE_KEYS = ("hydra.launcher.cpus_per_task", "hydra.launcher.mem_gb", "hydra.launcher.gpus_per_task",
                 "hydra.launcher.timeout_min", "hydra.launcher.partition")
# sbatch's refusals (its `sbatch: error:` line) and the key that fixes each
SBATCH_KEYS = (
    ("Invalid partition", "hydra.launcher.partition"),
    ("Invalid account", "hydra.launcher.account"),
    ("Invalid qos", "hydra.launcher.qos"),
    ("Invalid generic resource", "hydra.launcher.gres / hydra.launcher.gpus_per_task (or --gpus none)"),
    ("Invalid feature specification", "hydra.launcher.constraint"),
    ("time limit", "hydra.launcher.timeout_min"),
    ("Memory specification", "hydra.launcher.mem_gb"),
    ("Requested node configuration is not available", ", ".join(RESOURCE_KEYS[:3]) + " or hydra.launcher.partition"),
)


class SlurmError(ValueError):
    """A Slurm launch that cannot run as given (exit status 2); the message names the keys to change."""


def _cmd(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, check=False)


# -- the request, checked against the cluster before submission ----------------------------------------------------

@dataclass(frozen=True)
class Node:
    name: str
    cpus: int
    mem_mb: int
    gpus: int


def _gpus_in(gres: str | None) -> int:
    """GPUs in a gres string: `gpu:4`, `gpu:a100:2(S:0-1),shard:8` -> 4, 2; `(null)` -> 0."""
    total = 0
    for part in re.split(r",(?![^()]*\))", gres or ""):
        fields = re.sub(r"\(.*\)", "", part).split(":")
        if fields[0] == "gpu":
            total += int(fields[-1]) if len(fields) > 1 and fields[-1].isdigit() else 1
    return total


def partition_nodes(partition: str | None) -> tuple[str, list[Node]]:
    """The partition the tasks go to (the cluster's default when None) and its nodes, from sinfo."""
    if partition is None:
        out = _cmd("sinfo", "-h", "-o", "%P")
        if out.returncode != 0:
            raise SlurmError(f"sinfo failed: {out.stderr.strip() or out.stdout.strip()} (is this a Slurm login node? "
                             "SLURM_CONF and the controller must be reachable)")
        defaults = [p.strip().rstrip("*") for p in out.stdout.split() if p.strip().endswith("*")]
        if not defaults:
            names = sorted({p.strip() for p in out.stdout.split()})
            raise SlurmError(f"this cluster has no default partition: pass hydra.launcher.partition=<one of "
                             f"{', '.join(names) or 'none listed'}>")
        partition = defaults[0]
    out = _cmd("sinfo", "-h", "-N", "-p", partition, "-o", "%N|%c|%m|%G")
    nodes = []
    for line in out.stdout.splitlines():
        name, cpus, mem, gres = (line.split("|") + ["", "", "", ""])[:4]
        try:
            nodes.append(Node(name, int(cpus.rstrip("+")), int(mem.rstrip("+")), _gpus_in(gres)))
        except ValueError:
            continue
    if not nodes:
        listed = sorted({p.strip().rstrip("*") for p in _cmd("sinfo", "-h", "-o", "%P").stdout.split()})
        raise SlurmError(f"hydra.launcher.partition={partition}: sinfo lists no such partition (or it has no "
                         f"nodes); partitions: {', '.join(listed) or 'none'}")
    return partition, nodes


def asked_gpus(params: dict[str, Any]) -> int:
    """GPUs one task asks for: gpus_per_node, else gpus_per_task x tasks, else a gpu gres."""
    tasks = int(params.get("tasks_per_node") or 1)
    if params.get("gpus_per_node"):
        return int(params["gpus_per_node"])
    if params.get("gpus_per_task"):
        return int(params["gpus_per_task"]) * tasks
    return _gpus_in(params.get("gres"))


def plan(params: dict[str, Any], *, gpus_flag: str | None, explicit: Sequence[str],
         nodes_of: Callable[[str | None], tuple[str, list[Node]]] = partition_nodes
         ) -> tuple[dict[str, Any], list[str], str]:
    """The launcher parameters to submit, lines to print, and the partition the tasks go to. `gpus_flag`: the `--gpus` argument (None: not given);
    `explicit`: the `hydra.launcher.*` keys the user set. No GPU request with `--gpus none`, nor on a partition
    without GPUs when the only GPU request is the config's default. A task that no node of the partition can hold
    is a SlurmError naming the keys to lower."""
    params = dict(params)
    lines = []
    no_gpu = gpus_flag is not None and gpus_flag.strip().lower() in ("none", "0", "cpu", "")
    if no_gpu:
        params["gpus_per_task"] = params["gpus_per_node"] = None
    partition, nodes = nodes_of(params.get("partition"))
    asked_explicitly = bool({"gpus_per_task", "gpus_per_node"} & set(explicit)) or (
        "gres" in explicit and _gpus_in(params.get("gres")) > 0)
    if (not no_gpu and asked_gpus(params) and not any(n.gpus for n in nodes) and gpus_flag is None
            and not asked_explicitly):
        params["gpus_per_task"] = params["gpus_per_node"] = None
        lines.append(f"[editmeter] slurm: partition {partition} has no GPUs (sinfo): the tasks run on CPU, as with "
                     "--gpus none")
    cpus = int(params.get("cpus_per_task") or 1) * int(params.get("tasks_per_node") or 1)
    mem_mb = int(float(params["mem_gb"]) * 1024) if params.get("mem_gb") else 0
    gpus = asked_gpus(params)
    if not any(cpus <= n.cpus and mem_mb <= n.mem_mb and gpus <= n.gpus for n in nodes):
        most = Node("", max(n.cpus for n in nodes), max(n.mem_mb for n in nodes), max(n.gpus for n in nodes))
        fixes = []
        if cpus > most.cpus:
            fixes.append(f"hydra.launcher.cpus_per_task={max(1, most.cpus // int(params.get('tasks_per_node') or 1))}"
                         f" (asks {cpus})")
        if mem_mb > most.mem_mb:
            fixes.append(f"hydra.launcher.mem_gb={max(1, most.mem_mb // 1024)} (asks {params['mem_gb']})")
        if gpus > most.gpus:
            fixes.append(f"--gpus none or hydra.launcher.gpus_per_task={most.gpus or 'null'} (asks {gpus})"
                         if not most.gpus else f"hydra.launcher.gpus_per_task={most.gpus} (asks {gpus})")
        if not fixes:  # each fits alone, not together on one node
            fixes.append("lower hydra.launcher.cpus_per_task, hydra.launcher.mem_gb or hydra.launcher.gpus_per_task")
        raise SlurmError(f"no node of partition {partition} can run one task ({cpus} CPUs, {mem_mb // 1024} GB, "
                         f"{gpus} GPU(s); its largest node: {most.cpus} CPUs, {most.mem_mb // 1024} GB, {most.gpus} "
                         f"GPU(s), from sinfo -N -p {partition}): pass {', '.join(fixes)}, or another "
                         "hydra.launcher.partition")
    return params, lines, partition


def time_limit_min(partition: str) -> int | None:
    """The partition's time limit in minutes (sinfo's `[D-]HH:MM:SS`, `MM:SS` or `MM`), None when infinite/unknown."""
    out = _cmd("sinfo", "-h", "-p", partition, "-o", "%l").stdout.split()
    if not out or out[0] in ("infinite", "n/a"):
        return None
    days, _, rest = out[0].rpartition("-")
    parts = [int(x) for x in rest.split(":")]
    h, m, sec = ([0, 0] + parts)[-3:] if len(parts) > 1 else (0, parts[0], 0)
    return int(days or 0) * 1440 + h * 60 + m + (1 if sec else 0)


def never_hint(record: dict[str, Any]) -> str:
    """What to change for a task that can never start: the time limit when it is above the partition's."""
    part, asked = record.get("partition"), record.get("timeout_min")
    limit = time_limit_min(part) if part else None
    if limit is not None and asked and int(asked) > limit:
        return (f"hydra.launcher.timeout_min={asked} is above partition {part}'s time limit ({limit} min): pass "
                f"hydra.launcher.timeout_min={limit} or another hydra.launcher.partition")
    return f"change {', '.join(RESOURCE_KEYS)} or hydra.launcher.qos/account"


def accounting_note() -> str:
    """The line saying where job states come from (squeue; on a cluster without accounting storage, sacct fails)."""
    out = _cmd("scontrol", "show", "config", timeout=30)
    m = re.search(r"^AccountingStorageType\s*=\s*(\S+)", out.stdout, re.M)
    off = m is not None and m.group(1).endswith("/none")
    return ("[editmeter] slurm: job states come from squeue and the tasks' result files"
            + (" (accounting storage is off on this cluster: no sacct)" if off else ""))


def refusal(stderr: str) -> str:
    """One line for an sbatch refusal: sbatch's own error and the key to change."""
    errors = [ln.split("error:", 1)[1].strip() for ln in stderr.splitlines() if "error:" in ln]
    why = errors[-1] if errors else (stderr.strip().splitlines() or ["sbatch refused the job"])[-1].strip()
    low = why.lower()
    key = next((k for pat, k in SBATCH_KEYS if pat.lower() in low), "the hydra.launcher.* keys")
    return f"sbatch refused the job array: {why}. Change {key}"


# -- the task: one job of the launch, as a one-job Hydra multirun -------------------------------------------------

class ShardTask:
    """What each array task runs: its job's overrides as `editmeter run --multirun` with Hydra's basic launcher and
    job folder `<launch folder>/<num>` (so it writes the status file every launcher's jobs write). It has
    `checkpoint`, so at its time limit submitit requeues it (up to max_num_timeout times) and it runs the job again:
    the stages resume where they stopped."""

    requeuing = False  # set by `checkpoint`: the SystemExit that follows is submitit's, and must end the process

    def __call__(self, overrides: Sequence[str], num: int, sweep_dir: str) -> int:
        from benchmark.commands.run import main

        args = ["--multirun", *overrides, "hydra/launcher=basic", f"hydra.sweep.dir={sweep_dir}",
                f"hydra.sweep.subdir={num}"]
        _stop_at_time_limit()
        print(JOB_STARTED, flush=True)  # in the task's log: this start has begun its job (`leftover_copy`)
        try:
            return main(args)
        except _TimedOut as stop:  # out of requeues: the task's error (its result file), not a failed query
            raise stop.error from None
        except SystemExit as exc:
            if self.requeuing:  # submitit requeued this task at its time limit: no result file, just exit
                raise
            return exc.code if isinstance(exc.code, int) else 1

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        import submitit

        self.requeuing = True
        return submitit.helpers.DelayedSubmission(type(self)(), *args, **kwargs)


class _TimedOut(BaseException):
    """submitit's "not requeued" error, carried past the stages' `except Exception` (a failed query would record
    it as that query's failure) to the task, which raises it for submitit to record as the task's error."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def _stop_at_time_limit() -> None:
    """Wrap submitit's time-limit signal handler (installed before the task runs): when it refuses to requeue
    (`max_num_timeout` used up) it raises inside whatever code the signal interrupted; carry that out as _TimedOut."""
    import signal

    from submitit.core.job_environment import JobEnvironment

    sig = JobEnvironment._usr_sig()
    original = signal.getsignal(sig)
    if not callable(original):
        return

    def handler(signum: int, frame: Any) -> None:
        try:
            original(signum, frame)
        except Exception as err:  # noqa: BLE001 (submitit's UncompletedJobError, whatever its class)
            raise _TimedOut(err) from err

    signal.signal(sig, handler)


def executor_params(params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(submitit executor init keys, update_parameters keys) from the launcher config, as Hydra's plugin maps them."""
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
    from omegaconf import OmegaConf

    base = set(OmegaConf.structured(BaseQueueConf).keys())
    skip = {"_target_", "submitit_folder", "max_num_timeout"}
    update = {(k if k in base else f"slurm_{k}"): v for k, v in params.items() if k not in skip}
    return {"slurm_max_num_timeout": int(params.get("max_num_timeout") or 0)}, update


def submit(jobs: Sequence[Sequence[str]], params: dict[str, Any], sweep_dir: Path,
           nums: Sequence[int] | None = None, partition: str | None = None) -> dict[str, Any]:
    """Submit the jobs as one array (`nums`: their job numbers in the launch, which name their job folders;
    default 0..n-1); returns the launch's `slurm.json` record (also written). An sbatch refusal removes `sweep_dir`
    and raises SlurmError with one line."""
    nums = list(range(len(jobs))) if nums is None else list(nums)
    import submitit
    from submitit.core.utils import FailedJobError, FailedSubmissionError

    init, update = executor_params(params)
    executor = submitit.AutoExecutor(folder=sweep_dir / ".submitit" / "%j", cluster="slurm", **init)
    executor.update_parameters(**update)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    import contextlib
    import io

    try:
        with contextlib.redirect_stderr(io.StringIO()):  # submitit prints sbatch's refusal too; it is ours to say
            tasks = executor.map_array(ShardTask(), [list(j) for j in jobs], nums, [str(sweep_dir)] * len(jobs))
    except (FailedJobError, FailedSubmissionError, subprocess.CalledProcessError) as err:
        shutil.rmtree(sweep_dir, ignore_errors=True)
        text = getattr(err, "stderr", None) or str(err)
        raise SlurmError(refusal(text if isinstance(text, str) else text.decode(errors="replace"))) from None
    record = {"array_job_id": tasks[0].job_id.split("_")[0], "submitted": time.time(), "partition": partition,
              "timeout_min": params.get("timeout_min"), "tasks": [
        {"num": nums[i], "task_id": t.job_id, "job_dir": str(sweep_dir / str(nums[i])), "stdout": str(t.paths.stdout),
         "stderr": str(t.paths.stderr), "result": str(t.paths.result_pickle),
         "shard": _shard(jobs[i]), "overrides": list(jobs[i])} for i, t in enumerate(tasks)]}
    from benchmark.io.fileio import atomic_write_text

    atomic_write_text(sweep_dir / SLURM_FILE, json.dumps(record, indent=1) + "\n")
    return record


def _shard(overrides: Sequence[str]) -> list[int]:
    got = {o.split("=", 1)[0]: o.split("=", 1)[1] for o in overrides if o.startswith("shard.")}
    return [int(got.get("shard.index", 0)), int(got.get("shard.count", 1))]


# -- watching the array ------------------------------------------------------------------------------------------

def queue(array_job_id: str) -> dict[str, tuple[str, str]] | None:
    """{task id: (state, reason)} of the array's tasks squeue still lists (arrays expanded); None when squeue
    failed (the controller unreachable for a moment)."""
    out = _cmd("squeue", "-h", "-r", "-j", array_job_id, "-o", "%i|%T|%r", timeout=60)
    if out.returncode != 0:
        if "Invalid job id" in out.stderr:  # every task ended long ago and the controller forgot the array
            return {}
        return None
    rows = [line.split("|", 2) for line in out.stdout.splitlines() if line.count("|") >= 2]
    return {r[0]: (r[1], r[2]) for r in rows}


def starts(task: dict[str, Any]) -> int:
    """How many times the task started (submitit logs one `Starting with` line per start to the task's stdout log,
    which Slurm appends to on a restart): >1 means requeued."""
    try:
        text = Path(task["stdout"]).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return 0
    return text.count(STARTED)


def leftover_copy(task: dict[str, Any], state: str) -> str:
    """What to do with a task that squeue still lists (`state`) although its result file exists: "cancel" a copy
    that Slurm requeued after the result was written and that has not begun its job (pending, or started but
    before `JOB_STARTED` in its log): its work is done, and left alone it would run again, unwatched, against the
    results folder; "wait" for the start that wrote the result to end, or for a copy that has begun its job (it
    writes its own result)."""
    if state in WAITING_STATES:
        return "cancel"
    try:
        text = Path(task["stdout"]).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "wait"  # no log to tell by: never cancel a running task blindly
    last_result = max(text.rfind(line) for line in RESULT_LINES)
    after = text[last_result:] if last_result >= 0 else text
    if last_result < 0 or STARTED not in after:
        return "wait"  # the start that wrote the result is ending (or its log lags)
    return "wait" if JOB_STARTED in after[after.find(STARTED):] else "cancel"


def outcome(task: dict[str, Any]) -> tuple[str, Any] | None:
    """The task's result file: ("success", the job's exit status) or ("error", submitit's traceback); None if absent."""
    path = Path(task["result"])
    if not path.exists():
        return None
    from submitit.core.utils import pickle_load

    try:
        return pickle_load(path)
    except Exception as err:  # noqa: BLE001 (a half-written or foreign pickle: reported as the task's failure)
        return ("error", f"unreadable result file {path}: {err}")


def watch(record: dict[str, Any], *, poll_s: float | None = None, grace_s: float = 15.0,
          say: Callable[[str], None] = print) -> dict[int, str]:
    """Wait until every task has ended; returns {num: how it ended} for the tasks that did not end with a result
    (cancelled, killed, crashed in submitit). Prints one line per task state change. A task pending for a reason in
    NEVER cancels the array and raises SlurmError naming the keys."""
    poll_s = float(os.environ.get(POLL_ENV, 5)) if poll_s is None else poll_s
    array = record["array_job_id"]
    tasks = {t["task_id"]: t for t in record["tasks"]}
    seen: dict[str, str] = {}
    ran: set[str] = set()  # tasks seen running: pending again means requeued
    gone_since: dict[str, float] = {}
    ended: dict[int, str] = {}
    cancelled: set[str] = set()  # leftover copies of finished tasks this launch cancelled
    squeue_failing = 0.0
    while len(ended) < len(tasks):
        listed = queue(array)
        if listed is None:
            squeue_failing = squeue_failing or time.time()
            if time.time() - squeue_failing > 600:
                raise SlurmError(f"squeue has failed for 10 minutes; the tasks may still run: check them with "
                                 f"`editmeter launch --status {Path(record['tasks'][0]['job_dir']).parent}`")
            time.sleep(poll_s)
            continue
        squeue_failing = 0.0
        for tid, task in tasks.items():
            if task["num"] in ended:
                continue
            state, reason = listed.get(tid, ("", ""))
            res = outcome(task)
            if res is not None and state:  # a result, and squeue still lists the task: not its end yet
                if res[0] == "success" and tid not in cancelled and leftover_copy(task, state) == "cancel":
                    # a copy Slurm requeued after the result was written (preemption, `scontrol requeue` in the
                    # task's last seconds): its work is done
                    _cmd("scancel", tid)
                    cancelled.add(tid)
                    say(f"[editmeter] slurm: task {tid} (shard {task['shard'][0]}/{task['shard'][1]}) had finished; "
                        f"its requeued copy ({state.lower()}) was cancelled (its work is done)")
                    continue
                if tid in cancelled or state not in WAITING_STATES:
                    continue  # leaving the queue, or a copy that has begun its job runs: wait for it
                # a crashed task's requeued copy runs again: waited for below, as any pending task
            elif res is not None:  # ended: no copy of it is left in the queue
                ended[task["num"]] = "" if res[0] == "success" else "crashed (submitit: " + \
                    str(res[1]).strip().splitlines()[-1][:300] + ")"
                continue
            if not state:
                gone_since.setdefault(tid, time.time())
                if time.time() - gone_since[tid] >= grace_s:  # the result file may land a moment after squeue
                    ended[task["num"]] = "ended without a result (cancelled, killed or out of memory)"
                continue
            gone_since.pop(tid, None)
            if state == "RUNNING":
                ran.add(tid)
            label = state + (", requeued" if tid in ran and state != "RUNNING" else "") + (
                f" ({reason})" if state == "PENDING" and reason not in ("None", "") else "")
            if seen.get(tid) != label:
                say(f"[editmeter] slurm: task {tid} (shard {task['shard'][0]}/{task['shard'][1]}): {label}")
                seen[tid] = label
            if state == "PENDING" and (reason in NEVER or reason.startswith("QOSMax") and "PerJob" in reason):
                _cmd("scancel", array)
                raise SlurmError(f"task {tid} can never start: squeue says {reason} (the request exceeds what "
                                 f"the partition or account allows). The array was cancelled; {never_hint(record)}")
        if len(ended) == len(tasks):  # a last look: a task requeued since it was seen ending is waited for again
            again = queue(array) or {}
            for tid in set(again) & set(tasks):
                ended.pop(tasks[tid]["num"], None)
                gone_since.pop(tid, None)
        if len(ended) < len(tasks):
            time.sleep(poll_s)
    return {n: why for n, why in ended.items() if why}


def run_array(jobs: Sequence[Sequence[str]], params: dict[str, Any], sweep_dir: Path, nums: Sequence[int],
              partition: str | None = None, say: Callable[[str], None] = print) -> tuple[dict[str, Any], dict[int, str]]:
    """Submit the jobs and wait for them (`submit`, `watch`); returns the `slurm.json` record and `watch`'s
    {num: why} of tasks that ended without a result. A job that can never start removes `sweep_dir` (nothing ran)
    after cancelling the array."""
    record = submit(jobs, params, sweep_dir, nums, partition)
    say(f"[editmeter] slurm: submitted job array {record['array_job_id']} ({len(jobs)} task(s)); "
        f"logs in {sweep_dir / '.submitit'}")
    try:
        return record, watch(record, say=say)
    except SlurmError:
        shutil.rmtree(sweep_dir, ignore_errors=True)
        raise
    except KeyboardInterrupt:
        say(f"[editmeter] slurm: stopped waiting; the tasks keep running. Their state: editmeter launch --status "
            f"{sweep_dir}; the same command again, once they end, aggregates (and reruns only unfinished shards)")
        raise


def log_of(task: dict[str, Any]) -> str:
    """The task's log files (submitit's .err and .out)."""
    return f"{task['stderr']} (and {Path(task['stdout']).name})"


# -- earlier launches: finished jobs are not submitted again --------------------------------------------------------

def finished_jobs(results: Path, status_file: str) -> set[tuple[str, ...]]:
    """Task overrides of every job an earlier launch into `results` finished with status 0."""
    done = set()
    for p in (results / "hydra").glob(f"launch-*/*/{status_file}"):
        try:
            rec = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if rec.get("status") == 0:
            done.add(tuple(sorted(rec.get("overrides") or ())))
    return done


# -- `editmeter launch --status` --------------------------------------------------------------------------------

def task_state(task: dict[str, Any], listed: dict[str, tuple[str, str]] | None, status_file: str) -> str:
    """One task's state from its job folder (status file, result file, log) and squeue when it answers."""
    status = Path(task["job_dir"]) / status_file
    started = starts(task)
    if status.exists():
        try:
            code = json.loads(status.read_text(encoding="utf-8")).get("status")
        except (OSError, ValueError):
            code = "unreadable"
        copy = ""
        if listed and task["task_id"] in listed:  # requeued after it finished: a launch still waiting cancels it
            copy = (f"; squeue still lists a requeued copy ({listed[task['task_id']][0].lower()}): a running "
                    f"launch cancels it, else `scancel {task['task_id']}`")
        return ("done" if code == 0 else f"failed (exit status {code}; log: {log_of(task)})") + copy
    res = outcome(task)
    if res is not None:
        return f"failed ({'crashed' if res[0] == 'error' else 'no status file'}; log: {log_of(task)})"
    if listed is not None and task["task_id"] in listed:
        state, reason = listed[task["task_id"]]
        if state == "PENDING":  # pending after a start: requeued
            return ("requeued, pending" if started else "pending") + (f" ({reason})" if reason != "None" else "")
        return ("requeued, running" if started > 1 and state == "RUNNING" else state.lower())
    if listed is None:
        return "unknown (squeue failed)" + (", requeued" if started > 1 else "")
    return f"failed (ended without a result: cancelled or killed; log: {log_of(task)})"


def status_lines(sweep_dir: Path, status_file: str) -> list[str]:
    """`editmeter launch --status`: one line per task of the launch in `sweep_dir`, then a count per state."""
    path = Path(sweep_dir) / SLURM_FILE
    if not path.exists():
        raise SlurmError(f"{path} not found: --status takes the job folder of a Slurm launch "
                         "(<paths.results>/hydra/launch-<time>-<id>, printed when the launch starts)")
    record = json.loads(path.read_text(encoding="utf-8"))
    listed = queue(record["array_job_id"])
    lines, counts = [], {}
    for task in record["tasks"]:
        state = task_state(task, listed, status_file)
        key = state.split(" (")[0].split(",")[0].split(";")[0]
        counts[key] = counts.get(key, 0) + 1
        lines.append(f"task {task['task_id']}  shard {task['shard'][0]}/{task['shard'][1]}  {state}")
    lines.append(f"{len(record['tasks'])} task(s): " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    return lines


if __name__ == "__main__":  # pragma: no cover
    print("\n".join(status_lines(Path(sys.argv[1]), "editmeter_status.json")))
