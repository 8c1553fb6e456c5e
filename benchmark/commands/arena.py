"""`editmeter arena queryset=NAME [paths.results=DIR] [arena.<key>=value ...] [--dry-run] [--shard I/N] [--json]`
(or `editmeter arena --drift A.json B.json`: two arenas compared):
the editors' runs of one query set judged in pairs by GenArena's protocol and rated by Bradley-Terry, with 95%
bootstrap intervals, battles, consistency and the win-rate matrix (docs/arena.md).

Settings: configs/arena.yaml, overridden with `arena.<key>=value` (e.g. `arena.judges.endpoint.base_url=...`,
`arena.sampling.mode=full`, `arena.editors=[identity,oracle]`); the other `key=value` arguments compose the run
config as `editmeter run` does (queryset, paths, profile). Writes `<arena.folder>/<query set>/ratings.json`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _parse(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str], list[str]]:
    ap = argparse.ArgumentParser(prog="editmeter arena", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry-run", action="store_true", help="print the budget line (judge calls to make) and stop")
    ap.add_argument("--shard", default=None, help="I/N: judge every N-th planned battle from the I-th (0-based; "
                    "needs arena.sampling.mode=full); rerun unsharded to rate")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON instead of tables")
    ap.add_argument("--drift", nargs=2, metavar=("A", "B"), type=Path, default=None,
                    help="compare two arenas' ratings.json (e.g. two judges'): rating shift, Kendall tau, rank flips; "
                    "judges nothing")
    args, rest = ap.parse_known_args(list(argv))
    bad = [a for a in rest if "=" not in a or a.startswith("-")]
    if bad:
        ap.error(f"unrecognised arguments: {' '.join(bad)} (settings are key=value)")
    arena = [a[len("arena."):] for a in rest if a.startswith("arena.")]
    return args, arena, [a for a in rest if not a.startswith("arena.")]


def _shard(text: str | None) -> tuple[int, int] | None:
    from benchmark.stages.arena import ArenaError

    if text is None:
        return None
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ArenaError(f"--shard {text!r}: want I/N, e.g. 0/2") from None
    if not (n >= 1 and 0 <= i < n):
        raise ArenaError(f"--shard {text!r}: want 0 <= I < N")
    return i, n


def settings(cfg: Any, overrides: list[str]) -> dict[str, Any]:
    """configs/arena.yaml with `overrides` (key=value, without the `arena.` prefix), resolved against the run
    config."""
    from omegaconf import OmegaConf, open_dict

    from benchmark.plan.config import CONFIG_DIR
    from benchmark.stages.arena import ArenaError

    try:
        extra = OmegaConf.from_dotlist(overrides)
    except Exception as err:  # omegaconf's grammar errors have many types
        raise ArenaError(f"bad arena setting in {overrides}: {err}") from None
    base = OmegaConf.load(CONFIG_DIR / "arena.yaml")
    unknown = [k for k in extra if k not in base]
    unknown += [f"sampling.{k}" for k in (extra.get("sampling") or {}) if k not in base.sampling]
    if unknown:
        import difflib

        known = [*base, *(f"sampling.{k}" for k in base.sampling)]
        hints = {k: difflib.get_close_matches(k, known, n=1) for k in unknown}
        raise ArenaError("unknown arena setting(s) " + ", ".join(
            f"arena.{k}" + (f" (did you mean arena.{hints[k][0]}?)" if hints[k] else "") for k in unknown)
            + " (configs/arena.yaml)")
    root = cfg.copy()
    with open_dict(root):
        root.arena = OmegaConf.merge(base, extra)
    return OmegaConf.to_container(root.arena, resolve=True)  # type: ignore[return-value]


def main(argv: Sequence[str] | None = None) -> int:
    from benchmark.commands.run import compose
    from benchmark.io.errors import RunError
    from benchmark.metrics.arena.protocol import check_prompt_identity, read_prompt
    from benchmark.plan.config import instantiate, read_plan
    from benchmark.plan.resolved import load_queries
    from benchmark.stages.arena import ArenaError, Sampling, find_entrants, format_summary, run_arena, summary

    args, arena_overrides, overrides = _parse(sys.argv[1:] if argv is None else argv)
    if args.drift is not None:
        return _drift(*args.drift, as_json=args.json)
    try:
        if not any(o.startswith("queryset=") for o in overrides):
            raise ArenaError("name the query set: editmeter arena queryset=NAME (the runs to battle are that set's)")
        cfg, _ = compose(overrides)
        s = settings(cfg, arena_overrides)
        check_prompt_identity(s["prompts_commit"], s["prompts_sha256"])
        plan = read_plan(cfg)
        queryset = load_queries(plan)
        name = str(cfg.queryset.name)
        results = Path(str(cfg.paths.results))
        entrants = find_entrants(results, name, s["editors"] or None)
        prompt = read_prompt(s["prompts_file"], s["prompts_sha256"], s["prompts_commit"])
        sampling = Sampling(**s["sampling"])
        if s["judge"] not in s["judges"]:
            raise ArenaError(f"arena.judge={s['judge']!r} is none of {', '.join(s['judges'])}")
        backbone = instantiate(s["judges"][s["judge"]], at=f"arena.judges.{s['judge']}")
        anchors = _anchors(s["anchor"])
        queries = {q.id: q for q in queryset}
        folder = Path(s["folder"]) / name
        print(f"[arena] {name}: {len(entrants)} editors ({', '.join(e.name for e in entrants)}); judge "
              f"{backbone.name}; prompt {Path(s['prompts_file']).name} (sha256 {s['prompts_sha256'][:12]}; GenArena's "
              f"is pinned at {s['prompts_commit'][:7]})")
        result = run_arena(entrants, queries, lambda q: queryset.path(q.image), backbone, prompt, sampling, folder,
                           anchors=anchors, drop_failed=bool(s["drop_failed"]), retry_failed=bool(s["retry_failed"]),
                           shard=_shard(args.shard), chunk=int(s["chunk"]), dry_run=args.dry_run)
    except RunError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if result is None:
        return 0
    out = summary(result) | {"queryset": name, "judge": backbone.name, "judge_identity": backbone.identity,
                             "prompts_commit": s["prompts_commit"], "prompts_sha256": s["prompts_sha256"],
                             "sampling": s["sampling"], "drop_failed": bool(s["drop_failed"])}
    from benchmark.io.fileio import atomic_write_text
    from benchmark.metrics.arena.tables import ratings_text

    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / "ratings.json", ratings_text(out))
    print(json.dumps(out, indent=1, sort_keys=True) if args.json else format_summary(out))
    print(f"[arena] wrote {folder / 'ratings.json'}")
    return 0


def _drift(a: Path, b: Path, *, as_json: bool) -> int:
    from benchmark.metrics.arena.tables import read_ratings
    from benchmark.stages.arena import ArenaError, arena_drift, format_drift

    try:
        sides = []
        for path in (a, b):
            try:
                sides.append(read_ratings(path))
            except ArenaError as err:
                raise ArenaError(f"--drift {err}") from None
        d = arena_drift(*sides)
    except ArenaError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(d, indent=1) if as_json else format_drift(d))
    return 0


def _anchors(path: str | None) -> dict[str, float]:
    from benchmark.stages.arena import ArenaError

    if not path:
        return {}
    from benchmark.metrics.arena.tables import read_ratings

    try:
        data = read_ratings(Path(path))
    except ArenaError as err:
        raise ArenaError(f"arena.anchor={err}") from None
    try:
        return {e["editor"]: float(e["rating"]) for e in data["editors"]}
    except (ValueError, KeyError, TypeError) as err:
        raise ArenaError(f"arena.anchor={path}: not a ratings.json written by editmeter arena ({err})") from None


if __name__ == "__main__":
    raise SystemExit(main())
