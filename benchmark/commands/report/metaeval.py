"""The report's meta-evaluation section: every table `editmeter metaeval` wrote under `<results>/metaeval/`
(`<test>-<query set>-<key>.csv` with its `.json` provenance sidecar), shown as written, each statistic with its
interval. What is read is checked; a file that cannot be trusted gets a visible note naming it, never a guess."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

from benchmark.commands.report.html import fmt

REQUIRED = ("metric", "test", "queryset")
# columns that describe the table rather than a metric (benchmark.commands.metaeval.table.PROVENANCE, plus the row's own)
PROVENANCE = ("test", "queryset", "queryset_hash", "profile", "resamples", "confidence", "seed", "inputs_sha256",
              "git_sha", "created_at", "note")
ROW_INFO = ("metric", "higher_is_better", "metric_sig")
SHOWN_PROV = ("queryset_hash", "profile", "resamples", "confidence", "seed", "git_sha", "created_at",
              "inputs_sha256")


@dataclass
class MetaTable:
    """One meta-evaluation CSV: its rows (None when unreadable), provenance, statistic and count columns, notes."""

    path: Path
    rows: Any = None
    prov: dict[str, Any] = field(default_factory=dict)
    sidecar: dict[str, Any] | None = None
    stats: list[str] = field(default_factory=list)
    counts: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _numeric(series: Any) -> tuple[Any, list[str]]:
    """The column as floats, and the values that are not numbers (kept out: shown as invalid, never guessed)."""
    import pandas as pd

    num = pd.to_numeric(series, errors="coerce").astype(float)  # all-integer columns too: one type to render
    bad = [str(v) for v, n in zip(series, num, strict=True) if pd.isna(n) and not pd.isna(v) and str(v).strip()]
    return num, bad


def read_table(path: Path) -> MetaTable:
    """One CSV and its sidecar, validated: unreadable or malformed input leaves `rows` None and says why."""
    import pandas as pd

    t = MetaTable(path)
    try:
        df = pd.read_csv(path, keep_default_na=False, na_values=["", "nan", "NaN"], dtype=str)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, OSError) as err:
        t.notes.append(f"{path}: not a readable CSV ({type(err).__name__}: {str(err).strip()[:200]}); not shown")
        return t
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        t.notes.append(f"{path}: missing column(s) {', '.join(missing)}: not a table written by `editmeter "
                       "metaeval`; not shown")
        return t
    if not len(df):
        t.notes.append(f"{path}: no rows; not shown")
        return t
    for c in PROVENANCE:
        if c in df:
            values = df[c].dropna().unique()
            if len(values) > 1:
                t.notes.append(f"{path}: column {c} differs between rows ({', '.join(map(str, values[:3]))}): "
                               "the file was edited or mixed; its provenance is not trusted")
            t.prov[c] = values[0] if len(values) else ""
    cols = [c for c in df.columns if c not in PROVENANCE and c not in ROW_INFO]
    t.stats = [c for c in cols if f"{c}_lo" in df and f"{c}_hi" in df]
    bounds = {f"{s}_{e}" for s in t.stats for e in ("lo", "hi")}
    t.counts = [c for c in cols if c not in t.stats and c not in bounds]
    for c in [*t.stats, *bounds]:
        num, bad = _numeric(df[c])
        if bad:
            t.notes.append(f"{path}: column {c} holds non-numbers ({', '.join(bad[:3])}): shown as 'invalid'")
        if bad:
            num[df[c].isin(bad)] = math.inf  # inf marks 'invalid' for the renderer (a statistic is never inf)
        df[c] = num
    t.rows = df
    _read_sidecar(t)
    return t


def _read_sidecar(t: MetaTable) -> None:
    side = t.path.with_suffix(".json")
    if not side.is_file():
        t.notes.append(f"{side} is missing: the provenance shown is the CSV's own columns only (inputs, versions "
                       "and options unknown)")
        return
    try:
        obj = json.loads(side.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, OSError) as err:
        t.notes.append(f"{side}: not readable JSON ({type(err).__name__}: {err}); provenance from the CSV only")
        return
    if not isinstance(obj, dict):
        t.notes.append(f"{side}: not a JSON object; provenance from the CSV only")
        return
    for key in ("test", "queryset", "queryset_hash", "inputs_sha256", "seed", "resamples"):
        if key in obj and key in t.prov and str(obj[key]) != str(t.prov[key]):
            t.notes.append(f"{side}: {key}={obj[key]!r} but the CSV says {t.prov[key]!r}: the two files do not "
                           "belong together; provenance not trusted")
            break
    t.sidecar = obj


def read_metaeval(results: Path, queryset: str | None = None) -> tuple[list[MetaTable], list[str]]:
    """Every table under `<results>/metaeval/` (the work/ folder of scored candidates is not a table)."""
    folder = results / "metaeval"
    if not folder.is_dir():
        return [], []
    tables = [read_table(p) for p in sorted(folder.glob("*.csv"))]
    if queryset:
        tables = [t for t in tables if t.rows is None or str(t.prov.get("queryset")) == queryset]
    return tables, []


def _cell(row: Any, stat: str) -> str:
    v, lo, hi = (row[stat], row[f"{stat}_lo"], row[f"{stat}_hi"])
    if any(isinstance(x, float) and math.isinf(x) for x in (v, lo, hi)):
        return '<td class="num invalid">invalid</td>'
    text = fmt(v)
    if isinstance(lo, float) and isinstance(hi, float) and math.isfinite(lo) and math.isfinite(hi):
        text += f" <small>[{fmt(lo)}, {fmt(hi)}]</small>"
    elif math.isfinite(float(v)):
        text += " <small>[no interval]</small>"
    return f'<td class="num">{text}</td>'


def _prov_html(t: MetaTable) -> str:
    side = t.sidecar or {}
    items = [(k, side.get(k, t.prov.get(k))) for k in SHOWN_PROV if side.get(k, t.prov.get(k)) not in (None, "")]
    inputs = side.get("inputs")
    if isinstance(inputs, dict) and inputs:
        items.append(("inputs", "; ".join(f"{Path(str(k)).name} ({str(v)[:12]})" for k, v in sorted(inputs.items()))))
    sigs = side.get("metric_sigs")
    if isinstance(sigs, dict) and sigs:
        items.append(("metric sets", ", ".join(f"{k} ({v})" for k, v in sorted(sigs.items()))))
    counts = side.get("counts")
    if isinstance(counts, dict) and counts:
        items.append(("input counts", ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))))
    options = side.get("options")
    if isinstance(options, dict) and options:
        items.append(("options", json.dumps(options, sort_keys=True)[:400]))
    versions = side.get("versions")
    if isinstance(versions, dict) and versions:
        items.append(("versions", ", ".join(f"{k} {v}" for k, v in sorted(versions.items()))))
    return '<dl class="prov-list">' + "".join(f"<dt>{escape(str(k))}</dt><dd>{escape(str(v))}</dd>"
                                              for k, v in items) + "</dl>"


def table_html(t: MetaTable) -> str:
    """One table: heading, provenance, notes, then metric x statistic with intervals and the counts."""
    notes = "".join(f'<p class="note warn">{escape(n)}</p>' for n in t.notes)
    if t.rows is None:
        return f'<h3>{escape(t.path.name)}</h3>{notes}'
    note = str(t.prov.get("note") or "")
    head = (f'<h3>{escape(str(t.prov.get("test")))} · queryset={escape(str(t.prov.get("queryset")))}</h3>'
            f'<p class="note">file: <code>{escape(t.path.name)}</code></p>'
            + (f'<p class="note warn">{escape(note)}</p>' if note else "") + notes + _prov_html(t))
    th = ("<th>metric</th>" + "".join(f"<th>{escape(s)} [interval]</th>" for s in t.stats)
          + "".join(f"<th>{escape(c)}</th>" for c in t.counts) + ("<th>metric sig</th>" if "metric_sig" in t.rows else ""))
    body = []
    for _, r in t.rows.iterrows():
        hib = str(r.get("higher_is_better", "")).lower()
        arrow = "↑" if hib == "true" else "↓" if hib == "false" else ""
        tds = f"<td>{escape(str(r['metric']))}{arrow}</td>" + "".join(_cell(r, s) for s in t.stats)
        # counts and other columns as written (a count of 13500 must not become 1.35e+04)
        tds += "".join(f'<td class="num">{escape("" if r[c] is None or r[c] != r[c] else str(r[c]))}</td>'
                       for c in t.counts)
        if "metric_sig" in t.rows:
            tds += f"<td><code>{escape(str(r['metric_sig'] if isinstance(r['metric_sig'], str) else ''))}</code></td>"
        body.append(f"<tr>{tds}</tr>")
    return (f'{head}<table class="lb metaeval"><thead><tr>{th}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table>')


def metaeval_html(tables: list[MetaTable]) -> str:
    """The section's body: every table, or a note that there is none yet."""
    if not tables:
        return ('<p class="note">No meta-evaluation tables yet (none under <code>&lt;results&gt;/metaeval/</code>). '
                "Run <code>editmeter metaeval gt-selection queryset=...</code> (or 2afc / winrate / fit-weights) "
                "to write one.</p>")
    intro = ('<p class="note">One table per <code>editmeter metaeval</code> run, as it wrote it: each statistic with '
             "its bootstrap interval (cluster bootstrap over queries) in brackets; ↑/↓ is the metric's better "
             "direction. Nothing here is recomputed.</p>")
    return intro + "\n".join(table_html(t) for t in tables)
