"""`editmeter show`'s view of MagicBrush's two settings side by side, from `leaderboard_turns.csv`.

For each query set, metric set, editor family and profile whose runs include a multi-turn one, one line per editor
(and per editor setting that tells its rows apart): the single-turn figure (`all_turn`: every turn edited from the
dataset's input, all turns pooled) beside the multi-turn one (`final_turn`: each turn edited from the editor's own
previous output, the sessions' last turns), each with its signature and its coverage mark, as the MagicBrush paper
sets its two tables side by side. The columns are the script's five (L1, L2, CLIP-I, DINO, CLIP-T as the
conventional suite names them) where the metric set has them, else its per-query metrics, or `--columns`. An
editor with several rows of one protocol and the same settings (another code version) gets one line per row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmark.io.settings import PREFIX
from benchmark.io.turns import PAPER_COLUMNS, PROTOCOLS, SETTINGS
from benchmark.tables.show import (
    REWRITE_TAG,
    ColumnInfo,
    _header,
    _metric_info,
    _read,
    format_mean_se,
    format_setting,
    rewrites,
)

TURNS_FILE = "leaderboard_turns.csv"
SIDE_TITLES = {"single_turn": "single-turn (all_turn)", "multi_turn": "multi-turn (final_turn)"}
SEPARATOR = "|"


def _metrics(sinfo: dict[str, ColumnInfo], part: Any, columns: Sequence[str] | None) -> list[str]:
    """The metric columns a section shows: `columns` where they are this set's, else the script's five where the
    set has them, else its per-query metrics with a value."""
    own = [m for m, ci in sinfo.items() if not ci.summary and not ci.count and m in part]
    if columns is not None:
        return [c for c in columns if c in own]
    paper = [m for m in PAPER_COLUMNS if m in own and part[m].notna().any()]
    return paper or [m for m in own if part[m].notna().any()]


def _pair_key(row: Any, settings: Sequence[str]) -> tuple:
    """What an editor's single-turn and multi-turn rows share: its name and its settings, less the protocol."""
    return (str(row["editor"]), *[format_setting(row.get(c)) for c in settings])


def _side(row: Any | None, metrics: Sequence[str], digits: int) -> list[str]:
    if row is None:
        return ["-", *["-" for _ in metrics], "no run"]
    mark = row.get("mark")
    return [str(row["editor_sig"])[:8], *[format_mean_se(row[m], row.get(f"{m}_se", float("nan")), digits)
                                          for m in metrics],
            str(mark) if isinstance(mark, str) and mark else "complete"]


@dataclass(frozen=True)
class TurnsSection:
    """One side-by-side table: a query set, metric set, prompt kind and profile with a multi-turn run. `rows` hold
    the editor, its telling settings, then each side's cells (`side_header`: sig, metrics, coverage), single-turn
    first."""

    queryset: str
    metric_set: str
    prompt_kind: str
    profile: str
    settings: list[str]
    side_header: list[str]
    rows: list[list[str]]
    # the first metric at each turn index (`turn_<t>` rows): header ('editor', settings, 'protocol', metric @ turn
    # t, ...) and one row per run
    by_turn_header: list[str] = field(default_factory=list)
    by_turn_rows: list[list[str]] = field(default_factory=list)

    @property
    def title(self) -> str:
        return (f"queryset={self.queryset}  metrics={self.metric_set or '?'}  {self.prompt_kind}-based editors  "
                f"profile={self.profile}  MagicBrush's two settings, side by side")


def turns_sections(results: Path, queryset: str | None = None, *, columns: Sequence[str] | None = None,
                   digits: int = 3) -> list[TurnsSection]:
    """The side-by-side tables of `leaderboard_turns.csv` (none when no run of a multi-turn protocol is in it)."""
    path = results / TURNS_FILE
    if not path.is_file():
        return []
    df = _read(path)
    if not len(df) or "protocol" not in df:
        return []
    if queryset:
        df = df[df["queryset"].astype(str) == queryset]
    df = df.assign(metric_set=df["metric_set"].fillna(""))
    if "setting" in df:  # the per-turn rows (`turn_<t>`) are the breakdown below each table, not a side
        turn_df = df[df["setting"].astype(str).str.startswith("turn_")]
        df = df[df["setting"].isin(list(SETTINGS.values()))]
    else:
        turn_df = df.iloc[:0]
    info = _metric_info(results) or {}
    sections: list[TurnsSection] = []
    for (qs, mset, kind, profile), part in df.groupby(["queryset", "metric_set", "prompt_kind", "profile"], sort=True):
        if not (part["protocol"] == "multi_turn").any():
            continue  # one protocol only: the overall table above is its figure
        sinfo = {m: ci for (ms, m), ci in info.items() if ms in (mset, "") and m in part}
        metrics = _metrics(sinfo, part, columns)
        if not metrics:
            continue
        settings = [c for c in part.columns if c.startswith(PREFIX) and not c.endswith("protocol")
                    and part[c].astype(str).nunique(dropna=False) > 1]
        groups: dict[tuple, dict[str, list[Any]]] = {}
        for _, row in part.iterrows():
            groups.setdefault(_pair_key(row, settings), {p: [] for p in PROTOCOLS})[str(row["protocol"])].append(row)
        body = []
        for key in sorted(groups):
            sides = groups[key]
            pairs = ([(sides["single_turn"][0] if sides["single_turn"] else None,
                       sides["multi_turn"][0] if sides["multi_turn"] else None)]
                     if max(len(v) for v in sides.values()) == 1 else
                     [(r, None) for r in sides["single_turn"]] + [(None, r) for r in sides["multi_turn"]])
            for single, multi in pairs:
                first = single if single is not None else multi
                name = f"{first['editor']} {REWRITE_TAG}" if rewrites(first) else str(first["editor"])
                body.append([name, *key[1:], *_side(single, metrics, digits), *_side(multi, metrics, digits)])
        head, turn_body = _by_turn(turn_df, (qs, mset, kind, profile), metrics[0], sinfo, settings, digits)
        sections.append(TurnsSection(str(qs), str(mset), str(kind), str(profile), settings,
                                     ["sig", *[_header(m, sinfo) for m in metrics], "coverage"], body, head,
                                     turn_body))
    return sections


def _by_turn(turn_df: Any, group: tuple, metric: str, sinfo: dict[str, ColumnInfo], settings: Sequence[str],
             digits: int) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of `metric` at each turn index, one row per run of the section (both protocols)."""
    keys = ("queryset", "metric_set", "prompt_kind", "profile")
    part = turn_df
    for k, v in zip(keys, group, strict=True):
        part = part[part[k] == v]
    if not len(part) or metric not in part:
        return [], []
    turns = sorted({int(str(t)[len("turn_"):]) for t in part["setting"]})
    rows = []
    for (sig, protocol), run in part.groupby(["editor_sig", "protocol"], sort=False):
        first = run.iloc[0]
        at = {int(str(r["setting"])[len("turn_"):]): r for _, r in run.iterrows()}
        rows.append([str(first["editor"]), *[format_setting(first.get(c)) for c in settings], str(protocol),
                     str(sig)[:8], *[format_mean_se(at[t][metric], at[t].get(f"{metric}_se", float("nan")), digits)
                                     if t in at else "-" for t in turns]])
    rows.sort(key=lambda r: (r[0], *r[1:len(settings) + 1], r[len(settings) + 1] != "single_turn"))
    return ["editor", *settings, "protocol", "sig", *[f"{_header(metric, sinfo)} turn {t}" for t in turns]], rows


INTRO = (f"MagicBrush's settings ({TURNS_FILE}): {SETTINGS['single_turn']} = each turn edited from the dataset's "
         f"input, every turn averaged; {SETTINGS['multi_turn']} = each turn edited from the editor's own previous "
         "output, the sessions' last turns averaged.")


def render_turns(results: Path, queryset: str | None = None, *, columns: Sequence[str] | None = None,
                 digits: int = 3) -> str:
    """The side-by-side sections as text ('' when no run of a multi-turn protocol is in the table)."""
    lines: list[str] = []
    for sec in turns_sections(results, queryset, columns=columns, digits=digits):
        lead, span = 1 + len(sec.settings), len(sec.side_header)
        header = ["editor", *sec.settings, *sec.side_header, SEPARATOR, *sec.side_header]
        body = [[*r[:lead + span], SEPARATOR, *r[lead + span:]] for r in sec.rows]
        widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
        left = sum(widths[:lead]) + 2 * lead
        first_width = sum(widths[lead:lead + span]) + 2 * (span - 1)
        lines.append(f"\n{sec.title}")
        lines.append(f"{'':{left}}{SIDE_TITLES['single_turn']:{first_width}}  {SEPARATOR}  "
                     f"{SIDE_TITLES['multi_turn']}".rstrip())
        for cells in [header, *body]:
            lines.append("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip())
        if sec.by_turn_rows:
            widths = [max(len(r[i]) for r in [sec.by_turn_header, *sec.by_turn_rows])
                      for i in range(len(sec.by_turn_header))]
            lines.append("by turn (each turn index over the sessions that have it):")
            for cells in [sec.by_turn_header, *sec.by_turn_rows]:
                lines.append("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip())
    if lines:
        lines.insert(0, f"\n{INTRO}")
    return "\n".join(lines)
