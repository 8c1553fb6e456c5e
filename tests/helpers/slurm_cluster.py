"""A throwaway single-node Slurm cluster for tests: Debian's slurmctld, slurmd and munge, started as child
processes with their own slurm.conf (`SLURM_CONF`), munge socket, ports on 127.0.0.1, and state, spool and logs
in a temporary folder; `stop()` ends exactly the processes it started.

    with SlurmCluster(tmp_path / "slurm", cpus=2, memory_mb=4000) as cluster:
        subprocess.run(["sbatch", ...], env=cluster.env)

No accounting storage (sacct fails, as on many small clusters), proctrack/linuxproc and task/none (no cgroups),
one node named after this host, one partition `debug` (the default). `python tests/helpers/slurm_cluster.py DIR`
starts one and waits (Ctrl-C stops it), for trying commands by hand: it prints the `SLURM_CONF` to export.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
INSTALL = "apt-get install -y --no-install-recommends " + " ".join(PACKAGES)
BINARIES = ("slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "sinfo", "munged")


def missing() -> str | None:
    """Why no cluster can start here (a binary not found, or not root), or None."""
    lost = [b for b in BINARIES if shutil.which(b) is None and not Path("/usr/sbin", b).exists()]
    if lost:
        return f"Slurm is not installed ({', '.join(lost)} not found): {INSTALL}"
    if os.geteuid() != 0:
        return "the test cluster runs slurmd as root (it starts jobs as their user)"
    return None


def _free_ports(n: int) -> list[int]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _sbin(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


class SlurmCluster:
    """One slurmctld + one slurmd (+ a private munged) under `root`. `extra_conf`: more slurm.conf lines."""

    def __init__(self, root: Path, *, cpus: int = 2, memory_mb: int = 4000, partition: str = "debug",
                 extra_conf: tuple[str, ...] = ()) -> None:
        self.root = Path(root)
        self.cpus, self.memory_mb, self.partition = cpus, memory_mb, partition
        self.extra_conf = extra_conf
        self.node = socket.gethostname().split(".")[0]
        self.procs: list[subprocess.Popen] = []
        self.conf = self.root / "slurm.conf"
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))

    # -- start / stop ----------------------------------------------------------------------------------------------

    def start(self, timeout_s: float = 30.0) -> SlurmCluster:
        why = missing()
        if why:
            raise RuntimeError(why)
        r = self.root
        for d in ("state", "spool", "log", "munge"):
            (r / d).mkdir(parents=True, exist_ok=True)
        key = r / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        sock = r / "munge" / "munge.socket"
        (r / "munge").chmod(0o700)
        self._spawn([_sbin("munged"), "--foreground", "--force", f"--key-file={key}", f"--socket={sock}",
                     f"--pid-file={r / 'munge' / 'munged.pid'}", f"--log-file={r / 'log' / 'munged.log'}",
                     f"--seed-file={r / 'munge' / 'munge.seed'}"], "munged")
        self._wait(lambda: sock.exists(), timeout_s, "munged's socket")
        ctld_port, slurmd_port = _free_ports(2)
        lines = [
            "ClusterName=editmeter-test",
            f"SlurmctldHost={self.node}(127.0.0.1)",
            f"SlurmctldPort={ctld_port}",
            f"SlurmdPort={slurmd_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            # requeued jobs wait cred_expire s (default 120) before they may start again; 10 s here
            f"AuthInfo=socket={sock},cred_expire=10",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"StateSaveLocation={r / 'state'}",
            f"SlurmdSpoolDir={r / 'spool'}",
            f"SlurmctldPidFile={r / 'slurmctld.pid'}",
            f"SlurmdPidFile={r / 'slurmd.pid'}",
            f"SlurmctldLogFile={r / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={r / 'log' / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/none",
            "MpiDefault=none",
            "ReturnToService=2",
            "SchedulerType=sched/backfill",
            # a test cluster reacts in seconds: scheduling passes, the kill grace period, forgetting finished jobs
            "SchedulerParameters=sched_interval=1,bf_interval=1",
            "KillWait=2",
            "MinJobAge=30",
            "InactiveLimit=0",
            "SlurmctldTimeout=30",
            "SlurmdTimeout=30",
            "MessageTimeout=10",
            f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory={self.memory_mb} State=UNKNOWN",
            f"PartitionName={self.partition} Nodes={self.node} Default=YES MaxTime=INFINITE State=UP",
            *self.extra_conf,
        ]
        self.conf.write_text("\n".join(lines) + "\n", encoding="utf-8")
        self._spawn([_sbin("slurmctld"), "-D", "-i", "-f", str(self.conf)], "slurmctld")
        self._spawn([_sbin("slurmd"), "-D", "-f", str(self.conf), "-N", self.node], "slurmd")
        self._wait(self._node_up, timeout_s, f"node {self.node} to come up (logs: {r / 'log'})")
        return self

    def _spawn(self, cmd: list[str], name: str) -> None:
        out = open(self.root / "log" / f"{name}.out", "ab")  # noqa: SIM115 (kept open for the daemon's life)
        self.procs.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=self.env,
                                           start_new_session=True))
        out.close()

    def _wait(self, ready, timeout_s: float, what: str) -> None:
        t0 = time.time()
        while time.time() - t0 < timeout_s:
            for p in self.procs:
                if p.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"{p.args[0]} exited with {p.returncode} while waiting for {what}; "
                                       f"logs: {self.root / 'log'}")
            if ready():
                return
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"timed out after {timeout_s:.0f} s waiting for {what}")

    def _node_up(self) -> bool:
        out = self.run("sinfo", "-h", "-N", "-o", "%T", check=False)  # one line per node and partition
        states = {s.rstrip("*") for s in out.stdout.split()}
        return out.returncode == 0 and bool(states) and states <= {"idle", "mixed", "allocated"}

    def stop(self) -> None:
        """Cancel every job and wait for their processes to end, then end the daemons this object started (by their
        process ids), newest first; last, any process still carrying this cluster's SLURM_CONF (a job step that
        outlived slurmd) is killed by its id."""
        if self.procs and all(p.poll() is None for p in self.procs):
            self.run("scancel", "--full", "-u", str(os.getuid()), check=False, timeout=10)
            t0 = time.time()
            while time.time() - t0 < 20 and (self._leftovers() or self.squeue(check=False)):
                time.sleep(0.3)
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=10)
        self.procs = []
        for pid in self._leftovers():
            try:
                os.kill(pid, 9)
            except OSError:
                pass

    def _leftovers(self) -> list[int]:
        """Processes whose environment names this cluster, other than this one, its parents, the daemons and their
        children (slurmctld's slurmscriptd): job steps and their processes."""
        mine = f"SLURM_CONF={self.conf}".encode()
        daemons = {p.pid for p in self.procs}
        skip = {os.getpid(), os.getppid(), *daemons}
        found = []
        for d in Path("/proc").iterdir():
            if not d.name.isdigit() or int(d.name) in skip:
                continue
            try:
                env = (d / "environ").read_bytes().split(b"\0")
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid in daemons:
                continue
            if mine in env:
                found.append(int(d.name))
        return found

    def __enter__(self) -> SlurmCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- helpers for tests -----------------------------------------------------------------------------------------

    def run(self, *cmd: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
        """A Slurm client command against this cluster."""
        return subprocess.run(list(cmd), env=self.env, capture_output=True, text=True, check=check,
                              timeout=timeout)

    def squeue(self, check: bool = True) -> list[dict[str, str]]:
        """Every task in the queue (arrays expanded): id, state, reason."""
        out = self.run("squeue", "-h", "-r", "-o", "%i|%T|%r", check=check).stdout
        return [dict(zip(("id", "state", "reason"), line.split("|", 2), strict=False)) for line in out.splitlines()
                if line]


if __name__ == "__main__":
    c = SlurmCluster(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/editmeter-slurm")).start()
    print(f"export SLURM_CONF={c.conf}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        c.stop()
