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
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmark.config import LabelError, UnknownOptionError, check_keys, check_label, check_overrides

MAX_LISTED = 20
# The older spelling `edits=DIR name=LABEL kind=K` (scripts, tests, notebooks) is read as the options.
LEGACY_KEYS = ("edits", "name", "kind")


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
    ap.add_argument("overrides", nargs="*", metavar="key=value", help="Hydra overrides of the run config")
    argv = [f"--{a}" if a.partition("=")[0] in LEGACY_KEYS else a for a in argv]
    args = ap.parse_intermixed_args(argv)
    bad = [o for o in args.overrides if "=" not in o]
    if bad:
        ap.error(f"not a key=value override: {' '.join(bad)}")
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
    from benchmark.config import instantiate, read_plan
    from benchmark.console import progress_enabled, quiet_third_party
    from benchmark.errors import PreflightError
    from benchmark.preflight import load_selection
    from benchmark.run import compose, run_and_report

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
        _, qs = load_selection(plan)  # what the run scores
    except PreflightError as err:
        print(f"[editmeter] error: {err}", file=sys.stderr)
        return err.exit_code
    try:
        editor = instantiate(plan.editor.config, at="editor")
    except Exception as err:  # Hydra wraps the class's error: a bad --rewritten file is the user's, said plainly
        from editors.external import RewrittenFileError

        cause = err.__cause__ or err
        if isinstance(cause, RewrittenFileError):
            print(f"error: {cause}", file=sys.stderr)
            return 2
        raise
    missing = editor.missing([q.id for q in qs.queries])
    print(f"[editmeter] {len(qs) - len(missing)} of {len(qs)} queries of {qs.name} have an edit in {args.edits}")
    if missing:
        shown = ", ".join(missing[:MAX_LISTED]) + (f", ... ({len(missing) - MAX_LISTED} more)" if len(missing) > MAX_LISTED else "")
        print(f"[editmeter] MISSING {len(missing)} edits (counted as missing, not failed; the row is PARTIAL): "
              f"{shown}")
    return run_and_report(cfg, args.name)


if __name__ == "__main__":
    sys.exit(main())
