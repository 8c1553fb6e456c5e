"""Scoring speed on a GPU machine against the targets in docs/hatie.md#targets, in one command.

    python scripts/bench/bench_scoring_targets.py [--device cuda] [--per-type 16] [--load-threads 8] [--out DIR]
    (or: make bench-targets ARGS="--per-type 16")

It runs the timing scripts one after the other, each in its own processes and under its own time limit, and
prints one table: every target, the figure measured, and whether it is met. A step that fails or runs out of time
leaves its figures "not measured" (never a guess) and the next step still runs. The steps:

- `hatie`: scripts/bench/bench_hatie.py, batched and batch size 1 (the release's loop), with Mask R-CNN timed apart;
- `prefetch`: the batched mode again, loading and planning the next chunk while one is scored, on
  `--load-threads` threads;
- `host`: the host-side pipeline alone (`--host-only`), with and without prefetch: the ceiling that the host's cores
  put on any GPU speed;
- `precision`: scripts/bench/bench_suites.py on `hatie_oracle` in fp32, tf32 and bf16;
- `segmenter`: scripts/bench/bench_backbones.py's per-image cost of every backbone by batch size, Mask R-CNN at 1-16 per
  call (printed as it comes, not judged).

Every step's whole output is kept in `--out` (default: a new temporary folder, named at the end). On a CPU
(`--device cpu`) it runs too, for minutes per step at real size; the targets are GPU targets.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
FULL_SET_QUERIES = 49_840  # HATIE's released query set (docs/querysets.md)
# (key, what, target, higher is better): the figures docs/hatie.md#targets sets for one GPU, fp32 unless named
TARGETS = (
    ("qps", "HATIE scoring, batched, fp32: queries/s (segmentation excluded)", 40.0, True),
    ("forward_share", "share of that wall in backbone forward passes", 0.60, True),
    ("batched_over_loop", "batched / the batch-size-1 loop without reuse (the release's way)", 10.0, True),
    ("full_set_minutes", f"the full HATIE set ({FULL_SET_QUERIES:,} queries), scoring + segmentation: minutes", 25.0,
     False),
    ("precision_gain", "fastest reduced precision (tf32 or bf16) / fp32, bench-suites hatie_oracle", 2.0, True),
    ("host_ceiling", "host-side pipeline alone (backbones replayed): queries/s, best of the loading settings", 40.0,
     True),
)
STEPS = ("hatie", "prefetch", "host", "precision", "segmenter")
PRECISIONS = ("fp32", "tf32", "bf16")


@dataclass
class Step:
    """One command of the run and what came of it."""

    name: str
    argv: list[str]
    timeout_s: float
    rc: int | None = None  # None: not run yet; -1: out of time
    stdout: str = ""
    seconds: float = 0.0


def plan(args: argparse.Namespace) -> list[Step]:
    """The commands of the steps asked for, in order."""
    py, common = sys.executable, ["--device", args.device, "--per-type", str(args.per_type)]
    hatie = [py, "scripts/bench/bench_hatie.py", *common]
    fast = ["--modes", "batched", "--no-seg-timing", "--repeat", str(args.repeat)]
    threads = ["--load-threads", str(args.load_threads)]
    t = args.timeout
    steps = {
        "hatie": [Step("hatie", [*hatie, "--modes", "batched,batch1", "--repeat", str(args.repeat)], t)],
        "prefetch": [Step("prefetch", [*hatie, *fast, "--prefetch", *threads], t)],
        "host": [Step("host", [*hatie, "--modes", "batched", "--no-seg-timing", "--host-only", "--repeat",
                               str(args.host_repeat)], t),
                 Step("host prefetch", [*hatie, "--modes", "batched", "--no-seg-timing", "--host-only", "--repeat",
                                        str(args.host_repeat), "--prefetch", *threads], t)],
        "precision": [Step(f"precision {p}", [py, "scripts/bench/bench_suites.py", "--metrics", "hatie_oracle", *common,
                                              "--precision", p, "--repeat", str(args.repeat), "--json"], t)
                      for p in PRECISIONS if p != "tf32" or args.device.startswith("cuda")],
        "segmenter": [Step("segmenter", [py, "scripts/bench/bench_backbones.py", "--device", args.device, "--seg-images",
                                         "32", "--seg-batch-sizes", "1", "4", "8", "16"], t)],
    }
    return [s for name in args.steps for s in steps[name]]


def run_step(step: Step, log_dir: Path) -> None:
    """Run `step` from the repository root, keeping its whole output in `log_dir`."""
    t0 = time.perf_counter()
    # a session of its own: the timing scripts start worker processes, and one left running past its step's time
    # limit would hold the GPU (and skew the next step's timings), so a step out of time ends with all of them
    proc = subprocess.Popen(step.argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        step.stdout, err = proc.communicate(timeout=step.timeout_s)
        step.rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        step.rc, step.stdout = -1, out
        err += f"\nout of time after {step.timeout_s:.0f} s"
    step.seconds = time.perf_counter() - t0
    stem = step.name.replace(" ", "_")
    (log_dir / f"{stem}.out").write_text(step.stdout)
    (log_dir / f"{stem}.err").write_text(err)


def _json_line(step: Step | None) -> dict | None:
    """The `JSON {...}` line a timing script prints last, from a step that ended well; None otherwise."""
    if step is None or step.rc != 0:
        return None
    lines = [ln for ln in step.stdout.splitlines() if ln.startswith("JSON ")]
    return json.loads(lines[-1][5:]) if lines else None


def figures(steps: Sequence[Step]) -> dict[str, Any]:
    """The figures the targets judge (None where the step that gives one did not end well), plus what they came
    from (the `*_from` keys)."""
    by = {s.name: s for s in steps}
    out: dict[str, Any] = dict.fromkeys(k for k, *_ in TARGETS)
    plain, ahead = _json_line(by.get("hatie")), _json_line(by.get("prefetch"))
    runs = {label: r["scoring"]["batched"] for label, r in (("no prefetch", plain), ("prefetch", ahead))
            if r is not None and "batched" in r["scoring"]}
    if runs:
        label, best = max(runs.items(), key=lambda kv: kv[1]["queries_per_s"])
        out["qps"], out["forward_share"] = best["queries_per_s"], best["forward_share"]
        out["qps_from"] = out["forward_share_from"] = label
    if plain is not None and {"batched", "batch1"} <= plain["scoring"].keys():
        loop = plain["scoring"]["batch1"]["queries_per_s"]
        out["batched_over_loop"] = plain["scoring"]["batched"]["queries_per_s"] / loop
        seg = plain["segmentation"].get("batched")
        if seg and seg["segmented_images"] and out["qps"]:
            per_image = seg["segmentation_s"] / seg["segmented_images"]
            out["full_set_minutes"] = FULL_SET_QUERIES * (1 / out["qps"] + per_image) / 60
    walls = {}
    for p in PRECISIONS:
        r = _json_line(by.get(f"precision {p}"))
        suite = (r or {}).get("sets", {}).get("hatie_oracle", {}).get("suites", {}).get("hatie")
        if suite:
            walls[p] = suite["wall_s"]
    reduced = {p: w for p, w in walls.items() if p != "fp32"}
    if "fp32" in walls and reduced:
        p, w = min(reduced.items(), key=lambda kv: kv[1])
        out["precision_gain"], out["precision_gain_from"] = walls["fp32"] / w, p
    hosts = {label: r["scoring"]["batched"]["queries_per_s"] for label in ("host", "host prefetch")
             if (r := _json_line(by.get(label))) is not None and "batched" in r["scoring"]}
    if hosts:
        label, q = max(hosts.items(), key=lambda kv: kv[1])
        out["host_ceiling"], out["host_ceiling_from"] = q, label
    return out


def table(fig: dict[str, Any]) -> str:
    """The targets, the figures measured and the verdicts, as a Markdown table."""
    rows = ["| figure | target | measured | met |", "|---|---|---|---|"]
    for key, what, target, higher in TARGETS:
        v = fig.get(key)
        pct = key == "forward_share"
        show: Callable[[float], str] = (lambda x: f"{100 * x:.0f}%") if pct else (
            lambda x: f"{x:.3g}" if abs(x) < 1000 else f"{x:,.0f}")
        goal = f"{'>=' if higher else '<='} {show(target)}"
        source = fig.get(f"{key}_from")
        measured = "not measured" if v is None else show(v) + (f" ({source})" if source else "")
        met = "-" if v is None else "yes" if (v >= target if higher else v <= target) else "no"
        rows.append(f"| {what} | {goal} | {measured} | {met} |")
    return "\n".join(rows)


def parse(argv: Sequence[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--per-type", type=int, default=16, help="demo queries per edit type (16: all 112)")
    ap.add_argument("--repeat", type=int, default=2, help="timed passes per real run (the fastest is kept)")
    ap.add_argument("--host-repeat", type=int, default=10, help="timed passes per host-only run")
    ap.add_argument("--load-threads", type=int, default=8, help="loader threads of the prefetching runs")
    ap.add_argument("--timeout", type=float, default=300, help="seconds each command may run")
    ap.add_argument("--steps", default=",".join(STEPS), help=f"comma-separated, of: {', '.join(STEPS)}")
    ap.add_argument("--out", type=Path, default=None, help="folder for every command's output (default: a new one)")
    args = ap.parse_args(argv)
    args.steps = [s.strip() for s in args.steps.split(",") if s.strip()]
    unknown = [s for s in args.steps if s not in STEPS]
    if unknown or not args.steps:
        ap.error(f"--steps: unknown {', '.join(map(repr, unknown)) or 'empty list'}; choose from {', '.join(STEPS)}")
    return args


def main(argv: Sequence[str] | None = None, runner: Callable[[Step, Path], None] = run_step) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.device.startswith("cuda") and runner is run_step:  # (a test's runner runs nothing)
        import torch

        if not torch.cuda.is_available():
            print(f"--device {args.device}: no CUDA device here; these are GPU targets (--device cpu runs the same "
                  "steps on the CPU, for minutes each)")
            return 2
    log_dir = args.out or Path(tempfile.mkdtemp(prefix="scoring-targets-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    steps = plan(args)
    for step in steps:
        print(f"[{step.name}] {' '.join(step.argv[1:])}", flush=True)
        runner(step, log_dir)
        status = "ok" if step.rc == 0 else "OUT OF TIME" if step.rc == -1 else f"FAILED (exit {step.rc})"
        print(f"[{step.name}] {status}, {step.seconds:.0f} s", flush=True)
        if step.name == "segmenter" and step.rc == 0:
            print(step.stdout.rstrip())
    fig = figures(steps)
    print("\n" + table(fig))
    (log_dir / "figures.json").write_text(json.dumps(fig, indent=1))
    print(f"\nevery command's output: {log_dir}")
    return 0 if all(s.rc == 0 for s in steps) else 1


if __name__ == "__main__":
    sys.exit(main())
