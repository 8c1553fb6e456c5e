"""scripts/bench/bench_scoring_targets.py: the figures it judges come from the timing scripts' JSON lines, a step that
fails or runs out of time is "not measured" (never a number), and the verdicts compare with the right sense."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load():
    spec = importlib.util.spec_from_file_location("bench_scoring_targets", ROOT / "scripts/bench/bench_scoring_targets.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


T = _load()


def _hatie(qps: float, share: float, loop: float | None = None, seg: tuple[float, int] | None = None) -> str:
    scoring = {"batched": {"queries_per_s": qps, "forward_share": share}}
    if loop is not None:
        scoring["batch1"] = {"queries_per_s": loop, "forward_share": 0.7}
    segmentation = {} if seg is None else {"batched": {"segmentation_s": seg[0], "segmented_images": seg[1]}}
    return "== batched ...\nJSON " + json.dumps({"scoring": scoring, "segmentation": segmentation}) + "\n"


def _suites(wall: float) -> str:
    sets = {"hatie_oracle": {"metric_set": "hatie_oracle", "suites": {"hatie": {"wall_s": wall, "n": 14}}}}
    return "bench-suites ...\nJSON " + json.dumps({"device": "cuda", "precision": "x", "sets": sets}) + "\n"


CANNED = {
    "hatie": (0, _hatie(20.0, 0.5, loop=5.0, seg=(1.4, 100))),
    "prefetch": (0, _hatie(30.0, 0.65)),
    "host": (0, _hatie(35.0, 0.0)),
    "host prefetch": (0, _hatie(45.0, 0.0)),
    "precision fp32": (0, _suites(10.0)),
    "precision tf32": (0, _suites(5.0)),
    "precision bf16": (0, _suites(6.0)),
    "segmenter": (0, "Mask R-CNN R50-FPN v2 (512 px)  b1 25.0  b4 14.0\n"),
}


def _runner(canned: dict[str, tuple[int, str]], seen: list[str]):
    def run(step, log_dir: Path) -> None:
        seen.append(step.name)
        step.rc, step.stdout = canned[step.name]
    return run


def test_every_target_is_judged_from_the_scripts_json_lines(tmp_path, capsys):
    seen: list[str] = []
    rc = T.main(["--device", "cuda", "--out", str(tmp_path)], runner=_runner(CANNED, seen))
    assert rc == 0
    assert seen == list(CANNED)  # every step, in order, tf32 included on CUDA
    fig = json.loads((tmp_path / "figures.json").read_text())
    assert fig["qps"] == 30.0 and fig["qps_from"] == "prefetch"  # the faster of the two loading settings...
    assert fig["forward_share"] == 0.65  # ...and the forward share of that same run
    assert fig["batched_over_loop"] == pytest.approx(20.0 / 5.0)  # both modes of one process's run
    assert fig["full_set_minutes"] == pytest.approx(49_840 * (1 / 30.0 + 1.4 / 100) / 60)
    assert fig["precision_gain"] == pytest.approx(2.0) and fig["precision_gain_from"] == "tf32"
    assert fig["host_ceiling"] == 45.0 and fig["host_ceiling_from"] == "host prefetch"
    out = capsys.readouterr().out
    rows = {line.split(" | ")[0].strip("| "): line for line in out.splitlines() if line.startswith("| ")}
    assert rows[T.TARGETS[0][1]].endswith("| >= 40 | 30 (prefetch) | no |")
    assert rows[T.TARGETS[1][1]].endswith("| >= 60% | 65% (prefetch) | yes |")
    assert rows[T.TARGETS[3][1]].endswith("| no |")  # 49,840 x 47 ms = 39 min, above 25: lower is better
    assert rows[T.TARGETS[4][1]].endswith("| >= 2 | 2 (tf32) | yes |")  # met at equality
    assert "b4 14.0" in out  # the segmenter's table is printed as it came


def test_a_failed_or_timed_out_step_leaves_its_figures_not_measured(tmp_path, capsys):
    canned = dict(CANNED)
    canned["prefetch"] = (1, _hatie(99.0, 0.9) + "Traceback ...\n")  # figures printed, then it failed: not trusted
    canned["precision fp32"] = (-1, "")  # out of time
    canned["hatie"] = (0, "no JSON line at all\n")  # ended well but said nothing usable
    rc = T.main(["--out", str(tmp_path)], runner=_runner(canned, []))
    assert rc == 1
    fig = json.loads((tmp_path / "figures.json").read_text())
    assert fig["qps"] is None and fig["forward_share"] is None and fig["batched_over_loop"] is None
    assert fig["full_set_minutes"] is None and fig["precision_gain"] is None
    assert fig["host_ceiling"] == 45.0  # the steps that ended well still count
    out = capsys.readouterr().out
    assert "[prefetch] FAILED (exit 1)" in out and "[precision fp32] OUT OF TIME" in out
    assert out.count("| not measured | - |") == 5


def test_steps_are_checked_and_tf32_is_left_out_off_cuda(tmp_path):
    with pytest.raises(SystemExit):
        T.parse(["--steps", "hatie,prefetc"])
    seen: list[str] = []
    T.main(["--device", "cpu", "--steps", "precision", "--out", str(tmp_path)], runner=_runner(CANNED, seen))
    assert seen == ["precision fp32", "precision bf16"]  # tf32 is a CUDA mode


def test_bench_suites_json_line_gives_the_precision_step_its_wall(tmp_path):
    """The contract with scripts/bench/bench_suites.py, through a real (tiny-model) run of it."""
    proc = subprocess.run([sys.executable, "scripts/bench/bench_suites.py", "--metrics", "hatie_oracle", "--profile", "tiny",
                           "--per-type", "1", "--repeat", "1", "--json"], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, check=True)
    steps = [T.Step("precision fp32", [], 0, rc=0, stdout=proc.stdout),
             T.Step("precision bf16", [], 0, rc=0, stdout=proc.stdout)]
    fig = T.figures(steps)
    assert fig["precision_gain"] == pytest.approx(1.0)  # the same run's wall on both sides
    wall = json.loads(proc.stdout.splitlines()[-1][5:])["sets"]["hatie_oracle"]["suites"]["hatie"]["wall_s"]
    assert wall > 0


def _alive(pid: int) -> bool:
    """Running (a killed process whose parent died too may linger as a zombie until it is reaped: not running)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc")
def test_a_step_out_of_time_ends_with_the_workers_it_started(tmp_path):
    """The timing scripts start worker processes; one left running would hold the GPU during the next step."""
    parent = ("import subprocess, sys, time\n"
              "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
              "print(p.pid, flush=True)\n"
              "time.sleep(120)\n")
    step = T.Step("slow", [sys.executable, "-c", parent], timeout_s=3)
    T.run_step(step, tmp_path)
    assert step.rc == -1 and step.seconds < 60
    worker = int(step.stdout.split()[0])
    deadline = time.monotonic() + 10
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(worker)
    assert "out of time after 3 s" in (tmp_path / "slow.err").read_text()
