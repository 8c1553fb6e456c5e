"""GenArena's battle protocol (ruihanglix/genarena, read at v0.1.2 = commit 76a5345; docs/arena.md).

A battle is two judge calls on one query: the two edits as A then B, then as B then A. Each reply is parsed as the
prompt module's `parse_response` reads it (`parse_reply`), its position verdict turned into a side (`to_side`),
and the two sides combined (`combine`): the same side twice is a win (consistent); two ties are a tie (consistent,
possible only with a prompt that allows ties); anything else, a failed or unparsable call included, is a tie marked
inconsistent. GenArena counts a failed call as such a tie; editmeter does the same by default, counts the failed
calls apart (`Verdict.failed_calls`), and can drop those battles instead (`drop_failed`).

The prompt is the authors' module (genarena/prompts/mmrb2.py, Apache-2.0), not ours to ship: `make data NAME=genarena`
fetches it at a pinned commit, checked by its sha256 (`read_prompt`), and it is read with `ast` as data, never
imported: its `PROMPT_TEXT`, its `ALLOW_TIE` and the four section labels its `build_prompt` sends between the text
and the images, in order (`ArenaPrompt.request` lays one call out as `build_prompt` does).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.io.pinned_prompts import ProtocolError, check_identity, read_pinned, string_assignments

REPO = "ruihanglix/genarena"
REPO_PATH = "genarena/prompts/mmrb2.py"
DATA_NAME = "genarena"
PARSER_VERSION = "genarena-0.1.2-mmrb2"  # the parse and combination rules below, as of that release
MODEL_A, MODEL_B, TIE = "model_a", "model_b", "tie"
# a label of build_prompt: a short bracketed section name ending in a colon
_LABEL = re.compile(r"\[[^\[\]\n]{1,60}:\]")
_FENCE_HEAD = re.compile(r"^```(?:json)?\s*\n?")
_FENCE_TAIL = re.compile(r"\n?```\s*$")


@dataclass(frozen=True)
class ArenaPrompt:
    """The pinned prompt module's data: the prompt text, whether one call may answer a tie, and the labels of the
    instruction, the input image(s), response A and response B."""

    text: str
    allow_tie: bool
    labels: tuple[str, str, str, str]
    sha256: str

    def request(self, instruction: str, n_inputs: int) -> tuple[str | int, ...]:
        """One call's user turn as `build_prompt` lays it out: text parts (str) and images (int: the index in the
        request's image list [inputs..., A, B]): the prompt text, the instruction's label, the instruction, then
        (with input images) their label and the inputs, then A's label and A, B's label and B."""
        head: list[str | int] = [self.text, self.labels[0], instruction]
        if n_inputs:
            head += [self.labels[1], *range(n_inputs)]
        return (*head, self.labels[2], n_inputs, self.labels[3], n_inputs + 1)


def _constant(tree: ast.Module, name: str) -> Any:
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == name and isinstance(node.value, ast.Constant)):
            return node.value.value
    return None


def _labels(tree: ast.Module, path: Path) -> tuple[str, str, str, str]:
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "build_prompt"), None)
    found = [] if fn is None else [n.value for n in ast.walk(fn) if isinstance(n, ast.Constant)
                                   and isinstance(n.value, str) and _LABEL.fullmatch(n.value)]
    # ast.walk is breadth-first: order the labels by their place in the source
    if fn is not None:
        pos = {n.value: (n.lineno, n.col_offset) for n in ast.walk(fn) if isinstance(n, ast.Constant)
               and isinstance(n.value, str) and _LABEL.fullmatch(n.value)}
        found = sorted(dict.fromkeys(found), key=pos.__getitem__)
    if len(found) != 4:
        raise ProtocolError(f"{path}: expected build_prompt to send four section labels (instruction, input image, "
                            f"response A, response B), found {found}; is this {REPO_PATH} of {REPO}?")
    return found[0], found[1], found[2], found[3]


def read_prompt(path: str | Path, sha256: str, commit: str) -> ArenaPrompt:
    """The pinned prompt module at `path`, checked (`read_pinned`) and read as data."""
    raw = read_pinned(path, sha256, commit, benchmark="the arena (GenArena)", repo=REPO, repo_path=REPO_PATH,
                      data_name=DATA_NAME, option="arena.prompts_file")
    strings = string_assignments(raw, path)
    if "PROMPT_TEXT" not in strings:
        raise ProtocolError(f"{path}: no string assignment of PROMPT_TEXT ({REPO_PATH} of {REPO})")
    tree = ast.parse(raw.decode("utf-8"), filename=str(path))
    allow_tie = _constant(tree, "ALLOW_TIE")
    if not isinstance(allow_tie, bool):
        raise ProtocolError(f"{path}: ALLOW_TIE must be assigned True or False ({REPO_PATH} of {REPO})")
    return ArenaPrompt(strings["PROMPT_TEXT"], allow_tie, _labels(tree, Path(path)), sha256)


def check_prompt_identity(commit: str, sha256: str) -> None:
    check_identity(commit, sha256, REPO)


class ReplyError(ValueError):
    """A reply the prompt module's parser refuses (GenArena: `parse_success` False, a tie)."""


def parse_reply(reply: str) -> str:
    """The position verdict ("A" or "B") of one reply, read as the pinned module's `parse_response` reads it, with
    its quirks: code fences stripped, the JSON repaired by json_repair, `better_response` upper-cased and stripped,
    and when it is neither "A" nor "B", "A" if it contains an A, else "B" if it contains a B (so "BOTH" reads B);
    `score` and `confidence` must convert (a string through int / float) and compare with numbers, or the reply is
    refused. Raises `ReplyError` where that parser raises."""
    import json_repair

    text = _FENCE_TAIL.sub("", _FENCE_HEAD.sub("", reply.strip()))
    try:
        parsed = json_repair.loads(text)
    except Exception as err:  # json_repair's own failures: any type
        raise ReplyError(f"not JSON, even repaired: {err}") from None
    if not isinstance(parsed, dict):
        raise ReplyError(f"the reply is a JSON {type(parsed).__name__}, not an object")
    better = parsed.get("better_response", "")
    if not isinstance(better, str):
        raise ReplyError(f"better_response must be a string, got {type(better).__name__}")
    winner = better.upper().strip()
    if winner not in ("A", "B"):
        if "A" in winner:
            winner = "A"
        elif "B" in winner:
            winner = "B"
        else:
            raise ReplyError(f"better_response {better!r} names neither A nor B")
    for key, default, convert, low, high in (("score", 4, int, 1, 6), ("confidence", 0.5, float, 0.0, 1.0)):
        value = parsed.get(key, default)
        try:
            if isinstance(value, str):
                value = convert(value)
            max(low, min(high, value))
        except (TypeError, ValueError) as err:
            raise ReplyError(f"{key} {value!r} is not a number: {err}") from None
    return winner


def to_side(position: str | None, swapped: bool) -> str | None:
    """A call's position verdict as a side of the battle: A is model_a in the first call and model_b in the swapped
    one; "tie" (any case) is a tie; None (a failed call) or anything else is None."""
    if position is None:
        return None
    up = position.upper()
    if up == "TIE":
        return TIE
    if up == "A":
        return MODEL_B if swapped else MODEL_A
    if up == "B":
        return MODEL_A if swapped else MODEL_B
    return None


def combine(first: str | None, second: str | None) -> tuple[str, bool]:
    """(outcome, consistent) of a battle from its two calls' sides (GenArena's `_combine_votes`): the same side
    twice wins, consistent; two ties are a consistent tie; a missing side or a disagreement is an inconsistent tie."""
    if first is None or second is None or first != second:
        return TIE, False
    return first, True


@dataclass(frozen=True)
class Verdict:
    """One battle's outcome from its two calls (`model_a` is the first call's A)."""

    outcome: str          # model_a, model_b or tie
    consistent: bool
    failed_calls: int     # calls that failed or were refused (no reply) or whose reply did not parse
    sides: tuple[str | None, str | None]


def verdict(first_reply: str | None, second_reply: str | None) -> Verdict:
    """A battle's verdict from its two replies (None: the call failed): each parsed (`parse_reply`; a refused reply
    counts as a failed call), turned into a side and combined."""
    sides: list[str | None] = []
    failed = 0
    for reply, swapped in ((first_reply, False), (second_reply, True)):
        position = None
        if reply is not None:
            try:
                position = parse_reply(reply)
            except ReplyError:
                position = None
        failed += position is None
        sides.append(to_side(position, swapped))
    outcome, consistent = combine(sides[0], sides[1])
    return Verdict(outcome, consistent, failed, (sides[0], sides[1]))
