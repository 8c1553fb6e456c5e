"""Time `editmeter report` at HATIE's scale: N queries (default 50,000) x E editors (default 6).

    python scripts/bench/bench_report.py [--queries 50000] [--editors 6] [--size 64] [--work /tmp/report-bench]

Synthesises, under --work (once; --reuse keeps a synthesised folder): a query set (one source image per 3 queries, HATIE's seven edit types, 80 classes, a
ground-truth edit for 10% of the queries), E run folders with one edit PNG per query (1% failed, with a traceback
in failures.log), score parts with four per-query metrics and their edit sha256s, and the leaderboard CSVs
(aggregation with 200 bootstrap resamples: the tables are not what is timed). Then builds the report twice, cold
(every thumbnail and file hash made) and warm (a rebuild: thumbnails and hashes reused), and prints the times and
the output size. Each invocation writes a new <work>/report-<time> with its own file-hash cache <work>/cache-<time>
(not the shared one), so the cold build hashes every file. Synthesis is not timed.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

TYPES = ("obj_add", "obj_remove", "obj_rep", "attr_chg", "obj_resize", "bg_chg", "style_chg")
CLASSES = [f"class{i:02d}" for i in range(80)]
METRICS = ("l1", "psnr", "ssim", "lpips_like")


def png_bytes(seed: int, size: int) -> bytes:
    """A small, distinct, compressible image: a flat colour with a block at a seed-dependent place."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    arr = np.empty((size, size, 3), np.uint8)
    arr[:] = rng.integers(0, 256, 3, dtype=np.uint8)
    x, y = rng.integers(0, size // 2, 2)
    arr[y:y + size // 3, x:x + size // 3] = rng.integers(0, 256, 3, dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "PNG", compress_level=1)
    return buf.getvalue()


def _write_images(job: tuple[str, list[tuple[str, int]], int]) -> list[tuple[str, str]]:
    folder, items, size = job
    out = []
    for name, seed in items:
        data = png_bytes(seed, size)
        with open(os.path.join(folder, name), "wb") as fh:
            fh.write(data)
        out.append((name, hashlib.sha256(data).hexdigest()))
    return out


def write_images(folder: Path, items: list[tuple[str, int]], size: int, pool) -> dict[str, str]:
    folder.mkdir(parents=True, exist_ok=True)
    step = 2000
    jobs = [(str(folder), items[i:i + step], size) for i in range(0, len(items), step)]
    return dict(pair for part in pool.map(_write_images, jobs) for pair in part)


def query(i: int) -> dict:
    t = TYPES[i % len(TYPES)]
    cls = CLASSES[(i * 7919) % len(CLASSES)]
    obj = {"id": "1", "name": cls}
    q = {"id": f"q{i:06d}-{t}", "image": f"images/img{i // 3:06d}.png", "image_id": f"img{i // 3:06d}", "edit_type": t,
         "instruction": f"edit {i} ({t} on a {cls})"}
    q |= {"obj_add": {"new_class": cls, "anchor": {"id": "2", "name": "table"}, "relation": "left of"},
          "obj_remove": {"target": obj}, "obj_rep": {"target": obj, "new_class": "kite"},
          "attr_chg": {"target": obj, "attribute_after": "red"}, "obj_resize": {"target": obj, "size_change": "enlarge"},
          "bg_chg": {"background": "beach"}, "style_chg": {"style": "watercolor"}}[t]
    if i % 10 == 0:
        q["target_image"] = f"targets/{q['id']}.png"
    return q


def synthesise(work: Path, n: int, editors: int, size: int) -> tuple[Path, object]:
    import numpy as np
    import pandas as pd

    from benchmark.io.score_cache import INDEX_FORMAT
    from benchmark.querysets.io import load_queryset
    from benchmark.stages.aggregate import write_leaderboards

    qroot, results = work / "queryset", work / "results"
    queries = [query(i) for i in range(n)]
    with ProcessPoolExecutor(min(4, os.cpu_count() or 1)) as pool:
        write_images(qroot / "images", [(f"img{j:06d}.png", j) for j in range((n + 2) // 3)], size, pool)
        write_images(qroot / "targets", [(f"{q['id']}.png", 10**7 + i) for i, q in enumerate(queries)
                                         if "target_image" in q], size, pool)
        (qroot / "queryset.json").write_text(json.dumps({"name": "bench", "schema_version": 1}))
        (qroot / "queries.jsonl").write_text("".join(json.dumps(q, sort_keys=True) + "\n" for q in queries))
        qs = load_queryset(qroot, name="bench")
        index_rows = [[q.id, q.image_id, q.edit_type, q.object_class, ""] for q in qs.queries]
        rng = np.random.default_rng(0)
        for e in range(editors):
            sig = f"{e:02d}" + "ab" * 5
            run = results / "runs" / f"bench-{qs.short_hash}" / f"editor{e}-{sig}"
            failed = {q.id for k, q in enumerate(qs.queries) if (k + e) % 100 == 0}
            todo = [(f"{q.id}.png", 10**8 * (e + 1) + k) for k, q in enumerate(qs.queries) if q.id not in failed]
            shas = write_images(run / "edits", todo, size, pool)
            recs, log = [], []
            for q in qs.queries:
                ok = q.id not in failed
                recs.append(json.dumps({"query_id": q.id, "status": "ok" if ok else "failed", "reason":
                                        "" if ok else "RuntimeError: out of memory", "error_type": "" if ok else
                                        "RuntimeError", "seed": 0, "seconds": 0.1, "run_id": "bench", "recovered": False}))
                if not ok:
                    log.append(f"--- 2026-01-01T00:00:00+00:00 run_id=bench query={q.id}\nTraceback (most recent "
                               "call last):\n  File \"editor.py\", line 1, in edit\nRuntimeError: out of memory\n\n")
            (run / "edits.jsonl").write_text("\n".join(recs) + "\n")
            (run / "failures.log").write_text("".join(log))
            msig = "bench0metric"
            sdir = run / "scores" / msig
            sdir.mkdir(parents=True)
            (sdir / "queries.json").write_text(json.dumps({"format": INDEX_FORMAT, "queryset": "bench",
                                                           "queryset_hash": qs.hash, "n_total": n,
                                                           "columns": ["query_id", "image_id", "edit_type",
                                                                       "object_class", "excluded"],
                                                           "rows": index_rows}))
            df = pd.DataFrame({"query_id": [q.id for q in qs.queries], "image_id": [q.image_id for q in qs.queries],
                               "edit_type": [q.edit_type for q in qs.queries],
                               "object_class": [q.object_class for q in qs.queries]})
            df["status"] = ["failed" if i in failed else "ok" for i in df["query_id"]]
            df["reason"] = ["RuntimeError: out of memory" if i in failed else "" for i in df["query_id"]]
            df["edit_sha256"] = [shas.get(f"{i}.png", "") for i in df["query_id"]]
            for m in METRICS:
                df[m] = np.where(df["status"] == "ok", rng.random(n), np.nan)
            for k, start in enumerate(range(0, n, 10000)):
                df.iloc[start:start + 10000].to_parquet(sdir / f"part-{k:019d}-1-{k}.parquet", index=False)
            metrics = {m: {"higher_is_better": m != "l1", "version": "1", "description": m} for m in METRICS}
            meta = {"queryset": "bench", "queryset_hash": qs.hash, "queryset_size": n, "editor": f"editor{e}",
                    "editor_sig": sig, "prompt_kind": "instruction", "profile": "tiny", "seed": 0, "metric_sig": msig,
                    "metrics": metrics, "metric_order": list(METRICS), "column_order": list(METRICS),
                    "suite": None, "metric_set": "basic", "git_sha": "bench", "versions": {"python": sys.version[:6]},
                    "device": "cpu", "editor_info": {"name": f"editor{e}"}, "scored": {msig: {
                        "metric_set": "basic", "metrics": metrics, "metric_order": list(METRICS),
                        "column_order": list(METRICS), "suite": None}}}
            (run / "run.json").write_text(json.dumps(meta, sort_keys=True))
    write_leaderboards(results, None, 200, 0)
    return results, qs


def du(path: Path) -> int:
    return int(subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True).stdout.split()[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--queries", type=int, default=50_000)
    ap.add_argument("--editors", type=int, default=6)
    ap.add_argument("--size", type=int, default=64, help="side of the synthetic images in pixels")
    ap.add_argument("--page-size", type=int, default=24)
    ap.add_argument("--work", type=Path, default=Path("/tmp/report-bench"))
    ap.add_argument("--reuse", action="store_true", help="reuse a synthesised --work folder of the same size")
    args = ap.parse_args()
    # a fresh report folder and file-hash cache per invocation (deleting 300k thumbnails takes minutes)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out, cache = args.work / f"report-{stamp}", args.work / f"cache-{stamp}"
    os.environ["EDITMETER_CACHE"] = str(cache)
    from benchmark.commands.report import build_report

    marker = args.work / f"synth-{args.queries}-{args.editors}-{args.size}"
    if not (args.reuse and marker.is_file()):
        shutil.rmtree(args.work, ignore_errors=True)
        t = time.perf_counter()
        synthesise(args.work, args.queries, args.editors, args.size)
        marker.write_text("")
        print(f"synthesised {args.queries} queries x {args.editors} editors ({args.size}px) in "
              f"{time.perf_counter() - t:.0f} s (not part of the timing)", flush=True)
    from benchmark.querysets.io import load_queryset

    qs = load_queryset(args.work / "queryset", name="bench")
    for label in ("cold build", "rebuild"):
        t = time.perf_counter()
        s = build_report(args.work / "results", out, page_size=args.page_size, querysets={"bench": qs},
                         compare=False)
        wall = time.perf_counter() - t
        steps = ", ".join(f"{k} {v:.1f} s" for k, v in s["timings"].items() if k != "total")
        print(f"{label}: {wall:.1f} s ({steps}); thumbnails made {s['thumbnails_made']}, reused "
              f"{s['thumbnails_reused']}", flush=True)
    thumbs, data = du(out / "thumbs"), du(out / "data")
    chunks = list((out / "data" / "grid").glob("*/chunk-*.js"))
    print(f"output: {du(out) / 1e6:.1f} MB in total: thumbnails {thumbs / 1e6:.1f} MB, data {data / 1e6:.1f} MB "
          f"({len(chunks)} grid chunks, largest {max(p.stat().st_size for p in chunks) / 1e3:.0f} kB), "
          f"meta.js {(out / 'data' / 'meta.js').stat().st_size / 1e3:.0f} kB, "
          f"index.html {(out / 'index.html').stat().st_size / 1e3:.0f} kB; in {out} (delete it when done)")


if __name__ == "__main__":
    main()
