"""The judge's questions (VIEScore's protocol as GEdit-Bench applies it), written for editmeter and versioned here.

Semantic consistency (SC) sees the source and the edit with the request; perceptual quality (PQ) sees the edit
alone. Each question asks for one integer 0..10 and nothing else, so the answer starts at the first assistant token,
where `benchmark.models.vlm.ScoreReader` reads its probabilities. A change to any wording is a new version (add a
new entry to PROMPT_SETS; never edit a released one): the version and a digest of the text enter the metric
signature, so scores of two wordings never share a signature or a cache entry.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

DEFAULT_VERSION = "v1"


@dataclass(frozen=True)
class Question:
    """One judged question: its column name, criterion (SC or PQ), whether it sees the source, and its text
    (`{request}` is filled with the query's request, `Prompts.request`)."""

    key: str
    criterion: str
    with_source: bool
    text: str


@dataclass(frozen=True)
class Prompts:
    version: str
    questions: tuple[Question, ...]
    instruction_request: str  # `{text}` = the query's instruction
    caption_request: str      # `{text}` = the target caption (description-based queries without an instruction)
    system: str = ""          # the system turn (given explicitly, so no chat template adds a default one)

    @property
    def digest(self) -> str:
        """Short digest of every word of the set (enters the signature with the version)."""
        h = hashlib.sha256(self.version.encode())
        for part in (self.instruction_request, self.caption_request, self.system):
            h.update(b"\x00" + part.encode())
        for q in self.questions:
            h.update(f"\x00{q.key}|{q.criterion}|{q.with_source}|{q.text}".encode())
        return h.hexdigest()[:12]

    @property
    def identity(self) -> str:
        return f"{self.version}#{self.digest}"


_ANSWER = "Answer with a single integer from 0 to 10 and nothing else."
_PAIR = ("You are rating the result of an image edit. The first image is the original. The second image is the "
         "original after an editing model tried to carry out the request below.\n{request}\n")
_SINGLE = "You are rating the quality of an image made by an image editing model.\n"

V1 = Prompts(
    version="v1",
    system="You are a careful and impartial judge of image edits.",
    instruction_request="Editing request: {text}",
    caption_request="The edited image should match this description: {text}",
    questions=(
        Question("sc_instruction", "SC", True, _PAIR + (
            "How completely and correctly does the second image carry out the request? 0 means the requested change "
            "is absent or wrong; 10 means it is done exactly as asked. Judge only whether the requested change "
            "happened, not image quality. " + _ANSWER)),
        Question("sc_overedit", "SC", True, _PAIR + (
            "How well does the second image keep everything the request does not ask to change? 0 means the edited "
            "image is a different scene from the original; 10 means a minimal edit: apart from the requested "
            "change, it is the original. " + _ANSWER)),
        Question("pq_natural", "PQ", False, _SINGLE + (
            "How natural does the image look? 0 means clearly unnatural (wrong lighting or shadows, impossible "
            "shapes or proportions, implausible scene); 10 means it could be a real photograph or a carefully made "
            "picture. " + _ANSWER)),
        Question("pq_artifacts", "PQ", False, _SINGLE + (
            "How free is the image of artifacts? 0 means heavy artifacts (distortion, blur, noise, broken textures, "
            "malformed objects or hands, garbled text, watermarks); 10 means no visible artifact. " + _ANSWER)),
    ),
)

# version -> prompt set. Released versions are never edited: a new wording is a new entry.
PROMPT_SETS: dict[str, Prompts] = {V1.version: V1}


def get_prompts(version: str) -> Prompts:
    if version not in PROMPT_SETS:
        raise ValueError(f"unknown judge prompt version {version!r}; known: {', '.join(PROMPT_SETS)} "
                         "(benchmark/metrics/judge/prompts.py)")
    return PROMPT_SETS[version]
