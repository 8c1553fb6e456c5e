"""Stream the entries of a large top-level JSON object (`{key: {...}, ...}`) without loading the whole file.

GQA's train scene graphs are one ~1.2 GB JSON object keyed by image id. `json.load` would hold the text and the full
dict tree at once (many GB). This reader keeps a bounded text buffer and decodes one entry at a time with the
standard library's C scanner (`JSONDecoder.raw_decode`), so memory is one chunk plus one entry.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from benchmark.querysets.release import number_hooks

CHUNK_CHARS = 1 << 22
MAX_ENTRY_CHARS = 1 << 26  # one scene graph is ~10 KB; a 64 M-character entry means a syntax error upstream
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
class _NumberTooLong(ValueError):
    """A number literal the release reader's rules refuse (`benchmark.querysets.release.number_hooks`): python's
    int() raises past 4300 digits and a long float is inf."""


def lone_surrogate_in(obj: Any) -> str | None:
    """The first string (key or value) holding a lone UTF-16 surrogate (`"\\ud800"` decodes to one), else None."""
    stack = [obj]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                return v
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return None


def json_reason(err: json.JSONDecodeError, at: str) -> str:
    """What `err` found and where (`at`, e.g. "column 12"): json's own message, less the dangling "at" it ends some
    messages with ("Invalid control character at"), a control character named and the fix said."""
    msg = err.msg.removesuffix(" at")
    if msg.startswith("Invalid control character") and err.pos < len(err.doc):
        ch = ord(err.doc[err.pos])
        return f"{msg} U+{ch:04X} in a string at {at}; a JSON string must write it escaped (\\u{ch:04x})"
    return f"{msg} at {at}"


class JSONStreamError(ValueError):
    """The file is not a JSON object of objects; the message names the file and the character offset."""


class _Buffer:
    """A sliding text window over a file: `buf[pos:]` is unread, `offset` counts the characters dropped before."""

    def __init__(self, fh: IO[str], path: Path, chunk: int) -> None:
        self.fh, self.path, self.chunk = fh, path, chunk
        self.buf, self.pos, self.offset, self.eof = "", 0, 0, False
        self.refill()

    def refill(self) -> bool:
        if self.eof:
            return False
        try:
            more = self.fh.read(self.chunk)
        except UnicodeDecodeError as err:
            raise JSONStreamError(f"{self.path}: not valid UTF-8 (byte 0x{err.object[err.start]:02x}) within the "
                                  f"{self.chunk:,} characters after character {self.offset + len(self.buf)}") from None
        if not more:
            self.eof = True
            return False
        self.offset += self.pos
        self.buf = self.buf[self.pos:] + more
        self.pos = 0
        return True

    def peek(self) -> str:
        """Next non-whitespace character (not consumed)."""
        while True:
            buf, pos = self.buf, self.pos
            while pos < len(buf) and buf[pos] in " \t\r\n":
                pos += 1
            self.pos = pos
            if pos < len(buf):
                return buf[pos]
            if not self.refill():
                raise self.error("unexpected end of file")

    def decode(self, decoder: json.JSONDecoder) -> Any:
        """Decode one JSON value at the cursor, reading more text while the value runs past the buffer."""
        while True:
            try:
                value, end = decoder.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as err:
                if len(self.buf) - self.pos < MAX_ENTRY_CHARS and self.refill():  # most likely the value is cut by the buffer end; a real error recurs at EOF
                    continue
                raise JSONStreamError(f"{self.path}: invalid JSON: "
                                      f"{json_reason(err, f'character {self.offset + err.pos}')}") from None
            except RecursionError:
                raise self.error("JSON nested too deeply") from None
            except _NumberTooLong as err:
                raise self.error(str(err)) from None
            # only text with a `\\ud800`-`\\udfff` escape can hold a lone surrogate: walk the value just then
            if _SURROGATE_ESCAPE.search(self.buf, self.pos, end) and (bad := lone_surrogate_in(value)) is not None:
                raise self.error(f"string {bad[:40]!r} holds a lone UTF-16 surrogate (not text)")
            self.pos = end
            return value

    def error(self, msg: str, at: int | None = None) -> JSONStreamError:
        return JSONStreamError(f"{self.path}: {msg} at character {self.offset + (self.pos if at is None else at)}")


def iter_object_entries(path: str | os.PathLike[str], chunk_chars: int = CHUNK_CHARS) -> Iterator[tuple[str, Any]]:
    """Yield `(key, value)` for each entry of the top-level JSON object in `path`; values must be objects.

    Values are required to be JSON objects: a truncated object never decodes, so a failed decode means "read more"
    until the end of the file (a truncated number would decode silently, hence the restriction).
    """
    path = Path(path)
    decoder = json.JSONDecoder(**number_hooks(_NumberTooLong))
    with path.open("r", encoding="utf-8") as fh:
        b = _Buffer(fh, path, chunk_chars)
        if b.peek() != "{":
            raise b.error("expected a JSON object")
        b.pos += 1
        first = True
        while True:
            c = b.peek()
            if c == "}":
                return
            if not first:
                if c != ",":
                    raise b.error(f"expected ',' or '}}', found {c!r}")
                b.pos += 1
                c = b.peek()
            first = False
            if c != '"':
                raise b.error(f"expected a string key, found {c!r}")
            key = b.decode(decoder)
            if b.peek() != ":":
                raise b.error(f"expected ':' after key {key!r}")
            b.pos += 1
            if b.peek() != "{":
                raise b.error(f"the value of {key!r} is not a JSON object")
            yield key, b.decode(decoder)
