"""ImgEditSuite: ImgEdit-Bench Basic's official judging protocol (`protocol.py`) with a configurable judge backbone
(the `JudgeBackbone` interface of metrics=gedit).

Per chunk of queries (sorted by source image): load the source as stored and the edit as it is (the official
`basic_bench.py` sends both files unchanged), ask the backbone the edit type's prompt over [source, edit], and parse
the reply as the official step 1 does. A reply without three 1..5 scores makes the query a failure row that keeps
the reply. Per-type means and their overall mean are the leaderboard summary (`summary.py`).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.metrics.chunking import QuerySamples
from benchmark.metrics.components import LazyComponents
from benchmark.metrics.imgedit.protocol import (
    Prompts,
    ReplyError,
    check_identity,
    edit_score,
    load_prompts,
    parse_reply,
    summary_keys,
)
from benchmark.metrics.judge.suite import SuiteInfo
from benchmark.types import IMGEDIT_TYPES, MetricInfo, Query

VERSION = "1.0"

COLUMN_INFO: dict[str, tuple[bool, str]] = {
    "IE_score": (True, "ImgEdit-Bench's score of one edit: the mean of the reply's three 1..5 scores, rounded to 2 "
                       "decimals (step1_get_avgscore.py)"),
}
SUMMARY_INFO: dict[str, tuple[bool, str]] = {
    k: (True, "ImgEdit-Bench's overall figure: the unweighted mean of the nine type figures, rounded to 2 decimals; "
              "NaN unless every type has ok rows" if k == "ImgEdit_overall" else
              f"ImgEdit-Bench's {k.removeprefix('ImgEdit_')} figure: the mean of its edits' scores, rounded to 2 "
              "decimals (step2_typescore.py)")
    for k in summary_keys()
}


@dataclass
class _Loaded:
    query: Query
    source: Any = None  # PIL image, as stored in the query set
    edit: Any = None    # PIL RGB image, as the editor wrote it
    error: str = ""


class _Samples(QuerySamples):
    def item(self, query: Query) -> _Loaded:
        return _Loaded(query)

    def load(self, out: _Loaded, q: Query, edit_path: Path) -> None:
        from benchmark.imageio import load_rgb

        out.source = self.original(q, lambda img: img)
        out.edit = load_rgb(edit_path)  # not resized: the official judge gets the edit file as it is


class ImgEditSuite(LazyComponents):
    """ImgEdit-Bench Basic's score per edit by its official protocol (specification: docs/judge.md).

    backbone: a `JudgeBackbone` (benchmark/metrics/gedit/suite.py; configs/metrics/imgedit.yaml:
    `benchmark.models.vlm.TextJudge`). prompts_file, prompts_commit, prompts_sha256: the fetched `prompts.json`, the
    ImgEdit commit it was fetched at and its checksum (both enter the signature; the file is checked on first use).
    chunk_size: queries per round.
    """

    info = MetricInfo("imgedit", VERSION, True, description="ImgEdit-Bench Basic's official protocol: per-type "
                      "prompts, three 1-5 scores per edit parsed as the official step 1, per-type means and their "
                      "overall mean")

    def __init__(self, *, backbone: Any, prompts_file: str, prompts_commit: str, prompts_sha256: str,
                 chunk_size: int = 16, load_threads: int | None = None, prefetch: bool = False,
                 device: str = "auto") -> None:
        from benchmark.metrics.chunking import check_loading
        from benchmark.models.common import resolve_device

        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive integer, not {chunk_size!r}")
        check_identity(prompts_commit, prompts_sha256)
        self.backbone = backbone
        self.prompts_file, self.prompts_commit, self.prompts_sha256 = str(prompts_file), prompts_commit, prompts_sha256
        self._prompts: Prompts | None = None
        self.chunk_size = chunk_size
        self.load_threads, self.prefetch = check_loading(load_threads, prefetch)
        self.device = resolve_device(device)
        self._factories, self._models = {}, {}
        self.timings: dict[str, float] = {}
        self.column_info = COLUMN_INFO | SUMMARY_INFO
        self.columns = tuple(COLUMN_INFO)
        self.info = SuiteInfo(ImgEditSuite.info.name, VERSION, True, description=ImgEditSuite.info.description,
                              identity={"imgedit": self.identity})

    @property
    def protocol(self) -> str:
        return (f"ImgEdit@{self.prompts_commit}|prompts.json sha256={self.prompts_sha256}|text,source,edit"
                "|parse=step1-v1")

    @property
    def identity(self) -> str:
        """The backbone's identity and the protocol's (commit, prompt checksum, parser)."""
        return f"{self.backbone.identity}|{self.protocol}"

    def components(self) -> dict[str, str]:
        return {"judge": self.backbone.name, "backbone": self.backbone.identity, "protocol": self.protocol}

    @property
    def prompts(self) -> Prompts:
        """The per-type prompts, read and checked on first use (a config that is only composed needs no file)."""
        if self._prompts is None:
            self._prompts = load_prompts(self.prompts_file, self.prompts_sha256, self.prompts_commit)
        return self._prompts

    applies_note = "an ImgEdit-Bench edit type with an instruction (queryset=imgedit)"

    def applies_to(self, query: Query, prompt_kind: str) -> bool:
        """ImgEdit-Bench's queries: its prompts are per edit type and quote the instruction."""
        return query.edit_type in IMGEDIT_TYPES and bool((query.instruction or "").strip())

    def model_seconds(self) -> dict[str, float]:
        return {k: v for k, v in self.timings.items() if "forward" in k}

    def _score_chunk(self, items: list[_Loaded]) -> list[dict[str, Any]]:
        prompts = self.prompts
        rows = [{"query_id": it.query.id, "status": "failed", "reason": it.error} for it in items if it.error]
        good = [it for it in items if not it.error]
        if not good:
            return rows
        requests = [([it.source, it.edit], prompts.for_edit(it.query.edit_type.removeprefix("imgedit_"),
                                                            it.query.instruction)) for it in good]
        t0 = time.perf_counter()
        replies = self.backbone.generate(requests)
        self.timings["judge forward"] = self.timings.get("judge forward", 0.0) + time.perf_counter() - t0
        if len(replies) != len(requests):
            raise RuntimeError(f"the judge backbone {self.backbone.name} answered {len(replies)} of "
                               f"{len(requests)} prompts")
        for it, reply in zip(good, replies, strict=True):
            row: dict[str, Any] = {"query_id": it.query.id, "ie_reply": reply}
            try:
                scores = parse_reply(reply)
            except ReplyError as err:
                rows.append(row | {"IE_score": math.nan, "status": "failed",
                                   "reason": f"the reply does not hold three 1..5 scores as ImgEdit-Bench's step 1 "
                                             f"reads them ({err})"})
                continue
            rows.append(row | {"IE_score": edit_score(scores), "ie_scores": json.dumps(scores), "status": "ok",
                               "reason": ""})
        return rows

    def score_queries(self, queryset: Any, queries: Sequence[Query], edit_paths: Sequence[Path], *, work_dir: Path,
                      num_workers: int = 0, progress: bool = True) -> Iterator[list[dict[str, Any]]]:
        """Yield lists of result rows (one dict per query), chunk by chunk."""
        from benchmark.metrics.chunking import by_source

        self.prompts  # noqa: B018 (a missing or altered prompt file stops the run before any judging)
        qs, paths = by_source(queries, edit_paths)
        yield from self._score_chunks(_Samples(queryset, qs, paths), self._score_chunk, desc="imgedit",
                                      num_workers=num_workers, progress=progress)
