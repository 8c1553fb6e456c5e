"""MagicBrush query set: a Hugging Face `datasets` split -> editmeter queries with ground truth.

MagicBrush rows (hub id `osunlp/MagicBrush`, splits train / dev; the test split is distributed separately and can be
saved as a local dataset in the same features) have `img_id`, `turn_index`, `source_img`, `mask_img`, `instruction`
and `target_img`. Each kept row becomes one `free_form` query (MagicBrush edits have no type) with the source image,
the instruction, the free-form mask as `edit_mask` and the ground-truth `target_image`, which the metrics that
compare with a reference (L1 / PSNR / SSIM inside the mask, MagicBrush's own protocol) use.

Captions: the hub splits (train / dev) carry none, but the test split's `global_descriptions.json` (MagicBrush's
own evaluation reads it for CLIP-T) has one per image of each session: `{img_id: {"<img_id>-input.png": ...,
"<img_id>-output<t>.png": ...}}`. Given with `captions=`, turn t's query gets the caption of its input image as
`source_caption` (`-input.png` for turn 1, else `-output<t-1>.png`) and that of its ground truth as `target_caption`
(`-output<t>.png`, the text the script's CLIP-T compares with); a caption missing for a kept row is an error.

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


def caption_files(img_id: str, turn: int) -> tuple[str, str]:
    """The file names whose `global_descriptions.json` captions are turn `turn`'s source and target captions."""
    return (f"{img_id}-input.png" if turn == 1 else f"{img_id}-output{turn - 1}.png"), f"{img_id}-output{turn}.png"


def load_captions(path: str | os.PathLike[str]) -> dict[str, dict[str, str]]:
    """MagicBrush's `global_descriptions.json`: {img_id: {file name: caption}}; a malformed file is an error."""
    import json

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise MagicBrushFormatError(f"captions file {path}: {err}") from None
    if not isinstance(data, dict) or not all(
            isinstance(v, dict) and all(isinstance(c, str) for c in v.values()) for v in data.values()):
        raise MagicBrushFormatError(f"captions file {path}: expected {{img_id: {{file name: caption}}}}, as the "
                                    "test split's global_descriptions.json")
    return data


def build(dataset: str | os.PathLike[str], out_dir: str | os.PathLike[str], *, split: str = "dev",
          turns: Literal["first", "all"] = "first", name: str = "magicbrush",
          captions: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Convert one MagicBrush split into `out_dir` (images/, edit_masks/, targets/, queries.jsonl); `captions`: the
    split's `global_descriptions.json`, whose captions become each query's source and target captions."""
    from benchmark.imageio import save_mask, save_png
    from benchmark.querysets.io import check_id, write_built_queryset

    if turns not in ("first", "all"):
        raise ValueError(f"turns must be 'first' or 'all', got {turns!r}")
    out = Path(out_dir)
    ds = load_split(dataset, split)
    descriptions = load_captions(captions) if captions is not None else None
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
        text = {}
        if descriptions is not None:
            files = caption_files(str(row["img_id"]), int(row["turn_index"]))
            got = [descriptions.get(str(row["img_id"]), {}).get(f, "") for f in files]
            if not all(c.strip() for c in got):
                missing = [f for f, c in zip(files, got, strict=True) if not c.strip()]
                raise MagicBrushFormatError(f"{where}: {captions} has no caption for {', '.join(missing)}")
            text = {"source_caption": " ".join(got[0].split()), "target_caption": " ".join(got[1].split())}
        region = edit_region(mask_img)
        empty_masks += int(not region.any())
        save_png(src.convert("RGB"), out / "images" / f"{qid}.png")
        save_png(tgt.convert("RGB"), out / "targets" / f"{qid}.png")
        save_mask(region, out / "edit_masks" / f"{qid}.png")
        queries.append(Query(id=qid, image=f"images/{qid}.png", image_id=str(row["img_id"]), edit_type="free_form",
                             instruction=" ".join(str(row["instruction"]).split()), edit_mask=f"edit_masks/{qid}.png",
                             target_image=f"targets/{qid}.png", **text))
    if not queries:
        raise MagicBrushFormatError(f"{dataset} [{split}]: no rows with turn_index 1")
    queries.sort(key=lambda q: q.id)
    return write_built_queryset(
        out, queries, name=name,
        description=f"MagicBrush ({split} split, {'first turn' if turns == 'first' else 'all turns'}): source "
                    "image, instruction, free-form mask and ground-truth target, converted by "
                    "benchmark.querysets.magicbrush.",
        license="CC BY 4.0 (MagicBrush)",
        source={"dataset": str(dataset), "split": split, "turns": turns}
        | ({"captions": str(captions)} if captions is not None else {}),
        mask_rule=f"transparent pixels if the mask has transparency, else pixels with every channel >= {WHITE_MIN}",
        counts={"turns": dict(Counter(q.id.rsplit("-t", 1)[1] for q in queries)), "empty_masks": empty_masks})
