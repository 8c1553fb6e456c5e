"""The Editor interface every plug-in in `editors/` implements, and helpers shared by editors.

An editor is one class in `editors/<name>.py`, built by Hydra from `configs/editor/<name>.yaml` (`_target_`), taking
plain keyword arguments. It receives a batch of queries and source images and returns exactly one RGB image per
query, in order. Randomness comes only from the per-query seeds the harness passes in.
"""

from __future__ import annotations

import abc
import functools
import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

from PIL import Image

from benchmark.io.types import Query


class PromptKindError(ValueError):
    """A query lacks the prompt text this editor family needs."""


class PromptTooLongError(ValueError):
    """A query's prompt text is over `limits.max_prompt_chars` (a 5 MB instruction cost 40 s and 2.3 GB)."""


# Real prompts are short (MagicBrush, HATIE, EditVal: under 300 characters; CLIP reads 77 tokens). The limit keeps
# one absurd record from costing minutes and gigabytes; `limits.max_prompt_chars` in configs/config.yaml.
DEFAULT_MAX_PROMPT_CHARS = 1000
_MAX_PROMPT_CHARS = [DEFAULT_MAX_PROMPT_CHARS]


def set_max_prompt_chars(n: int) -> None:
    """Set the prompt length limit `check_prompts` applies (process-wide, set once per run from the config)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"limits.max_prompt_chars must be a positive integer, got {n!r}")
    _MAX_PROMPT_CHARS[0] = n


class Editor(abc.ABC):
    """Base class of editors. Subclasses set `prompt_kind` and implement `edit` and `info`; `prepare` and
    `edit_deferred` are optional (the guide: docs/editors.md)."""

    prompt_kind: ClassVar[Literal["instruction", "description"]]
    # True: the editor inverts each source once for all its queries (same image and source caption), so the budget
    # counts that part of its cost per distinct source (benchmark.plan.budget, configs/costs.yaml `s_per_source`)
    shares_inversions: ClassVar[bool] = False
    # True: outputs are kept at the size they come in (edits made elsewhere, `external`), and each metric suite applies
    # its declared rule to an edit of another size (docs/metrics.md, "An edit of another size"). False: an output
    # whose size differs from its source's is that query's failure (the contract of `edit` below).
    any_output_size: ClassVar[bool] = False
    # True: the editor rewrites each instruction before editing with it (a prompt enhancer, such as Qwen-Image-Edit's,
    # or a user's own pipeline), so its scores are not those of the instruction as the set gives it. It hands back
    # the text each query was edited with (`record_rewrite` inside `edit`); the edit record keeps it, the declaration
    # enters the editor signature, and the leaderboard (`rewrites_instruction`), `show` and the report mark its rows.
    rewrites_instruction: ClassVar[bool] = False

    @abc.abstractmethod
    def edit(self, queries: Sequence[Query], images: Sequence[Image.Image], *, seeds: Sequence[int]) -> list[Image.Image]:
        """Exactly one PIL RGB image per query, same order, each the size of its source image; randomness only from
        `seeds` (one per query); query i's output must not depend on the rest of the batch. Raising fails the batch
        (each query is then retried alone)."""

    @abc.abstractmethod
    def info(self) -> dict[str, Any]:
        """JSON-serialisable provenance: weights id, revision, dtype, every hyperparameter that shapes the output."""

    def prepare(self, image: Image.Image) -> Any:
        """Input work that depends on nothing but one source image (e.g. resizing it to the model resolution).

        The edit stage calls it on its reader thread while the previous batch is edited, and passes the results to
        `edit_deferred` as `prepared`. Default: nothing to prepare (None).
        """
        return None

    def edit_deferred(self, queries: Sequence[Query], images: Sequence[Image.Image], *, seeds: Sequence[int],
                      prepared: Sequence[Any] | None = None) -> list[Callable[[], Image.Image]]:
        """`edit` in two halves: the model runs now, and each returned function finishes one output when called
        (resizing it to the source size, quantising). Calling them in order gives exactly `edit`'s images.

        `prepared`: `prepare(image)` of each source when the caller computed it ahead (None entries: not prepared).
        The edit stage calls the finishers on its writer thread, so this per-image work overlaps the next batch's
        model call instead of adding to it. Override both when that work is a real cost; the default does
        everything inside `edit`.
        """
        return [functools.partial(_finished, image) for image in self.edit(queries, images, seeds=seeds)]

    def use_queryset(self, queryset: Any) -> None:
        """Give the editor the run's query set, so `query_file` can find the files its queries name. The edit stage
        calls this before the first edit; a direct `edit()` call outside a run calls it first itself."""
        self.__dict__["_queryset_root"] = Path(queryset.root)

    def query_file(self, query: Query, field: str) -> Path:
        """The absolute path of a file `query` names (`edit_mask`, `target_image`, `image`, ...; its records hold
        paths relative to the query-set folder), for an editor that reads more of a query than its source, such as
        a masked inpainter. ValueError when the query names no such file, or no query set was given
        (`use_queryset`)."""
        root = self.__dict__.get("_queryset_root")
        if root is None:
            raise ValueError(f"{type(self).__name__}.query_file: no query set was given; the edit stage gives it, a "
                             "direct edit() call must call use_queryset(queryset) first")
        rel = getattr(query, field, None)
        if not isinstance(rel, str) or not rel:
            raise ValueError(f"query {query.id} names no {field} file")
        return root / rel

    def record_rewrite(self, query_id: str, text: str) -> None:
        """Keep the rewritten text query `query_id` was edited with (an editor that `rewrites_instruction` calls it
        from `edit` / `edit_deferred`, once per query; the edit stage takes it into that query's record)."""
        if not isinstance(text, str):
            raise TypeError(f"query {query_id}: the rewritten instruction must be text, not {type(text).__name__}")
        self.__dict__.setdefault("_rewrites", {})[query_id] = text

    def take_rewrites(self, query_ids: Sequence[str]) -> dict[str, str]:
        """The rewritten text of each of `query_ids` recorded since the last call (`record_rewrite`), removed from
        the editor; the edit stage calls it after each batch. An editor that keeps its rewrites elsewhere (a file of
        them: `external`) overrides it."""
        kept = self.__dict__.get("_rewrites", {})
        return {q: kept.pop(q) for q in query_ids if q in kept}

    def missing(self, query_ids: Sequence[str]) -> list[str]:
        """The ids among `query_ids` this editor has no output for by design (a folder of edits made elsewhere that
        covers part of a set). The edit stage leaves them unedited: they count as missing (`n_missing`, a PARTIAL
        row), not as failures. Default: none."""
        return []

    def work_counts(self) -> dict[str, int]:
        """Cumulative counts of the work done since construction, {counter: n}; the edit stage records the
        difference over its call (docs/results.md, "Counting the work"). Diffusion editors count UNet sample
        evaluations (benchmark.editing.work_counter). Default: nothing counted ({})."""
        return {}

    def check_prompts(self, queries: Sequence[Query]) -> None:
        """Refuse queries without the text this editor family reads (instruction or both captions), and queries
        whose instruction or captions are over the prompt length limit (whatever the family: the query is bad)."""
        limit = _MAX_PROMPT_CHARS[0]
        for q in queries:
            for field in ("instruction", "source_caption", "target_caption"):
                n = len(getattr(q, field) or "")
                if n > limit:
                    raise PromptTooLongError(f"query {q.id}: {field} is {n:,} characters, over the limit of "
                                             f"{limit:,} (limits.max_prompt_chars)")
            if self.prompt_kind == "instruction" and not q.instruction:
                raise PromptKindError(
                    f"query {q.id}: editor {type(self).__name__} is instruction-based but the query has no instruction"
                )
            if self.prompt_kind == "description" and not (q.source_caption and q.target_caption):
                raise PromptKindError(
                    f"query {q.id}: editor {type(self).__name__} is description-based and needs source_caption and "
                    "target_caption"
                )


def _finished(image: Image.Image) -> Image.Image:
    return image


def query_seed(seed: int, query_id: str) -> int:
    """The seed of one query: a hash of (global seed, query id), independent of batching and sharding."""
    digest = hashlib.sha256(f"{int(seed)}:{query_id}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def generators(seeds: Sequence[int]) -> list[Any]:
    """One CPU `torch.Generator` per query (CPU so outputs match across devices)."""
    import torch

    return [torch.Generator(device="cpu").manual_seed(int(s)) for s in seeds]
