"""ConventionalSuite: the metrics every editing paper reports, per query, batched across queries.

Per chunk of queries (sorted by source image): load source, edit, edit mask and ground-truth target (DataLoader
workers), encode every distinct encoder input once through the process-wide feature cache
(`benchmark.metrics.features`, shared with HATIE and any other suite in the process), then compute each query's
columns (`columns.COLUMN_INFO`). Specification: docs/metrics.md.
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
from benchmark.metrics.conventional.columns import ALIASES, COLUMN_INFO, NEEDS, SUMMARY_INFO, VERSION

CLIP_T_TEXT = ("auto", "target_caption", "instruction")
DIRECTION_EPS = 1e-6  # a direction shorter than this (features are unit or O(1) vectors) counts as zero


@dataclass
class _Loaded:
    query: Query
    source: Any = None
    edit: Any = None
    mask: Any = None  # bool (H, W), True = may change; None: the query has no edit mask
    target: Any = None
    error: str = ""
    native: Any = None  # the edit as made, when `edit` is it resized to the source's size (None: the same)

    @property
    def encoded_edit(self) -> Any:
        """The edit the encoders see: as made (MagicBrush's image_eval.py feeds CLIP and DINO the generated image
        itself; each encoder's recipe resizes it), while pixel and LPIPS columns compare `edit`, at the source's
        size."""
        return self.native if self.native is not None else self.edit


class _Samples(QuerySamples):
    """Loads one query's images (runs in DataLoader workers)."""

    def item(self, query: Query) -> _Loaded:
        return _Loaded(query)

    def load(self, out: _Loaded, q: Query, edit_path: Path) -> None:
        import torch

        from benchmark.io.imageio import ImageInputError, load_mask, load_rgb, to_float_tensor
        from benchmark.metrics.sizes import fit_to_source

        (w, h), out.source = self.original(q, lambda img: (img.size, to_float_tensor(img)))
        edit = load_rgb(edit_path)
        # another size: resized to the source's as image_eval.py does before L1 / L2 (or refused when that would
        # stretch it: benchmark.metrics.sizes)
        fitted = fit_to_source(edit, (w, h))
        out.edit = to_float_tensor(fitted)
        if fitted is not edit:
            out.native = to_float_tensor(edit)
        if q.edit_mask:
            out.mask = torch.from_numpy(load_mask(self.queryset.path(q.edit_mask), (w, h)))
        if q.target_image:
            tgt = load_rgb(self.queryset.path(q.target_image))
            if tgt.size != (w, h):
                raise ImageInputError(f"ground-truth target is {tgt.size[0]}x{tgt.size[1]}, source is {w}x{h}")
            out.target = to_float_tensor(tgt)


def clip_input(img: Any, size: int) -> Any:
    """CLIP's input as OpenAI `clip`'s preprocess makes it (MagicBrush's CLIP-I / CLIP-T), bit for bit: the 8-bit
    image, torchvision's `Resize(size, bicubic)` (PIL) and `CenterCrop(size)`, / 255 (`reference_input`). The
    encoder then only normalises: its own resize leaves a `size` x `size` input unchanged."""
    from benchmark.models.reference_input import resize_crop

    return resize_crop(img, size, size)


def cosine(u: Any, v: Any) -> float:
    import torch

    return float(torch.nn.functional.cosine_similarity(u.float(), v.float(), dim=0, eps=1e-8))


def directional(e_img: Any, s_img: Any, s_txt: Any, t_txt: Any, eps: float = DIRECTION_EPS) -> tuple[float, str]:
    """cos(e_img - s_img, t_txt - s_txt) and '' , or (NaN, why) when a direction is (numerically) zero."""
    di, dt = e_img.float() - s_img.float(), t_txt.float() - s_txt.float()
    if float(dt.norm()) <= eps:
        return math.nan, "identical text features (e.g. identical captions)"
    if float(di.norm()) <= eps:
        return math.nan, "identical image features (e.g. identity edit)"
    return cosine(di, dt), ""


def lpips_features(lp: Any, images: Any) -> list[Any]:
    """LPIPS's unit-normalised layer activations of images in [0, 1] (the `lpips` package's own forward, split so
    an image shared by two comparisons goes through the network once)."""
    import lpips
    import torch

    m = lp.model
    with torch.inference_mode():
        return [lpips.normalize_tensor(o) for o in m.net.forward(m.scaling_layer(2 * images.to(lp.device) - 1))]


def lpips_layer_maps(lp: Any, fa: list[Any], fb: list[Any]) -> list[Any]:
    """Per-layer LPIPS distance maps (B, 1, h_l, w_l) between two feature lists: the terms whose spatial means sum to
    the LPIPS distance."""
    import torch

    with torch.inference_mode():
        return [lp.model.lins[k]((a - b) ** 2).float() for k, (a, b) in enumerate(zip(fa, fb, strict=True))]


def lpips_full_and_outside(lp: Any, edit: Any, source: Any, valid: Any) -> tuple[Any, Any]:
    """(LPIPS per sample, LPIPS of the unedited region per sample; NaN where no pixel is valid).

    The full value is LPIPS's usual spatial average. The unedited region's value is the mean of LPIPS's spatial map
    (layer maps upsampled bilinearly to the input size, as `lpips` does with `spatial=True`) over the `valid` pixels
    only. The network's receptive fields reach across the mask border, so the edit's pixels inside the mask are
    first replaced by the source's: the value then depends on the edit's outside pixels only. This is not
    PIE-Bench's zeroing defect: the mean runs over valid pixels, never over the whole image."""
    import torch
    import torch.nn.functional as F

    b = len(edit)
    has = valid.flatten(1).any(dim=1)
    keep = valid.unsqueeze(1).to(edit.dtype)
    filled = (edit * keep + source * (1 - keep))[has]
    feats = lpips_features(lp, torch.cat([edit, source, filled]))
    fe, fs, ff = ([f[:b] for f in feats], [f[b : 2 * b] for f in feats], [f[2 * b :] for f in feats])
    full = sum(mp.mean(dim=(2, 3)) for mp in lpips_layer_maps(lp, fe, fs)).flatten().cpu()
    out = torch.full((b,), float("nan"))
    if has.any():
        h, w = edit.shape[-2:]
        maps = lpips_layer_maps(lp, ff, [f[has.to(f.device)] for f in fs])
        spatial = sum(F.interpolate(mp, size=(h, w), mode="bilinear", align_corners=False) for mp in maps)[:, 0]
        vw = valid[has].double()
        out[has] = ((spatial.cpu().double() * vw).sum(dim=(1, 2)) / vw.sum(dim=(1, 2))).float()
    return full, out


def _component_id(factory: Callable[..., Any] | None) -> str:
    if factory is None:
        return "off"
    kw = dict(getattr(factory, "keywords", {}) or {})
    kw.pop("device", None)
    return ", ".join(f"{k}={v}" for k, v in sorted(kw.items())) or getattr(factory, "__name__", "custom")


class ConventionalSuite(LazyComponents):
    """CLIP-T, CLIP-I, directional CLIP (= MD), DINO (EditVal's and MagicBrush's), LPIPS and pixel statistics,
    with masked (outside the edit mask) and ground-truth-target variants. Learned components are factories
    (called once, lazily, with `device=`); a component set to None drops the columns that need it.

    clip(device=) -> ClipEncoder; dino_ev / dino_mb(device=) -> DinoV1Encoder; lpips(device=) -> LpipsDistance.
    `clip_t_text`: auto (target caption, else the instruction), target_caption or instruction.
    """

    reduced_components = ("clip", "dino_ev", "dino_mb", "lpips")  # every backbone follows `precision`
    info = MetricInfo("conventional", VERSION, True, description="CLIP-T/I, directional CLIP = MD, DINO, LPIPS, "
                      "pixel statistics; masked and ground-truth variants")

    def __init__(self, *, clip: Callable[..., Any] | None = None, dino_ev: Callable[..., Any] | None = None,
                 dino_mb: Callable[..., Any] | None = None, lpips: Callable[..., Any] | None = None,
                 device: str = "auto", batch_size: int = 32, chunk_size: int = 64, clip_t_text: str = "auto",
                 direction_eps: float = DIRECTION_EPS, precision: str = "fp32", load_threads: int | None = None,
                 prefetch: bool = False) -> None:
        from benchmark.metrics.chunking import check_loading
        from benchmark.metrics.precision import check_precision

        if clip_t_text not in CLIP_T_TEXT:
            raise ValueError(f"clip_t_text must be one of {', '.join(CLIP_T_TEXT)}, not {clip_t_text!r}")
        if batch_size < 1 or chunk_size < 1:
            raise ValueError(f"batch_size and chunk_size must be >= 1 (got {batch_size}, {chunk_size})")
        self._factories = {"clip": clip, "dino_ev": dino_ev, "dino_mb": dino_mb, "lpips": lpips}
        self.device = resolve_device(device)
        self.precision = check_precision(precision, self.device, what="metrics conventional")
        self.batch_size, self.chunk_size = batch_size, chunk_size
        self.load_threads, self.prefetch = check_loading(load_threads, prefetch)  # speed only (docs/metrics.md)
        self.clip_t_text, self.direction_eps = clip_t_text, float(direction_eps)
        off = {c for comp, cols in NEEDS.items() if self._factories[comp] is None for c in cols}
        self.columns = tuple(c for c in COLUMN_INFO if c not in off)
        self.column_info = {c: COLUMN_INFO[c] for c in self.columns} | SUMMARY_INFO
        self.count_columns = tuple(SUMMARY_INFO)  # counts of rows, shown as counts, never the section's headline
        self._models: dict[str, Any] = {}
        self.timings: dict[str, float] = {}

    # -- components -------------------------------------------------------------------------------------------
    def components(self) -> dict[str, str]:
        """The configured components (recorded in every leaderboard row)."""
        return {name: _component_id(f) for name, f in self._factories.items()} | {"clip_t_text": self.clip_t_text,
                                                                                 "precision": self.precision}

    def applies_to(self, query: Query, prompt_kind: str) -> bool:
        """Every query of every editor family."""
        return True

    def model_seconds(self) -> dict[str, float]:
        return {k: v for k, v in self.timings.items() if "forward" in k}

    def clip_text(self, q: Query) -> tuple[str, str]:
        """(CLIP-T's text, the query field it comes from); ('', '') when the query has none."""
        if self.clip_t_text in ("auto", "target_caption") and q.target_caption:
            return q.target_caption, "target_caption"
        if self.clip_t_text in ("auto", "instruction") and q.instruction:
            return q.instruction, "instruction"
        return "", ""

    # -- scoring ----------------------------------------------------------------------------------------------
    def _image_features(self, name: str, items: list[_Loaded], prepare: Callable[[Any], Any]
                        ) -> tuple[list[Any], list[Any], list[Any]]:
        """(edit, source, target-or-None) features of every item through the shared cache."""
        from benchmark.metrics.features import embed_images

        enc = self._get(name)
        # an original is one tensor for all of its queries (the loader's memo): prepared and digested once. The
        # inputs keep their order of first appearance, so the batches are those of one input per image.
        inputs, slots, made = [], [], {}
        for it in items:
            for img in (it.encoded_edit, it.source, it.target):
                if img is not None and id(img) not in made:
                    made[id(img)] = len(inputs)
                    inputs.append(prepare(img))
                slots.append(made[id(img)] if img is not None else None)
        feats = embed_images(enc, inputs, batch_size=self.batch_size,
                             timer=self._timer(f"{name} forward"), steps=self.timings)
        got = [feats[s] if s is not None else None for s in slots]
        return got[0::3], got[1::3], got[2::3]

    def _clip_columns(self, items: list[_Loaded], rows: list[dict[str, Any]]) -> None:
        from benchmark.metrics.features import embed_texts

        clip = self._get("clip")
        fe, fs, ft = self._image_features("clip", items, lambda im: clip_input(im, clip.image_size))
        texts = []
        for it in items:
            q = it.query
            texts += [self.clip_text(q)[0], q.source_caption, q.target_caption]
        wanted = [t for t in dict.fromkeys(texts) if t]
        tf = dict(zip(wanted, embed_texts(clip, wanted, timer=self._timer("clip forward")), strict=True))
        for it, row, e, s, t in zip(items, rows, fe, fs, ft, strict=True):
            q = it.query
            text, field = self.clip_text(q)
            row["clip_t"] = cosine(e, tf[text]) if text else math.nan
            row["clip_t_text"] = field
            row["clip_i"] = cosine(e, s)
            if q.source_caption and q.target_caption:
                row["clip_dir"], row["dir_note"] = directional(e, s, tf[q.source_caption], tf[q.target_caption],
                                                               self.direction_eps)
            else:
                row["clip_dir"], row["dir_note"] = math.nan, "no source or target caption"
            row["clip_i_gt"] = cosine(e, t) if t is not None else math.nan

    def _dino_columns(self, name: str, items: list[_Loaded], rows: list[dict[str, Any]]) -> None:
        fe, fs, ft = self._image_features(name, items, lambda im: im)  # the encoder's recipe resizes / crops
        for row, e, s, t in zip(rows, fe, fs, ft, strict=True):
            row[name] = cosine(e, s)
            if name == "dino_mb":
                row["dino_gt"] = cosine(e, t) if t is not None else math.nan

    def _lpips_columns(self, items: list[_Loaded], rows: list[dict[str, Any]]) -> None:
        import torch

        lp = self._get("lpips")
        by_shape: dict[tuple[int, ...], list[int]] = {}
        for i, it in enumerate(items):
            by_shape.setdefault(tuple(it.edit.shape), []).append(i)
        for idx in by_shape.values():
            for start in range(0, len(idx), self.batch_size):
                chunk = idx[start : start + self.batch_size]
                a = torch.stack([items[i].edit for i in chunk])
                b = torch.stack([items[i].source for i in chunk])
                valid = torch.stack([_outside(items[i]) for i in chunk])
                full, out = self._timer("lpips forward")(lambda a=a, b=b, v=valid: lpips_full_and_outside(lp, a, b, v))
                for i, f, o in zip(chunk, full, out, strict=True):
                    rows[i]["lpips"] = float(f)
                    rows[i]["lpips_out"] = float(o)

    @staticmethod
    def _pixel_columns(it: _Loaded, row: dict[str, Any]) -> None:
        import torch

        from benchmark.metrics.pixel import masked_stat

        e, s = it.edit[None], it.source[None]
        everywhere = torch.ones((1, *e.shape[-2:]), dtype=torch.bool)
        row["l1"], row["l2"] = (float(masked_stat(st, e, s, everywhere)[0]) for st in ("l1", "l2"))
        valid = _outside(it)[None]
        for st in ("l1", "l2", "psnr", "ssim"):
            row[f"{st}_out"] = float(masked_stat(st, e, s, valid)[0])
        for st in ("l1", "l2"):
            row[f"{st}_gt"] = float(masked_stat(st, e, it.target[None], everywhere)[0]) if it.target is not None \
                else math.nan

    def score_items(self, items: list[_Loaded]) -> list[dict[str, Any]]:
        """Rows (query_id, status, reason, every column, has_target, has_mask, clip_t_text, dir_note) of loaded
        items, in order; a failed load becomes a failed row."""
        rows = [{"query_id": it.query.id, "status": "failed", "reason": it.error} for it in items if it.error]
        ok = [it for it in items if not it.error]
        if not ok:
            return rows
        out: list[dict[str, Any]] = [{"query_id": it.query.id, "status": "ok", "reason": "",
                                      "has_target": it.target is not None, "has_mask": it.mask is not None}
                                     for it in ok]
        if self._factories["clip"] is not None:
            self._clip_columns(ok, out)
        for name in ("dino_ev", "dino_mb"):
            if self._factories[name] is not None:
                self._dino_columns(name, ok, out)
        if self._factories["lpips"] is not None:
            self._lpips_columns(ok, out)
        t0 = time.perf_counter()
        for it, row in zip(ok, out, strict=True):
            self._pixel_columns(it, row)
        self.timings["pixel forward"] = self.timings.get("pixel forward", 0.0) + time.perf_counter() - t0
        for row in out:
            for alias, canon in ALIASES.items():
                if canon in row:
                    row[alias] = row[canon]
        return rows + out

    def score_queries(self, queryset: Any, queries: Sequence[Query], edit_paths: Sequence[Path], *, work_dir: Path,
                      num_workers: int = 0, progress: bool = True) -> Iterator[list[dict[str, Any]]]:
        """Yield lists of result rows (one dict per query), chunk by chunk."""
        from benchmark.metrics.chunking import by_source

        qs, paths = by_source(queries, edit_paths)
        yield from self._score_chunks(_Samples(queryset, qs, paths), self.score_items, desc="conventional",
                                      num_workers=num_workers, progress=progress)


def _outside(it: _Loaded) -> Any:
    """Pixels outside the edit mask (bool (H, W)); none at all when the query has no mask (its _out columns are
    then NaN: without a mask nothing says which region must stay)."""
    import torch

    if it.mask is None:
        return torch.zeros(it.edit.shape[-2:], dtype=torch.bool)
    return ~it.mask.bool()
