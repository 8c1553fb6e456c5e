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
from collections.abc import Sequence
from typing import Any

from benchmark.io.types import GEDIT_TYPES, MetricInfo, Query
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
from benchmark.metrics.prompted_judge import (
    JudgeBackbone,
    LoadedPair,
    PairAtSourceSize,
    PromptedJudgeSuite,
    at_source_size,
)

VERSION = "1.0"


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


__all__ = ["GEditSuite", "JudgeBackbone"]  # JudgeBackbone: benchmark.metrics.prompted_judge, named here too


class GEditSuite(PromptedJudgeSuite):
    """GEdit-Bench's SC / PQ / O per query by its official protocol (specification: docs/judge.md).

    backbone: a `JudgeBackbone` (configs/metrics/gedit_judge/: `local`, `benchmark.models.vlm.TextJudge`;
    `endpoint`, `benchmark.models.judge_endpoint.EndpointJudge`). prompts_file,
    prompts_commit, prompts_sha256: the fetched `vie_prompts.py`, the Step1X-Edit commit it was fetched at and its
    checksum (both enter the signature; the file is checked before the first edit). chunk_size: queries per round.
    """

    info = MetricInfo("gedit", VERSION, True, description="GEdit-Bench's official protocol: VIEScore tie prompts, "
                      "free-text replies parsed as the official parser, per-group means and their macro average")

    COLUMN_INFO, SUMMARY_INFO = COLUMN_INFO, SUMMARY_INFO  # the module's tables, as PromptedJudgeSuite reads them
    check_prompts_identity, load_prompts = staticmethod(check_identity), staticmethod(load_prompts)
    samples_class = PairAtSourceSize
    JUDGE_REQUESTS = (2, 1)  # SC over [source, edit], PQ over the edit

    @property
    def protocol(self) -> str:
        return f"Step1X-Edit@{self.prompts_commit}|vie_prompts.py sha256={self.prompts_sha256}|tie|parse=viescore-v2"

    applies_note = "a GEdit-Bench task type with an instruction (queryset=gedit)"

    def applies_to(self, query: Query, prompt_kind: str) -> bool:
        """GEdit-Bench's queries: its protocol quotes the instruction and averages over its task groups."""
        return query.edit_type in GEDIT_TYPES and bool((query.instruction or "").strip())

    def _rows(self, good: list[LoadedPair], prompts: Prompts) -> list[dict[str, Any]]:
        requests: list[tuple[list[Any], str]] = []
        for it in good:
            requests += [([it.source, it.edit], prompts.sc_for(it.query.instruction)), ([it.edit], prompts.pq)]
        replies = self._judge(requests)
        rows: list[dict[str, Any]] = []
        for n, it in enumerate(good):
            sc_reply, pq_reply = replies[2 * n], replies[2 * n + 1]
            q = it.query
            row: dict[str, Any] = {"query_id": q.id, "language": LANGUAGE_NAMES.get(q.language or "", q.language or ""),
                                   "intersection": "intersection" in (q.subsets or ()),
                                   "sc_reply": str(sc_reply), "pq_reply": str(pq_reply)}
            parsed, judged = self._read_replies(
                (("SC", sc_reply), ("PQ", pq_reply)), parse_reply, ReplyError,
                lambda key, err: f"the {key} reply does not parse as GEdit-Bench's parser reads it ({err})")
            if judged.get("status") == "failed":
                rows.append(row | {c: math.nan for c in COLUMN_INFO} | judged)
                continue
            sc, pq, o = sample_scores(parsed["SC"], parsed["PQ"])
            rows.append(row | {"G_SC": sc, "G_PQ": pq, "G_O": o, "sc_scores": json.dumps(parsed["SC"]),
                               "pq_scores": json.dumps(parsed["PQ"]), "status": "ok", "reason": ""} | judged)
        return rows

    judge_column = "G_O"  # what `editmeter metaeval judges` compares between edits

    def score_images(self, items: Sequence[tuple[Query, Any, Any]]) -> list[dict[str, Any]]:
        """Rows for (query, source PIL image, edit PIL image) triples held in memory (human-preference sets); the
        edit is resized to the source's size as the official script does."""
        return self._score_chunk([LoadedPair(q, src, at_source_size(edit, src.size)) for q, src, edit in items])
