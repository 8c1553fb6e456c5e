"""Score a folder of edits made elsewhere:

    python -m benchmark.score_edits queryset=hatie edits=/path/to/edits name=my-model [kind=description] [overrides]

Files are matched to queries by id (`<query id>.png` or HATIE's `<prefix>_<query id>.jpg`). Missing files are
reported by count and id, recorded as failed, and the rest is scored and added to the leaderboard as `name`.
"""

from __future__ import annotations

import sys

from benchmark.config import LabelError, UnknownOptionError, check_label

MAX_LISTED = 20


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    opts = {k: v for k, _, v in (a.partition("=") for a in args if a.split("=")[0] in ("edits", "name", "kind"))}
    rest = [a for a in args if a.split("=")[0] not in ("edits", "name", "kind")]
    if not opts.get("edits") or not opts.get("name"):
        print("usage: python -m benchmark.score_edits queryset=<set> edits=<folder> name=<label> [kind=instruction|"
              "description] [hydra overrides]", file=sys.stderr)
        return 2
    try:  # NAME becomes a folder name and a leaderboard label; checked before Hydra could resolve `${...}` in it
        check_label(opts["name"], "NAME")
    except LabelError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    from hydra.utils import instantiate

    from benchmark.run import compose, run_and_report

    overrides = ["editor=external", f"editor.folder={opts['edits']}", f"editor.label={opts['name']}",
                 f"editor.prompt_kind={opts.get('kind', 'instruction')}", "stages=[edit,score,aggregate]", *rest]
    if not any(a.startswith("max_failed_fraction=") for a in rest):  # missing files are listed above, not a crash:
        overrides.append("max_failed_fraction=1.0")                     # exit 1 only when none could be scored
    try:
        cfg, _ = compose(overrides)
    except UnknownOptionError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    qs = instantiate(cfg.queryset)
    editor = instantiate(cfg.editor)
    missing = editor.missing([q.id for q in qs.queries])
    print(f"[editmeter] {len(qs) - len(missing)} of {len(qs)} queries of {qs.name} have an edit in {opts['edits']}")
    if missing:
        shown = ", ".join(missing[:MAX_LISTED]) + (f", ... ({len(missing) - MAX_LISTED} more)" if len(missing) > MAX_LISTED else "")
        print(f"[editmeter] MISSING {len(missing)} edits (recorded as failed): {shown}")
    return run_and_report(cfg, opts["name"])


if __name__ == "__main__":
    sys.exit(main())
