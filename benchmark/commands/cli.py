"""The `editmeter` command: one entry point, one subcommand per job. Each subcommand is a thin parser that calls
the library; heavy modules are imported only by the subcommand that needs them.

    editmeter run editor=ip2p queryset=demo profile=tiny      # the Hydra pipeline (also --multirun)
    editmeter score --edits DIR --name LABEL queryset=hatie    # score edits made elsewhere
    editmeter show [--queryset demo]                           # print the leaderboard
    editmeter compare identity overedit [--by type]            # paired differences, CIs, tests, win rates
    editmeter remove overedit --yes                            # delete a run, rebuild the tables
    editmeter verify results/runs/<set>/<editor>-<sig>        # re-edit a sample, compare pixels (exit 1: differ)
    editmeter data NAME                                        # download a query-set source
    editmeter data build NAME ...                              # build a query set from a downloaded source
    editmeter weights ...                                      # prefetch the checkpoints a run needs
    editmeter launch --workers 8 editor=ip2p queryset=hatie    # shard a run across local GPUs or Slurm
    editmeter metaeval <test> ...                              # meta-evaluation of every metric set
    editmeter report [--results DIR] [--out DIR]               # static HTML report
    editmeter gpu-check                                        # is this CUDA machine ready, what does a query cost
"""

from __future__ import annotations

import difflib
import os
import sys
from collections.abc import Callable, Sequence

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
    from benchmark.commands.data import main

    return main(argv)


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
    "data": (_data, "query-set sources: download one (resumable, verified), pin one, build a query set from one"),
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
