"""RiseSuite: RISEBench's judging protocol (`protocol.py`, its authors' `gpt_eval.py` as fixed in April 2026) with a
configurable judge backbone (the `JudgeBackbone` interface of metrics=gedit).

Per chunk of queries (sorted by source image): load the source, the reference image where the sample has one and
the edit; shrink each to at most 768 x 768 pixels as the official request does (PIL's `thumbnail`); ask the backbone
the sample's requests (consistency, reasoning, plausibility: `protocol.requests_for`); read each reply as the
official parser does. A reply without one in-range score makes the query a failure row that keeps every reply.
Accuracy, score and the per-category and per-subtask table are the leaderboard summary (`summary.py`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.io.rise_protocol import (
    BINARY,
    COMPLETION_RULES,
    DIMENSIONS,
    SCALE,
    Prompts,
    ReplyError,
    check_identity,
    load_prompts,
    parse_reply,
    requests_for,
    sample_scores,
    summary_keys,
)
from benchmark.io.types import RISE_TYPES, MetricInfo, Query
from benchmark.metrics.prompted_judge import LoadedPair, PairSamples, PromptedJudgeSuite

VERSION = "1.0"
IMAGE_SIZE = 768  # the official `gpt_generate(image_size=768)`: each image's longer side at most this

COLUMN_INFO: dict[str, tuple[bool, str]] = {
    "RISE_solved": (True, "1 where the sample is fully solved by RISEBench's rule (every judged dimension 5; a "
                          "consistency-free sample: reasoning and plausibility), else 0 (calculate_completion)"),
    "RISE_score": (True, "RISEBench's weighted 1-5 score of one sample (calculate_score: 0.3 consistency + 0.5 "
                         "reasoning + 0.2 plausibility; logical 0.3 / 0.7; halved, at least 1, where reasoning is 1)"),
    "RISE_reasoning": (True, "instruction reasoning, 1-5 (logical: its 0/1 reply as 1 or 5)"),
    "RISE_consistency": (True, "appearance consistency, 1-5 (logical: its 0/1 reply as 1 or 5); NaN where the "
                               "release marks the sample consistency-free"),
    "RISE_plausibility": (True, "visual plausibility, 1-5; NaN for logical samples (not judged)"),
}


def _summary_doc(key: str) -> str:
    what = key.removeprefix("RISE_")
    if what.endswith("_pct") or what == "score_pct":
        return f"RISEBench's {what.removesuffix('_pct')} as a percentage: 25 x (score - 1)"
    if what.endswith("accuracy"):
        return (f"RISEBench's accuracy ({what.removesuffix('accuracy').strip('_') or 'overall'}): the share of ok "
                "samples fully solved (the official script also counts each failure row as unsolved)")
    if what.endswith("score"):
        return f"RISEBench's mean 1-5 score ({what.removesuffix('score').strip('_') or 'overall'})"
    return f"RISEBench's mean {what.replace('_', ' ')} (1-5) over the samples judged on it"


SUMMARY_INFO: dict[str, tuple[bool, str]] = {k: (True, _summary_doc(k)) for k in summary_keys()}


@dataclass
class RisePair(LoadedPair):
    """A RISEBench sample's images: the source, the reference image (where it has one) and the edit."""

    reference: Any = None


class RiseSamples(PairSamples):
    """The source as stored, the reference image where the query has one, and the edit (RGB) as the editor wrote
    it: the official script sends the files it finds."""

    def item(self, query: Query) -> RisePair:
        return RisePair(query)

    def load(self, out: RisePair, q: Query, edit_path: Path) -> None:
        from benchmark.io.imageio import load_rgb

        super().load(out, q, edit_path)
        if q.reference_image:
            out.reference = load_rgb(self.queryset.path(q.reference_image))


def official_size(image: Any) -> Any:
    """The image as the official request encodes it: `thumbnail((768, 768))` (aspect kept, only ever smaller)."""
    image = image.copy()
    image.thumbnail((IMAGE_SIZE, IMAGE_SIZE))
    return image


class RiseSuite(PromptedJudgeSuite):
    """RISEBench's instruction reasoning, appearance consistency, visual plausibility, score and solved per query
    by its official protocol (specification: docs/judge.md, "RISEBench's protocol").

    backbone: a `JudgeBackbone` (configs/metrics/rise_judge/: `local`, `endpoint`, `openai`). prompts_file,
    prompts_commit, prompts_sha256: the fetched `utils.py` (saved as .txt), the RISEBench commit it was fetched at
    and its checksum (both enter the signature; the file is checked before the first edit). chunk_size: queries per
    round. completion: which solved rule, "2026-04" (the official script since its April 2026 fix, the default) or
    "2025-04" (before it: a consistency-free sample is never solved), to reproduce figures published before the fix.
    """

    info = MetricInfo("rise", VERSION, True, description="RISEBench's official protocol (gpt_eval.py as fixed in "
                      "April 2026): per-category prompts, 'Final Score' replies parsed as the official parser, "
                      "accuracy as the share of samples fully solved, per category and subtask")

    COLUMN_INFO, SUMMARY_INFO = COLUMN_INFO, SUMMARY_INFO  # the module's tables, as PromptedJudgeSuite reads them
    check_prompts_identity, load_prompts = staticmethod(check_identity), staticmethod(load_prompts)
    samples_class = RiseSamples
    # at most three per sample (consistency over two images, reasoning over one or two, plausibility over the edit;
    # logical samples send two, a consistency-free one fewer): the budget's estimate takes the largest
    JUDGE_REQUESTS = (2, 2, 1)

    def __init__(self, *, completion: str = "2026-04", **kwargs: Any) -> None:
        if completion not in COMPLETION_RULES:
            raise ValueError(f"completion must be one of {', '.join(COMPLETION_RULES)}, not {completion!r}")
        self.completion = completion
        super().__init__(**kwargs)

    @property
    def protocol(self) -> str:
        return (f"RISEBench@{self.prompts_commit}|utils.py sha256={self.prompts_sha256}|thumbnail{IMAGE_SIZE}"
                f"|parse=extract-v1|completion={self.completion}")

    applies_note = "a RISEBench category with an instruction (queryset=rise)"

    def applies_to(self, query: Query, prompt_kind: str) -> bool:
        """RISEBench's queries: its prompts are per category and quote the instruction."""
        return query.edit_type in RISE_TYPES and bool((query.instruction or "").strip())

    def _rows(self, good: list[RisePair], prompts: Prompts) -> list[dict[str, Any]]:
        requests: list[tuple[list[Any], str]] = []
        plans, refused = [], []
        for it in good:
            q = it.query
            try:
                plan = requests_for(q.edit_type, q.instruction, dict(q.judge_hints), prompts)
                if "reference" in {role for r in plan for role in r.images} and it.reference is None:
                    raise ValueError("the release names a reference image (reference_img) but the query has none")
            except (ValueError, KeyError, IndexError) as err:  # a query set not built by the importer
                refused.append({"query_id": q.id, "status": "failed", "reason": f"RISEBench cannot judge this "
                                f"query as the official script would: {err}"})
                continue
            images = {"source": it.source, "edit": it.edit, "reference": it.reference}
            sized = {role: official_size(im) for role, im in images.items() if im is not None}
            requests += [([sized[role] for role in r.images], r.text) for r in plan]
            plans.append((it, plan))
        replies = self._judge(requests) if requests else []
        rows: list[dict[str, Any]] = list(refused)
        at = 0
        for it, plan in plans:
            q = it.query
            mine, at = replies[at:at + len(plan)], at + len(plan)
            row: dict[str, Any] = {"query_id": q.id, "rise_subtask": q.hint("subtask", "") or ""}
            # every reply kept; "" for a dimension the sample is not judged on (consistency-free, logical)
            row |= {f"rise_reply_{d}": "" for d in DIMENSIONS}
            row |= {f"rise_reply_{r.dimension}": str(reply) for r, reply in zip(plan, mine, strict=True)}
            scale = BINARY if q.edit_type == "rise_logical" else SCALE
            parsed, judged = self._read_replies(
                [(r.dimension, reply) for r, reply in zip(plan, mine, strict=True)],
                functools.partial(parse_reply, scale=scale), ReplyError,
                lambda dim, err, scale=scale: f"the {dim} reply does not hold one {scale[0]}..{scale[1]} score as "
                                              f"RISEBench's parser reads it ({err})")
            if judged.get("status") == "failed":
                rows.append(row | {c: math.nan for c in COLUMN_INFO} | judged)
                continue
            s = sample_scores(q.edit_type, dict(q.judge_hints), parsed, self.completion)
            rows.append(row | {"RISE_solved": s["solved"], "RISE_score": s["score"], "RISE_reasoning": s["reasoning"],
                               "RISE_consistency": s["consistency"], "RISE_plausibility": s["plausibility"],
                               "status": "ok", "reason": ""} | judged)
        return rows

