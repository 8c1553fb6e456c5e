"""Time incremental aggregation: a full leaderboard rebuild at N runs vs adding run N+1 with the cache warm.

    python scripts/bench/bench_aggregate.py [--runs 50] [--rows 50000] [--resamples 200] [--keep DIR] [--verify]

Synthesises `--runs` run folders of `--rows` score rows each in a temporary results folder, written by the score
stage's own part writer (512-row Parquet parts, the real row schema and `queries.json`). Every other run carries
basic-metric-like columns (10 pixel metrics), the rest HATIE-like ones (OF/BF/OC/BC, raw columns and small FID
feature vectors, aggregated by the HATIE suite summary). Then it prints:

1. the full rebuild at N runs with an empty cache (every run computed, its entry written; with `--baseline` also
   with the cache off, `write_leaderboards(cache=False)`, the behaviour before the cache: one more full pass),
2. the rebuild after adding run N+1 (one run computed, N read from the cache), and the ratio 1 / 2,
3. a rebuild with nothing changed.

Bootstrap cost is linear in `--resamples` for every computed run, so the ratio barely depends on it; the default
200 keeps a 50 x 50k build within minutes on 2 CPU cores (the leaderboard default is 10,000).
`--verify` also checks that the incremental tables are byte-identical to a full rebuild at N+1 runs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmark.io.score_cache import INDEX_COLUMNS, INDEX_FILE, INDEX_FORMAT, ROW_KEYS  # noqa: E402
from benchmark.stages.score import _PartWriter  # noqa: E402  (the score stage's writer: same parts, same names)

BASIC = ("l1_out", "l2_out", "psnr_out", "ssim_out", "l1", "psnr", "ssim", "l1_gt_in", "psnr_gt_in", "ssim_gt_in")
HATIE = ("OF", "BF", "OC", "BC")
HATIE_RAW = ("raw_bc_clip", "raw_bc_lpips", "raw_bc_dino", "raw_bc_l2", "raw_of_clip", "raw_of_det")
TYPES = ("obj_add", "obj_remove", "obj_rep", "obj_resize", "attr_chg", "bg_chg", "style_chg")
N_CLASSES = 80
QS_HASH = "b" * 64
FID_DIM = 16


def _index(n: int) -> list[list]:
    return [[f"q{i:06d}", f"img{i // 7:06d}", TYPES[i % len(TYPES)], f"class{i % N_CLASSES:02d}", ""] for i in range(n)]


def _scoring(hatie: bool) -> tuple[str, dict]:
    if hatie:
        from benchmark.metrics.hatie.suite import COLUMN_INFO

        info = {k: (hib, d) for k, (hib, d) in COLUMN_INFO.items()}
        entry = {"metric_set": "hatie", "metric_order": list(HATIE), "column_order": list(COLUMN_INFO),
                 "suite": {"name": "hatie", "components": {"iq": "on", "vqa": "off"}}}
    else:
        info = {m: (not m.startswith("l"), m) for m in BASIC}
        entry = {"metric_set": "basic", "metric_order": list(BASIC), "column_order": list(BASIC), "suite": None}
    entry["metrics"] = {k: {"version": "1", "higher_is_better": hib, "description": d} for k, (hib, d) in info.items()}
    return ("hatiesig" if hatie else "basicsig"), entry


def make_run(results: Path, k: int, rows: int) -> Path:
    """Run folder number `k`: a guidance-scale sweep of one editor (so the settings columns and the sweep CSV are
    exercised), scored with the basic-like (even k) or the HATIE-like (odd k) metric set."""
    hatie = k % 2 == 1
    sig = f"{k:010x}"
    run_dir = results / "runs" / f"bench-{QS_HASH[:10]}" / f"ed-{sig}"
    msig, entry = _scoring(hatie)
    folder = run_dir / "scores" / msig
    folder.mkdir(parents=True)
    index = _index(rows)
    (folder / INDEX_FILE).write_text(json.dumps({"format": INDEX_FORMAT, "queryset": "bench", "queryset_hash": QS_HASH,
                                                 "n_total": rows, "columns": INDEX_COLUMNS, "rows": index}))
    rng = np.random.default_rng(k)
    df = pd.DataFrame(index, columns=INDEX_COLUMNS).drop(columns="excluded")
    df["status"], df["reason"], df["edit_sha256"] = "ok", "", "ab" * 32
    failed = rng.random(rows) < 0.01
    df.loc[failed, ["status", "reason", "edit_sha256"]] = ["failed", "RuntimeError: synthetic", ""]
    names = list(HATIE + HATIE_RAW) if hatie else list(BASIC)
    for m in names:
        df[m] = np.where(failed, np.nan, rng.random(rows))
    if hatie:
        df["branch"] = "detected"
        feats = rng.normal(size=(rows, 2, FID_DIM)).astype(np.float32)
        df["_fid_edit"], df["_fid_src"] = list(feats[:, 0]), list(feats[:, 1])
        names += ["branch", "_fid_edit", "_fid_src"]
    writer = _PartWriter(folder, df.to_dict("records"), list(ROW_KEYS) + names)
    writer.flush(final=True)
    meta = {"queryset": "bench", "queryset_hash": QS_HASH, "queryset_size": rows, "editor": "ed", "editor_sig": sig,
            "prompt_kind": "instruction", "profile": "tiny", "seed": 0, "git_sha": "bench", "versions": {"x": "1"},
            "device": "cpu", "editor_info": {"name": "ed", "guidance_scale": 1.0 + k, "steps": 50},
            "editor_config": {"_target_": "editors.ed.Editor"}, "metric_sig": msig, **entry, "scored": {msig: entry},
            "selection": {"shard": [0, 1], "limit": None, "n_selected": rows}}
    (run_dir / "run.json").write_text(json.dumps(meta, sort_keys=True))
    return run_dir


def timed(results: Path, resamples: int, cache: bool) -> tuple[float, str]:
    from benchmark.stages.aggregate import write_leaderboards
    from benchmark.tables import aggregate_cache

    t0 = time.perf_counter()
    write_leaderboards(results, None, resamples, 0, cache=cache)
    s = aggregate_cache.LAST_STATS
    return time.perf_counter() - t0, f"{s.reused} cached, {s.computed} computed"


def say(label: str, seconds: float, how: str) -> None:
    print(f"{label:<36}{seconds:8.2f} s  ({how})", flush=True)


def tables(results: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(results.glob("leaderboard*.csv"))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--rows", type=int, default=50_000)
    ap.add_argument("--resamples", type=int, default=200)
    ap.add_argument("--keep", type=Path, default=None, help="build in this folder and keep it (default: a temp dir)")
    ap.add_argument("--baseline", action="store_true", help="also time a rebuild with the cache off (one more full pass)")
    ap.add_argument("--verify", action="store_true", help="also compare with a full rebuild at runs + 1")
    args = ap.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="bench-aggregate-"))
    results = root / "results"
    try:
        t0 = time.perf_counter()
        for k in range(args.runs):
            make_run(results, k, args.rows)
        print(f"setup: {args.runs} runs x {args.rows} rows ({(args.runs + 1) // 2} basic-like with {len(BASIC)} "
              f"metrics, {args.runs // 2} HATIE-like with {len(HATIE)} criteria + FID features of {FID_DIM} dims) "
              f"in {time.perf_counter() - t0:.0f} s; bootstrap resamples {args.resamples}", flush=True)
        if args.baseline:
            base, how = timed(results, args.resamples, cache=False)
            say(f"full rebuild at {args.runs} runs, cache off", base, how)
        full, how = timed(results, args.resamples, cache=True)
        say(f"full rebuild at {args.runs} runs, cache empty", full, f"{how}; entries written")
        make_run(results, args.runs, args.rows)
        inc, how = timed(results, args.resamples, cache=True)
        say(f"adding run {args.runs + 1}", inc, how)
        print(f"{'ratio full / incremental':<36}{full / inc:8.1f} x", flush=True)
        same, how = timed(results, args.resamples, cache=True)
        say("rebuild with nothing changed", same, how)
        if args.verify:
            incremental = tables(results)
            timed(results, args.resamples, cache=False)
            print(f"incremental tables byte-identical to a full rebuild: {tables(results) == incremental}")
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
