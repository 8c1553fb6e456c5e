"""PieSuite: PIE-Bench's metrics (PnP Inversion, `evaluation/evaluate.py` + `matrics_calculator.py`), per query,
on any query set whose queries carry an edit mask.

Per chunk of queries (sorted by source image, loaded by the shared chunk loop): the structure distance from DINO
ViT-B/8 keys, background PSNR / LPIPS / MSE / SSIM on both images multiplied by (1 - mask), and CLIP scores of the
whole edit and of the edit multiplied by the mask against the target caption. Encoder features go through the
process-wide feature cache (`benchmark.metrics.features`), so a source shared by several queries is encoded once.
Columns are in the paper's units. Specification: docs/pie.md.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.io.model_cache import resolve_device
from benchmark.io.types import MetricInfo, Query
from benchmark.metrics.chunking import QuerySamples
from benchmark.metrics.components import LazyComponents

VERSION = "1.0"
DEFAULT_PSNR_CAP = 100.0  # dB; an unchanged background has infinite PSNR (see docs/pie.md)

# column -> (higher_is_better, description), in the paper's table order and units
COLUMN_INFO: dict[str, tuple[bool, str]] = {
    "structure_1e3": (False, "structure distance x 10^3: MSE between the DINO ViT-B/8 last-block key "
                             "self-similarity matrices of source and edit (whole images)"),
    "psnr_bg": (True, "PSNR (dB, data range 1) of source and edit both multiplied by (1 - mask), over the whole "
                      "image; capped (psnr_cap)"),
    "lpips_bg_1e3": (False, "LPIPS (SqueezeNet) x 10^3 of source and edit both multiplied by (1 - mask)"),
    "mse_bg_1e4": (False, "MSE x 10^4 (images in [0, 1]) of source and edit both multiplied by (1 - mask), over "
                          "the whole image"),
    "ssim_bg_1e2": (True, "SSIM x 10^2 (torchmetrics, data range 1) of source and edit both multiplied by "
                          "(1 - mask)"),
    "clip_whole": (True, "CLIP score (ViT-L/14): max(100 cos(E(edit), E(target caption)), 0)"),
    "clip_edited": (True, "CLIP score of the edit multiplied by the mask (outside set to black) vs the target "
                          "caption"),
}
BACKGROUND = ("psnr_bg", "lpips_bg_1e3", "mse_bg_1e4", "ssim_bg_1e2")
NEEDS = {"dino": ("structure_1e3",), "clip": ("clip_whole", "clip_edited"), "lpips": ("lpips_bg_1e3",)}
SUMMARY_INFO: dict[str, tuple[bool, str]] = {
    "n_no_background": (False, "ok queries whose mask covers the whole image (background columns NaN)"),
    "n_no_caption": (False, "ok queries without a target caption (CLIP columns NaN; MagicBrush has none)"),
}
NO_BACKGROUND = "the edit mask covers the whole image: no background to compare"
EMPTY_MASK = "the edit mask is empty: no edited region"
NO_CAPTION = "no target caption"


@dataclass
class _Loaded:
    query: Query
    source: Any = None  # float (3, H, W) in [0, 1]
    edit: Any = None
    mask: Any = None  # bool (H, W), True = the edit region
    error: str = ""


class _Samples(QuerySamples):
    """Loads one query's source, edit and edit mask (runs in DataLoader workers or loader threads)."""

    def item(self, query: Query) -> _Loaded:
        return _Loaded(query)

    def load(self, out: _Loaded, q: Query, edit_path: Path) -> None:
        import torch

        from benchmark.io.imageio import ImageInputError, load_mask, load_rgb, to_float_tensor

        (w, h), out.source = self.original(q, lambda img: (img.size, to_float_tensor(img)))
        edit = load_rgb(edit_path)
        if edit.size != (w, h):
            # PIE-Bench's evaluation compares aligned pixels and asserts equal shapes; it never resizes an edit
            raise ImageInputError(f"edit is {edit.size[0]}x{edit.size[1]}, source is {w}x{h}: PIE-Bench's metrics "
                                  "compare aligned pixels at the source's size and resize no edit")
        out.edit = to_float_tensor(edit)
        if not q.edit_mask:
            raise ImageInputError(f"query {q.id} has no edit mask (metrics=pie needs one)")
        out.mask = torch.from_numpy(load_mask(self.queryset.path(q.edit_mask), (w, h)))


def _component_id(factory: Callable[..., Any] | None) -> str:
    if factory is None:
        return "off"
    kw = dict(getattr(factory, "keywords", {}) or {})
    kw.pop("device", None)
    return ", ".join(f"{k}={v}" for k, v in sorted(kw.items())) or getattr(factory, "__name__", "custom")


class PieSuite(LazyComponents):
    """PIE-Bench's structure distance, background PSNR / LPIPS / MSE / SSIM and CLIP similarity (whole, edited).

    dino(device=) -> DinoKeysEncoder; clip(device=) -> ClipEncoder; lpips(device=) -> LpipsDistance. A component
    set to None drops its columns. `psnr_cap`: dB at which PSNR is capped (None: +inf for an unchanged background,
    as torchmetrics gives). `ssim_crop`: average the SSIM map without its 5 px border, as the torchmetrics of
    PIE-Bench's numbers did (false: as torchmetrics does since September 2024).
    """

    info = MetricInfo("pie", VERSION, True, description="PIE-Bench: structure distance, background PSNR / LPIPS / "
                      "MSE / SSIM, CLIP similarity (whole, edited)")

    def __init__(self, *, dino: Callable[..., Any] | None = None, clip: Callable[..., Any] | None = None,
                 lpips: Callable[..., Any] | None = None, device: str = "auto", batch_size: int = 16,
                 chunk_size: int = 64, psnr_cap: float | None = DEFAULT_PSNR_CAP, ssim_crop: bool = True, load_threads: int | None = None,
                 prefetch: bool = False) -> None:
        from benchmark.metrics.chunking import check_loading

        if batch_size < 1 or chunk_size < 1:
            raise ValueError(f"batch_size and chunk_size must be >= 1 (got {batch_size}, {chunk_size})")
        if psnr_cap is not None and (isinstance(psnr_cap, bool) or not float(psnr_cap) > 0):
            raise ValueError(f"psnr_cap must be a positive number of dB or null (no cap), got {psnr_cap!r}")
        self._factories = {"dino": dino, "clip": clip, "lpips": lpips}
        self.device = resolve_device(device)
        self.batch_size, self.chunk_size = batch_size, chunk_size
        self.load_threads, self.prefetch = check_loading(load_threads, prefetch)
        if not isinstance(ssim_crop, bool):
            raise ValueError(f"ssim_crop must be true or false, got {ssim_crop!r}")
        self.psnr_cap = None if psnr_cap is None else float(psnr_cap)
        self.ssim_crop = ssim_crop
        off = {c for comp, cols in NEEDS.items() if self._factories[comp] is None for c in cols}
        self.columns = tuple(c for c in COLUMN_INFO if c not in off)
        self.column_info = {c: COLUMN_INFO[c] for c in self.columns} | SUMMARY_INFO
        self.count_columns = tuple(SUMMARY_INFO)  # counts of rows, shown as counts, never the section's headline
        self._models: dict[str, Any] = {}
        self.timings: dict[str, float] = {}

    def components(self) -> dict[str, str]:
        """The configured components (recorded in every leaderboard row)."""
        return {n: _component_id(f) for n, f in self._factories.items()} | {"psnr_cap": str(self.psnr_cap),
                                                                                 "ssim_crop": str(self.ssim_crop)}

    applies_note = "has an edit mask (PIE-Bench's background metrics need one)"  # the preflight's refusal

    def applies_to(self, query: Query, prompt_kind: str) -> bool:
        """Queries with an edit mask (the background metrics need it), of either editor family."""
        return bool(query.edit_mask)

    def model_seconds(self) -> dict[str, float]:
        return {k: v for k, v in self.timings.items() if "forward" in k}

    # -- scoring ----------------------------------------------------------------------------------------------
    def _features(self, name: str, inputs: list[Any]) -> list[Any]:
        from benchmark.metrics.features import embed_images

        return embed_images(self._get(name), inputs, batch_size=self.batch_size,
                            timer=self._timer(f"{name} forward"), steps=self.timings)

    def _structure(self, items: list[_Loaded], rows: list[dict[str, Any]]) -> None:
        from benchmark.metrics.pie.formulas import structure_distance

        feats = self._features("dino", [x for it in items for x in (it.edit, it.source)])
        for row, fe, fs in zip(rows, feats[0::2], feats[1::2], strict=True):
            row["structure_1e3"] = 1e3 * structure_distance(fs, fe)

    def _clip(self, items: list[_Loaded], rows: list[dict[str, Any]]) -> None:
        from benchmark.metrics.conventional.suite import clip_input
        from benchmark.metrics.features import embed_texts
        from benchmark.metrics.pie.formulas import clip_score

        clip = self._get("clip")
        inputs = []
        for it in items:
            inputs += [clip_input(it.edit, clip.image_size), clip_input(it.edit * it.mask.to(it.edit.dtype),
                                                                        clip.image_size)]
        feats = self._features("clip", inputs)
        texts = [t for t in dict.fromkeys(it.query.target_caption for it in items) if t]
        tf = dict(zip(texts, embed_texts(clip, texts, timer=self._timer("clip forward")), strict=True))
        for it, row, whole, edited in zip(items, rows, feats[0::2], feats[1::2], strict=True):
            text = it.query.target_caption
            if not text:
                row["clip_whole"] = row["clip_edited"] = math.nan
                row["clip_note"] = NO_CAPTION
                continue
            row["clip_whole"] = clip_score(whole, tf[text])
            if bool(it.mask.any()):
                row["clip_edited"] = clip_score(edited, tf[text])
            else:
                row["clip_edited"], row["clip_note"] = math.nan, EMPTY_MASK

    def _lpips(self, items: list[_Loaded], rows: list[dict[str, Any]], keep: list[int]) -> None:
        import torch

        lp = self._get("lpips")
        by_shape: dict[tuple[int, ...], list[int]] = {}
        for i in keep:
            by_shape.setdefault(tuple(items[i].edit.shape), []).append(i)
        for idx in by_shape.values():
            for start in range(0, len(idx), self.batch_size):
                chunk = idx[start : start + self.batch_size]
                bg = torch.stack([_background(items[i]) for i in chunk])
                a = torch.stack([items[i].edit for i in chunk]) * bg
                b = torch.stack([items[i].source for i in chunk]) * bg
                d = self._timer("lpips forward")(lambda a=a, b=b: lp.distance(a, b))
                for i, v in zip(chunk, d, strict=True):
                    rows[i]["lpips_bg_1e3"] = 1e3 * float(v)

    def _pixels(self, it: _Loaded, row: dict[str, Any]) -> None:
        from benchmark.metrics.pie.formulas import mse, psnr, ssim

        bg = _background(it)
        e, s = it.edit * bg, it.source * bg
        row["psnr_bg"] = psnr(e, s, self.psnr_cap)
        row["mse_bg_1e4"] = 1e4 * mse(e, s)
        row["ssim_bg_1e2"] = 1e2 * float(ssim(e[None], s[None], crop=self.ssim_crop)[0])

    def score_items(self, items: list[_Loaded]) -> list[dict[str, Any]]:
        """Rows (query_id, status, reason, every column, bg_note, clip_note) of loaded items, in order; a failed
        load becomes a failed row."""
        rows = [{"query_id": it.query.id, "status": "failed", "reason": it.error} for it in items if it.error]
        ok = [it for it in items if not it.error]
        if not ok:
            return rows
        out: list[dict[str, Any]] = [{"query_id": it.query.id, "status": "ok", "reason": "", "bg_note": "",
                                      "clip_note": ""} for it in ok]
        if self._factories["dino"] is not None:
            self._structure(ok, out)
        if self._factories["clip"] is not None:
            self._clip(ok, out)
        keep = []  # queries with a background (the official code writes "nan" for the others)
        for i, (it, row) in enumerate(zip(ok, out, strict=True)):
            if bool(it.mask.all()):
                row["bg_note"] = NO_BACKGROUND
                row.update({c: math.nan for c in BACKGROUND if c in self.columns})
            else:
                keep.append(i)
        if self._factories["lpips"] is not None and keep:
            self._lpips(ok, out, keep)
        t0 = time.perf_counter()
        for i in keep:
            self._pixels(ok[i], out[i])
        self.timings["pixel forward"] = self.timings.get("pixel forward", 0.0) + time.perf_counter() - t0
        return rows + out

    def score_queries(self, queryset: Any, queries: Sequence[Query], edit_paths: Sequence[Path], *, work_dir: Path,
                      num_workers: int = 0, progress: bool = True) -> Iterator[list[dict[str, Any]]]:
        """Yield lists of result rows (one dict per query), chunk by chunk."""
        from benchmark.metrics.chunking import by_source

        qs, paths = by_source(queries, edit_paths)
        yield from self._score_chunks(_Samples(queryset, qs, paths), self.score_items, desc="pie",
                                      num_workers=num_workers, progress=progress)


def _background(it: _Loaded) -> Any:
    """1 - mask as a float (1, H, W) multiplier (1 = background)."""
    return (~it.mask.bool()).to(it.edit.dtype)[None]
