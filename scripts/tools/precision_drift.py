"""How far HATIE's scores move under a reduced scoring precision (`metrics.hatie.precision`), per raw sub-score.

    python scripts/tools/precision_drift.py [--per-type 2] [--device cpu] [--weights random] [--modes fp32,bf16]

Scores the demo set's ground-truth edits (oracle segmentation, as scripts/bench/bench_hatie.py does, so the object
workflows take their detected branches) once per mode with the same backbones, and prints, for every criterion and
raw sub-score, the largest and the mean absolute difference from fp32, the FID difference, and each mode's scoring
wall time. `--weights random` (default) uses the real-size architectures with random weights, `pretrained` the real
ones (needs them locally): drift depends on the weights, so only a pretrained run measures the real one.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def score(mode: str, args: argparse.Namespace, work: Path) -> tuple[dict[str, dict[str, float]], float, float]:
    """(query id -> criteria and raw sub-scores, FID between originals and edits, scoring seconds) in `mode`."""
    import numpy as np

    from benchmark.io.types import HATIE_TYPES
    from benchmark.metrics.features import shared_cache
    from benchmark.metrics.fid import fid as fid_of
    from benchmark.metrics.hatie.oracle import load_oracle_segmenter
    from benchmark.metrics.hatie.suite import FID_EDIT, FID_SOURCE, HatieSuite
    from benchmark.models.clip import load_clip
    from benchmark.models.dino import load_dino
    from benchmark.models.inception import load_fid_extractor
    from benchmark.models.perceptual import load_lpips
    from benchmark.querysets.io import load_queryset

    qs = load_queryset(ROOT / "datasets" / "demo")
    queries = [q for t in HATIE_TYPES for q in [q for q in qs.queries if q.edit_type == t][: args.per_type]]
    w = args.weights
    suite = HatieSuite(segmenter=partial(load_oracle_segmenter, root=str(ROOT / "datasets" / "demo")),
                       clip=partial(load_clip, weights=w), dino=partial(load_dino, weights=w),
                       lpips=partial(load_lpips, weights=w), fid=partial(load_fid_extractor, weights=w),
                       device=args.device, precision=mode)
    shared_cache().clear()
    t0 = time.perf_counter()
    rows = [r for batch in suite.score_queries(qs, queries, [qs.path(q.target_image) for q in queries],
                                               work_dir=work, progress=False) for r in batch]
    seconds = time.perf_counter() - t0
    ok = [r for r in rows if r["status"] == "ok"]
    fid = fid_of(np.stack([r[FID_SOURCE] for r in ok]), np.stack([r[FID_EDIT] for r in ok]))
    values = {r["query_id"]: {k: float(v) for k, v in r.items()
                              if k in ("OF", "BF", "OC", "BC") or k.startswith("raw_")} for r in ok}
    for v in values.values():
        for k in [k for k, x in v.items() if math.isnan(x)]:
            del v[k]
    return values, fid, seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--per-type", type=int, default=2, help="queries per edit type (the demo has 16 of each)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--weights", default="random", choices=("random", "tiny", "pretrained"))
    ap.add_argument("--modes", default="fp32,bf16", help="fp32 first: the reference")
    args = ap.parse_args()
    from benchmark.commands.gpucheck import device_unavailable

    why = device_unavailable(args.device)
    if why:
        print(why, file=sys.stderr)
        sys.exit(2)
    sys.path.insert(0, str(ROOT))
    modes = args.modes.split(",")
    if modes[0] != "fp32":
        ap.error("--modes must start with fp32 (the reference)")
    with tempfile.TemporaryDirectory() as tmp:
        results = {m: score(m, args, Path(tmp)) for m in modes}
    ref, ref_fid, ref_s = results["fp32"]
    print(f"HATIE scoring drift from fp32: {len(ref)} demo queries, {args.weights} weights, device {args.device}")
    for m in modes[1:]:
        vals, fid, s = results[m]
        print(f"\n== {m}: scoring {s:.1f} s vs fp32 {ref_s:.1f} s ({ref_s / s:.2f}x); FID {fid:.4g} vs {ref_fid:.4g} "
              f"(|diff| {abs(fid - ref_fid):.3g})")
        print(f"{'sub-score':<28} {'n':>4} {'max |diff|':>11} {'mean |diff|':>12}")
        keys = sorted({k for v in ref.values() for k in v}, key=lambda k: (k.startswith("raw_"), k))
        for k in keys:
            diffs = [abs(ref[q][k] - vals[q][k]) for q in ref if k in ref[q] and k in vals.get(q, {})]
            if diffs:
                print(f"{k:<28} {len(diffs):>4} {max(diffs):>11.2e} {sum(diffs) / len(diffs):>12.2e}")


if __name__ == "__main__":
    main()
