"""What the judged protocols share (metrics=gedit, metrics=imgedit): a judge backbone, the pinned prompt file, and a
suite that loads (source, edit) pairs chunk by chunk, asks the backbone and turns the replies into rows.

A protocol's suite subclasses `PromptedJudgeSuite` and gives its `protocol` string, its protocol module's
`check_prompts_identity` and `load_prompts`, its `samples_class` (how its edit is loaded), `applies_to()` and
`_rows(good, prompts)` (its requests through `_judge`, then its parsing through `_read_replies`, which also gives
the row's judge provenance and failure columns).

Failures are data (docs/judge.md, "Failures and provenance"): a request that failed after its retries, that the
judge refused, or whose reply does not parse makes the row a failure row that keeps the replies, with
`judge_failure` naming the kind (`call_failed`, `refused`, `unparseable`); never a score. An unparseable reply is
marked in the backbone's reply cache, so that rescoring (rerunning the same command: failed rows are scored again)
asks the judge again for exactly the failed requests.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

from benchmark.io.types import MetricInfo, Query
from benchmark.metrics.chunking import QuerySamples
from benchmark.metrics.components import LazyComponents
from benchmark.models.judge_reply import (
    CALL_FAILED,
    FAILURE_KINDS,
    REFUSED,
    UNPARSEABLE,
    JudgeReply,
    as_reply,
    reply_columns,
)


class _BusyClock:
    """Seconds during which at least one `with` block was running: the judge's time when rounds overlap
    (`_overlapped_rounds`), counted once, not once per round."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._active = 0
        self._since = 0.0
        self._lock = threading.Lock()

    def __enter__(self) -> None:
        with self._lock:
            if self._active == 0:
                self._since = time.perf_counter()
            self._active += 1

    def __exit__(self, *exc: Any) -> None:
        with self._lock:
            self._active -= 1
            if self._active == 0:
                self.seconds += time.perf_counter() - self._since


class JudgeBackbone(Protocol):
    """What answers the judge's prompts. `name`: the model and its revision (shown on the leaderboard); `identity`:
    everything of the backbone that shapes a reply (model, revision, dtype, decoding; an endpoint adds the served
    model's name and the server's version), known before the first request; `generate`: one reply per
    (images, prompt text) request, in order. `benchmark.models.vlm.TextJudge` is the local one,
    `benchmark.models.judge_endpoint.EndpointJudge` the served one."""

    name: str

    @property
    def identity(self) -> str: ...

    def generate(self, requests: Sequence[tuple[Sequence[Any], str]]) -> list[str]: ...


@dataclass
class LoadedPair:
    """One query's images as a judged protocol loads them (PIL), or the reason they could not be."""

    query: Query
    source: Any = None
    edit: Any = None
    error: str = ""


def at_source_size(edit: Any, size: tuple[int, int]) -> Any:
    """The edit as GEdit-Bench's and EditScore's scripts judge it: `convert("RGB").resize(source.size)`, PIL's
    default filter (bicubic)."""
    from PIL import Image

    edit = edit.convert("RGB")
    return edit if edit.size == size else edit.resize(size, Image.Resampling.BICUBIC)


class PairSamples(QuerySamples):
    """A judged protocol's `LoadedPair`s: the source as stored and the edit (RGB) as the editor wrote it (`fit`
    leaves it; ImgEdit-Bench's and EditReward's judges get it so)."""

    def item(self, query: Query) -> LoadedPair:
        return LoadedPair(query)

    def load(self, out: LoadedPair, q: Query, edit_path: Path) -> None:
        from benchmark.io.imageio import load_rgb

        out.source = self.original(q, lambda img: img)
        out.edit = self.fit(load_rgb(edit_path), out.source.size)

    @staticmethod
    def fit(edit: Any, size: tuple[int, int]) -> Any:
        return edit


class PairAtSourceSize(PairSamples):
    """`PairSamples` with the edit resized to the source's size (`at_source_size`): GEdit-Bench, EditScore."""

    fit = staticmethod(at_source_size)


class PromptedJudgeSuite(LazyComponents):
    """The shared part of a judged protocol's suite (see the module). Subclasses set `info`, `COLUMN_INFO` and
    `SUMMARY_INFO` (class attributes).

    backbone: a `JudgeBackbone`. prompts_file, prompts_commit, prompts_sha256: the fetched prompt file, the commit it
    was fetched at and its checksum (both enter the signature; the file is checked on first use). chunk_size:
    queries per round.
    """

    info: ClassVar[MetricInfo]
    COLUMN_INFO: ClassVar[dict[str, tuple[bool, str]]]
    SUMMARY_INFO: ClassVar[dict[str, tuple[bool, str]]]
    # the protocol module's functions (commit, sha256) -> None and (path, sha256, commit) -> prompts, and the
    # QuerySamples class that loads its (source, edit) pairs
    check_prompts_identity: ClassVar[Callable[[str, str], None]]
    load_prompts: ClassVar[Callable[[str, str, str], Any]]
    samples_class: ClassVar[type]
    # the images of each judge request one query sends, in order (its length: requests per query); the budget line
    # counts the judge's cost from it (benchmark.plan.judge_budget)
    JUDGE_REQUESTS: ClassVar[tuple[int, ...]] = ()
    # rounds (chunks) judged at once when the backbone's calls may overlap (`_overlapped_rounds`)
    ROUNDS_IN_FLIGHT: ClassVar[int] = 2

    @classmethod
    def judge_requests(cls, config: Any) -> tuple[int, ...]:
        """The images of each request one query sends under `config` (the suite's config node; nothing is built)."""
        return cls.JUDGE_REQUESTS

    def __init__(self, *, backbone: Any, prompts_file: str, prompts_commit: str, prompts_sha256: str,
                 chunk_size: int = 16, load_threads: int | None = None, prefetch: bool = False,
                 device: str = "auto") -> None:
        from benchmark.io.model_cache import resolve_device
        from benchmark.metrics.chunking import check_loading
        from benchmark.metrics.judge.suite import SuiteInfo

        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive integer, not {chunk_size!r}")
        self.backbone = backbone
        self.prompts_file, self.prompts_commit, self.prompts_sha256 = str(prompts_file), prompts_commit, prompts_sha256
        self._check_identity()
        self._prompts: Any = None
        self.chunk_size = chunk_size
        self.load_threads, self.prefetch = check_loading(load_threads, prefetch)
        self.device = resolve_device(device)
        self._factories, self._models = {}, {}
        self.timings: dict[str, float] = {}
        self._judge_clock = _BusyClock()
        self.column_info = self.COLUMN_INFO | self.SUMMARY_INFO
        self.columns = tuple(self.COLUMN_INFO)
        cls = type(self)
        self.info = SuiteInfo(cls.info.name, cls.info.version, True, description=cls.info.description,
                              identity={cls.info.name: self.identity})

    # -- what a protocol gives -----------------------------------------------------------------------------------
    @property
    def protocol(self) -> str:
        """The protocol's identity: source commit, prompt checksum, prompt layout, parser version."""
        raise NotImplementedError

    def _check_identity(self) -> None:
        """Refuse a prompts_commit / prompts_sha256 that is not a pinned identity (before any file is read)."""
        type(self).check_prompts_identity(self.prompts_commit, self.prompts_sha256)

    def _load_prompts(self) -> Any:
        """The protocol's prompts, read from `prompts_file` and checked (its `load_prompts`)."""
        return type(self).load_prompts(self.prompts_file, self.prompts_sha256, self.prompts_commit)

    def _samples(self, queryset: Any, queries: Sequence[Query], paths: Sequence[Path]) -> Any:
        """The `QuerySamples` that loads this protocol's `LoadedPair`s."""
        return type(self).samples_class(queryset, queries, paths)

    def _rows(self, good: list[LoadedPair], prompts: Any) -> list[dict[str, Any]]:
        """One row per loaded pair: its requests through `_judge`, its replies parsed."""
        raise NotImplementedError

    # -- shared ---------------------------------------------------------------------------------------------------
    @property
    def identity(self) -> str:
        """The backbone's identity and the protocol's (commit, prompt checksum, parser)."""
        return f"{self.backbone.identity}|{self.protocol}"

    def components(self) -> dict[str, str]:
        return {"judge": self.backbone.name, "backbone": self.backbone.identity, "protocol": self.protocol}

    def check_inputs(self) -> None:
        """Read and check the pinned prompt file(s) now (the preflight calls this before the first edit): a missing
        or altered file stops the run before any work, not after the editing."""
        self.prompts  # noqa: B018

    @property
    def prompts(self) -> Any:
        """The protocol's prompts, read and checked on first use (a config that is only composed needs no file)."""
        if self._prompts is None:
            self._prompts = self._load_prompts()
        return self._prompts

    def model_seconds(self) -> dict[str, float]:
        return {k: v for k, v in self.timings.items() if "forward" in k}

    def _judge(self, requests: list[tuple[list[Any], str]]) -> list[JudgeReply]:
        """The backbone's replies to `requests`, in order, timed as the judge's forward time (a backbone that
        returns plain strings is named by its `name`, and its `version` when it has one)."""
        with self._judge_clock:
            replies = self.backbone.generate(requests)
        self.timings["judge forward"] = self._judge_clock.seconds
        if len(replies) != len(requests):
            raise RuntimeError(f"the judge backbone {self.backbone.name} answered {len(replies)} of "
                               f"{len(requests)} prompts")
        version = str(getattr(self.backbone, "version", "") or "")
        return [as_reply(r, self.backbone.name, version) for r in replies]

    def _read_replies(self, labelled: Sequence[tuple[str, JudgeReply]],
                      parse: Callable[[str], Any] | Mapping[str, Callable[[str], Any]],
                      error: type[Exception] | tuple[type[Exception], ...],
                      unparseable: Callable[[str, Exception], str]) -> tuple[dict[str, Any], dict[str, Any]]:
        """One row's replies, parsed: (the parsed value by label, the row's judge columns). `parse`: one parser for
        every reply, or one per label (a protocol whose prompts are read differently). The columns are the
        provenance (`reply_columns`) and `judge_failure`; when a reply failed, refused or did not parse (`parse`
        raised `error`, explained by `unparseable(label, err)`), also `status` failed and the `reason` naming
        each. An unparseable reply is rejected from the backbone's cache (asked again on rescoring)."""
        parsed: dict[str, Any] = {}
        why: list[str] = []
        kinds: list[str] = []
        for label, reply in labelled:
            if reply.failure:
                kinds.append(reply.failure)
                verb = {CALL_FAILED: "failed", REFUSED: "was refused"}.get(reply.failure, reply.failure)
                why.append(f"the judge call for the {label} prompt {verb} ({reply.failure}): {reply.error}")
                continue
            try:
                parsed[label] = (parse[label] if isinstance(parse, Mapping) else parse)(reply)
            except error as err:
                kinds.append(UNPARSEABLE)
                why.append(f"{unparseable(label, err)} ({UNPARSEABLE})")
                reject = getattr(self.backbone, "reject", None)
                if reject is not None:
                    reject(reply, str(err))
        columns: dict[str, Any] = reply_columns(reply for _, reply in labelled)
        if not kinds:
            return parsed, columns | {"judge_failure": ""}
        kind = next(k for k in FAILURE_KINDS if k in kinds)
        return parsed, columns | {"judge_failure": kind, "status": "failed", "reason": "; ".join(why)}

    def _score_chunk(self, items: list[LoadedPair]) -> list[dict[str, Any]]:
        prompts = self.prompts
        rows = [{"query_id": it.query.id, "status": "failed", "reason": it.error} for it in items if it.error]
        good = [it for it in items if not it.error]
        return rows + (self._rows(good, prompts) if good else [])

    def score_queries(self, queryset: Any, queries: Sequence[Query], edit_paths: Sequence[Path], *, work_dir: Path,
                      num_workers: int = 0, progress: bool = True) -> Iterator[list[dict[str, Any]]]:
        """Yield lists of result rows (one dict per query), chunk by chunk."""
        from benchmark.metrics.chunking import by_source

        self.prompts  # noqa: B018 (a missing or altered prompt file stops the run before any judging)
        qs, paths = by_source(queries, edit_paths)
        samples = self._samples(queryset, qs, paths)
        desc = type(self).info.name
        if not getattr(self.backbone, "overlapping_calls", False):
            yield from self._score_chunks(samples, self._score_chunk, desc=desc, num_workers=num_workers,
                                          progress=progress)
            return
        yield from self._overlapped_rounds(samples, desc, num_workers, progress)

    def _overlapped_rounds(self, samples: Any, desc: str, num_workers: int,
                           progress: bool) -> Iterator[list[dict[str, Any]]]:
        """`_score_chunk` over the chunks, ROUNDS_IN_FLIGHT of them judged at once, their rows yielded in chunk
        order: a served judge (whose `generate` calls may overlap, within its own concurrency) gets the next
        round's requests while the slowest of the last round are still out, and the next chunk is loaded and
        encoded meanwhile, so neither waits for the other. Same rows, same order as one round at a time."""
        from collections import deque
        from concurrent.futures import ThreadPoolExecutor

        pending: deque[Any] = deque()
        with ThreadPoolExecutor(self.ROUNDS_IN_FLIGHT, thread_name_prefix="editmeter-judge-round") as pool:
            try:
                for future in self._score_chunks(samples, lambda items: pool.submit(self._score_chunk, items),
                                                 desc=desc, num_workers=num_workers, progress=progress):
                    pending.append(future)
                    if len(pending) >= self.ROUNDS_IN_FLIGHT:
                        yield pending.popleft().result()
                while pending:
                    yield pending.popleft().result()
            finally:  # stopped early (an error, ^C): rounds not yet started are not judged
                for future in pending:
                    future.cancel()
