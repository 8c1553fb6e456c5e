"""README.md's commands, as a new user meets them: every command it shows is a real target, script or subcommand
with its required options; and its offline commands run in order, on a copy of the checkout with a fresh results
folder, as documented (the README cannot drift from the code again)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# ALLCAPS placeholders (DIR, LABEL, COL, N), `...` and the `a,b` of a list option: not runnable as written
PLACEHOLDER = re.compile(r"\b[A-Z][A-Z_]*\b|\.\.\.|<[^>]+>|\ba,b\b")

# Every README command that is not run offline, with the reason; a command added to the README must be run by the
# test below or listed here, and a listed one must still be in the README.
NOT_RUN = {
    "make install": "creates .venv from PyPI (network; with TORCH_SPEC=... too)",
    "make test": "the whole test suite",
    "make lint": "ruff over the tree, run by CI",
    ".ci/run": "CI: reinstalls from PyPI",
    "editmeter launch --workers 8 --launcher local --gpus 8 editor=... queryset=...": "shards over 8 GPUs "
    "(tests/test_scale.py runs the launcher on CPU workers)",
    "editmeter metaeval gt-selection ...": "minutes per metric set (tests/test_metaeval.py)",
    "editmeter data <set>": "a download (network)",
    "editmeter data build <set> ...": "needs a downloaded release (tests/test_data_build.py runs the command; the "
    "importer tests run each builder)",
    "editmeter weights --list editor=... metrics=...": "placeholders; `make weights` below is tried offline",
    "editmeter arena queryset=demo_mini": "needs a judge server and the fetched prompt; `make demo-arena` above runs it "
    "against a stand-in judge",
    "editmeter remove RUN --yes": "deletes a run: tests/test_compare.py removes one from a results folder of its own",
}
# Online commands: offline they must fail fast, with a one-line error and no traceback
ONLINE = ("make data NAME=", "make weights ", "make bench ")
# Reductions, so the run stays short: the demo with one tiny diffusion editor instead of seven (the README names
# DIFFUSION_EDITORS=sdedit as the shorter demo), and a run of the whole demo set on its first two queries
SHORTER = {"make demo": "make demo DIFFUSION_EDITORS=sdedit",
           "editmeter run editor=ip2p queryset=demo profile=tiny": "editmeter run editor=ip2p queryset=demo "
           "profile=tiny limit=2 metrics=basic"}


def _expand(synopsis: str) -> str:
    """A command of the README's command table as it runs: each optional `[...]` kept with its first alternative
    unless it holds a placeholder, `\\|` alternatives reduced to the first."""
    def opt(m: re.Match) -> str:
        inner = m.group(1).split("\\|")[0].split("|")[0]
        return "" if PLACEHOLDER.search(inner) else inner
    out = re.sub(r"\[([^\[\]]*)\]", opt, synopsis)
    out = re.sub(r"\\\|[\w-]+", "", out)  # `a\|b` outside brackets: the first alternative
    return " ".join(out.split())


def _not_run(cmd: str) -> bool:
    return cmd in NOT_RUN or cmd.startswith("make install ")


def readme_commands(text: str | None = None) -> list[str]:
    """Every command README.md shows, in order: each line of its ```sh blocks (comments dropped) and the first
    column of its `editmeter` command table (expanded)."""
    text = README.read_text(encoding="utf-8") if text is None else text
    out: list[str] = []
    in_sh = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_sh = line.strip() == "```sh" and not in_sh
            continue
        if in_sh:
            cmd = line.split(" #")[0].strip()
            if cmd:
                out.append(cmd)
        elif line.startswith("| `editmeter "):
            out.append(_expand(line.split("`")[1]))
    return out


def _required_options(script: Path) -> list[str]:
    """The `--options` a script's argparse marks required=True (read from its source, nothing imported)."""
    src = script.read_text(encoding="utf-8")
    return re.findall(r"add_argument\(\s*\"(--[\w-]+)\"[^)]*required=True", src)


def test_every_command_of_the_readme_is_run_or_listed_with_a_reason():
    cmds = readme_commands()
    assert "make demo" in cmds and any(c.startswith("editmeter show") for c in cmds)
    runnable = [c for c in cmds if not _not_run(c) and not c.startswith(ONLINE)]
    unrunnable = [c for c in runnable if PLACEHOLDER.search(c) and not c.startswith("editmeter score")]
    assert not unrunnable, f"placeholders in README commands the test would run: {unrunnable}"
    assert not [c for c in NOT_RUN if c not in cmds], "NOT_RUN lists commands the README no longer shows"


def test_make_targets_scripts_and_subcommands_the_readme_names_exist():
    text = README.read_text(encoding="utf-8")
    targets = set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(encoding="utf-8"), flags=re.M))
    named = set(re.findall(r"`make ([a-z][\w-]*)", text))
    assert named and named <= targets, f"README names Make targets the Makefile lacks: {sorted(named - targets)}"
    from benchmark.commands.cli import COMMANDS

    subs = set(re.findall(r"`editmeter ([a-z][\w-]*)", text))
    assert subs and subs <= set(COMMANDS), f"unknown editmeter subcommands: {sorted(subs - set(COMMANDS))}"
    missing = []
    for script, args in re.findall(r"`(?:python )?(scripts/[\w./]+\.py)([^`]*)`", text):
        path = ROOT / script
        if not path.is_file():
            missing.append(f"{script}: no such script")
            continue
        missing += [f"{script}: README omits its required {o}" for o in _required_options(path) if o not in args]
    assert not missing, missing


def test_placeholder_expansion_by_hand():
    assert _expand("editmeter show [--queryset demo_mini] [--by type\\|class] [--sort COL] [--columns a,b]") == \
        "editmeter show --queryset demo_mini --by type"
    assert _expand("editmeter report [--results DIR] [--out DIR]") == "editmeter report"
    assert _expand("editmeter metaeval gt-selection\\|2afc\\|fit-weights ...") == "editmeter metaeval gt-selection ..."
    assert readme_commands("x\n```sh\nmake demo   # comment\n```\n| `editmeter gpu-check` | y |\n```\nmake no\n```") \
        == ["make demo", "editmeter gpu-check"]


def _copy_checkout(dest: Path) -> None:
    """The checkout's files as a fresh clone has them (tracked and new, not ignored: no results, no .venv), with the
    virtualenv linked in as `make install` would have made it."""
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split("\0")
    for rel in filter(None, files):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    (dest / ".venv").symlink_to(sys.prefix)  # the test's own virtualenv


@pytest.mark.timeout(1800)  # about 3 min of CPU (the demo with one diffusion editor, HATIE on tiny models); run by
# `make test` on purpose: the first page must not drift from the code
def test_readme_offline_commands_run_in_order_on_a_fresh_results_folder(tmp_path):
    clone = tmp_path / "editmeter"
    _copy_checkout(clone)
    # as a user types them, not with the settings of a `make test ARGS=...` around this test: make exports its
    # command-line variables, and the README's `make demo` would read ARGS (any `?=` variable) from them
    settable = set(re.findall(r"^(\w+)\s*\?=", (ROOT / "Makefile").read_text(encoding="utf-8"), flags=re.M))
    inherited = {k: v for k, v in os.environ.items()
                 if k not in settable and k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}
    env = {**inherited, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(clone), "OMP_NUM_THREADS": "1",
           "PATH": f"{clone / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}",
           "EDITMETER_CACHE": os.environ.get("EDITMETER_CACHE", str(ROOT / ".cache"))}  # the tiny models, built once
    import torch

    cuda = torch.cuda.is_available()
    ran = []
    for cmd in readme_commands():
        if _not_run(cmd) or cmd.startswith(". .venv/bin/activate"):  # activation: PATH above
            continue
        if cmd == "editmeter gpu-check" and cuda:  # without CUDA it is one line; with it, the whole self-check
            continue
        online = cmd.startswith(ONLINE)
        line = SHORTER.get(cmd, cmd)
        if line.startswith("editmeter score"):  # the identity editor's demo edits, scored as edits made elsewhere
            edits = next((clone / "results" / "runs").glob("demo_mini-*/identity-*/edits"))
            line = (line.replace("DIR", str(edits)).replace("LABEL", "their-model")
                    .replace("queryset=...", "queryset=demo_mini profile=tiny metrics=basic"))
        proc = subprocess.run(line, shell=True, cwd=clone, env=env, capture_output=True, text=True, timeout=900)
        out = proc.stdout + proc.stderr
        if online:  # offline these fail fast and say why in a line, never with a traceback
            assert proc.returncode != 0 and "Traceback" not in out, f"{line}\n{out[-3000:]}"
        else:
            assert proc.returncode == 0, f"`{line}` exited {proc.returncode}:\n{out[-3000:]}"
        ran.append(line)
    assert (clone / "results" / "report" / "index.html").is_file()
    assert any(c.startswith("editmeter compare") for c in ran) and "make report" in ran
