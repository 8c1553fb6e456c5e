"""Scale-out: `editmeter launch` shards runs and sweeps through Hydra launchers (joblib, submitit), then aggregates
once; jobs are pinned to GPUs by lease; sweeps give one run folder per setting."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from benchmark.commands import launch as L
from benchmark.commands import run as R  # a multirun job's side: GPU leases, pinning, the status file
from benchmark.plan.budget import OverBudget

ROOT = Path(__file__).resolve().parents[1]
FAST = ["editor=overedit", "queryset=demo_mini", "queryset.first=9", "profile=tiny", "metrics=basic",
        "progress=false", "preflight=false", "aggregate.bootstrap_resamples=50"]


def _statuses(results: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(results.glob(f"hydra/launch-*/*/{R.STATUS_FILE}"))]


def _overall(results: Path) -> pd.DataFrame:
    return pd.read_csv(results / "leaderboard.csv")


def test_multirun_arguments_shard_and_keep_the_sweep(tmp_path):
    args = L.build_multirun(["editor=ip2p", "editor.guidance_scale=5,7.5"], workers=3, launcher="local",
                            gpus=["0", "1", "2"], sweep_dir=tmp_path)
    assert args[0] == "--multirun" and "shard.count=3" in args and "shard.index=range(0,3)" in args
    assert "stages=[edit,score]" in args and "hydra/launcher=local" in args and "hydra.launcher.n_jobs=3" in args
    jobs = L.jobs_of(args[1:])
    assert len(jobs) == 6  # 2 settings x 3 shards
    assert {next(o for o in j if o.startswith("editor.guidance")) for j in jobs} == {
        "editor.guidance_scale=5", "editor.guidance_scale=7.5"}
    args = L.build_multirun(["stages=[edit]"], workers=2, launcher="slurm", gpus=[], sweep_dir=tmp_path)
    assert "stages=[edit]" in args and not any(a.startswith("hydra.launcher.n_jobs") for a in args)


@pytest.mark.parametrize(("overrides", "why"), [(["shard.index=1"], "shards"), (["hydra/launcher=slurm"], "launcher"),
                                                (["stages=[aggregate]"], "nothing to shard")])
def test_launch_refuses_what_it_sets_itself(tmp_path, overrides, why):
    with pytest.raises(L.LaunchError, match=why):
        L.build_multirun(overrides, workers=2, launcher="local", gpus=[], sweep_dir=tmp_path)


def test_gpu_spec(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5")
    assert L.parse_gpus("4") == ["0", "1", "2", "3"] and L.parse_gpus("0,2,5") == ["0", "2", "5"]
    assert L.parse_gpus("none") == [] and L.parse_gpus("0") == []
    with pytest.raises(L.LaunchError):
        L.parse_gpus("1,1")


def test_gpu_leases_never_share_a_gpu(tmp_path):
    """The shard index picks the GPU; a held one is skipped; a released one is reused."""
    with R.lease_gpu(["0", "1"], 1, tmp_path) as a, R.lease_gpu(["0", "1"], 1, tmp_path) as b:
        assert (a, b) == ("1", "0")
    with R.lease_gpu(["0", "1"], 3, tmp_path) as c:
        assert c == "1"


def test_pinned_job_sees_only_its_gpu(monkeypatch, tmp_path):
    seen = {}

    def fake_run(cmd, env, check):
        seen.update(cmd=cmd, env=env)
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(R.subprocess, "run", fake_run)
    monkeypatch.setenv(R.ENV_GPUS, "0,1")
    assert R._pinned(["editor=ip2p", "shard.index=1"], str(tmp_path), "1") == 0
    assert seen["env"]["CUDA_VISIBLE_DEVICES"] == "1" and R.ENV_GPUS not in seen["env"]
    assert seen["cmd"][1:3] == ["-m", "benchmark.commands.run"] and f"hydra.run.dir={tmp_path}" in seen["cmd"]


@pytest.mark.slow  # two fresh processes importing torch, a loky pool and a reference run: ~15 s quiet
def test_local_launch_pins_shards_and_equals_one_process(tmp_path, restore_logging, single_thread_torch):
    """Two shards through the joblib launcher, each a fresh process pinned to its GPU (CUDA_VISIBLE_DEVICES is
    harmless on a CPU machine), then one aggregate: the leaderboard equals a single process's."""
    from benchmark.commands.run import compose, run_pipeline
    from benchmark.stages.aggregate import write_leaderboards

    sharded, single = tmp_path / "sharded", tmp_path / "single"
    assert L.launch([*FAST, f"paths.results={sharded}"], workers=2, launcher="local", gpus=["0", "1"]) == 0
    st = _statuses(sharded)
    assert sorted((s["shard"][0], s["gpu"], s["status"]) for s in st) == [(0, "0", 0), (1, "1", 0)]
    cfg, choices = compose([*FAST, f"paths.results={single}", "stages=[edit,score]"])
    run_pipeline(cfg, choices["editor"])
    write_leaderboards(single, None, 50, 0)
    for t in ("leaderboard.csv", "leaderboard_by_type.csv", "leaderboard_by_class.csv"):
        assert (sharded / t).read_text() == (single / t).read_text(), t
    assert bool(_overall(sharded)["complete"].iloc[0])


def test_sweep_gives_one_run_folder_per_setting(tmp_path, restore_logging):
    """`editor.noise_std=6,12` gives two run folders whose run.json carries the setting, and two leaderboard rows."""
    res = tmp_path / "r"
    assert L.launch([*FAST, "queryset.first=3", f"paths.results={res}", "editor.noise_std=6,12"], workers=1,
                    launcher="local", gpus=[]) == 0
    assert len(_statuses(res)) == 2
    metas = [json.loads(p.read_text()) for p in res.glob("runs/*/*/run.json")]
    assert sorted(m["editor_config"]["noise_std"] for m in metas) == [6.0, 12.0]
    assert sorted(m["editor_info"]["noise_std"] for m in metas) == [6.0, 12.0]
    assert sorted(m["editor_overrides"] for m in metas) == [["editor.noise_std=12"], ["editor.noise_std=6"]]
    assert len({m["editor_sig"] for m in metas}) == 2 and len(_overall(res)) == 2


def test_a_failing_job_fails_the_launch_not_the_others(tmp_path, restore_logging, capsys):
    """A job whose editor fails on every query exits 1; the other job of the sweep still runs, the aggregate is
    written, the launch exits 1 and names the job."""
    res = tmp_path / "r"
    code = L.launch([*FAST, "queryset.first=3", "editor=identity", f"paths.results={res}",
                     "editor._target_=editors.identity.IdentityEditor,failing_editor.AlwaysFails"],
                    workers=1, launcher="local", gpus=[])
    assert code == 1
    st = {next(o for o in s["overrides"] if o.startswith("editor._target_")): s["status"] for s in _statuses(res)}
    assert st == {"editor._target_=editors.identity.IdentityEditor": 0, "editor._target_=failing_editor.AlwaysFails": 1}
    assert (res / "leaderboard.csv").is_file() and "exited with 1" in capsys.readouterr().err


def test_launch_command_line(capsys):
    from benchmark.commands import cli

    assert cli.main(["launch", "--help"]) == 0 and "--workers" in capsys.readouterr().out
    assert cli.main(["launch", "--workers", "0", "editor=identity"]) == 2
    assert "at least 1" in capsys.readouterr().err
    assert cli.main(["launch", "--workers", "2", "editr=identity"]) == 2  # a typo: one line, no traceback
    assert "error:" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
def test_make_bench_with_gpus_launches(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    out = subprocess.run(["make", "-n", "bench", "GPUS=8", "MODEL=ip2p", "QUERYSET=hatie", "EDITMETER=em"], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=30).stdout
    assert "em launch --launcher local --gpus 8" in out and "editor=ip2p" in out
    out = subprocess.run(["make", "-n", "bench", "LAUNCHER=slurm", "WORKERS=16", "EDITMETER=em"], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=30).stdout
    assert "em launch --launcher slurm" in out and "--workers 16" in out
    out = subprocess.run(["make", "-n", "sweep", "MODEL=p2p", "SWEEP=editor.self_replace_steps=0.2,0.5",
                          "EDITMETER=em"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=30).stdout
    assert "em launch" in out and "editor.self_replace_steps=0.2,0.5" in out


@pytest.mark.slow
def test_slurm_code_path_with_submitit_local(tmp_path):
    """The submitit launcher (Slurm's code path) with its local executor: 2 shards, then the aggregate."""
    res = tmp_path / "r"
    cmd = [sys.executable, "-m", "benchmark.commands.cli", "launch", "--launcher", "slurm_local", "--workers", "2",
           *FAST, f"paths.results={res}"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert sorted(s["shard"][0] for s in _statuses(res)) == [0, 1]
    assert bool(_overall(res)["complete"].iloc[0])


def test_one_setting_written_two_ways_keys_one_run_folder():
    """`editor.guidance_scale=5` and `=5.0` are one setting: one editor signature, one run folder."""
    from benchmark.plan.config import editor_signature

    cfg = {"_target_": "editors.identity.IdentityEditor", "guidance_scale": 5.0, "steps": [1.0, 2.5]}
    same = {"_target_": "editors.identity.IdentityEditor", "guidance_scale": 5, "steps": [1, 2.5]}
    other = {"_target_": "editors.identity.IdentityEditor", "guidance_scale": 5.5, "steps": [1, 2.5]}
    assert editor_signature(cfg, {}, 0, "tiny") == editor_signature(same, {}, 0, "tiny")
    assert editor_signature(cfg, {}, 0, "tiny") != editor_signature(other, {}, 0, "tiny")


# -- the launch's budget: checked once, over every shard, before any worker starts (issue 26) -----------------------

BUDGET = ["editor=identity", "queryset=demo_mini", "profile=tiny", "metrics=basic", "progress=false",
          "aggregate.bootstrap_resamples=50"]


@pytest.fixture
def identity_cost(monkeypatch):
    """The cost table with a row for identity of 0.02 s per query (weight-free editors need none: their budget line
    says they load no model), so these tests' budgets are small numbers of seconds."""
    from benchmark.plan import resolved

    table = resolved.read_costs()
    row = {"any": {"s_per_query": 0.02, "load_s": 0, "confidence": "measured", "source": "tests/test_scale.py"}}
    table["editors"]["identity"] = {"real": row, "tiny": row}
    monkeypatch.setattr(resolved, "read_costs", lambda *a, **k: table)  # read once per run, where it is resolved


def _no_workers(monkeypatch):
    started = []
    monkeypatch.setattr(R, "main", lambda args: started.append(args) or 0)
    return started


def test_an_over_budget_launch_stops_before_any_worker_with_every_shards_queries(identity_cost, tmp_path, monkeypatch,
                                                                                capsys):
    """identity costs 0.02 s per query (the identity_cost fixture): demo_mini's 14 queries over 2 shards are 0.28 s,
    over a budget of 0.18 s; one shard's 7 queries (0.14 s) would fit, so a per-worker check would have let both run."""
    started = _no_workers(monkeypatch)
    res = tmp_path / "r"
    code = L.main(["--workers", "2", "--gpus", "none", *BUDGET, f"paths.results={res}", "budget.max_gpu_hours=0.00005"])
    err = capsys.readouterr().err
    assert code == 1 and started == [] and not (res / "hydra").exists()
    assert "14 queries to do" in err and "over 2 shards" in err and "queryset.sample=" in err
    assert "budget.accept=true" in err


def test_a_sweep_launch_sums_its_settings_and_asks_once(identity_cost, tmp_path, monkeypatch, capsys):
    started = _no_workers(monkeypatch)
    asked = []
    over = [*BUDGET, f"paths.results={tmp_path / 'r'}", "budget.max_gpu_hours=0.0001", "seed=0,1"]  # 2 x 0.28 s
    with pytest.raises(OverBudget, match="2 runs"):
        L.launch(over, workers=2, gpus=[], interactive=lambda: False)
    assert started == []
    assert L.launch(over, workers=2, gpus=[], interactive=lambda: True, ask=lambda q: asked.append(q) or True) == 1
    assert len(asked) == 1 and len(started) == 1  # asked once for the launch; the (stubbed) multirun started
    assert "budget.accept=true" in started[0]  # the workers never ask or refuse: the launch did


def test_workers_of_a_confirmed_launch_run_without_asking(identity_cost, tmp_path, restore_logging):
    """A real launch over budget, confirmed once: both shards run (as processes that are not on a terminal, which
    would refuse an over-budget run of their own) and edit every query."""
    res = tmp_path / "r"
    code = L.launch([*BUDGET, "queryset.first=4", "stages=[edit]", f"paths.results={res}",
                     "budget.max_gpu_hours=0.00001"], workers=2, gpus=[], interactive=lambda: True, ask=lambda q: True)
    assert code == 0 and sorted(s["status"] for s in _statuses(res)) == [0, 0]
    (run_dir,) = res.glob("runs/*/*")
    assert len(list((run_dir / "edits").glob("*.png"))) == 4


# -- a launch fails once, before its workers: GPUs it cannot have, and the preflight, checked by the launch ----------

def test_gpus_beyond_those_this_machine_shows_are_refused_before_any_worker(tmp_path, monkeypatch, capsys):
    """`make sweep ... GPUS=8` on a machine without GPUs used to print "GPUs 0,...,7" and start a job per shard and
    setting; it is one message naming what is visible and the fix, exit status 2, no job folder."""
    started = _no_workers(monkeypatch)
    res = tmp_path / "r"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    code = L.main(["--gpus", "8", *BUDGET, f"paths.results={res}", "seed=0,1"])
    err = capsys.readouterr().err
    assert code == 2 and started == [] and not (res / "hydra").exists()
    assert len(err.strip().splitlines()) == 1 and "--gpus 8 asks for 8 GPUs" in err and "no GPU" in err
    assert "--gpus none" in err
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")  # a count takes the first visible ids; more, or others, refused
    assert L.parse_gpus("2") == ["4", "5"] and L.parse_gpus("1") == ["4"] and L.parse_gpus("5,4") == ["5", "4"]
    with pytest.raises(L.LaunchError, match=r"asks for 3 GPUs, but CUDA_VISIBLE_DEVICES='4,5' names 2 GPU\(s\) "
                                            r"\(4,5\).*at most --gpus 2"):
        L.parse_gpus("3")
    with pytest.raises(L.LaunchError, match=r"asks for GPU\(s\) 0,"):
        L.parse_gpus("0,5")
    assert L.parse_gpus("3", check=False) == ["0", "1", "2"]  # slurm: the nodes have the GPUs


def test_a_failing_preflight_stops_the_launch_once_before_any_worker(tmp_path, monkeypatch, capsys):
    """A sweep of 2 settings x 2 shards whose weights are not cached (offline): one preflight message and exit
    status 1 from the launch, in seconds, instead of the same failure from each of the 4 jobs."""
    from benchmark.plan import weights as W

    started = _no_workers(monkeypatch)
    monkeypatch.setattr(W, "hf_cache_dir", lambda: tmp_path / "hf")
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    res = tmp_path / "r"
    code = L.main(["--workers", "2", "--gpus", "none", "editor=identity", "queryset=demo_mini", "profile=pretrained",
                   "metrics=hatie", "progress=false", f"paths.results={res}", "seed=0,1"])
    out, err = capsys.readouterr()
    assert code == 1 and started == [] and not (res / "hydra").exists()
    assert err.count("preflight:") == 1 and "not in the local cache" in err and "Fix: editmeter weights" in err


def test_a_launch_runs_the_preflight_for_every_setting_and_its_workers_skip_it(tmp_path, monkeypatch, capsys):
    """The launch's preflight covers every shard's queries (14 = demo_mini, over 2 shards) of each setting, and its
    workers run with preflight=false (their checks were made)."""
    started = _no_workers(monkeypatch)
    L.launch([*BUDGET, f"paths.results={tmp_path / 'r'}", "seed=0,1", "queryset.first=13"], workers=2, gpus=[])
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("[editmeter] preflight")]
    assert len(lines) == 2 and all("preflight (demo_mini on identity) ok" in line for line in lines), out
    assert all("13 queries (13 sources checked)" in line for line in lines)
    assert len(started) == 1 and "preflight=false" in started[0] and "budget.accept=true" in started[0]
