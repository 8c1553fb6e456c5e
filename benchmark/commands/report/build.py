"""`editmeter report`: one static folder that opens offline from file:// (no server, no CDN).

    editmeter report [--results DIR] [--out DIR] [--queryset NAME] [--page-size N]

Layout of the folder:

    index.html                 the page: leaderboards, criteria, comparison and provenance as HTML
    assets/report.css, report.js   the page's own style and script (no third-party code)
    data/meta.js               chart specs, grid index and per-run metadata (`EM.meta = ...`)
    data/failures.js           the failure gallery (`EM.failures = ...`)
    data/grid/<set>/chunk-<n>.js   grid rows, page-size queries per file, loaded on demand
    thumbs/<xx>/<sha>.jpg      thumbnails, named by their image's sha256 (reused by the next build)

Data files are scripts, not JSON fetched at run time: Chromium blocks fetch() of file:// URLs. Full-size images
are linked with relative paths into the results folder and the query set (not copied), so the report stays small;
moving the report folder away from them breaks only the full-size links, not the page or its thumbnails.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from html import escape
from pathlib import Path
from typing import Any

from benchmark.commands.report.arena import arena_html, read_arenas
from benchmark.commands.report.collect import dumps, read_leaderboards, read_runs, resolve_queryset
from benchmark.commands.report.grid import build_grid, drop_failed_thumbs, write_chunks
from benchmark.commands.report.html import (
    chart_specs,
    comparison_html,
    criteria_html,
    leaderboards_html,
    provenance_html,
    turns_html,
)
from benchmark.commands.report.metaeval import metaeval_html, read_metaeval
from benchmark.commands.report.sweeps import read_sweeps, sweeps_html
from benchmark.commands.report.thumbs import ensure_thumbnails
from benchmark.tables.show_turns import INTRO as TURNS_INTRO
from benchmark.tables.show_turns import turns_sections

ASSETS = Path(__file__).parent / "assets"
MARKER = ".editmeter-report"  # a folder with this file was written by this command and may be rewritten
DEFAULT_PAGE_SIZE = 24


class ReportError(ValueError):
    """The report cannot be written (bad arguments or output folder); the message says why and the fix."""


def check_out(out: Path, results: Path) -> None:
    """Refuse an output folder that holds something else (the build replaces its data/ and assets/)."""
    out_r, res_r = out.resolve(), results.resolve()
    if out_r == res_r or res_r.is_relative_to(out_r):
        raise ReportError(f"--out {out} would contain the results folder {results}: pick another folder "
                          f"(default: {results / 'report'})")
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / MARKER).is_file())):
        raise ReportError(f"--out {out} exists and is not a report folder written by `editmeter report` (no {MARKER}):"
                          " pick a new or empty folder, so nothing of yours is overwritten")


def comparison(results: Path, queryset: str | None, by: str | None = "type") -> tuple[Any, str]:
    """compare_runs's DataFrame (overall rows, and per edit type / object class with `by`), or (None, why not):
    the report is still built without it, with that note."""
    try:
        from benchmark.commands.compare import compare_runs
    except ImportError as err:
        return None, f"comparison not available: benchmark.commands.compare could not be imported ({err})"
    import pandas as pd

    # pairs exist only within one query set: one comparison per set (a results folder usually holds several)
    names = [queryset] if queryset else sorted({m.parent.parent.name.rsplit("-", 1)[0]
                                               for m in (results / "runs").glob("*/*/run.json")})
    frames, notes = [], []
    for name in names:
        try:
            df = compare_runs(results, queryset=name, by=by)
        except Exception as err:  # the other sections stay useful; the failure is shown where the matrix would be
            where = f" for {name}" if len(names) > 1 else ""
            notes.append(f"comparison not available{where}: compare_runs failed ({type(err).__name__}: {err})")
            continue
        notes += [f"{name}: {n}" if len(names) > 1 else n for n in df.attrs.get("notes") or []]
        frames.append(df.assign(queryset=name))
    if not frames:
        return None, "; ".join(notes) or "comparison not available: no scored runs"
    out = pd.concat(frames, ignore_index=True)
    out.attrs["notes"] = notes
    return out, ""


def build_report(results: Path, out: Path, *, queryset: str | None = None, page_size: int = DEFAULT_PAGE_SIZE,
                 querysets: dict[str, Any] | None = None, compare: bool = True, compare_by: str | None = "type",
                 workers: int = 0, stage: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Write the report folder `out` from the results folder `results`; returns what was written and timings.

    `querysets` maps query-set names to loaded sets (default: load each through its config); a set whose content
    hash differs from the runs' is not used (the grid then shows edits and scores without sources)."""
    t0 = time.perf_counter()
    results, out = Path(results), Path(out)
    if page_size < 1:
        raise ReportError(f"--page-size {page_size}: must be at least 1")
    if not (results / "runs").is_dir() and not (results / "leaderboard.csv").is_file():
        raise ReportError(f"{results} holds no runs/ and no leaderboard.csv: nothing to report. Run `make demo` "
                          "or `make bench`, or pass --results")
    check_out(out, results)
    say = stage or (lambda _msg: None)  # one line as each stage starts: a rebuild can take a minute
    timings: dict[str, float] = {}
    say("reading the leaderboards and runs")
    lb = read_leaderboards(results, queryset)
    runs, run_notes = read_runs(results, queryset)
    timings["read"] = time.perf_counter() - t0

    t = time.perf_counter()
    say(f"image grid of {len(runs)} run folder(s)")
    grids = []
    by_set: dict[tuple[str, str], list[Any]] = {}
    for run in runs:
        by_set.setdefault((run.meta["queryset"], run.meta["queryset_hash"]), []).append(run)
    for (name, qhash), members in sorted(by_set.items()):
        qs, why = resolve_queryset(name, qhash, querysets, [r.meta for r in members])
        grids.append(build_grid(f"{name}-{qhash[:10]}", name, qhash, members, qs, why, out, page_size))
    timings["grid"] = time.perf_counter() - t

    t = time.perf_counter()
    say("thumbnails")
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("written by `editmeter report`; the next build replaces data/ and assets/\n",
                              encoding="utf-8")
    thumb_stats = ensure_thumbnails(out, (w for g in grids for w in g.thumbs), workers)
    for g in grids:
        drop_failed_thumbs(g, thumb_stats["failed"])  # type: ignore[arg-type]
    timings["thumbnails"] = time.perf_counter() - t

    t = time.perf_counter()
    if compare:
        say("comparing the runs of each query set (paired bootstrap)")
    cmp_df, cmp_note = (comparison(results, queryset, compare_by) if compare
                        else (None, "comparison skipped (--no-compare)"))
    timings["compare"] = time.perf_counter() - t

    t = time.perf_counter()
    say("writing the page")
    new = out / ".data-new"
    shutil.rmtree(new, ignore_errors=True)
    data_bytes = 0
    for g in grids:
        data_bytes += write_chunks(g, new / "grid" / g.meta["key"])
    generated = datetime.now(timezone.utc).isoformat(timespec="seconds")
    meta = {"grids": [g.meta for g in grids], "charts": chart_specs(lb), "generated": generated}
    for name, var, obj in (("meta.js", "meta", meta), ("failures.js", "failures",
                                                       [f | {"grid": g.meta["key"]} for g in grids for f in g.failures])):
        text = f"EM.{var} = {dumps(obj)};\n"
        (new / name).write_text(text, encoding="utf-8")
        data_bytes += len(text)
    old = out / "data"
    if old.exists():
        trash = out / ".data-old"
        shutil.rmtree(trash, ignore_errors=True)
        os.replace(old, trash)
        os.replace(new, old)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.replace(new, old)
    shutil.copytree(ASSETS, out / "assets", dirs_exist_ok=True)
    notes = [*run_notes, *[f"{g.meta['queryset']}: {g.meta['note']}" for g in grids if g.meta["note"]]]
    page = render_page(results, out, lb, runs, grids, cmp_df, cmp_note, notes, generated, queryset)
    tmp = out / ".index.html.tmp"
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, out / "index.html")
    timings["write"] = time.perf_counter() - t
    timings["total"] = time.perf_counter() - t0
    return {"index": out / "index.html", "runs": len(runs), "queries": sum(g.meta["n"] for g in grids),
            "thumbnails_made": thumb_stats["made"], "thumbnails_reused": thumb_stats["reused"],
            "thumbnails_failed": len(thumb_stats["failed"]), "data_bytes": data_bytes, "timings": timings,
            "comparison": cmp_note or "ok",
            "comparison_left_out": [n for n in (cmp_df.attrs.get("notes", []) if cmp_df is not None else [])
                                    if "left out, no query scored ok" in n]}


def render_page(results: Path, out: Path, lb: Any, runs: list[Any], grids: list[Any], cmp_df: Any, cmp_note: str,
                notes: list[str], generated: str, queryset: str | None = None) -> str:
    """index.html: the static sections as HTML; charts, grid and failures are drawn by assets/report.js."""
    from benchmark.io.provenance import git_sha

    note_html = "".join(f'<p class="note warn">{escape(n)}</p>' for n in notes)
    nav = "".join(f'<a href="#{k}">{escape(v)}</a>' for k, v in (
        ("leaderboards", "Leaderboards"), ("charts", "Charts"), ("criteria", "Criteria"), ("comparison", "Comparison"),
        ("sweeps", "Sweeps"), ("arena", "Arena"), ("metaeval", "Meta-evaluation"), ("grid", "Image grid"), ("failures", "Failures"),
        ("provenance", "Provenance")))
    sweep_df, sweep_notes = read_sweeps(results, queryset)
    turns = turns_html(turns_sections(results, queryset), TURNS_INTRO)
    turns_section = f'\n<h2 id="turns">Multi-turn: MagicBrush\'s two settings</h2>\n{turns}' if turns else ""
    meta_tables, _ = read_metaeval(results, queryset)
    arenas, arena_notes = read_arenas(results, queryset)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>editmeter report</title>
<link rel="stylesheet" href="assets/report.css">
</head><body>
<header><h1>editmeter report</h1><nav>{nav}</nav>
<p class="meta">results: <code>{escape(str(results.resolve()))}</code> · built {escape(generated)} by editmeter
<code>{escape(git_sha())}</code> · {len(runs)} run folder(s) · {sum(g.meta['n'] for g in grids)} queries in the grid.
Numbers are read from the leaderboard CSVs and score parts, never recomputed here; PARTIAL and STALE marks are the
leaderboard's own.</p>{note_html}</header>
<main>
<section id="leaderboards"><h2>Leaderboards</h2>
<p class="note">Mean ± bootstrap standard error per metric (hover a cell for the number of values behind it); ↑/↓
marks the better direction. Complete rows first, PARTIAL rows after them.</p>
{leaderboards_html(lb)}{turns_section}</section>
<section id="charts"><h2>Per type and per class</h2>
<div class="controls"><label>chart <select id="chart-select"></select></label></div>
<div id="chart" class="chart"></div></section>
<section id="criteria"><h2>HATIE criteria (OF / BF / OC / BC / IQ)</h2>
{criteria_html(lb)}<div id="criteria-chart" class="chart"></div></section>
<section id="comparison"><h2>Comparison matrix</h2>
{comparison_html(cmp_df, cmp_note)}</section>
<section id="sweeps"><h2>Sweeps: score vs setting</h2>
{sweeps_html(sweep_df, sweep_notes, lb.metrics, lb.stale)}</section>
<section id="arena"><h2>Arena: pairwise judging (GenArena's protocol)</h2>
{arena_html(arenas, arena_notes, out)}</section>
<section id="metaeval"><h2>Meta-evaluation</h2>
{metaeval_html(meta_tables)}</section>
<section id="grid"><h2>Image grid</h2>
<div class="controls">
<label>query set <select id="grid-set"></select></label>
<label>edit type <select id="grid-type"></select></label>
<label>class <select id="grid-class"></select></label>
<button id="grid-prev" type="button">◀ prev</button>
<span id="grid-page">page</span>
<button id="grid-next" type="button">next ▶</button>
</div>
<p id="grid-note" class="note"></p>
<div id="grid-table" class="grid-wrap"></div></section>
<section id="failures"><h2>Failures</h2><div id="failure-list"></div></section>
<section id="provenance"><h2>Provenance</h2>
{provenance_html(runs)}</section>
</main>
<script src="assets/report.js"></script>
<script src="data/meta.js"></script>
<script src="data/failures.js"></script>
</body></html>
"""


def main(argv: Sequence[str] | None = None) -> int:
    """`editmeter report`: write the HTML report; prints where it is."""
    from benchmark.io.provenance import PROJECT_ROOT

    ap = argparse.ArgumentParser(prog="editmeter report", description="Write a static HTML report (opens offline "
                                 "from file://): leaderboards, per-type / per-class charts, HATIE criteria, the "
                                 "comparison matrix, an image grid, failures and provenance.")
    ap.add_argument("--results", type=Path, default=PROJECT_ROOT / "results",
                    help="results folder (default: <checkout>/results)")
    ap.add_argument("--out", type=Path, default=None, help="report folder (default: <results>/report)")
    ap.add_argument("--queryset", default=None, help="only runs of this query set")
    ap.add_argument("--page-size", type=int, default=DEFAULT_PAGE_SIZE,
                    help=f"queries per grid page (default {DEFAULT_PAGE_SIZE})")
    ap.add_argument("--no-compare", action="store_true", help="skip the comparison matrix")
    ap.add_argument("--compare-by", choices=("none", "type", "class"), default="type",
                    help="comparison rows per edit type (default) or object class besides the overall matrix")
    ap.add_argument("--workers", type=int, default=0, help="thumbnail processes (default: CPU count, at most 8)")
    args = ap.parse_args(argv)
    out = args.out or args.results / "report"
    try:
        summary = build_report(args.results, out, queryset=args.queryset, page_size=args.page_size,
                               compare=not args.no_compare,
                               compare_by=None if args.compare_by == "none" else args.compare_by, workers=args.workers,
                               stage=lambda msg: print(f"[report] {msg} ...", file=sys.stderr, flush=True))
    except ReportError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    t = summary["timings"]
    print(f"[report] {summary['runs']} run folder(s), {summary['queries']} queries; thumbnails: "
          f"{summary['thumbnails_made']} made, {summary['thumbnails_reused']} reused, "
          f"{summary['thumbnails_failed']} unreadable; {t['total']:.1f} s")
    if summary["comparison"] != "ok":
        print(f"[report] {summary['comparison']}")
    for note in summary["comparison_left_out"]:
        print(f"[report] comparison: {note}")
    print(f"[report] open {summary['index'].resolve().as_uri()}")
    return 0
