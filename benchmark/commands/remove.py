"""`editmeter remove`: delete run folders from a results folder and rebuild its tables (docs/results.md, "Removing
a run").

A run is named as `editmeter compare` names it: its folder `<editor>-<signature>`, the key `<queryset dir>/<folder>`
when several query sets hold that folder name, or an editor name when it has one run folder (`--queryset` narrows).
Each folder is renamed out of `runs/` first and deleted after, so a kill in the middle never leaves half a run that
the tables would read; then the leaderboards are rebuilt from what is left, as a run's aggregate stage does.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from benchmark.io.errors import RunError

RUNS_DIR = "runs"
TRASH_PREFIX = ".removing-"  # a folder being deleted: never a run (not `<editor>-<sig>` under a query-set folder)


class RemoveError(RunError, ValueError):
    """The runs to remove cannot be resolved (unknown, ambiguous) or the removal was not confirmed."""


@dataclass(frozen=True)
class RunFolder:
    """One run folder under `<results>/runs/<queryset dir>/`."""

    path: Path
    editor: str
    queryset: str

    @property
    def key(self) -> str:
        return f"{self.path.parent.name}/{self.path.name}"


def run_folders(results: Path) -> list[RunFolder]:
    """Every run folder under `results/runs` (a folder holding run.json), its editor and query set read from
    run.json; an unreadable run.json still names the folder (editor from the folder name)."""
    out = []
    for meta_path in sorted((results / RUNS_DIR).glob("*/*/run.json")):
        folder = meta_path.parent
        if folder.name.startswith(TRASH_PREFIX) or folder.is_symlink():
            continue
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            editor, queryset = str(meta["editor"]), str(meta["queryset"])
        except (OSError, ValueError, KeyError, TypeError):
            editor, queryset = folder.name.rsplit("-", 1)[0], folder.parent.name.rsplit("-", 1)[0]
        out.append(RunFolder(folder, editor, queryset))
    return out


def resolve(folders: list[RunFolder], names: list[str], queryset: str | None = None) -> list[RunFolder]:
    """The folder each name denotes (key, folder name, or an editor with one folder); RemoveError otherwise."""
    pool = [f for f in folders if queryset is None or f.queryset == queryset]
    chosen: list[RunFolder] = []
    for name in names:
        hits = [f for f in pool if name in (f.key, f.path.name)] or [f for f in pool if f.editor == name]
        if not hits:
            known = sorted({f.editor for f in pool})
            close = difflib.get_close_matches(name, known + [f.path.name for f in pool], n=1)
            guess = f" Did you mean {close[0]!r}?" if close else ""
            where = f" of query set {queryset!r}" if queryset else ""
            raise RemoveError(f"no run {name!r}{where}.{guess} Runs there: "
                              f"{', '.join(f.key for f in pool) or 'none'}")
        if len(hits) > 1:
            # --queryset given: the runs are of that one set, so only a folder or key tells them apart
            how = ("by its <editor>-<signature> folder or its <queryset dir>/<folder> key" if queryset else
                   "by its <queryset dir>/<folder> key, or narrow with --queryset")
            raise RemoveError(f"{name!r} names {len(hits)} run folders ({', '.join(f.key for f in hits)}): name one "
                              f"{how}")
        if hits[0] not in chosen:
            chosen.append(hits[0])
    return chosen


def delete(folder: RunFolder) -> None:
    """Rename the folder out of the tables' sight, then delete it (a killed removal leaves only the renamed one,
    which the next removal of anything clears)."""
    trash = folder.path.with_name(f"{TRASH_PREFIX}{folder.path.name}.{os.getpid()}")
    os.replace(folder.path, trash)
    shutil.rmtree(trash)


def _clear_interrupted(results: Path) -> None:
    for trash in (results / RUNS_DIR).glob(f"*/{TRASH_PREFIX}*"):
        shutil.rmtree(trash, ignore_errors=True)


def main(argv: list[str]) -> int:
    """`editmeter remove RUN... [--results DIR] [--queryset NAME] [--yes]`; returns the exit status."""
    ap = argparse.ArgumentParser(prog="editmeter remove", description="Delete run folders (their edits, scores and "
                                 "records) and rebuild the leaderboard tables from the runs left.")
    ap.add_argument("runs", nargs="+", help="run folder <editor>-<signature>, key <queryset dir>/<folder>, or an "
                    "editor with one run folder")
    ap.add_argument("--results", type=Path, default=Path("results"), help="results folder (default: results)")
    ap.add_argument("--queryset", help="only runs of this query set")
    ap.add_argument("--yes", action="store_true", help="do not ask for confirmation (needed off a terminal)")
    ap.add_argument("--resamples", type=int, default=None, help="bootstrap resamples of the rebuilt tables "
                    "(default: the config's aggregate.bootstrap_resamples)")
    args = ap.parse_args(argv)
    try:
        chosen = resolve(run_folders(args.results), args.runs, args.queryset)
        print("[editmeter] remove: " + "; ".join(f"{f.key} ({f.editor} on {f.queryset})" for f in chosen))
        if not args.yes:
            if not sys.stdin.isatty():
                raise RemoveError("not confirmed: pass --yes to delete without a question (stdin is not a terminal)")
            if input(f"delete {len(chosen)} run folder(s) and rebuild the tables? [y/N] ").strip().lower() != "y":
                print("[editmeter] remove: nothing deleted")
                return 1
    except RemoveError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    _clear_interrupted(args.results)
    for f in chosen:
        delete(f)
    from benchmark.plan.config import compose
    from benchmark.stages.aggregate import write_leaderboards

    cfg, _ = compose([f"paths.results={args.results.resolve()}"])
    resamples = args.resamples if args.resamples is not None else int(cfg.aggregate.bootstrap_resamples)
    written = write_leaderboards(args.results, None, resamples, int(cfg.aggregate.bootstrap_seed))
    print(f"[editmeter] removed {len(chosen)} run folder(s); tables rebuilt: {', '.join(sorted(map(str, written)))}")
    return 0
