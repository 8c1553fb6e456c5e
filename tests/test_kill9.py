"""SIGKILL a real `python -m benchmark.commands.run` at random points of the edit and the score stage, rerun it, and
compare the final leaderboards and edits with an uninterrupted run (issue 11)."""

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import HELPERS, ROOT, child_pythonpath

from benchmark.querysets.io import load_queryset, write_queries

TABLES = ("leaderboard.csv", "leaderboard_by_type.csv", "leaderboard_by_class.csv")
N_QUERIES = 14
PART_ROWS = 4  # score rows per part in the killed runs
SCORE_DELAY_S = 0.12  # per scored batch of 2: the score stage lasts at least 7 x this


@pytest.fixture(scope="module")
def mini_set(tmp_path_factory):
    """The first N_QUERIES demo queries (every edit type twice) in a folder of their own."""
    root = tmp_path_factory.mktemp("qs") / "demo"
    shutil.copytree(ROOT / "datasets" / "demo", root)
    write_queries(root / "queries.jsonl", load_queryset(ROOT / "datasets" / "demo").queries[:N_QUERIES])
    return root


def _cmd(results: Path, qs_root: Path) -> tuple[list[str], dict[str, str]]:
    env = dict(os.environ, PYTHONPATH=child_pythonpath(HELPERS, ROOT),
               HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", EDITMETER_TEST_PART_ROWS=str(PART_ROWS))
    # a slowed identity editor and a slowed metric (batches of 2) so kills land inside the edit and the score stage;
    # the killed runs write score parts of PART_ROWS rows (the in-process clean run one part: the split must not
    # matter); basic metrics, small bootstrap
    cmd = [sys.executable, "-m", "benchmark.commands.run", "editor=identity", "queryset=demo", f"queryset.root={qs_root}",
           "profile=tiny", "metrics=basic", f"paths.results={results}", "progress=false", "batch_size=2",
           "aggregate.bootstrap_resamples=200", "editor._target_=slow_editor.SlowIdentity", "+editor.delay_s=0.15",
           "+metrics.slow_l1._target_=slow_metric.SlowL1", f"+metrics.slow_l1.delay_s={SCORE_DELAY_S}"]
    return cmd, env


def _snapshot(results: Path) -> dict[str, bytes]:
    """Everything a user reads: the leaderboards and every edit PNG. `git_sha` is left out of the comparison only
    because a commit made while the test runs would change it between the runs; every other value must match."""
    import pandas as pd

    out = {n: pd.read_csv(results / n, dtype=str, keep_default_na=False).drop(columns="git_sha").to_csv().encode()
           for n in TABLES}
    out |= {f"edits/{p.name}": p.read_bytes() for p in results.glob("runs/*/*/edits/*.png")}
    return out


def _wait_for(cond, proc: subprocess.Popen, timeout: float = 120) -> bool:
    end = time.time() + timeout
    while time.time() < end and proc.poll() is None:
        if cond():
            return True
        time.sleep(0.01)
    return False


def _score_rows(results: Path) -> int:
    """Rows in the score parts on disk (a part is renamed into place whole, so every part found is complete)."""
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(p).metadata.num_rows for p in results.glob("runs/*/*/scores/*/part-*.parquet"))


def kill_at(results: Path, qs_root: Path, stage: str, rng: random.Random) -> str:
    """Start a run, SIGKILL it at a random point of `stage`; returns where the kill landed."""
    cmd, env = _cmd(results, qs_root)
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    edits = lambda: list(results.glob("runs/*/*/edits/*.png"))  # noqa: E731
    if stage == "edit":
        target = rng.randint(len(edits()) + 1, N_QUERIES - 2)
        hit = _wait_for(lambda: len(edits()) >= target, proc)
        time.sleep(rng.uniform(0, 0.2))  # anywhere in the batch that follows: model call, write, log append
    else:
        # The score stage writes its query index first, then a part every PART_ROWS / 2 batches; a rerun scores only
        # what the killed run had not stored. Half the kills land before the first part, half after it; the slowed
        # metric keeps at least 7 (resp. 5) batches x SCORE_DELAY_S of the stage ahead, longer than either sleep.
        first_part = rng.random() < 0.5
        pattern = "runs/*/*/scores/*/" + ("part-*.parquet" if first_part else "queries.json")
        hit = _wait_for(lambda: any(results.glob(pattern)), proc)
        time.sleep(rng.uniform(0, (4 if first_part else 6) * SCORE_DELAY_S))
    landed = "finished before the kill" if proc.poll() is not None else f"{stage} stage" if hit else "timeout"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    if landed == "score stage" and _score_rows(results) == N_QUERIES:  # every row was stored: the stage had ended
        landed = "after the score stage"
    if landed == "edit stage":
        assert not (results / "leaderboard.csv").exists()
    return landed


def finish(results: Path, qs_root: Path) -> None:
    """Rerun to completion; no temp file of a killed run may survive it."""
    cmd, env = _cmd(results, qs_root)
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True)
    leftovers = list(results.rglob("*.tmp"))
    assert not leftovers, f"temp files of the killed run survive the rerun: {leftovers}"


@pytest.fixture(scope="module")
def clean(tmp_path_factory, mini_set):
    """The uninterrupted run (in-process: same config, same code, no interpreter start-up to pay)."""
    from benchmark.commands.run import compose, run_pipeline

    out = tmp_path_factory.mktemp("clean")
    cmd, _ = _cmd(out, mini_set)
    cfg, choices = compose(cmd[3:])
    run_pipeline(cfg, choices["editor"])
    return _snapshot(out)


def _check(results: Path, clean: dict[str, bytes], what: str) -> None:
    got = _snapshot(results)
    assert got.keys() == clean.keys(), f"{what}: different files"
    differ = [k for k in got if got[k] != clean[k]]
    assert not differ, f"{what}: differs from the uninterrupted run: {differ}"


def test_sigkill_in_edit_then_in_score_then_rerun_equals_uninterrupted(tmp_path, mini_set, clean):
    """One chained trial (quick): killed mid-edit, the rerun killed mid-score, the next rerun completes."""
    rng = random.Random(11)
    landed = [kill_at(tmp_path, mini_set, "edit", rng), kill_at(tmp_path, mini_set, "score", rng)]
    assert landed == ["edit stage", "score stage"], landed
    finish(tmp_path, mini_set)
    _check(tmp_path, clean, f"kills at {landed}")


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["edit", "score"])
def test_sigkill_many_random_points(tmp_path, mini_set, clean, stage):
    """EDITMETER_KILL_TRIALS (default 10) independent trials per stage, seeded random kill points."""
    rng = random.Random(7)
    landed = []
    for i in range(int(os.environ.get("EDITMETER_KILL_TRIALS", "10"))):
        results = tmp_path / f"{stage}{i}"
        landed.append(kill_at(results, mini_set, stage, rng))
        finish(results, mini_set)
        _check(results, clean, f"trial {i} ({landed[-1]})")
    print(f"\n{stage}: {len(landed)} trials, all equal to the uninterrupted run; kills landed: {landed}")
    assert landed.count(f"{stage} stage") >= len(landed) // 2
