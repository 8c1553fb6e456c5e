"""`editmeter launch --launcher slurm` against a real single-node Slurm 22.05 cluster (Debian's slurmctld, slurmd,
munge; no accounting storage; tests/helpers/slurm_cluster.py), started once for the module and stopped after it.
Skipped, with the command that installs the packages, where they are missing. The commands are the ones a user
types; editors are weight-free (identity, a slowed identity) at profile=tiny on demo_mini."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import HELPERS, ROOT, child_pythonpath
from slurm_cluster import SlurmCluster, missing

pytestmark = pytest.mark.skipif(missing() is not None, reason=f"{missing()}")

TABLES = ("leaderboard.csv", "leaderboard_by_type.csv", "leaderboard_by_class.csv", "leaderboard_metrics.csv")
BASE = ["editor=identity", "queryset=demo_mini", "profile=tiny", "metrics=basic", "progress=false",
        "aggregate.bootstrap_resamples=50"]
FITS = ["hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=1"]  # the node: 2 CPUs, 4000 MB, no GPU
# a slowed identity editor (batches of 2), so a task can be cancelled or requeued in the middle of its edits
SLOW = ["editor._target_=slow_editor.SlowIdentity", "+editor.delay_s=1.5", "batch_size=2"]
# slower still where a task must stay running while `editmeter launch --status` starts (a Python process: 3-8 s on
# a loaded 2-core machine): at 1.5 s a batch, shard 1's 4 batches finished before the scancel under xdist load
SLOWER = [*SLOW[:1], "+editor.delay_s=3", *SLOW[2:]]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with SlurmCluster(tmp_path_factory.mktemp("slurm"), cpus=2, memory_mb=4000,
                      extra_conf=("PartitionName=short Nodes=ALL MaxTime=1 State=UP",)) as c:
        yield c


def _env(cluster: SlurmCluster) -> dict[str, str]:
    return dict(cluster.env, PYTHONPATH=child_pythonpath(ROOT, HELPERS), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1",
                EDITMETER_SLURM_POLL_S="1")


def _launch(cluster: SlurmCluster, results: Path, *extra: str, workers: int = 2, timeout: float = 300,
            flags: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "benchmark.commands.cli", "launch", "--launcher", "slurm", "--workers", str(workers),
           *flags, *BASE, f"paths.results={results}", *extra]
    return subprocess.run(cmd, cwd=ROOT, env=_env(cluster), capture_output=True, text=True, timeout=timeout)


def _popen(cluster: SlurmCluster, results: Path, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "benchmark.commands.cli", "launch", "--launcher", "slurm", "--workers", "2", *BASE,
           f"paths.results={results}", *extra]
    return subprocess.Popen(cmd, cwd=ROOT, env=_env(cluster), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _gpu_request(script: str) -> list[str]:
    return [ln for ln in script.splitlines() if ln.startswith("#SBATCH --") and ("gpu" in ln.split("=")[0]
                                                                               or ln.startswith("#SBATCH --gres"))]


def _status(cluster: SlurmCluster, launch_dir: Path) -> str:
    """`editmeter launch --status <job folder>`, as a user types it."""
    out = subprocess.run([sys.executable, "-m", "benchmark.commands.cli", "launch", "--status", str(launch_dir)], cwd=ROOT,
                         env=_env(cluster), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _tables(results: Path) -> dict[str, bytes]:
    return {n: (results / n).read_bytes() for n in TABLES}


def _launch_dirs(results: Path) -> list[Path]:
    return sorted((results / "hydra").glob("launch-*"))


def _wait_running(cluster: SlurmCluster, proc: subprocess.Popen, results: Path, task_suffix: str,
                  min_edits: int = 1, timeout: float = 120) -> str:
    """Wait until the array task `<id>_<suffix>` runs and the run folder holds `min_edits` edit records."""
    end = time.time() + timeout
    while time.time() < end and proc.poll() is None:
        running = [t["id"] for t in cluster.squeue(check=False) if t["id"].endswith(task_suffix)
                   and t["state"] == "RUNNING"]
        logs = list(results.glob("runs/*/*/edits.jsonl"))
        n = sum(len(p.read_text().splitlines()) for p in logs)
        if running and n >= min_edits:
            return running[0]
        time.sleep(0.3)
    out, err = proc.communicate(timeout=60) if proc.poll() is not None else ("", "")
    raise AssertionError(f"task *{task_suffix} never ran with {min_edits} edits; launch: {out[-2000:]}{err[-2000:]}")


@pytest.fixture(scope="module")
def local_tables(tmp_path_factory):
    """The leaderboards of the same run in one local process."""
    res = tmp_path_factory.mktemp("local")
    out = subprocess.run([sys.executable, "-m", "benchmark.commands.cli", "run", *BASE, f"paths.results={res}"], cwd=ROOT,
                         env=dict(os.environ, PYTHONPATH=child_pythonpath(ROOT, HELPERS), OMP_NUM_THREADS="1"),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return _tables(res)


def test_two_shards_on_slurm_equal_a_local_run_without_gpu_request_or_sacct_noise(cluster, tmp_path, local_tables):
    res = tmp_path / "r"
    out = _launch(cluster, res, *FITS)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-4000:]
    assert _tables(res) == local_tables  # byte for byte
    # the cluster has no GPU and none was asked for explicitly: no GPU request reaches sbatch
    assert "partition debug has no GPUs" in text
    script = next(_launch_dirs(res)[0].glob(".submitit/*/*_submission.sh")).read_text()
    assert not _gpu_request(script) and "--array=0-1" in script
    # accounting is off: one line says where states come from, and submitit's sacct warnings never appear
    assert text.count("job states come from squeue") == 1 and "accounting storage is off" in text
    assert "sacct" not in text.replace("no sacct", "")
    assert sorted(json.loads(p.read_text())["shard"][0] for p in res.glob("hydra/launch-*/*/editmeter_status.json")) \
        == [0, 1]
    assert cluster.squeue() == []


def test_gpus_none_submits_no_gpu_request_even_when_asked_in_the_config(cluster, tmp_path):
    """`--gpus none` drops gpus_per_task (which alone would be refused: this node has no GPU)."""
    res = tmp_path / "r"
    out = _launch(cluster, res, *FITS, "hydra.launcher.gpus_per_task=1", workers=1, flags=("--gpus", "none"))
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    script = next(_launch_dirs(res)[0].glob(".submitit/*/*_submission.sh")).read_text()
    assert not _gpu_request(script)


@pytest.mark.parametrize(("extra", "keys"), [
    ((), ("hydra.launcher.cpus_per_task=2 (asks 8)", "hydra.launcher.mem_gb=3 (asks 64)")),  # the config's defaults
    ((*FITS, "hydra.launcher.gpus_per_task=1"), ("--gpus none or hydra.launcher.gpus_per_task=null (asks 1)",)),
    (("hydra.launcher.partition=nope",), ("hydra.launcher.partition=nope: sinfo lists no such partition",)),
])
def test_a_task_no_node_can_hold_is_refused_before_submission(cluster, tmp_path, extra, keys):
    res = tmp_path / "r"
    out = _launch(cluster, res, *extra)
    assert out.returncode == 2, out.stdout + out.stderr
    errors = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(errors) == 1 and errors[0].startswith("error: "), out.stderr
    assert all(k in errors[0] for k in keys), errors[0]
    assert not _launch_dirs(res) and cluster.squeue() == []


def test_a_job_that_can_never_start_is_cancelled_with_the_keys_to_change(cluster, tmp_path):
    """Partition `short` allows 1 minute; 5 are asked: squeue says PartitionConfig, the launch stops at once."""
    res = tmp_path / "r"
    t0 = time.time()
    out = _launch(cluster, res, *FITS, "hydra.launcher.partition=short", "hydra.launcher.timeout_min=5", timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr
    errors = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(errors) == 1 and "can never start: squeue says Partition" in errors[0], out.stderr
    assert "hydra.launcher.timeout_min=5 is above partition short's time limit (1 min)" in errors[0]
    assert "Traceback" not in out.stderr and time.time() - t0 < 60
    assert not _launch_dirs(res) and cluster.squeue() == []


@pytest.mark.parametrize(("extra", "key"), [
    (("hydra.launcher.gres=foo:1",), "hydra.launcher.gres"),
    (("hydra.launcher.constraint=nosuchfeature",), "hydra.launcher.constraint"),  # (no accounting: qos and
    # account are not checked by this cluster)
])
def test_an_sbatch_refusal_is_one_line_naming_the_key(cluster, tmp_path, extra, key):
    res = tmp_path / "r"
    out = _launch(cluster, res, *FITS, *extra)
    assert out.returncode == 2, out.stdout + out.stderr
    errors = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(errors) == 1 and "sbatch refused" in errors[0] and key in errors[0], out.stderr
    assert "Traceback" not in out.stderr
    assert not _launch_dirs(res) and cluster.squeue() == []


def test_a_cancelled_task_fails_the_launch_and_the_rerun_runs_only_its_shard(cluster, tmp_path):
    res = tmp_path / "r"
    proc = _popen(cluster, res, *FITS, *SLOWER)
    task = _wait_running(cluster, proc, res, "_1")
    running = _status(cluster, _launch_dirs(res)[0])
    assert f"task {task}  shard 1/2  running" in running, running
    cluster.run("scancel", task)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, out + err
    assert f"shard 1/2 (task {task}) ended without a result" in err and f"{task}_0_log.err" in err
    first = _launch_dirs(res)[0]
    # the status command, from the job folder alone
    lines = _status(cluster, first).splitlines()
    assert "shard 0/2  done" in lines[0] and "shard 1/2  failed (ended without a result" in lines[1]
    assert lines[-1] == "2 task(s): 1 done, 1 failed"
    # the same command again: only shard 1 is submitted, and the run completes
    again = _launch(cluster, res, *FITS, *SLOWER)
    assert again.returncode == 0, (again.stdout + again.stderr)[-4000:]
    assert "1 of 2 job(s) finished in an earlier launch" in again.stdout
    second = [d for d in _launch_dirs(res) if d != first][0]
    assert sorted(p.parent.name for p in second.glob("*/editmeter_status.json")) == ["1"]
    import pandas as pd

    assert bool(pd.read_csv(res / "leaderboard.csv")["complete"].iloc[0])


def test_a_crashing_task_is_reported_with_its_log(cluster, tmp_path):
    res = tmp_path / "r"
    out = _launch(cluster, res, *FITS, "editor._target_=failing_editor.NoSuchEditor", workers=1)
    assert out.returncode == 1, out.stdout + out.stderr
    line = next(ln for ln in out.stderr.splitlines() if "exited with 1" in ln)
    log = line.split("; log: ")[1].split(" (and ")[0]
    assert Path(log).exists() and "NoSuchEditor" in Path(log).read_text()


def test_a_copy_requeued_in_a_finished_tasks_last_seconds_is_cancelled_and_none_is_left_queued(cluster, tmp_path):
    """`scontrol requeue` lands while task 0 completes, after its result file is written (the editor's exit hook,
    tests/helpers/slow_editor.py RequeueAtExit): the launch cancels the requeued copy with one line instead of
    taking the result as the task's end, and when it returns squeue lists no task of the array (the copy never
    started: it would have run again, unwatched, against the results folder)."""
    res = tmp_path / "r"
    out = _launch(cluster, res, *FITS, "editor._target_=slow_editor.RequeueAtExit")
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-4000:]
    record = json.loads((_launch_dirs(res)[0] / "slurm.json").read_text())
    array, task = record["array_job_id"], record["tasks"][0]
    assert [t for t in cluster.squeue() if t["id"].split("_")[0] == array] == []
    said = [ln for ln in out.stdout.splitlines() if "requeued copy" in ln]
    assert len(said) == 1, text[-4000:]
    assert said[0].startswith(f"[editmeter] slurm: task {task['task_id']} (shard 0/2) had finished; its requeued "
                              "copy (") and said[0].endswith(") was cancelled (its work is done)"), said
    assert Path(task["stdout"]).read_text().count("Starting with JobEnvironment") == 1  # the copy never ran
    import pandas as pd

    assert bool(pd.read_csv(res / "leaderboard.csv")["complete"].iloc[0])


@pytest.mark.slow
def test_a_preempted_task_resumes_and_the_tables_equal_an_uninterrupted_run(cluster, tmp_path):
    """`scontrol requeue` of a running task mid-edit: Slurm kills and requeues it, it runs its job again (the
    stages skip the finished edits), the launch waits, and the tables are an uninterrupted run's."""
    res, ref = tmp_path / "r", tmp_path / "ref"
    ok = subprocess.run([sys.executable, "-m", "benchmark.commands.cli", "run", *BASE, *SLOW, f"paths.results={ref}"],
                        cwd=ROOT, env=_env(cluster), capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stderr[-3000:]
    proc = _popen(cluster, res, *FITS, *SLOW)
    task = _wait_running(cluster, proc, res, "_0", min_edits=2)
    cluster.run("scontrol", "requeue", task)
    end = time.time() + 60
    while "requeued" not in (state := _status(cluster, _launch_dirs(res)[0])) and time.time() < end:
        time.sleep(0.5)
    assert f"task {task}  shard 0/2  requeued, pending (BeginTime)" in state, state  # held before it restarts
    out, err = proc.communicate(timeout=400)
    assert proc.returncode == 0, (out + err)[-4000:]
    assert f"task {task} (shard 0/2): PENDING, requeued" in out
    assert _tables(res) == _tables(ref)
    log = next(_launch_dirs(res)[0].glob(f".submitit/{task}/{task}_0_log.out")).read_text()
    assert log.count("Starting with JobEnvironment") == 2  # submitit's line at each start of the task


def test_a_task_at_its_time_limit_is_requeued_up_to_max_num_timeout_and_resumes(cluster, tmp_path):
    """Slurm warns a task at its time limit with SIGUSR2 (sbatch --signal=USR2@signal_delay_s); sent here with
    `scancel --signal=USR2`, as submitit's own tests do, because slurmctld's periodic check sends it up to a minute
    before the asked time. With timeout_min=10 submitit counts any such signal as a time limit. max_num_timeout=1:
    the first signal requeues the task, which resumes; the second ends it with submitit's "timed-out too many
    times" (the task's error with its log, not a failed query); the same command again finishes the shard."""
    res = tmp_path / "r"
    slow = ("editor._target_=slow_editor.SlowIdentity", "+editor.delay_s=3", "batch_size=2")
    limits = ("hydra.launcher.timeout_min=10", "hydra.launcher.max_num_timeout=1")
    proc = _popen(cluster, res, *FITS, *slow, *limits)
    task = _wait_running(cluster, proc, res, "_0", min_edits=2)
    cluster.run("scancel", "--signal=USR2", task)
    launch_dir = _launch_dirs(res)[0]
    log = launch_dir / ".submitit" / task / f"{task}_0_log.out"
    end = time.time() + 120
    while time.time() < end and proc.poll() is None and log.read_text().count("Starting with JobEnvironment") < 2:
        time.sleep(0.3)
    n = sum(len(p.read_text().splitlines()) for p in res.glob("runs/*/*/edits.jsonl"))
    _wait_running(cluster, proc, res, "_0", min_edits=n + 1)  # resumed: a new edit after the restart
    cluster.run("scancel", "--signal=USR2", task)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, out + err
    assert f"task {task} (shard 0/2): PENDING, requeued" in out
    assert f"shard 0/2 (task {task}) crashed (submitit: " in err and "timed-out too many times" in err
    assert f"{task}_0_log.err" in err
    assert "Requeued job" in log.read_text() and log.read_text().count("Starting with JobEnvironment") == 2
    assert not any("UncompletedJobError" in p.read_text() for p in res.glob("runs/*/*/failures.log"))
    again = _launch(cluster, res, *FITS, *slow, *limits)
    assert again.returncode == 0, (again.stdout + again.stderr)[-4000:]
    assert "1 of 2 job(s) finished in an earlier launch" in again.stdout
    import pandas as pd

    assert bool(pd.read_csv(res / "leaderboard.csv")["complete"].iloc[0])
