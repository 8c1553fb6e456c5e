"""The report's sweeps section: score-vs-setting curves (HATIE Fig. 6 style) from `<results>/leaderboard_sweeps.csv`,
drawn here as static inline SVG (no script needed). One chart per editor x varying setting x metric over all edit
types; when several settings vary, each combination of the others is its own line. Points carry error bars of
one bootstrap SE; a partial point is drawn hollow and listed with the leaderboard's own PARTIAL mark."""

from __future__ import annotations

import math
from html import escape
from pathlib import Path
from typing import Any

from benchmark.commands.report.html import fmt, short_sig

SWEEP_FILE = "leaderboard_sweeps.csv"
REQUIRED = ("queryset", "metric_set", "prompt_kind", "profile", "editor", "varying", "edit_type", "metric", "value",
            "se", "n", "complete", "mark")
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")
W, H, ML, MR, MT, MB = 440, 250, 62, 16, 14, 42


def read_sweeps(results: Path, queryset: str | None = None) -> tuple[Any, list[str]]:
    """The sweep rows (None when absent or unreadable) and notes naming what is wrong with the file."""
    import pandas as pd

    path = results / SWEEP_FILE
    if not path.is_file():
        return None, []
    try:
        df = pd.read_csv(path, keep_default_na=False, na_values=["", "nan", "NaN"],
                         dtype={"editor_sig": str, "mark": str, "edit_type": str, "varying": str})
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, OSError) as err:
        return None, [f"{path}: not a readable CSV ({type(err).__name__}: {str(err).strip()[:200]}); no curves drawn"]
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        return None, [f"{path}: missing column(s) {', '.join(missing)}: not written by this editmeter's aggregation "
                      "(rerun an aggregation to rewrite it); no curves drawn"]
    notes = []
    for c in ("value", "se", "n"):
        num = pd.to_numeric(df[c], errors="coerce")
        bad = num.isna() & df[c].notna()
        if bad.any():
            notes.append(f"{path}: column {c} holds non-numbers on line(s) "
                         f"{', '.join(str(i + 2) for i in df.index[bad][:5])}: those points are left out")
        df[c] = num
    df = df[df["value"].notna()]
    for c in ("mark", "edit_type", "varying"):
        df[c] = df[c].fillna("").astype(str)
    if queryset:
        df = df[df["queryset"].astype(str) == queryset]
    return df, notes


def _x_value(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _label(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "unset"
    return fmt(v) if isinstance(v, float) else str(v)


def _partial(r: Any) -> str:
    """The point's mark: the leaderboard's own, or PARTIAL when the row is not complete."""
    if r["mark"]:
        return str(r["mark"])
    return "" if str(r["complete"]).lower() == "true" else "PARTIAL"


def curves(df: Any) -> list[dict[str, Any]]:
    """Chart specs: per section, editor, varying setting and metric (all edit types), lines of points
    [x label, x position, value, se, n, mark, editor_sig]."""
    out: list[dict[str, Any]] = []
    if df is None or not len(df):
        return out
    overall = df[df["edit_type"] == ""]
    keys = ["queryset", "metric_set", "prompt_kind", "profile", "editor", "varying", "metric"]
    per_type = {k: p for k, p in df[df["edit_type"] != ""].groupby(keys, sort=False)}
    for key, part in overall.groupby(keys, sort=False):
        varying = [v for v in str(key[5]).split(";") if v]
        for setting in varying:
            col = f"set.{setting}"
            if col not in part:
                continue
            others = [f"set.{v}" for v in varying if v != setting and f"set.{v}" in part]
            seeds = part["seed"].nunique() > 1 if "seed" in part else False
            xs = list(dict.fromkeys(_label(v) for v in part[col]))
            nums = {lab: _x_value(v) for lab, v in zip(map(_label, part[col]), part[col], strict=True)}
            numeric = all(nums[x] is not None for x in xs) and len(xs) > 1
            pos = {x: (nums[x] if numeric else float(i)) for i, x in enumerate(xs)}
            lines: dict[str, list] = {}
            for _, r in part.iterrows():
                name = ", ".join(f"{o[4:]}={_label(r[o])}" for o in others)
                if seeds:
                    name = ", ".join(filter(None, [name, f"seed={r['seed']}"]))
                x = _label(r[col])
                lines.setdefault(name, []).append([x, pos[x], float(r["value"]), _finite(r["se"]), _finite(r["n"]),
                                                   _partial(r), str(r.get("editor_sig", ""))])
            dup = any(len({p[0] for p in pts}) < len(pts) for pts in lines.values())
            by_type: dict[str, list] = {}
            if not others and not seeds and key in per_type:  # one line per edit type (one setting varies)
                for _, r in per_type[key].iterrows():
                    x = _label(r[col])
                    if x in pos:
                        by_type.setdefault(str(r["edit_type"]), []).append(
                            [x, pos[x], float(r["value"]), _finite(r["se"]), _finite(r["n"]), _partial(r),
                             str(r.get("editor_sig", ""))])
            out.append({"section": f"queryset={key[0]} · metrics={key[1]} · {key[2]}-based editors · "
                                   f"profile={key[3]}", "metric_set": str(key[1]), "editor": key[4], "setting": setting, "metric": key[6],
                        "numeric": numeric, "xs": xs, "lines": lines, "duplicates": dup, "by_type": by_type})
    return out


def _finite(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        return [lo]
    return [lo + (hi - lo) * i / (n - 1) for i in range(n)]


def svg(spec: dict[str, Any], hib: bool | None) -> str:
    """One curve chart as an inline SVG: lines, points, SE error bars, hollow partial points, axes with labels."""
    pts = [p for pts in spec["lines"].values() for p in pts]
    lows = [p[2] - (p[3] or 0.0) for p in pts]
    highs = [p[2] + (p[3] or 0.0) for p in pts]
    y0, y1 = min(lows), max(highs)
    pad = (y1 - y0) * 0.08 or max(abs(y0) * 0.05, 1e-3)
    y0, y1 = y0 - pad, y1 + pad
    x0, x1 = min(p[1] for p in pts), max(p[1] for p in pts)
    xpad = (x1 - x0) * 0.06 or 1.0
    x0, x1 = x0 - xpad, x1 + xpad

    def sx(x: float) -> float:
        return ML + (x - x0) / (x1 - x0) * (W - ML - MR)

    def sy(y: float) -> float:
        return MT + (y1 - y) / (y1 - y0) * (H - MT - MB)

    parts = [f'<svg class="sweep" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" '
             f'aria-label="{escape(spec["metric"])} vs {escape(spec["setting"])}">',
             f'<line class="axis" x1="{ML}" y1="{H - MB}" x2="{W - MR}" y2="{H - MB}"/>',
             f'<line class="axis" x1="{ML}" y1="{MT}" x2="{ML}" y2="{H - MB}"/>']
    for t in _ticks(y0, y1):
        parts.append(f'<line class="grid" x1="{ML}" y1="{sy(t):.1f}" x2="{W - MR}" y2="{sy(t):.1f}"/>'
                     f'<text class="tick" x="{ML - 4}" y="{sy(t) + 3:.1f}" text-anchor="end">{escape(fmt(t))}</text>')
    seen: dict[str, float] = {}
    for p in pts:
        seen.setdefault(p[0], p[1])
    for label, x in seen.items():
        parts.append(f'<text class="tick" x="{sx(x):.1f}" y="{H - MB + 14}" text-anchor="middle">{escape(label)}</text>')
    arrow = "" if hib is None else (" ↑" if hib else " ↓")
    parts.append(f'<text class="axlabel" x="{(ML + W - MR) / 2:.0f}" y="{H - 6}" text-anchor="middle">'
                 f'{escape(spec["setting"])}</text>')
    parts.append(f'<text class="axlabel" transform="rotate(-90)" x="{-(MT + H - MB) / 2:.0f}" y="14" '
                 f'text-anchor="middle">{escape(spec["metric"])}{arrow}</text>')
    for i, (name, line) in enumerate(spec["lines"].items()):
        color = COLORS[i % len(COLORS)]
        ordered = sorted(line, key=lambda p: p[1])
        path = " ".join(f"{sx(p[1]):.1f},{sy(p[2]):.1f}" for p in ordered)
        parts.append(f'<g class="series" data-name="{escape(name)}"><polyline points="{path}" fill="none" '
                     f'stroke="{color}" stroke-width="1.5"/>')
        for p in ordered:
            cx, cy = sx(p[1]), sy(p[2])
            if p[3] is not None:
                ya, yb = sy(p[2] - p[3]), sy(p[2] + p[3])
                parts.append(f'<line class="err" x1="{cx:.1f}" y1="{ya:.1f}" x2="{cx:.1f}" y2="{yb:.1f}" '
                             f'stroke="{color}"/><line x1="{cx - 4:.1f}" y1="{ya:.1f}" x2="{cx + 4:.1f}" y2="{ya:.1f}" '
                             f'stroke="{color}"/><line x1="{cx - 4:.1f}" y1="{yb:.1f}" x2="{cx + 4:.1f}" '
                             f'y2="{yb:.1f}" stroke="{color}"/>')
            title = (f"{spec['setting']}={p[0]}: {fmt(p[2], p[3])}" + (f", n={int(p[4])}" if p[4] is not None else "")
                     + (f" · {p[5]}" if p[5] else ""))
            cls = "pt partial" if p[5] else "pt"
            fill = "#fff" if p[5] else color
            parts.append(f'<circle class="{cls}" cx="{cx:.1f}" cy="{cy:.1f}" r="4" fill="{fill}" stroke="{color}" '
                         f'stroke-width="2"><title>{escape(title)}</title></circle>')
        parts.append("</g>")
    parts.append("</svg>")
    return "".join(parts)


def _table(spec: dict[str, Any]) -> str:
    rows = []
    for name, line in spec["lines"].items():
        for p in line:
            mark = f'<span class="badge partial">{escape(p[5])}</span>' if p[5] else "complete"
            rows.append(f'<tr class="{"partial" if p[5] else "complete"}"><td>{escape(name) or "—"}</td>'
                        f"<td>{escape(p[0])}</td><td class=\"num\">{escape(fmt(p[2], p[3]))}</td>"
                        f"<td>{'' if p[4] is None else int(p[4])}</td><td>{mark}</td>"
                        f"<td><code>{escape(short_sig(p[6]))}</code></td></tr>")
    return (f'<table class="lb sweep-points"><thead><tr><th>line</th><th>{escape(spec["setting"])}</th>'
            f'<th>{escape(spec["metric"])} (mean±SE)</th><th>n</th><th>coverage</th><th>sig</th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>')


def _per_type(spec: dict[str, Any], hib: dict[tuple[str, str], bool]) -> str:
    """The same curve per edit type (one line each), folded: only when a single setting varies."""
    if not spec["by_type"]:
        return ""
    sub = spec | {"lines": spec["by_type"], "by_type": {}}
    legend = "".join(f'<span class="legend-item"><span class="swatch" style="background:{COLORS[i % len(COLORS)]}">'
                     f"</span>{escape(name)}</span>" for i, name in enumerate(sub["lines"]))
    return (f'<details class="per-type"><summary>per edit type ({len(sub["lines"])} lines)</summary>'
            f'{svg(sub, hib.get((spec["metric_set"], spec["metric"])))}<div class="legend">{legend}</div>'
            f"{_table(sub)}</details>")


def sweeps_html(df: Any, notes: list[str], metrics: Any = None, stale: bool = False) -> str:
    """The section's body: one figure per curve (chart, legend, the points as a table), or a note."""
    out = [f'<p class="note warn">{escape(n)}</p>' for n in notes]
    if df is None and not notes:
        out.append(f'<p class="note">No sweeps: {SWEEP_FILE} is absent (it is written by every aggregation).</p>')
        return "\n".join(out)
    specs = curves(df)
    if not specs:
        if df is not None:
            out.append('<p class="note">No sweeps: no editor has runs that differ in settings (run a Hydra multirun '
                       "such as <code>editor.guidance_scale=5,7.5,10</code>).</p>")
        return "\n".join(out)
    if stale:
        out.append('<p class="note warn"><span class="badge stale">STALE</span> the sweep table was written with the '
                   "leaderboards, which are older than some score parts (see the note at the Leaderboards).</p>")
    out.append('<p class="note">Mean ± one bootstrap SE per setting over all edit types (per-type points are in '
               f"<code>{SWEEP_FILE}</code>). A hollow point is PARTIAL: its run does not cover the whole query set, "
               "so it is not comparable with the full points.</p>")
    hib = {}
    if metrics is not None and len(metrics):
        hib = {(str(r["metric_set"]), str(r["metric"])): str(r["higher_is_better"]).lower() == "true"
               for _, r in metrics.iterrows()}
    section = None
    for spec in specs:
        if spec["section"] != section:
            section = spec["section"]
            out.append(f"<h3>{escape(section)}</h3>")
        legend = "".join(f'<span class="legend-item"><span class="swatch" style="background:'
                         f'{COLORS[i % len(COLORS)]}"></span>{escape(name)}</span>'
                         for i, name in enumerate(spec["lines"]) if name)
        dup = ('<p class="note warn">Several runs share a setting on one line (different editor signatures with '
               "equal settings): their points are drawn as they are, not averaged.</p>") if spec["duplicates"] else ""
        x_note = "" if spec["numeric"] else " (categories, evenly spaced)"
        out.append(f'<figure class="sweep-fig"><figcaption><b>{escape(spec["editor"])}</b>: '
                   f'{escape(spec["metric"])} vs {escape(spec["setting"])}{x_note}</figcaption>'
                   f'{svg(spec, hib.get((spec["metric_set"], spec["metric"])))}<div class="legend">{legend}</div>{dup}'
                   f"<details><summary>points</summary>{_table(spec)}</details>{_per_type(spec, hib)}</figure>")
    return "\n".join(out)
