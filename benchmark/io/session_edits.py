"""A folder of multi-turn edits as MagicBrush's `edit_cli_single_multi_turn.py` writes it, mapped to a query set.

The script writes one folder per session, named by the session's image id (the part of its input file name before
the first '-': `139306` of `139306-input.png`), holding

    <id>/<id>_1.png          turn 1, edited from the dataset's input (shared by both settings)
    <id>/<id>_iter_<t>.png   turn t >= 2 edited from its own output of turn t-1 (multi-turn)
    <id>/<id>_inde_<t>.png   turn t >= 2 edited from the dataset's input for turn t (single-turn)

A session folder maps to the query set's session of that id, else to the one session whose turn-1 query has that
`image_id` (MagicBrush's img_id). Each file maps to one turn of it: `single_turn` reads `_1` and `_inde_<t>`,
`multi_turn` reads `_1` and `_iter_<t>`. An image file that maps to no turn (a folder of no session, a turn the
session does not have, a name the script does not write, two files for one turn, an image beside the session
folders; hidden folders are skipped) is refused by name: scoring it as something else would be a silent guess. A turn without its file is
missing, never filled in from another turn.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from benchmark.io.types import Query

PROTOCOL_KINDS = {"single_turn": "inde", "multi_turn": "iter"}  # the file name part of turns >= 2
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".webp", ".bmp")
_TURN = re.compile(r"(?:(?P<first>1)|(?P<kind>iter|inde)_(?P<turn>[1-9][0-9]*))")


class SessionLayoutError(ValueError):
    """Files of a multi-turn edits folder that map to no turn of the query set; the message names them."""


@dataclass(frozen=True)
class SessionFile:
    """One image file of the layout: its session folder, turn and kind (`first`, `iter` or `inde`)."""

    path: Path
    session: str
    turn: int
    kind: str


@dataclass
class SessionMapping:
    """What a folder holds for one protocol: query id -> file, the files it refused (relative path, why), and
    every parsed file (both protocols')."""

    files: dict[str, Path] = field(default_factory=dict)
    refused: list[tuple[str, str]] = field(default_factory=list)
    parsed: list[SessionFile] = field(default_factory=list)

    def refusal(self, folder: Path, limit: int = 20) -> str:
        """One message naming the refused files (at most `limit`) and what the layout expects."""
        shown = "; ".join(f"{rel}: {why}" for rel, why in self.refused[:limit])
        more = f"; ... ({len(self.refused) - limit} more)" if len(self.refused) > limit else ""
        return (f"{folder}: {len(self.refused)} file(s) map to no turn of the query set's sessions: {shown}{more}. "
                "The layout is MagicBrush's edit_cli_single_multi_turn.py output: <id>/<id>_1.png, "
                "<id>/<id>_iter_<t>.png, <id>/<id>_inde_<t>.png per session <id>; remove or move the others, or "
                "score against the query set these edits were made for")


def has_session_folders(folder: Path) -> bool:
    """Whether `folder` holds any subfolder (the per-session layout) rather than only files; hidden folders
    (`.ipynb_checkpoints`) do not count, and no session id starts with a dot."""
    return any(p.is_dir() and not p.name.startswith(".") for p in folder.iterdir())


def _session_index(queries: Iterable[Query]) -> tuple[dict[str, dict[int, str]], dict[str, list[str]]]:
    """(session -> {turn: query id}, image id of a session's turn 1 -> the sessions with it)."""
    turns: dict[str, dict[int, str]] = {}
    by_image: dict[str, list[str]] = {}
    for q in queries:
        if q.session is None:
            continue
        turns.setdefault(q.session, {})[int(q.turn or 0)] = q.id
        if q.turn == 1 and q.image_id:
            by_image.setdefault(q.image_id, []).append(q.session)
    return turns, by_image


def _session_of(name: str, turns: dict[str, dict[int, str]], by_image: dict[str, list[str]]) -> tuple[str | None, str]:
    """(the session a folder `name` maps to, or None with why): the session of that id, else the one session
    whose turn-1 query has that image id."""
    if name in turns:
        return name, ""
    owners = sorted(by_image.get(name, []))
    if len(owners) == 1:
        return owners[0], ""
    if owners:
        return None, f"{name!r} is the image id of sessions {', '.join(owners[:5])}: which one is ambiguous"
    return None, f"no session of the query set has the id or image id {name!r}"


def map_session_folder(folder: str | Path, queries: Iterable[Query], protocol: str) -> SessionMapping:
    """Map the image files of `folder` (module docstring) to the query ids of `queries` for `protocol`."""
    if protocol not in PROTOCOL_KINDS:
        raise ValueError(f"protocol must be one of {', '.join(PROTOCOL_KINDS)}, not {protocol!r}")
    root = Path(folder)
    turns, by_image = _session_index(queries)
    out = SessionMapping()
    claimed: dict[tuple[str, int, str], str] = {}  # (session, turn, kind) -> the first file's relative path
    for entry in sorted(root.iterdir()):
        if not entry.is_dir():
            if entry.suffix.lower() in IMAGE_EXTENSIONS:
                out.refused.append((entry.name, "an image beside the session folders (each goes in <id>/)"))
            continue
        if entry.name.startswith("."):  # a tool's hidden folder (.ipynb_checkpoints), never a session
            continue
        session, unmapped = _session_of(entry.name, turns, by_image)
        for path in sorted(entry.iterdir()):
            if not path.is_file() or path.suffix.lower() not in IMAGE_EXTENSIONS:
                continue
            rel = f"{entry.name}/{path.name}"
            if session is None:
                out.refused.append((rel, unmapped))
                continue
            stem = path.name[: -len(path.suffix)]
            prefix = f"{entry.name}_"
            m = _TURN.fullmatch(stem[len(prefix):]) if stem.startswith(prefix) else None
            if m is None:
                out.refused.append((rel, f"not a name the script writes ({prefix}1, {prefix}iter_<t>, "
                                         f"{prefix}inde_<t> with t >= 2)"))
                continue
            turn, kind = (1, "first") if m["first"] else (int(m["turn"]), m["kind"])
            if kind != "first" and turn < 2:
                out.refused.append((rel, f"turn 1 is {prefix}1 in both settings"))
                continue
            n = len(turns[session])
            if turn > n:
                out.refused.append((rel, f"session {session!r} has {n} turn(s) in the query set"))
                continue
            key = (session, turn, kind)
            if key in claimed:
                out.refused.append((rel, f"a second file for turn {turn} (first: {claimed[key]})"))
                continue
            claimed[key] = rel
            out.parsed.append(SessionFile(path, session, turn, kind))
    wanted = ("first", PROTOCOL_KINDS[protocol])
    out.files = {turns[f.session][f.turn]: f.path for f in out.parsed if f.kind in wanted}
    return out
