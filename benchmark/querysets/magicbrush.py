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

Turns: by default only turn 1 (the edit of the real COCO image), queries outside any session. `turns="all"` keeps
every turn as its own query, whose source is the dataset's source image for that turn (the previous turn's ground
truth), and groups them into sessions: session `mb-<split>-<img_id>` (one per image, 1-3 turns in the release),
`turn` its `turn_index`. A session whose turns are not 1..n is refused, naming it. protocol=multi_turn edits turn t
from the editor's own edit of turn t-1 instead (benchmark.stages.turns).

The authors' edit script (`edit_cli_single_multi_turn.py`) names its outputs `<img_id>/<img_id>_1.png` for turn 1
(shared by both settings), `<img_id>/<img_id>_iter_<t>.png` for turn t of the multi-turn setting and
`<img_id>/<img_id>_inde_<t>.png` for turn t of the single-turn one (`script_output_name`).

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

from benchmark.io.types import Query

WHITE_MIN = 250
FEATURES = ("img_id", "turn_index", "source_img", "mask_img", "instruction", "target_img")
IMAGE_FEATURES = ("source_img", "mask_img", "target_img")


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
    """A saved dataset folder (`save_to_disk`, a Dataset or a DatasetDict), or a hub id (needs the network); the
    image columns are read as stored bytes and decoded here (`release_image`), so an unreadable one is reported
    with its row."""
    import datasets
    from benchmark.querysets.hub_split import load_split as load

    ds = load(dataset, split, features=FEATURES, what="MagicBrush", error=MagicBrushFormatError)
    for col in IMAGE_FEATURES:
        try:
            ds = ds.cast_column(col, datasets.Image(decode=False))
        except (ValueError, TypeError) as err:
            raise MagicBrushFormatError(f"{dataset} [{split}]: column {col} is not an image column ({err})") from None
    return ds


def _mask(raw: bytes, where: str) -> Any:
    """A mask cell's image (any mode: transparency marks the region), its pixel count refused from the header
    over `load_rgb`'s limit, as a loaded PIL image."""
    import io

    from PIL import Image, UnidentifiedImageError

    from benchmark.io.imageio import ImageInputError, _bomb_error, _check_header

    try:
        with Image.open(io.BytesIO(raw)) as im:
            _check_header(Path("mask_img"), im, "mask")
            im.load()
            return im.copy()
    except ImageInputError as err:
        raise MagicBrushFormatError(f"{where}: {err}") from None
    except Image.DecompressionBombError as err:
        raise MagicBrushFormatError(f"{where}: {_bomb_error(Path('mask_img'), 'mask', err)}") from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, MemoryError) as err:
        raise MagicBrushFormatError(f"{where}: mask_img is not a readable image ({type(err).__name__}: {err})"
                                    ) from None


def session_name(split: str, img_id: str) -> str:
    """The session id of an image's turns (`turns="all"`)."""
    return f"mb-{split}-{img_id}"


def script_output_name(img_id: str, turn: int, protocol: str) -> str:
    """The path, under the authors' `--output_path`, of the edit their `edit_cli_single_multi_turn.py` writes for
    turn `turn` of image `img_id` under `protocol` (single_turn or multi_turn): turn 1 is one file for both
    settings (each setting skips a file that exists), later turns `_iter_` (multi-turn) or `_inde_` (single-turn)."""
    if isinstance(turn, bool) or not isinstance(turn, int) or turn < 1:
        raise ValueError(f"turn must be a whole number from 1, got {turn!r}")
    if protocol not in ("single_turn", "multi_turn"):
        raise ValueError(f"protocol must be single_turn or multi_turn, got {protocol!r}")
    if turn == 1:
        return f"{img_id}/{img_id}_1.png"
    return f"{img_id}/{img_id}_{'iter' if protocol == 'multi_turn' else 'inde'}_{turn}.png"


def caption_files(img_id: str, turn: int) -> tuple[str, str]:
    """The file names whose `global_descriptions.json` captions are turn `turn`'s source and target captions."""
    return (f"{img_id}-input.png" if turn == 1 else f"{img_id}-output{turn - 1}.png"), f"{img_id}-output{turn}.png"


def load_captions(path: str | os.PathLike[str]) -> dict[str, dict[str, str]]:
    """MagicBrush's `global_descriptions.json`: {img_id: {file name: caption}}, read under the release rules (a
    key twice in one object refused, bounded numbers and depth); a malformed file is an error."""
    from benchmark.querysets.release import read_json, release_text

    data = read_json(path, MagicBrushFormatError, what="captions file")
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise MagicBrushFormatError(f"captions file {path}: expected {{img_id: {{file name: caption}}}}, as the "
                                    "test split's global_descriptions.json")
    for img_id, files in data.items():
        for name, caption in files.items():
            release_text(caption, f"captions file {path} [{img_id!r}][{name!r}]", "caption", MagicBrushFormatError,
                         allow_empty=True)
    return data


def build(dataset: str | os.PathLike[str], out_dir: str | os.PathLike[str], *, split: str = "dev",
          turns: Literal["first", "all"] = "first", name: str = "magicbrush",
          captions: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Convert one MagicBrush split into `out_dir` (images/, edit_masks/, targets/, queries.jsonl); `captions`: the
    split's `global_descriptions.json`, whose captions become each query's source and target captions."""
    from benchmark.querysets.release import release_int, staged_output

    if turns not in ("first", "all"):
        raise ValueError(f"turns must be 'first' or 'all', got {turns!r}")
    ds = load_split(dataset, split)
    descriptions = load_captions(captions) if captions is not None else None
    turn_index = list(ds["turn_index"])  # one small column; images stay on disk until their row is read
    for i, t in enumerate(turn_index):
        release_int(t, f"{dataset} [{split}] row {i}", "turn_index", MagicBrushFormatError, minimum=1)
    rows = [i for i, t in enumerate(turn_index) if turns == "all" or t == 1]
    with staged_output(out_dir, MagicBrushFormatError) as out:
        return _write(ds, rows, dataset, split, turns, name, captions, descriptions, out)


def _write(ds: Any, rows: list[int], dataset: Any, split: str, turns: str, name: str, captions: Any,
           descriptions: dict[str, dict[str, str]] | None, out: Path) -> dict[str, Any]:
    """Each kept row checked and written into the staging folder `out`, then the queries."""
    from benchmark.io.imageio import save_mask, save_png
    from benchmark.querysets.io import QuerySetError, check_id, check_sessions, write_built_queryset
    from benchmark.querysets.release import cell_bytes, release_image, release_text

    folder = Path(dataset) if Path(dataset).is_dir() else None
    queries: list[Query] = []
    seen: set[str] = set()
    empty_masks = 0
    for i in rows:
        row = ds[i]
        where = f"{dataset} [{split}] row {i} (img_id {str(row['img_id'])[:40]!r}, turn {row['turn_index']})"
        img_id = release_text(row["img_id"], where, "img_id", MagicBrushFormatError)
        qid = f"mb-{split}-{img_id}-t{row['turn_index']}"
        try:
            check_id(qid)
        except ValueError as err:
            raise MagicBrushFormatError(f"{where}: {err}") from None
        if qid in seen:
            raise MagicBrushFormatError(f"{where}: duplicate (img_id, turn_index)")
        seen.add(qid)
        cells = {c: row[c] for c in IMAGE_FEATURES}
        if any(c is None for c in cells.values()) or row["instruction"] is None or \
                not release_text(row["instruction"], where, "instruction", MagicBrushFormatError,
                                 allow_empty=True).strip():
            raise MagicBrushFormatError(f"{where}: needs source_img, target_img, mask_img and an instruction")
        raw = {c: cell_bytes(cells[c], where, c, MagicBrushFormatError, folder) for c in IMAGE_FEATURES}
        src = release_image(raw["source_img"], where, "source_img", MagicBrushFormatError)
        tgt = release_image(raw["target_img"], where, "target_img", MagicBrushFormatError)
        mask_img = _mask(raw["mask_img"], where)
        if tgt.size != src.size or mask_img.size != src.size:
            raise MagicBrushFormatError(f"{where}: source {src.size}, target {tgt.size} and mask {mask_img.size} "
                                        "differ in size; editmeter does not resize ground truth silently")
        text = {}
        if descriptions is not None:
            files = caption_files(img_id, row["turn_index"])
            got = [descriptions.get(img_id, {}).get(f, "") for f in files]
            if not all(c.strip() for c in got):
                missing = [f for f, c in zip(files, got, strict=True) if not c.strip()]
                raise MagicBrushFormatError(f"{where}: {captions} has no caption for {', '.join(missing)}")
            text = {"source_caption": " ".join(got[0].split()), "target_caption": " ".join(got[1].split())}
        region = edit_region(mask_img)
        empty_masks += int(not region.any())
        save_png(src, out / "images" / f"{qid}.png")
        save_png(tgt, out / "targets" / f"{qid}.png")
        save_mask(region, out / "edit_masks" / f"{qid}.png")
        session = {"session": session_name(split, img_id), "turn": row["turn_index"]} if turns == "all" else {}
        queries.append(Query(id=qid, image=f"images/{qid}.png", image_id=img_id, edit_type="free_form",
                             instruction=" ".join(str(row["instruction"]).split()), edit_mask=f"edit_masks/{qid}.png",
                             target_image=f"targets/{qid}.png", **text, **session))
    if not queries:
        raise MagicBrushFormatError(f"{dataset} [{split}]: no rows with turn_index 1")
    queries.sort(key=lambda q: (q.session or "", q.turn or 0, q.id))  # a session's turns in order, then by id
    try:
        check_sessions(queries)
    except QuerySetError as err:
        raise MagicBrushFormatError(f"{dataset} [{split}]: {err}") from None
    return write_built_queryset(
        out, queries, name=name, error=MagicBrushFormatError,
        description=f"MagicBrush ({split} split, {'first turn' if turns == 'first' else 'all turns'}): source "
                    "image, instruction, free-form mask and ground-truth target, converted by "
                    "benchmark.querysets.magicbrush.",
        license="CC BY 4.0 (MagicBrush)",
        source={"dataset": str(dataset), "split": split, "turns": turns}
        | ({"captions": str(captions)} if captions is not None else {}),
        mask_rule=f"transparent pixels if the mask has transparency, else pixels with every channel >= {WHITE_MIN}",
        counts={"turns": dict(Counter(q.id.rsplit("-t", 1)[1] for q in queries)), "empty_masks": empty_masks})
