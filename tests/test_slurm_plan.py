"""The Slurm launch's decisions that need no cluster (benchmark/commands/slurm.py): the GPU request, the fit of a task on
the partition's nodes, sbatch refusals, time limits, and the time-limit signal that must not become a failed query.
The same paths against a real cluster: tests/test_slurm.py."""

from __future__ import annotations

import os
import signal

import pytest

from benchmark.commands import slurm as S

DEFAULTS = {"gpus_per_task": 1, "gpus_per_node": None, "cpus_per_task": 8, "mem_gb": 64, "tasks_per_node": 1,
            "partition": None, "gres": None}


def _nodes(*nodes: S.Node):
    return lambda partition: (partition or "debug", list(nodes))


CPU_NODE = S.Node("n1", cpus=2, mem_mb=8000, gpus=0)
GPU_NODE = S.Node("g1", cpus=32, mem_mb=256000, gpus=4)


def test_gres_strings_count_gpus():
    assert S._gpus_in("gpu:4") == 4 and S._gpus_in("gpu:a100:2(S:0-1),shard:8") == 2
    assert S._gpus_in("(null)") == 0 and S._gpus_in(None) == 0 and S._gpus_in("gpu:a100:2,gpu:v100:1") == 3


def test_no_gpu_request_with_gpus_none_or_on_a_partition_without_gpus():
    fit = DEFAULTS | {"cpus_per_task": 1, "mem_gb": 1}
    params, lines, part = S.plan(fit, gpus_flag="none", explicit=[], nodes_of=_nodes(CPU_NODE))
    assert params["gpus_per_task"] is None and not lines and part == "debug"
    # the config's default GPU on a CPU partition: dropped, and said
    params, lines, _ = S.plan(fit, gpus_flag=None, explicit=["cpus_per_task"], nodes_of=_nodes(CPU_NODE))
    assert params["gpus_per_task"] is None and "has no GPUs" in lines[0]
    # on a GPU partition the default stays
    params, lines, _ = S.plan(DEFAULTS, gpus_flag=None, explicit=[], nodes_of=_nodes(GPU_NODE))
    assert params["gpus_per_task"] == 1 and not lines


def test_a_task_no_node_holds_names_the_keys_and_what_fits():
    with pytest.raises(S.SlurmError) as err:
        S.plan(DEFAULTS, gpus_flag=None, explicit=[], nodes_of=_nodes(CPU_NODE))
    msg = str(err.value)
    assert "hydra.launcher.cpus_per_task=2 (asks 8)" in msg and "hydra.launcher.mem_gb=7 (asks 64)" in msg
    # a GPU asked explicitly on a CPU partition is refused, not dropped
    with pytest.raises(S.SlurmError, match=r"--gpus none or hydra.launcher.gpus_per_task=null \(asks 2\)"):
        S.plan(DEFAULTS | {"cpus_per_task": 1, "mem_gb": 1, "gpus_per_task": 2}, gpus_flag=None,
               explicit=["gpus_per_task"], nodes_of=_nodes(CPU_NODE))
    with pytest.raises(S.SlurmError, match=r"hydra.launcher.gpus_per_task=4 \(asks 8\)"):
        S.plan(DEFAULTS | {"gpus_per_task": 8}, gpus_flag=None, explicit=[], nodes_of=_nodes(GPU_NODE))
    # each fits some node, never all on one
    with pytest.raises(S.SlurmError, match="lower hydra.launcher.cpus_per_task"):
        S.plan(DEFAULTS | {"cpus_per_task": 16, "mem_gb": 1}, gpus_flag=None, explicit=[],
               nodes_of=_nodes(S.Node("a", 32, 2000, 0), S.Node("b", 4, 2000, 4)))


@pytest.mark.parametrize(("stderr", "key"), [
    ("sbatch: error: Invalid partition name specified", "hydra.launcher.partition"),
    ("sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified",
     "hydra.launcher.account"),
    ("sbatch: error: Batch job submission failed: Invalid qos specification", "hydra.launcher.qos"),
    ("sbatch: error: Invalid generic resource (gres) specification", "hydra.launcher.gres"),
    ("sbatch: error: Batch job submission failed: Requested node configuration is not available",
     "hydra.launcher.cpus_per_task"),
])
def test_sbatch_refusals_name_their_key(stderr, key):
    line = S.refusal(stderr)
    assert "\n" not in line and key in line and stderr.rsplit("error: ", 1)[1] in line


def test_time_limits_from_sinfo(monkeypatch):
    for shown, minutes in (("1:00", 1), ("infinite", None), ("2-00:00:00", 2880), ("1:30:00", 90), ("5", 5)):
        monkeypatch.setattr(S, "_cmd", lambda *a, shown=shown, **k: type("R", (), {"stdout": shown + "\n"}))
        assert S.time_limit_min("p") == minutes, shown
    monkeypatch.setattr(S, "_cmd", lambda *a, **k: type("R", (), {"stdout": "1:00\n"}))
    assert "hydra.launcher.timeout_min=5 is above partition p's time limit (1 min)" in S.never_hint(
        {"partition": "p", "timeout_min": 5})
    assert "hydra.launcher.cpus_per_task" in S.never_hint({"partition": "p", "timeout_min": 1})


def test_out_of_requeues_is_the_tasks_error_not_a_failed_query():
    """submitit's handler raises UncompletedJobError inside whatever the signal interrupted; a stage's `except
    Exception` (a failed query) must not swallow it: it reaches the task as submitit's own error."""
    from submitit.core.job_environment import JobEnvironment
    from submitit.core.utils import UncompletedJobError

    sig = JobEnvironment._usr_sig()

    def submitit_handler(signum, frame):
        raise UncompletedJobError("Job not requeued because: timed-out too many times.")

    before = signal.signal(sig, submitit_handler)
    swallowed = []

    def stage():
        try:
            os.kill(os.getpid(), sig)
        except Exception as err:  # noqa: BLE001 (what the edit stage does with a query's error)
            swallowed.append(err)
        return 0

    try:
        S._stop_at_time_limit()
        with pytest.raises(S._TimedOut) as got:
            stage()
        assert not swallowed and isinstance(got.value.error, UncompletedJobError)
    finally:
        signal.signal(sig, before)


@pytest.mark.parametrize(("state", "log", "action"), [
    ("PENDING", [S.STARTED, S.RESULT_LINES[0]], "cancel"),  # requeued after its result: pending copy
    ("RUNNING", [S.STARTED, S.JOB_STARTED, S.RESULT_LINES[0]], "wait"),  # the start that wrote it is ending
    ("COMPLETING", [S.STARTED, S.JOB_STARTED, S.RESULT_LINES[0]], "wait"),
    ("RUNNING", [S.STARTED, S.JOB_STARTED, S.RESULT_LINES[0], S.STARTED], "cancel"),  # copy started, no job yet
    ("RUNNING", [S.STARTED, S.JOB_STARTED, S.RESULT_LINES[1], S.STARTED], "cancel"),
    ("RUNNING", [S.STARTED, S.JOB_STARTED, S.RESULT_LINES[0], S.STARTED, S.JOB_STARTED], "wait"),  # copy at work
    # a start, requeued before its result (no result line yet), then the start that wrote the result: ending
    ("RUNNING", [S.STARTED, S.JOB_STARTED, S.STARTED, S.JOB_STARTED, S.RESULT_LINES[0]], "wait"),
    ("RUNNING", None, "wait"),  # no log to tell by: a running task is never cancelled blindly
])
def test_a_finished_tasks_leftover_copy_is_cancelled_unless_it_runs_its_job(tmp_path, state, log, action):
    log_file = tmp_path / "0_log.out"
    if log is not None:
        log_file.write_text("".join(f"submitit INFO (t) - {line} x\n" for line in log))
    assert S.leftover_copy({"stdout": str(log_file)}, state) == action


def _watch_with(monkeypatch, tmp_path, states: list[str], log: list[str]):
    """`watch` over one task whose result file exists, squeue answering `states` in turn ('' = not listed)."""
    (tmp_path / "log.out").write_text("".join(f"submitit INFO (t) - {line}\n" for line in log))
    task = {"num": 0, "task_id": "7_0", "shard": [0, 1], "stdout": str(tmp_path / "log.out"),
            "result": str(tmp_path / "r.pkl"), "job_dir": str(tmp_path / "0")}
    answers = iter(states)
    calls: list[tuple[str, ...]] = []

    def queue(array):
        calls.append(("squeue",))
        state = next(answers, "")
        return {"7_0": (state, "None")} if state else {}

    monkeypatch.setattr(S, "queue", queue)
    monkeypatch.setattr(S, "outcome", lambda t: ("success", 0))
    monkeypatch.setattr(S, "_cmd", lambda *a, **k: calls.append(a))
    said: list[str] = []
    ended = S.watch({"array_job_id": "7", "tasks": [task]}, poll_s=0, say=said.append)
    return ended, calls, said


def test_watch_cancels_a_pending_copy_of_a_finished_task_once_and_ends_when_squeue_no_longer_lists_it(
        monkeypatch, tmp_path):
    ended, calls, said = _watch_with(monkeypatch, tmp_path, ["PENDING", "PENDING", ""],
                                     [S.STARTED, S.JOB_STARTED, S.RESULT_LINES[0]])
    assert ended == {} and [c for c in calls if c[0] != "squeue"] == [("scancel", "7_0")]
    assert said == ["[editmeter] slurm: task 7_0 (shard 0/1) had finished; its requeued copy (pending) was "
                    "cancelled (its work is done)"]


def test_watch_waits_for_a_copy_that_runs_its_job_again_and_never_takes_the_result_as_the_end_while_listed(
        monkeypatch, tmp_path):
    log = [S.STARTED, S.JOB_STARTED, S.RESULT_LINES[0], S.STARTED, S.JOB_STARTED]
    states = ["RUNNING"] * 3 + [""]
    ended, calls, said = _watch_with(monkeypatch, tmp_path, states, log)
    # nothing cancelled, and the result alone was not the end: squeue was asked until it no longer listed the task,
    # then once more (the last look)
    assert ended == {} and said == [] and calls == [("squeue",)] * (len(states) + 1)


def test_status_of_a_finished_task_names_its_requeued_copy(tmp_path):
    (tmp_path / "0").mkdir()
    (tmp_path / "0" / "editmeter_status.json").write_text('{"status": 0}')
    task = {"task_id": "7_0", "job_dir": str(tmp_path / "0"), "stdout": str(tmp_path / "none.out"),
            "stderr": str(tmp_path / "none.err"), "result": str(tmp_path / "r.pkl")}
    assert S.task_state(task, {}, "editmeter_status.json") == "done"
    assert S.task_state(task, {"7_0": ("PENDING", "BeginTime")}, "editmeter_status.json") == (
        "done; squeue still lists a requeued copy (pending): a running launch cancels it, else `scancel 7_0`")
