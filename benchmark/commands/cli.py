"""The `editmeter` command: one entry point, one subcommand per job. Each subcommand is a thin parser that calls
the library; heavy modules are imported only by the subcommand that needs them.

    editmeter run editor=ip2p queryset=demo profile=tiny      # the Hydra pipeline (also --multirun)
    editmeter score --edits DIR --name LABEL queryset=hatie    # score edits made elsewhere
    editmeter show [--queryset demo]                           # print the leaderboard
    editmeter compare identity overedit [--by type]            # paired differences, CIs, tests, win rates
    editmeter remove overedit --yes                            # delete a run, rebuild the tables
    editmeter verify results/runs/<set>/<editor>-<sig>        # re-edit a sample, compare pixels (exit 1: differ)
    editmeter data NAME                                        # download a query-set source
    editmeter weights ...                                      # prefetch the checkpoints a run needs
    editmeter launch --workers 8 editor=ip2p queryset=hatie    # shard a run across local GPUs or Slurm
    editmeter metaeval <test> ...                              # meta-evaluation of every metric set
    editmeter report [--results DIR] [--out DIR]               # static HTML report
    editmeter gpu-check                                        # is this CUDA machine ready, what does a query cost
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

PROG = "editmeter"


def _run(argv: list[str]) -> int:
    from benchmark.commands.run import main

    return main(argv)


def _score(argv: list[str]) -> int:
    from benchmark.commands.score_edits import main

    return main(argv)


def _show(argv: list[str]) -> int:
    from benchmark.tables.leaderboard import main

    return main(["show", *argv]) or 0


def _compare(argv: list[str]) -> int:
    from benchmark.commands.compare import main

    return main(argv)


def _remove(argv: list[str]) -> int:
    from benchmark.commands.remove import main

    return main(argv)


def _verify(argv: list[str]) -> int:
    from benchmark.commands.verify import main

    return main(argv)


def _data(argv: list[str]) -> int:
    if argv[:1] == ["pin"]:
        return _data_pin(argv[1:])
    ap = argparse.ArgumentParser(prog=f"{PROG} data", description="Download the raw files of one query-set source "
                                 "(resumable, size- and sha256-verified), then print the command that builds it.")
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


def _report(argv: list[str]) -> int:
    from benchmark.commands.report import main

    return main(argv)


def _weights(argv: list[str]) -> int:
    from benchmark.plan.weights import main

    return main(argv) or 0


def _launch(argv: list[str]) -> int:  # scale: shard a run or a sweep through a Hydra launcher
    from benchmark.commands.launch import main

    return main(argv)


def _gpu_check(argv: list[str]) -> int:  # the GPU self-check: every editor and suite on this CUDA machine, then timings
    from benchmark.commands.gpucheck import main

    return main(argv)


def _metaeval(argv: list[str]) -> int:
    from benchmark.commands.metaeval.cli import main

    return main(argv)


def _arena(argv: list[str]) -> int:
    from benchmark.commands.arena import main

    return main(argv)


COMMANDS: dict[str, tuple[Callable[[list[str]], int], str]] = {
    "run": (_run, "edit a query set, score the edits, rebuild the leaderboards (Hydra; --multirun sweeps)"),
    "score": (_score, "score a folder of edits made elsewhere and add them to the leaderboard"),
    "show": (_show, "print the leaderboard (means ± bootstrap SE, arrows for the better direction)"),
    "compare": (_compare, "paired comparison of runs on their shared queries: differences, CIs, tests, win rates"),
    "remove": (_remove, "delete run folders from a results folder and rebuild the leaderboard tables"),
    "verify": (_verify, "re-edit a sample of a finished run with today's code, weights and device; compare pixels"),
    "data": (_data, "download one query-set source (resumable, verified)"),
    "weights": (_weights, "prefetch every checkpoint a run will touch (editor and metric models)"),
    "launch": (_launch, "shard a run (or a sweep) across N workers: local GPUs/CPUs or Slurm; then aggregate"),
    "metaeval": (_metaeval, "how far each metric agrees with ground truth and people (gt-selection, 2afc, winrate, "
                            "fit-weights, judges, drift)"),
    "arena": (_arena, "pairwise judging by GenArena's protocol: Bradley-Terry ratings with intervals, consistency, "
                      "win-rate matrix"),
    "report": (_report, "write a static HTML report: leaderboards, charts, image grid, failures, provenance"),
    "gpu-check": (_gpu_check, "self-check of a CUDA machine: every editor (fp16, bf16, rerun) and suite, then "
                              "real-size seconds per query and peak memory"),
}


def usage() -> str:
    """The top-level help: subcommands, config groups with their options, examples."""
    from benchmark.plan.config import config_groups, options

    width = max(map(len, COMMANDS)) + 2
    lines = [f"usage: {PROG} <command> [options] [group=option ...] [key=value ...]", "", "commands:"]
    lines += [f"  {name:<{width}}{text}" for name, (_, text) in COMMANDS.items()]
    lines += ["", "config groups (group=option), for run and score:"]
    lines += [f"  {g}: {', '.join(options(g))}" for g in config_groups()]
    lines += ["", "examples:",
              f"  {PROG} run editor=ip2p queryset=demo profile=tiny",
              f"  {PROG} run --multirun editor=identity,oracle,overedit queryset=demo profile=tiny metrics=hatie",
              f"  {PROG} score --edits path/to/edits --name their-model queryset=demo profile=tiny",
              f"  {PROG} show --queryset demo",
              f"  {PROG} compare identity overedit --metric-set basic --by type",
              f"  {PROG} data magicbrush",
              "", f"`{PROG} <command> --help` for a command's options and keys; docs/cli.md for everything."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch `editmeter <command> ...`; returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if args else 2
    name, rest = args[0], args[1:]
    # Deterministic cuBLAS needs its workspace set before the first cuBLAS call of the process (P2P, Imagic).
    from benchmark.editing.determinism import configure_cublas

    configure_cublas()
    from benchmark.io.console import own_warning_style

    own_warning_style()  # every command may quarantine a results file with a warning
    if name not in COMMANDS:
        close = difflib.get_close_matches(name, list(COMMANDS), n=1, cutoff=0.5)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        print(f"error: unknown command {name!r}.{hint} Commands: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    try:
        return int(COMMANDS[name][0](rest) or 0)
    except BrokenPipeError:  # `editmeter show | head`: the reader stopped early, which is not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the final flush does not raise again
        return 0
    except SystemExit as exc:  # argparse and Hydra exit this way (--help, usage errors)
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)


def entry() -> None:
    """Console-script entry point (`[project.scripts] editmeter`)."""
    sys.exit(main())


if __name__ == "__main__":
    entry()
