"""`editmeter gpu-check`: is this CUDA machine ready for editmeter, and what does a query cost on it?

Three parts, each row of one table (component, PASS/FAIL with the reason, seconds per query, peak GPU memory):

1. correctness, tiny models: every editor edits a few demo queries in each half precision (fp16, bf16), twice into
   two results folders; it passes with no failed query and byte-identical PNGs in both (rerun determinism);
2. every metric suite scores the oracle's edits of the demo (EditVal's on its own demo set) with no failed row;
3. timing at real size (`profile=random`: SD v1's architecture with random weights, the editors' real settings):
   each diffusion editor's seconds per query (model load apart) and HATIE's scoring seconds per query; the DiT
   editors (FLUX.1 Kontext, Qwen-Image-Edit, FLUX.2, OmniGen) with `--dit-timing`.

Without CUDA it says so in one line and exits 0 (`--allow-cpu` runs it on the CPU: how the tests exercise it).
Every run goes through `benchmark.commands.run.run_pipeline`, the code `editmeter run` uses, into a scratch folder.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SD_EDITORS = ("ip2p", "magicbrush", "sdedit", "diffedit", "p2p", "imagic", "ledits")
# DiT instruction editors (benchmark.editing.dit): checked in tiny size like the SD ones; timed at real size only with
# --dit-timing, since their random real-size weights are built on the CPU first (8-58 GB of memory and disk each).
DIT_EDITORS = ("flux_kontext", "qwen_image_edit", "flux2", "omnigen", "rf_solver", "fireflow", "rf_inversion")
DIFFUSION_EDITORS = (*SD_EDITORS, *DIT_EDITORS)
WEIGHT_FREE_EDITORS = ("identity", "oracle", "overedit")
SUITES = ("basic", "hatie", "editval_oracle", "conventional", "augclip", "bpm", "judge")
# The query set each suite is checked on (EditVal's rules need its own edit types).
SUITE_QUERYSET = {"editval_oracle": "demo_editval"}
HALF = ("fp16", "bf16")


@dataclass
class Row:
    """One line of the self-check's table."""

    part: str
    component: str
    ok: bool
    reason: str = ""
    seconds_per_query: float | None = None
    load_seconds: float | None = None
    peak_gib: float | None = None


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"[:160]


class Device:
    """Peak-memory bookkeeping of the device the check runs on (nothing to read on a CPU)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.cuda = name.startswith("cuda")

    def reset(self) -> None:
        if self.cuda:
            import torch

            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()

    def peak_gib(self) -> float | None:
        if not self.cuda:
            return None
        import torch

        return torch.cuda.max_memory_allocated() / 2**30


def run_once(overrides: Sequence[str], results: Path, *, quiet: bool = True) -> dict[str, Any]:
    """One `editmeter run` in this process (its console lines swallowed when `quiet`); returns its summary.
    A run over `max_failed_fraction` raises TooManyFailures; the summary is still what the caller inspects."""
    from benchmark.commands.run import compose, run_pipeline

    cfg, choices = compose([*overrides, f"paths.results={results}", "progress=false", "max_failed_fraction=1.0"])
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink) if quiet else contextlib.nullcontext():
        try:
            return run_pipeline(cfg, choices["editor"])
        finally:
            _forget_finetunes()


def _forget_finetunes() -> None:
    """Imagic keeps fine-tunes per process; a rerun check must fine-tune again, not reuse the first run's."""
    import sys

    imagic = sys.modules.get("benchmark.editing.imagic")
    if imagic is not None:
        imagic.FINETUNES.entries.clear()


def _pngs(results: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((results / "runs").glob("*/*/edits/*.png"))}


def _edit_failures(summary: dict[str, Any]) -> str:
    st = summary.get("edit")
    if st is None:
        return "no edit stage ran"
    return st.failure_summary() if st.failed_total else ""


@contextlib.contextmanager
def _scratch(root: Path, name: str) -> Iterator[Path]:
    path = root / name
    shutil.rmtree(path, ignore_errors=True)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def check_editor(editor: str, dtype: str | None, *, device: Device, queries: int, work: Path) -> Row:
    """Tiny editor, `queries` demo queries, twice: PASS when nothing failed and both runs' PNGs are identical."""
    label = f"{editor} tiny {dtype or 'fp32'}"
    base = [f"editor={editor}", "queryset=demo_mini", "profile=tiny", f"limit={queries}", "stages=[edit]",
            f"device={device.name}"]
    if dtype is not None:
        base += [f"editor.dtype={dtype}", f"editor.device={device.name}"]
    try:
        device.reset()
        with _scratch(work, "a") as a, _scratch(work, "b") as b:
            first = run_once(base, a)
            second = run_once(base, b)
            failed = _edit_failures(first) or _edit_failures(second)
            if failed:
                return Row("tiny", label, False, failed)
            pa, pb = _pngs(a), _pngs(b)
            if len(pa) != queries or pa.keys() != pb.keys():
                return Row("tiny", label, False, f"{len(pa)} and {len(pb)} PNGs for {queries} queries")
            differ = sorted(k for k in pa if pa[k] != pb[k])
            if differ:
                return Row("tiny", label, False, f"rerun differs: {len(differ)} of {queries} PNGs ({differ[0]})")
        t = first["timings"]
        return Row("tiny", label, True, "rerun byte-identical", t.get("edit", 0.0) / queries,
                   t.get("load editor"), device.peak_gib())
    except Exception as err:  # one component's failure is a row of the table, never the end of the check
        return Row("tiny", label, False, _first_line(err))


def check_suite(suite: str, *, device: Device, queries: int, work: Path) -> Row:
    """Score the oracle's tiny-profile edits with `suite`: PASS when no row failed."""
    queryset = SUITE_QUERYSET.get(suite, "demo_mini")
    overrides = ["editor=oracle", f"queryset={queryset}", "profile=tiny", f"metrics={suite}", f"limit={queries}",
                 "stages=[edit,score]", f"device={device.name}"]
    try:
        device.reset()
        with _scratch(work, "suite") as results:
            summary = run_once(overrides, results)
        scores = summary.get("scores") or {}
        bad = [st.failure_summary() for st in scores.values() if st.failed_total]
        if not scores or bad:
            return Row("tiny", f"suite {suite}", False, bad[0] if bad else "nothing scored")
        sec = sum(st.seconds for st in scores.values())
        return Row("tiny", f"suite {suite}", True, f"{queries} queries of {queryset} scored",
                   sec / queries, None, device.peak_gib())
    except Exception as err:
        return Row("tiny", f"suite {suite}", False, _first_line(err))


def time_editor(editor: str, *, device: Device, queries: int, work: Path, extra: Sequence[str] = (),
                queryset: str = "demo_mini") -> Row:
    """Real-size editor (random weights, real settings, its default dtype): seconds per query and load time.
    `extra`: further `editor.<key>=` overrides (e.g. `editor.deterministic=false` to price deterministic mode);
    they are named in the row's component, as a `queryset` other than demo_mini is."""
    overrides = [f"editor={editor}", f"queryset={queryset}", "profile=random", f"limit={queries}", "stages=[edit]",
                 f"device={device.name}", f"editor.device={device.name}", *extra]
    label = " ".join([f"{editor} real size", *([] if queryset == "demo_mini" else [queryset]), *extra])
    try:
        device.reset()
        with _scratch(work, "timing") as results:
            summary = run_once(overrides, results)
        failed = _edit_failures(summary)
        t = summary["timings"]
        return Row("random", label, not failed, failed or "timed", t.get("edit", 0.0) / queries,
                   t.get("load editor"), device.peak_gib())
    except Exception as err:
        return Row("random", label, False, _first_line(err))


def time_hatie(*, device: Device, queries: int, work: Path) -> Row:
    """HATIE at real size (random-weight backbones and Mask R-CNN) on identity's edits: scoring seconds per query."""
    overrides = ["editor=identity", "queryset=demo_mini", "profile=random", "metrics=hatie", f"limit={queries}",
                 "stages=[edit,score]", f"device={device.name}"]
    try:
        device.reset()
        with _scratch(work, "timing") as results:
            summary = run_once(overrides, results)
        st = next(iter((summary.get("scores") or {}).values()), None)
        if st is None:
            return Row("random", "suite hatie real size", False, "nothing scored")
        bad = st.failure_summary() if st.failed_total else ""
        return Row("random", "suite hatie real size", not bad, bad or "timed (models load apart)",
                   st.seconds / queries, None, device.peak_gib())
    except Exception as err:
        return Row("random", "suite hatie real size", False, _first_line(err))


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def table(rows: Sequence[Row]) -> str:
    """The rows as a Markdown table (readable in a terminal, pasteable into docs)."""
    head = "| part | component | result | s / query | load s | peak GiB |\n|---|---|---|---|---|---|"
    lines = [f"| {r.part} | {r.component} | {'PASS' if r.ok else 'FAIL'}: {r.reason} | "
             f"{_num(r.seconds_per_query, '.2f')} | {_num(r.load_seconds, '.1f')} | {_num(r.peak_gib, '.2f')} |"
             for r in rows]
    return "\n".join([head, *lines])


def _cuda_line() -> str | None:
    """None when CUDA is usable, else the one line that says why not."""
    import torch

    if torch.cuda.is_available():
        return None
    built = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU only"
    return f"gpu-check: no CUDA device visible (torch {torch.__version__}, built for {built}); nothing to check here."


def device_unavailable(device: str) -> str | None:
    """None when `device` can be used here, else one line saying why not: a timing script asked for CUDA on a
    machine without it prints this and exits 2 instead of ending in the driver's traceback."""
    if not str(device).startswith("cuda"):
        return None
    import torch

    if torch.cuda.is_available():
        return None
    built = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU only"
    return (f"--device {device}: no CUDA device visible (torch {torch.__version__}, built for {built}); run this on a "
            "GPU machine, or pass --device cpu to time the CPU")


def plan(args: argparse.Namespace, device: Device, work: Path) -> list[Callable[[], Row]]:
    """The checks to run, in table order."""
    steps: list[Callable[[], Row]] = []
    if not args.no_tiny:
        for e in args.editors:
            for dt in (args.dtypes if e in DIFFUSION_EDITORS else [None]):
                steps.append(lambda e=e, dt=dt: check_editor(e, dt, device=device, queries=args.queries, work=work))
        for s in args.suites:
            steps.append(lambda s=s: check_suite(s, device=device, queries=args.queries, work=work))
    if not args.no_timing:
        for e in (e for e in args.editors if e in SD_EDITORS or (args.dit_timing and e in DIT_EDITORS)):
            steps.append(lambda e=e: time_editor(e, device=device, queries=args.timing_queries, work=work,
                                                 extra=args.timing_set, queryset=args.timing_queryset))
        if "hatie" in args.suites:  # `--suites` without hatie: no HATIE timing either
            steps.append(lambda: time_hatie(device=device, queries=args.timing_queries, work=work))
    return steps


def _names(text: str, valid: Sequence[str], what: str) -> list[str]:
    names = [n for n in text.split(",") if n]
    bad = [n for n in names if n not in valid]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown {what} {', '.join(bad)}; valid: {', '.join(valid)}")
    return names


def _editor_override(text: str) -> str:
    if not text.startswith("editor.") or "=" not in text:
        raise argparse.ArgumentTypeError(f"{text!r} is not an editor override; write editor.KEY=VALUE")
    return text


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """The command line of `editmeter gpu-check`."""
    ap = argparse.ArgumentParser(prog="editmeter gpu-check", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--editors", default=",".join((*WEIGHT_FREE_EDITORS, *DIFFUSION_EDITORS)),
                    type=lambda t: _names(t, (*WEIGHT_FREE_EDITORS, *DIFFUSION_EDITORS), "editor(s)"))
    ap.add_argument("--suites", default=",".join(SUITES), type=lambda t: _names(t, SUITES, "suite(s)"))
    ap.add_argument("--dtypes", default=",".join(HALF), type=lambda t: _names(t, (*HALF, "fp32"), "dtype(s)"))
    ap.add_argument("--queries", type=int, default=2, help="demo queries per correctness check (default 2)")
    ap.add_argument("--timing-queries", type=int, default=2, help="queries per real-size timing (default 2)")
    ap.add_argument("--timing-queryset", default="demo_mini", choices=("demo_mini", "demo_per_source_3"),
                    help="the queries timed: demo_mini (7 per source) or demo_per_source_3 (3 per source, close to "
                         "HATIE's 2.73: what p2p's shared inversions meet in a real run)")
    ap.add_argument("--no-timing", action="store_true", help="correctness only (no real-size models)")
    ap.add_argument("--no-tiny", action="store_true", help="timing only (skip the tiny correctness checks)")
    ap.add_argument("--timing-set", action="append", default=[], metavar="editor.KEY=VALUE",
                    type=_editor_override,
                    help="an override for the real-size editor timings, repeatable (e.g. editor.deterministic=false "
                         "prices deterministic mode); named in the table")
    ap.add_argument("--dit-timing", action="store_true",
                    help="also time the DiT editors at real size (flux_kontext 34 GB; rf_solver, fireflow and "
                         "rf_inversion 34 GB, one FLUX.1 [dev] build for the three; qwen_image_edit 58 GB, flux2 16 GB, "
                         "omnigen 8 GB of random bf16 weights built on the CPU and cached on disk first)")
    ap.add_argument("--markdown", type=Path, help="also write the table to this file")
    ap.add_argument("--work", type=Path, help="scratch folder (default: a temporary one, removed afterwards)")
    ap.add_argument("--allow-cpu", action="store_true", help="run on the CPU when there is no CUDA (slow; tests)")
    args = ap.parse_args(argv)
    if args.no_tiny and args.no_timing:
        ap.error("--no-tiny and --no-timing together leave nothing to check; drop one")
    return args


def _write_markdown(path: Path, device: str, rows: Sequence[Row], *, complete: bool) -> None:
    from benchmark.io.provenance import device_name

    state = "" if complete else " (incomplete: the check was still running)"
    path.write_text(f"Device: {device_name(device)}{state}\n\n{table(rows)}\n")


def main(argv: Sequence[str]) -> int:
    """Exit status 0 when every row passed (or there is no CUDA to check), 1 otherwise."""
    args = parse(argv)
    why_not = _cuda_line()
    if why_not is not None and not args.allow_cpu:
        print(why_not)
        return 0
    device = Device("cpu" if why_not is not None else "cuda")
    scratch = args.work or Path(tempfile.mkdtemp(prefix="editmeter-gpu-check-"))
    rows: list[Row] = []
    started = time.perf_counter()
    try:
        steps = plan(args, device, scratch)
        for i, step in enumerate(steps, 1):
            rows.append(step())
            r = rows[-1]
            print(f"[gpu-check] {i}/{len(steps)} {r.component}: {'PASS' if r.ok else 'FAIL'} "
                  f"{r.reason} ({_num(r.seconds_per_query, '.2f')} s/query)", flush=True)
            if args.markdown:  # rewritten after every row, so a stopped check still leaves its table so far
                _write_markdown(args.markdown, device.name, rows, complete=i == len(steps))
    finally:
        if args.work is None:
            shutil.rmtree(scratch, ignore_errors=True)
    from benchmark.io.provenance import device_name

    out = table(rows)
    print(f"\n{device_name(device.name)}; {time.perf_counter() - started:.0f} s\n{out}")
    failed = sum(not r.ok for r in rows)
    print(f"[gpu-check] {len(rows) - failed} passed, {failed} failed")
    return 1 if failed else 0
