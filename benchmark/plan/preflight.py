"""Preflight: before the first edit, check every component of a run, so a missing piece fails in seconds with one
message naming it and the command that fixes it (instead of after hours of edits, with a traceback).

Checked: the query set's first source files exist (read through the edit stage's loader: an unusable one is
reported, it becomes a failure row); the results folder is writable; every checkpoint the editor and
the metric models will load (`benchmark.plan.weights.resolve`) is cached, or, when online, its host answers; free disk
space covers an estimate from the set size. Reads files only: no model is loaded, nothing downloaded. The query set
and the components it checks are resolved before, once (benchmark.plan.resolved): nothing here builds or imports one.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

from benchmark.io.errors import PreflightError
from benchmark.plan.resolved import check_applicable, load_queries, load_selection
from benchmark.plan.run_plan import RunPlan

# resolved once per run in benchmark.plan.resolved; here for the entry points that load a set without a run
__all__ = ["check_applicable", "load_queries", "load_selection", "run_preflight"]

# outputs per query besides the edit PNG (segmentations, score rows): a margin on the PNG estimate
DEFAULT_DISK_FACTOR = 1.5
DEFAULT_SAMPLE = 32
DEFAULT_PROBE_TIMEOUT_S = 5.0


def run_preflight(plan: RunPlan, qs: Any, *, editor: str, metrics: str, editor_option: str | None = None) -> str:
    """Check the run before its first edit; returns a one-line summary, raises PreflightError naming the first
    missing piece and its fix. `editor`: the run's label; `editor_option`: its `configs/editor/` option when that
    differs (`editmeter score --name blur-make` runs editor=external), so the fix commands name what works."""
    t0 = time.perf_counter()
    opts = plan.preflight
    sample = int(_or(opts.sample, DEFAULT_SAMPLE))
    src = _check_sources(plan, qs, sample)
    results = plan.results
    _check_writable(results)
    weights_note, download_bytes = _check_weights(plan, editor, metrics,
                                                  float(_or(opts.probe_timeout_s, DEFAULT_PROBE_TIMEOUT_S)),
                                                  editor_option or editor)
    disk_note = _check_disk(results, len(qs), src.mean_bytes, src.n_sampled - len(src.unusable),
                            float(_or(opts.disk_factor, DEFAULT_DISK_FACTOR)), download_bytes)
    return (f"[editmeter] preflight ok in {time.perf_counter() - t0:.1f} s: {len(qs)} queries ({_sources_note(src)}), "
            f"results writable, {weights_note}, {disk_note}")


def _or(value: Any, default: Any) -> Any:
    """A `preflight_opts` value, or its default where the config does not set it."""
    return default if value is None else value


def _fix_queryset(plan: RunPlan, qs: Any) -> str:
    """The configured build command; the demo generator for generated sets; else the data target."""
    build = plan.queryset.get("build")
    if build:
        return str(build)
    if qs.meta.get("generator"):
        return "editmeter data build demo (or `git checkout -- datasets/demo`)"
    return f"make data NAME={qs.name}"


class SourceSample(NamedTuple):
    """What the preflight learnt from the first sources: their mean raw RGB size and the unusable ones."""

    mean_bytes: float  # w x h x 3, over the usable sampled sources (0 when none is usable)
    n_sampled: int
    unusable: tuple[str, ...]  # the loader's message per unusable source: each becomes a failure row


def _check_sources(plan: RunPlan, qs: Any, sample: int) -> SourceSample:
    """Read the first `sample` queries' sources through the edit stage's loader (`load_rgb`, same limits).

    A file gone since the set was loaded (and hashed) means the set is incomplete: PreflightError naming the rebuild.
    A file that is there but unusable (empty, not an image, a decompression bomb, too small) is bad input, which the
    edit stage records as that query's failure row (docs/inputs.md): it is reported here, never a refusal or a crash.
    """
    from benchmark.io.imageio import LIMITS, ImageInputError, load_rgb

    queries = list(qs.queries[:sample])
    missing: list[str] = []
    unusable: list[str] = []
    sizes: list[int] = []
    for q in queries:
        path = qs.path(q.image)
        if not path.is_file():
            missing.append(str(path))
            continue
        try:
            with load_rgb(path, min_side=LIMITS.min_source_side) as im:
                sizes.append(im.width * im.height * 3)
        except ImageInputError as err:
            unusable.append(str(err))
    if missing:
        raise PreflightError(
            f"preflight: query set {qs.name}: {len(missing)} source file(s) of its first {len(queries)} queries are "
            f"missing since the set was loaded, e.g. {missing[0]}. The set is incomplete; rebuild it: "
            f"{_fix_queryset(plan, qs)}")
    return SourceSample(sum(sizes) / len(sizes) if sizes else 0.0, len(queries), tuple(unusable))


def _sources_note(src: SourceSample) -> str:
    """'14 sources checked' plus, when some are unusable, how many and the first reason (they become failure rows)."""
    note = f"{src.n_sampled} sources checked"
    if src.unusable:
        note += (f"; {len(src.unusable)} unusable, their queries will be failure rows, e.g. "
                 f"{_shorten(src.unusable[0])}")
    return note


def _shorten(text: str, limit: int = 300) -> str:
    from benchmark.io.console import shorten

    return shorten(text, limit)


def _check_writable(results: Path) -> None:
    try:
        results.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=results, prefix=".preflight-"):
            pass
    except OSError as err:
        raise PreflightError(f"preflight: results folder {results} is not writable ({type(err).__name__}: {err}). "
                             "Choose another one: paths.results=<writable folder>") from err


def _check_weights(plan: RunPlan, editor: str, metrics: str, timeout: float, editor_option: str) -> tuple[str, int]:
    """Every checkpoint cached, or (online) its host reachable. Returns (note, bytes still to download)."""
    from benchmark.plan.weights import fix_command, hub_offline, human, resolve, unreachable_hosts

    try:
        checkpoints = resolve(plan, editor)
    except ValueError as err:  # a component that cannot be pinned (benchmark.models.dino_v1.UnpinnedRevisionError)
        raise PreflightError(f"preflight: {err}") from None
    if not checkpoints:
        return "no pretrained weights needed", 0
    unknown = [c for c in checkpoints if not c.fetchable]
    missing = [c for c in checkpoints if c not in unknown and c.location() is None]
    fix = fix_command(editor_option, metrics, plan.profile)
    unknown_note = (f"; {len(unknown)} not checkable ({', '.join(c.component for c in unknown)}: they load on first "
                    "use)") if unknown else ""
    if not missing:
        return f"{len(checkpoints) - len(unknown)} checkpoints cached{unknown_note}", 0
    listing = "\n".join(f"  - {c.component}: {c.source}" + (f" @ {c.revision}" if c.revision else "")
                        + f"  (expected in {c.cache_path()})" for c in missing)
    tail = (f"\nFix: {fix}   (with network access: HF_HUB_OFFLINE=0)\n"
            "  or: profile=tiny (make ... PROFILE=tiny) for an offline run on random weights of the same architectures"
            "\n  or: preflight=false to skip these checks")
    if hub_offline():
        raise PreflightError(f"preflight: {len(missing)} checkpoint(s) this run needs are not in the local cache, "
                             f"and HF_HUB_OFFLINE=1 forbids downloading them:\n{listing}{tail}")
    unreachable = unreachable_hosts(missing, timeout)
    if unreachable:
        hosts = "; ".join(f"{h} ({why})" for h, why in unreachable.items())
        raise PreflightError(f"preflight: {len(missing)} checkpoint(s) this run needs are not cached and their host "
                             f"cannot be reached: {hosts}:\n{listing}{tail}")
    sizes = [c.size for c in missing]
    total = sum(s for s in sizes if s is not None)
    size = human(total) + (" + unknown" if None in sizes else "") if total else "size unknown"
    return (f"{len(checkpoints) - len(unknown) - len(missing)} checkpoints cached, {len(missing)} to download on first "
            f"use ({size}; prefetch: {fix}){unknown_note}"), total


def _check_disk(results: Path, n_queries: int, mean_bytes: float, n_sampled: int, factor: float,
                download_bytes: int) -> str:
    """Free space at the results folder vs queries x mean raw RGB size of the sampled sources x `factor` (a PNG of
    a photo at zlib level 1 is close to its raw size), plus the weights still to download when on the same disk."""
    from benchmark.plan.weights import hf_cache_dir, human

    need = int(n_queries * mean_bytes * factor)
    free = shutil.disk_usage(results).free
    same_disk = download_bytes and _same_device(results, hf_cache_dir())
    total = need + (download_bytes if same_disk else 0)
    how = (f"{n_queries} queries x {human(int(mean_bytes))} (mean raw RGB size of {n_sampled} sources) x {factor:g}"
           + (f" + {human(download_bytes)} of weights" if same_disk else ""))
    if free < total:
        raise PreflightError(f"preflight: not enough disk space at {results}: need about {human(total)} ({how}), "
                             f"{human(free)} free. Free some space, or set paths.results=<folder on a larger disk>")
    return f"disk: need ~{human(total)} ({how}), {human(free)} free"


def _same_device(a: Path, b: Path) -> bool:
    def dev(p: Path) -> int | None:
        while not p.exists() and p != p.parent:
            p = p.parent
        return os.stat(p).st_dev if p.exists() else None

    return dev(a) == dev(b)
