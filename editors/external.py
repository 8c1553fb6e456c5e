"""`external`: edits made elsewhere, read from a folder by query id, so any model can be benchmarked.

File names: `<query id>.<ext>`, or HATIE's `<prefix>_<query id>.<ext>` (docs/hatie.md).
A query without a file is missing, not failed (`missing`: the edit stage leaves it out, the leaderboard counts it in
`n_missing` and marks the row PARTIAL); `editmeter score` lists every missing id before scoring. A file that cannot
be read or is not a usable image is that query's failure, judged like any editor's. Edits keep the size they were
made at (`any_output_size`): each metric suite applies its declared rule to an edit of another size. Files are
read with `benchmark.io.imageio.load_rgb`, the loader of sources (16-bit scaled, transparency refused, pixel limit),
and the signature covers the bytes of every image file in the folder, so
regenerated edits are rescored even when their names and sizes are unchanged (docs/inputs.md).

Multi-turn sessions (`layout="magicbrush"`): the folder is laid out as MagicBrush's `edit_cli_single_multi_turn.py`
writes it, one subfolder per session (`<id>/<id>_1.png`, `<id>_iter_<t>.png`, `<id>_inde_<t>.png`), mapped to the
sessions and turns of the query set's `queries` file (`benchmark.io.session_edits`); `protocol` says which files are
the edits (`single_turn`: `_inde_`, `multi_turn`: `_iter_`; turn 1 is `_1` in both). A file that maps to no turn
stops the editor before any edit, naming it; a turn without its file is missing.

Edits made from rewritten instructions (a prompt enhancer before the model) declare it with `rewritten`: a JSONL
file, one line per query, `{"query_id": "<id>", "instruction": "<the text the edit was made with>"}`. The editor
then `rewrites_instruction`: each record keeps its query's text, the file's sha256 enters the signature, and the
rows are marked on the leaderboard, in `show` and in the report. An edit whose query has no line fails, naming it.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from PIL import Image

from benchmark.editing.editor import Editor
from benchmark.io.imageio import load_rgb
from benchmark.io.types import Query

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".webp", ".bmp")
LAYOUTS = ("flat", "magicbrush")
PROTOCOLS = ("single_turn", "multi_turn")


class AmbiguousEditError(ValueError):
    """Several files in the folder match one query id."""


class ExternalEdits(Editor):
    """Returns the image of each query from `folder` instead of generating one.

    Args:
        folder: the edited images, named by query id (see the module docstring).
        prompt_kind: the family of the model that made them (instruction or description).
        label: a name for the leaderboard.
        rewritten: a JSONL of the rewritten instruction each edit was made with (module docstring), or None when
            the edits were made from the instructions as the set gives them.
        layout: `flat` (files named by query id) or `magicbrush` (one folder per multi-turn session, as MagicBrush's
            multi-turn editing script writes them).
        protocol: how the edits were made: `single_turn` (each turn of a session edited from the dataset's input)
            or `multi_turn` (each from the model's previous output); with `layout="magicbrush"` it also picks the
            session's files (`_inde_` or `_iter_`). Declared in `info()` (leaderboard_turns.csv reads it).
        queries: with `layout="magicbrush"`, the query set's `queries.jsonl`, whose sessions and turns the files
            are mapped to.
    """

    any_output_size = True  # a model elsewhere made them at its own size

    def __init__(self, folder: str, prompt_kind: str = "instruction", label: str = "external",
                 rewritten: str | None = None, layout: str = "flat", protocol: str = "single_turn",
                 queries: str | None = None) -> None:
        if prompt_kind not in ("instruction", "description"):
            raise ValueError(f"prompt_kind must be instruction or description, not {prompt_kind!r}")
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {', '.join(PROTOCOLS)}, not {protocol!r}")
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, not {layout!r}")
        if layout == "magicbrush" and not queries:
            raise ValueError("layout=magicbrush needs queries=<the query set's queries.jsonl>: its sessions and turns "
                             "are what the files are mapped to")
        self.folder = Path(folder)
        if not self.folder.is_dir():
            raise FileNotFoundError(f"edits folder {self.folder} does not exist (EDITS=<folder of edited images>)")
        from benchmark.io.filehash import digests

        self.prompt_kind = prompt_kind  # type: ignore[misc]  # per instance: the folder's model family
        self.label = label  # `make score NAME=` is checked by benchmark.commands.score_edits before this is built
        self._rewritten, self._rewritten_sha = read_rewritten(rewritten) if rewritten else ({}, None)
        self.rewrites_instruction = rewritten is not None  # type: ignore[misc]  # per instance: the file declares it
        self.layout, self.protocol = layout, protocol
        self._exact: dict[str, list[Path]] = {}
        self._suffix: dict[str, list[Path]] = {}
        if layout == "magicbrush":
            files = self._map_sessions(str(queries))
        else:
            files = self._index_flat()
        # Content, not names and sizes: every image file's bytes (stat-cached, so a rerun reads only changed files).
        # The whole folder rather than the files matched to queries, because the editor does not know the query
        # set: an unrelated extra image also gives a new signature, which costs a rescore, never a stale score.
        shas = digests(self.folder.resolve(), files)
        listing = "".join(f"{name}\t{shas[name]}\n" for name, _ in files)
        self._listing_hash = hashlib.sha256(listing.encode("utf-8", "surrogateescape")).hexdigest()[:16]

    def _map_sessions(self, queries: str) -> list[tuple[str, os.stat_result]]:
        """Map the session folders' files to query ids (`benchmark.io.session_edits`); refuse unmappable ones. Returns
        every image file of the session folders (both settings': one folder's content) with its stat."""
        from benchmark.io.session_edits import SessionLayoutError, map_session_folder
        from benchmark.querysets.io import read_queries

        mapping = map_session_folder(self.folder, read_queries(queries), self.protocol)
        if mapping.refused:
            raise SessionLayoutError(mapping.refusal(self.folder))
        for qid, path in mapping.files.items():
            self._exact[qid] = [path]
        out = []
        for f in mapping.parsed:
            try:
                out.append((f.path.relative_to(self.folder).as_posix(), f.path.stat()))
            except OSError:  # vanished since the scan: its turn reads as missing when edited
                continue
        return out

    def _index_flat(self) -> list[tuple[str, os.stat_result]]:
        """Index `<query id>.<ext>` and `<prefix>_<query id>.<ext>` files; returns every image file with its stat."""
        files: list[tuple[str, os.stat_result]] = []
        for p in sorted(self.folder.iterdir()):
            if p.suffix.lower() not in IMAGE_EXTENSIONS:
                continue
            try:
                st = p.stat()  # one stat per file: it both filters and keys the hash cache
            except OSError:  # a dangling link: not an edit
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            files.append((p.name, st))
            self._exact.setdefault(p.stem, []).append(p)  # q1.png and q1.jpg: ambiguous, never picked silently
            parts = p.stem.split("_")
            for k in range(1, len(parts)):  # every `<prefix>_` split: HATIE's naming
                self._suffix.setdefault("_".join(parts[k:]), []).append(p)
        return files

    def find(self, query_id: str) -> Path | None:
        """The file of one query: a unique exact stem match wins, else a unique `<prefix>_<id>` match. Several
        matches raise AmbiguousEditError (that query's failure) rather than picking one."""
        hits = self._exact.get(query_id) or self._suffix.get(query_id, [])
        if len(hits) > 1:
            raise AmbiguousEditError(f"query {query_id}: several files match in {self.folder}: "
                                     f"{', '.join(p.name for p in hits[:5])}; keep exactly one edit per query id")
        return hits[0] if hits else None

    def missing(self, query_ids: Sequence[str]) -> list[str]:
        """The ids among `query_ids` that have no file in the folder (an ambiguous id has files: its edit fails
        with the reason instead)."""
        return [q for q in query_ids if not (self._exact.get(q) or self._suffix.get(q))]

    def edit(self, queries: Sequence[Query], images: Sequence[Image.Image], *, seeds: Sequence[int]) -> list[Image.Image]:
        out = []
        for q in queries:
            path = self.find(q.id)
            if path is None:
                raise FileNotFoundError(f"no edited image for query {q.id} in {self.folder}")
            out.append(load_rgb(path))  # ImageInputError: this query's failure, with the reason
        return out

    def take_rewrites(self, query_ids: Sequence[str]) -> dict[str, str]:
        """The rewritten instruction of each of `query_ids` that the `rewritten` file gives."""
        return {q: self._rewritten[q] for q in query_ids if q in self._rewritten}

    def info(self) -> dict[str, Any]:
        # `content`: sha256 over every image file's name and bytes (see __init__)
        out = {"name": "external", "label": self.label, "folder": str(self.folder), "content": self._listing_hash,
               "prompt_kind": self.prompt_kind}
        if self._rewritten_sha is not None:  # absent otherwise: the signatures of other folders are unchanged
            out["rewritten_sha256"] = self._rewritten_sha
        if self.layout != "flat":  # which files of one folder: each protocol's edits are a run of their own
            out["layout"] = self.layout
        if self.layout != "flat" or self.protocol != "single_turn":  # how the edits were made (leaderboard_turns)
            out["protocol"] = self.protocol
        return out


class RewrittenFileError(ValueError):
    """The file of rewritten instructions is missing or malformed; the message names the line and the format."""


def read_rewritten(path: str | os.PathLike[str]) -> tuple[dict[str, str], str]:
    """({query id: rewritten instruction}, sha256 of the file) from a JSONL of `{"query_id", "instruction"}`."""
    p = Path(path)
    form = 'one JSON object per line: {"query_id": "<id>", "instruction": "<the text the edit was made with>"}'
    try:
        data = p.read_bytes()
    except OSError as err:
        raise RewrittenFileError(f"rewritten={p}: cannot read it ({err}); give the JSONL of rewritten "
                                 f"instructions, {form}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise RewrittenFileError(f"{p}: not UTF-8 text ({err}); {form}") from None
    out: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError as err:
            raise RewrittenFileError(f"{p} line {n}: not JSON ({err}); {form}") from None
        if not (isinstance(rec, dict) and isinstance(rec.get("query_id"), str) and isinstance(rec.get("instruction"), str)):
            raise RewrittenFileError(f"{p} line {n}: want {form}")
        if rec["query_id"] in out:
            raise RewrittenFileError(f"{p} line {n}: query {rec['query_id']} is given twice; keep one line per query")
        out[rec["query_id"]] = rec["instruction"]
    return out, hashlib.sha256(data).hexdigest()
