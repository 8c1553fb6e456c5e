"""Pipeline: queries -> edit -> score -> aggregate. Command line: `editmeter run` (benchmark.cli).

    editmeter run editor=identity queryset=demo profile=tiny [any Hydra override]
    editmeter run --multirun editor=identity,oracle,overedit queryset=demo profile=tiny

`python -m benchmark.run ...` is an alias of `editmeter run ...`.
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmark.config import CONFIG_DIR, UnknownOptionError, check_keys, check_overrides, register_resolvers

register_resolvers()
_NOTED: set[str] = set()  # profiles whose "these numbers do not rank editors" note was printed


class StageTimer:
    """Wall time per named stage, in order."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0

    def table(self) -> str:
        """One line: each stage's seconds in order, then the total."""
        parts = [f"{name} {sec:.2f} s" for name, sec in self.seconds.items()]
        return f"{', '.join(parts)}; total {sum(self.seconds.values()):.2f} s"


def run_pipeline(cfg: Any, editor_name: str) -> dict[str, Any]:
    """Run the configured stages for one editor on one query set; returns a summary dict."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from benchmark.config import editor_signature, metric_signature, portable
    from benchmark.console import progress_enabled
    from benchmark.fileio import atomic_write_text
    from benchmark.hashing import canonical_json
    from benchmark.leaderboard import RUN_META, write_leaderboards
    from benchmark.provenance import provenance
    from benchmark.stages.edit import run_edit_stage
    from benchmark.stages.score import is_suite, run_score_stage, run_suite_stage

    timer = StageTimer()
    progress = progress_enabled(cfg.progress)
    run_id = uuid.uuid4().hex[:12]
    profile = cfg.profile.name
    print(f"[editmeter] editor={editor_name} profile={profile} (weights: {cfg.profile.weights}) run_id={run_id}")
    with timer("load queries"):
        full = instantiate(cfg.queryset)
        qs = full.shard(cfg.shard.index, cfg.shard.count).subset(cfg.limit)
    with timer("load editor"):
        editor = instantiate(cfg.editor)
        metrics = {name: instantiate(node) for name, node in cfg.metrics.items()}
    editor_cfg = OmegaConf.to_container(cfg.editor, resolve=True)
    sig = editor_signature(editor_cfg, editor.info(), cfg.seed, profile)
    msig = metric_signature(OmegaConf.to_container(cfg.metrics, resolve=True), {k: m.info for k, m in metrics.items()})
    suites = [m for m in metrics.values() if is_suite(m)]
    if suites and len(metrics) > 1:
        raise ValueError("a metrics config holds either pairwise metrics or exactly one suite (e.g. hatie), not both")
    suite = suites[0] if suites else None
    results = Path(cfg.paths.results)
    run_dir = results / "runs" / f"{full.name}-{full.short_hash}" / f"{editor_name}-{sig}"
    run_dir.mkdir(parents=True, exist_ok=True)
    meta = {
        "queryset": full.name, "queryset_hash": full.hash, "editor": editor_name, "editor_sig": sig,
        "prompt_kind": editor.prompt_kind, "profile": profile, "seed": int(cfg.seed),
        "editor_config": portable(editor_cfg), "editor_info": portable(editor.info()), "metric_sig": msig,
        "metric_order": list(suite.columns) if suite else list(metrics),
        "column_order": list(suite.column_info) if suite else list(metrics),  # run.json's dicts are key-sorted
        "metrics": _metric_meta(metrics, suite),
        "suite": {"name": suite.info.name, "summary": suite.summary, "components": suite.components()} if suite else None,
        **provenance("cpu"),
        "updated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    atomic_write_text(run_dir / RUN_META, canonical_json(meta) + "\n")
    print(f"[editmeter] {len(qs)} queries of {full.name} (hash {full.short_hash}) -> {run_dir}")

    summary: dict[str, Any] = {"run_dir": str(run_dir), "run_id": run_id, "editor_sig": sig, "metric_sig": msig}
    if "edit" in cfg.stages:
        with timer("edit"):
            st = run_edit_stage(qs, editor, run_dir, seed=cfg.seed, batch_size=cfg.batch_size, num_workers=cfg.num_workers,
                                retry_failed=cfg.retry_failed, run_id=run_id, progress=progress)
        summary["edit"] = st
        print(f"[editmeter] edit: {st.computed} edited ({st.failed} failed), {st.skipped} already done")
    if "score" in cfg.stages:
        with timer("score"):
            if suite is not None:
                sc = run_suite_stage(qs, run_dir, suite, msig, prompt_kind=editor.prompt_kind,
                                     num_workers=cfg.num_workers, progress=progress)
            else:
                sc = run_score_stage(qs, run_dir, metrics, msig, batch_size=cfg.batch_size,
                                     num_workers=cfg.num_workers, progress=progress)
        summary["score"] = sc
        print(f"[editmeter] score: {sc.computed} scored, {sc.reused} reused ({sc.model_seconds:.2f} s in metrics)")
    if "aggregate" in cfg.stages:
        with timer("aggregate"):
            written = write_leaderboards(results, msig, cfg.aggregate.bootstrap_resamples, cfg.aggregate.bootstrap_seed)
        summary["tables"] = {k: str(v) for k, v in written.items()}
        print(f"[editmeter] aggregate: wrote {', '.join(p.name for p in written.values())} in {results}")
    print(f"[editmeter] timings ({editor_name}): {timer.table()}")
    if profile != "pretrained" and profile not in _NOTED:  # once per process, not once per sweep job
        _NOTED.add(profile)
        print(f"[editmeter] NOTE: profile={profile}: weights are {cfg.profile.weights}; "
              "these numbers test the pipeline, they do not rank real editors.")
    summary["timings"] = dict(timer.seconds)
    return summary


def _metric_meta(metrics: dict[str, Any], suite: Any) -> dict[str, Any]:
    if suite is None:
        return {k: {"version": m.info.version, "higher_is_better": m.info.higher_is_better,
                    "description": m.info.description} for k, m in metrics.items()}
    version = f"{suite.info.name}-{suite.info.version}"
    return {c: {"version": version, "higher_is_better": hib, "description": desc}
            for c, (hib, desc) in suite.column_info.items()}


def compose(overrides: list[str]) -> tuple[Any, dict[str, str]]:
    """Compose the config as the command line would (for tests and notebooks); returns (cfg, group choices).

    Unknown group options raise `UnknownOptionError`, unknown keys `UnknownKeyError` (with suggestions).
    """
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import ConfigCompositionException

    check_overrides(overrides)
    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            cfg = hydra_compose("config", overrides=overrides, return_hydra_config=True)
    except ConfigCompositionException:
        check_keys(overrides)  # a mistyped key: say which and suggest; anything else: Hydra's own error
        raise
    return cfg, dict(cfg.hydra.runtime.choices)


def _hydra_entry() -> None:
    import hydra
    from hydra.core.hydra_config import HydraConfig

    from benchmark.console import progress_enabled, quiet_third_party

    @hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="config")
    def _main(cfg: Any) -> None:
        quiet_third_party(progress_enabled(cfg.progress))
        run_pipeline(cfg, HydraConfig.get().runtime.choices["editor"])

    _main()


def main(argv: list[str] | None = None) -> int:
    """`editmeter run [--multirun] [overrides]`: check the overrides (group options, key names), then run Hydra.

    Returns the exit status (Hydra's own errors and `--help` exit through SystemExit, as Hydra does).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    overrides = [a for a in args if not a.startswith("-")]
    if not any(a in ("-h", "--help", "--hydra-help") for a in args):
        try:
            check_overrides(overrides)
            check_keys(overrides)
        except UnknownOptionError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
    # Hydra's parser takes overrides only after its flags; --multirun may stand anywhere here.
    args = [a for a in args if a in ("-m", "--multirun")] + [a for a in args if a not in ("-m", "--multirun")]
    saved = sys.argv
    sys.argv = ["editmeter run", *args]  # Hydra parses sys.argv
    try:
        _hydra_entry()
    finally:
        sys.argv = saved
    return 0


if __name__ == "__main__":
    sys.exit(main())
