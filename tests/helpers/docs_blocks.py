"""The command blocks of README.md and docs/*.md that show their output (docs/contributing.md, "Docs that run"):
found, split into commands and the lines each shows, and compared with what the commands print.

A block is a fence whose info string starts with `console`:

    ```console                         run by tests/test_docs_run.py, offline, on the demo results
    ```console slow                    run with --run-slow only (too long for `make test`)
    ```console offline-impossible: R   never run (R: network, GPU, Slurm ...); counted and listed
    ```console fixture: T              run by the test T on its fixture (its results folder), not here

In it, a line `$ command` (continued by a trailing backslash) is a command; the lines up to the next `$ ` line are
what it prints (stdout and stderr together). A command ending in `# exit status N` must exit with N, any other
with 0. In the shown lines, `...` alone on a line stands for any number of lines, `...` inside a line for any text,
and the placeholders of PLACEHOLDERS for what changes from run to run."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

FENCE = re.compile(r"^(?P<indent>\s*)```(?P<info>.*)$")
EXIT = re.compile(r"\s+#\s*exit status (\d+)\s*$")
# what changes from run to run, as the docs write it -> the text it matches
PLACEHOLDERS = {
    "<time>": r"\d+(?:\.\d+)?",                  # seconds, as printed: 0.1, 12.34
    "<n>": r"\d+",                               # a count that depends on the machine or the moment
    "<size>": r"\d+(?:\.\d+)? ?[kMGT]?B",        # 33.0 MB, 77.9 GB
    "<run id>": r"[0-9a-f]{12}",                 # run_id=...
    "<hash>": r"[0-9a-f]{6,64}",                 # a content hash or a signature's hex digits
    "<date>": r"\d{4}-\d\d-\d\d(?:[ T_]\d\d[:-]\d\d[:-]\d\d)?(?: UTC)?",
    "<path>": r"\S+",                            # a file or folder: the test's checkout is a temporary folder
}
ANY_LINES = "..."


@dataclass
class Command:
    command: str
    exit_status: int
    shown: list[str] = field(default_factory=list)


@dataclass
class Block:
    path: Path
    line: int              # 1-based line of the opening fence
    mode: str              # "run", "slow", "offline-impossible" or "fixture"
    reason: str            # offline-impossible: why; fixture: the test that runs it
    commands: list[Command]

    @property
    def name(self) -> str:
        return f"{self.path.name}:{self.line}"


def doc_files(root: Path) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def parse_info(info: str) -> tuple[str, str] | None:
    """('run' | 'slow' | 'offline-impossible', reason) of a fence's info string; None when it is not a console block.
    Any other word after `console` is an error: a typo must not turn a block into one that is never run."""
    info = info.strip()
    if info.split(" ")[0].split(":")[0] != "console":
        return None
    rest = info[len("console"):].strip()
    if not rest:
        return "run", ""
    if rest == "slow":
        return "slow", ""
    for mode in ("offline-impossible", "fixture"):
        if rest.startswith(f"{mode}:") and rest.split(":", 1)[1].strip():
            return mode, rest.split(":", 1)[1].strip()
    raise ValueError(f"console block info {info!r}: expected `console`, `console slow`, "
                     "`console offline-impossible: <reason>` or `console fixture: <test>`")


def parse_body(lines: list[str]) -> list[Command]:
    """The commands of a block's lines (indentation already removed)."""
    commands: list[Command] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("$ "):
            text = line[2:]
            while text.endswith("\\") and i + 1 < len(lines):
                i += 1
                text = text[:-1].rstrip() + " " + lines[i].strip()
            m = EXIT.search(text)
            status = int(m.group(1)) if m else 0
            commands.append(Command((text[: m.start()] if m else text).strip(), status))
        elif commands:
            commands[-1].shown.append(line.rstrip())
        elif line.strip():
            raise ValueError(f"a console block starts with a `$ ` command line, not {line!r}")
        i += 1
    for c in commands:  # blank lines before the next command are spacing, not output
        while c.shown and not c.shown[-1]:
            c.shown.pop()
    return commands


def blocks_of(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, start = len(m.group("indent")), i
        j = i + 1
        while j < len(lines) and not re.match(r"^\s*```\s*$", lines[j]):
            j += 1
        kind = parse_info(m.group("info"))
        if kind is not None:
            body = [ln[indent:] if ln[:indent].strip() == "" else ln for ln in lines[start + 1 : j]]
            try:
                commands = parse_body(body)
            except ValueError as err:
                raise ValueError(f"{path.name}:{start + 1}: {err}") from None
            out.append(Block(path, start + 1, kind[0], kind[1], commands))
        i = j + 1
    return out


def all_blocks(root: Path) -> list[Block]:
    return [b for p in doc_files(root) for b in blocks_of(p)]


def line_pattern(shown: str) -> re.Pattern:
    """One shown line as a regex: `...` any text, PLACEHOLDERS theirs, everything else literal."""
    tokens = re.split("(" + "|".join(re.escape(k) for k in [ANY_LINES, *PLACEHOLDERS]) + ")", shown)
    parts = [".*?" if t == ANY_LINES else PLACEHOLDERS[t] if t in PLACEHOLDERS else re.escape(t) for t in tokens]
    return re.compile("".join(parts) + r"\Z")


def mismatch(shown: list[str], actual: list[str]) -> str | None:
    """None when `actual` (the printed lines) matches `shown` (the doc's), else the first difference. A shown line
    `...` takes any number of lines; every other shown line matches exactly one printed line, in order."""
    actual = [a.rstrip() for a in actual]
    while actual and not actual[-1]:
        actual.pop()
    while actual and not actual[0]:  # blank lines before the first printed one
        actual.pop(0)

    @functools.cache
    def match(i: int, j: int) -> bool:  # shown[i:] against actual[j:]; backtracks only at `...` lines
        while i < len(shown):
            if shown[i].strip() == ANY_LINES:
                return any(match(i + 1, k) for k in range(j, len(actual) + 1))
            if j >= len(actual) or not line_pattern(shown[i]).match(actual[j]):
                return False
            i, j = i + 1, j + 1
        return j == len(actual)

    if match(0, 0):
        return None
    # the first shown line that no printed line matches in order: the one to look at
    j = 0
    for s in shown:
        if s.strip() == ANY_LINES:
            continue
        pat = line_pattern(s)
        hit = next((k for k in range(j, len(actual)) if pat.match(actual[k])), None)
        if hit is None:
            return f"shown line not printed (in this order): {s!r}"
        j = hit + 1
    return "printed lines that the block does not show (add them, or `...` where the docs leave lines out)"
