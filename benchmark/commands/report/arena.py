"""The report's arena section: each `ratings.json` that `editmeter arena` wrote under `<results>/arena/<query set>/`
(docs/arena.md), drawn as written: the ratings with their 95% intervals (a bar per editor), the pairs (battles,
consistency, failed calls) and the win-rate matrix as a heatmap (hover a cell for its battles). A file that cannot
be trusted gets a visible note naming it, never a guess."""

from __future__ import annotations

import math
from html import escape
from pathlib import Path
from typing import Any

EDITOR_KEYS = ("editor", "rating", "ci_low", "ci_high", "battles", "wins", "ties", "losses", "failed_calls")
PAIR_KEYS = ("a", "b", "battles", "wins_first", "wins_second", "ties", "consistent", "with_failed_call")


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def read_arenas(results: Path, queryset: str | None = None) -> tuple[list[tuple[Path, dict[str, Any]]], list[str]]:
    """Every readable `ratings.json` under `<results>/arena/*/` (of `queryset` when given), and a note for each
    one that is not."""
    from benchmark.metrics.arena.tables import ArenaError, read_ratings

    out, notes = [], []
    for path in sorted((results / "arena").glob("*/ratings.json")):
        try:
            data = read_ratings(path)
        except ArenaError as err:
            notes.append(f"{err}; not shown")
            continue
        ok = (isinstance(data, dict) and isinstance(data.get("editors"), list) and isinstance(data.get("pairs"), list)
              and all(isinstance(e, dict) and isinstance(e.get("editor"), str)
                      and all(_number(e.get(k)) for k in EDITOR_KEYS[1:]) for e in data["editors"])
              and all(isinstance(p, dict) and all(isinstance(p.get(k), str) for k in PAIR_KEYS[:2])
                      and all(_number(p.get(k)) for k in PAIR_KEYS[2:]) for p in data["pairs"]))
        if not ok:
            notes.append(f"{path}: not a ratings.json written by `editmeter arena` (fields missing or not numbers); "
                         "not shown")
            continue
        if queryset is None or data.get("queryset") == queryset:
            out.append((path, data))
    return out, notes


def _heat(rate: float) -> str:
    """A cell colour: red (0) through white (0.5) to green (1)."""
    t = max(0.0, min(1.0, rate))
    if t >= 0.5:
        k = (t - 0.5) * 2
        return f"rgb({round(255 - 155 * k)},{round(255 - 55 * k)},{round(255 - 155 * k)})"
    k = (0.5 - t) * 2
    return f"rgb(255,{round(255 - 155 * k)},{round(255 - 155 * k)})"


def _share(k: float, n: float) -> str:
    return "–" if not n else f"{100 * k / n:.0f}%"


def _uri(path: str, out: Path | None) -> str:
    """An image's address from the report: relative to its folder when it can be, else a file URI."""
    import os

    p = Path(path)
    if out is not None:
        try:
            return escape(Path(os.path.relpath(p.resolve(), out.resolve())).as_posix())
        except ValueError:  # another drive
            pass
    return escape(p.resolve().as_uri())


SIDE = {"model_a": "A's edit", "model_b": "B's edit", "tie": "tie", None: "failed / unparsable"}


def _examples(k: int, x: str, y: str, shown: list[dict[str, Any]], out: Path | None) -> str:
    if not shown:
        return ""
    items = []
    for e in shown:
        try:
            imgs = "".join(f'<figure><img src="{_uri(str(e[key]), out)}" alt="{label}" loading="lazy">'
                           f'<figcaption>{label}</figcaption></figure>'
                           for key, label in (("source", "source"), ("a_edit", escape(x)), ("b_edit", escape(y))))
            verdict = (f"first call ({escape(x)} as A): {escape(SIDE.get(e['first_call'], '?'))}; swapped call: "
                       f"{escape(SIDE.get(e['second_call'], '?'))}; battle: "
                       f"{escape({'model_a': x, 'model_b': y}.get(e['outcome'], 'tie'))}"
                       f"{'' if e['consistent'] else ' (inconsistent)'}")
            items.append(f'<div class="battle"><p><b>{escape(str(e["query_id"]))}</b>: '
                         f'{escape(str(e.get("instruction", "")))}</p>{imgs}<p class="verdict">{verdict}</p></div>')
        except (KeyError, TypeError):
            items.append('<p class="note warn">an example battle of this pair is malformed; not shown</p>')
    return (f'<div class="arena-battles" id="arena-battles-{k}" hidden><h4>{escape(x)} vs {escape(y)}: example '
            f'battles</h4>{"".join(items)}</div>')


def _one(path: Path, d: dict[str, Any], out: Path | None = None) -> str:
    editors = d["editors"]
    lo = min(e["ci_low"] for e in editors)
    hi = max(e["ci_high"] for e in editors)
    span = max(hi - lo, 1e-9)
    rows = []
    for e in editors:
        x0, x1 = (e["ci_low"] - lo) / span * 200, (e["ci_high"] - lo) / span * 200
        xm = (e["rating"] - lo) / span * 200
        bar = (f'<svg class="ci" width="210" height="14"><line x1="{x0 + 5:.1f}" x2="{x1 + 5:.1f}" y1="7" y2="7" '
               f'stroke="#555" stroke-width="2"/><circle cx="{xm + 5:.1f}" cy="7" r="4" fill="#1f77b4"/></svg>')
        star = "*" if e.get("anchored") else ""
        warn = " (no point: rated 1000 by GenArena's fit)" if e.get("no_points") else ""
        rows.append(f'<tr><td>{escape(e["editor"])}{star}{escape(warn)}</td><td>{e["rating"]:.1f}</td>'
                    f'<td>[{e["ci_low"]:.1f}, {e["ci_high"]:.1f}]</td><td>{bar}</td><td>{e["battles"]}</td>'
                    f'<td>{e["wins"]}/{e["ties"]}/{e["losses"]}</td><td>{e["failed_calls"]}</td></tr>')
    names = [e["editor"] for e in editors]
    by_pair = {}
    for p in d["pairs"]:
        by_pair[(p["a"], p["b"])] = (p["wins_first"], p["ties"], p["wins_second"], p["battles"])
        by_pair[(p["b"], p["a"])] = (p["wins_second"], p["ties"], p["wins_first"], p["battles"])
    head = "".join(f"<th>{escape(n)}</th>" for n in names)
    examples = d.get("examples") if isinstance(d.get("examples"), dict) else {}
    panel_of, panels = {}, []
    for k, key in enumerate(sorted(examples)):
        x, _, y = key.partition("|")
        html = _examples(k, x, y, examples[key] if isinstance(examples[key], list) else [], out)
        if html:
            panel_of[(x, y)] = panel_of[(y, x)] = f"arena-battles-{k}"
            panels.append(html)
    cells = []
    for r in names:
        tds = []
        for c in names:
            w, t, lo_, n = by_pair.get((r, c), (0, 0, 0, 0))
            if r == c or not n:
                tds.append('<td class="na">–</td>')
                continue
            rate = (w + t / 2) / n
            target = f' data-battles="{panel_of[(r, c)]}"' if (r, c) in panel_of else ""
            tds.append(f'<td class="heat"{target} style="background:{_heat(rate)}" title="{escape(r)} vs {escape(c)}: '
                       f'{w} won, {t} tied, {lo_} lost of {n} battles">{rate:.2f}</td>')
        cells.append(f"<tr><th>{escape(r)}</th>{''.join(tds)}</tr>")
    pairs = "".join(
        f'<tr><td>{escape(p["a"])} vs {escape(p["b"])}</td><td>{p["battles"]}</td>'
        f'<td>{_share(p["consistent"], p["battles"])}</td>'
        f'<td>{p["wins_first"]}/{p["ties"]}/{p["wins_second"]}</td><td>{p["with_failed_call"]}</td></tr>'
        for p in d["pairs"])
    meta = (f'judge <code>{escape(str(d.get("judge", "?")))}</code> · prompt sha256 '
            f'<code>{escape(str(d.get("prompts_sha256", "?"))[:12])}</code> · {d.get("battles", "?")} battles · '
            f'{d.get("resamples", "?")} bootstrap resamples · stopped: {escape(str(d.get("stopped", "?")))}')
    return f"""<div class="arena" data-queryset="{escape(str(d.get('queryset', '')))}">
<h3>{escape(str(d.get('queryset', path.parent.name)))}</h3>
<p class="note">{meta}. Rating: the median bootstrap resample, with its 95% interval (GenArena's); * anchored.
<code>{escape(str(path))}</code></p>
<table class="lb arena-ratings"><thead><tr><th>editor</th><th>rating</th><th>95% CI</th><th></th><th>battles</th>
<th>W/T/L</th><th>failed calls</th></tr></thead><tbody>{''.join(rows)}</tbody></table>
<p class="note">Win rate of the row over the column, (wins + ties / 2) / battles; hover a cell for its battles, click
it for example battles (both edits and both calls' verdicts).</p>
<table class="lb arena-heatmap"><thead><tr><th></th>{head}</tr></thead><tbody>{''.join(cells)}</tbody></table>
{''.join(panels)}
<table class="lb arena-pairs"><thead><tr><th>pair</th><th>battles</th><th>consistent</th><th>A/T/B</th>
<th>with a failed call</th></tr></thead><tbody>{pairs}</tbody></table></div>"""


def arena_html(arenas: list[tuple[Path, dict[str, Any]]], notes: list[str], out: Path | None = None) -> str:
    note_html = "".join(f'<p class="note warn">{escape(n)}</p>' for n in notes)
    if not arenas:
        return note_html + '<p class="note">No arena yet: <code>editmeter arena queryset=NAME</code> (docs/arena.md).</p>'
    return note_html + "".join(_one(p, d, out) for p, d in arenas)
