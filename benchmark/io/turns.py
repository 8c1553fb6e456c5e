"""MagicBrush's two multi-turn settings: which queries of a run its `final_turn` and `all_turn` figures average.

MagicBrush's `evaluation/image_eval.py` builds two lists of (generated, ground truth) pairs and averages each
metric over the pairs of each list:

- `final_turn` (the paper's multi-turn setting): one pair per session, the session's last turn, edited from the
  model's own output of the turn before (`<id>_iter_<n>.png`; `<id>_1.png` for a one-turn session). The last turn
  is the highest turn number (the script sorts the names by their digits as a number, so turn 10 comes after 9).
- `all_turn` (the single-turn setting): every turn of every session, each edited from the dataset's input for that
  turn (`<id>_1.png`, `<id>_inde_<t>.png`), pooled: a three-turn session weighs three times a one-turn one.

In editmeter a run has one protocol (run.json `protocol`; else the one its editor declares, as the external
editor does for edits made elsewhere; else `single_turn`): a `multi_turn` run gets the
`final_turn` figure, a `single_turn` run the `all_turn` one, each over the run's per-query scores (only the
leaderboard aggregates). Where the script stops on a session whose generated and ground-truth turns differ in
number, or scores the last generated turn as the final one when the real last turn is missing, editmeter counts the
missing turns as missing: the figure's row is PARTIAL and never averages an earlier turn in place of the last.

This module only selects queries; `benchmark.tables.leaderboard` computes the rows (`turn_rows`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

PROTOCOLS = ("single_turn", "multi_turn")
DEFAULT_PROTOCOL = "single_turn"  # a run.json written before protocols existed edited every query from its source
# the setting of MagicBrush's evaluation each protocol's outputs are scored under
SETTINGS = {"single_turn": "all_turn", "multi_turn": "final_turn"}
# the script's five metrics, in its order (L1, L2, CLIP-I, DINO, CLIP-T), as the conventional suite names them
PAPER_COLUMNS = ("l1_gt", "l2_gt", "clip_i_gt", "dino_gt", "clip_t")


class ProtocolError(ValueError):
    """A run.json names a protocol editmeter does not know."""


def protocol_of(meta: Mapping[str, Any]) -> str:
    """A run's protocol from its run.json: its `protocol`, else the one its editor declares (`editor_info`'s
    `protocol`: edits made elsewhere, read for one protocol), else `single_turn`. ProtocolError for any other value
    than `single_turn` / `multi_turn`, or when the two disagree."""
    run, info = meta.get("protocol"), meta.get("editor_info")
    declared = info.get("protocol") if isinstance(info, Mapping) else None
    for value in (run, declared):
        if value is not None and value not in PROTOCOLS:
            raise ProtocolError(f"protocol {value!r} is not one of {', '.join(PROTOCOLS)}")
    if run is not None and declared is not None and run != declared:
        raise ProtocolError(f"protocol {run!r}, but its editor read the edits of protocol {declared!r}")
    return str(run or declared or DEFAULT_PROTOCOL)


def final_turns(sessions: Iterable[tuple[str, str, int]]) -> dict[str, str]:
    """session -> the query id of its last turn (the highest turn number, compared as numbers), from
    (query id, session, turn) triples."""
    last: dict[str, tuple[int, str]] = {}
    for qid, session, turn in sessions:
        if session not in last or int(turn) > last[session][0]:
            last[session] = (int(turn), qid)
    return {session: qid for session, (_, qid) in sorted(last.items())}


def owed_queries(sessions: Iterable[tuple[str, str, int]], setting: str, in_scope: set[str]) -> tuple[list[str], int]:
    """(the query ids a setting's figure averages, sorted; how many sessions they come from), among the queries
    `in_scope` (those the metrics score). `final_turn`: each session's last turn; `all_turn`: every turn."""
    triples = list(sessions)
    if setting == "final_turn":
        ids = [qid for qid in final_turns(triples).values() if qid in in_scope]
        return sorted(ids), len(ids)
    if setting == "all_turn":
        ids = [qid for qid, _, _ in triples if qid in in_scope]
        return sorted(ids), len({s for qid, s, _ in triples if qid in in_scope})
    raise ValueError(f"setting must be final_turn or all_turn, not {setting!r}")
