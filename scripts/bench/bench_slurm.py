"""Measure a Slurm launch on a real (throwaway, single-node) cluster: submission overhead per task against the local
launcher, and the time from a requeue to the task resuming work.

    python scripts/bench/bench_slurm.py [--workers 2 4] [--keep DIR]

Starts a cluster from Debian's slurmctld/slurmd/munge (tests/helpers/slurm_cluster.py: 2 CPUs, no accounting,
requeue hold `cred_expire=10`), runs `editmeter launch` with the weight-free identity editor (profile=tiny,
demo_mini, metrics=basic) through `--launcher local --gpus none` and `--launcher slurm` for each worker count, then
requeues a running task of a slowed identity editor twice: once waiting out the cluster's hold, once released with
`scontrol update StartTime=now`. Prints one table; needs root and the packages (`apt-get install -y
--no-install-recommends slurmctld slurmd slurm-client munge`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "helpers"))

from slurm_cluster import SlurmCluster, missing  # noqa: E402

BASE = ["editor=identity", "queryset=demo_mini", "profile=tiny", "metrics=basic", "progress=false",
        "aggregate.bootstrap_resamples=50"]
FITS = ["hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=1"]


def _env(cluster: SlurmCluster) -> dict[str, str]:
    path = os.pathsep.join([str(ROOT), str(ROOT / "tests" / "helpers"), os.environ.get("PYTHONPATH", "")])
    return dict(cluster.env, PYTHONPATH=path.rstrip(os.pathsep), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1",
                EDITMETER_SLURM_POLL_S="1")


def launch(cluster: SlurmCluster, results: Path, launcher: str, workers: int, *extra: str) -> tuple[float, float, list]:
    """(start time, wall seconds) of one launch, and (seconds since start, line) for every line it printed."""
    flags = ["--gpus", "none"] if launcher == "local" else []
    cmd = [sys.executable, "-m", "benchmark.commands.cli", "launch", "--launcher", launcher, "--workers", str(workers),
           *flags, *BASE, f"paths.results={results}", *(FITS if launcher == "slurm" else []), *extra]
    t0 = time.time()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(cluster), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    lines = [(time.time() - t0, line.rstrip()) for line in proc.stdout]
    if proc.wait() != 0:
        raise SystemExit("launch failed:\n" + "\n".join(ln for _, ln in lines[-30:]))
    return t0, time.time() - t0, lines


def job_starts(results: Path) -> list[float]:
    """When each job of the launch began its run (its status file's time less the seconds it records)."""
    out = []
    for p in results.glob("hydra/launch-*/*/editmeter_status.json"):
        out.append(p.stat().st_mtime - float(json.loads(p.read_text())["seconds"]))
    return sorted(out)


def overhead(cluster: SlurmCluster, work: Path, workers: int) -> dict[str, dict[str, float]]:
    """Per launcher: launch wall seconds, and each job's start latency: from the line announcing the jobs (after
    the preflight and budget) to the job's run starting (process start and imports included; Slurm: sbatch, the
    scheduler and srun too)."""
    row = {}
    for launcher in ("local", "slurm"):
        res = work / f"{launcher}{workers}"
        t0, wall, lines = launch(cluster, res, launcher, workers)
        announced = t0 + next(t for t, ln in lines if "launch:" in ln and "job(s)" in ln)
        lat = [s - announced for s in job_starts(res)]
        row[launcher] = {"wall": wall, "min": lat[0], "median": lat[len(lat) // 2], "max": lat[-1]}
    return row


def requeue_delay(cluster: SlurmCluster, work: Path, release: bool) -> dict[str, float]:
    """Requeue a running task mid-edit; seconds from `scontrol requeue` to the task RUNNING again (squeue), to its
    process starting again (submitit's log), and to its first new edit record."""
    res = work / f"requeue{int(release)}"
    cmd = [sys.executable, "-m", "benchmark.commands.cli", "launch", "--launcher", "slurm", "--workers", "1", *BASE,
           f"paths.results={res}", *FITS, "editor._target_=slow_editor.SlowIdentity", "+editor.delay_s=1.0",
           "batch_size=1"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(cluster), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        task, edits = None, 0
        while task is None or edits < 2:
            q = [t for t in cluster.squeue(check=False) if t["state"] == "RUNNING"]
            logs = list(res.glob("runs/*/*/edits.jsonl"))
            edits = sum(len(p.read_text().splitlines()) for p in logs)
            task = q[0]["id"] if q else None
            time.sleep(0.1)
        cluster.run("scontrol", "requeue", task)
        t0 = time.time()
        if release:
            while not any(t["reason"] == "BeginTime" for t in cluster.squeue(check=False)):
                time.sleep(0.05)
            cluster.run("scontrol", "update", f"JobId={task}", "StartTime=now")
        log = next(res.glob(f"hydra/launch-*/.submitit/{task}/{task}_0_log.out"))
        edits_at = None  # counted when the new process starts (the killed one may still append a moment)
        out: dict[str, float] = {}
        while "edit" not in out and time.time() - t0 < 120:
            now = time.time() - t0
            if "running" not in out and any(t["state"] == "RUNNING" for t in cluster.squeue(check=False)):
                out["running"] = now
            if "process" not in out and log.read_text(errors="replace").count("Starting with JobEnvironment") > 1:
                out["process"] = now
            n = sum(len(p.read_text().splitlines()) for p in res.glob("runs/*/*/edits.jsonl"))
            if "process" in out and edits_at is None:
                edits_at = n
            elif edits_at is not None and n > edits_at:
                out["edit"] = now
            time.sleep(0.1)
        return out
    finally:
        proc.wait(timeout=600)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--only", choices=("overhead", "requeue"), default=None, help="one of the two measurements")
    ap.add_argument("--keep", type=Path, default=None, help="work folder to keep (default: a temporary one)")
    args = ap.parse_args()
    why = missing()
    if why:
        raise SystemExit(why)
    work = args.keep or Path(tempfile.mkdtemp(prefix="bench-slurm-"))
    try:
        with SlurmCluster(work / "cluster", cpus=2, memory_mb=4000) as cluster:
            rows = [overhead(cluster, work, n) for n in args.workers] if args.only != "requeue" else []
            hold = requeue_delay(cluster, work, release=False) if args.only != "overhead" else {}
            now = requeue_delay(cluster, work, release=True) if args.only != "overhead" else {}
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    if rows:
        print("| tasks | launcher | launch wall s | job start latency s: min / median / max |")
        print("|---|---|---|---|")
        for n, r in zip(args.workers, rows, strict=True):
            for name, v in r.items():
                print(f"| {n} | {name} | {v['wall']:.1f} | {v['min']:.1f} / {v['median']:.1f} / {v['max']:.1f} |")
        print()
    if not hold:
        return
    print("| requeue | to RUNNING s | to process start s | to first new edit s |")
    print("|---|---|---|---|")
    for name, r in (("held (cred_expire=10)", hold), ("released (StartTime=now)", now)):
        print(f"| {name} | {r.get('running', float('nan')):.1f} | {r.get('process', float('nan')):.1f} | "
              f"{r.get('edit', float('nan')):.1f} |")


if __name__ == "__main__":
    main()
