"""Budgeted runs: before the first edit, estimate what the run will cost and stop it when that is over
budget.

The estimate is the editor's seconds per query and load time on this device class (`configs/costs.yaml`, each
number with where it was measured) times the queries still to do, plus the metric suite's scoring seconds where the
table has them. An editor that shares one inversion among the queries of a source (its class sets
`shares_inversions`, e.g. P2P) and whose row splits its cost (`s_per_source`) pays the inversion part once per
distinct (source image, source caption) among the queries to do, and the edit part once per query. Above `budget.max_gpu_hours` the run asks on a terminal and refuses otherwise, naming the stratified
sample option (`queryset.sample=N`, benchmark.querysets.sample) that fits the budget. An editor, profile or device
without a row is never blocked: its cost is reported unknown.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.io.errors import PreflightError
from benchmark.plan.resolved import Components, read_costs, resolve_components
from benchmark.plan.run_plan import RunPlan

load_costs = read_costs  # the cost table (benchmark.plan.resolved reads it once per run)
DEFAULT_MAX_HOURS = 10.0


class OverBudget(PreflightError):
    """The run's estimated device hours are over `budget.max_gpu_hours` and nobody confirmed it."""


@dataclass(frozen=True)
class Cost:
    """One row of the cost table: seconds per query, load seconds, and where they were measured. A row that splits
    an inversion off (`s_per_source`, seconds per inverted source) gives the edit part alone in `s_per_query`."""

    s_per_query: float
    load_s: float
    source: str
    s_per_source: float | None = None
    confidence: str = "measured"  # CONFIDENCE's keys: how sure the figures are (what the budget line prints)

    @property
    def s_unshared(self) -> float:
        """Seconds per query when every query inverts its own source (no sharing): both parts."""
        return self.s_per_query + (self.s_per_source or 0.0)


@dataclass(frozen=True)
class Estimate:
    """What the run will cost: `hours` of device time over all shards, `wall_s` for this process."""

    editor: str
    device_class: str
    todo: int  # queries still to edit, all shards of the selection
    done: int  # queries already edited or failed in this run's folder
    shards: int
    cost: Cost
    score: Cost | None  # the metric suite's scoring cost, when the table has it
    pool: int | None = None  # the largest `queryset.sample=N` the set allows (None: not known)
    # distinct (source image, source caption) among the queries to do, when the editor shares one inversion among
    # them and the row splits the inversion off (None: every query pays the whole row)
    sources: int | None = None
    # a set with multi-turn sessions draws its samples in whole sessions: the turns of its longest session, which
    # bounds the queries one sampled session brings (1: a set without sessions, sampled in queries)
    unit_queries: int = 1
    # queries an earlier run of this setting edited with other code: carry-over adopts them after a re-edited sample
    # matches (not in `todo`: the line says so, and that a difference edits them all)
    carry: int = 0

    @property
    def shared(self) -> bool:
        return self.sources is not None and self.cost.s_per_source is not None

    @property
    def per_query(self) -> float:
        """Seconds per query, each query inverting its own source where the row splits an inversion off: the bound
        a sample of unknown sources is sized with (`largest_sample`)."""
        return self.cost.s_unshared + (self.score.s_per_query if self.score else 0.0)

    @property
    def _inversion_s(self) -> float:
        return (self.sources or 0) * (self.cost.s_per_source or 0.0)

    @property
    def hours(self) -> float:
        if not self.shared:
            return (self.todo * self.per_query + self.shards * self.cost.load_s) / 3600
        edit = self.cost.s_per_query + (self.score.s_per_query if self.score else 0.0)
        return (self.todo * edit + self._inversion_s + self.shards * self.cost.load_s) / 3600

    @property
    def wall_s(self) -> float:
        if not self.shared:
            return math.ceil(self.todo / self.shards) * self.per_query + self.cost.load_s
        edit = self.cost.s_per_query + (self.score.s_per_query if self.score else 0.0)
        return (math.ceil(self.todo / self.shards) * edit
                + math.ceil((self.sources or 0) / self.shards) * (self.cost.s_per_source or 0.0) + self.cost.load_s)

    def sureness(self) -> str:
        """How sure the figures are, from the rows' `confidence` (the measurement notes stay in configs/costs.yaml)."""
        def said(cost: Cost) -> str:
            return CONFIDENCE[cost.confidence].format(cls=self.device_class)

        edit = "" if self.cost.confidence == NO_MODEL else said(self.cost)
        if not self.score:
            return edit
        return (f"edit cost {edit}; " if edit else "") + f"scoring cost {said(self.score)}"

    def describe(self) -> str:
        """One line: hours, wall time, how they add up, and how sure they are."""
        done = f" ({self.done} already done)" if self.done else ""
        if self.carry:
            done = (f" ({self.done} already done, " if self.done else " (") + (
                f"{self.carry} to carry over from an earlier run of this setting after a re-edited sample matches; "
                "if it differs, they are edited too)")
        if self.cost.confidence == NO_MODEL and not self.score:
            return (f"{self.editor} loads no model: its {self.todo} queries to do{done} take seconds on any machine "
                    "(no device hours to estimate)")
        scoring = f" + {self.score.s_per_query:g} s scoring" if self.score else ""
        shards = f" over {self.shards} shards" if self.shards > 1 else ""
        edit = self.cost.s_per_query if self.shared else self.cost.s_unshared
        edit_part = (f"{self.editor} loads no model" if self.cost.confidence == NO_MODEL else f"{edit:g} s edit")
        inversions = (f" + {self.sources} sources x {self.cost.s_per_source:g} s inversion (shared by their queries)"
                      if self.shared else "")
        load = f" + {self.shards} x {self.cost.load_s:g} s load" if self.cost.confidence != NO_MODEL else ""
        return (f"~{self.hours:,.2f} {self.device_class} hours, wall ~{human_time(self.wall_s)}{shards}: "
                f"{self.todo} queries to do{done} x ({edit_part}{scoring}){inversions}{load}; {self.sureness()}")


# a row's `confidence` -> what the budget line tells the user ({cls}: the device class the row is for)
CONFIDENCE = {
    "measured": "measured on {cls}",
    "noisy": "an order of magnitude (measured on a busy shared {cls})",
    "estimated": "an estimate, not measured on {cls}",
}
# the cost of an editor that loads no model (no cost row needed): the edit itself is image arithmetic
NO_MODEL = "no_model"


def weight_free(editor_config: Mapping[str, Any] | None) -> bool:
    """Whether the editor loads no model: its config has no `weights` key (identity, oracle, overedit; a diffusion
    or DiT editor always has one) and it is not `external` (edits made elsewhere have a row of their own)."""
    return (editor_config is not None and "weights" not in editor_config
            and str(editor_config.get("_target_", "")) != EXTERNAL_TARGET)


def human_time(seconds: float) -> str:
    """'45 s', '12 min', '3.4 h', '50 days'."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 3 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} days"


def _row(node: Any, where: str) -> Cost:
    try:
        per_source = node.get("s_per_source")
        confidence = node.get("confidence")
        if confidence not in CONFIDENCE:
            raise ValueError(f"confidence: {confidence!r}, expected one of {', '.join(CONFIDENCE)}")
        return Cost(float(node["s_per_query"]), float(node.get("load_s", 0.0)), str(node["source"]),
                    None if per_source is None else float(per_source), str(confidence))
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise PreflightError(f"budget: cost table row {where} needs s_per_query, load_s, confidence and source, "
                             f"and optionally s_per_source ({err})") from None


def distinct_sources(queries: Any) -> int:
    """The number of distinct (source image, source caption) pairs among `queries`: the inversions they need."""
    return len({(q.image, q.source_caption) for q in queries})


def device_class(device: str | None, table: dict[str, Any], gpu_name: Callable[[], str]) -> tuple[str, str]:
    """(the device's class in the table, a note when a GPU of no listed class borrows another class's rows)."""
    if not device or device == "cpu":
        return "cpu", ""
    name = gpu_name()
    for cls, patterns in (table.get("device_classes") or {}).items():
        if any(p.lower() in name.lower() for p in patterns):
            return str(cls), ""
    fallback = str(table.get("unlisted_gpu", "gpu"))
    return fallback, (f"{name} is not in the cost table's device_classes: estimated with the {fallback} rows "
                      "(measure it: editmeter gpu-check)")


def lookup(table: dict[str, Any], group: str, name: str, size: str, cls: str,
           config: Any = None) -> Cost | None:
    """The row of `name` (an editor or metric set) at `size` on `cls`, or its `any`-device row; None when absent.

    A row may give `by_setting: {key: {value: {field: ...}}}`: where `config` (the editor's config) has `key` =
    `value`, those fields replace the row's (P2P's `inversion`: a negative-prompt or Direct Inversion costs a
    fraction of the null-text inversion the row measured)."""
    sizes = (table.get(group) or {}).get(name) or {}
    rows = sizes.get(size) or {}
    for key in (cls, "any"):
        if key in rows:
            node, where = dict(rows[key]), f"{group}.{name}.{size}.{key}"
            for setting, variants in (node.pop("by_setting", None) or {}).items():
                value = config.get(setting) if config is not None else None
                if value is not None and str(value) in (variants or {}):
                    node.update(variants[str(value)])
                    where += f".by_setting.{setting}.{value}"
            return _row(node, where)
    return None


def done_ids(results: Path, run_set: str, editor: str, editor_config: Any, seed: int, profile: str,
             sample: dict[str, Any] | None = None, protocol: str = "single_turn", code: str | None = None,
             carry: set[str] | None = None) -> set[str]:
    """Query ids already edited (or failed) in this run's folder: the folder under results/runs/<set>-<hash> whose
    run.json records this editor config, seed, profile and protocol (the editor signature needs the loaded editor,
    so this matches by what determines it; the two protocols' edits are never the same). For a sample (`sample`: the set's draw), also the ids edited ok by runs of
    smaller nested samples of the same draw, which the run reuses (benchmark.stages.reuse; checked there, counted
    here). With `code` (the digest of the code that makes the editor's pixels, `benchmark.plan.config.editor_code_digest`),
    a folder of this setting whose run.json records other code (or none: a key of scheme 1) is not this run's: its
    edits go to `carry` instead, the queries carry-over may adopt after a verified sample (benchmark.stages.carry)."""
    from benchmark.stages.reuse import SAME_DRAW

    best: set[str] = set()
    reusable: set[str] = set()
    for meta_path in (results / "runs").glob(f"*/{editor}-*/run.json"):
        own = meta_path.parent.parent.name == run_set
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # unreadable: the run itself quarantines or rewrites it; the estimate just counts its work
        if (meta.get("editor_config"), meta.get("seed"), meta.get("profile")) != (editor_config, seed, profile):
            continue
        if meta.get("protocol", "single_turn") != protocol:  # run.json without it: a run from before protocols
            continue
        other = meta.get("sample")
        nested = (not own and isinstance(sample, dict) and isinstance(other, dict) and isinstance(other.get("n"), int)
                  and other["n"] < sample["n"] and all(other.get(k) == sample.get(k) for k in SAME_DRAW))
        if not (own or nested):
            continue
        from benchmark.stages.edit import latest_records

        try:
            records = latest_records(meta_path.parent)
        except Exception:  # noqa: BLE001 - a corrupt log is the edit stage's error to report, not the estimate's
            continue
        key = meta.get("editor_key")
        other_code = code is not None and not (isinstance(key, dict) and key.get("code") == code)
        if own and other_code:
            if carry is not None:
                carry |= {qid for qid, rec in records.items() if rec.get("status") == "ok"}
        elif own:
            best = max(best, set(records), key=len)
        else:
            reusable |= {qid for qid, rec in records.items() if rec.get("status") == "ok"}
    return best | reusable


def sample_pool(sample_types: Any, full: Any) -> int | None:
    """The largest `queryset.sample=N` the configured set allows: its pool (the queries of `sample_types`; for a set
    with sessions, the sessions whose first turn is of those types, as samples of it count sessions), less one when
    the pool is the whole set (a sample of every query or session is refused: run the set). None when unknown.
    `sample_types`: the query set config's `sample_types`."""
    from benchmark.querysets.sample import SampleError, resolve_types
    from benchmark.querysets.sessions import first_turns

    info = full.meta.get("sample")
    if isinstance(info, dict):  # already a sample: a smaller one draws from the same pool
        pool, size = info.get("pool"), info.get("sessions" if info.get("unit") == "sessions" else "set_size")
    else:
        try:
            types = resolve_types(sample_types)
        except SampleError:
            return None  # the sample request itself reports it
        units = first_turns(full.queries) if any(q.session is not None for q in full.queries) else full.queries
        pool = sum(1 for q in units if types is None or q.edit_type in types)
        size = len(units)
    if not isinstance(pool, int) or not isinstance(size, int):
        return None
    return pool if pool < size else size - 1


def largest_sample(est: Estimate | list[Estimate], max_hours: float) -> int:
    """The `queryset.sample=N` whose estimate fits `max_hours` (0 when even the load does not), never more than the
    pool the sample is drawn from (`Estimate.pool`): N queries, or for a set with sessions N whole sessions, counted
    at its longest session's turns so that any N sessions fit. Several estimates (a launch's sweep settings): the N
    each of them runs, all of them together within `max_hours`."""
    ests = est if isinstance(est, list) else [est]
    per_query = sum(e.per_query for e in ests)
    pools = [e.pool for e in ests if e.pool is not None]
    cap = min(pools) if pools else None
    if per_query <= 0:
        n = max(e.todo for e in ests)
    else:
        n = max(0, int((max_hours * 3600 - sum(e.shards * e.cost.load_s for e in ests)) / per_query))
        n //= max(e.unit_queries for e in ests)
    return n if cap is None else max(0, min(n, cap))


def _sample_option(n: int) -> str:
    return (f"queryset.sample={n} (a stratified sample of the set that fits the budget; docs/querysets.md#samples)"
            if n > 0 else "queryset.sample=N (a stratified sample; docs/querysets.md#samples)")


def refusal(est: Estimate, max_hours: float, set_name: str) -> str:
    """The one message of an over-budget run: the estimate, the sample that fits, and how to allow the run."""
    return (f"budget: {set_name} on {est.editor} is estimated at {est.describe()}, over budget.max_gpu_hours="
            f"{max_hours:g}. Run a sample instead: {_sample_option(largest_sample(est, max_hours))}; or allow this "
            f"run: budget.max_gpu_hours={math.ceil(est.hours)} or budget.accept=true")


EXTERNAL_TARGET = "editors.external.ExternalEdits"  # configs/editor/external.yaml: edits made elsewhere


def _confirm(question: str) -> bool:
    """Ask on the terminal; anything but y/yes is no."""
    try:
        return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")
    except EOFError:
        return False


def _interactive() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


def _gpu_name() -> str:
    import torch

    return torch.cuda.get_device_name() if torch.cuda.is_available() else "unknown GPU"


def estimate(plan: RunPlan, full: Any, *, editor: str, metrics: str, gpu_name: Callable[[], str] = _gpu_name,
             table: dict[str, Any] | None = None, components: Components | None = None,
             shards: Sequence[Any] | None = None) -> tuple[Estimate | None, str]:
    """(the run's estimate, a note); None with the reason when the table has no row for this editor here.
    `components` and `shards` (every shard's queries): the run's, resolved once (benchmark.plan.resolved); resolved
    here when not given."""
    from benchmark.models.diffusion import resolve_device
    from benchmark.plan.config import portable
    from benchmark.querysets.sessions import longest_session

    parts = components if components is not None else resolve_components(plan, metrics=False)
    table = table if table is not None else parts.cost_table()
    profile = plan.profile
    size = str((table.get("profiles") or {}).get(profile, profile))
    editor_config = plan.editor.config
    device = editor_config.get("device")
    cls, note = device_class(resolve_device(str(device)) if device else None, table, gpu_name)
    # edits made elsewhere (`editmeter score --name LABEL`) cost what the `external` row says, whatever their label
    row = "external" if str(editor_config.get("_target_", "")) == EXTERNAL_TARGET else editor
    cost = lookup(table, "editors", row, size, cls, editor_config)
    if cost is None and weight_free(editor_config):
        cost = Cost(0.0, 0.0, "loads no model", confidence=NO_MODEL)
    if cost is None:
        from benchmark.plan.config import options

        if row not in options("editor"):  # a label no `editor=` names (a meta-evaluation candidate): no command to suggest
            return None, f"cost unknown: configs/costs.yaml has no row for {row} at {size} size on {cls}"
        how = ("editmeter gpu-check (its s/query and load s columns)" if cls != "cpu" else
               f"editmeter run editor={row} queryset=demo queryset.sample=14"
               + (f" profile={profile}" if profile != "pretrained" else "") + " (edit seconds / 14, load editor)")
        return None, (f"cost unknown: configs/costs.yaml has no row for editor {row} at {size} size on {cls}; "
                      f"measure it with {how} and add it")
    count = int(plan.selection.shard_count)
    selected = {q.id: q for q in (plan.all_shards(full) if shards is None else shards)}
    carry: set[str] = set()
    done = set(selected) & done_ids(plan.results, f"{full.name}-{full.short_hash}", editor, portable(editor_config),
                                    int(plan.seed), profile, full.meta.get("sample"), plan.protocol,
                                    parts.editor_code, carry)
    # carry-over (reuse=carry: single-turn, or multi-turn chained here, not edits made elsewhere) adopts an earlier
    # run's edits after a verified sample: counted apart
    carries = plan.protocol == "single_turn" or str(editor_config.get("_target_", "")) != EXTERNAL_TARGET
    carry = (carry & set(selected)) - done if carries and plan.carry.mode == "carry" else set()
    score = lookup(table, "metrics", metrics, size, cls)
    # one inversion per source for all shards: they share the inversion store under the results folder
    sources = (distinct_sources(q for qid, q in selected.items() if qid not in done and qid not in carry)
               if cost.s_per_source is not None and parts.shares_inversions else None)
    return Estimate(editor, cls, len(selected) - len(done) - len(carry), len(done), count, cost, score,
                    sample_pool(plan.queryset.get("sample_types"), full), sources, longest_session(full.queries),
                    carry=len(carry)), note


def judge_cost(plan: RunPlan, full: Any, components: Components | None = None,
               shards: Sequence[Any] | None = None) -> list[str]:
    """The judged suites' cost lines (`benchmark.plan.judge_budget`) over the run's selection, all shards (`shards`);
    none when the run does not score."""
    from benchmark.plan.judge_budget import judge_lines

    if "score" not in plan.stages:
        return []
    parts = components if components is not None else resolve_components(plan, metrics=False)
    return judge_lines(plan.metrics, parts.judge_requests, full, plan.all_shards(full) if shards is None else shards)


def check_budget(plan: RunPlan, full: Any, *, editor: str, metrics: str, ask: Callable[[str], bool] = _confirm,
                 interactive: Callable[[], bool] = _interactive, components: Components | None = None,
                 shards: Sequence[Any] | None = None, **kw: Any) -> str:
    """The preflight's budget line; over budget: ask on a terminal, else raise OverBudget with the sample option.
    `components`, `shards`: the run's, resolved once (benchmark.plan.resolved); resolved here when not given."""
    opts = plan.budget
    parts = components if components is not None else resolve_components(plan, metrics=False)
    every = tuple(plan.all_shards(full)) if shards is None else shards
    est, note = estimate(plan, full, editor=editor, metrics=metrics, components=parts, shards=every, **kw)
    judge = "".join(f"\n[editmeter] {line}" for line in judge_cost(plan, full, parts, every))
    if est is None:
        return f"[editmeter] budget: {note}{judge}"
    line = f"[editmeter] budget: {est.describe()}" + (f"; {note}" if note else "") + judge
    max_hours = _max_hours(plan)
    if est.hours <= max_hours or opts.accept:
        return line
    message = refusal(est, max_hours, full.name)
    if interactive():
        print(f"[editmeter] {message}")
        if ask("Run it anyway?"):
            return line + " (confirmed on the terminal)"
    raise OverBudget(message)


def _max_hours(plan: RunPlan) -> float:
    return float(DEFAULT_MAX_HOURS if plan.budget.max_gpu_hours is None else plan.budget.max_gpu_hours)


def check_launch_budget(runs: list[tuple[RunPlan, Any, str, str]], *, ask: Callable[[str], bool] = _confirm,
                        interactive: Callable[[], bool] = _interactive, **kw: Any) -> list[str]:
    """`editmeter launch`'s one budget check, before any worker starts: `runs` are the launch's runs (config with
    every shard, full query set, editor, metrics; one per sweep setting), their estimates summed (all shards' queries
    and loads) against the first run's `budget.max_gpu_hours` / `budget.accept`. Over budget: ask once on a terminal,
    else raise OverBudget. Returns the lines to print. The workers then run with budget.accept=true: they print
    their estimate but never ask or refuse (benchmark.commands.launch)."""
    if not runs:
        return []
    first = runs[0][0]
    lines, known = [], []
    for plan, full, editor, metrics in runs:
        parts = resolve_components(plan, metrics=False)  # a launch's runs are resolved here, each once
        every = tuple(plan.all_shards(full))
        est, note = estimate(plan, full, editor=editor, metrics=metrics, components=parts, shards=every, **kw)
        what = f"{full.name} on {editor}"
        lines.append(f"[editmeter] budget: {what}: {est.describe() if est else note}" + (f"; {note}" if est and note
                                                                                        else ""))
        lines += [f"[editmeter] budget: {what}: {line.removeprefix('budget: ')}" for line in judge_cost(plan, full, parts, every)]
        if est is not None:
            known.append(est)
    hours = sum(e.hours for e in known)
    max_hours = _max_hours(first)
    if len(runs) > 1:
        lines.append(f"[editmeter] budget: the launch's {len(runs)} runs: ~{hours:,.2f} device hours in all"
                     + (f" ({len(runs) - len(known)} of unknown cost)" if len(known) < len(runs) else ""))
    if not known or hours <= max_hours or first.budget.accept:
        return lines
    if len(runs) == 1:
        message = refusal(known[0], max_hours, runs[0][1].name)
    else:
        message = (f"budget: the launch's {len(runs)} runs are estimated at ~{hours:,.2f} device hours in all, over "
                   f"budget.max_gpu_hours={max_hours:g}. Run a sample instead: "
                   f"{_sample_option(largest_sample(known, max_hours))}; or allow this launch: "
                   f"budget.max_gpu_hours={math.ceil(hours)} or budget.accept=true")
    if interactive():
        print("\n".join(lines))
        print(f"[editmeter] {message}")
        if ask("Launch it anyway?"):
            return ["[editmeter] budget: launch confirmed on the terminal"]  # its lines are printed above
    raise OverBudget(message)
