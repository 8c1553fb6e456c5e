"""Scoring candidate images through editmeter's own pipeline, for every metric set of the config registry.

Each candidate set (the ground-truth edits, the perturbed sources, a folder of images) is one editor run: the edit
stage writes its PNGs and the score stage scores them with the chosen metric set, exactly as `editmeter run` would
(content-addressed and resumable: a rerun reuses every edit and score). Runs go to `<results>/metaeval/work`, never
to `<results>/runs`, so they never appear on the leaderboards.

The metric columns of a set are read from what its run recorded (run.json's `metric_order` and `metrics`), so a
metric set added to `configs/metrics/` later is evaluated without any change here. A suite may also register a
per-query composite (HATIE: the weighted mean of the criteria a query defines, with the run's weight profile).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

WORK_DIR = "work"
METAEVAL_DIR = "metaeval"
RESERVED_OVERRIDES = ("metrics", "editor", "stages")


class MetaevalError(ValueError):
    """Bad input or setting for a meta-evaluation; the message names it and the fix (exit status 2)."""


@dataclass
class ScoredSet:
    """Per-query scores of one candidate set under one metric set."""

    label: str
    metric_set: str
    metric_sig: str
    run_dir: Path
    columns: dict[str, bool]  # metric column -> higher_is_better
    values: dict[str, dict[str, float]] = field(default_factory=dict)  # column -> query id -> value (ok rows)
    failed: dict[str, str] = field(default_factory=dict)  # query id -> reason (not ok)

    def get(self, column: str, query_id: str) -> float:
        return self.values.get(column, {}).get(query_id, float("nan"))


# ------------------------------------------------------------------------------------------ per-query composites
def _hatie_score(rows: Any, components: Mapping[str, Any]) -> np.ndarray:
    """HATIE's per-query score: the weighted mean of the criteria the query defines, with the run's profile
    (what the per-type `score` column averages; IQ is set-level and has no per-query value)."""
    from benchmark.metrics.hatie.weights import CRITERIA, TOTAL_WEIGHTS_KEY, profile_from_record

    profile = profile_from_record(components.get(TOTAL_WEIGHTS_KEY))
    return composite_scores(np.column_stack([rows[c].to_numpy(dtype=np.float64) if c in rows else
                                             np.full(len(rows), np.nan) for c in CRITERIA]),
                            np.array([[profile.total[c] for c in CRITERIA]]))[:, 0]


# suite name -> (column name, function(score rows, suite components) -> per-row values; higher is better)
COMPOSITES: dict[str, tuple[str, Callable[[Any, Mapping[str, Any]], np.ndarray]]] = {"hatie": ("score", _hatie_score)}


def composite_scores(x: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """(n, C) weighted means of the finite criteria of each row of `x` (n, k) for each weight row (C, k),
    normalised over the weights of the criteria present (HATIE's rule); NaN where no weighted criterion is present."""
    present = np.isfinite(x)
    num = np.where(present, x, 0.0) @ weights.T
    den = present.astype(np.float64) @ weights.T
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def metric_suite(override: str) -> str | None:
    """The suite a `metrics.<suite>.<key>=value` override sets (`+`, `++`, `~` allowed), else None."""
    parts = override.split("=", 1)[0].lstrip("+~").split(".")
    return parts[1] if len(parts) > 2 and parts[0] == "metrics" else None


# ------------------------------------------------------------------------------------------------- the session
class Session:
    """One meta-evaluation: the run config (query set, profile, paths) and the metric sets to evaluate."""

    def __init__(self, overrides: Sequence[str], metric_sets: Sequence[str] | None, settings: Sequence[str] = ()):
        from omegaconf import OmegaConf

        from benchmark.commands.run import compose
        from benchmark.plan.config import CONFIG_DIR, UnknownOptionError, check_option, options

        bad = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") in RESERVED_OVERRIDES]
        if bad:
            raise MetaevalError(f"{' '.join(bad)}: metaeval chooses metric sets with --metrics and runs its own "
                                "candidates; drop these overrides")
        self.metric_sets = list(metric_sets) if metric_sets else options("metrics")
        # `metrics.<suite>.<key>=` overrides apply to the metric sets that hold that suite, and only to them
        self.overrides = [o for o in overrides if metric_suite(o) is None]
        self.suite_overrides = [o for o in overrides if metric_suite(o) is not None]
        self._suites: dict[str, set[str]] = {}
        try:
            for m in self.metric_sets:
                check_option("metrics", m)
            cfg, _ = compose([*self.overrides, f"metrics={self.metric_sets[0]}"])
            self._check_suite_overrides()
        except UnknownOptionError as err:
            raise MetaevalError(str(err)) from None
        self.cfg = cfg
        self._composed: dict[str, Any] = {}
        from benchmark.io.console import progress_enabled, quiet_third_party

        quiet_third_party(progress_enabled(cfg.progress))  # what `editmeter run` does before a run
        self.results = Path(cfg.paths.results)
        self.out_dir = self.results / METAEVAL_DIR
        self.work_dir = self.out_dir / WORK_DIR
        base = OmegaConf.load(CONFIG_DIR / "metaeval.yaml")
        try:
            extra = OmegaConf.from_dotlist([s.removeprefix("metaeval.") for s in settings])
        except Exception as err:  # omegaconf's grammar errors have many types
            raise MetaevalError(f"bad metaeval setting in {list(settings)}: {err}") from None
        self.settings = OmegaConf.merge(base, extra)
        # the default, every set, leaves out the sets this profile cannot score (named, with the reason)
        skip = {} if metric_sets else (self.settings.get("default_skip") or {}).get(str(cfg.profile.name)) or {}
        self.left_out: dict[str, str] = {m: str(skip[m]) for m in self.metric_sets if m in skip}
        composed_with = self.metric_sets[0]
        if not metric_sets:  # and those that apply to none of the set's queries (EditVal on HATIE's edit types)
            self._leave_out_inapplicable()
        self.metric_sets = [m for m in self.metric_sets if m not in self.left_out]
        if not self.metric_sets:
            raise MetaevalError(f"no metric set can be evaluated here: {'; '.join(self.left_out.values())}")
        if self.metric_sets[0] != composed_with:  # the session's config: one with a set that is evaluated
            self.cfg = compose([*self.overrides, f"metrics={self.metric_sets[0]}"])[0]

    def _leave_out_inapplicable(self) -> None:
        """Record in `left_out`, with the preflight's reason, every set holding a suite that scores none of the
        query set's queries (the runs would refuse it)."""
        from benchmark.commands.run import compose
        from benchmark.io.errors import PreflightError
        from benchmark.plan.config import read_plan
        from benchmark.plan.resolved import check_applicable, load_queries

        try:
            full = load_queries(read_plan(self.cfg))
        except PreflightError as err:
            raise MetaevalError(str(err)) from None
        for m in self.metric_sets:
            if m in self.left_out:
                continue
            try:  # what would refuse its runs: no query it scores, or a judge's prompt file not fetched
                check_applicable(read_plan(compose([*self.overrides, f"metrics={m}"])[0]), full)
            except PreflightError as err:
                self.left_out[m] = str(err).removeprefix("preflight: ").removeprefix(f"metrics={m}: ")

    def suites(self, metric_set: str) -> set[str]:
        """The suites (and pairwise metrics) of `metric_set`, as composed (cached)."""
        from benchmark.commands.run import compose

        if metric_set not in self._suites:
            self._suites[metric_set] = set(compose([*self.overrides, f"metrics={metric_set}"])[0].metrics)
        return self._suites[metric_set]

    def overrides_for(self, metric_set: str) -> list[str]:
        """The run overrides of `metric_set`'s runs: the general ones and those of its own suites."""
        return self.overrides + [o for o in self.suite_overrides if metric_suite(o) in self.suites(metric_set)]

    def _check_suite_overrides(self) -> None:
        """Every `metrics.<suite>.<key>=` names a suite of a chosen set, and a key that suite has."""
        from benchmark.plan.config import check_keys

        for o in self.suite_overrides:
            holders = [m for m in self.metric_sets if metric_suite(o) in self.suites(m)]
            if not holders:
                raise MetaevalError(f"{o}: no metric set of this meta-evaluation has a suite "
                                    f"{metric_suite(o)!r} (sets: {', '.join(self.metric_sets)}); choose one with "
                                    "--metrics or drop the override")
            check_keys([f"metrics={holders[0]}", o])

    @property
    def profile(self) -> str:
        return str(self.cfg.profile.name)

    def setting(self, dotted: str) -> Any:
        """A metaeval setting, interpolations resolved against the run config (e.g. ${profile.name})."""
        from omegaconf import OmegaConf

        root = OmegaConf.merge(OmegaConf.masked_copy(self.cfg, [k for k in self.cfg if k != "hydra"]),
                               {"metaeval": self.settings})
        node = OmegaConf.select(root, f"metaeval.{dotted}", throw_on_missing=True)
        return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node

    def queryset(self) -> Any:
        """(full set, selection) as the runs will load them; a bad or unbuilt set raises MetaevalError."""
        from benchmark.io.errors import PreflightError
        from benchmark.plan.config import read_plan
        from benchmark.plan.resolved import load_selection

        try:
            return load_selection(read_plan(self.cfg))
        except PreflightError as err:
            raise MetaevalError(str(err)) from None

    def score(self, label: str, editor_node: Mapping[str, Any], metric_set: str) -> ScoredSet:
        """Run editor `editor_node` (a `_target_` mapping) as `label` through the edit and score stages with
        `metric_set`; return its per-query scores. Preflight problems raise MetaevalError before any work."""
        from omegaconf import OmegaConf, open_dict

        from benchmark.commands.run import compose, run_pipeline
        from benchmark.io.errors import PreflightError, RunError, TooManyFailures

        if metric_set not in self._composed:  # composing costs ~1 s; every candidate run of a set shares it
            self._composed[metric_set] = compose([*self.overrides_for(metric_set), f"metrics={metric_set}",
                                                  "editor=identity",
                                                  "stages=[edit,score]", "max_failed_fraction=1.0"])[0]
        cfg = copy.deepcopy(self._composed[metric_set])
        with open_dict(cfg):
            cfg.editor = OmegaConf.create(dict(editor_node))
            cfg.paths.results = str(self.work_dir)
        try:
            summary = run_pipeline(cfg, label)
        except TooManyFailures as err:  # max_failed_fraction=1: raised only when every candidate failed
            raise MetaevalError(f"{label}: no candidate could be made for any query ({err})") from None
        except PreflightError as err:
            raise MetaevalError(str(err)) from None
        except RunError as err:
            raise MetaevalError(f"{label} with metrics={metric_set}: {err}") from None
        return read_scored(Path(summary["run_dir"]), summary["metric_sig"], label, metric_set)


def read_scored(run_dir: Path, metric_sig: str, label: str, metric_set: str) -> ScoredSet:
    """The per-query metric values of one scored run (ok rows), the failed ones with their reasons."""
    from benchmark.stages.score import read_scores
    from benchmark.tables.leaderboard import RUN_META, load_run_meta, scorings

    meta = scorings(load_run_meta(run_dir / RUN_META))[metric_sig]
    order = meta.get("metric_order") or list(meta["metrics"])
    infos = meta["metrics"]
    columns = {c: bool(infos[c]["higher_is_better"]) if c in infos else True for c in order}
    rows = read_scores(run_dir, metric_sig)
    ok = rows[rows["status"] == "ok"].reset_index(drop=True)
    out = ScoredSet(label, metric_set, metric_sig, run_dir, columns)
    for c in order:
        vals = ok[c].to_numpy(dtype=np.float64) if c in ok else np.full(len(ok), np.nan)
        out.values[c] = dict(zip(ok["query_id"], vals.tolist(), strict=True))
    suite = meta.get("suite")
    if suite and suite.get("name") in COMPOSITES:
        name, fn = COMPOSITES[suite["name"]]
        out.columns[name] = True
        out.values[name] = dict(zip(ok["query_id"], fn(ok, suite.get("components") or {}).tolist(), strict=True))
    bad = rows[rows["status"] != "ok"]
    out.failed = dict(zip(bad["query_id"], (bad["status"] + ": " + bad["reason"].astype(str)).tolist(), strict=True))
    return out


# -------------------------------------------------------------------------------------------- image slot folders
def slot_folders(images: Sequence[tuple[str, Path]], work_dir: Path) -> dict[tuple[str, Path], tuple[int, Path]]:
    """Lay out (query id, image file) items as edit folders an external editor reads: folder k holds the k-th
    distinct image of each query as `<query id><ext>` (a symbolic link, or a copy where links are refused).

    Returns item -> (slot index, folder). The folders live under a name hashed from the items, built atomically, so
    the same inputs always map to the same folders (and the runs that read them are reused)."""
    order: dict[str, list[Path]] = {}
    for qid, path in images:
        seen = order.setdefault(qid, [])
        if path not in seen:
            seen.append(path)
    key = hashlib.sha256(json.dumps(sorted((q, [str(p) for p in ps]) for q, ps in order.items())).encode()).hexdigest()
    root = work_dir / "slots" / key[:16]
    n_slots = max((len(ps) for ps in order.values()), default=0)
    if not root.is_dir():
        tmp = root.with_name(f".{root.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        for k in range(n_slots):
            (tmp / f"slot-{k}").mkdir(parents=True)
        for qid, paths in order.items():
            for k, p in enumerate(paths):
                dest = tmp / f"slot-{k}" / f"{qid}{p.suffix.lower()}"
                try:
                    dest.symlink_to(p)
                except OSError:
                    shutil.copyfile(p, dest)
        tmp.parent.mkdir(parents=True, exist_ok=True)
        try:
            tmp.rename(root)
        except OSError:  # another process built it first: same content by construction
            shutil.rmtree(tmp, ignore_errors=True)
    return {(qid, p): (k, root / f"slot-{k}") for qid, paths in order.items() for k, p in enumerate(paths)}


def external_node(folder: Path, label: str) -> dict[str, Any]:
    """The editor config of a folder of images named by query id (`editors.external.ExternalEdits`)."""
    return {"_target_": "editors.external.ExternalEdits", "folder": str(folder), "prompt_kind": "instruction",
            "label": label}
