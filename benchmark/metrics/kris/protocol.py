"""KRIS-Bench's judging protocol as mercurystraw/Kris_Bench's `metrics_*.py` scripts run it, without their code or
prompt text.

- Tasks and prompts: three 1-5 judgements per edit, in the official order. Visual consistency (`prompt_consist` over
  the source and the edit); instruction following (`prompt_instruction_following` over the source and the edit;
  viewpoint_change: `prompt_view_instruction_following` over the source, the edit and the ground truth
  (`metrics_view_change.py`); the ten knowledge tasks: `prompt_dual_evaluation`, quoting the explanation, whose one
  reply gives the instruction score and the knowledge-plausibility score (`metrics_knowledge.py`)); visual quality
  (`prompt_quality` over the edit, sent unformatted, as officially). The templates are filled with `str.format`
  (`instruct`, `explanation`) as the scripts fill them. anomaly_correction gets the plain instruction prompt: the
  official test `"abnormality_correction" in category` never holds for the release's folder name (a quirk kept).
  The text is the authors' and is not in this repository: `make data NAME=kris` fetches `utils/prompts.py` at a
  pinned commit (datasets/manifests/kris.json), and `load_prompts` checks its sha256 and reads the string
  assignments with `ast` (the file is never imported).
- Parsing: `metrics_common.py`'s `extract_score_and_reason` for the common tasks and viewpoint_change (a JSON object
  holding the score key, then `<name>_score: n`, `n/5`, `n out of 5`, then the first standalone digit 1-5), and
  `metrics_knowledge.py`'s own extractors for the knowledge tasks (a JSON object whose key is null gives no score;
  the `<name>_score` pattern needs a colon; the dual reply's two scores from one JSON object or two patterns), step
  by step. Where the official code gets no score (None) this is a `ReplyError`; so is a JSON score outside 1..5 or a
  JSON true/false, which the official code keeps (int(true) = 1).
- Aggregation (`official_means`): ByteDance-Seed/Bagel's `eval/gen/kris/summarize.py` (the official repository at
  the pinned commit has no summary script): every score normalised as (score - 1) x 25; per category and dimension
  the mean over the category's samples (pooled over its tasks); a category's AVG the mean of all its normalised
  scores (every dimension pooled), a meta-category's and the overall AVG likewise over their categories.
"""

from __future__ import annotations

import json
import math
import re
import string
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.io import pinned_prompts as pinned
from benchmark.io.pinned_prompts import ProtocolError

SOURCE_REPO = "mercurystraw/Kris_Bench"
PROMPTS_PATH = "utils/prompts.py"
# the template names the single-source scripts import, and the str.format fields each is filled with (None: sent as
# it is, unformatted)
TEMPLATES: dict[str, tuple[str, ...] | None] = {
    "prompt_consist": ("instruct",),
    "prompt_instruction_following": ("instruct",),
    "prompt_view_instruction_following": ("instruct",),
    "prompt_dual_evaluation": ("instruct", "explanation"),
    "prompt_quality": None,
}
SCORE_RANGE = (1, 5)

# metrics_common.py's tasks, metrics_knowledge.py's (instruction and knowledge from one dual prompt), and
# metrics_view_change.py's (the ground truth shown to the instruction judge)
COMMON_TASKS = ("count_change", "color_change", "anomaly_correction", "position_movement", "size_adjustment",
                "part_completion", "multi-instruction_execution")
KNOWLEDGE_TASKS = ("abstract_reasoning", "mathematics", "practical_knowledge", "medicine", "rule-based_reasoning",
                   "biology", "geography", "chemistry", "humanities", "physics")
VIEW_TASK = "viewpoint_change"
# the two several-input tasks (metrics_multi_element.py, metrics_temporal_prediction.py): not supported
MULTI_INPUT_TASKS = ("multi-element_composition", "temporal_prediction")

# the dimensions: column, the official score key, the summary's short name
DIMENSIONS = {"K_VC": "consistency_score", "K_VQ": "quality_score", "K_IF": "instruction_score",
              "K_KP": "knowledge_score"}
SHORT = {"K_VC": "VC", "K_VQ": "VQ", "K_IF": "IF", "K_KP": "KP"}
# summarize.py's categories (key: its name), their tasks and dimensions; temporal prediction's one task is not
# supported, so it has no column
CATEGORIES: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "attribute": ("Attribute Perception", ("count_change", "color_change", "size_adjustment", "part_completion",
                                           "anomaly_correction"), ("K_VC", "K_VQ", "K_IF")),
    "spatial": ("Spatial Perception", ("viewpoint_change", "position_movement"), ("K_VC", "K_VQ", "K_IF")),
    "social": ("Social Science", ("humanities", "practical_knowledge"), ("K_VC", "K_VQ", "K_IF", "K_KP")),
    "natural": ("Natural Science", ("biology", "chemistry", "geography", "medicine", "mathematics", "physics"),
                ("K_VC", "K_VQ", "K_IF", "K_KP")),
    "logical": ("Logical Reasoning", ("abstract_reasoning", "rule-based_reasoning"), ("K_VC", "K_VQ", "K_IF", "K_KP")),
    "decomposition": ("Instruction Decomposition", ("multi-instruction_execution",), ("K_VC", "K_VQ", "K_IF")),
}
# the unsupported tasks summarize.py counts in a group of ours (Bagel a53eea0): Instruction Decomposition holds
# multi-element_composition, Factual Knowledge the Temporal Prediction category; every group holding one of these,
# and the overall average, differs from the paper's figure of the same name
SKIPPED_IN: dict[str, tuple[str, ...]] = {"decomposition": ("multi-element_composition",),
                                          "factual": ("temporal_prediction",),
                                          "procedural": ("multi-element_composition",),
                                          "overall": MULTI_INPUT_TASKS}
META: dict[str, tuple[str, tuple[str, ...]]] = {
    "factual": ("Factual Knowledge", ("attribute", "spatial")),
    "conceptual": ("Conceptual Knowledge", ("social", "natural")),
    "procedural": ("Procedural Knowledge", ("logical", "decomposition")),
}


class ReplyError(ValueError):
    """A judge reply from which KRIS-Bench's parser reads no usable 1-5 score; the message says why and what the
    official script does with it."""


@dataclass(frozen=True)
class Prompts:
    """The judge's templates (the authors' text) and where they come from."""

    templates: Mapping[str, str]
    commit: str
    sha256: str

    def consistency(self, instruction: str) -> str:
        return self.templates["prompt_consist"].format(instruct=instruction)

    def instruction(self, task: str, instruction: str, explanation: str) -> str:
        """The instruction prompt of `task`: the dual prompt for a knowledge task, the viewpoint prompt for
        viewpoint_change, else the plain one (anomaly_correction included, as officially)."""
        if task in KNOWLEDGE_TASKS:
            return self.templates["prompt_dual_evaluation"].format(instruct=instruction, explanation=explanation)
        if task == VIEW_TASK:
            return self.templates["prompt_view_instruction_following"].format(instruct=instruction)
        return self.templates["prompt_instruction_following"].format(instruct=instruction)

    @property
    def quality(self) -> str:
        return self.templates["prompt_quality"]


def check_identity(commit: str, sha256: str) -> None:
    """The protocol's identity: a 40-hex commit of SOURCE_REPO and a 64-hex sha256. The shipped config has no
    checksum yet (the file could not be read when the protocol was written): null is refused with the fix."""
    if sha256 is None:
        raise ProtocolError(f"metrics.kris.prompts_sha256 is not set: the checksum of {PROMPTS_PATH} of {SOURCE_REPO} "
                            f"at {commit} is not recorded in this version, and you have not pinned it. Fetch it with "
                            "`make data NAME=kris`, review it, and pin it: `editmeter data pin kris --file "
                            "datasets/kris/downloads/kris_prompts.txt` (or pass metrics.kris.prompts_sha256=<the output "
                            "of `sha256sum datasets/kris/downloads/kris_prompts.txt`>; docs/judge.md, KRIS-Bench's "
                            "protocol)")
    pinned.check_identity(commit, sha256, SOURCE_REPO)


def check_identity_if_set(commit: str, sha256: str | None) -> None:
    """`check_identity` where a checksum is given; a null one passes here, so the shipped config composes and
    builds (`editmeter run --cfg job`, the config tests), and `load_prompts`, which the preflight calls before the
    first edit, refuses it with the fix."""
    if sha256 is not None:
        check_identity(commit, sha256)


def load_prompts(path: str | Path, sha256: str, commit: str) -> Prompts:
    """The templates from `path` (the fetched `utils/prompts.py`), refused unless its bytes have `sha256` and each
    template formats with the fields the scripts give it."""
    check_identity(commit, sha256)
    strings = pinned.read_pinned_strings(path, sha256, commit, TEMPLATES, benchmark="KRIS-Bench", repo=SOURCE_REPO,
                                         repo_path=PROMPTS_PATH, data_name="kris", option="metrics.kris.prompts_file")
    check_templates(strings, path)
    return Prompts(templates={n: strings[n] for n in TEMPLATES}, commit=commit, sha256=sha256)


def check_prompt_file(path: str | Path) -> str:
    """What `editmeter data pin kris --file` checks before it pins a file: a regular file of string assignments
    (read with `ast`, never run) holding every template the metric reads (`TEMPLATES`; all missing names in one
    ProtocolError), each formatting with exactly the fields the scripts fill. Returns its sha256."""
    import hashlib

    path = Path(path)
    if not path.is_file():
        raise ProtocolError(f"{path}: not found (or not a regular file); fetch it with `make data NAME=kris` "
                            f"({PROMPTS_PATH} of {SOURCE_REPO})")
    raw = path.read_bytes()
    strings = pinned.string_assignments(raw, path)
    missing = [n for n in TEMPLATES if n not in strings]
    if missing:
        raise ProtocolError(f"{path}: no template {', '.join(missing)} (a module-level string assignment each); "
                            f"metrics=kris reads {', '.join(TEMPLATES)} from {PROMPTS_PATH} of {SOURCE_REPO}. Not "
                            "pinned")
    check_templates(strings, path)
    return hashlib.sha256(raw).hexdigest()


def check_templates(strings: Mapping[str, str], path: str | Path) -> None:
    """Each template formats with the fields the official scripts fill it with (`TEMPLATES`), and uses no other."""
    for name, fields in TEMPLATES.items():
        if fields is None:
            continue
        try:
            used = {f for _lit, f, _spec, _conv in string.Formatter().parse(strings[name]) if f is not None}
            strings[name].format(**{f: "" for f in fields})
        except (ValueError, KeyError, IndexError) as err:
            raise ProtocolError(f"{path}: {name} does not format with {list(fields)} as the official script fills "
                                f"it ({type(err).__name__}: {err})") from None
        if not used <= set(fields):
            raise ProtocolError(f"{path}: {name} has fields {sorted(used - set(fields))} the official script does not "
                                "fill")


# ------------------------------------------------------------------------------------------------------- parsing
_DEFAULT_PATTERNS = (r"([1-5])\s*/\s*5", r"([1-5])\s+out\s+of\s+5")
_STANDALONE = r"\b([1-5])\b"


def _json_object(response: str, key: str) -> re.Match[str] | None:
    """The first `{...}` without nested braces that holds `key` (both scripts' JSON step)."""
    return re.search(r"\{[^{}]*" + re.escape(key) + r"[^{}]*\}", response, re.DOTALL)


def _as_int(value: Any, key: str) -> int:
    """`int(value)` as the scripts take it, refusing true/false (which int() reads as 1/0)."""
    if isinstance(value, bool):
        raise ReplyError(f"{key} is {json.dumps(value)}, not a number (the official script reads it as "
                         f"{int(value)})")
    return int(value)


def _common_score(response: str, key: str, word: str) -> int | None:
    """`metrics_common.extract_score_and_reason`: the JSON object's score, else the first of `<word>_score[:] n`,
    `n/5`, `n out of 5`, a standalone digit 1-5 (case-insensitive)."""
    m = _json_object(response, key)
    if m:
        try:
            value = json.loads(m.group(0)).get(key)
            if value is not None:
                return _as_int(value, key)
        except ReplyError:
            raise
        except Exception:  # noqa: BLE001 (the official code falls back on any error, so does this one)
            pass
    for pat in (word + r"[_\s]*score\s*[:：]?\s*([1-5])", *_DEFAULT_PATTERNS, _STANDALONE):
        found = re.search(pat, response, re.IGNORECASE | re.DOTALL)
        if found:
            return int(found.group(1))
    return None


def _knowledge_score(response: str, key: str, word: str) -> int | None:
    """`metrics_knowledge.extract_consistency_score` / `extract_quality_score`: a JSON object's score, None when it
    parses with the key null (no fallback); on no object or a parse error, `<word>_score: n` (colon needed), `n/5`,
    `n out of 5`, then the first standalone digit 1-5."""
    m = _json_object(response, key)
    if m:
        try:
            value = json.loads(m.group(0)).get(key)
            return _as_int(value, key) if value is not None else None
        except ReplyError:
            raise
        except Exception:  # noqa: BLE001
            pass
    for pat in (word + r"[_\s]*score\s*[:：]\s*([1-5])", *_DEFAULT_PATTERNS):
        found = re.search(pat, response, re.IGNORECASE)
        if found:
            return int(found.group(1))
    digits = re.findall(_STANDALONE, response)
    return int(digits[0]) if digits else None


def _dual_scores(response: str) -> tuple[int | None, int | None]:
    """`metrics_knowledge.extract_dual_scores`: both scores from the JSON object holding instruction_score (a null
    key gives None, no fallback); on no object or any error, `instruction_score: n` and `knowledge_score: n`."""
    m = _json_object(response, "instruction_score")
    if m:
        try:
            data = json.loads(m.group(0))
            return tuple(_as_int(data.get(k), k) if data.get(k) is not None else None  # type: ignore[return-value]
                         for k in ("instruction_score", "knowledge_score"))
        except ReplyError:
            raise
        except Exception:  # noqa: BLE001
            pass
    out = []
    for word in ("instruction", "knowledge"):
        found = re.search(word + r"[_\s]*score\s*[:：]\s*([1-5])", response, re.IGNORECASE)
        out.append(int(found.group(1)) if found else None)
    return out[0], out[1]


def _checked(score: int | None, column: str, response: str) -> int:
    key = DIMENSIONS[column]
    if score is None:
        what = "the reply is empty (the official script's answer after three failed calls, or a content filter)" \
            if not response.strip() else f"no {key}: no JSON object with it, no '{key}: n', 'n/5', 'n out of 5' " \
                                         "or standalone digit 1-5"
        raise ReplyError(f"{what}; the official script stores None and leaves the dimension out of its means")
    if not SCORE_RANGE[0] <= score <= SCORE_RANGE[1]:
        raise ReplyError(f"{key} {score} is outside 1..5 (the official script keeps it: normalised to "
                         f"{(score - 1) * 25})")
    return score


def parse_reply(task: str, request: str, response: str) -> dict[str, int]:
    """The scores one reply gives, as the official script of `task` reads them: request `VC`, `IF` (the dual reply
    of a knowledge task: IF and KP) or `VQ`; {column: 1..5}. ReplyError where the official code gets None, or a
    score it keeps though outside 1..5 or true/false."""
    knowledge = task in KNOWLEDGE_TASKS
    if request == "IF" and knowledge:
        instr, know = _dual_scores(response)
        return {"K_IF": _checked(instr, "K_IF", response), "K_KP": _checked(know, "K_KP", response)}
    column = {"VC": "K_VC", "IF": "K_IF", "VQ": "K_VQ"}[request]
    word = DIMENSIONS[column].removesuffix("_score")
    score = (_knowledge_score(response, DIMENSIONS[column], word) if knowledge
             else _common_score(response, DIMENSIONS[column], word))
    return {column: _checked(score, column, response)}


# --------------------------------------------------------------------------------------------------- aggregation
def normalize(score: float) -> float:
    """summarize.py's 100-point scale: (score - 1) x 25 (1 -> 0, 5 -> 100)."""
    return (score - 1) * 25


def summary_keys() -> list[str]:
    """KRIS_overall_AVG, KRIS_<meta>_AVG, KRIS_<category>_AVG, then KRIS_<category>_<VC|VQ|IF|KP>: the headline first
    (the leaderboard sorts by the first)."""
    keys = ["KRIS_overall_AVG", *(f"KRIS_{m}_AVG" for m in META), *(f"KRIS_{c}_AVG" for c in CATEGORIES)]
    return keys + [f"KRIS_{c}_{SHORT[d]}" for c, (_n, _t, dims) in CATEGORIES.items() for d in dims]


def _values(rows: Any, tasks: tuple[str, ...], column: str) -> list[float]:
    if not len(rows) or column not in rows:
        return []
    part = rows[rows["edit_type"].isin(["kris_" + t.replace("-", "_") for t in tasks])][column]
    return [normalize(float(v)) for v in part if v is not None and not math.isnan(float(v))]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def official_means(rows: Any) -> dict[str, float]:
    """`summary_keys` of scored rows (edit_type, K_VC, K_VQ, K_IF, K_KP in 1..5; NaN where a dimension has no score)
    as summarize.py computes them; NaN where there is nothing to average."""
    out: dict[str, float] = {}
    flat: dict[str, list[float]] = {}
    for cat, (_name, tasks, dims) in CATEGORIES.items():
        flat[cat] = []
        for d in dims:
            vals = _values(rows, tasks, d)
            out[f"KRIS_{cat}_{SHORT[d]}"] = _mean(vals)
            flat[cat] += vals
        out[f"KRIS_{cat}_AVG"] = _mean(flat[cat])
    for meta, (_name, cats) in META.items():
        out[f"KRIS_{meta}_AVG"] = _mean([v for c in cats for v in flat[c]])
    out["KRIS_overall_AVG"] = _mean([v for c in CATEGORIES for v in flat[c]])
    return {k: out[k] for k in summary_keys()}
