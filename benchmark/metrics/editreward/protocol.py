"""EditReward's prompts, fetched from the authors' repository at a pinned commit (never shipped here).

- `EditReward/dataset/prompts.py`: head 0's prompt (the edit-following one) and head 1's (the edit-quality one),
  each with a `{text_prompt}` field that `str.format` fills with the instruction, as the authors' inferencer does.
- `EditReward/dataset/data_collator_qwen_edit.py`: the line appended to both prompts, which ends the user text with
  the reward token the heads read (`prompt_with_special_token`).

`make data NAME=editreward_judge` fetches both files (saved as .txt) with their sha256; `load_prompts` checks both
checksums and reads the module-level string assignments with `ast` (neither file is imported or run).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from benchmark.io import pinned_prompts as pinned
from benchmark.io.pinned_prompts import ProtocolError
from benchmark.models.editreward import REWARD_TOKEN

SOURCE_REPO = "TIGER-AI-Lab/EditReward"
PROMPTS_PATH = "EditReward/dataset/prompts.py"
SUFFIX_PATH = "EditReward/dataset/data_collator_qwen_edit.py"
# the names the inferencer formats for rm_head_type ranknet_multi_head: batch_dim1 -> head_0, batch_dim2 -> head_1
HEAD_PROMPTS = ("INSTRUCTION_EDIT_FOLLOWING", "INSTRUCTION_EDIT_QUALITY")
SUFFIX_NAME = "prompt_with_special_token"
FIELD = "{text_prompt}"
DATA_NAME = "editreward_judge"


@dataclass(frozen=True)
class Prompts:
    """Each head's prompt (with FIELD), the suffix that carries the reward token, and where they come from."""

    heads: tuple[str, ...]
    suffix: str
    commit: str
    sha256: str
    suffix_sha256: str

    def texts(self, instruction: str) -> list[str]:
        """The user text of each head for `instruction`: its prompt formatted, then the suffix."""
        return [p.format(text_prompt=instruction) + self.suffix for p in self.heads]


def check_identity(commit: str, sha256: str, suffix_sha256: str) -> None:
    """A 40-hex commit of SOURCE_REPO and two 64-hex checksums (before any file is read)."""
    pinned.check_identity(commit, sha256, SOURCE_REPO)
    pinned.check_identity(commit, suffix_sha256, SOURCE_REPO)


def _read(path: str | Path, sha256: str, commit: str, repo_path: str, option: str, names: tuple[str, ...]
          ) -> dict[str, str]:
    return pinned.read_pinned_strings(path, sha256, commit, names, benchmark="EditReward", repo=SOURCE_REPO,
                                      repo_path=repo_path, data_name=DATA_NAME, option=option)


def load_prompts(path: str | Path, sha256: str, commit: str, suffix_path: str | Path, suffix_sha256: str) -> Prompts:
    """The heads' prompts from `path` (prompts.py) and the suffix from `suffix_path` (data_collator_qwen_edit.py),
    each refused unless its bytes have its sha256 and it holds the expected fields."""
    check_identity(commit, sha256, suffix_sha256)
    strings = _read(path, sha256, commit, PROMPTS_PATH, "metrics.editreward.prompts_file", HEAD_PROMPTS)
    heads = tuple(strings[n] for n in HEAD_PROMPTS)
    for name, text in zip(HEAD_PROMPTS, heads, strict=True):
        if FIELD not in text:
            raise ProtocolError(f"{path}: {name} has no {FIELD} field for the instruction")
        try:
            text.format(text_prompt="")
        except (IndexError, KeyError, ValueError) as err:
            raise ProtocolError(f"{path}: {name} is not a format string with only {FIELD} ({err!r})") from None
    suffix = _read(suffix_path, suffix_sha256, commit, SUFFIX_PATH, "metrics.editreward.suffix_file",
                   (SUFFIX_NAME,))[SUFFIX_NAME]
    if suffix.count(REWARD_TOKEN) != 1 or any(REWARD_TOKEN in h for h in heads):
        raise ProtocolError(f"{suffix_path}: {SUFFIX_NAME} must hold the reward token {REWARD_TOKEN} once, and the "
                            "prompts none (the heads read the one reward token)")
    return Prompts(heads=heads, suffix=suffix, commit=commit, sha256=sha256, suffix_sha256=suffix_sha256)
