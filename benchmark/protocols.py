"""The editing protocol of a run (`protocol`): how the turns of a multi-turn session get their input images.

- `single_turn` (default): every query is edited from its own `image`, the dataset's input for that turn.
- `multi_turn`: MagicBrush's iterative setting. Turn 1 of a session is edited from its own `image`; turn t > 1 from
  the editor's own edit of turn t-1, so errors accumulate (benchmark.stages.turns).

The protocol enters the editor signature only when it is `multi_turn`, so single-turn runs keep the signatures
(and run folders) they had before the setting existed; the two protocols' edits never share a folder.
"""

from __future__ import annotations

from typing import Any

from benchmark.errors import RunError

SINGLE_TURN = "single_turn"
MULTI_TURN = "multi_turn"
PROTOCOLS = (SINGLE_TURN, MULTI_TURN)


class ProtocolError(RunError):
    """A protocol value that is not one of PROTOCOLS, or a query set the protocol cannot run on (the run stops
    before any edit with this message, exit status 1)."""


def check_protocol(value: Any) -> str:
    """`value` if it names a protocol, else ProtocolError naming it and the choices."""
    if value not in PROTOCOLS:
        raise ProtocolError(f"protocol={value!r} is not a protocol; use protocol=single_turn (each turn edited from "
                            "its own input image) or protocol=multi_turn (turn t edited from the editor's own edit "
                            "of turn t-1)")
    return str(value)


def run_protocol(cfg: Any) -> str:
    """The run's protocol: the top-level `protocol` key (absent: single_turn), checked. The one place that reads it."""
    return check_protocol(cfg.get("protocol", SINGLE_TURN) if hasattr(cfg, "get") else SINGLE_TURN)


def meta_protocol(meta: dict[str, Any]) -> str:
    """The protocol a run.json records; a run.json written before the field existed is single_turn."""
    return check_protocol(meta.get("protocol", SINGLE_TURN))


def check_sessions_for(protocol: str, queryset: Any) -> None:
    """Refuse multi_turn on a query set whose queries belong to no session: there is nothing to chain, and its edits
    would be those of single_turn under another signature. The message names the set and the fix."""
    if protocol == MULTI_TURN and not any(q.session is not None for q in queryset.queries):
        raise ProtocolError(f"protocol=multi_turn: query set {queryset.name!r} has no sessions (no query has a "
                            "`session` and `turn`), so there is no previous turn to edit from. Run a set with "
                            "sessions (queryset=demo_sessions; MagicBrush built with --turns all), or drop "
                            "protocol=multi_turn")
