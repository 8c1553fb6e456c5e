"""Synthetic run folders for aggregation tests: run.json, queries.json and score parts in the real layout."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from benchmark.io.hashing import stable_hash
from benchmark.io.score_cache import INDEX_COLUMNS, INDEX_FILE

SHA = "ab" * 32
QS_HASH = "f" * 64
TYPES = ("obj_add", "obj_rep", "bg_chg")
CLASSES = ("cat", "dog")
BASIC = ("psnr", "l1")
HATIE = ("OF", "BF", "OC", "BC")


def ids(n: int) -> list[str]:
    return [f"q{i:03d}" for i in range(n)]


def scoring(metric_set: str) -> tuple[str, dict]:
    """(metric signature, run.json `scored` entry) of a basic-like or a HATIE-like metric set."""
    if metric_set == "basic":
        metrics = {"psnr": (True, "psnr"), "l1": (False, "l1")}
        entry = {"metric_set": "basic", "metric_order": list(BASIC), "column_order": list(BASIC), "suite": None}
    else:
        from benchmark.metrics.hatie.suite import COLUMN_INFO

        metrics = dict(COLUMN_INFO)
        entry = {"metric_set": "hatie", "metric_order": list(HATIE), "column_order": list(COLUMN_INFO),
                 "suite": {"name": "hatie", "components": {"iq": "on"}}}
    entry["metrics"] = {k: {"version": "1", "higher_is_better": hib, "description": d} for k, (hib, d) in metrics.items()}
    return f"sig{metric_set}", entry


def score_rows(qids: list[str], metric_set: str, rng: np.random.Generator, shift: float = 0.0) -> pd.DataFrame:
    n = len(qids)
    df = pd.DataFrame({"query_id": qids, "image_id": [f"img{int(q[1:]) // 2}" for q in qids],
                       "edit_type": [TYPES[int(q[1:]) % len(TYPES)] for q in qids],
                       "object_class": [CLASSES[int(q[1:]) % len(CLASSES)] for q in qids],
                       "status": "ok", "reason": "", "edit_sha256": SHA})
    for m in BASIC if metric_set == "basic" else HATIE:
        df[m] = rng.random(n) + shift
    if metric_set != "basic":
        df["_fid_edit"] = [rng.normal(size=4).astype(np.float32) for _ in range(n)]
        df["_fid_src"] = [rng.normal(size=4).astype(np.float32) for _ in range(n)]
    return df


def make_run(results: Path, editor: str, settings: dict, *, n: int = 12, metric_sets=("basic",), seed: int = 0,
             parts: int = 2, partial: int = 0) -> Path:
    """A scored run folder of `editor` with `settings` as its editor info (its signature is their hash); `partial`
    queries are left unscored."""
    sig = stable_hash([editor, settings], 10)
    run_dir = results / "runs" / f"toy-{QS_HASH[:10]}" / f"{editor}-{sig}"
    qids = ids(n)
    scored = {}
    rng = np.random.default_rng([seed, int(sig, 16) % 2**32])
    for metric_set in metric_sets:
        msig, entry = scoring(metric_set)
        scored[msig] = entry
        folder = run_dir / "scores" / msig
        folder.mkdir(parents=True, exist_ok=True)
        rows = [[q, f"img{int(q[1:]) // 2}", TYPES[int(q[1:]) % len(TYPES)], CLASSES[int(q[1:]) % len(CLASSES)], ""]
                for q in qids]
        (folder / INDEX_FILE).write_text(json.dumps({"format": 1, "queryset": "toy", "queryset_hash": QS_HASH,
                                                     "n_total": n, "columns": INDEX_COLUMNS, "rows": rows}))
        df = score_rows(qids[: n - partial], metric_set, rng)
        for k in range(parts):
            df.iloc[k::parts].to_parquet(folder / f"part-{k:020d}-1-00000.parquet", index=False)
    last_sig, last = next(reversed(scored.items()))
    meta = {"queryset": "toy", "queryset_hash": QS_HASH, "queryset_size": n, "editor": editor, "editor_sig": sig,
            "prompt_kind": "instruction", "profile": "tiny", "seed": 0, "git_sha": "abc", "versions": {"x": "1"},
            "device": "cpu", "editor_info": {"name": editor, **settings}, "editor_config": {"_target_": f"x.{editor}"},
            "selection": {"shard": [0, 1], "limit": None, "n_selected": n}, "updated_at": "2026-01-01T00:00:00",
            "metric_sig": last_sig, **last, "scored": scored}
    (run_dir / "run.json").write_text(json.dumps(meta, sort_keys=True))
    return run_dir


def add_part(run_dir: Path, metric_set: str, qids: list[str], shift: float, name: str = "part-9") -> Path:
    """A later score part for `qids` (a rescore: it wins over earlier parts)."""
    msig, _ = scoring(metric_set)
    path = run_dir / "scores" / msig / f"{name}{'0' * 19}-1-00000.parquet"
    score_rows(qids, metric_set, np.random.default_rng(7), shift).to_parquet(path, index=False)
    return path
