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
from typing import Any

from benchmark.io.types import IMGEDIT_TYPES, MetricInfo, Query
from benchmark.metrics.imgedit.protocol import (
    Prompts,
    ReplyError,
    check_identity,
    edit_score,
    load_prompts,
    parse_reply,
    summary_keys,
)
from benchmark.metrics.prompted_judge import LoadedPair, PairSamples, PromptedJudgeSuite

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


class ImgEditSuite(PromptedJudgeSuite):
    """ImgEdit-Bench Basic's score per edit by its official protocol (specification: docs/judge.md).

    backbone: a `JudgeBackbone` (benchmark/metrics/prompted_judge.py; configs/metrics/imgedit.yaml:
    `benchmark.models.vlm.TextJudge`). prompts_file, prompts_commit, prompts_sha256: the fetched `prompts.json`, the
    ImgEdit commit it was fetched at and its checksum (both enter the signature; the file is checked on first use).
    chunk_size: queries per round.
    """

    info = MetricInfo("imgedit", VERSION, True, description="ImgEdit-Bench Basic's official protocol: per-type "
                      "prompts, three 1-5 scores per edit parsed as the official step 1, per-type means and their "
                      "overall mean")

    COLUMN_INFO, SUMMARY_INFO = COLUMN_INFO, SUMMARY_INFO  # the module's tables, as PromptedJudgeSuite reads them
    check_prompts_identity, load_prompts = staticmethod(check_identity), staticmethod(load_prompts)
    samples_class = PairSamples
    JUDGE_REQUESTS = (2,)  # one prompt over [source, edit]

    @property
    def protocol(self) -> str:
        return (f"ImgEdit@{self.prompts_commit}|prompts.json sha256={self.prompts_sha256}|text,source,edit"
                "|parse=step1-v1")

    applies_note = "an ImgEdit-Bench edit type with an instruction (queryset=imgedit)"

    def applies_to(self, query: Query, prompt_kind: str) -> bool:
        """ImgEdit-Bench's queries: its prompts are per edit type and quote the instruction."""
        return query.edit_type in IMGEDIT_TYPES and bool((query.instruction or "").strip())

    def _rows(self, good: list[LoadedPair], prompts: Prompts) -> list[dict[str, Any]]:
        replies = self._judge([([it.source, it.edit], prompts.for_edit(it.query.edit_type.removeprefix("imgedit_"),
                                                                       it.query.instruction)) for it in good])
        rows: list[dict[str, Any]] = []
        for it, reply in zip(good, replies, strict=True):
            row: dict[str, Any] = {"query_id": it.query.id, "ie_reply": str(reply)}
            parsed, judged = self._read_replies(
                (("edit", reply),), parse_reply, ReplyError,
                lambda _key, err: f"the reply does not hold three 1..5 scores as ImgEdit-Bench's step 1 reads them "
                                  f"({err})")
            if judged.get("status") == "failed":
                rows.append(row | {"IE_score": math.nan} | judged)
                continue
            scores = parsed["edit"]
            rows.append(row | {"IE_score": edit_score(scores), "ie_scores": json.dumps(scores), "status": "ok",
                               "reason": ""} | judged)
        return rows
