"""`editmeter show`: a readable view of the leaderboard CSVs (overall, by edit type, by object class).

One section per query set, metric set, editor family and profile, each with its own metric columns (metadata keyed
by (metric set, column): two sets may share a column name); complete rows first, partial and stale ones after
them under their own title, every row with its mark (`PARTIAL done/total`, `FAILED n/n`, `STALE k/n`) in the
`coverage` column, always shown whatever `--columns` says. Rows of a run whose edit PNGs or score parts are newer
than the table are marked stale here too (mtime suspects; aggregation confirms by hash). An unknown `--queryset`
is a ShowError listing the sets the tables hold. Rows are sorted by the section's headline column (a suite's model-level summary such
as HATIE's Total or per-type score, else the metric set's first metric), best first, or by `--sort`. Means are
rounded to `digits` significant digits and SEs to 2; an SE below the mean's last shown digit prints as `±0`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from benchmark.io.settings import PREFIX

TABLE_FILES = {None: "leaderboard.csv", "type": "leaderboard_by_type.csv", "class": "leaderboard_by_class.csv"}
GROUP_COLUMNS = {"type": "edit_type", "class": "object_class"}
COUNT_COLUMNS = ("n_ok", "n_failed", "n_missing")
COUNT_HEADERS = {"n_ok": "n_ok", "n_failed": "fail", "n_missing": "miss"}
HEX_COLUMNS = ("editor_sig", "metric_sig", "queryset_hash", "git_sha", "metric_set")


REWRITE_TAG = "[rewrites]"
REWRITE_NOTE = (f"{REWRITE_TAG}: the editor rewrote each instruction before editing (a prompt enhancer or a pipeline "
                "of its own); its row scores the rewritten text's edits, not the instruction as given. The text of "
                "each query is in its run folder's edits.jsonl (`rewritten`).")


def rewrites(row: Any) -> bool:
    """A leaderboard row's `rewrites_instruction` as the CSV reads back (bool, or 'True' text; absent: False)."""
    return str(row.get("rewrites_instruction", False)).strip().lower() == "true"  # True, numpy's True_, 'True'


MULTI_TURN_TAG = "[multi-turn]"


def multi_turn(row: Any) -> bool:
    """A leaderboard row's `protocol` is multi_turn (absent, as in tables of runs before protocols: single_turn)."""
    return str(row.get("protocol", "") or "").strip() == "multi_turn"


def editor_cell(row: Any) -> str:
    """The editor's name, tagged `[rewrites]` when it rewrote the instructions and `[multi-turn]` when each turn of
    a session was edited from its own previous output."""
    tags = [t for t, on in ((REWRITE_TAG, rewrites(row)), (MULTI_TURN_TAG, multi_turn(row))) if on]
    return " ".join([str(row["editor"]), *tags])


class ShowError(ValueError):
    """A `show` option names something the tables do not have; the message lists what they have."""


def _sci(v: float, sig: int) -> str:
    return f"{v:.{max(sig - 1, 0)}e}"


def _fixed_decimals(v: float, sig: int) -> int:
    return max(0, sig - 1 - math.floor(math.log10(abs(v)))) if v else max(sig - 1, 0)


def format_number(v: float, sig: int, fixed: bool | None = None) -> tuple[str, float]:
    """(`v` rounded to `sig` significant digits, the value of its last shown digit). Fixed notation between 1e-3
    and 1e6, scientific outside, unless `fixed` says which."""
    a = abs(v)
    if fixed is None:
        fixed = not a or 1e-3 <= a < 1e6
    if not fixed and a:
        return _sci(v, sig), 10.0 ** (math.floor(math.log10(a)) - sig + 1)
    d = _fixed_decimals(v, sig)
    return f"{v:.{d}f}", 10.0 ** -d


def format_mean_se(v: Any, se: Any, digits: int = 3) -> str:
    """`mean±se`: the mean with `digits` significant digits, the SE with 2 in the mean's notation; an SE smaller
    than half the mean's last shown digit is `±0` (below display precision), so no `1.00±7.3e-09`."""
    if v is None or not isinstance(v, (int, float)) or math.isnan(v):
        return "nan"
    if math.isinf(v):
        return str(v)
    mean, quantum = format_number(float(v), digits)
    if se is None or not isinstance(se, (int, float)) or math.isnan(se):
        return mean
    if se < quantum / 2:
        return f"{mean}±0"
    return f"{mean}±{format_number(float(se), 2, fixed='e' not in mean)[0]}"


def format_setting(v: Any) -> str:
    """A setting cell: integers without a decimal point (a CSV column with blanks reads back as floats)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    return str(v)


def _read(path: Path):
    import pandas as pd

    # signatures and hashes are hex strings: never numbers (an all-digit one would lose its leading zeros)
    return pd.read_csv(path, keep_default_na=False, na_values=["", "nan", "NaN"], dtype={c: str for c in HEX_COLUMNS})


class ColumnInfo(NamedTuple):
    """What `show` and the report know of one leaderboard column (leaderboard_metrics.csv)."""

    higher_is_better: bool
    summary: bool = False   # a model-level column (HATIE's Total, FID), not a per-query mean
    headline: bool = False  # the column its suite's section is sorted by (EditVal's accuracy)
    count: bool = False     # a count of rows (pie's n_no_background): no better direction, never the headline


def _flag(row: Any, key: str) -> bool:
    return str(row.get(key, "")).strip().lower() == "true"


def column_info(row: Any) -> ColumnInfo:
    """One leaderboard_metrics.csv row as a ColumnInfo. Tables written before `count` existed mark a summary column
    named n_* as a count (every such column is one)."""
    summary = _flag(row, "summary")
    count = _flag(row, "count") or ("count" not in row and summary and str(row["metric"]).startswith("n_"))
    return ColumnInfo(_flag(row, "higher_is_better"), summary, _flag(row, "headline"), count)


def _metric_info(results: Path) -> dict[tuple[str, str], ColumnInfo] | None:
    """(metric_set, metric) -> ColumnInfo from leaderboard_metrics.csv, or None when it is missing. Keyed by the
    pair: two metric sets may share a column name. A file without `metric_set` (older) gives ''."""
    import pandas as pd

    path = results / "leaderboard_metrics.csv"
    if not path.is_file():
        return None
    meta = pd.read_csv(path, keep_default_na=False, dtype={"metric_set": str})
    return {(str(r.get("metric_set", "")), r["metric"]): column_info(r) for r in meta.to_dict("records")}


def _section_info(info: dict[tuple[str, str], ColumnInfo], mset: str, df) -> dict[str, ColumnInfo]:
    """metric -> ColumnInfo of one metric set's columns in `df`, in display order (a metric of an older metrics
    file without metric sets, '', belongs to every set)."""
    out: dict[str, ColumnInfo] = {}
    for (ms, m), v in info.items():
        if ms in (mset, "") and m in df and m not in out:
            out[m] = v
    return out


def _run_dir(results: Path, row) -> Path:
    """The run folder a leaderboard row comes from (runs/<queryset>-<hash[:10]>/<editor>-<editor_sig>)."""
    return results / "runs" / f"{row['queryset']}-{str(row['queryset_hash'])[:10]}" / f"{row['editor']}-{row['editor_sig']}"


def _newer_files(folder: Path, pattern: str, mtime_ns: int) -> list[Path]:
    """Files of `folder` matching `pattern` modified after `mtime_ns` (a stat each: mtime is enough to suspect)."""
    out = []
    for p in sorted(folder.glob(pattern)):
        try:
            if p.stat().st_mtime_ns > mtime_ns:
                out.append(p)
        except OSError:  # vanished meanwhile
            continue
    return out


def _stale_rows(results: Path, table: Path, df) -> dict[Any, str]:
    """Row index -> why the row may not reflect its run now: edit PNGs or score parts of its run (metric set)
    written after `table`. Aggregation checks the hashes; here the mtime is enough to suspect."""
    from benchmark.io.score_cache import SCORES_DIR
    from benchmark.stages.edit import EDITS_DIR

    written = table.stat().st_mtime_ns
    counts: dict[Path, int] = {}  # per folder: the by-type and by-class tables hold many rows per run

    def newer(folder: Path, pattern: str) -> int:
        if folder not in counts:
            counts[folder] = len(_newer_files(folder, pattern, written))
        return counts[folder]

    out: dict[Any, str] = {}
    for i, row in df.iterrows():
        run_dir = _run_dir(results, row)
        edits = newer(run_dir / EDITS_DIR, "*.png")
        parts = newer(run_dir / SCORES_DIR / str(row.get("metric_sig", "")), "part-*.parquet")
        why = [f"{edits} edit(s)" if edits else "", f"{parts} score part(s)" if parts else ""]
        if any(why):
            out[i] = f"STALE: {' and '.join(w for w in why if w)} newer than {table.name}"
    return out


def _scored_since(results: Path, table: Path, metric_sigs: set[str]) -> list[Path]:
    """Score parts of these metric signatures written after `table` (a run scored but not aggregated since)."""
    from benchmark.io.score_cache import SCORES_DIR

    written = table.stat().st_mtime_ns
    return sorted(p for sig in metric_sigs for p in (results / "runs").glob(f"*/*/{SCORES_DIR}/{sig}/part-*.parquet")
                  if p.stat().st_mtime_ns > written)


def _varying_settings(part) -> list[str]:
    """Setting columns whose values differ among one editor's rows of this section."""
    cols = [c for c in part.columns if c.startswith(PREFIX)]
    out = []
    for c in cols:
        for _, rows in part.groupby("editor", sort=False):
            if rows[c].astype(str).nunique(dropna=False) > 1:
                out.append(c)
                break
    return out


def _sorted(rows, col: str | None, descending: bool, group: str | None):
    """Rows best first by `col` (NaN last), grouped by `group` when given; ties by editor and signature."""
    import numpy as np
    import pandas as pd

    # the sort keys live in a frame of their own: adding columns to the leaderboard's (hundreds of columns once a
    # folder holds several metric sets) would make pandas warn that it is fragmented, once per section
    keys: dict[str, Any] = {group: rows[group].to_numpy()} if group else {}
    if col is not None:
        numeric = rows[col].apply(lambda x: isinstance(x, (int, float, np.number)) and not isinstance(x, bool))
        if numeric.all():
            v = rows[col].astype(float).to_numpy()
            keys.update(_nan=np.isnan(v).astype(int), _v=-v if descending else v)
        else:
            keys["_v"] = rows[col].astype(str).to_numpy()
    keys.update(editor=rows["editor"].to_numpy(), editor_sig=rows["editor_sig"].to_numpy())
    order = pd.DataFrame(keys).sort_values(list(keys), kind="stable").index
    return rows.iloc[order]


def headline_metric(sinfo: dict[str, ColumnInfo], part) -> str | None:
    """The column a section is sorted by: the suite's declared headline with a value (EditVal's accuracy), else its
    first summary metric with a value (HATIE's Total, ...), else its first metric with a value; never a count;
    None when no metric has one."""
    valued = [m for m in sinfo if part[m].notna().any() and not sinfo[m].count]
    declared = next((m for m in valued if sinfo[m].headline), None)
    return declared or next((m for m in valued if sinfo[m].summary), valued[0] if valued else None)


def leaderboard_order(part, sinfo: dict[str, ColumnInfo], group: str | None = None):
    """A section's rows in `show`'s order (the report uses it too): complete rows first, then partial and stale
    ones; each block best first by the headline metric (NaN last), grouped by `group` when given, ties by editor
    and signature. `sinfo`: metric -> ColumnInfo of the section's metric set."""
    import pandas as pd

    key = headline_metric(sinfo, part)
    descending = bool(sinfo[key][0]) if key in sinfo else False
    done = part["complete"].astype(str).str.lower() == "true"
    return pd.concat([_sorted(part[done], key, descending, group), _sorted(part[~done], key, descending, group)])


def _header(column: str, sinfo: dict[str, ColumnInfo]) -> str:
    """A column's header: a metric with its better direction (↑ / ↓), a count marked `#` (no direction)."""
    if column not in sinfo:
        return COUNT_HEADERS.get(column, column)
    if sinfo[column].count:
        return f"#{column}"
    return f"{column}{'↑' if sinfo[column].higher_is_better else '↓'}"


def _count_cell(v: Any) -> str:
    """A count as a whole number ('-' when absent)."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return "-"
    return "-" if f != f else str(int(f)) if f == int(f) else f"{f:g}"


def _apart_title(rows, stale: dict[Any, str]) -> str:
    """The title of the block of rows not comparable with the complete ones, naming what they are."""
    if not len(rows):
        return ""
    marks = rows["mark"].map(lambda m: m if isinstance(m, str) else "") if "mark" in rows else rows["editor"].map(str)
    is_stale = marks.str.contains("STALE") | rows.index.isin(list(stale))
    is_partial = marks.str.contains("PARTIAL") | ~(is_stale | (rows["complete"].astype(str).str.lower() == "true"))
    kinds = [k for k, any_ in (("partial runs", is_partial.any()), ("stale runs", is_stale.any())) if any_]
    return f"{' and '.join(kinds) or 'other runs'} (not comparable with the rows above):"


def render(results: Path, queryset: str | None = None, *, by: str | None = None, sort: str | None = None,
           columns: Sequence[str] | None = None, digits: int = 3) -> str:
    """The text of `editmeter show`. ShowError when `by`, `sort` or `columns` name something the tables lack."""
    if by not in TABLE_FILES:
        raise ShowError(f"--by {by!r}: valid values are 'type' and 'class'")
    if digits < 1:
        raise ShowError(f"--digits {digits}: want 1 or more")
    path = results / TABLE_FILES[by]
    if not path.is_file():
        return f"no leaderboard yet at {path}; run `make demo` or `make bench`"
    df = _read(path)
    info = _metric_info(results)
    if queryset:
        present = sorted(df["queryset"].astype(str).unique()) if "queryset" in df else []
        if queryset not in present:
            raise ShowError(f"--queryset {queryset!r}: no such query set in {path}; query sets there: "
                            f"{', '.join(present) if present else 'none'}")
        df = df[df["queryset"] == queryset]
    newer = _scored_since(results, path, set(df["metric_sig"]) if "metric_sig" in df else set())
    lines = ([f"NOTE: {len(newer)} score part(s) were written after {path.name} (e.g. {newer[0]}): these tables may "
              "be stale. Rebuild them: rerun that run's command with stages=[aggregate]."] if newer else [])
    stale = _stale_rows(results, path, df) if {"queryset_hash", "editor_sig"} <= set(df.columns) else {}
    if any("edit(s)" in why for why in stale.values()):
        lines.append(f"NOTE: edit PNGs were written after {path.name}: the rows of their runs are marked STALE (their "
                     "scores may be of the edits they replaced). Rerun that run's command: the score stage rescores "
                     "changed edits.")
    if info is None:  # the metric directions live there: without it no metric column can be shown
        lines.append(f"NOTE: {results / 'leaderboard_metrics.csv'} is missing, so no metric column is shown. Rebuild "
                     "the tables: rerun a run's command with stages=[aggregate].")
        info = {}
    if "complete" not in df:  # a leaderboard written before completeness was recorded: nothing is known complete
        df = df.assign(complete=False, mark="completeness unknown")
    df = df.assign(metric_set=df["metric_set"].fillna("") if "metric_set" in df else "")  # older tables lack it
    metrics_in = list(dict.fromkeys(m for _, m in info if m in df))
    settings_in = [c for c in df.columns if c.startswith(PREFIX)]
    choosable = [*COUNT_COLUMNS, *settings_in, *metrics_in]
    if columns is not None:
        unknown = [c for c in columns if c not in choosable]
        if unknown:
            raise ShowError(f"--columns: unknown column(s) {', '.join(map(repr, unknown))}; valid: {', '.join(choosable)}")
    if sort is not None and sort not in [*choosable, "editor"]:
        raise ShowError(f"--sort: unknown column {sort!r}; valid: editor, {', '.join(choosable)}")
    group = GROUP_COLUMNS.get(by or "")
    unscored = _without_scene_graphs(results, df)
    for (qs, mset, kind, profile), part in df.groupby(["queryset", "metric_set", "prompt_kind", "profile"], sort=True):
        # each metric set's own columns (the CSV holds the union of every set's columns)
        sinfo = _section_info(info, mset, part)
        own = list(sinfo)
        valued = [m for m in own if part[m].notna().any()]
        if qs in unscored:
            if unscored[qs]:  # once per query set, at its first section
                lines.append(f"\n{unscored[qs]}")
                unscored[qs] = ""
            marked = "mark" in part and part["mark"].map(lambda m: isinstance(m, str) and bool(m.strip())).any()
            if not valued and not marked:  # a scene-graph suite's empty rows there (a run from before the refusal);
                continue                   # a failed or partial row is always shown, with its mark
        headline = headline_metric(sinfo, part)
        key = sort if sort is not None and sort in part and (sort not in metrics_in or sort in own) else headline
        shown = [*COUNT_COLUMNS, *_varying_settings(part), *own]
        if columns is not None:
            shown = [c for c in columns if c in shown]
            if not any(c in own for c in shown) and any(c in metrics_in for c in columns):
                continue  # the metrics asked for are another metric set's: this section would show none of them
            if key == headline and sort != key and key not in shown:
                # --columns hides the headline: sort by the first metric shown with a value (never by a hidden one)
                key = next((c for c in shown if c in sinfo and not sinfo[c].count and part[c].notna().any()), key)
        counted = key in sinfo and sinfo[key].count
        descending = True if counted else bool(sinfo[key][0]) if key in sinfo else key in COUNT_COLUMNS[:1]
        notes = [n for n in ("best first" if key in sinfo and not counted else "most first" if counted else "",
                             "not shown" if columns is not None and key not in shown else "") if n]
        order = f"sorted by {key}" + (f" ({', '.join(notes)})" if notes else "") if key else "sorted by editor"
        lines.append(f"\nqueryset={qs}  metrics={mset or '?'}  {kind}-based editors  profile={profile}  ({order})")
        lines += _sample_note(part)
        lines += _carried_note(part)
        if any(rewrites(r) for _, r in part.iterrows()):
            lines.append(REWRITE_NOTE)
        header = ["editor", "sig", *([group] if group else []),
                  *[_header(c, sinfo) for c in shown],
                  "coverage"]
        fresh = ~part.index.isin(list(stale))
        done = (part["complete"].astype(str).str.lower() == "true") & fresh
        body: list[list[str] | str] = []
        for rows, title in ((part[done], None), (part[~done], _apart_title(part[~done], stale))):
            if not len(rows):
                continue
            if title:
                body.append(title)
            for i, r in _sorted(rows, key, descending, group).iterrows():
                mark = r.get("mark")
                cells = [editor_cell(r), str(r["editor_sig"])[:8], *([str(r[group])] if group else [])]
                for c in shown:
                    if c in sinfo and sinfo[c].count:
                        cells.append(_count_cell(r[c]))
                    elif c in sinfo:
                        cells.append(format_mean_se(r[c], r.get(f"{c}_se", float("nan")), digits))
                    elif c in COUNT_COLUMNS:
                        cells.append(str(r.get(c, "?")))
                    else:
                        cells.append(format_setting(r[c]))
                marks = [str(mark) if isinstance(mark, str) and mark else "", stale.get(i, "")]
                left_out = r.get("excluded")  # queries of the set its metrics do not score for this editor, and why
                cells.append(("; ".join(m for m in marks if m) or "complete")
                             + (f" ({left_out})" if isinstance(left_out, str) and left_out else ""))
                body.append(cells)
        table = [header, *[c for c in body if isinstance(c, list)]]
        widths = [max(len(c[i]) for c in table) for i in range(len(header))]
        for cells in [header, *body]:
            lines.append(cells if isinstance(cells, str) else
                         "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip())
    if not len(df) and not lines:
        lines.append(f"{path} has no rows{f' for query set {queryset!r}' if queryset else ''}")
    return "\n".join(lines)


def _without_scene_graphs(results: Path, df: Any) -> dict[str, str]:
    """Query set -> the note that HATIE and EditVal do not apply to it, for every set of `df` whose edit types
    (leaderboard_by_type.csv) are all of the families without scene graphs (GEdit-Bench's, PIE-Bench's,
    MagicBrush's free_form)."""
    from benchmark.io.types import FREEFORM_TYPES, GEDIT_TYPES, IMGEDIT_TYPES, PIE_TYPES

    path = results / TABLE_FILES["type"]
    if "queryset" not in df or not path.is_file():
        return {}
    by_type = _read(path)
    if not {"queryset", "edit_type"} <= set(by_type.columns):
        return {}
    graphless = set(GEDIT_TYPES) | set(FREEFORM_TYPES) | set(PIE_TYPES) | set(IMGEDIT_TYPES)
    out = {}
    for qs in sorted(set(df["queryset"].astype(str))):
        types = set(by_type.loc[by_type["queryset"].astype(str) == qs, "edit_type"].astype(str))
        if types and types <= graphless:
            out[qs] = f"HATIE/EditVal do not apply to {qs} (no scene graphs)"
    return out


def _carried_note(part: Any) -> list[str]:
    """A row holding edits carried over from an earlier run of its setting (docs/results.md#carry-over) says so."""
    if "carried_from" not in part:
        return []
    out = []
    for _, row in part.iterrows():
        text = row.get("carried_from")
        if isinstance(text, str) and text:
            out.append(f"{row['editor']} {str(row['editor_sig'])[:6]}: edits carried over from {text} "
                       "(docs/results.md#carry-over)")
    return sorted(set(out))


def _sample_note(part: Any) -> list[str]:
    """A section of a sampled set (queryset.sample) says so: its rows cover the sample, not the full set."""
    if "sample_of" not in part or not part["sample_of"].notna().any():
        return []
    row = part[part["sample_of"].notna()].iloc[0]
    seed = row.get("sample_seed")
    seed_note = f", seed {int(seed)}" if seed == seed and seed is not None else ""
    return [f"a stratified sample: n_total counts the sample's queries, of a full set of {int(row['sample_of'])}"
            f"{seed_note}; its standard errors include the sampling (docs/querysets.md#samples)"]
