"""EditScore's judging protocol as VectorSpaceLab/EditScore's `EditScore.evaluate` runs it, without its code or prompt
text.

- Prompts: VIEScore's "tie" task with the reasoning-first context. The SC prompt is the context, the two-image
  editing rules and the SC rules, joined by newlines, with every "10" replaced by the score range (25) and
  `<instruction>` by the query's instruction; the PQ prompt is the context and the PQ rules (the same replacement).
  Their text is the authors' (Apache-2.0) and is not in this repository: `make data NAME=editscore_judge` fetches
  `editscore/vie_prompts.py` at a pinned commit with its sha256 (datasets/manifests/editscore_judge.json), and
  `load_prompts` checks that checksum and reads the string assignments with `ast` (the file is never imported).
- Parsing (`parse_reply`): `editscore/utils.py`'s `mllm_output_to_dict` step by step, its json_repair fallback
  included; a reply it cannot read, or reads into no usable scores, is a `ReplyError` (the official code retries
  with the same seed, then puts a random integer in its place).
- Scores (`pass_scores`, `reduce_passes`): per pass prompt_following = SC[0] / (range / 10), consistency = SC[1] /
  (range / 10), perceptual_quality = min(PQ) / (range / 10), overall = sqrt(min(SC) / (range / 10) x
  perceptual_quality); the mean over passes, and with "average_first" overall = sqrt(mean prompt_following x mean
  perceptual_quality) instead (the official formula, which takes SC[0], not min(SC)).
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

# EditScore's utils.py `fix_json` is VIEScore's, which metrics=gedit reproduces: quotes bare keys, wraps bare numbers
# in a list, quotes other bare values
from benchmark.metrics.gedit.protocol import _fix_json

SOURCE_REPO = "VectorSpaceLab/EditScore"
PROMPTS_PATH = "editscore/vie_prompts.py"
# the names `EditScore.__init__` joins
CONTEXT = "_context_no_delimit_reasoning_first"
SC_PARTS = (CONTEXT, "_prompts_0shot_two_image_edit_rule", "_prompts_0shot_tie_rule_SC")
PQ_PARTS = (CONTEXT, "_prompts_0shot_rule_PQ")
RANGED = ("_prompts_0shot_tie_rule_SC", "_prompts_0shot_rule_PQ")  # the parts whose "10" becomes the score range
PLACEHOLDER = "<instruction>"
DELIMITER = "||V^=^V||"
# the one reply the official code treats as a refusal (and answers with a random score)
REFUSAL = "I'm sorry, but I can't assist with that request."
REDUCTIONS = ("average_last", "average_first")
PARTS = ("prompt_following", "consistency", "perceptual_quality", "overall")


class ReplyError(ValueError):
    """A judge reply that EditScore's parser cannot read (or reads into no usable scores); the message says why."""


@dataclass(frozen=True)
class Prompts:
    """EditScore's SC and PQ prompts for one score range, and where they come from."""

    sc: str  # contains PLACEHOLDER
    pq: str
    score_range: int
    commit: str
    sha256: str

    def sc_for(self, instruction: str) -> str:
        return self.sc.replace(PLACEHOLDER, instruction)


def check_identity(commit: str, sha256: str) -> None:
    """The protocol's identity: a 40-hex commit of SOURCE_REPO (never a moving branch) and a 64-hex sha256."""
    pinned.check_identity(commit, sha256, SOURCE_REPO)


def read_strings(path: str | Path, sha256: str, commit: str) -> dict[str, str]:
    """The module-level string assignments of `path` (the fetched `vie_prompts.py`), refused unless its bytes have
    `sha256`; nothing is executed."""
    return pinned.read_pinned_strings(path, sha256, commit, (*SC_PARTS, *PQ_PARTS), benchmark="EditScore",
                                      repo=SOURCE_REPO, repo_path=PROMPTS_PATH, data_name="editscore_judge",
                                      option="metrics.editscore.prompts_file")


def build_prompts(strings: dict[str, str], score_range: int, commit: str, sha256: str) -> Prompts:
    """The SC and PQ prompts as `EditScore.__init__` assembles them for `score_range`."""
    if isinstance(score_range, bool) or not isinstance(score_range, int) or score_range < 1:
        raise ValueError(f"score_range must be a positive integer, not {score_range!r}")

    def part(name: str) -> str:  # str.replace: every "10" of the rule text, as the official code does
        return strings[name].replace("10", str(score_range)) if name in RANGED else strings[name]

    sc = "\n".join(part(n) for n in SC_PARTS)
    if PLACEHOLDER not in sc:
        raise ProtocolError(f"the SC prompt has no {PLACEHOLDER} placeholder for the instruction")
    return Prompts(sc=sc, pq="\n".join(part(n) for n in PQ_PARTS), score_range=score_range, commit=commit,
                   sha256=sha256)


def load_prompts(path: str | Path, sha256: str, commit: str, score_range: int = 25) -> Prompts:
    """EditScore's prompts for `score_range` from `path`, refused unless its bytes have `sha256`."""
    return build_prompts(read_strings(path, sha256, commit), score_range, commit, sha256)


# ------------------------------------------------------------------------------------------------------- parsing
def _normalize_quotes(text: str) -> str:
    """Curly double and single quotes to ASCII ones (the official `normalize_quotes`)."""
    return text.replace("\u201c", '"').replace("\u201d", '"').replace("\u2018", "'").replace("\u2019", "'")


def _escape_reasoning_quotes(text: str) -> str:
    """The official `repair_reasoning_field_robust`: escapes the double quotes inside the "reasoning" value (up to
    the first quote followed by a comma or a closing brace)."""
    pattern = re.compile(r'("reasoning"\s*:\s*")(.*?)(?="\s*[,}])', re.DOTALL)
    return pattern.sub(lambda m: m.group(1) + m.group(2).replace('"', '\\"'), text)


def _last_resort(text: str) -> str:
    """The official `fallback_repair_json`: the text between the reasoning and score keys as reasoning, the first
    two numbers after the score key (or anywhere) as scores, padded with 0.0 to two."""
    lowered = text.lower()
    m_reason = re.search(r'"?reasoning"?\s*[:\uff1a]', lowered)
    m_score = re.search(r'"?score"?\s*[:\uff1a]', lowered)
    reasoning = ""
    if m_reason and m_score:
        raw = text[m_reason.end():m_score.start()].strip()
        raw = re.sub(r"[\s,}\]]+$", "", re.sub(r"^[\s,{\[]+", "", raw))
        raw = raw[1:] if raw.startswith(("'", '"')) else raw
        raw = raw[:-1] if raw.endswith(("'", '"')) else raw
        reasoning = _unescape(raw).strip()
    else:
        loose = re.search(r'"?reasoning"?\s*[:\uff1a]\s*["\']?(.*?)["\']?\s*(,|$)', text, re.DOTALL | re.IGNORECASE)
        if loose:
            reasoning = _unescape(loose.group(1).strip())
    nums = re.findall(r"-?\d+(?:\.\d+)?", text[m_score.end():] if m_score else text)
    scores = [float(n) for n in nums[:2]]
    scores += [0.0] * (2 - len(scores))
    return json.dumps({"reasoning": reasoning, "score": scores}, ensure_ascii=False)


def _unescape(text: str) -> str:
    text = text.replace('\\"', '"').replace("\\'", "'")
    return re.sub(r"[\u2018\u2019]", "'", re.sub(r"[\u201c\u201d]", '"', text))


def _robust_fix(text: str) -> Any:
    """The official `robust_json_fix`: json_repair, then json_repair after each fixer in turn (each applied to the
    previous one's output), then json_repair of the last-resort rebuild; None where all of them raise."""
    import json_repair

    try:
        return json_repair.loads(text)
    except Exception:  # noqa: BLE001 (the official chain moves on after any error; so does this one)
        pass
    for fixer in (_fix_json, _escape_reasoning_quotes):
        text = fixer(text)
        try:
            return json_repair.loads(text)
        except Exception:  # noqa: BLE001, S112
            continue
    try:
        return json_repair.loads(_last_resort(text))
    except Exception:  # noqa: BLE001
        return None


def _int_0_to_10(text: str) -> bool:
    try:
        return 0 <= int(text) <= 10  # the official check keeps 0..10 whatever the score range
    except ValueError:
        return False


def parse_dict(text: str) -> Any:
    """What `mllm_output_to_dict(text, give_up_parsing=False)` returns (a dict, usually), or ReplyError where it
    returns False or a marker. The steps and their order are the official ones."""
    if text == "rate_limit_exceeded":
        raise ReplyError("the reply is an API's rate-limit marker")
    if text == REFUSAL:
        raise ReplyError("the reply is the refusal the official code answers with a random score")
    if text.count(DELIMITER) == 2:
        start, end = text.find(DELIMITER) + len(DELIMITER), text.rfind(DELIMITER)
    else:
        start, end = text.find("{"), text.rfind("}") + 1
        if start == -1 or end == 0:  # no JSON object: a bare [a, b] list, or a bare integer 0..10
            start, end = text.find("["), text.rfind("]") + 1
            if re.match(r"^\[\d+, ?\d+\]$", text[start:end]):
                try:
                    scores = json.loads(text[start:end])
                except ValueError:  # non-ASCII digits match \d but are not JSON (the official code raises)
                    raise ReplyError(f"the list {text[start:end]!r} is not JSON") from None
                text = json.dumps({"score": scores, "reasoning": "the reply is a bare list of scores"})
            elif _int_0_to_10(text):
                text = json.dumps({"score": [int(text)], "reasoning": "the reply is a bare number"})
            else:
                raise ReplyError("no JSON object, no [score1, score2] list and not a bare integer 0..10")
            start, end = 0, len(text)
    if start == end:
        raise ReplyError("nothing between the delimiters")
    body = _normalize_quotes(text[start:end].strip().replace("\n", ""))
    try:
        data = json.loads(body)
        if not isinstance(data["score"], list):
            data["score"] = [data["score"]]
        return data
    except Exception:  # noqa: BLE001 (the official parser falls back on any error, so does this one)
        return _robust_fix(body)  # returned as is: no list wrapping on this path (as officially)


@dataclass(frozen=True)
class Reply:
    """One parsed reply: its scores (raw, on the 0..score_range scale) and its reasoning ("" when it has none)."""

    scores: list[float]
    reasoning: str


def parse_reply(text: str, *, min_scores: int = 1) -> Reply:
    """The scores of one reply as EditScore reads them (`parse_dict`): a non-empty list of at least `min_scores`
    finite, non-negative numbers (the official code would fail on anything else: a missing key, a non-list, too few
    scores for SC[1], a negative score under the square root); ReplyError otherwise."""
    data = parse_dict(text)
    if not isinstance(data, dict):
        raise ReplyError(f"the reply parses to {type(data).__name__} {str(data)[:80]!r}, not a JSON object")
    if "score" not in data:
        raise ReplyError("the parsed reply has no 'score'")
    scores = data["score"]
    if not isinstance(scores, list) or len(scores) < min_scores:
        raise ReplyError(f"'score' is {scores!r}, not a list of at least {min_scores} score(s)")
    out = []
    for s in scores:
        if isinstance(s, bool) or not isinstance(s, int | float) or not math.isfinite(s):
            raise ReplyError(f"score {s!r} is not a number")
        if s < 0:
            raise ReplyError(f"score {s!r} is negative")
        out.append(float(s))
    reasoning = data.get("reasoning", "")
    return Reply(out, reasoning if isinstance(reasoning, str) else json.dumps(reasoning))


# -------------------------------------------------------------------------------------------------------- scores
def pass_scores(sc: Sequence[float], pq: Sequence[float], score_range: int) -> dict[str, float]:
    """One pass's four scores on 0..10 (`PARTS`) from the SC scores (at least two) and the PQ scores."""
    unit = score_range / 10
    pq_score = min(pq) / unit
    return {"prompt_following": sc[0] / unit, "consistency": sc[1] / unit, "perceptual_quality": pq_score,
            "overall": math.sqrt(min(sc) / unit * pq_score)}


def reduce_passes(passes: Sequence[dict[str, float]], reduction: str) -> dict[str, float]:
    """The query's scores: the mean of each part over the passes; with "average_first" the overall is then
    sqrt(mean prompt_following x mean perceptual_quality), as the official code recomputes it."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {', '.join(REDUCTIONS)}, not {reduction!r}")
    if not passes:
        raise ValueError("no passes to reduce")
    out = {k: sum(p[k] for p in passes) / len(passes) for k in PARTS}  # a plain sum, as numpy's mean of a few
    if reduction == "average_first":
        out["overall"] = math.sqrt(out["prompt_following"] * out["perceptual_quality"])
    return out
