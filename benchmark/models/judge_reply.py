"""A judge's reply with its provenance: the text (a `str`, so a reply is used as text everywhere) and who answered
it, or why there is no usable text.

Judged suites write `reply_columns(replies)` into every row (docs/judge.md, "Failures and provenance"):
`judge_model` (the model asked), `judge_answered_by` (the model each reply says answered, e.g. an API alias's dated
snapshot; distinct values in request order joined by ';'), `judge_fingerprint` (the replies' `system_fingerprint`s,
joined the same way; empty when the server sends none) and `judge_version` (the server's reported version, or a
local backbone's library versions and dtype). A failed reply (`failure`) is one of `FAILURE_KINDS`; its text is
what came back (possibly empty) and `error` says why it is not a score.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

CALL_FAILED, REFUSED, UNPARSEABLE = "call_failed", "refused", "unparseable"
# a row's kind when several of its replies failed: the first of these among them
FAILURE_KINDS = (CALL_FAILED, REFUSED, UNPARSEABLE)
REPLY_COLUMNS = ("judge_model", "judge_answered_by", "judge_fingerprint", "judge_version")


class JudgeReply(str):
    """Reply text plus `model` (asked), `answered_by`, `fingerprint`, `version`, `failure` ('' or one of
    `FAILURE_KINDS`: the call failed after its retries or was refused; set by the backbone), `error` (why) and
    `cache_key` (the backbone's reply-cache entry, '' when none), `cached` (read from that cache)."""

    model: str
    answered_by: str
    fingerprint: str
    version: str
    failure: str
    error: str
    cache_key: str
    cached: bool

    def __new__(cls, text: str = "", *, model: str = "", answered_by: str = "", fingerprint: str = "",
                version: str = "", failure: str = "", error: str = "", cache_key: str = "",
                cached: bool = False) -> JudgeReply:
        if failure and failure not in FAILURE_KINDS:
            raise ValueError(f"failure must be one of {FAILURE_KINDS} or '', not {failure!r}")
        obj = super().__new__(cls, text)
        obj.model, obj.answered_by, obj.fingerprint, obj.version = model, answered_by, fingerprint, version
        obj.failure, obj.error, obj.cache_key, obj.cached = failure, error, cache_key, cached
        return obj

    def __reduce__(self) -> tuple[Any, ...]:  # picklable with its provenance (worker processes, caches)
        return _rebuild, (str(self), self.meta)

    @property
    def meta(self) -> dict[str, Any]:
        return {"model": self.model, "answered_by": self.answered_by, "fingerprint": self.fingerprint,
                "version": self.version, "failure": self.failure, "error": self.error, "cache_key": self.cache_key,
                "cached": self.cached}


def _rebuild(text: str, meta: dict[str, Any]) -> JudgeReply:
    return JudgeReply(text, **meta)


def as_reply(reply: Any, model: str, version: str = "") -> JudgeReply:
    """`reply` as a JudgeReply: a plain string (a backbone that records nothing more, e.g. a scripted one) gets
    `model` as the model asked and the answerer."""
    if isinstance(reply, JudgeReply):
        return reply
    return JudgeReply(str(reply), model=model, answered_by=model, version=version)


def _joined(values: Iterable[str]) -> str:
    return ";".join(dict.fromkeys(v for v in values if v))


def reply_columns(replies: Iterable[JudgeReply]) -> dict[str, str]:
    """The row's provenance columns from its replies (distinct values in request order, joined by ';')."""
    replies = list(replies)
    return {"judge_model": _joined(r.model for r in replies),
            "judge_answered_by": _joined(r.answered_by for r in replies),
            "judge_fingerprint": _joined(r.fingerprint for r in replies),
            "judge_version": _joined(r.version for r in replies)}


def interleaved(parts: Any, n_images: int, image: Any) -> list[dict[str, Any]]:
    """A user turn's content laid out by `parts` (a request whose prompt is not one text but a sequence of text
    parts (str) and images (int: the index in the request's image list), as the arena's protocol sends them):
    text parts as text blocks, `image(i)` for each image. Every image must appear exactly once, in list order (a
    local processor consumes the images in the order of their placeholders)."""
    parts = list(parts)
    order = [p for p in parts if not isinstance(p, str)]
    if order != list(range(n_images)) or any(isinstance(p, bool) or not isinstance(p, str | int) for p in parts):
        raise ValueError(f"an interleaved prompt must name each of its {n_images} images once, in order, between "
                         f"text parts; got image indices {order}")
    return [{"type": "text", "text": p} if isinstance(p, str) else image(p) for p in parts]
