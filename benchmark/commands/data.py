"""`editmeter data`: the query-set sources (docs/querysets.md).

    editmeter data NAME [--only FILE ...] [--dest DIR]      # download a source's raw files (resumable, verified)
    editmeter data pin kris --file F | pin rise --revision R  # record, on this machine, a pin the repository cannot
    editmeter data build NAME [options]                     # build a query set from them (benchmark/commands/builders.py)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

PROG = "editmeter"


def main(argv: list[str]) -> int:
    """`editmeter data NAME` (download), `editmeter data pin ...`, `editmeter data build NAME ...`."""
    if argv[:1] == ["pin"]:
        return _data_pin(argv[1:])
    if argv[:1] == ["build"]:
        from benchmark.commands.builders import main as build

        return build(argv[1:])
    return _download(argv)


def _download(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog=f"{PROG} data", description="Download the raw files of one query-set source "
                                 "(resumable, size- and sha256-verified), then print the command that builds it.",
                                 epilog=f"also: `{PROG} data build NAME [options]` builds a query set from the "
                                 f"downloaded files (`{PROG} data build` lists the builders); `{PROG} data pin ...` "
                                 "records a pin (kris, rise).")
    ap.add_argument("name", help="manifest name: datasets/manifests/<name>.json (gqa_hatie, hatie, editval, magicbrush, gedit, pie, imgedit, kris, rise, editscore_judge, editreward_judge, genarena)")
    ap.add_argument("--only", nargs="*", default=(), help="fetch only these file names from the manifest")
    ap.add_argument("--dest", type=Path, help="download folder (default datasets/<name>/downloads)")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar (default: only on a terminal)")
    args = ap.parse_args(argv)
    from benchmark.io.console import progress_enabled
    from benchmark.io.download import DownloadError, fetch_manifest, load_manifest
    from benchmark.io.provenance import PROJECT_ROOT

    try:
        manifest = load_manifest(args.name)
        dest = args.dest or PROJECT_ROOT / "datasets" / manifest.name / "downloads"
        print(f"[download] {manifest.name}: {manifest.description}\n[download] license: {manifest.license}")
        if manifest.pinned:
            print(f"[download] your pins: {manifest.pinned}")
        paths = fetch_manifest(manifest, dest, only=args.only, progress=not args.no_progress and progress_enabled())
    except DownloadError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    for p in paths:
        print(f"[download] ok {p}")
    if manifest.build:
        print(f"[download] next, build the query set:\n  {manifest.build}")
    else:  # a files-only manifest (a judge's pinned prompt file): read where it lies
        print("[download] nothing to build: the files are read where they are")
    return 0


def _data_pin(argv: list[str]) -> int:
    """`editmeter data pin kris --file F` / `editmeter data pin rise --revision R`: check, then record the pin in
    the user's pins file (benchmark.io.pins; never the repository's configs). Exit 2, nothing written, on a refusal."""
    from benchmark.io.pins import COMMIT, PinError, pins_path, write_pin

    ap = argparse.ArgumentParser(prog=f"{PROG} data pin", description="Pin, on this machine, what the repository "
                                 "cannot: KRIS-Bench's prompt file (its sha256, after you reviewed it) or "
                                 "RISEBench-360's hub revision. Written to your pins file ($EDITMETER_PINS, else "
                                 "~/.config/editmeter/pins.json); docs/judge.md.")
    ap.add_argument("name", choices=("kris", "rise"), help="kris: the prompt file; rise: the hub dataset's revision")
    ap.add_argument("--file", type=Path, help="kris: the fetched utils/prompts.py "
                    "(datasets/kris/downloads/kris_prompts.txt after `editmeter data kris`)")
    ap.add_argument("--commit", help="kris: the mercurystraw/Kris_Bench commit the file is from (default: "
                    "metrics=kris's prompts_commit)")
    ap.add_argument("--revision", help="rise: the 40-hex commit of the hub dataset PhoenixZ/RISEBench")
    args = ap.parse_args(argv)
    try:
        if args.name == "kris":
            if args.file is None or args.revision is not None:
                ap.error("kris takes --file <utils/prompts.py> (and --commit), not --revision")
            from benchmark.metrics.kris.protocol import SOURCE_REPO, check_prompt_file

            commit = args.commit or _kris_commit()
            if not COMMIT.fullmatch(commit):
                raise PinError(f"--commit {commit!r} is not a 40-hex commit of {SOURCE_REPO}")
            sha = check_prompt_file(args.file)
            path = write_pin("kris", commit, {"prompts_sha256": sha, "prompts_file": str(args.file.resolve())})
            print(f"[pin] kris: {args.file} (sha256 {sha}) pinned for {SOURCE_REPO}@{commit} in {path}; metrics=kris "
                  "reads this file and checks it against that sha256 (metrics.kris.prompts_file / prompts_sha256 "
                  "on the command line still win)")
        else:
            if args.revision is None or args.file is not None or args.commit is not None:
                ap.error("rise takes --revision <40-hex commit of the hub dataset PhoenixZ/RISEBench>")
            if not COMMIT.fullmatch(args.revision):
                raise PinError(f"--revision {args.revision!r} is not a 40-hex commit of the hub dataset "
                               "PhoenixZ/RISEBench (a branch such as main moves)")
            path = write_pin("rise", None, {"revision": args.revision})
            print(f"[pin] rise: RISEBench-360 (PhoenixZ/RISEBench) pinned at revision {args.revision} in {path}; "
                  "`editmeter data rise` fetches its files at that revision")
    except (PinError, ValueError) as err:  # ProtocolError is a ValueError
        print(f"error: {err} (pins file: {pins_path()})", file=sys.stderr)
        return 2
    return 0


def _kris_commit() -> str:
    """metrics=kris's prompts_commit, from its config file."""
    from omegaconf import OmegaConf

    from benchmark.plan.config import CONFIG_DIR

    return str(OmegaConf.load(CONFIG_DIR / "metrics" / "kris.yaml").kris.prompts_commit)
