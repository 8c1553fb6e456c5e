"""GEditSuite: GEdit-Bench's official judging protocol (`protocol.py`) with a configurable judge backbone.

Per chunk of queries (sorted by source image): load the source as it is and the edit resized to the source's size
(PIL's default filter, bicubic, as the official `test_gedit_score.py`), ask the backbone the SC prompt over
[source, edit] and the PQ prompt over the edit, parse both replies the official way and compute SC, PQ and O. A
reply that does not parse makes the query a failure row that keeps both replies. Per-language, per-group means and
their macro average are the leaderboard summary (`summary.py`).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from benchmark.metrics.chunking import QuerySamples
from benchmark.metrics.components import LazyComponents
from benchmark.metrics.gedit.protocol import (
    LANGUAGE_NAMES,
    Prompts,
    ReplyError,
    check_identity,
    load_prompts,
    parse_reply,
    sample_scores,
    summary_keys,
)
from benchmark.metrics.judge.suite import SuiteInfo
from benchmark.types import GEDIT_TYPES, MetricInfo, Query

VERSION = "1.0"


class JudgeBackbone(Protocol):
    """What answers the judge's prompts. `name`: the model and its revision (shown on the leaderboard); `identity`:
    everything of the backbone that shapes a reply (model, revision, dtype, decoding; an endpoint adds the served
    model's name and the server's version), known before the first request; `generate`: one reply per
    (images, prompt text) request, in order. `benchmark.models.vlm.TextJudge` is the local one."""

    name: str

    @property
    def identity(self) -> str: ...

    def generate(self, requests: Sequence[tuple[Sequence[Any], str]]) -> list[str]: ...


COLUMN_INFO: dict[str, tuple[bool, str]] = {
    "G_O": (True, "overall of one sample: sqrt(G_SC x G_PQ), 0..10 (its mean over queries is not GEdit-Bench's "
                  "figure: see GEdit_O_<language>)"),
    "G_SC": (True, "semantic consistency of one sample: min of the SC reply's scores (editing success, "
                   "over-editing), 0..10"),
    "G_PQ": (True, "perceptual quality of one sample: min of the PQ reply's scores (naturalness, artifacts), 0..10"),
}
SUMMARY_INFO: dict[str, tuple[bool, str]] = {
    k: (True, f"GEdit-Bench's {k.split('_')[1]} for {k.split('_')[2].upper()} instructions"
              f"{' on the intersection subset' if k.endswith('_intersection') else ''}: the mean per task group, "
              "then the unweighted mean over the groups with ok rows (calculate_statistics.py)")
    for k in summary_keys()
}


@dataclass
class _Loaded:
    query: Query
    source: Any = None  # PIL image, as stored in the query set
    edit: Any = None    # PIL RGB image at the source's size
    error: str = ""


class _Samples(QuerySamples):
    def item(self, query: Query) -> _Loaded:
        return _Loaded(query)

    def load(self, out: _Loaded, q: Query, edit_path: Path) -> None:
        from PIL import Image

        from benchmark.imageio import load_rgb

        out.source = self.original(q, lambda img: img)
        edit = load_rgb(edit_path)
        # official: Image.open(edit).convert("RGB").resize(source.size), PIL's default filter (bicubic)
        out.edit = edit if edit.size == out.source.size else edit.resize(out.source.size, Image.Resampling.BICUBIC)


class GEditSuite(LazyComponents):
    """GEdit-Bench's SC / PQ / O per query by its official protocol (specification: docs/judge.md).

    backbone: a `JudgeBackbone` (configs/metrics/gedit_judge/: `local`, `benchmark.models.vlm.TextJudge`;
    `endpoint`, `benchmark.models.judge_endpoint.EndpointJudge`). prompts_file,
    prompts_commit, prompts_sha256: the fetched `vie_prompts.py`, the Step1X-Edit commit it was fetched at and its
    checksum (both enter the signature; the file is checked on first use). chunk_size: queries per round.
    """

    info = MetricInfo("gedit", VERSION, True, description="GEdit-Bench's official protocol: VIEScore tie prompts, "
                      "free-text replies parsed as the official parser, per-group means and their macro average")

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
        self.info = SuiteInfo(GEditSuite.info.name, VERSION, True, description=GEditSuite.info.description,
                              identity={"gedit": self.identity})

    @property
    def protocol(self) -> str:
        return f"Step1X-Edit@{self.prompts_commit}|vie_prompts.py sha256={self.prompts_sha256}|tie|parse=viescore-v1"

    @property
    def identity(self) -> str:
        """The backbone's identity and the protocol's (commit, prompt checksum, parser)."""
        return f"{self.backbone.identity}|{self.protocol}"

    def components(self) -> dict[str, str]:
        return {"judge": self.backbone.name, "backbone": self.backbone.identity, "protocol": self.protocol}

    @property
    def prompts(self) -> Prompts:
        """The tie prompts, read and checked on first use (a config that is only composed needs no file)."""
        if self._prompts is None:
            self._prompts = load_prompts(self.prompts_file, self.prompts_sha256, self.prompts_commit)
        return self._prompts

    applies_note = "a GEdit-Bench task type with an instruction (queryset=gedit)"

    def applies_to(self, query: Query, prompt_kind: str) -> bool:
        """GEdit-Bench's queries: its protocol quotes the instruction and averages over its task groups."""
        return query.edit_type in GEDIT_TYPES and bool((query.instruction or "").strip())

    def model_seconds(self) -> dict[str, float]:
        return {k: v for k, v in self.timings.items() if "forward" in k}

    def _score_chunk(self, items: list[_Loaded]) -> list[dict[str, Any]]:
        prompts = self.prompts
        rows = [{"query_id": it.query.id, "status": "failed", "reason": it.error} for it in items if it.error]
        good = [it for it in items if not it.error]
        if not good:
            return rows
        requests: list[tuple[list[Any], str]] = []
        for it in good:
            requests += [([it.source, it.edit], prompts.sc_for(it.query.instruction)), ([it.edit], prompts.pq)]
        t0 = time.perf_counter()
        replies = self.backbone.generate(requests)
        self.timings["judge forward"] = self.timings.get("judge forward", 0.0) + time.perf_counter() - t0
        if len(replies) != len(requests):
            raise RuntimeError(f"the judge backbone {self.backbone.name} answered {len(replies)} of "
                               f"{len(requests)} prompts")
        for n, it in enumerate(good):
            sc_reply, pq_reply = replies[2 * n], replies[2 * n + 1]
            q = it.query
            row: dict[str, Any] = {"query_id": q.id, "language": LANGUAGE_NAMES.get(q.language or "", q.language or ""),
                                   "intersection": "intersection" in (q.subsets or ()),
                                   "sc_reply": sc_reply, "pq_reply": pq_reply}
            parsed, why = {}, []
            for key, reply in (("SC", sc_reply), ("PQ", pq_reply)):
                try:
                    parsed[key] = parse_reply(reply)
                except ReplyError as err:
                    why.append(f"the {key} reply does not parse as GEdit-Bench's parser reads it ({err})")
            if why:
                rows.append(row | {c: math.nan for c in COLUMN_INFO} | {"status": "failed", "reason": "; ".join(why)})
                continue
            sc, pq, o = sample_scores(parsed["SC"], parsed["PQ"])
            rows.append(row | {"G_SC": sc, "G_PQ": pq, "G_O": o, "sc_scores": json.dumps(parsed["SC"]),
                               "pq_scores": json.dumps(parsed["PQ"]), "status": "ok", "reason": ""})
        return rows

    judge_column = "G_O"  # what `editmeter metaeval judges` compares between edits

    def score_images(self, items: Sequence[tuple[Query, Any, Any]]) -> list[dict[str, Any]]:
        """Rows for (query, source PIL image, edit PIL image) triples held in memory (human-preference sets); the
        edit is resized to the source's size as the official script does."""
        from PIL import Image

        return self._score_chunk([_Loaded(q, src, edit if edit.size == src.size else
                                          edit.resize(src.size, Image.Resampling.BICUBIC)) for q, src, edit in items])

    def score_queries(self, queryset: Any, queries: Sequence[Query], edit_paths: Sequence[Path], *, work_dir: Path,
                      num_workers: int = 0, progress: bool = True) -> Iterator[list[dict[str, Any]]]:
        """Yield lists of result rows (one dict per query), chunk by chunk."""
        from benchmark.metrics.chunking import by_source

        self.prompts  # noqa: B018 (a missing or altered prompt file stops the run before any judging)
        qs, paths = by_source(queries, edit_paths)
        yield from self._score_chunks(_Samples(queryset, qs, paths), self._score_chunk, desc="gedit",
                                      num_workers=num_workers, progress=progress)
