"""RISEBench's judging protocol as PhoenixZ810/RISEBench's `gpt_eval.py` runs it after its April 2026 fix (commit
ce8cba37a2ed73a6d9770f0ef86023ae528ec254), without its code or prompt text.

- Prompts (`load_prompts`): the fourteen `prompt_*` strings of the repository's `utils.py`, read with `ast` from the
  file `make data NAME=rise` fetches at the pinned commit with its sha256 (datasets/manifests/rise.json); never
  imported. Which prompts a sample gets, with which images, is `requests_for` (the official `eval_vanilla`): up to
  three requests, consistency, reasoning and (temporal, causal, spatial) plausibility, each the prompt text then its
  images. The text is filled with `str.format` as the official script fills it.
- Parsing (`official_numbers`, `parse_reply`): the official `extract` (the first `Final Score` line with digits,
  else a `Final Scores` line; every run of digits after it). Deviations (docs/judge.md): a reply with no number, with
  more than one number, or with a number outside the dimension's scale (1..5; 0..1 for the logical prompts) is a
  `ReplyError`, so the sample is a failure row that keeps its replies. The official script counts a reply without a
  number as an unsolved sample, crashes its run on more numbers than the dimensions (or, for a logical sample, shifts
  them into the wrong dimensions) and scores an out-of-range number as it is.
- Per sample (`sample_scores`): the logical 0/1 scores become 1 or 5 (`4 x min(s, 1) + 1`); the weighted score and
  the `Reasoning == 1` halving (`calculate_score`, its quirk kept: a `consistency_free` cell the release leaves empty
  counts as true there); solved (`calculate_completion` as fixed in April 2026): every judged dimension 5, where a
  consistency-free sample needs reasoning and plausibility only. Before the fix a consistency-free sample could never
  be solved.
- Aggregation (`official_table`): accuracy (share solved), score and score percentage (`25 x (score - 1)`) overall,
  per category and per known subtask, and the dimension means, as the official `main` writes its CSV.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.io import pinned_prompts as pinned
from benchmark.io.pinned_prompts import ProtocolError  # noqa: F401 (raised by load_prompts; tests import it here)

SOURCE_REPO = "PhoenixZ810/RISEBench"
PROMPTS_PATH = "utils.py"
PROMPT_NAMES = ("prompt_consist", "prompt_reasoning", "prompt_reasoning_w_input", "prompt_generation",
                "prompt_spatial_ref", "prompt_spatial_ref_img", "prompt_spatial_ref_w_input", "prompt_spatial_qual",
                "prompt_spatial_cons", "prompt_logical_cons_ans", "prompt_logical_cons", "prompt_logical_txt",
                "prompt_logical_img", "prompt_logical_img_wo_q")
# editmeter edit type -> the release's category, in the official table's order
CATEGORIES: dict[str, str] = {"rise_temporal": "temporal_reasoning", "rise_causal": "causal_reasoning",
                              "rise_spatial": "spatial_reasoning", "rise_logical": "logical_reasoning"}
SHORT = {"rise_temporal": "temporal", "rise_causal": "causal", "rise_spatial": "spatial", "rise_logical": "logical"}
# the official subtask table (gpt_eval.py `subtask_dic`): prefix -> subtasks, in its order; a subtask not listed
# there is in no per-subtask figure (the official table leaves it out too)
SUBTASKS: dict[str, tuple[str, ...]] = {
    "Temp": ("Life Progression", "Material Progression", "Environmental Cycles", "Societal Transformation"),
    "Causal": ("Structural Deformation", "State Transition", "Chemical and Biological Transformation",
               "Physics Manifestation"),
    "Spa": ("Component Assembly", "Object Arrangement", "Viewpoint Generation", "Structural Inference",
            "Layout Reasoning"),
    "Logic": ("Pattern Prediction", "Mathematical Derivation", "Puzzle Solving"),
}
DIMENSIONS = ("consistency", "reasoning", "plausibility")  # the official judge1, judge2, judge3
SCALE = (1, 5)
BINARY = (0, 1)  # the logical prompts' scale
# the release's cells that the official script tests with `pd.isna`; the importer keeps each as the JSON text of
# the cell, "nan" where the release has the column but the sample has no value (pandas' fill)
FLAG_HINTS = ("consistency_free", "reasoning_img", "reasoning_wo_ins")
TEXT_HINTS = ("reference", "reference_txt", "subtask")
EMPTY_CELLS = ("nan", "null")

_FINAL_SCORE = re.compile(r"\*?\*?Final Score\*?\*?:?\s*([\d*\s,\n]*)", re.IGNORECASE)
_FINAL_SCORES = re.compile(r"\*?\*?Final Scores\*?\*?:?\s*([\d*\s,\n]*)", re.IGNORECASE)
_DIGITS = re.compile(r"\d+")


class ReplyError(ValueError):
    """A judge reply without exactly one in-range score where RISEBench's parser looks; the message says why and
    what the official script would do with it."""


@dataclass(frozen=True)
class Prompts:
    """The fourteen prompt texts and where they come from."""

    texts: Mapping[str, str]
    commit: str
    sha256: str

    def __getitem__(self, name: str) -> str:
        return self.texts[name]


@dataclass(frozen=True)
class Request:
    """One judge request of a sample: its dimension, its images by role (source, reference, edit) in order, and the
    prompt text."""

    dimension: str
    images: tuple[str, ...]
    text: str


def check_identity(commit: str, sha256: str) -> None:
    """The protocol's identity: a 40-hex commit of SOURCE_REPO (never a moving branch) and a 64-hex sha256."""
    pinned.check_identity(commit, sha256, SOURCE_REPO)


def load_prompts(path: str | Path, sha256: str, commit: str) -> Prompts:
    """The prompt strings of `path` (the fetched `utils.py`, saved as .txt), refused unless its bytes have `sha256`
    and it assigns every one of PROMPT_NAMES."""
    texts = pinned.read_pinned_strings(path, sha256, commit, PROMPT_NAMES, benchmark="RISEBench", repo=SOURCE_REPO,
                                       repo_path=PROMPTS_PATH, data_name="rise", option="metrics.rise.prompts_file")
    return Prompts(texts={n: texts[n] for n in PROMPT_NAMES}, commit=commit, sha256=sha256)


# ---------------------------------------------------------------------------------------------------- requests
def present(hints: Mapping[str, str], name: str) -> bool:
    """The official `name in item and not pd.isna(item[name])`: the release has a value for this sample."""
    return name in hints and hints[name] not in EMPTY_CELLS


def requests_for(edit_type: str, instruction: str, hints: Mapping[str, str], prompts: Prompts) -> list[Request]:
    """The sample's judge requests as the official `eval_vanilla` builds them. Images by role: "source" (the
    release's input), "reference" (its reference image) and "edit". A sample the official script cannot judge (a
    missing reference) raises ValueError; the importer refuses such samples before a run."""
    category = CATEGORIES[edit_type]
    first = "source"  # the official img1
    if category in ("temporal_reasoning", "causal_reasoning"):
        reference = _text(hints, "reference", edit_type)
        if present(hints, "reasoning_img"):
            rea = Request("reasoning", ("source", "edit"),
                          prompts["prompt_reasoning_w_input"].format(instruct=instruction, reference=reference))
        else:
            rea = Request("reasoning", ("edit",), prompts["prompt_reasoning"].format(instruct=instruction,
                                                                                     reference=reference))
        cons = prompts["prompt_consist"].format(instruct=instruction)
        qual = prompts["prompt_generation"]
    elif category == "spatial_reasoning":
        if present(hints, "reference_img"):
            first = "reference"  # the consistency request compares the edit with the reference image too
            rea = Request("reasoning", ("reference", "edit"),
                          prompts["prompt_spatial_ref_img"].format(instruct=instruction))
        elif present(hints, "reasoning_img"):
            rea = Request("reasoning", ("source", "edit"), prompts["prompt_spatial_ref_w_input"].format(
                instruct=instruction, reference=_text(hints, "reference", edit_type)))
        else:
            rea = Request("reasoning", ("edit",), prompts["prompt_spatial_ref"].format(
                instruct=instruction, reference=_text(hints, "reference", edit_type)))
        cons = prompts["prompt_spatial_cons"].format(instruct=instruction)
        qual = prompts["prompt_spatial_qual"]
    else:
        qual = None
        if present(hints, "reference_txt"):
            reference = hints["reference_txt"]
            cons = prompts["prompt_logical_cons_ans"].format(instruct=instruction, reference=reference)
            rea = Request("reasoning", ("edit",), prompts["prompt_logical_txt"].format(instruct=instruction,
                                                                                       reference=reference))
        elif present(hints, "reference_img"):
            first = "reference"
            cons = prompts["prompt_logical_cons"].format(instruct=instruction)
            # the official test is the column's presence, not the sample's value (`'reasoning_wo_ins' in item`)
            text = (prompts["prompt_logical_img_wo_q"] if "reasoning_wo_ins" in hints
                    else prompts["prompt_logical_img"].format(instruct=instruction))
            rea = Request("reasoning", ("reference", "edit"), text)
        else:
            raise ValueError("a logical sample needs reference_txt or a reference image")
        if present(hints, "consistency_free"):
            raise ValueError("a consistency-free logical sample has no score the official script can read")
    out = [] if present(hints, "consistency_free") else [Request("consistency", (first, "edit"), cons)]
    out.append(rea)
    if qual is not None:
        out.append(Request("plausibility", ("edit",), qual))
    return out


def _text(hints: Mapping[str, str], name: str, edit_type: str) -> str:
    if not present(hints, name):
        raise ValueError(f"a {CATEGORIES[edit_type]} sample without a reference image needs {name}")
    return hints[name]


# ------------------------------------------------------------------------------------------------------ parsing
def official_numbers(answer: str) -> list[int] | None:
    """The numbers the official `extract` reads from a reply: after the first `Final Score` with digits, else after
    the first `Final Scores` with digits ([] where that phrase has none); None where neither phrase occurs."""
    for pattern in (_FINAL_SCORE, _FINAL_SCORES):
        found = pattern.findall(answer)
        numbers: list[int] = []
        for tail in found:
            digits = _DIGITS.findall(tail.replace("\n", " "))
            if digits:
                numbers = [int(d) for d in digits]
                break
        if pattern is _FINAL_SCORE:
            if numbers:
                return numbers
            continue
        return numbers if found else None
    return None  # not reached


def parse_reply(answer: str, scale: tuple[int, int] = SCALE) -> int:
    """The one score of a reply as the official `extract` reads it, within `scale`; ReplyError otherwise."""
    numbers = official_numbers(answer)
    if not numbers:
        raise ReplyError("no number after 'Final Score' (the official script counts the sample as unsolved and "
                         "leaves it out of the score means)")
    if len(numbers) != 1:
        raise ReplyError(f"{len(numbers)} numbers {numbers} after 'Final Score', not one (the official script "
                         "stops with a length error, or shifts a logical sample's numbers into other dimensions)")
    value = numbers[0]
    if not scale[0] <= value <= scale[1]:
        official = f"as {4 * min(value, 1) + 1}" if scale == BINARY else "as it is"
        raise ReplyError(f"score {value} outside {scale[0]}..{scale[1]} (the official script scores it {official})")
    return value


# ------------------------------------------------------------------------------------------------ per sample
def _truthy_cell(text: str) -> bool:
    """`bool()` of the official DataFrame's cell: NaN (a missing value) is true, None (null) false."""
    if text == "nan":
        return True
    return bool(json.loads(text))


# the solved rule of gpt_eval.py since ce8cba37 (April 2026), and before it (from the first release, April 2025)
COMPLETION_RULES = ("2026-04", "2025-04")


def sample_scores(edit_type: str, hints: Mapping[str, str], scores: Mapping[str, int],
                  completion: str = "2026-04") -> dict[str, float]:
    """One sample's dimensions (1..5, NaN where not judged), `score` and `solved` from its parsed replies `scores`
    ({dimension: raw score}), as the official `main`, `calculate_score` and `calculate_completion` compute them.
    `completion` "2025-04" is the rule from the first release (2025-04-08) up to the April 2026 fix: consistency 5
    required of every temporal, causal and spatial sample, so a consistency-free one is never solved (to reproduce
    figures published before the fix)."""
    if completion not in COMPLETION_RULES:
        raise ValueError(f"completion must be one of {COMPLETION_RULES}, not {completion!r}")
    nan = math.nan
    if edit_type == "rise_logical":
        cons, rea, qual = 4 * min(scores["consistency"], 1) + 1.0, 4 * min(scores["reasoning"], 1) + 1.0, nan
    else:
        cons = float(scores["consistency"]) if "consistency" in scores else nan
        rea, qual = float(scores["reasoning"]), float(scores["plausibility"])
    if edit_type == "rise_logical":
        score = 0.3 * cons + 0.7 * rea
    elif "consistency_free" in hints and _truthy_cell(hints["consistency_free"]):
        score = 0.2 * qual + 0.8 * rea
    else:
        score = 0.3 * cons + 0.5 * rea + 0.2 * qual  # NaN where consistency was not judged
    if rea == 1:
        score = max(score * 0.5, 1.0) if not math.isnan(score) else score
    if edit_type == "rise_logical":
        solved = cons == 5 and rea == 5
    elif present(hints, "consistency_free") and completion == "2026-04":
        solved = rea == 5 and qual == 5
    else:
        solved = cons == 5 and rea == 5 and qual == 5
    return {"reasoning": rea, "consistency": cons, "plausibility": qual, "score": score, "solved": float(solved)}


# ------------------------------------------------------------------------------------------------- aggregation
def subtask_slug(prefix: str, subtask: str) -> str:
    return f"{prefix.lower()}_{re.sub(r'[^a-z0-9]+', '_', subtask.lower()).strip('_')}"


def summary_keys() -> list[str]:
    """RISE_accuracy, RISE_score, RISE_score_pct, then the same per category, the dimension means overall and per
    category, then accuracy, score and percentage per known subtask."""
    keys = ["RISE_accuracy", "RISE_score", "RISE_score_pct"]
    cats = list(SHORT.values())
    keys += [f"RISE_{c}_{m}" for c in cats for m in ("accuracy", "score", "score_pct")]
    keys += ["RISE_reasoning", "RISE_consistency", "RISE_plausibility"]
    keys += [f"RISE_{c}_{d}" for c in cats for d in ("reasoning", "consistency", "plausibility")
             if not (c == "logical" and d == "plausibility")]
    keys += [f"RISE_{subtask_slug(p, s)}_{m}" for p, subs in SUBTASKS.items() for s in subs
             for m in ("accuracy", "score", "score_pct")]
    return keys


def _mean(values: Sequence[float]) -> float:
    kept = [float(v) for v in values if not math.isnan(float(v))]  # pandas' mean skips NaN
    return sum(kept) / len(kept) if kept else math.nan


def _pct(score: float) -> float:
    return 25 * (score - 1)


def official_table(rows: Any) -> dict[str, float]:
    """`summary_keys` of scored rows (columns edit_type, rise_subtask, RISE_reasoning, RISE_consistency,
    RISE_plausibility, RISE_score, RISE_solved): means as the official CSV has them (NaN where no row). Failure rows
    are not in `rows`: the official script would count each as an unsolved sample in the accuracies."""
    out: dict[str, float] = {}

    def block(prefix: str, part: Any) -> None:
        score = _mean(list(part["RISE_score"])) if len(part) else math.nan
        out[f"{prefix}_accuracy"] = _mean(list(part["RISE_solved"])) if len(part) else math.nan
        out[f"{prefix}_score"], out[f"{prefix}_score_pct"] = score, _pct(score)

    block("RISE", rows)
    dims = {"reasoning": "RISE_reasoning", "consistency": "RISE_consistency", "plausibility": "RISE_plausibility"}
    for d, col in dims.items():
        out[f"RISE_{d}"] = _mean(list(rows[col])) if len(rows) else math.nan
    for etype, short in SHORT.items():
        part = rows[rows["edit_type"] == etype] if len(rows) else rows
        block(f"RISE_{short}", part)
        for d, col in dims.items():
            if not (short == "logical" and d == "plausibility"):
                out[f"RISE_{short}_{d}"] = _mean(list(part[col])) if len(part) else math.nan
    for p, subs in SUBTASKS.items():
        for s in subs:
            part = rows[rows["rise_subtask"] == s] if len(rows) and "rise_subtask" in rows else rows.iloc[:0]
            block(f"RISE_{subtask_slug(p, s)}", part)
    return out
