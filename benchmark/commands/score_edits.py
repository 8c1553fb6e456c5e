"""Score a folder of edits made elsewhere (`editmeter score`, `make score`):

    editmeter score --edits /path/to/edits --name my-model [--kind description] [--rewritten FILE] queryset=hatie
        [overrides]

Files are matched to queries by id (`<query id>.png` or HATIE's `<prefix>_<query id>.jpg`). Missing files are
reported by count and id and counted as missing (`n_missing`: the row is marked PARTIAL), not as failed; the rest
is scored and added to the leaderboard as `name`. A file that cannot be read, or is not a usable edit, is a failure
judged exactly as `editmeter run editor=external` judges it (`max_failed_fraction`), so both commands give the same
exit status and marks on the same folder. An edit of another size than its source is kept; each metric suite
applies its declared rule to it (docs/metrics.md, "An edit of another size").
Edits made from rewritten instructions declare it with `--rewritten FILE`, a JSONL of `{"query_id", "instruction"}`
per query (`editors/external.py`): the records keep the text and the rows are marked as rewritten.
Everything after the options is a Hydra override of the run config (queryset=, profile=, metrics=, limit=, ...).

Multi-turn sessions: for a query set with sessions, a folder of subfolders is read as MagicBrush's
`edit_cli_single_multi_turn.py` writes its outputs (`<id>/<id>_1.png`, `<id>_iter_<t>.png`, `<id>_inde_<t>.png`;
`benchmark.io.session_edits`). Each protocol is a run of its own (`protocol=single_turn` from the `_inde_` files,
`multi_turn` from the `_iter_` files, turn 1 from `_1` in both): `--protocol` picks one or `both`; the default is
both when the folder holds any `_iter_` file, else single_turn. A file that maps to no turn of the set's sessions
stops the command before any work, naming it; a turn without its file is missing (the row is PARTIAL). A flat folder
of `<query id>.png` edits takes `--protocol single_turn|multi_turn` to say how they were made (default single_turn).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmark.plan.config import LabelError, UnknownOptionError, check_keys, check_label, check_overrides

MAX_LISTED = 20
# The older spelling `edits=DIR name=LABEL kind=K` (scripts, tests, notebooks) is read as the options.
LEGACY_KEYS = ("edits", "name", "kind")
PROTOCOL_CHOICES = ("single_turn", "multi_turn", "both")
HOW = {"single_turn": "each turn edited from the dataset's input: <id>_1, <id>_inde_<t>",
       "multi_turn": "each turn edited from the model's previous output: <id>_1, <id>_iter_<t>"}


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """(options, Hydra overrides): `--edits`, `--name`, `--kind`; every `key=value` is an override."""
    ap = argparse.ArgumentParser(
        prog="editmeter score", description="Score a folder of edits made elsewhere and add them to the leaderboard.",
        epilog="overrides: any `editmeter run` key or group, e.g. queryset=hatie profile=tiny metrics=basic limit=20")
    ap.add_argument("--edits", required=True, help="folder of <query id>.<ext> or <prefix>_<query id>.<ext> images")
    ap.add_argument("--name", required=True, help="the label these edits get on the leaderboard")
    ap.add_argument("--kind", default="instruction", choices=("instruction", "description"),
                    help="the model family: HATIE scores obj_remove only for instruction-based editors")
    ap.add_argument("--rewritten", default=None, metavar="FILE",
                    help='the edits were made from rewritten instructions: a JSONL of {"query_id": ..., '
                         '"instruction": <the text used>} per query; the rows are marked as rewritten')
    ap.add_argument("--protocol", default=None, choices=PROTOCOL_CHOICES,
                    help="how the edits were made: single_turn (each turn from the dataset's input), multi_turn (from "
                         "the model's previous output) or both; for a folder of MagicBrush's multi-turn layout the "
                         "default is both when it holds <id>_iter_<t> files, else single_turn (flat folder: "
                         "single_turn)")
    ap.add_argument("overrides", nargs="*", metavar="key=value", help="Hydra overrides of the run config")
    argv = [f"--{a}" if a.partition("=")[0] in LEGACY_KEYS else a for a in argv]
    args = ap.parse_intermixed_args(argv)
    bad = [o for o in args.overrides if "=" not in o]
    if bad:
        ap.error(f"not a key=value override: {' '.join(bad)}")
    own = [o for o in args.overrides if o.lstrip("+~").partition("=")[0] in ("protocol", "editor.protocol",
                                                                             "editor.layout", "editor.queries")]
    if own:
        ap.error(f"{' '.join(own)}: give --protocol instead (the layout and its sessions are read from the folder)")
    return args, list(args.overrides)


def main(argv: list[str] | None = None) -> int:
    args, rest = parse_args(list(sys.argv[1:] if argv is None else argv))
    try:  # NAME becomes a folder name and a leaderboard label; checked before Hydra could resolve `${...}` in it
        check_label(args.name, "NAME")
    except LabelError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:  # a mistyped group option or key first, with its suggestion (as `editmeter run` does)
        check_overrides(rest)
        check_keys(rest)
    except UnknownOptionError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.rewritten is not None and not Path(args.rewritten).is_file():
        print(f"error: --rewritten {args.rewritten}: no such file (give the JSONL of rewritten instructions, one "
              '{"query_id": ..., "instruction": ...} per line)', file=sys.stderr)
        return 2
    if not Path(args.edits).is_dir():
        print(f"error: --edits {args.edits}: no such folder (give the folder of edited images, EDITS=<folder> for "
              "make score)", file=sys.stderr)
        return 2
    from benchmark.commands.run import compose, run_and_report
    from benchmark.io.console import progress_enabled, quiet_third_party
    from benchmark.io.errors import PreflightError
    from benchmark.plan.config import instantiate, read_plan
    from benchmark.plan.resolved import load_selection

    # the run's own failure rule: unreadable or invalid edits fail it as they fail `editmeter run editor=external`
    overrides = ["editor=external", f"editor.folder={args.edits}", f"editor.label={args.name}",
                 f"editor.prompt_kind={args.kind}", "stages=[edit,score,aggregate]",
                 *([f"editor.rewritten={Path(args.rewritten).resolve()}"] if args.rewritten else []), *rest]
    try:
        cfg, _ = compose(overrides)
    except UnknownOptionError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    plan = read_plan(cfg, args.name)
    quiet_third_party(progress_enabled(plan.progress))
    try:  # an unbuilt or bad query set: its message (naming the file and the build command), not a traceback
        full, qs = load_selection(plan)  # what the run scores
    except PreflightError as err:
        print(f"[editmeter] error: {err}", file=sys.stderr)
        return err.exit_code
    try:
        layout, protocols = _layout(Path(args.edits), full, args.protocol)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    status = 0
    for protocol in protocols:
        # `++`: the run's protocol whether or not the base config declares the key yet
        extra = [f"editor.layout={layout}", f"editor.protocol={protocol}", f"++protocol={protocol}",
                 *([f"editor.queries={Path(full.root) / 'queries.jsonl'}"] if layout == "magicbrush" else [])]
        cfg, _ = compose([*overrides, *extra])
        try:
            editor = instantiate(read_plan(cfg, args.name).editor.config, at="editor")
        except Exception as err:  # Hydra wraps the class's error: a bad --rewritten file is the user's, said plainly
            from benchmark.io.session_edits import SessionLayoutError
            from editors.external import RewrittenFileError

            cause = err.__cause__ or err
            if isinstance(cause, (RewrittenFileError, SessionLayoutError)):  # a file changed since `_layout` read it
                print(f"error: {cause}", file=sys.stderr)
                return 2
            raise
        missing = editor.missing([q.id for q in qs.queries])
        what = f" ({protocol}: {HOW[protocol]})" if layout == "magicbrush" else ""
        print(f"[editmeter] {len(qs) - len(missing)} of {len(qs)} queries of {qs.name} have an edit in "
              f"{args.edits}{what}")
        if missing:
            shown = ", ".join(missing[:MAX_LISTED]) + (f", ... ({len(missing) - MAX_LISTED} more)" if len(missing) > MAX_LISTED else "")
            print(f"[editmeter] MISSING {len(missing)} edits (counted as missing, not failed; the row is PARTIAL): "
                  f"{shown}")
        status = max(status, run_and_report(cfg, args.name))
    return status


def _layout(edits: Path, full, protocol: str | None) -> tuple[str, list[str]]:
    """(the folder's layout, the protocols to score): MagicBrush's session folders for a query set with sessions
    and a folder of subfolders, else flat. ValueError naming the files of the session layout that map to no turn,
    or `both` asked of a flat folder."""
    from benchmark.io.session_edits import has_session_folders, map_session_folder

    sessions = any(q.session is not None for q in full.queries)
    if not sessions and has_session_folders(edits) and (example := looks_multi_turn(edits)):
        raise ValueError(
            f"{edits} looks like MagicBrush's multi-turn layout (e.g. {example}: <id>/<id>_1.png, <id>_iter_<t>.png, "
            f"<id>_inde_<t>.png), but query set {full.name} at {full.root} has no sessions: it was built with the "
            "first turn only (the default --turns first). Build the set with every turn, e.g. "
            "editmeter data build magicbrush --dataset <split folder> --split <split> --out datasets/magicbrush_turns "
            "--turns all, then score against it with queryset.root=datasets/magicbrush_turns")
    if not (sessions and has_session_folders(edits)):
        if protocol == "both":
            raise ValueError(f"--protocol both: {edits} is a flat folder (one edit per query id), which holds one "
                             "protocol's edits; give --protocol single_turn or multi_turn")
        return "flat", [protocol or "single_turn"]
    mapping = map_session_folder(edits, full.queries, "single_turn")
    if mapping.refused:
        raise ValueError(mapping.refusal(edits))
    if protocol is None:
        iterated = any(f.kind == "iter" for f in mapping.parsed)
        protocol = "both" if iterated else "single_turn"
        print(f"[editmeter] {edits}: MagicBrush's multi-turn layout; scoring "
              f"{'both protocols (it holds <id>_iter_<t> files)' if iterated else 'single_turn (no <id>_iter_<t> file)'}")
    return "magicbrush", ["single_turn", "multi_turn"] if protocol == "both" else [protocol]


def looks_multi_turn(edits: Path) -> str:
    """A file of `edits` named as MagicBrush's multi-turn script names its outputs (`<id>/<id>_1.png`,
    `<id>/<id>_iter_<t>.png`, `<id>/<id>_inde_<t>.png`), as a relative path; '' when there is none."""
    from benchmark.io.session_edits import _TURN, IMAGE_EXTENSIONS

    for entry in sorted(p for p in edits.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for path in sorted(entry.iterdir()):
            stem, prefix = path.name[: -len(path.suffix)] if path.suffix else path.name, f"{entry.name}_"
            if (path.suffix.lower() in IMAGE_EXTENSIONS and stem.startswith(prefix)
                    and _TURN.fullmatch(stem[len(prefix):])):
                return f"{entry.name}/{path.name}"
    return ""


if __name__ == "__main__":
    sys.exit(main())
