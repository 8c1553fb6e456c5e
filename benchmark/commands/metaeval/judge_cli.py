"""`editmeter metaeval judges --judges judge,gedit --sets editscore=PATH tiger=PATH genai=PATH imagenhub`: read every
set first (a bad file fails before any model loads), score each edit with each judge, print and write one table."""

from __future__ import annotations

import argparse
from pathlib import Path
from types import SimpleNamespace
from typing import Any


def _settings(settings: list[str]) -> Any:
    from omegaconf import OmegaConf

    from benchmark.commands.metaeval.scoring import MetaevalError
    from benchmark.plan.config import CONFIG_DIR

    try:
        extra = OmegaConf.from_dotlist([s.removeprefix("metaeval.") for s in settings])
    except Exception as err:  # omegaconf's grammar errors have many types
        raise MetaevalError(f"bad metaeval setting in {settings}: {err}") from None
    return OmegaConf.merge(OmegaConf.load(CONFIG_DIR / "metaeval.yaml"), extra)


def _imagenhub(args: argparse.Namespace, overrides: list[str]) -> Any:
    from benchmark.commands.metaeval.human import query_id_mapper, ratings_to_pairs, read_ratings
    from benchmark.commands.metaeval.judges import JudgeSetError, imagenhub_set
    from benchmark.commands.metaeval.scoring import MetaevalError
    from benchmark.commands.run import compose
    from benchmark.io.errors import PreflightError
    from benchmark.plan.config import read_plan
    from benchmark.plan.resolved import load_queries

    if not args.ratings or args.images is None:
        raise JudgeSetError("--sets imagenhub needs --ratings <rater TSVs> and --images <folder of <editor>/<uid>>")
    raters = [read_ratings(p) for p in args.ratings]
    pairs, _ = ratings_to_pairs(raters, args.images, query_ids=query_id_mapper(args.query_ids))
    try:
        qs = load_queries(read_plan(compose(overrides)[0]))
    except PreflightError as err:
        raise MetaevalError(str(err)) from None
    return imagenhub_set(pairs, {q.id: q for q in qs}, Path(qs.root), list(args.ratings))


def read_sets(args: argparse.Namespace, overrides: list[str]) -> list[Any]:
    """Every `--sets` entry read by its importer, in the order given."""
    from benchmark.commands.metaeval.judges import SETS, JudgeSetError, read_editscore, read_genai, read_tiger

    out = []
    for spec in args.sets:
        name, _, path = spec.partition("=")
        if name not in SETS or (name == "imagenhub") != (not path):
            raise JudgeSetError(f"--sets {spec}: want editscore=PATH, tiger=PATH, genai=PATH or imagenhub "
                                "(with --ratings and --images)")
        if name == "editscore":
            out.append(read_editscore(Path(path), dimension=args.dimension))
        elif name == "tiger":
            out.append(read_tiger(Path(path)))
        elif name == "genai":
            out.append(read_genai(Path(path)))
        else:
            out.append(_imagenhub(args, overrides))
    return out


def run_judges(args: argparse.Namespace, overrides: list[str], settings: list[str]) -> int:
    """Run the judges test; returns 0 (errors raise the metaeval error types the CLI turns into exit 2)."""
    from benchmark.commands.metaeval import judges as J
    from benchmark.commands.metaeval.evaluate import Boot
    from benchmark.commands.metaeval.scoring import MetaevalError, metric_suite
    from benchmark.commands.metaeval.table import file_digests, write_table
    from benchmark.commands.run import compose
    from benchmark.io.console import progress_enabled, quiet_third_party

    arena_settings = [o[len("arena."):] for o in overrides if o.startswith("arena.")]
    overrides = [o for o in overrides if not o.startswith("arena.")]
    general = [o for o in overrides if metric_suite(o) is None]
    hsets = read_sets(args, general)
    conf = _settings(settings)
    boot = Boot(int(args.resamples if args.resamples is not None else conf.resamples),
                int(args.seed if args.seed is not None else conf.seed), float(conf.confidence))
    if boot.resamples < 0:
        raise MetaevalError(f"--resamples {boot.resamples}: must be >= 0")
    names = [n for n in (args.metrics or args.judges).split(",") if n]
    cfg, _ = compose(general)
    progress = progress_enabled(cfg.progress)
    # before any judge loads: third-party loading bars ("Loading weights") never reach redirected output
    quiet_third_party(progress)
    arena = _arena_judge(cfg, arena_settings) if J.ARENA in names else None
    if arena_settings and arena is None:
        raise MetaevalError(f"{' '.join('arena.' + s for s in arena_settings)}: arena settings without --judges "
                            f"{J.ARENA}; drop them")
    judges = [J.build_judge(n, overrides) for n in names if n != J.ARENA]
    for jd in judges:  # a missing or altered prompt file stops here, before any edit is judged
        J.check_judge_inputs(jd)
    stray = [o for o in overrides if metric_suite(o) is not None
             and not any(metric_suite(o) in (getattr(j.suite.info, "name", ""),) for j in judges)]
    if stray:
        raise MetaevalError(f"{' '.join(stray)}: no judge of --judges {','.join(names)} has that suite; drop it")
    cache_dir = Path(cfg.paths.results) / "metaeval" / "judge_scores"
    columns = {(jd.name, hs.name): jd.column_for(hs, args.dimension) for hs in hsets for jd in judges}  # fail early
    rows: list[dict[str, Any]] = []
    failures: dict[str, int] = {}
    arena_calls: dict[str, tuple[int, int]] = {}
    for hs in hsets:
        if arena is not None:  # GenArena's pairwise protocol on the same pairs, next to the pointwise judges
            backbone, prompt, s = arena
            scores, failed, arena_calls[hs.name] = J.arena_scores(
                hs, backbone, prompt, Path(cfg.paths.results) / "metaeval" / "arena_calls",
                drop_failed=bool(s["drop_failed"]), chunk=int(s["chunk"]))
            failures[f"{J.ARENA}/{hs.name}"] = len(failed)
            rows += J.evaluate(J.Judge(J.ARENA, None, "battle", arena_signature(arena)), hs, scores, boot)
        for jd in judges:
            scores, failed = J.score_set(jd, hs, column=columns[(jd.name, hs.name)],
                                         cache_dir=None if args.no_cache else cache_dir, progress=progress)
            failures[f"{jd.name}/{hs.name}"] = len(failed)
            rows += J.evaluate(jd, hs, scores, boot)
        rows += J.published_rows(hs.name)
    inputs = [p for hs in hsets for p in hs.inputs]
    for r in rows:
        r["metric"] = f"{r['judge']}/{r['set']}/{r['subtask']}"
    tag = "+".join(hs.name for hs in hsets)
    path = write_table(Path(cfg.paths.results) / "metaeval", "judges", rows,
                       queryset=SimpleNamespace(name=tag, hash=""), profile=str(cfg.profile.name),
                       resamples=boot.resamples, confidence=boot.confidence, seed=boot.seed,
                       inputs=file_digests(inputs),
                       extra={"options": {"judges": names, "sets": list(args.sets), "dimension": args.dimension},
                              "columns": {f"{j}/{h}": c for (j, h), c in columns.items()},
                              "metric_sigs": {j.name: j.signature for j in judges}
                              | ({J.ARENA: arena_signature(arena)} if arena else {}),
                              "counts": {f"{hs.name}/{k}": v for hs in hsets for k, v in hs.counts.items()},
                              "edits_failed": failures, "overrides": overrides + settings})
    print(f"\n[metaeval] judges against people, profile={cfg.profile.name}, {int(boot.confidence * 100)}% intervals "
          f"from {boot.resamples} cluster-bootstrap resamples over groups sharing a source and an instruction")
    print(J.render(rows))
    for jd in judges:
        for set_name, (cached, judged, bad) in jd.cache_stats.items():
            if cached or bad:
                print(f"[metaeval] {jd.name}/{set_name}: {cached} edit(s) read from the score cache ({cache_dir}), "
                      f"{judged} judged" + (f"; {bad} unreadable cache line(s) skipped" if bad else ""))
    for set_name, (made, reused) in arena_calls.items():
        print(f"[metaeval] {J.ARENA}/{set_name}: {made} judge call(s) made, {reused} reused (from the call log, or the "
              "same call twice)")
    for key, n in failures.items():
        if n and key.startswith(f"{J.ARENA}/"):
            print(f"[metaeval] {key}: {n} battle(s) with a failed or unparsable call, counted as ties (GenArena's "
                  "rule; arena.drop_failed=true leaves them unscored)")
        elif n:
            print(f"[metaeval] {key}: {n} edit(s) failed to score (failure rows); their pairs are n_unscored")
    if str(cfg.profile.name) != "pretrained":
        print(f"[metaeval] NOTE: profile={cfg.profile.name}: random weights; these numbers test the pipeline, they "
              "do not measure the judges")
    print(f"[metaeval] wrote {path} (+ .json provenance)")
    return 0


def _arena_judge(cfg: Any, arena_settings: list[str]) -> tuple[Any, Any, dict[str, Any]]:
    """The arena's backbone, its pinned prompt (checked now) and its settings (configs/arena.yaml)."""
    from benchmark.commands.arena import settings
    from benchmark.commands.metaeval.scoring import MetaevalError
    from benchmark.io.pinned_prompts import ProtocolError
    from benchmark.metrics.arena.protocol import read_prompt
    from benchmark.plan.config import instantiate
    from benchmark.stages.arena import ArenaError

    try:
        s = settings(cfg, arena_settings)
        prompt = read_prompt(s["prompts_file"], s["prompts_sha256"], s["prompts_commit"])
        if s["judge"] not in s["judges"]:
            raise ArenaError(f"arena.judge={s['judge']!r} is none of {', '.join(s['judges'])}")
    except (ArenaError, ProtocolError) as err:
        raise MetaevalError(f"--judges arena: {err}") from None
    return instantiate(s["judges"][s["judge"]], at=f"arena.judges.{s['judge']}"), prompt, s


def arena_signature(arena: Any) -> str:
    backbone, prompt, s = arena
    return f"arena@{prompt.sha256[:12]}|{backbone.identity}|drop_failed={bool(s['drop_failed'])}"
