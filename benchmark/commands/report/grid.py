"""The image grid's data: one row per query (source | ground truth | each run's edit with its per-query scores),
written as small chunk files so the page loads only what it shows.

Queries are ordered by (edit type, object class, id): a type filter, or a type and class filter, is one contiguous
range, and a class filter is at most one range per type, so a filtered page reads one or two chunks. The page finds
the ranges in a small index (`ranges`: type, class, first position, count). Within that order the turns of a
multi-turn session (MagicBrush's, whose turns share type and class) follow one another by turn, each row labelled
with its session and turn (`se`, `tu`), so a session reads down the grid turn after turn; each run's column says
its protocol, so a multi_turn column shows each turn edited from the cell above it.

Each cell says what is known about that edit: `ok` with one score vector per metric set it was scored with,
`failed` with the reason, `excluded`, or `missing`; a score row whose edit changed or vanished since it was
scored (its recorded sha256 differs from the file's now) is marked stale, never shown as current.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from benchmark.commands.report.collect import RunData, dumps
from benchmark.commands.report.thumbs import thumb_rel
from benchmark.io.console import shorten
from benchmark.io.turns import protocol_of

FAILURES_SHOWN = 200  # per run, in the failure gallery (the count and the reasons cover all of them)


@dataclass
class GridData:
    """One query set's grid: page metadata, the rows (written as chunks) and the thumbnails they need."""

    meta: dict[str, Any]
    rows: list[dict[str, Any]]
    thumbs: list[tuple[str, str]] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)


def href(path: Path, out: Path) -> str:
    """A relative link from the report folder to `path` (the report links full-size images, never copies them)."""
    rel = os.path.relpath(os.path.abspath(path), os.path.abspath(out))
    return "/".join(quote(part) for part in rel.split(os.sep))


def round_sig(values: Any):
    """`values` (a float array) to 4 significant digits as an object array, None where not finite (for JSON)."""
    import numpy as np

    x = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(x) & (x != 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(finite, 10.0 ** (3 - np.floor(np.log10(np.abs(np.where(finite, x, 1.0))))), 1.0)
        rounded = np.where(finite, np.round(x * scale) / scale, x)
    out = rounded.astype(object)
    out[~np.isfinite(rounded)] = None
    return out


def _edit_shas(run: RunData) -> dict[str, str]:
    """query id -> sha256 of its edit PNG now (stat-cached), for every edit file of the run."""
    from benchmark.io.filehash import digests

    folder = run.path / "edits"
    if not folder.is_dir():
        return {}
    files = [(e.name, e.stat()) for e in os.scandir(folder) if e.name.endswith(".png") and e.is_file()]
    return {name[:-4]: sha for name, sha in digests(folder, files).items()}


def build_grid(key: str, queryset: str, qhash: str, runs: list[RunData], qs: Any, qs_note: str,
               out: Path, chunk_size: int) -> GridData:
    """The grid of the runs of one query set (`qs` the loaded set, or None with `qs_note` saying why)."""
    queries: dict[str, dict[str, Any]] = {}
    src_sha: dict[str, str] = {}
    thumbs: list[tuple[str, str]] = []
    if qs is not None:
        from benchmark.querysets.io import file_digests

        src_sha = file_digests(qs.root, qs.queries, qs.meta)
        root_href = href(qs.root, out)
        for q in qs.queries:
            row = {"id": q.id, "ty": q.edit_type, "cl": q.object_class, "in": q.instruction,
                   "cap": q.target_caption, "src": None, "gt": None}
            if q.session is not None:
                row |= {"se": q.session, "tu": q.turn}
            for slot, rel in (("src", q.image), ("gt", q.target_image)):
                if rel:
                    sha = src_sha[rel]
                    row[slot] = [thumb_rel(sha), f"{root_href}/{quote(rel)}"]
                    thumbs.append((sha, os.path.join(qs.root, rel)))
            queries[q.id] = row
    else:
        for run in runs:
            for qid, _image, etype, oclass, _ex in run.index_rows:
                queries.setdefault(qid, {"id": qid, "ty": etype or "", "cl": oclass or "", "in": "", "cap": "",
                                         "src": None, "gt": None})
    order = sorted(queries, key=lambda i: (queries[i]["ty"], queries[i]["cl"], queries[i].get("se", i),
                                           queries[i].get("tu", 0), i))
    rows = [queries[i] for i in order]
    for row in rows:
        row["c"] = []
    failures: list[dict[str, Any]] = []
    run_meta = []
    for run in runs:
        shas = _edit_shas(run)
        edits_href = href(run.path / "edits", out) + "/"
        sc_pos = [dict(zip(s.rows["query_id"], range(len(s.rows)), strict=True)) for s in run.scorings]
        sc_status = [s.rows["status"].to_numpy() for s in run.scorings]
        sc_reason = [s.rows["reason"].fillna("").to_numpy() for s in run.scorings]
        sc_sha = [s.rows["edit_sha256"].fillna("").to_numpy() for s in run.scorings]
        sc_vals = [round_sig(s.rows.reindex(columns=s.columns).to_numpy(dtype="float64", na_value=float("nan")))
                   for s in run.scorings]
        edits_dir = os.path.join(run.path, "edits")
        reasons: Counter[str] = Counter()
        fails: list[dict[str, Any]] = []
        counts: Counter[str] = Counter()
        for row in rows:
            qid = row["id"]
            now = shas.get(qid)
            cell: dict[str, Any] = {}
            vals, stale, status, reason = [], [], "", ""
            for k in range(len(run.scorings)):
                p = sc_pos[k].get(qid)
                if p is None:
                    vals.append(None)
                    stale.append(0)
                    continue
                st = sc_status[k][p]
                if st == "failed" and status != "failed":
                    status, reason = "failed", str(sc_reason[k][p])
                elif st == "excluded" and not status:
                    status, reason = "excluded", str(sc_reason[k][p])
                if st == "ok":
                    vals.append(sc_vals[k][p].tolist())
                    stale.append(0 if now == sc_sha[k][p] else 1)
                else:
                    vals.append(None)
                    stale.append(0)
            rec = run.records.get(qid)
            if status != "failed" and now is None and rec is not None and rec.get("status") == "failed":
                status, reason = "failed", str(rec.get("reason") or "")
            if status != "failed" and now is not None:
                status = "ok" if any(v is not None for v in vals) else (status or "not scored")
            elif not status:
                status = "missing"
            cell["s"] = status
            if reason:
                cell["r"] = reason
            if now is not None:
                cell["t"] = thumb_rel(now)
                thumbs.append((now, os.path.join(edits_dir, qid + ".png")))  # strings: 300k Paths cost seconds
            if any(v is not None for v in vals):
                cell["v"] = vals
            if any(stale):
                cell["x"] = stale
            row["c"].append(cell)
            counts[status] += 1
            if status == "failed":
                reasons[shorten(reason.split("\n")[0])] += 1
                if len(fails) < FAILURES_SHOWN:
                    fails.append({"id": qid, "r": reason, "e": (rec or {}).get("error_type", ""),
                                  "tb": run.tracebacks.get(qid, ""), "src": row["src"], "t": cell.get("t")})
        run_meta.append({"label": run.label, "key": run.key, "editor": run.meta["editor"],
                         "sig": run.meta["editor_sig"], "kind": run.meta["prompt_kind"], "edits": edits_href,
                         "protocol": protocol_of(run.meta),
                         "scorings": [{"set": s.metric_set, "sig": s.sig, "cols": s.columns} for s in run.scorings],
                         "counts": dict(counts), "notes": run.notes})
        failures.append({"run": run.label, "key": run.key, "n": counts["failed"],
                         "reasons": reasons.most_common(10), "shown": fails,
                         "log": href(run.path / "failures.log", out) if (run.path / "failures.log").is_file() else ""})
    types = sorted({r["ty"] for r in rows})
    classes = sorted({r["cl"] for r in rows})
    ranges: list[list[int]] = []
    tix, cix = {t: i for i, t in enumerate(types)}, {c: i for i, c in enumerate(classes)}
    for pos, row in enumerate(rows):
        t, c = tix[row["ty"]], cix[row["cl"]]
        if ranges and ranges[-1][0] == t and ranges[-1][1] == c:
            ranges[-1][3] += 1
        else:
            ranges.append([t, c, pos, 1])
    meta = {"key": key, "queryset": queryset, "hash": qhash, "note": qs_note, "n": len(rows),
            "has_gt": any(r["gt"] for r in rows), "runs": run_meta, "types": types, "classes": classes,
            "ranges": ranges, "chunk": chunk_size, "n_chunks": math.ceil(len(rows) / chunk_size) if rows else 0}
    return GridData(meta, rows, thumbs, failures)


def drop_failed_thumbs(grid: GridData, failed: dict[str, str]) -> None:
    """Replace links to thumbnails that could not be made by the reason (the page must never load a missing file)."""
    if not failed:
        return
    bad = {thumb_rel(sha): why for sha, why in failed.items()}
    for row in grid.rows:
        for slot in ("src", "gt"):
            if row[slot] and row[slot][0] in bad:
                row[slot] = [None, row[slot][1], bad[row[slot][0]]]
        for cell in row["c"]:
            if cell.get("t") in bad:
                cell["tr"] = "unreadable image: " + bad[cell.pop("t")]
    for f in grid.failures:
        for item in f["shown"]:
            if item.get("t") in bad:
                item["t"] = None
            if item.get("src") and item["src"][0] in bad:
                item["src"] = None


def write_chunks(grid: GridData, folder: Path) -> int:
    """Write the rows as `chunk-<n>.js` files (each calls `EM.chunk(key, n, rows)`); returns bytes written."""
    folder.mkdir(parents=True, exist_ok=True)
    size = grid.meta["chunk"]
    total = 0
    for n in range(grid.meta["n_chunks"]):
        text = f"EM.chunk({dumps(grid.meta['key'])},{n},{dumps(grid.rows[n * size:(n + 1) * size])});\n"
        (folder / f"chunk-{n:05d}.js").write_text(text, encoding="utf-8")
        total += len(text)
    return total
