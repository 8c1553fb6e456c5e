"""The one table a meta-evaluation run writes: metric x test statistics with intervals, plus provenance, as CSV under
`<results>/metaeval/` (and a JSON sidecar listing every input with its sha256 and every run it read)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

PROVENANCE = ("test", "queryset", "queryset_hash", "profile", "resamples", "confidence", "seed", "inputs_sha256",
              "git_sha", "created_at", "note")


def file_digests(paths: Sequence[Path]) -> dict[str, str]:
    from benchmark.io.hashing import file_sha256

    return {str(p): file_sha256(str(p)) for p in paths}


def write_table(out_dir: Path, test: str, rows: list[dict[str, Any]], *, queryset: Any, profile: str,
                resamples: int, confidence: float, seed: int, inputs: Mapping[str, str],
                extra: Mapping[str, Any], float_format: str | None = "%.6g") -> Path:
    """Write `rows` (one per metric) with provenance columns; returns the CSV path. The name is keyed by what
    determines the numbers (test, query set, inputs, options, metric signatures), so a rerun replaces its own table
    and never another's. Numbers are written with `float_format` (6 significant digits; None: full precision, the
    shortest repr that reads back to the same float)."""
    import time

    import pandas as pd

    from benchmark.io.fileio import atomic_write_text, remove_stale_tmp
    from benchmark.io.hashing import canonical_json, stable_hash
    from benchmark.io.provenance import git_sha, library_versions

    inputs_sha = stable_hash(dict(inputs), 16) if inputs else ""
    note = "" if profile == "pretrained" else (f"profile={profile}: random weights; these numbers test the pipeline, "
                                               "they do not measure the metrics")
    prov = {"test": test, "queryset": queryset.name, "queryset_hash": queryset.hash, "profile": profile,
            "resamples": resamples, "confidence": confidence, "seed": seed, "inputs_sha256": inputs_sha,
            "git_sha": git_sha(), "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "note": note}
    key = stable_hash({"test": test, "queryset": queryset.hash, "inputs": dict(inputs), "profile": profile,
                       "resamples": resamples, "confidence": confidence, "seed": seed,
                       "options": extra.get("options", {}), "metric_sigs": extra.get("metric_sigs", {})}, 12)
    out_dir.mkdir(parents=True, exist_ok=True)
    # a killed earlier run's temp files (its writer gone), as the run stages clear theirs; a live writer's stay
    remove_stale_tmp(out_dir, time.time(), recursive=False)
    path = out_dir / f"{test}-{queryset.name}-{key}.csv"
    sigs = dict(extra.get("metric_sigs", {}))
    only = next(iter(sigs.values())) if len(sigs) == 1 else ""

    def sig(metric: str) -> str:  # rows are named <metric set>/<column> (fit-weights: one set)
        return sigs.get(metric.split("/", 1)[0], only)

    df = pd.DataFrame([{**r, "metric_sig": sig(str(r["metric"])), **prov} for r in rows])
    atomic_write_text(path, df.to_csv(index=False, float_format=float_format))
    side = {**prov, "inputs": dict(inputs), "versions": library_versions(), **extra}
    atomic_write_text(path.with_suffix(".json"), canonical_json(_plain(side)) + "\n")
    return path


def _plain(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_plain(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, Path):
        return str(obj)
    return obj


def fmt(value: float, lo: float, hi: float) -> str:
    """`0.812 [0.75, 0.86]`, or `0.812` without an interval, `-` when undefined."""
    if not math.isfinite(value):
        return "-"
    if math.isfinite(lo) and math.isfinite(hi):
        return f"{value:.3f} [{lo:.3f}, {hi:.3f}]"
    return f"{value:.3f}"


def render(rows: list[dict[str, Any]], stats: Sequence[str], counts: Sequence[str]) -> str:
    """A readable view: one line per metric, each statistic with its interval, then the counts."""
    header = ["metric", *stats, *counts]
    body = [[str(r["metric"]), *(fmt(r[s], r.get(f"{s}_lo", math.nan), r.get(f"{s}_hi", math.nan)) for s in stats),
             *(str(r[c]) for c in counts)] for r in rows]
    widths = [max(len(x) for x in col) for col in zip(header, *body, strict=True)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True))  # noqa: E731
    return "\n".join([line(header), *(line(b) for b in body)])


def dumps(obj: Any) -> str:
    return json.dumps(_plain(obj), sort_keys=True)
