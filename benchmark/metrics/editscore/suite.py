"""EditScoreSuite: EditScore's judging protocol (`protocol.py`) with its local judge
(`benchmark.models.editscore.EditScoreJudge`).

Per chunk of queries (sorted by source image): load the source as it is and the edit resized to the source's size
(PIL's default filter, as the official `evaluation.py`), then for each pass k of `num_pass` ask the judge the SC
prompt over [source, edit] and the PQ prompt over the edit, both sampled after seeding with `seed + k` (the official
`evaluate`), parse each reply the official way and reduce the passes. A reply that does not parse makes the query a
failure row that keeps every reply (the official code would retry with the same seed, which gives the same reply,
and then put a random score in its place).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from typing import Any, ClassVar

from benchmark.io.types import MetricInfo, Query
from benchmark.metrics.editscore.protocol import (
    PARTS,
    REDUCTIONS,
    Prompts,
    ReplyError,
    check_identity,
    load_prompts,
    parse_reply,
    pass_scores,
    reduce_passes,
)
from benchmark.metrics.prompted_judge import LoadedPair, PairAtSourceSize, PromptedJudgeSuite, at_source_size

VERSION = "1.0"
PARSER_VERSION = "editscore-v2"  # v2: the `regex` module, as officially

COLUMN_INFO: dict[str, tuple[bool, str]] = {
    "ES_overall": (True, "EditScore's overall of one edit: sqrt(min SC x min PQ) on 0..10, averaged over the passes "
                         "(average_first: sqrt of the averaged prompt_following x perceptual_quality)"),
    "ES_prompt_following": (True, "EditScore's prompt following of one edit: the SC reply's first score on 0..10, "
                                  "averaged over the passes"),
    "ES_consistency": (True, "EditScore's consistency of one edit: the SC reply's second score on 0..10, averaged "
                             "over the passes"),
    "ES_perceptual_quality": (True, "EditScore's perceptual quality of one edit: min of the PQ reply's scores on "
                                    "0..10, averaged over the passes"),
}
SUMMARY_INFO: dict[str, tuple[bool, str]] = {}
COLUMN_OF = {part: f"ES_{part}" for part in PARTS}


class EditScoreSuite(PromptedJudgeSuite):
    """EditScore's prompt following, consistency, perceptual quality and overall per edit (specification:
    docs/judge.md, "EditScore").

    backbone: `benchmark.models.editscore.EditScoreJudge` (or any backbone whose `generate(requests, seeds=)` seeds
    each request). prompts_file, prompts_commit, prompts_sha256: the fetched `vie_prompts.py`, the EditScore commit
    it was fetched at and its checksum. score_range: the scale the prompts ask for (the official 25). num_pass:
    sampled passes per edit (1: the published setting; 4: the paper's avg@4). reduction: average_last |
    average_first. seed: pass k is sampled with seed + k. chunk_size: queries per round.
    """

    info = MetricInfo("editscore", VERSION, True, description="EditScore (VectorSpaceLab): Qwen2.5-VL with the "
                      "EditScore LoRA, reasoning-first tie prompts on a 0-25 scale, sampled replies parsed as the "
                      "official parser, prompt following / consistency / perceptual quality / overall per edit")

    COLUMN_INFO, SUMMARY_INFO = COLUMN_INFO, SUMMARY_INFO  # the module's tables, as PromptedJudgeSuite reads them
    check_prompts_identity, load_prompts = staticmethod(check_identity), staticmethod(load_prompts)
    samples_class = PairAtSourceSize
    JUDGE_REQUESTS = (2, 1)  # per pass: SC over [source, edit], PQ over the edit

    @classmethod
    def judge_requests(cls, config: Any) -> tuple[int, ...]:
        """SC and PQ of each of the `num_pass` passes."""
        passes = config.get("num_pass", 1) if hasattr(config, "get") else 1
        return cls.JUDGE_REQUESTS * (passes if isinstance(passes, int) and passes > 0 else 1)
    judge_column = "ES_overall"  # what `editmeter metaeval judges` compares between edits
    # EditReward-Bench's dimensions -> the column a pair of that dimension is compared on
    dimension_columns: ClassVar[dict[str, str]] = {"prompt_following": "ES_prompt_following",
                                                   "consistency": "ES_consistency", "overall": "ES_overall"}

    def __init__(self, *, backbone: Any, prompts_file: str, prompts_commit: str, prompts_sha256: str,
                 score_range: int = 25, num_pass: int = 1, reduction: str = "average_last", seed: int = 42,
                 chunk_size: int = 16, load_threads: int | None = None, prefetch: bool = False,
                 device: str = "auto") -> None:
        for key, v in (("score_range", score_range), ("num_pass", num_pass)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{key} must be a positive integer, not {v!r}")
        if reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be one of {', '.join(REDUCTIONS)}, not {reduction!r}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed must be an integer, not {seed!r}")
        self.score_range, self.num_pass, self.reduction, self.seed = score_range, num_pass, reduction, seed
        super().__init__(backbone=backbone, prompts_file=prompts_file, prompts_commit=prompts_commit,
                         prompts_sha256=prompts_sha256, chunk_size=chunk_size, load_threads=load_threads,
                         prefetch=prefetch, device=device)

    @property
    def protocol(self) -> str:
        from importlib.metadata import version

        return (f"EditScore@{self.prompts_commit}|vie_prompts.py sha256={self.prompts_sha256}"
                f"|score_range={self.score_range}|num_pass={self.num_pass}|reduction={self.reduction}"
                f"|seed={self.seed}+pass|parse={PARSER_VERSION},json_repair={version('json_repair')}")

    def _load_prompts(self) -> Prompts:
        return load_prompts(self.prompts_file, self.prompts_sha256, self.prompts_commit, self.score_range)

    applies_note = "a query with an instruction"

    def applies_to(self, query: Query, prompt_kind: str) -> bool:
        """Any query with an instruction: the SC prompt quotes it."""
        return bool((query.instruction or "").strip())

    def _judge_seeded(self, requests: list[tuple[list[Any], str]], seeds: list[int]) -> list[str]:
        """The backbone's replies to `requests`, request k sampled with `seeds[k]`, timed as judge forward time."""
        t0 = time.perf_counter()
        replies = self.backbone.generate(requests, seeds=seeds)
        self.timings["judge forward"] = self.timings.get("judge forward", 0.0) + time.perf_counter() - t0
        if len(replies) != len(requests):
            raise RuntimeError(f"the judge backbone {self.backbone.name} answered {len(replies)} of "
                               f"{len(requests)} prompts")
        return replies

    def _rows(self, good: list[LoadedPair], prompts: Prompts) -> list[dict[str, Any]]:
        requests: list[tuple[list[Any], str]] = []
        seeds: list[int] = []
        for it in good:
            for k in range(self.num_pass):
                requests += [([it.source, it.edit], prompts.sc_for(it.query.instruction)), ([it.edit], prompts.pq)]
                seeds += [self.seed + k, self.seed + k]
        replies = self._judge_seeded(requests, seeds)
        rows: list[dict[str, Any]] = []
        for n, it in enumerate(good):
            mine = replies[2 * self.num_pass * n: 2 * self.num_pass * (n + 1)]
            sc_replies, pq_replies = mine[0::2], mine[1::2]
            row: dict[str, Any] = {"query_id": it.query.id, "es_sc_replies": json.dumps(sc_replies),
                                   "es_pq_replies": json.dumps(pq_replies)}
            passes, sc_scores, pq_scores, why = [], [], [], []
            for k, (sc_reply, pq_reply) in enumerate(zip(sc_replies, pq_replies, strict=True)):
                try:
                    sc = parse_reply(sc_reply, min_scores=2).scores
                except ReplyError as err:
                    why.append(f"pass {k}: the SC reply does not give two scores as EditScore's parser reads it "
                               f"({err})")
                try:
                    pq = parse_reply(pq_reply).scores
                except ReplyError as err:
                    why.append(f"pass {k}: the PQ reply does not give a score as EditScore's parser reads it ({err})")
                if not why:
                    passes.append(pass_scores(sc, pq, self.score_range))
                    sc_scores.append(sc)
                    pq_scores.append(pq)
            if why:
                rows.append(row | {c: math.nan for c in COLUMN_INFO} | {"status": "failed", "reason": "; ".join(why)})
                continue
            scores = reduce_passes(passes, self.reduction)
            rows.append(row | {COLUMN_OF[p]: scores[p] for p in PARTS} | {
                "es_sc_scores": json.dumps(sc_scores), "es_pq_scores": json.dumps(pq_scores), "status": "ok",
                "reason": ""})
        return rows

    def score_images(self, items: Sequence[tuple[Query, Any, Any]]) -> list[dict[str, Any]]:
        """Rows for (query, source PIL image, edit PIL image) triples held in memory (human-preference sets); the
        edit is resized to the source's size as the official `evaluation.py` does."""
        return self._score_chunk([LoadedPair(q, src.convert("RGB"), at_source_size(edit, src.size))
                                  for q, src, edit in items])
