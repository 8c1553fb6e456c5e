"""The editing protocol of a run (`protocol`): how the turns of a multi-turn session get their input images.

- `single_turn` (default): every query is edited from its own `image`, the dataset's input for that turn.
- `multi_turn`: MagicBrush's iterative setting. Turn 1 of a session is edited from its own `image`; turn t > 1 from
  the editor's own edit of turn t-1, so errors accumulate (benchmark.stages.turns). Edits made elsewhere (the
  external editor) were given their inputs where they were made: their multi-turn files are read as they are.

The protocol enters the editor signature only when it is `multi_turn`, so single-turn runs keep the signatures
(and run folders) they had before the setting existed; the two protocols' edits never share a folder. A run's
protocol as its run.json records it is `benchmark.io.turns.protocol_of`.
"""

from __future__ import annotations

from typing import Any

from benchmark.io.errors import RunError
from benchmark.io.turns import DEFAULT_PROTOCOL as SINGLE_TURN
from benchmark.io.turns import PROTOCOLS

MULTI_TURN = "multi_turn"
assert SINGLE_TURN in PROTOCOLS and MULTI_TURN in PROTOCOLS


class ProtocolSettingError(RunError):
    """A `protocol` value that is not one of PROTOCOLS, or a query set the protocol cannot run on: the run stops
    before any edit with this message (exit status 1)."""


def check_protocol(value: Any) -> str:
    """`value` if it names a protocol, else ProtocolSettingError naming it and the choices (the run plan's check of
    its `protocol`, benchmark.plan.config.check_plan, before any work)."""
    if value not in PROTOCOLS:
        raise ProtocolSettingError(f"protocol={value!r} is not a protocol; use protocol=single_turn (each turn edited "
                                   "from its own input image) or protocol=multi_turn (turn t edited from the "
                                   "editor's own edit of turn t-1)")
    return str(value)


def check_sessions_for(protocol: str, queryset: Any) -> None:
    """Refuse multi_turn on a query set whose queries belong to no session: there is nothing to chain, and its edits
    would be those of single_turn under another signature. The message names the set and the fix."""
    if protocol == MULTI_TURN and not any(q.session is not None for q in queryset.queries):
        raise ProtocolSettingError(
            f"protocol=multi_turn: query set {queryset.name!r} has no sessions (no query has a `session` and "
            "`turn`), so there is no previous turn to edit from. Run a set with sessions (queryset=demo_sessions; "
            "MagicBrush built with --turns all), or drop protocol=multi_turn")


def chains_turns(protocol: str, editor: Any) -> bool:
    """Whether this run edits turn t from its own edit of turn t-1: multi_turn with an editor that makes its edits
    here. An editor of edits made elsewhere (`any_output_size`: the external editor, which `editmeter score` runs
    with the protocol its files were made under) has no input to be given: its files are read as they are."""
    return check_protocol(protocol) == MULTI_TURN and not getattr(editor, "any_output_size", False)


def check_editor_protocol(protocol: str, info: dict[str, Any]) -> None:
    """Refuse a run whose editor declares it read the edits of another protocol (`editor_info`'s `protocol`: the
    external editor) than the run's: its run.json would contradict itself (benchmark.io.turns.protocol_of)."""
    declared = info.get("protocol") if isinstance(info, dict) else None
    if declared is not None and declared != protocol:
        raise ProtocolSettingError(f"the editor read the edits of protocol {declared!r} but the run's protocol is "
                                   f"{protocol!r}: set protocol={declared} (editmeter score --protocol sets both)")
