"""MagicBrush query set: a Hugging Face `datasets` split -> editmeter queries with ground truth.

MagicBrush rows (hub id `osunlp/MagicBrush`, splits train / dev; the test split is distributed separately and can be
saved as a local dataset in the same features) have `img_id`, `turn_index`, `source_img`, `mask_img`, `instruction`
and `target_img`. Each kept row becomes one `free_form` query (MagicBrush edits have no type) with the source image,
the instruction, the free-form mask as `edit_mask` and the ground-truth `target_image`, which the metrics that
compare with a reference (L1 / PSNR / SSIM inside the mask, MagicBrush's own protocol) use.

Turns: by default only turn 1 (the edit of the real COCO image). `turns="all"` keeps every turn as its own query,
whose source is the dataset's source image for that turn (the previous turn's ground truth).

Mask rule (the card: "free-form mask image (white region)"): an image with transparency marks the edit region by
its transparent pixels; otherwise the edit region is the white pixels (every channel >= `WHITE_MIN`). The rule used
is recorded in queryset.json.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any, Literal

import numpy as np

from benchmark.types import Query

WHITE_MIN = 250
FEATURES = ("img_id", "turn_index", "source_img", "mask_img", "instruction", "target_img")


class MagicBrushFormatError(ValueError):
    """The dataset does not have MagicBrush's features or a row is unusable; the message names the row."""


def edit_region(mask_img: Any) -> np.ndarray:
    """Boolean edit region of a MagicBrush mask image (see the module's mask rule)."""
    if mask_img.mode in ("RGBA", "LA", "PA") or "transparency" in mask_img.info:
        alpha = np.asarray(mask_img.convert("RGBA").getchannel("A"))
        if alpha.min() < 255:
            return alpha < 128
    rgb = np.asarray(mask_img.convert("RGB"))
    return (rgb >= WHITE_MIN).all(axis=2)


def load_split(dataset: str | os.PathLike[str], split: str | None) -> Any:
    """A saved dataset folder (`save_to_disk`, a Dataset or a DatasetDict), or a hub id (needs the network)."""
    from benchmark.querysets.hub_split import load_split as load

    return load(dataset, split, features=FEATURES, what="MagicBrush", error=MagicBrushFormatError)


def build(dataset: str | os.PathLike[str], out_dir: str | os.PathLike[str], *, split: str = "dev",
          turns: Literal["first", "all"] = "first", name: str = "magicbrush") -> dict[str, Any]:
    """Convert one MagicBrush split into `out_dir` (images/, edit_masks/, targets/, queries.jsonl)."""
    from benchmark.imageio import save_mask, save_png
    from benchmark.querysets.io import check_id, write_built_queryset

    if turns not in ("first", "all"):
        raise ValueError(f"turns must be 'first' or 'all', got {turns!r}")
    out = Path(out_dir)
    ds = load_split(dataset, split)
    turn_index = list(ds["turn_index"])  # one small column; images stay on disk until their row is read
    rows = [i for i, t in enumerate(turn_index) if turns == "all" or int(t) == 1]
    queries: list[Query] = []
    seen: set[str] = set()
    empty_masks = 0
    for i in rows:
        row = ds[i]
        where = f"{dataset} [{split}] row {i} (img_id {row['img_id']!r}, turn {row['turn_index']})"
        qid = f"mb-{split}-{row['img_id']}-t{int(row['turn_index'])}"
        try:
            check_id(qid)
        except ValueError as err:
            raise MagicBrushFormatError(f"{where}: {err}") from None
        if qid in seen:
            raise MagicBrushFormatError(f"{where}: duplicate (img_id, turn_index)")
        seen.add(qid)
        src, tgt, mask_img = row["source_img"], row["target_img"], row["mask_img"]
        if src is None or tgt is None or mask_img is None or not str(row["instruction"] or "").strip():
            raise MagicBrushFormatError(f"{where}: needs source_img, target_img, mask_img and an instruction")
        if tgt.size != src.size or mask_img.size != src.size:
            raise MagicBrushFormatError(f"{where}: source {src.size}, target {tgt.size} and mask {mask_img.size} "
                                        "differ in size; editmeter does not resize ground truth silently")
        region = edit_region(mask_img)
        empty_masks += int(not region.any())
        save_png(src.convert("RGB"), out / "images" / f"{qid}.png")
        save_png(tgt.convert("RGB"), out / "targets" / f"{qid}.png")
        save_mask(region, out / "edit_masks" / f"{qid}.png")
        queries.append(Query(id=qid, image=f"images/{qid}.png", image_id=str(row["img_id"]), edit_type="free_form",
                             instruction=" ".join(str(row["instruction"]).split()), edit_mask=f"edit_masks/{qid}.png",
                             target_image=f"targets/{qid}.png"))
    if not queries:
        raise MagicBrushFormatError(f"{dataset} [{split}]: no rows with turn_index 1")
    queries.sort(key=lambda q: q.id)
    return write_built_queryset(
        out, queries, name=name,
        description=f"MagicBrush ({split} split, {'first turn' if turns == 'first' else 'all turns'}): source "
                    "image, instruction, free-form mask and ground-truth target, converted by "
                    "benchmark.querysets.magicbrush.",
        license="CC BY 4.0 (MagicBrush)",
        source={"dataset": str(dataset), "split": split, "turns": turns},
        mask_rule=f"transparent pixels if the mask has transparency, else pixels with every channel >= {WHITE_MIN}",
        counts={"turns": dict(Counter(q.id.rsplit("-t", 1)[1] for q in queries)), "empty_masks": empty_masks})
