"""GEdit-Bench's judging protocol as Step1X-Edit's `GEdit-Bench/` code runs it, without its code or prompt text.

- Prompts: VIEScore's "tie" task. The SC prompt is the context, the two-image editing rules and the SC rules (with
  `<instruction>` replaced by the query's instruction), joined by newlines; the PQ prompt is the context and the PQ
  rules. Their text is the authors' (Apache-2.0) and is not in this repository: `make data NAME=gedit` fetches
  `GEdit-Bench/viescore/vie_prompts.py` at a pinned commit with its sha256 (datasets/manifests/gedit.json), and
  `load_prompts` checks that checksum and reads the string assignments with `ast` (the file is never imported).
- Parsing (`parse_reply`): `viescore/utils.py`'s `mllm_output_to_dict`, step by step, with its regular expressions
  run by the `regex` module as officially (its word class matches combining marks); a reply it cannot read is a
  `ReplyError` (the official code retries, then puts an unseeded random integer in its place).
- Scores (`sample_scores`): SC = min of the SC scores, PQ = min of the PQ scores, O = sqrt(SC x PQ).
- Aggregation (`official_means`): `calculate_statistics.py`: per language, the mean of SC, PQ and O over each task
  group's samples, then the unweighted mean over the groups; for the full set and for the intersection subset.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import regex as re  # the official parsers' module: its \w matches combining marks, `re`'s does not

from benchmark.io import pinned_prompts as pinned
from benchmark.io.pinned_prompts import ProtocolError

SOURCE_REPO = "stepfun-ai/Step1X-Edit"
PROMPTS_PATH = "GEdit-Bench/viescore/vie_prompts.py"
# the names `viescore/__init__.py` joins for task "tie"
SC_PARTS = ("_context_no_delimit", "_prompts_0shot_two_image_edit_rule", "_prompts_0shot_tie_rule_SC")
PQ_PARTS = ("_context_no_delimit", "_prompts_0shot_rule_PQ")
PLACEHOLDER = "<instruction>"
DELIMITER = "||V^=^V||"
SCORE_RANGE = (0.0, 10.0)
LANGUAGE_NAMES = {"en": "en", "zh": "cn"}  # Query.language -> GEdit-Bench's name of the language


class ReplyError(ValueError):
    """A judge reply that GEdit-Bench's parser cannot read (or reads into no usable scores); the message says why."""


@dataclass(frozen=True)
class Prompts:
    """The two prompts of VIEScore's tie task and where they come from."""

    sc: str  # contains PLACEHOLDER
    pq: str
    commit: str
    sha256: str

    def sc_for(self, instruction: str) -> str:
        return self.sc.replace(PLACEHOLDER, instruction)


def check_identity(commit: str, sha256: str) -> None:
    """The protocol's identity: a 40-hex commit of SOURCE_REPO (never a moving branch) and a 64-hex sha256."""
    pinned.check_identity(commit, sha256, SOURCE_REPO)


def load_prompts(path: str | Path, sha256: str, commit: str) -> Prompts:
    """The tie prompts from `path` (the fetched `vie_prompts.py`), refused unless its bytes have `sha256`."""
    strings = pinned.read_pinned_strings(path, sha256, commit, (*SC_PARTS, *PQ_PARTS), benchmark="GEdit-Bench",
                                         repo=SOURCE_REPO, repo_path=PROMPTS_PATH, data_name="gedit",
                                         option="metrics.gedit.prompts_file")
    sc = "\n".join(strings[n] for n in SC_PARTS)
    if PLACEHOLDER not in sc:
        raise ProtocolError(f"{path}: the SC prompt has no {PLACEHOLDER} placeholder for the instruction")
    return Prompts(sc=sc, pq="\n".join(strings[n] for n in PQ_PARTS), commit=commit, sha256=sha256)


# ------------------------------------------------------------------------------------------------------- parsing
def _fix_json(text: str) -> str:
    """`viescore/utils.py`'s `fix_json`: quotes bare keys, wraps bare numbers in a list, quotes other bare values."""
    fixed = re.sub(r"(\w+):", r'"\1":', text)

    def value(m: Any) -> str:
        key, v, end = m.groups()
        v = v.strip()
        if re.match(r"^-?\d+(\.\d+)?$", v):
            v = f"[{v}]"
        elif not re.match(r"^(true|false|null)$", v, re.IGNORECASE):
            v = f'"{v}"'
        return f"{key}: {v}{end}"

    return re.sub(r'(".*?"):(.*?)(,|})', value, fixed)


def _int_0_to_10(text: str) -> bool:
    try:
        return 0 <= int(text) <= 10
    except ValueError:
        return False


def _parse_dict(text: str) -> Any:
    """What `mllm_output_to_dict(text, give_up_parsing=False)` returns, or ReplyError where it returns False (or
    raises). The steps and their order are the official ones."""
    if text == "rate_limit_exceeded":
        raise ReplyError("the reply is an API's rate-limit marker")
    if text.count(DELIMITER) == 2:
        start, end = text.find(DELIMITER) + len(DELIMITER), text.rfind(DELIMITER)
    else:
        start, end = text.find("{"), text.rfind("}") + 1
        if start == -1 or end == 0:  # no JSON object: a bare [a, b] list, or a bare integer 0..10
            start, end = text.find("["), text.rfind("]") + 1
            if re.match(r"^\[\d+, ?\d+\]$", text[start:end]):
                try:
                    scores = json.loads(text[start:end])
                except ValueError:
                    raise ReplyError(f"the list {text[start:end]!r} is not JSON") from None
                text = json.dumps({"score": scores})
            elif _int_0_to_10(text):
                text = json.dumps({"score": [int(text)]})
            else:
                raise ReplyError("no JSON object, no [score1, score2] list and not a bare integer 0..10")
            start, end = 0, len(text)
    if start == end:
        raise ReplyError("nothing between the delimiters")
    body = text[start:end].strip().replace("\n", "")
    try:
        data = json.loads(body)
        if not isinstance(data["score"], list):
            data["score"] = [data["score"]]
        return data
    except Exception:  # noqa: BLE001 (the official parser falls back on any error, so does this one)
        try:
            return json.loads(_fix_json(body))  # returned as is: no list wrapping on this path (as officially)
        except ValueError:
            raise ReplyError("its JSON does not parse, even after the official fix_json") from None


def parse_reply(text: str) -> list[float]:
    """The scores of one reply as GEdit-Bench reads them (`_parse_dict`), each a number in 0..10; ReplyError
    otherwise (where the official code would raise, or take a score outside 0..10 as it is)."""
    data = _parse_dict(text)
    if not isinstance(data, dict) or "score" not in data:
        raise ReplyError("the parsed reply has no 'score'")
    scores = data["score"]
    if not isinstance(scores, list) or not scores:
        raise ReplyError(f"'score' is {scores!r}, not a non-empty list")
    out = []
    for s in scores:
        if isinstance(s, bool) or not isinstance(s, int | float) or not math.isfinite(s):
            raise ReplyError(f"score {s!r} is not a number")
        if not SCORE_RANGE[0] <= s <= SCORE_RANGE[1]:
            raise ReplyError(f"score {s!r} is outside 0..10")
        out.append(float(s))
    return out


def sample_scores(sc: Sequence[float], pq: Sequence[float]) -> tuple[float, float, float]:
    """(SC, PQ, O) of one sample: the minimum of each list and the geometric mean of the two minima."""
    s, p = min(sc), min(pq)
    return s, p, math.sqrt(s * p)


# --------------------------------------------------------------------------------------------------- aggregation
def summary_keys() -> list[str]:
    """GEdit_<SC|PQ|O>_<en|cn>[_intersection], in table order."""
    return [f"GEdit_{m}_{lang}{sub}" for lang in ("en", "cn") for sub in ("", "_intersection")
            for m in ("SC", "PQ", "O")]


def macro(frame: Any) -> tuple[float, float, float]:
    """(SC, PQ, O) of `frame` (rows with edit_type, G_SC, G_PQ, G_O): the mean of each over a task group's rows,
    then the unweighted mean over the groups present; NaN without rows."""
    if not len(frame):
        return math.nan, math.nan, math.nan
    per_group = frame.groupby("edit_type", sort=True)[["G_SC", "G_PQ", "G_O"]].mean()
    sc, pq, o = (float(per_group[c].mean()) for c in ("G_SC", "G_PQ", "G_O"))
    return sc, pq, o


def official_means(rows: Any) -> dict[str, float]:
    """`summary_keys` of scored rows (edit_type, language, intersection, G_SC, G_PQ, G_O): `macro` per language
    (GEdit-Bench's EN and CN), over all rows (fullset) and over the intersection rows."""
    out: dict[str, float] = {}
    for lang in ("en", "cn"):
        mine = rows[rows["language"] == lang] if "language" in rows else rows.iloc[:0]
        inter = mine[mine["intersection"].astype(bool)] if "intersection" in mine else mine.iloc[:0]
        for sub, part in (("", mine), ("_intersection", inter)):
            for m, v in zip(("SC", "PQ", "O"), macro(part), strict=True):
                out[f"GEdit_{m}_{lang}{sub}"] = v
    return out
