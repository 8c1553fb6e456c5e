"""ImgEdit-Bench Basic's judging protocol as PKU-YuanGroup/ImgEdit's `Benchmark/Basic/` code runs it, without its
code or prompt text.

- Prompts (`load_prompts`): `prompts.json`, one prompt per edit type; the query's instruction replaces
  `<edit_prompt>` (`basic_bench.py`). Their text is the authors' (no license stated) and is not in this repository:
  `make data NAME=imgedit` fetches it at a pinned commit with its sha256 (datasets/manifests/imgedit.json), and
  `load_prompts` checks that checksum. The judge sees the prompt text, then the source, then the edit.
- Parsing (`parse_reply`): `step1_get_avgscore.py`'s `extract_scores_and_average`: every line that splits on ': '
  into exactly two parts whose second part `str.isdigit()` gives one integer score; the edit's score is their mean
  rounded to 2 decimals. Deviations (docs/judge.md): a reply without exactly three scores in 1..5 is a `ReplyError`
  (the official code drops a reply without scores and averages any other count or range as it is); a digit that
  `int` cannot read (e.g. '²') is a `ReplyError` where the official code would crash.
- Aggregation (`official_means`): `step2_typescore.py`: per edit type, the mean of the edits' scores rounded to 2
  decimals; the overall figure is the unweighted mean of the nine type figures (the paper's Table 4, "averaging all
  scores across tasks"), rounded to 2 decimals, and only where every type has a score.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.io import pinned_prompts as pinned
from benchmark.io.pinned_prompts import ProtocolError

SOURCE_REPO = "PKU-YuanGroup/ImgEdit"
PROMPTS_PATH = "Benchmark/Basic/prompts.json"
PLACEHOLDER = "<edit_prompt>"
TYPES = ("add", "adjust", "extract", "replace", "remove", "background", "style", "compose", "action")  # table order
SCORES_PER_REPLY = 3
SCORE_RANGE = (1, 5)


class ReplyError(ValueError):
    """A judge reply without the three 1..5 scores that ImgEdit-Bench's parser should read; the message says why."""


@dataclass(frozen=True)
class Prompts:
    """The per-type prompts and where they come from."""

    by_type: Mapping[str, str]  # release edit type -> text containing PLACEHOLDER
    commit: str
    sha256: str

    def for_edit(self, edit_type: str, instruction: str) -> str:
        """The prompt of `edit_type` (the release's name) with the instruction in place, as `basic_bench.py`."""
        return self.by_type[edit_type].replace(PLACEHOLDER, instruction)


def check_identity(commit: str, sha256: str) -> None:
    """The protocol's identity: a 40-hex commit of SOURCE_REPO (never a moving branch) and a 64-hex sha256."""
    pinned.check_identity(commit, sha256, SOURCE_REPO)


def load_prompts(path: str | Path, sha256: str, commit: str) -> Prompts:
    """The per-type prompts from `path` (the fetched `prompts.json`), refused unless its bytes have `sha256` and it
    holds a prompt with the placeholder for each of the nine types."""
    raw = pinned.read_pinned(path, sha256, commit, benchmark="ImgEdit-Bench", repo=SOURCE_REPO, repo_path=PROMPTS_PATH,
                             data_name="imgedit", option="metrics.imgedit.prompts_file")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise ProtocolError(f"{path}: not a readable JSON file ({err})") from None
    if not isinstance(data, dict):
        raise ProtocolError(f"{path}: must hold a JSON object {{edit_type: prompt}}")
    missing = [t for t in TYPES if not isinstance(data.get(t), str)]
    if missing:
        raise ProtocolError(f"{path}: no prompt for edit type(s) {', '.join(missing)} (ImgEdit-Bench Basic has "
                            f"{', '.join(TYPES)})")
    blank = [t for t in TYPES if PLACEHOLDER not in data[t]]
    if blank:
        raise ProtocolError(f"{path}: the prompt(s) of {', '.join(blank)} have no {PLACEHOLDER} placeholder for the "
                            "instruction")
    return Prompts(by_type={t: data[t] for t in TYPES}, commit=commit, sha256=sha256)


# ------------------------------------------------------------------------------------------------------- parsing
def official_scores(text: str) -> list[str]:
    """The score strings `extract_scores_and_average` takes from a reply, in order (before its `int`)."""
    out = []
    for line in text.splitlines():
        parts = line.strip().split(": ")
        if len(parts) == 2 and parts[1].isdigit():
            out.append(parts[1])
    return out


def parse_reply(text: str) -> list[int]:
    """The three scores of one reply as ImgEdit-Bench's step 1 reads them, each an integer in 1..5; ReplyError where
    it reads none, another count, a score out of range, or a digit it cannot convert."""
    found = official_scores(text)
    scores = []
    for s in found:
        try:
            scores.append(int(s))
        except ValueError:  # str.isdigit accepts '²', int does not: the official step 1 raises here
            raise ReplyError(f"{s!r} passes the official isdigit test but is not an integer") from None
    if not scores:
        raise ReplyError("no 'Name: <digits>' line (the official step 1 drops such a reply from every mean)")
    if len(scores) != SCORES_PER_REPLY:
        raise ReplyError(f"{len(scores)} scores {scores}, not {SCORES_PER_REPLY} (the official step 1 would average "
                         f"them to {edit_score(scores)})")
    bad = [s for s in scores if not SCORE_RANGE[0] <= s <= SCORE_RANGE[1]]
    if bad:
        raise ReplyError(f"score(s) {bad} outside {SCORE_RANGE[0]}..{SCORE_RANGE[1]} (the official step 1 would "
                         f"average them as they are, to {edit_score(scores)})")
    return scores


def edit_score(scores: Sequence[int]) -> float:
    """One edit's score: the mean of its scores rounded to 2 decimals (`extract_scores_and_average`)."""
    return round(sum(scores) / len(scores), 2)


# --------------------------------------------------------------------------------------------------- aggregation
def summary_keys() -> list[str]:
    """ImgEdit_<type> for the nine types in the paper's table order, then ImgEdit_overall."""
    return [f"ImgEdit_{t}" for t in TYPES] + ["ImgEdit_overall"]


def official_means(rows: Any) -> dict[str, float]:
    """`summary_keys` of scored rows (columns edit_type, `imgedit_<type>`, and IE_score): per type the mean of the
    edits' scores rounded to 2 decimals (`step2_typescore.py`; NaN for a type without rows); overall the mean of the
    nine type figures rounded to 2 decimals, NaN unless every type has one (a mean over some types is not the
    benchmark's overall figure)."""
    import math

    out: dict[str, float] = {}
    for t in TYPES:
        scores = [float(s) for s in rows.loc[rows["edit_type"] == f"imgedit_{t}", "IE_score"]] if len(rows) else []
        out[f"ImgEdit_{t}"] = round(sum(scores) / len(scores), 2) if scores else math.nan
    per_type = [out[f"ImgEdit_{t}"] for t in TYPES]
    out["ImgEdit_overall"] = (math.nan if any(math.isnan(v) for v in per_type)
                              else round(sum(per_type) / len(per_type), 2))
    return out
