"""What a user reads (issue 58, item 2): `remove`'s advice, why a complete row counts fewer queries than the set,
and a failed Slurm launch that names no folder it never made. (The budget line: tests/test_budget.py; `show
--columns`: tests/test_show.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT, child_pythonpath

from benchmark.commands.remove import RemoveError, RunFolder, resolve


def _folders(tmp_path: Path) -> list[RunFolder]:
    runs = tmp_path / "runs"
    return [RunFolder(runs / "demo_mini-6e4fedcfe4" / "overedit-34054d50c3e7", "overedit", "demo_mini"),
            RunFolder(runs / "demo_mini-6e4fedcfe4" / "overedit-a95a10387ec4", "overedit", "demo_mini"),
            RunFolder(runs / "demo-4412b96c4f" / "overedit-a95a10387ec4", "overedit", "demo")]


def test_remove_never_suggests_narrowing_with_the_queryset_already_given(tmp_path):
    with pytest.raises(RemoveError) as without:
        resolve(_folders(tmp_path), ["overedit"])
    assert "names 3 run folders" in str(without.value) and "narrow with --queryset" in str(without.value)
    with pytest.raises(RemoveError) as within:
        resolve(_folders(tmp_path), ["overedit"], queryset="demo_mini")
    msg = str(within.value)
    assert "names 2 run folders" in msg and "--queryset" not in msg, msg
    assert "<editor>-<signature> folder" in msg and "demo_mini-6e4fedcfe4/overedit-34054d50c3e7" in msg
    # what it suggests works: the folder names one run of the set
    (only,) = resolve(_folders(tmp_path), ["overedit-a95a10387ec4"], queryset="demo_mini")
    assert only.queryset == "demo_mini"


def test_a_complete_row_that_counts_fewer_queries_than_the_set_says_why(tmp_path, capsys):
    """A description-based editor on demo_mini with HATIE: obj_remove does not apply, so its complete row has n_ok 12
    of the set's 14, and says so (it used to say only "complete")."""
    from benchmark.commands.score_edits import main
    from benchmark.tables.leaderboard import format_table

    res = tmp_path / "results"
    assert main(["queryset=demo_mini", f"edits={ROOT / 'datasets' / 'demo' / 'targets'}", "name=desc",
                 "kind=description", "profile=tiny", "metrics=hatie_oracle", f"paths.results={res}",
                 "progress=false", "aggregate.bootstrap_resamples=50"]) == 0
    lb = pd.read_csv(res / "leaderboard.csv")
    row = lb[lb["metric_set"] == "hatie_oracle"].iloc[0]
    why = "2 not scored: hatie does not score obj_remove for description-based editors"
    assert (row["n_ok"], row["n_total"], bool(row["complete"]), row["excluded"]) == (12, 12, True, why)
    by_class = pd.read_csv(res / "leaderboard_by_class.csv")  # the class holding the two obj_remove queries
    assert set(by_class["excluded"].dropna()) == {why}
    line = next(ln for ln in format_table(res, queryset="demo_mini").splitlines() if ln.startswith("desc "))
    assert line.split()[2] == "12" and line.endswith(f"complete ({why})"), line
    # an instruction-based editor owes all 14: nothing to explain
    basic = pd.read_csv(res / "leaderboard.csv")
    assert basic["excluded"].isna().sum() + (basic["excluded"] == "").sum() == len(basic) - 1


def test_a_slurm_launch_whose_sinfo_fails_names_no_job_folder(tmp_path):
    """`sinfo` failing (not a login node): one error, exit status 2, and no "job folders in ..." line for a folder that
    is never created."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sinfo").write_text("#!/bin/sh\necho 'slurm_load_partitions: Unable to contact slurm controller' >&2\n"
                                   "exit 1\n")
    (bin_dir / "sinfo").chmod(0o755)
    res = tmp_path / "results"
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", PYTHONPATH=child_pythonpath(ROOT),
               HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-m", "benchmark.commands.cli", "launch", "--launcher", "slurm", "--workers", "2",
                          "editor=identity", "queryset=demo_mini", "profile=tiny", "metrics=basic",
                          f"paths.results={res}"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "sinfo failed" in out.stderr and "Unable to contact slurm controller" in out.stderr
    assert "job folders in" not in out.stdout + out.stderr, out.stdout
    assert not (res / "hydra").exists()
