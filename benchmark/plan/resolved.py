"""A run's components, resolved once: the query set loaded, its selection and every shard's queries, the metric
objects built, the editor's class imported (not built) with what it declares, the judged suites' requests, and the
cost table read.

`resolve` runs once per run, at the start of `benchmark.commands.run.execute` (`editmeter run`); below it the
preflight (benchmark.plan.preflight), the budget (benchmark.plan.budget, benchmark.plan.judge_budget) and the stages
take these values, and none of them builds, imports or reads a component again. This module and
`benchmark.plan.config` are the plan layer's only callers of `instantiate`, `locate_class` and `read_yaml`
(tests/test_resolved.py). A component that cannot be resolved is kept as its error and reported where it was always
reported: a metric config that cannot be built when the metrics are built after the preflight, a malformed cost table
by the budget (docs/architecture.md, "How a run resolves its components").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmark.io.errors import PreflightError
from benchmark.plan.run_plan import RunPlan

COSTS_FILE = Path(__file__).resolve().parents[2] / "configs" / "costs.yaml"


@dataclass(frozen=True)
class Components:
    """What the preflight, the budget and the stages need of a run's components, resolved from its plan."""

    # metric name -> its built object, or the exception building it raised (raised when the metrics are built:
    # `built_metrics`), in the plan's order
    metrics: Mapping[str, Any]
    # the editor's class declares that it inverts each source once for all its queries (`shares_inversions`) and its
    # config keeps that on (`reuse_inversions`); False when it has no `_target_` or the class cannot be imported
    shares_inversions: bool
    # judged suite name -> the images of each request one query sends (`PromptedJudgeSuite.judge_requests`); only
    # suites that declare requests, in the plan's order
    judge_requests: Mapping[str, tuple[int, ...]]
    # the cost table (configs/costs.yaml), or the PreflightError reading it raised (raised by `cost_table`)
    costs: Mapping[str, Any] | PreflightError = field(default_factory=dict)
    # the digest of the code that makes the editor's pixels (`benchmark.plan.config.editor_code_digest`), part of
    # its edits' key: what the budget matches earlier edits by and the run folder is named by; "" without `_target_`
    editor_code: str = ""

    def built_metrics(self) -> dict[str, Any]:
        """The metric objects; the first metric whose config could not be built raises its error."""
        for value in self.metrics.values():
            if isinstance(value, BaseException):
                raise value
        return dict(self.metrics)

    def cost_table(self) -> dict[str, Any]:
        """The cost table; a malformed one raises its PreflightError (naming the file)."""
        if isinstance(self.costs, PreflightError):
            raise self.costs
        return dict(self.costs)


@dataclass(frozen=True)
class Resolved:
    """One run's queries and components: the full configured query set, the queries this invocation works on (its
    shard, then its first `limit`), every shard's queries (what the budget counts) and the components."""

    full: Any
    selection: Any
    shards: tuple[Any, ...]
    components: Components


def resolve(plan: RunPlan) -> Resolved:
    """Resolve a run once: load its query set (a query-set error is a PreflightError), resolve its components, refuse
    a metric suite that scores none of the set's queries (`check_applicable`), and select its queries."""
    full = load_queries(plan)
    components = resolve_components(plan)
    check_applicable(plan, full, components.metrics)
    return Resolved(full, plan.selected(full), tuple(plan.all_shards(full)), components)


def load_selection(plan: RunPlan) -> tuple[Any, Any]:
    """(the full configured query set, the queries this run works on: its `shard`, then its first `limit`).
    Raises PreflightError as `load_queries` does, and as `check_applicable` does for a suite that scores none of
    the set's queries (whether or not `preflight` is on: that run could only make edits nobody scores)."""
    resolved = resolve(plan)
    return resolved.full, resolved.selection


def load_queries(plan: RunPlan) -> Any:
    """Build the plan's query set; a query-set error (not built, bad file) becomes a PreflightError with its own
    message, which already names the file and the build command."""
    from benchmark.plan.config import instantiate
    from benchmark.querysets.io import QuerySetError

    try:
        return instantiate(plan.queryset, at="queryset")
    except Exception as err:
        cause: BaseException | None = err
        while cause is not None and not isinstance(cause, QuerySetError):
            cause = cause.__cause__ or cause.__context__
        if cause is None:
            raise
        raise PreflightError(f"preflight: query set: {cause}") from err


def resolve_components(plan: RunPlan, *, metrics: bool = True) -> Components:
    """The plan's components: its metrics built (`metrics`; False: none built, what the budget alone needs), the
    editor class's declarations and its code digest, the judged suites' requests, the cost table. Only an editor
    module that does not parse raises here (`UnparsableCode`, one line naming it); what else cannot be resolved is
    kept as its error, or as what the budget assumes of it (an editor class that cannot be imported shares no
    inversions)."""
    from benchmark.plan.config import editor_code_digest

    editor_config = plan.editor.config
    # first: an editor module that does not parse stops the run here with one line naming it (code_identity),
    # before anything imports it
    code = editor_code_digest(editor_config.get("_target_") if editor_config is not None else None, plan.protocol)
    return Components(metrics=build_metrics(plan) if metrics else {},
                      shares_inversions=_shares_inversions(editor_config),
                      judge_requests=_judge_requests(plan.metrics), costs=_costs(), editor_code=code)


def build_metrics(plan: RunPlan) -> dict[str, Any]:
    """{metric name: its built object, or the exception building it raised}, in the plan's order."""
    from benchmark.plan.config import instantiate

    built: dict[str, Any] = {}
    for name, node in plan.metrics.items():
        try:
            built[name] = instantiate(node, at=f"metrics.{name}")
        except Exception as err:  # noqa: BLE001 (raised when the metrics are built: `Components.built_metrics`)
            built[name] = err
    return built


def _shares_inversions(editor_config: Mapping[str, Any] | None) -> bool:
    """Whether the configured editor (its `_target_` mapping) inverts each source once for all its queries: its
    class declares `shares_inversions` and its config does not turn the sharing off (`reuse_inversions: false`).
    The class is imported, not built (no weights load)."""
    from benchmark.plan.config import locate_class

    target = editor_config.get("_target_") if editor_config is not None else None
    if not target:
        return False
    try:
        cls = locate_class(str(target))
    except Exception:  # noqa: BLE001 - an unimportable editor is the run's error to report, not the estimate's
        return False
    return bool(getattr(cls, "shares_inversions", False)) and bool(editor_config.get("reuse_inversions", True))


def _judge_requests(metrics: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """{judged suite: the images of each request one query sends}, for the metrics with a `backbone` whose class
    declares requests (imported, not built)."""
    from benchmark.plan.config import locate_class

    found: dict[str, tuple[int, ...]] = {}
    for name, node in metrics.items():
        backbone = node.get("backbone") if hasattr(node, "get") else None
        if backbone is None or not node.get("_target_"):
            continue
        try:
            cls = locate_class(str(node["_target_"]))
        except Exception:  # noqa: BLE001 - an unimportable suite is the run's error to report, not the estimate's
            continue
        declared = getattr(cls, "judge_requests", None)
        requests = tuple(declared(node)) if callable(declared) else ()
        if requests:
            found[name] = requests
    return found


def read_costs(path: Path = COSTS_FILE) -> dict[str, Any]:
    """The cost table (YAML); a malformed one is a PreflightError naming the file."""
    from benchmark.plan.config import read_yaml

    try:
        table = read_yaml(path)
    except Exception as err:  # noqa: BLE001 - any parse error becomes one message naming the file
        raise PreflightError(f"budget: cannot read the cost table {path}: {err}") from None
    if not isinstance(table, dict) or not isinstance(table.get("editors"), dict):
        raise PreflightError(f"budget: {path} must map `editors` to their costs (see its header)")
    return table


def _costs() -> dict[str, Any] | PreflightError:
    try:
        return read_costs()
    except PreflightError as err:
        return err


def check_applicable(plan: RunPlan, qs: Any, metrics: Mapping[str, Any] | None = None) -> None:
    """Refuse a metrics config holding a suite that applies to none of the set's queries, for either editor family
    (the suites' own `applies_to`, as the score stage uses it): e.g. HATIE or EditVal on GEdit-Bench, which has no
    scene graphs. One line names the suite, the set and the metric configs that do apply (the set's `scored_by`,
    else the suites that score every query). Then the suites' own input files (`_check_suite_inputs`: a judged
    protocol's pinned prompts). `metrics`: the built metrics (`build_metrics`; built here when not given); a suite
    whose config could not be built is left to fail where the metrics are built."""
    built = build_metrics(plan) if metrics is None else metrics
    idle, needs, used = [], [], []
    for key, suite in built.items():
        if isinstance(suite, BaseException):  # a broken metric config fails later with its own message
            continue
        applies = getattr(suite, "applies_to", None)
        if applies is not None and not any(applies(q, kind) for q in qs.queries
                                           for kind in ("instruction", "description")):
            idle.append(str(key))
            needs.append(getattr(suite, "applies_note", ""))  # what a query needs, where the suite says so
        else:  # pairwise metrics score every query
            used.append((key, suite))
    if not idle:
        for key, suite in used:  # then the input files of the suites that will score
            _check_suite_inputs(key, suite)
        return
    reasons = qs.meta.get("not_scored_by") or {}
    why = "; ".join(sorted({str(reasons[k]) for k in idle if k in reasons}))
    names = "/".join({"hatie": "HATIE", "editval": "EditVal"}.get(k, k) for k in idle)
    verb, them = ("does", "it scores") if len(idle) == 1 else ("do", "they score")
    scored_by = ", ".join(f"metrics={m}" for m in qs.meta.get("scored_by") or ["conventional", "basic"])
    raise PreflightError(
        f"preflight: metrics={plan.metrics_option or '+'.join(idle)}: {names} {verb} not apply to query set "
        f"{qs.name}{f' ({why})' if why else ''}: none of its {len(qs)} queries "
        f"{' / '.join(n for n in needs if n) if all(needs) else f'is of an edit type {them}'}. "
        f"Use {scored_by}")


def _check_suite_inputs(key: Any, suite: Any) -> None:
    """A suite's own input files (a judged protocol's pinned prompt files: `check_inputs`), checked before the first
    edit; PreflightError naming the file and the fix."""
    from benchmark.io.pinned_prompts import ProtocolError

    check = getattr(suite, "check_inputs", None)
    if check is None:
        return
    try:
        check()
    except ProtocolError as err:
        raise PreflightError(f"preflight: metrics.{key}: {err}") from None
