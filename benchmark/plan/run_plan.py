"""The run plan: everything one run reads from its configuration, as frozen, typed, plain values.

`benchmark.plan.config.read_plan` builds it once, at the entry (`editmeter run`, `editmeter launch`, `editmeter score`,
the meta-evaluation's runs), from the composed Hydra config; below the entry points (preflight, budget, weights,
the stages) code takes the plan, or the plain values it holds, never the config object. Component configs (the
editor, the metric sets, the query set) stay `_target_` mappings, interpolations resolved: configs call
constructors, and `benchmark.plan.config.instantiate` builds them. docs/architecture.md shows where the plan sits.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class EditorSpec:
    """The run's editor: its label (the run folder's name), its `configs/editor/` option and its config."""

    label: str
    option: str | None  # the `editor=` choice; differs from `label` for edits made elsewhere (`editmeter score`)
    config: dict[str, Any]  # the `_target_` mapping, interpolations resolved; the editor signature hashes it
    file: str  # where the config came from, for messages: `configs/editor/<option>.yaml`

    @property
    def target(self) -> str:
        """The editor class's dotted path (`_target_`), '' when the config has none."""
        return str(self.config.get("_target_") or "")


@dataclass(frozen=True)
class Selection:
    """Which queries of the set this invocation works on: its shard (`shard.index` of `shard.count`), then the
    shard's first `limit` (None: all)."""

    shard_index: int
    shard_count: int
    limit: int | None


@dataclass(frozen=True)
class PreflightOptions:
    """`preflight` and `preflight_opts`: whether the checks before the first edit run, and their settings (None: not
    set, benchmark.plan.preflight's default applies)."""

    enabled: bool
    sample: int | None  # first queries whose sources are read
    probe_timeout_s: float | None  # online with weights missing: seconds to wait for their host
    disk_factor: float | None  # disk estimate = queries x mean raw RGB bytes x this


@dataclass(frozen=True)
class BudgetOptions:
    """`budget`: the device hours a run may take without asking (None: benchmark.plan.budget's default), and whether to
    run past them anyway."""

    max_gpu_hours: float | None
    accept: bool


@dataclass(frozen=True)
class InputLimits:
    """`limits` (docs/inputs.md): None where the config leaves a limit unset."""

    max_source_pixels: int | None
    min_source_side: int | None
    max_prompt_chars: int | None


@dataclass(frozen=True)
class CarryOptions:
    """`reuse` and `carry`: adopting an earlier run's edits when only the code changed (docs/results.md#carry-over)."""

    mode: str = "carry"  # carry | strict
    sample: int = 16  # queries re-edited and compared before adopting
    tolerance: int = 0  # levels (of 255) a re-edit may differ by and count as the same; 0 = identical


@dataclass(frozen=True)
class AggregateOptions:
    """`aggregate`: the leaderboards' bootstrap."""

    bootstrap_resamples: int
    bootstrap_seed: int


@dataclass(frozen=True)
class RunPlan:
    """One run, as its configuration describes it. Values are as configured, unconverted: a bad one is reported
    where it is used, with the message it always had (a shard index out of range by `QuerySet.shard`, a bad
    `max_failed_fraction` when the run's failures are judged)."""

    editor: EditorSpec
    queryset: dict[str, Any]  # the query set's `_target_` mapping (benchmark.plan.resolved.load_queries builds it)
    metrics: dict[str, dict[str, Any]]  # metric name or suite -> its `_target_` mapping
    metrics_option: str  # the `metrics=` choice ('' when unknown): the metric set's label
    profile: str  # `profile.name`
    profile_weights: str  # `profile.weights`: what the tiny profile's note names
    seed: int
    results: Path  # `paths.results`
    selection: Selection
    stages: tuple[str, ...]
    batch_size: int
    num_workers: int
    retry_failed: bool
    fail_fast: bool
    max_failed_fraction: float  # converted where the failures are judged, as it always was
    progress: Any  # `progress`: true, false or auto (benchmark.io.console.progress_enabled judges it)
    device: str  # the metric models' device setting (`device`: auto, cpu, cuda, ...)
    preflight: PreflightOptions
    budget: BudgetOptions
    limits: InputLimits
    aggregate: AggregateOptions
    editor_overrides: tuple[str, ...] = ()  # the `editor.<key>=<value>` overrides on the command line, sorted
    protocol: str = "single_turn"  # `protocol`: single_turn | multi_turn
    carry: CarryOptions = CarryOptions()

    def selected(self, full: Any) -> Any:
        """The queries of `full` this invocation works on (its shard, then the shard's first `limit`); a multi-turn
        session stays in one shard (`benchmark.querysets.sessions.shard_whole_sessions`)."""
        from benchmark.querysets.sessions import shard_whole_sessions

        return shard_whole_sessions(full, self.selection.shard_index, self.selection.shard_count).subset(
            self.selection.limit)

    def all_shards(self, full: Any) -> list[Any]:
        """The queries every shard of this run works on (each shard's first `limit`), shard by shard."""
        from benchmark.querysets.sessions import shard_whole_sessions

        count = int(self.selection.shard_count)
        return [q for i in range(count) for q in shard_whole_sessions(full, i, count).subset(self.selection.limit)]
