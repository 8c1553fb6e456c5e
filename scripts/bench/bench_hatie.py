"""Time HATIE's scoring stage on the demo set with real-size random-weight backbones (CLIP ViT-B/32, DINOv2-base,
LPIPS-alex, Inception-v3), batched vs. every batch size forced to 1 (the release's way: one image per forward
pass, no feature reuse). Each mode runs in its own process so peak RSS is its own.

    python scripts/bench/bench_hatie.py [--per-type 4] [--device cpu]     (or: make bench-hatie ARGS="--per-type 4")

Edits are the demo set's ground-truth targets. The scoring passes read the `oracle` segmentation (the exact masks
of those renders, benchmark/metrics/hatie/oracle.py), so the object workflows take their `detected` branches
(crops, structure tests, degradation pyramids) as for a good editor and segmenter; random-weight Mask R-CNN finds
almost nothing, which would time only the cheap not-detected branch (`--segmentation model` does that). The
oracle segmentation is computed before the timed passes, so their wall time excludes segmentation. One untimed
pass over one query per type comes first (`--no-warmup` skips it): imports, the heap's first growth and kernel set-up
are paid once per process, as a long run pays them, not per query; each timed pass starts from cold feature caches.

Segmentation itself is timed apart, in its own process per mode: real-size random-weight Mask R-CNN R50-FPN v2
over the same edits, 4 images per call vs. one.

`--host-only` records the backbones' outputs in one real pass, then replays them by input digest (`Replay`): the
timed passes then make every input exactly as a real pass does (their rows are checked equal to the recording
pass's: strings and counts exactly, float sub-scores within `REPLAY_RTOL`/`REPLAY_ATOL`, which a GPU's last-bit
differences between batches stay far inside) while each forward pass costs only a digest and a lookup. A pass takes well under a second, so many repeats
give a steady non-forward figure on a noisy machine; its queries/s and forward figures describe the host alone.

Reported per mode: queries/s, the share of wall time inside backbone forward passes (CLIP, DINOv2, LPIPS,
Inception), the unique inputs each backbone encoded per query and its forward seconds per input, the non-forward
steps the suite times, and peak RSS. The batch-size-1 loop reuses no feature across queries
(EDITMETER_FEATURE_CACHE_MB=0, engine cache 0). The summary splits batched / per-query into what cross-query reuse
gains (fewer inputs), what batching gains (cheaper inputs) and the non-forward remainder; their product is the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODES = {
    "batched": {"batch_size": 32, "chunk_size": 32, "cache_size": 4096, "seg_batch": 4},
    "batch1": {"batch_size": 1, "chunk_size": 1, "cache_size": 0, "seg_batch": 1},
    # batch size 1 but with feature reuse across queries: separates what batching gains from what reuse gains;
    # scores on batch1's cached segmentations (its segmentation is not timed)
    "batch1_reuse": {"batch_size": 1, "chunk_size": 1, "cache_size": 4096, "seg_batch": 1, "seg_from": "batch1"},
}


def _queries(per_type: int) -> tuple:
    from benchmark.io.types import HATIE_TYPES
    from benchmark.querysets.io import load_queryset

    qs = load_queryset(ROOT / "datasets" / "demo")
    by_type = {t: [q for q in qs.queries if q.edit_type == t][:per_type] for t in HATIE_TYPES}
    return qs, by_type, [q for t in HATIE_TYPES for q in by_type[t]]


def segmentation_worker(mode: str, per_type: int, device: str) -> dict:
    """Seconds to segment the edits with real-size random-weight Mask R-CNN (the mode's images per call)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.path.insert(0, str(ROOT))
    from benchmark.metrics.hatie.suite import _HatieSamples
    from benchmark.models.segmenter import build_segmenter

    qs, _, queries = _queries(per_type)
    samples = _HatieSamples(qs, queries, [qs.path(q.target_image) for q in queries])
    images = [it.edit_u8 for it in (samples[i] for i in range(len(queries))) if not it.error]
    batch = MODES[mode]["seg_batch"]
    seg = build_segmenter(backend="torchvision", weights="random", batch_size=batch, device=device)
    seg.segment(images[:1])  # warm-up (first-call allocations)
    t0 = time.perf_counter()
    for s in range(0, len(images), batch):
        seg.segment(images[s : s + batch])
    return {"mode": mode, "segmentation_s": time.perf_counter() - t0, "segmented_images": len(images),
            "seg_batch": batch}


class _Replayed:
    """A backbone whose forward methods (the ones `benchmark.metrics.precision` wraps) answer through a `Replay`;
    every other attribute (signature, image size, device) is the real one's, so cache keys and inputs are made as
    for the real backbone."""

    def __init__(self, inner: object, component: str, replay: Replay) -> None:
        self._inner, self._component, self._replay = inner, component, replay

    def __getattr__(self, name: str) -> object:
        from benchmark.metrics.precision import FORWARD_METHODS

        attr = getattr(self._inner, name)
        if name not in FORWARD_METHODS or not callable(attr):
            return attr
        return self._replay.answer(f"{self._component}.{name}", attr)


class Replay:
    """--host-only: the backbones (CLIP images and texts, DINOv2, LPIPS, the FID Inception) answer from a table of
    their outputs, keyed by each input's digest (texts by the text), recorded in one real pass over the same queries.
    A replayed pass therefore gets the very features of a real one, takes the same branches and degradation levels
    and makes the same inputs, but its forward passes cost only a digest and a lookup: its non-forward figures are
    the host-side pipeline alone, and a pass takes well under a second, so many repeats fit in a minute. An input
    the recording pass never saw raises KeyError (the inputs would not be deterministic)."""

    BACKBONES = ("clip", "dino", "lpips", "fid")

    def __init__(self) -> None:
        self.recording = True
        self.table: dict[tuple, object] = {}
        self.real_calls = 0  # calls that reached a real backbone

    def install(self, suite: object) -> None:
        """Put replaying stand-ins in place of the suite's backbones (those it has)."""
        for name in self.BACKBONES:
            real = suite._get(name)
            if real is not None:
                suite._models[name] = _Replayed(real, name, self)

    def answer(self, name: str, fn: object) -> object:
        """`fn` (the real forward method `name`), recording its outputs, or replaying them once recorded."""
        import torch

        from benchmark.metrics.features import tensor_digest

        def call(*xs: object) -> object:
            keys = list(zip(*[[tensor_digest(t) for t in x] if torch.is_tensor(x) else list(x) for x in xs],
                            strict=True))
            if self.recording:
                self.real_calls += 1
                out = fn(*xs)
                self.table.update({(name, k): o.detach().clone() for k, o in zip(keys, out, strict=True)})
                return out
            return torch.stack([self.table[name, k] for k in keys])

        return call


# How far a replayed pass's float sub-scores may lie from the recording pass's. The replay looks every input up by the
# digest of its exact bytes (made on the host, the same on any device), so it can only answer a pass that made the
# very inputs of the recording one; but on a GPU the features of one input differ in the last bits from one batch
# to the next (another batch size or position, another kernel, atomics), and the recording pass scored with those
# of the batch it was in, the replay with those of the last batch that encoded it. A different input, branch or
# degradation level moves a sub-score by far more (a degradation level by 0.25); strings and counts must be equal.
REPLAY_RTOL, REPLAY_ATOL = 1e-4, 1e-5


def row_deviation(a: dict, b: dict, rtol: float = REPLAY_RTOL, atol: float = REPLAY_ATOL) -> tuple[str | None, float]:
    """(where row `a` differs from row `b`, or None where it does not, and the largest absolute difference of their
    finite float values). Floats (arrays element for element) may differ within `rtol`/`atol` with NaN and
    infinities in the same places; strings, booleans and integers must be equal."""
    import numpy as np

    if a.keys() != b.keys():
        return f"fields {sorted(map(str, a.keys() ^ b.keys()))} in one row only", 0.0
    worst = 0.0
    for k, x in a.items():
        y = b[k]
        xa, ya = (np.asarray(v) if _numeric(v) else None for v in (x, y))
        if xa is None or ya is None or xa.dtype.kind not in "iuf" or ya.dtype.kind not in "iuf":
            same = type(x) is type(y) and bool(np.array_equal(xa, ya) if xa is not None else x == y)
            if not same:
                return f"{k}: {x!r} against {y!r}", worst
            continue
        if xa.shape != ya.shape:
            return f"{k}: shape {xa.shape} against {ya.shape}", worst
        if "f" not in (xa.dtype.kind, ya.dtype.kind):  # counts
            if not np.array_equal(xa, ya):
                return f"{k}: {x!r} against {y!r}", worst
            continue
        xf, yf = xa.astype(float), ya.astype(float)
        both = np.isfinite(xf) & np.isfinite(yf)
        if both.any():
            worst = max(worst, float(np.abs(xf[both] - yf[both]).max()))
        if not np.isclose(xf, yf, rtol=rtol, atol=atol, equal_nan=True).all():
            return f"{k}: {x!r} against {y!r}", worst
    return None, worst


def _numeric(v: object) -> bool:
    import numpy as np

    return isinstance(v, int | float | np.number | np.ndarray | list | tuple) and not isinstance(v, bool | np.bool_)


def _same_row(a: dict, b: dict, rtol: float = REPLAY_RTOL, atol: float = REPLAY_ATOL) -> bool:
    """Rows equal within the replay's tolerance (`row_deviation`)."""
    return row_deviation(a, b, rtol, atol)[0] is None


def check_replayed(rows: list[dict], recorded: dict[str, dict]) -> float:
    """Raise RuntimeError naming the query and field where a replayed row differs from the recording pass's beyond
    the tolerance; else return the largest absolute difference of their float values."""
    worst = 0.0
    for r in rows:
        where, dev = row_deviation(r, recorded[r["query_id"]])
        if where is not None:
            raise RuntimeError(f"query {r['query_id']}: the replayed pass scored otherwise than the recording pass "
                               f"({where}; tolerance {REPLAY_RTOL:g} relative, {REPLAY_ATOL:g} absolute): the "
                               "inputs of a pass are not deterministic")
        worst = max(worst, dev)
    return worst


def worker(mode: str, per_type: int, device: str, root: Path, by_type_pass: bool = False, repeat: int = 1,
           segmentation: str = "oracle", warmup: bool = True, loading: dict | None = None,
           host_only: bool = False) -> dict:
    """One mode's timed scoring passes. `loading`: num_workers (DataLoader worker processes), load_threads and
    prefetch, as a run's settings of those names (speed only). `host_only`: the backbones' outputs recorded in one
    real pass, then replayed (`Replay`)."""
    loading = {"num_workers": 0, "load_threads": None, "prefetch": False, **(loading or {})}
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if mode == "batch1":  # the per-query loop reuses no feature across queries: no process-wide feature cache
        os.environ["EDITMETER_FEATURE_CACHE_MB"] = "0"
    sys.path.insert(0, str(ROOT))
    from benchmark.io.types import HATIE_TYPES
    from benchmark.metrics.features import shared_cache
    from benchmark.metrics.hatie.oracle import load_oracle_segmenter
    from benchmark.metrics.hatie.suite import SEGMENTATIONS_DIR, HatieSuite, _HatieSamples
    from benchmark.models.clip import load_clip
    from benchmark.models.dino import load_dino
    from benchmark.models.inception import load_fid_extractor
    from benchmark.models.perceptual import load_lpips
    from benchmark.models.segmenter import build_segmenter

    m = MODES[mode]
    qs, by_type, queries = _queries(per_type)
    qs_type = {q.id: q.edit_type for q in qs.queries}
    segmenter = (partial(load_oracle_segmenter, root=str(ROOT / "datasets" / "demo")) if segmentation == "oracle"
                 else partial(build_segmenter, backend="torchvision", weights="random", batch_size=m["seg_batch"]))
    suite = HatieSuite(
        segmenter=segmenter,
        clip=partial(load_clip, weights="random"), dino=partial(load_dino, weights="random"),
        lpips=partial(load_lpips, weights="random"), fid=partial(load_fid_extractor, weights="random"),
        device=device, batch_size=m["batch_size"], chunk_size=m["chunk_size"], cache_size=m["cache_size"],
        load_threads=loading["load_threads"], prefetch=loading["prefetch"])
    workers = loading["num_workers"]
    t0 = time.perf_counter()
    for name in ("segmenter", "clip", "dino", "lpips", "fid"):
        suite._get(name)
    load_s = time.perf_counter() - t0
    replay = Replay() if host_only else None
    if replay is not None:
        replay.install(suite)
    edits = [qs.path(q.target_image) for q in queries]
    work = root / m.get("seg_from", mode)
    # segmentation first (cached); the scoring passes below read every segmentation from this cache, so their
    # wall time excludes segmentation
    samples = _HatieSamples(qs, queries, edits)
    items = [samples[i] for i in range(len(queries))]
    items = [it for it in items if not it.error]
    step = m["chunk_size"]
    for s in range(0, len(items), step):
        suite._segment(items[s : s + step], work / SEGMENTATIONS_DIR)
    if warmup:  # one untimed pass over one query per type: imports, first allocations and kernel set-up are paid
        # once per process, not per query (a long run pays them once); the timed passes still start from cold caches
        warm = [by_type[t][0] for t in HATIE_TYPES if by_type[t]]
        for _ in suite.score_queries(qs, warm, [qs.path(q.target_image) for q in warm], work_dir=work, progress=False,
                                         num_workers=workers):
            pass
    recorded: dict[str, dict] = {}
    if replay is not None:  # the recording pass: every input a cold pass makes, encoded by the real backbones
        shared_cache().clear()
        recorded = {r["query_id"]: r for rows in suite.score_queries(qs, queries, edits, work_dir=work, progress=False,
                                                                     num_workers=workers) for r in rows}
        replay.recording = False
    branches: dict[str, int] = {}
    suite.timings.clear()
    # throughput: one scoring call over the mixed set, as a real run does; repeated from cold caches, the fastest
    # repeat kept (the machine may be shared: other load only ever slows a repeat down)
    best: dict | None = None
    walls, passes_nf = [], []  # per repeat: wall, and the non-forward seconds by step (untimed included)
    replay_dev = 0.0  # --host-only: the largest difference of a replayed float sub-score from the recording pass's
    for _ in range(repeat):
        shared_cache().clear()
        suite.timings.clear()
        suite.fid_items = 0
        n, per_query, t_all = 0, {t: [] for t in HATIE_TYPES}, time.perf_counter()
        t1 = time.perf_counter()
        for rows in suite.score_queries(qs, queries, edits, work_dir=work, progress=False,
                                         num_workers=workers):
            n += len(rows)
            if recorded:
                replay_dev = max(replay_dev, check_replayed(rows, recorded))
            for r in rows:
                b = str(r.get("branch", r.get("status")))
                b = "detected" if b.endswith(" detected") and not b.startswith("0/") else b
                branches[b] = branches.get(b, 0) + 1
            if len(rows) == 1:  # batch-size-1 mode: each chunk is one query, timed exactly
                per_query[qs_type[rows[0]["query_id"]]].append(time.perf_counter() - t1)
            t1 = time.perf_counter()
        wall = time.perf_counter() - t_all
        walls.append(wall)
        steps = suite.step_seconds()
        # what no step timer covers (Python glue, allocation, the loader's own overhead): wall minus forward minus steps
        fwd = sum(suite.model_seconds().values()) - suite.timings.get("segmenter forward", 0.0)
        passes_nf.append({**steps, "untimed": max(0.0, wall - fwd - sum(steps.values()))})
        if best is None or wall < best["wall"]:
            best = {"wall": wall, "n": n, "per_query": per_query, "forward": suite.model_seconds(),
                    "seg_left": suite.timings.get("segmenter forward", 0.0), "eng": suite.engine,
                    "fid_items": suite.fid_items, "feat": dict(shared_cache().forward_items),
                    "other": suite.step_seconds(), "ahead": suite.ahead_seconds()}
    assert best is not None
    wall, n, per_query, forward, eng = best["wall"], best["n"], best["per_query"], best["forward"], best["eng"]
    seg_left = best["seg_left"]  # 0 unless a cached segmentation was rejected
    items_per_query = {k: v / max(1, n) for k, v in eng.forward_items.items()}
    items_per_query["fid image"] = best["fid_items"] / max(1, n)
    shared_items = {k: v / max(1, n) for k, v in best["feat"].items()}
    # non-forward steps: those of the repeat with the least non-forward time. On a shared machine a neighbour's load
    # slows the small multi-threaded ops of one repeat several-fold; the fastest wall is decided by the forward passes
    non_forward = min(passes_nf, key=lambda d: sum(d.values()))
    per_type_s = {t: sum(v) / len(v) for t, v in per_query.items() if v}
    if not per_type_s and by_type_pass:  # batched mode: a type-pure pass per type (fresh caches) for s/query by type
        shared_cache().clear()
        for t, qt in by_type.items():
            t1 = time.perf_counter()
            for _ in suite.score_queries(qs, qt, [qs.path(q.target_image) for q in qt], work_dir=work,
                                         progress=False, num_workers=workers):
                pass
            per_type_s[t] = (time.perf_counter() - t1) / max(1, len(qt))
    return {"mode": mode, "queries": n, "wall_s": wall, "walls_s": walls, "load_s": load_s, "queries_per_s": n / wall,
            "segmentation": segmentation, "branches": {k: v // max(1, repeat) for k, v in branches.items()},
            "sources": len({q.image for q in queries}), "segmentation_in_wall_s": seg_left,
            "s_per_query_by_type": per_type_s, "forward_s": forward,
            "forward_share": (sum(forward.values()) - seg_left) / wall, "other_s": non_forward,
            "non_forward_per_repeat_s": [sum(d.values()) for d in passes_nf], "ahead_s": best["ahead"],
            "forward_calls": dict(eng.forward_calls), "forward_items_per_query": items_per_query,
            "shared_cache_items_per_query": shared_items,
            "loading": loading, "host_only": host_only, "replay_deviation": replay_dev if host_only else None,
            "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2, "device": device,
            "threads": __import__("torch").get_num_threads()}


# backbone -> (forward-seconds key, forward-input keys) of a scoring worker's result
BACKBONES = {"CLIP": ("clip forward", ("clip image", "clip text")), "DINOv2": ("dino forward", ("dino",)),
             "LPIPS": ("lpips forward", ("lpips pair",)), "Inception": ("fid forward", ("fid image",)),
             "VQA": ("vqa forward", ("vqa",))}


def _per_backbone(r: dict) -> dict[str, tuple[float, float]]:
    """backbone -> (unique inputs per query, forward seconds per input) of one mode."""
    out = {}
    for name, (sec_key, item_keys) in BACKBONES.items():
        items = sum(r["forward_items_per_query"].get(k, 0.0) for k in item_keys)
        if items:
            out[name] = (items, r["forward_s"].get(sec_key, 0.0) / (items * r["queries"]))
    return out


def decompose(batched: dict, loop: dict) -> dict[str, float]:
    """batched / per-query throughput as a product of three factors (exact up to rounding):
    reuse = the loop's inputs at batched cost / batched inputs at batched cost (fewer inputs);
    batching = the loop's inputs at the loop's cost / the loop's inputs at batched cost (cheaper inputs);
    rest = the batched forward share / the loop's (the non-forward remainder)."""
    b, one = _per_backbone(batched), _per_backbone(loop)
    names = [n for n in one if n in b]
    cost = lambda items, at: sum(items[n][0] * at[n][1] for n in names)  # noqa: E731  (seconds per query)
    return {"reuse": cost(one, b) / cost(b, b), "batching": cost(one, one) / cost(one, b),
            "rest": batched["forward_share"] / loop["forward_share"],
            "total": batched["queries_per_s"] / loop["queries_per_s"]}


def _run_worker(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=False)
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    if out.returncode or not line:
        sys.exit(f"worker {' '.join(args)} failed:\n{out.stderr[-3000:]}")
    return json.loads(line[0][7:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--per-type", type=int, default=4, help="queries per edit type (demo has 16 of each)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--modes", default="batched,batch1,batch1_reuse")
    ap.add_argument("--repeat", type=int, default=2, help="scoring passes per mode (cold caches); the fastest is kept")
    ap.add_argument("--segmentation", choices=("oracle", "model"), default="oracle",
                    help="what the scoring passes read: the demo's exact masks (oracle: detected branches) or "
                         "random-weight Mask R-CNN's (model: almost all not-detected)")
    ap.add_argument("--no-seg-timing", action="store_true", help="skip timing Mask R-CNN segmentation")
    ap.add_argument("--by-type", action="store_true", help="batched mode: also time a type-pure pass per type")
    ap.add_argument("--no-warmup", action="store_true",
                    help="skip the untimed warm-up pass (one query per type) before the timed passes")
    ap.add_argument("--num-workers", type=int, default=0,
                    help="DataLoader worker processes that load ahead (a run's num_workers; 0: threads, see below)")
    ap.add_argument("--load-threads", type=int, default=None,
                    help="without workers: threads that load and plan a chunk (default one per core, at most 4)")
    ap.add_argument("--prefetch", action="store_true",
                    help="without workers: load and plan the next chunk while one is scored (metrics.hatie.prefetch)")
    ap.add_argument("--host-only", action="store_true",
                    help="record the backbones' outputs in one real pass, then time passes that replay them: the "
                         "host-side pipeline alone, with many repeats (see Replay)")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--seg-worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--root", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    from benchmark.commands.gpucheck import device_unavailable

    why = device_unavailable(args.device)
    if why:
        print(why, file=sys.stderr)
        sys.exit(2)
    if args.seg_worker:
        print("RESULT " + json.dumps(segmentation_worker(args.seg_worker, args.per_type, args.device)))
        return
    if args.worker:
        loading = {"num_workers": args.num_workers, "load_threads": args.load_threads, "prefetch": args.prefetch}
        print("RESULT " + json.dumps(worker(args.worker, args.per_type, args.device, Path(args.root), args.by_type,
                                             args.repeat, args.segmentation, not args.no_warmup, loading,
                                             args.host_only)))
        return
    modes = args.modes.split(",")
    for mode in modes:
        if mode not in MODES or MODES[mode].get("seg_from", mode) not in modes[: modes.index(mode) + 1]:
            sys.exit(f"unknown mode {mode!r} or its segmentation source not run before it (modes: {', '.join(MODES)})")
    common = ["--per-type", str(args.per_type), "--device", args.device]
    seg = {} if args.no_seg_timing else {
        mode: _run_worker(["--seg-worker", mode, *common]) for mode in modes if "seg_from" not in MODES[mode]}
    root = tempfile.mkdtemp(prefix="bench-hatie-")  # per-mode work dirs (segmentation caches)
    try:
        results = {mode: _run_worker(["--worker", mode, *common, "--root", root, "--repeat", str(args.repeat),
                                      "--segmentation", args.segmentation, *(["--by-type"] if args.by_type else []),
                                      *(["--no-warmup"] if args.no_warmup else []),
                                      "--num-workers", str(args.num_workers), *(["--prefetch"] if args.prefetch else []),
                                      *(["--host-only"] if args.host_only else []),
                                      *(["--load-threads", str(args.load_threads)] if args.load_threads else [])])
                   for mode in modes}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"load average (1, 5, 15 min) at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    first = next(iter(results.values()))
    print(f"{first['queries']} queries over {first['sources']} source images; segmentation read by the scoring "
          f"passes: {first['segmentation']}; branches: "
          + ", ".join(f"{k} {v}" for k, v in sorted(first["branches"].items())))
    for mode, r in seg.items():
        print(f"segmentation ({mode}: {r['seg_batch']} per call), real-size random Mask R-CNN, not in any wall below: "
              f"{r['segmentation_s']:.1f} s for {r['segmented_images']} images, "
              f"{r['segmentation_s'] / max(1, r['segmented_images']):.2f} s/image")
    for mode, r in results.items():
        ld = r["loading"]
        print(f"\n== {mode}: {r['queries']} queries on {r['device']} ({r['threads']} threads); loading: "
              + (f"{ld['num_workers']} DataLoader workers" if ld["num_workers"] else
                 f"{ld['load_threads'] or 'default'} threads, {'prefetch' if ld['prefetch'] else 'no prefetch'}")
              + ("; HOST ONLY: backbones replayed from a recording pass, the walls are the host-side pipeline alone "
                 f"(replayed sub-scores within {r['replay_deviation']:.1e} of the recording pass's)"
                 if r["host_only"] else ""))
        print(f"  scoring, segmentation excluded: {r['queries_per_s']:.3f} queries/s, wall {r['wall_s']:.1f} s "
              f"(+ model load {r['load_s']:.1f} s), peak RSS {r['peak_rss_gb']:.2f} GB, "
              f"{100 * r['forward_share']:.0f}% of wall in backbone forward passes; walls of the repeats: "
              + ", ".join(f"{w:.1f}" for w in r["walls_s"]) + " s")
        if r["s_per_query_by_type"]:
            print("  s/query by type: " + ", ".join(f"{t} {v:.2f}" for t, v in r["s_per_query_by_type"].items()))
        print("  forward seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in r["forward_s"].items()))
        nf = sum(r["other_s"].values())
        print(f"  non-forward, least of the repeats: {1000 * nf / r['queries']:.0f} ms/query ({100 * nf / r['wall_s']:.0f}% "
              "of the fastest wall; repeats: " + ", ".join(f"{1000 * v / r['queries']:.0f}" for v in
                                                          r["non_forward_per_repeat_s"]) + "), by step (ms/query): "
              + ", ".join(f"{k} {1000 * v / r['queries']:.1f}" for k, v in
                          sorted(r["other_s"].items(), key=lambda kv: -kv[1])))
        if r.get("ahead_s"):  # work done ahead on other threads while this one waited ("load images", "plan")
            print("  done ahead on other threads, inside the waits above (seconds summed over threads, ms/query): "
                  + ", ".join(f"{k} {1000 * v / r['queries']:.1f}" for k, v in r["ahead_s"].items()))
        print("  unique forward inputs per query: " + ", ".join(
            f"{k} {v:.1f}" for k, v in r["forward_items_per_query"].items()))
        print("  forward seconds per input: " + ", ".join(
            f"{k} {v[1]:.3f}" for k, v in _per_backbone(r).items()))
    if {"batched", "batch1"} <= set(results):
        b, one = results["batched"], results["batch1"]
        d = decompose(b, one)
        print(f"\nbatched / per-query (batch size 1) scoring throughput, segmentation excluded: {d['total']:.2f}x")
        print(f"  = {d['reuse']:.2f}x from cross-query reuse (fewer unique inputs) x {d['batching']:.2f}x from "
              f"batching (cheaper inputs) x {d['rest']:.2f}x from the non-forward remainder")
        if "batch1_reuse" in results:
            print(f"batched / batch size 1 with the same feature reuse: "
                  f"{b['queries_per_s'] / results['batch1_reuse']['queries_per_s']:.2f}x")
        if {"batched", "batch1"} <= set(seg):
            per = lambda r: r["segmentation_s"] / max(1, r["segmented_images"])  # noqa: E731
            print(f"segmentation, batched ({MODES['batched']['seg_batch']} per call) / per image: "
                  f"{per(seg['batch1']) / per(seg['batched']):.2f}x")
    print("JSON " + json.dumps({"scoring": results, "segmentation": seg}))


if __name__ == "__main__":
    main()
