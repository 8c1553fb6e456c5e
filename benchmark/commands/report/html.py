"""HTML of the report's static sections (leaderboards, criterion breakdown, comparison matrix, provenance) and
the chart specifications the page draws. Every value is escaped; a partial row carries its `PARTIAL a/b` mark
and a stale table a STALE banner, exactly as the leaderboard marks them."""

from __future__ import annotations

import json
import math
from html import escape
from typing import Any

from benchmark.tables.show import rewrites

CRITERIA = ("OF", "BF", "OC", "BC", "IQ")
SECTION_KEYS = ("queryset", "metric_set", "prompt_kind", "profile")
SIG_CHARS = 8  # every abbreviated signature on the page: tables, chart legends, matrices, grid, sweeps


def short_sig(sig: Any) -> str:
    """A signature as the page abbreviates it everywhere: its first SIG_CHARS characters."""
    return str(sig)[:SIG_CHARS]


def run_label(editor: Any, sig: Any) -> str:
    """`editor (sig)`: how the page names one run folder."""
    return f"{editor} ({short_sig(sig)})"


def scroll(html: str) -> str:
    """Wrap a wide table so it scrolls inside its own box instead of widening the page."""
    return f'<div class="scroll">{html}</div>'


def fmt(v: Any, se: Any = None) -> str:
    """`mean±se` with 4 significant digits (an SE of 0 or below 1e-6 of the mean prints as ±0)."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return "" if v is None else str(v)
    if not math.isfinite(f):
        return "–"
    text = f"{f + 0.0:.4g}"  # + 0.0: no "-0"
    text = "0" if text == "-0" else text
    try:
        s = float(se)
    except (TypeError, ValueError):
        return text
    if not math.isfinite(s):
        return text
    return f"{text}±{0 if s < 1e-6 * max(abs(f), 1e-12) else float(f'{s:.2g}'):g}"


def _better(metrics: Any) -> dict[tuple[str, str], bool]:
    if metrics is None:
        return {}
    return {(str(r["metric_set"]) if isinstance(r["metric_set"], str) else "", r["metric"]):
            str(r["higher_is_better"]).lower() == "true" for _, r in metrics.iterrows()}


def section_metrics(metrics: Any, metric_set: str, df: Any) -> list[tuple[str, bool]]:
    """The metric columns of one metric set present in `df`, in leaderboard_metrics.csv order, with direction."""
    return [(m, hib) for (ms, m), hib in _better(metrics).items()
            if ms == metric_set and m in df and df[m].notna().any()]


def section_info(metrics: Any, metric_set: str, df: Any) -> dict[str, Any]:
    """metric -> `benchmark.tables.show.ColumnInfo` of one metric set's columns in `df`, as `show` reads them."""
    from benchmark.tables.show import column_info

    if metrics is None:
        return {}
    out: dict[str, Any] = {}
    for _, r in metrics.iterrows():
        ms = str(r["metric_set"]) if isinstance(r["metric_set"], str) else ""
        if ms in (metric_set, "") and r["metric"] in df and r["metric"] not in out:
            out[r["metric"]] = column_info(r)
    return out


def ordered(part: Any, metrics: Any, metric_set: str, group: str | None = None) -> Any:
    """One section's rows in `editmeter show`'s order: complete first, best first by the headline metric."""
    from benchmark.tables.show import leaderboard_order

    return leaderboard_order(part, section_info(metrics, metric_set, part), group)


def sections(df: Any):
    """(section title, key, rows) per (queryset, metric set, prompt kind, profile), as `show` groups them."""
    if df is None or not len(df):
        return
    for key, part in df.groupby(list(SECTION_KEYS), sort=True):
        qs, ms, kind, profile = key
        yield f"queryset={qs} · metrics={ms or '?'} · {kind}-based editors · profile={profile}", "|".join(map(str, key)), part


def _mark_cell(r: Any) -> str:
    mark = r.get("mark") or ""
    if r.get("complete") and not mark:
        return '<td class="ok">complete</td>'
    text = str(mark) or "PARTIAL"
    # the badge's colour says the worst of the row's marks: scores of replaced edits, no edit at all, or partial
    kind = "stale" if "STALE" in text else "failed" if "FAILED" in text else "partial"
    return f'<td class="partial-mark"><span class="badge {kind}">{escape(text)}</span></td>'


def leaderboard_table(part: Any, metrics: Any, metric_set: str, group_col: str | None = None,
                      stale: bool = False) -> str:
    """One section of a leaderboard as an HTML table: complete rows first, partial rows marked."""
    cols = section_metrics(metrics, metric_set, part)
    settings = [c for c in part.columns if c.startswith("set.")]
    head = ["editor", "sig", *settings, *([group_col] if group_col else []), "n_ok", "failed", "missing", "coverage"]
    th = "".join(f"<th>{escape(h)}</th>" for h in head)
    counts = {m for m, i in section_info(metrics, metric_set, part).items() if i.count}
    th += "".join(f'<th title="{escape(m)}: a count of rows">#{escape(m)}</th>' if m in counts else
                  f'<th title="{escape(m)}: {"higher" if hib else "lower"} is better">{escape(m)}'
                  f'{"↑" if hib else "↓"}</th>' for m, hib in cols)
    body = []
    for _, r in part.iterrows():
        partial = not r.get("complete") or bool(r.get("mark"))
        rewrite = (' <span class="badge rewrites" title="the editor rewrote each instruction before editing; the '
                   'rewritten text per query is in its edits.jsonl">REWRITES INSTRUCTIONS</span>' if rewrites(r) else "")
        cells = [escape(str(r["editor"])) + rewrite, f'<code title="{escape(str(r["editor_sig"]))}">'
                 f'{escape(short_sig(r["editor_sig"]))}</code>']
        cells += [escape("" if _isnan(r[c]) else str(r[c])) for c in settings]
        if group_col:
            cells.append(escape(str(r[group_col])))
        cells += [str(r.get("n_ok", "")), str(r.get("n_failed", "")), str(r.get("n_missing", "?"))]
        tds = "".join(f"<td>{c}</td>" for c in cells) + _mark_cell(r)
        for m, _ in cols:
            n = r.get(f"{m}_n")
            title = f' title="n={int(n)}"' if n is not None and not _isnan(n) else ""
            tds += f'<td class="num"{title}>{escape(fmt(r[m], r.get(f"{m}_se")))}</td>'
        body.append(f'<tr class="{"partial" if partial else "complete"}">{tds}</tr>')
    stale_badge = '<caption><span class="badge stale">STALE: see the note above</span></caption>' if stale else ""
    return (f'<table class="lb{" stale" if stale else ""}">{stale_badge}<thead><tr>{th}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table>')


def _isnan(v: Any) -> bool:
    try:
        return v is None or (isinstance(v, float) and math.isnan(v))
    except TypeError:
        return False


def leaderboards_html(lb: Any) -> str:
    """Every leaderboard section (overall table shown, by type and by class folded)."""
    out = [f'<p class="note warn">{escape(n)}</p>' for n in lb.notes]
    overall = lb.tables.get("overall")
    if overall is None or not len(overall):
        out.append('<p class="note">No leaderboard rows.</p>')
        return "\n".join(out)
    for title, key, part in sections(overall):
        ms = part["metric_set"].iloc[0]
        out.append(f'<h3 id="lb-{escape(key)}">{escape(title)}</h3>')
        if (~part["complete"]).any():
            out.append('<p class="note">Rows marked PARTIAL do not cover the whole query set, rows marked STALE hold '
                       "scores of edits replaced since: they are not comparable with complete rows.</p>")
        out.append(scroll(leaderboard_table(ordered(part, lb.metrics, ms), lb.metrics, ms, stale=lb.stale)))
        for tkey, col, what in (("by_type", "edit_type", "by edit type"), ("by_class", "object_class", "by object class")):
            df = lb.tables.get(tkey)
            if df is None:
                continue
            sub = df
            for k, v in zip(SECTION_KEYS, key.split("|"), strict=True):
                sub = sub[sub[k].astype(str) == v]
            if len(sub):
                sub = ordered(sub, lb.metrics, ms, col)
                out.append(f"<details><summary>{escape(what)} ({len(sub)} rows)</summary>"
                           f"{scroll(leaderboard_table(sub, lb.metrics, ms, col, lb.stale))}</details>")
    return "\n".join(out)


def chart_specs(lb: Any) -> list[dict[str, Any]]:
    """Bar charts with error bars the page draws: per section, per-type and per-class charts for each metric, and
    the criterion breakdown (OF / BF / OC / BC / IQ) per editor for suites that have them."""
    specs: list[dict[str, Any]] = []
    overall = lb.tables.get("overall")
    for tkey, col in (("by_type", "edit_type"), ("by_class", "object_class")):
        df = lb.tables.get(tkey)
        if df is None:
            continue
        for title, key, part in sections(df):
            ms = part["metric_set"].iloc[0]
            groups = sorted(part[col].astype(str).unique())
            for m, hib in section_metrics(lb.metrics, ms, part):
                series = []
                for (editor, sig), rows in part.groupby(["editor", "editor_sig"], sort=False):
                    by = {str(r[col]): r for _, r in rows.iterrows()}
                    vals = [[_num(by[g][m]), _num(by[g].get(f"{m}_se")), _num(by[g].get(f"{m}_n")),
                             by[g]["mark"] or ("" if by[g]["complete"] else "PARTIAL")] if g in by else None
                            for g in groups]
                    series.append({"label": run_label(editor, sig), "v": vals})
                specs.append({"id": f"{tkey}|{key}|{m}", "section": title, "table": tkey, "metric": m, "hib": hib,
                              "groups": groups, "series": series, "stale": lb.stale})
    if overall is not None:
        for title, key, part in sections(overall):
            have = [c for c in CRITERIA if c in part and part[c].notna().any()]
            if len(have) < 2:
                continue
            series = [{"label": run_label(r["editor"], r["editor_sig"]),
                       "v": [[_num(r[c]), _num(r.get(f"{c}_se")), _num(r.get(f"{c}_n")),
                              r["mark"] or ("" if r["complete"] else "PARTIAL")] for c in have]}
                      for _, r in part.iterrows()]
            specs.append({"id": f"criteria|{key}", "section": title, "table": "criteria", "metric": "HATIE criteria",
                          "hib": True, "groups": have, "series": series, "stale": lb.stale})
    return specs


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def criteria_html(lb: Any) -> str:
    """HATIE's criterion breakdown per editor as a table (the page draws the same numbers as a chart)."""
    overall = lb.tables.get("overall")
    out = []
    for title, _key, part in sections(overall):
        have = [c for c in CRITERIA if c in part and part[c].notna().any()]
        if len(have) < 2:
            continue
        cols = have + [c for c in ("Total",) if c in part and part[c].notna().any()]
        th = "".join(f"<th>{escape(c)}↑</th>" for c in cols)
        rows = []
        for _, r in ordered(part, lb.metrics, part["metric_set"].iloc[0]).iterrows():
            partial = not r["complete"] or bool(r["mark"])
            tds = (f"<td>{escape(str(r['editor']))}</td><td><code>{escape(short_sig(r['editor_sig']))}</code></td>"
                   + _mark_cell(r) + "".join(f'<td class="num">{escape(fmt(r[c], r.get(f"{c}_se")))}</td>'
                                             for c in cols))
            rows.append(f'<tr class="{"partial" if partial else "complete"}">{tds}</tr>')
        out.append(f"<h3>{escape(title)}</h3>" + scroll(f"<table class=\"lb\"><thead><tr><th>editor</th><th>sig</th>"
                   f"<th>coverage</th>{th}</tr></thead><tbody>{''.join(rows)}</tbody></table>"))
    if not out:
        return '<p class="note">No HATIE rows (criteria OF / BF / OC / BC / IQ) in the leaderboard.</p>'
    return "\n".join(out)


def _overall(by: Any) -> bool:
    return by is None or (isinstance(by, float) and math.isnan(by)) or str(by) in ("", "all", "overall", "none", "None")


def _folder_sig(run: Any) -> str:
    """The editor signature in a run folder name `<editor>-<signature>`."""
    return str(run).rsplit("-", 1)[-1]


def _notes_html(notes: list[str]) -> str:
    """compare_runs's notes, one line each, except the many "pair not compared" ones (one per skipped pair, e.g.
    every instruction- vs description-based pair): those become one line with the list folded under it."""
    skipped = [n for n in notes if "pair not compared" in n]
    out = [f'<p class="note warn">{escape(str(n))}</p>' for n in notes if n not in skipped]
    if skipped:
        items = "".join(f"<li>{escape(n)}</li>" for n in skipped)
        out.append(f'<details class="note"><summary>{len(skipped)} pair(s) not compared (e.g. instruction- vs '
                   f"description-based editors): list</summary><ul>{items}</ul></details>")
    return "\n".join(out)


def _matrix(part: Any, hib: bool) -> str:
    """One metric's matrix: row minus column for every pair `part` holds, `n/a` for pairs it does not."""
    labels: dict[str, str] = {}
    for _, r in part.iterrows():
        labels.setdefault(str(r["run_a"]), run_label(r["editor_a"], _folder_sig(r["run_a"])))
        labels.setdefault(str(r["run_b"]), run_label(r["editor_b"], _folder_sig(r["run_b"])))
    cells: dict[tuple[str, str], str] = {}
    for _, r in part.iterrows():
        a, b = str(r["run_a"]), str(r["run_b"])
        cells[(a, b)] = _cell(r, hib, flip=False)
        cells[(b, a)] = _cell(r, hib, flip=True)
    keys = list(labels)
    th = "".join(f"<th>{escape(labels[k])}</th>" for k in keys)
    body = "".join(f"<tr><th>{escape(labels[a])}</th>"
                   + "".join(cells.get((a, b), '<td class="diag">—</td>' if a == b else "<td>n/a</td>")
                             for b in keys) + "</tr>" for a in keys)
    return scroll(f'<table class="matrix"><thead><tr><th>row − column</th>{th}</tr></thead><tbody>{body}</tbody></table>')


def comparison_html(df: Any, note: str = "") -> str:
    """The comparison matrices from `compare_runs`'s DataFrame: per query set and metric set, the matrix of its
    headline (first) metric, paired differences row minus column with the bootstrap CI, adjusted p-value and win
    counts; the set's other metrics behind a selector (the page shows one matrix at a time). Cells of pairs that
    are not complete are marked PARTIAL. Per-type / per-class rows follow in a folded table."""
    if df is None:
        return f'<p class="note warn">{escape(note or "comparison not available")}</p>'
    if not len(df):
        return '<p class="note">No pairs to compare (a comparison needs two runs of one query set and metric set).</p>'
    out = [f'<p class="note warn">{escape(note)}</p>'] if note else []
    out.append(_notes_html(list(df.attrs.get("notes") or [])))
    out.append('<p class="note">Each cell: mean paired difference <b>row − column</b> on the queries both answered, '
               "its bootstrap 95% interval, the adjusted p-value, and wins / losses / ties of the row. Green: the row "
               "is significantly better (adjusted p &lt; 0.05), red: worse.</p>")
    is_overall = df["by"].map(_overall) if "by" in df else [True] * len(df)
    top, groups = df[is_overall], df[~is_overall] if "by" in df else df.iloc[0:0]
    qs_col = ["queryset"] if "queryset" in top else []
    for gi, (key, sub) in enumerate(top.groupby([*qs_col, "metric_set"], sort=True)):
        qs_name, ms = key if qs_col else ("", key)
        where = f"queryset={escape(str(qs_name))} · " if qs_col else ""
        metrics = list(dict.fromkeys(sub["metric"].astype(str)))  # compare_runs's order: the set's own
        options, boxes = [], []
        for mi, metric in enumerate(metrics):
            part = sub[sub["metric"].astype(str) == metric]
            hib = str(part["higher_is_better"].iloc[0]).lower() == "true"
            name = f"{metric}{'↑' if hib else '↓'}"
            options.append(f'<option value="{mi}">{escape(name)}</option>')
            hidden = "" if mi == 0 else " hidden"
            boxes.append(f'<div class="cmp-matrix" data-metric="{mi}"{hidden}>{_matrix(part, hib)}</div>')
        chooser = (f'<label>metric <select class="cmp-select" data-group="cmp-{gi}">{"".join(options)}</select></label>'
                   f' <span class="note">({len(metrics)} metrics; the first is shown)</span>' if len(metrics) > 1 else
                   f"<b>{escape(metrics[0])}</b>")
        out.append(f'<h3>{where}metrics={escape(str(ms))}</h3><div class="controls">{chooser}</div>'
                   f'<div class="cmp-group" id="cmp-{gi}">{"".join(boxes)}</div>')
    if len(groups):
        cols = ["queryset", "metric_set", "metric", "by", "group", "editor_a", "editor_b", "n_shared", "diff", "ci_low",
                "ci_high", "p_adjusted", "win_rate_a", "complete"]
        cols = [c for c in cols if c in groups]
        head = "".join(f"<th>{escape(c)}</th>" for c in cols)
        rows = "".join("<tr" + ("" if _true(r.get("complete", True)) else ' class="partial"') + ">" + "".join(
            f"<td>{escape(fmt(r[c]) if isinstance(r[c], float) else str(r[c]))}</td>" for c in cols) + "</tr>"
            for _, r in groups.iterrows())
        out.append(f"<details><summary>per edit type / object class ({len(groups)} rows)</summary>"
                   + scroll(f'<table class="lb"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>')
                   + "</details>")
    return "\n".join(out)


def _true(v: Any) -> bool:
    return str(v).lower() == "true"


def _cell(r: Any, hib: bool, flip: bool) -> str:
    sign = -1.0 if flip else 1.0
    diff = sign * float(r["diff"])
    lo, hi = (-float(r["ci_high"]), -float(r["ci_low"])) if flip else (float(r["ci_low"]), float(r["ci_high"]))
    p = float(r["p_adjusted"]) if r.get("p_adjusted") is not None else float("nan")
    win, lose = (r.get("win_b"), r.get("win_a")) if flip else (r.get("win_a"), r.get("win_b"))
    cls = ""
    if math.isfinite(p) and p < 0.05 and math.isfinite(diff) and diff != 0:
        cls = "better" if (diff > 0) == hib else "worse"
    partial = not _true(r.get("complete", True))
    mark = '<span class="badge partial">PARTIAL</span> ' if partial else ""
    title = f"n_shared={r.get('n_shared')}; test={r.get('test', '')}; p={r.get('p_value')}"
    return (f'<td class="{cls}{" partial" if partial else ""}" title="{escape(title)}">{mark}<b>{escape(fmt(diff))}</b>'
            f"<br><small>[{escape(fmt(lo))}, {escape(fmt(hi))}] p={escape(fmt(p))}"
            f"<br>W/L/T {escape(str(win))}/{escape(str(lose))}/{escape(str(r.get('ties')))}</small></td>")


def provenance_html(runs: list[Any]) -> str:
    """Per run folder: where its numbers come from (git sha, query-set hash, signatures, versions, device)."""
    if not runs:
        return '<p class="note">No run folders.</p>'
    head = ("editor", "editor sig", "query set", "query-set hash", "metric sets (signature)", "profile", "seed",
            "git sha", "device", "versions", "updated", "editor info")
    rows = []
    for run in runs:
        m = run.meta
        sets = ", ".join(f"{s.metric_set or '?'} ({s.sig})" for s in run.scorings) or "not scored"
        dirty = "dirty" in m["git_sha"]
        cells = [m["editor"], m["editor_sig"], m["queryset"], m["queryset_hash"], sets, m["profile"], str(m["seed"]),
                 m["git_sha"], m["device"], ", ".join(f"{k} {v}" for k, v in sorted(m["versions"].items())),
                 str(m.get("updated_at", ""))]
        tds = "".join(f"<td><code>{escape(c)}</code></td>" if i in (1, 3, 7) else f"<td>{escape(c)}</td>"
                      for i, c in enumerate(cells)) + f"<td>{_info_list(m.get('editor_info', {}))}</td>"
        notes = "".join(f'<div class="note warn">{escape(n)}</div>' for n in run.notes)
        notes += "".join(f'<div class="note">{escape(n)}</div>' for n in _carried_lines(m.get("carried_from")))
        rows.append(f'<tr{" class=dirty" if dirty else ""}>{tds}</tr>'
                    + (f'<tr><td colspan="{len(head)}">{notes}</td></tr>' if notes else ""))
    th = "".join(f"<th>{escape(h)}</th>" for h in head)
    return scroll(f'<table class="prov"><thead><tr>{th}</tr></thead><tbody>{"".join(rows)}</tbody></table>')


def _carried_lines(carried: Any) -> list[str]:
    """run.json's `carried_from` as lines: the edits adopted from an earlier run after a verified sample."""
    if not isinstance(carried, dict):
        return []
    return [f"{e.get('edits')} edits carried over from {run}: verified {e.get('verified')} on a re-edited sample "
            f"at {e.get('git_sha')}" for run, e in sorted(carried.items()) if isinstance(e, dict)]


def _info_list(info: Any) -> str:
    """An editor's `info()` as `key: value` lines (nested keys dotted), not one wrapped line of JSON."""
    from benchmark.io.settings import flat_settings

    if not isinstance(info, dict) or not info:
        return '<span class="note">none recorded</span>'
    items = "".join(f"<dt>{escape(k)}</dt><dd>{escape(json.dumps(v) if not isinstance(v, str) else v)}</dd>"
                    for k, v in flat_settings(info).items())
    return f'<dl class="info">{items}</dl>'


def turns_html(sections: list[Any], intro: str) -> str:
    """MagicBrush's two settings side by side per editor (`benchmark.tables.show_turns.turns_sections`): one table per
    query set, metric set, prompt kind and profile with a multi-turn run; '' when there is none."""
    if not sections:
        return ""
    out = [f'<p class="note">{escape(intro)}</p>']
    for sec in sections:
        lead, span = 1 + len(sec.settings), len(sec.side_header)
        top = (f'<tr><th colspan="{lead}"></th><th colspan="{span}">single-turn (all_turn)</th>'
               f'<th colspan="{span}">multi-turn (final_turn)</th></tr>')
        head = "".join(f"<th>{escape(h)}</th>" for h in ["editor", *sec.settings, *sec.side_header, *sec.side_header])
        body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in sec.rows)
        out.append(f"<h3>{escape(sec.title)}</h3>")
        out.append(scroll(f'<table class="lb turns"><thead>{top}<tr>{head}</tr></thead><tbody>{body}</tbody></table>'))
        if sec.by_turn_rows:
            head = "".join(f"<th>{escape(h)}</th>" for h in sec.by_turn_header)
            body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>"
                           for row in sec.by_turn_rows)
            table = f'<table class="lb by-turn"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
            out.append(f"<details><summary>by turn ({len(sec.by_turn_rows)} rows)</summary>{scroll(table)}</details>")
    return "\n".join(out)
