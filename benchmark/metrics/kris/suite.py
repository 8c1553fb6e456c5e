"""KrisSuite: KRIS-Bench's official judging protocol (`protocol.py`) with a configurable judge backbone.

Per chunk of queries (sorted by source image): load the source as stored, the edit as the editor wrote it (the
official scripts send both files unchanged) and, for viewpoint_change, the ground truth; ask the backbone the
consistency, instruction (dual for the knowledge tasks) and quality prompts in the official order, and parse each
reply as the task's official script does. A reply that gives no usable score makes the query a failure row that keeps
every reply. The normalised per-category, meta-category and overall means are the leaderboard summary (`summary.py`).
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.io.types import KRIS_TYPES, MetricInfo, Query
from benchmark.metrics.kris.protocol import (
    DIMENSIONS,
    KNOWLEDGE_TASKS,
    MULTI_INPUT_TASKS,
    VIEW_TASK,
    Prompts,
    ReplyError,
    check_identity_if_set,
    load_prompts,
    parse_reply,
    summary_keys,
)
from benchmark.metrics.prompted_judge import LoadedPair, PairSamples, PromptedJudgeSuite

VERSION = "1.0"
# editmeter edit type -> the release's task folder
TASK_OF = {t: t.removeprefix("kris_") for t in KRIS_TYPES} | {
    "kris_rule_based_reasoning": "rule-based_reasoning", "kris_multi_element_composition": "multi-element_composition",
    "kris_multi_instruction_execution": "multi-instruction_execution"}
SUPPORTED = frozenset(t for t, task in TASK_OF.items() if task not in MULTI_INPUT_TASKS)

COLUMN_INFO: dict[str, tuple[bool, str]] = {
    "K_VC": (True, "KRIS-Bench's visual consistency of one edit: the consistency reply's 1..5 score"),
    "K_VQ": (True, "KRIS-Bench's visual quality of one edit: the quality reply's 1..5 score"),
    "K_IF": (True, "KRIS-Bench's instruction following of one edit: the instruction (or dual) reply's 1..5 score"),
    "K_KP": (True, "KRIS-Bench's knowledge plausibility of one edit (its ten knowledge tasks only, from the dual "
                   "reply): 1..5; NaN on the other tasks"),
}
_SHORT_NAMES = {"VC": "visual consistency", "VQ": "visual quality", "IF": "instruction following",
                "KP": "knowledge plausibility"}


def _summary_info(key: str) -> tuple[bool, str]:
    from benchmark.metrics.kris.protocol import SKIPPED_IN

    _k, group, dim = key.split("_", 2)
    skipped = SKIPPED_IN.get(group)
    caveat = (f"; NOT comparable with the paper's: its figure includes {' and '.join(skipped)} (several input "
              "images, not supported here)" if skipped else "")
    if dim == "AVG":
        what = "every score" if group == "overall" else f"the {group} group's scores"
        return True, (f"KRIS-Bench's {group} AVG: the mean of {what}, normalised (score - 1) x 25, every dimension "
                      f"pooled (summarize.py){caveat}")
    return True, (f"KRIS-Bench's {group} {_SHORT_NAMES[dim]}: the mean of its normalised scores (summarize.py), "
                  f"0..100{caveat}")


SUMMARY_INFO: dict[str, tuple[bool, str]] = {k: _summary_info(k) for k in summary_keys()}


@dataclass
class KrisPair(LoadedPair):
    """A query's source, edit and (viewpoint_change) ground truth."""

    reference: Any = None


class KrisSamples(PairSamples):
    """The source as stored, the edit as written, and the ground truth of a viewpoint_change query."""

    def item(self, query: Query) -> KrisPair:
        return KrisPair(query)

    def load(self, out: KrisPair, q: Query, edit_path: Path) -> None:
        from benchmark.io.imageio import load_rgb

        super().load(out, q, edit_path)
        if TASK_OF.get(q.edit_type) == VIEW_TASK:
            if not q.target_image:
                out.error = ("viewpoint_change needs its ground-truth image (gt_img), which this query lacks; the "
                             "official script skips such an entry")
                return
            out.reference = load_rgb(self.queryset.path(q.target_image))


class KrisSuite(PromptedJudgeSuite):
    """KRIS-Bench's VC / VQ / IF / KP per edit by its official protocol (specification: docs/judge.md).

    backbone: a `JudgeBackbone` (configs/metrics/kris_judge/: `local`, `benchmark.models.vlm.TextJudge`;
    `endpoint`, `benchmark.models.judge_endpoint.EndpointJudge`; `openai`, `benchmark.metrics.kris.api.KrisApiJudge`).
    prompts_file, prompts_commit, prompts_sha256: the fetched `utils/prompts.py`, the Kris_Bench commit it was fetched
    at and its checksum (both enter the signature; the file is checked before the first edit). chunk_size: queries
    per round.
    """

    info = MetricInfo("kris", VERSION, True, description="KRIS-Bench's official protocol: consistency, instruction "
                      "(with knowledge on its knowledge tasks) and quality prompts, 1-5 replies parsed as the official "
                      "scripts, normalised per-category, meta-category and overall means")

    COLUMN_INFO, SUMMARY_INFO = COLUMN_INFO, SUMMARY_INFO
    # a null checksum (the shipped config) builds, and stops every run at the preflight (load_prompts)
    check_prompts_identity, load_prompts = staticmethod(check_identity_if_set), staticmethod(load_prompts)
    samples_class = KrisSamples
    # VC over [source, edit], IF (or IF + KP) over [source, edit], VQ over the edit; viewpoint_change's IF adds the
    # ground truth (a third image), which the budget's estimate leaves out
    JUDGE_REQUESTS = (2, 2, 1)

    @property
    def protocol(self) -> str:
        return (f"Kris_Bench@{self.prompts_commit}|prompts.py sha256={self.prompts_sha256}"
                "|consist,instruction|dual|view,quality|parse=kris-v1")

    applies_note = "a single-source KRIS-Bench task with an instruction (queryset=kris)"

    def applies_to(self, query: Query, prompt_kind: str) -> bool:
        """KRIS-Bench's single-source queries: its prompts quote the instruction, and its scripts for the
        several-input tasks are not supported."""
        return query.edit_type in SUPPORTED and bool((query.instruction or "").strip())

    def _requests(self, it: KrisPair, prompts: Prompts) -> list[tuple[str, tuple[list[Any], str]]]:
        """(request name, (images, text)) of one query, in the official order: VC, IF (dual on a knowledge task), VQ."""
        q, task = it.query, TASK_OF[it.query.edit_type]
        images = [it.source, it.edit] + ([it.reference] if task == VIEW_TASK else [])
        return [("VC", ([it.source, it.edit], prompts.consistency(q.instruction))),
                ("IF", (images, prompts.instruction(task, q.instruction, q.explanation or ""))),
                ("VQ", ([it.edit], prompts.quality))]

    def _rows(self, good: list[KrisPair], prompts: Prompts) -> list[dict[str, Any]]:
        per_query = [self._requests(it, prompts) for it in good]
        replies = self._judge([req for reqs in per_query for _name, req in reqs])
        rows: list[dict[str, Any]] = []
        n = 0
        for it, reqs in zip(good, per_query, strict=True):
            task = TASK_OF[it.query.edit_type]
            row: dict[str, Any] = {"query_id": it.query.id}
            mine = [(name, replies[n + k]) for k, (name, _req) in enumerate(reqs)]
            n += len(reqs)
            row |= {f"{name.lower()}_reply": str(reply) for name, reply in mine}

            def what(name: str, task: str = task) -> str:
                return "dual (instruction and knowledge)" if name == "IF" and task in KNOWLEDGE_TASKS else name

            parsed, judged = self._read_replies(
                mine, {name: functools.partial(parse_reply, task, name) for name, _ in mine}, ReplyError,
                lambda name, err, task=task: f"the {what(name)} reply gives no usable score as KRIS-Bench's {task} "
                                             f"script reads it ({err})")
            if judged.get("status") == "failed":
                rows.append(row | {c: math.nan for c in DIMENSIONS} | judged)
                continue
            scores: dict[str, int] = {}
            for name, _ in mine:
                scores |= parsed[name]
            rows.append(row | {c: float(scores[c]) if c in scores else math.nan for c in DIMENSIONS}
                        | {"k_scores": json.dumps(scores, sort_keys=True), "status": "ok", "reason": ""} | judged)
        return rows
