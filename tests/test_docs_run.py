"""Docs that run (issue 58): every command block of README.md and docs/*.md that shows its output (a ```console
block, docs/contributing.md) runs here, offline, in a copy of the checkout whose results folder holds the demo's
runs (identity, oracle and overedit on demo_mini with metrics=basic: the first step of `make demo`, without its
diffusion editors, made once per session; a block that needs more makes it with commands of its own). Each block
starts from those results; its commands must exit as shown and print the shown lines (placeholders for run ids,
times and paths). Blocks marked `console slow` run with --run-slow only; blocks marked `console offline-impossible:`
(network, GPU, Slurm) never run and are counted and listed at the end of the test session."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT
from docs_blocks import Block, all_blocks, blocks_of, line_pattern, mismatch

BLOCKS = all_blocks(ROOT)
# the demo's runs the blocks share: `make demo`'s first step without its diffusion editors (the HATIE and EditVal
# steps take a minute more, and no block reads them yet: add them here when one does)
DEMO = ["editmeter run --multirun editor=identity,oracle,overedit queryset=demo_mini profile=tiny metrics=basic"]
TIMEOUT_S = 300
SETUP_S: list[float] = []  # the session fixture's seconds (the checkout copy and the demo runs), for the summary


def _copy_checkout(dest: Path) -> None:
    """The checkout's files as a fresh clone has them (tracked and new, not ignored: no results, no .venv)."""
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split("\0")
    for rel in filter(None, files):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def _env(clone: Path, empty: Path) -> dict[str, str]:
    """Offline, one torch thread, the checkout's tiny models, and empty weight caches: a block that needs a real
    checkpoint shows the message a user without it gets."""
    bin_dir = Path(sys.executable).parent  # this test's virtualenv: `editmeter`, `python`
    return {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(clone),
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "HF_HOME": str(empty / "hf"),
            "HF_HUB_CACHE": str(empty / "hf" / "hub"), "TORCH_HOME": str(empty / "torch"),
            "EDITMETER_CACHE": os.environ.get("EDITMETER_CACHE", str(ROOT / ".cache")), "COLUMNS": "120",
            "PYTHONUNBUFFERED": "1"}  # stdout and stderr in the order they were written


def _run(cmd: str, clone: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", cmd], cwd=clone, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=TIMEOUT_S)


@pytest.fixture(scope="session")
def docs_checkout(tmp_path_factory):
    """(a copy of the checkout, its environment, the demo's results folder kept apart): made once per session."""
    start = time.monotonic()
    root = tmp_path_factory.mktemp("docs")
    clone, empty = root / "editmeter", root / "empty"
    _copy_checkout(clone)
    env = _env(clone, empty)
    for cmd in DEMO:
        out = _run(cmd, clone, env)
        assert out.returncode == 0, f"{cmd}\n{out.stdout[-3000:]}"
    demo = root / "demo-results"
    shutil.copytree(clone / "results", demo)
    SETUP_S.append(time.monotonic() - start)
    return clone, env, demo


def _check(block: Block, clone: Path, env: dict[str, str], demo: Path) -> None:
    shutil.rmtree(clone / "results", ignore_errors=True)
    shutil.copytree(demo, clone / "results")  # every block starts from the demo's results
    for c in block.commands:
        out = _run(c.command, clone, env)
        where = f"{block.name}: `{c.command}`"
        assert out.returncode == c.exit_status, (f"{where} exited {out.returncode}, the docs show "
                                                 f"{c.exit_status}:\n{out.stdout[-4000:]}")
        diff = mismatch(c.shown, out.stdout.splitlines())
        assert diff is None, f"{where}: {diff}\n--- printed:\n{out.stdout[-6000:]}"


def _params(mode: str) -> list:
    marks = [pytest.mark.slow] if mode == "slow" else []
    return [pytest.param(b, id=b.name, marks=marks) for b in BLOCKS if b.mode == mode]


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("block", _params("run") + _params("slow"))
def test_a_docs_block_prints_what_it_shows(block, docs_checkout):
    _check(block, *docs_checkout)


def test_every_block_is_counted_and_the_offline_impossible_ones_say_why():
    """The docs hold runnable blocks, and each block that is never run says why in its fence."""
    runnable = [b for b in BLOCKS if b.mode in ("run", "slow")]
    assert len(runnable) >= 10 and all(b.commands for b in BLOCKS)
    assert all(b.reason for b in BLOCKS if b.mode == "offline-impossible")
    # a fixture block names the test that runs it, and that test reads the block
    for b in (b for b in BLOCKS if b.mode == "fixture"):
        test_file, _, test_name = b.reason.partition("::")
        source = (ROOT / test_file).read_text(encoding="utf-8")
        assert f"def {test_name}(" in source and b.path.name in source, b.name
    assert {b.path.name for b in runnable} >= {"cli.md", "running.md", "compare.md"}


# -- the collector itself: shown lines, placeholders, exit status; a changed output fails ------------------------

def test_blocks_are_parsed_with_commands_exit_status_and_shown_lines(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("text\n```sh\nnot a block\n```\n- item\n\n  ```console\n  $ editmeter run \\\n      limt=3   "
                   "# exit status 2\n  error: unknown key 'limt'\n\n  $ echo hi\n  hi\n  ```\n"
                   "```console offline-impossible: a GPU\n$ make gpu-check\n```\n", encoding="utf-8")
    a, b = blocks_of(doc)
    assert (a.line, a.mode, b.mode, b.reason) == (7, "run", "offline-impossible", "a GPU")
    assert [(c.command, c.exit_status, c.shown) for c in a.commands] == [
        ("editmeter run limt=3", 2, ["error: unknown key 'limt'"]), ("echo hi", 0, ["hi"])]
    doc.write_text("```console slw\n$ true\n```\n", encoding="utf-8")
    with pytest.raises(ValueError, match="expected `console`, `console slow`, `console offline-impossible"):
        blocks_of(doc)


def test_shown_lines_match_with_placeholders_and_any_changed_line_fails():
    printed = ["[editmeter] preflight ok in 0.13 s: 14 queries, disk: need ~4.1 MB, 77.9 GB free",
               "run_id=0123456789ab in /tmp/pytest-of-x/results/runs", "l1_out  0.180±0.013", "done"]
    shown = ["[editmeter] preflight ok in <time> s: 14 queries, disk: need ~4.1 MB, <size> free",
             "run_id=<run id> in <path>", "...", "done"]
    assert mismatch(shown, printed) is None
    assert mismatch([*shown[:2], "l1_out  0.180±0.013", "done"], printed) is None
    # a mutation of any shown line, a missing line or an extra printed one fails
    for i, line in enumerate(printed):
        mutated = printed.copy()
        mutated[i] = line.replace("14", "15").replace("0.180", "0.181").replace("done", "dome").replace("ab", "zz")
        assert mismatch([*shown[:2], "l1_out  0.180±0.013", "done"], mutated) is not None, i
    assert "not printed" in mismatch(["done", "[editmeter]"], printed + ["extra"])
    assert mismatch(shown[:2], printed) is not None  # the rest printed but not shown, and no `...`
    assert line_pattern("cost <n> s (...)").match("cost 12 s (anything at all)")
    assert not line_pattern("<hash>").match("not-hex")


def test_a_changed_output_fails_the_block(tmp_path):
    """The block runner on a block whose shown line differs from what its command prints by one character."""
    env = {**os.environ, "PATH": os.environ["PATH"]}
    doc = tmp_path / "d.md"
    demo = tmp_path / "demo"
    demo.mkdir()
    doc.write_text("```console\n$ printf 'a 1\\nb 2\\n'\na 1\nb 2\n$ exit 3   # exit status 3\n```\n", encoding="utf-8")
    (block,) = blocks_of(doc)
    _check(block, tmp_path, env, demo)
    doc.write_text("```console\n$ printf 'a 1\\nb 2\\n'\na 1\nb 3\n```\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="shown line not printed"):
        _check(blocks_of(doc)[0], tmp_path, env, demo)
    doc.write_text("```console\n$ exit 3\n```\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="exited 3, the docs show 0"):
        _check(blocks_of(doc)[0], tmp_path, env, demo)


def summary_lines(root: Path = ROOT) -> list[str]:
    """The session's closing lines (tests/conftest.py prints them): blocks run, slow-only, offline-impossible."""
    blocks = all_blocks(root)
    off = [b for b in blocks if b.mode == "offline-impossible"]
    lines = [f"docs blocks: {sum(b.mode == 'run' for b in blocks)} run, {sum(b.mode == 'slow' for b in blocks)} "
             f"slow-only (--run-slow), {sum(b.mode == 'fixture' for b in blocks)} run by another test on its fixture, "
             f"{len(off)} offline-impossible (not run):"]
    return lines + [f"  {b.name}: {b.reason}" for b in off]
