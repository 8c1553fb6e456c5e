"""How much batching itself buys each HATIE model on this machine: forward seconds per image by batch size.

Real-size architectures with random weights (Mask R-CNN R50-FPN v2, CLIP ViT-B/32, DINOv2-base, LPIPS-alex,
Inception-v3), called through the same encoder classes the suite uses, on the same inputs at every batch size.
This bounds what any batching scheme can gain over batch size 1: if every model's per-image time drops by at most
a factor k, the whole scoring stage (99% forward passes, `bench_hatie.py`) cannot speed up by more than k from
batching alone; the rest must come from computing less (the feature cache).

    python scripts/bench/bench_backbones.py [--device cpu] [--images 32] [--batch-sizes 1 8 32] [--seg-batch-sizes 1 2 4]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def per_image_seconds(fn: Callable[[object], object], images: object, batch: int, repeats: int) -> float:
    """Best of `repeats` passes over all images in batches of `batch` (one warm-up call first), per image."""
    n = len(images)
    fn(images[:batch])
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for i in range(0, n, batch):
            fn(images[i : i + batch])
        best = min(best, time.perf_counter() - t0)
    return best / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--images", type=int, default=32, help="images per backbone measurement")
    ap.add_argument("--seg-images", type=int, default=4, help="images per segmenter measurement")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--seg-batch-sizes", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    from benchmark.commands.gpucheck import device_unavailable

    why = device_unavailable(args.device)
    if why:
        print(why, file=sys.stderr)
        sys.exit(2)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("EDITMETER_CACHE", str(ROOT / ".cache"))

    import numpy as np
    import torch

    from benchmark.models.clip import load_clip
    from benchmark.models.dino import load_dino
    from benchmark.models.inception import load_fid_extractor
    from benchmark.models.perceptual import load_lpips
    from benchmark.models.segmenter import load_torchvision_segmenter

    dev = args.device
    gen = torch.Generator().manual_seed(0)
    crops = torch.rand(args.images, 3, 256, 256, generator=gen)  # object crops / pyramid levels, resized by the encoders
    full = torch.rand(args.images, 3, 512, 512, generator=gen)
    rng = np.random.default_rng(0)
    seg_images = [rng.integers(0, 255, (512, 512, 3), dtype=np.uint8) for _ in range(args.seg_images)]

    clip, dino = load_clip("random", device=dev), load_dino("random", device=dev)
    lpips, fid = load_lpips("random", device=dev), load_fid_extractor("random", device=dev)
    seg = load_torchvision_segmenter("random", device=dev)
    cases = [
        ("CLIP ViT-B/32 (256 px -> 224)", clip.embed_images, crops, args.batch_sizes),
        ("DINOv2-base (256 px -> 224)", dino.embed_images, crops, args.batch_sizes),
        ("LPIPS-alex (512 px pairs)", lambda x: lpips.distance(x, x.flip(-1)), full, args.batch_sizes),
        ("Inception-v3 FID (512 px)", fid.features, full, args.batch_sizes),
        ("Mask R-CNN R50-FPN v2 (512 px)", seg.segment, seg_images, args.seg_batch_sizes),
    ]
    print(f"torch {torch.__version__}, device {dev}, {torch.get_num_threads()} CPU thread(s); ms per image")
    for name, fn, data, sizes in cases:
        times = []
        for b in sizes:
            seg.batch_size = b  # the segmenter splits its input into batches of its own size
            times.append(per_image_seconds(fn, data, b, args.repeats))
        cols = "  ".join(f"b{b} {1000 * t:7.1f}" for b, t in zip(sizes, times, strict=True))
        print(f"{name:<32} {cols}  | best vs b1: {times[0] / min(times):.2f}x", flush=True)


if __name__ == "__main__":
    main()
