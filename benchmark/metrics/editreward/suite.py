"""EditRewardSuite: EditReward's reward per query (`benchmark.models.editreward.EditRewardScorer`) with the authors'
prompts (`protocol.py`), through the judged protocols' shared suite (`PromptedJudgeSuite`: chunked loading, rows
with status and reason, the prompt files checked before the first edit).

Per chunk of queries (sorted by source image): the source as stored and the edit as the editor wrote it (the
authors' inferencer resizes each image on its own), both heads' prompts for the instruction, one reward per query.
An instruction that holds a special token of the tokenizer is a failure row (it would add a reward token or an
image placeholder to the prompt).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from benchmark.io.types import MetricInfo, Query
from benchmark.metrics.editreward.protocol import Prompts, check_identity, load_prompts
from benchmark.metrics.prompted_judge import LoadedPair, PairSamples, PromptedJudgeSuite

VERSION = "1.0"

COLUMN_INFO: dict[str, tuple[bool, str]] = {
    "ER": (True, "EditReward's reward of one edit: the mean over its two heads of the predicted reward mean; "
                 "unbounded (no fixed range), comparable between edits of one instruction and source"),
    "ER_log_sigma": (False, "EditReward's log sigma of one edit (the mean over its heads of the predicted log "
                            "standard deviation): the model's uncertainty, not a quality"),
    "ER_following": (True, "head 0's reward mean (the edit-following prompt), unbounded"),
    "ER_quality": (True, "head 1's reward mean (the edit-quality prompt), unbounded"),
}


class EditRewardSuite(PromptedJudgeSuite):
    """EditReward's reward per query (specification: docs/judge.md, "EditReward").

    backbone: an `EditRewardScorer` (name, identity, head_outputs). prompts_file, prompts_commit, prompts_sha256:
    the fetched `prompts.py`, the EditReward commit and its checksum; suffix_file, suffix_sha256: the fetched
    `data_collator_qwen_edit.py` (same commit) and its checksum. All enter the signature; the files are checked on
    first use. chunk_size: queries per round (the scorer batches within it).
    """

    info = MetricInfo("editreward", VERSION, True, description="EditReward (TIGER-Lab): a Qwen2.5-VL reward model's "
                      "reward of each edit, the authors' prompts, preprocessing and forward")

    COLUMN_INFO, SUMMARY_INFO = COLUMN_INFO, {}
    samples_class = PairSamples
    applies_note = "a query with an instruction"
    judge_column = "ER"  # what `editmeter metaeval judges` compares between edits

    def __init__(self, *, suffix_file: str, suffix_sha256: str, **kwargs: Any) -> None:
        self.suffix_file, self.suffix_sha256 = str(suffix_file), suffix_sha256
        super().__init__(**kwargs)

    @property
    def protocol(self) -> str:
        return (f"EditReward@{self.prompts_commit}|prompts.py sha256={self.prompts_sha256}"
                f"|data_collator_qwen_edit.py sha256={self.suffix_sha256}|heads=following,quality")

    def _check_identity(self) -> None:
        check_identity(self.prompts_commit, self.prompts_sha256, self.suffix_sha256)

    def _load_prompts(self) -> Prompts:
        return load_prompts(self.prompts_file, self.prompts_sha256, self.prompts_commit, self.suffix_file,
                            self.suffix_sha256)

    def model_seconds(self) -> dict[str, float]:
        return {k: v for k, v in self.timings.items() if "forward" in k}

    def applies_to(self, query: Query, prompt_kind: str) -> bool:
        """Any query with an instruction (the prompts quote it)."""
        return bool((query.instruction or "").strip())

    def _rows(self, good: list[LoadedPair], prompts: Prompts) -> list[dict[str, Any]]:
        from benchmark.models.editreward_model import pool_heads

        rows: list[dict[str, Any]] = []
        todo = []
        for it in good:
            why = self.backbone.unscorable(it.query.instruction or "")
            if why:
                rows.append({"query_id": it.query.id, **{c: math.nan for c in COLUMN_INFO}, "status": "failed",
                             "reason": why})
            else:
                todo.append(it)
        if not todo:
            return rows
        t0 = time.perf_counter()
        heads = self.backbone.head_outputs([it.query.instruction for it in todo], [it.source for it in todo],
                                           [it.edit for it in todo], prompts)
        self.timings["editreward forward"] = self.timings.get("editreward forward", 0.0) + time.perf_counter() - t0
        pooled = pool_heads(heads)
        for n, it in enumerate(todo):
            row = {"query_id": it.query.id, "ER": float(pooled[n, 0]), "ER_log_sigma": float(pooled[n, 1]),
                   "ER_following": float(heads[0, n, 0]), "ER_quality": float(heads[1, n, 0])}
            ok = all(math.isfinite(row[c]) for c in COLUMN_INFO)
            rows.append(row | {"status": "ok" if ok else "failed", "reason": "" if ok else "a reward is not finite"})
        return rows

    def score_images(self, items: Sequence[tuple[Query, Any, Any]]) -> list[dict[str, Any]]:
        """Rows for (query, source PIL image, edit PIL image) triples held in memory (human-preference sets)."""
        return self._score_chunk([LoadedPair(q, src, edit) for q, src, edit in items])
