"""PIE-Bench query set: the authors' release folder (`mapping_file.json` + `annotation_images/`) -> editmeter queries.

PIE-Bench (Ju et al., "PnP Inversion", ICLR 2024; github.com/cure-lab/PnPInversion) holds 700 images at 512 x 512 in
ten editing types. `mapping_file.json` is an object keyed by a 12-digit id; each entry has `image_path` (relative to
`annotation_images/`), `original_prompt` and `editing_prompt` (the words that differ in `[ ]`), `editing_instruction`,
`editing_type_id` ("0".."9"), `blended_word` (the edited word of each prompt, space-separated) and `mask`.

Each entry becomes one query `pie-<id>`:
- `source_caption` / `target_caption`: the two prompts with every `[` and `]` removed and nothing else changed, which
  is what the official editing scripts feed every description-based method and what its evaluation scores CLIP
  with; `instruction`: `editing_instruction` as given (what its InstructPix2Pix script feeds). Each editor family
  reads its own fields (`benchmark.editing.editor`).
- `edit_type`: `TYPE_IDS[editing_type_id]` (`benchmark.io.types.PIE_TYPES`); `blended_word`: as released (None if "").
- `edit_mask` (`edit_masks/<id>.png`, white = the edit region): `mask` decoded exactly as the official
  `evaluation/evaluate.py` does (`decode_mask`), including its rule that the image's 1-pixel border is edit region.
- `image` (`images/<id>.png`): the source decoded once and stored losslessly as RGB.

The release has no stable URL (the authors' form) and states no data license: it is never redistributed; the
manifest (`datasets/manifests/pie.json`) lists the manual steps. `build` validates the whole folder before it writes
anything the loader would trust, and stops at the first bad entry with its id and the fix.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.io.types import PIE_TYPES, Query

MAPPING_FILE = "mapping_file.json"
IMAGES_DIR = "annotation_images"
IMAGE_SIDE = 512  # the official decoder's fixed mask shape; every source must match it
# editing_type_id -> editmeter edit type (the release's folder names: 0_random_140, 1_change_object_80, ...)
TYPE_IDS: dict[str, str] = {str(i): t for i, t in enumerate(PIE_TYPES)}
# entries per editing type in the authors' release (their README): a folder with other counts is not the full set
RELEASE_COUNTS: dict[str, int] = {"0": 140, "1": 80, "2": 80, "3": 80, "4": 40, "5": 40, "6": 40, "7": 40, "8": 80,
                                  "9": 80}
FIELDS = ("image_path", "original_prompt", "editing_prompt", "editing_instruction", "editing_type_id",
          "blended_word", "mask")
_KEY_RE = re.compile(r"[0-9]{12}")
# metric configs that score PIE-Bench (its own suite first), and the suites that cannot, with why; recorded in
# queryset.json for the preflight's refusal and `editmeter show`
SCORED_BY = ("pie", "conventional", "basic")
NOT_SCORED_BY = {"hatie": "no scene graphs", "editval": "no scene graphs"}


class PieFormatError(ValueError):
    """The folder is not PIE-Bench's release format or an entry is unusable; the message names the entry id."""


def strip_brackets(prompt: str) -> str:
    """The prompt as the official scripts use it: every '[' and ']' removed, nothing else changed."""
    return prompt.replace("[", "").replace("]", "")


def decode_mask(encoded: Any, where: str, side: int = IMAGE_SIDE) -> np.ndarray:
    """Bool (side, side) edit region of a PIE-Bench `mask`: a flat list of `[start, length]` pairs of runs of 1 over
    the row-major image, then the 1-pixel border set to 1 (the official decoder's guard against annotation errors at
    the border). Refuses, naming `where`: a non-list, an odd length, a non-integer, a negative value, a run that
    starts or ends outside the image, and runs that overlap (the official loop would clip or wrap them silently)."""
    total = side * side
    if not isinstance(encoded, list):
        raise PieFormatError(f"{where}: mask must be a list of [start, length] pairs, got {type(encoded).__name__}")
    if len(encoded) % 2:
        raise PieFormatError(f"{where}: mask has an odd number of values ({len(encoded)}); it must be "
                             "[start, length] pairs. Re-download the release's mapping_file.json")
    for i, v in enumerate(encoded):
        if isinstance(v, bool) or not isinstance(v, int):
            raise PieFormatError(f"{where}: mask[{i}] = {v!r} is not an integer; starts and lengths are pixel counts")
        if v < 0:
            raise PieFormatError(f"{where}: mask[{i}] = {v} is negative; starts and lengths are pixel counts")
    runs = sorted(zip(encoded[0::2], encoded[1::2], strict=True))
    flat = np.zeros(total, dtype=bool)
    end_prev, prev = 0, None
    for start, length in runs:
        if start >= total or start + length > total:
            raise PieFormatError(f"{where}: mask run [start {start}, length {length}] leaves the {side} x {side} "
                                 f"image ({total} pixels)")
        if prev is not None and start < end_prev:
            raise PieFormatError(f"{where}: mask runs [start {prev[0]}, length {prev[1]}] and [start {start}, "
                                 f"length {length}] overlap; each pixel belongs to at most one run")
        flat[start:start + length] = True
        end_prev, prev = start + length, (start, length)
    mask = flat.reshape(side, side)
    mask[0, :] = mask[-1, :] = mask[:, 0] = mask[:, -1] = True
    return mask


def read_mapping(data: Path) -> dict[str, dict[str, Any]]:
    """`data/mapping_file.json` as {id: entry}, checked for shape (every field present, types right)."""
    from benchmark.querysets.io import read_keyed_json
    from benchmark.querysets.release import release_text

    path = data / MAPPING_FILE
    if not path.is_file():
        raise PieFormatError(f"{path}: not found. Give --data the release's data folder (it holds {MAPPING_FILE} and "
                             f"{IMAGES_DIR}/); see datasets/manifests/pie.json for how to get it")
    raw = read_keyed_json(path, PieFormatError, "entry id")
    for key, entry in raw.items():
        where = f"{path} entry {key!r}"
        if not _KEY_RE.fullmatch(key):
            raise PieFormatError(f"{where}: ids are 12 digits in the release (e.g. '000000000000'); this one becomes "
                                 "a query id and file names, so it is refused")
        if not isinstance(entry, dict):
            raise PieFormatError(f"{where}: must be an object with {list(FIELDS)}")
        missing = [f for f in FIELDS if f not in entry]
        if missing:
            raise PieFormatError(f"{where}: missing field(s) {missing}; an entry has {list(FIELDS)}")
        for f in FIELDS[:-1]:
            release_text(entry[f], where, f, PieFormatError, allow_empty=True)
        if entry["editing_type_id"] not in TYPE_IDS:
            raise PieFormatError(f"{where}: editing_type_id {entry['editing_type_id']!r} is not one of "
                                 f"{sorted(TYPE_IDS)}")
        for f in ("original_prompt", "editing_prompt"):
            if not strip_brackets(entry[f]).strip():
                raise PieFormatError(f"{where}: {f} is empty; every entry needs both prompts")
    return raw


def _source(data: Path, rel: str, where: str, dirs: dict[str, str] | None = None) -> Any:
    """The entry's source as RGB, refused unless it is a regular file inside annotation_images/ (symlinks that
    leave it refused) readable under `load_rgb`'s rules, at 512 x 512."""
    from benchmark.querysets.release import release_file, release_image

    path = release_file(data / IMAGES_DIR, rel, where, "image_path", PieFormatError, dirs)
    rgb = release_image(path, where, f"image {rel}", PieFormatError)
    if rgb.size != (IMAGE_SIDE, IMAGE_SIDE):
        raise PieFormatError(f"{where}: image {path} is {rgb.size[0]} x {rgb.size[1]}; PIE-Bench's masks are "
                             f"decoded at {IMAGE_SIDE} x {IMAGE_SIDE}, so the source must be that size (not resized "
                             "here: the mask would no longer match)")
    return rgb


def build(data: str | os.PathLike[str], out_dir: str | os.PathLike[str], *, name: str = "pie") -> dict[str, Any]:
    """Convert the release folder `data` into `out_dir` (images/, edit_masks/, queries.jsonl, queryset.json),
    built in a staging folder and moved into place only when every entry passed (`release.staged_output`)."""
    from benchmark.querysets.release import staged_output

    data = Path(data)
    mapping = read_mapping(data)
    with staged_output(out_dir, PieFormatError) as out:
        return _write(data, mapping, out, name)


def _write(data: Path, mapping: dict[str, dict[str, Any]], out: Path, name: str) -> dict[str, Any]:
    """One pass over the entries into the staging folder `out`: each mask decoded and each source read once, both
    written at once (nothing held: memory stays one entry's); a bad entry stops the build, whose staging folder is
    then removed."""
    from benchmark.io.imageio import save_mask, save_png
    from benchmark.querysets.io import write_built_queryset

    queries = []
    mask_means: list[float] = []  # one float per entry; the masks themselves are not kept
    dirs: dict[str, str] = {}  # each source folder's real path, resolved once
    for key in sorted(mapping):
        entry = mapping[key]
        where = f"{data / MAPPING_FILE} entry {key!r}"
        mask = decode_mask(entry["mask"], where)
        rgb = _source(data, entry["image_path"], where, dirs)
        save_png(rgb, out / "images" / f"{key}.png")
        save_mask(mask, out / "edit_masks" / f"{key}.png")
        mask_means.append(float(mask.mean()))
        queries.append(Query(
            id=f"pie-{key}", image=f"images/{key}.png", image_id=key, edit_type=TYPE_IDS[entry["editing_type_id"]],
            instruction=entry["editing_instruction"],
            source_caption=strip_brackets(entry["original_prompt"]), target_caption=strip_brackets(entry["editing_prompt"]),
            edit_mask=f"edit_masks/{key}.png", blended_word=entry["blended_word"] or None))
    by_id = Counter(e["editing_type_id"] for e in mapping.values())
    full = dict(by_id) == RELEASE_COUNTS
    return write_built_queryset(
        out, queries, name=name, error=PieFormatError,
        description=f"PIE-Bench ({len(queries)} of the release's {sum(RELEASE_COUNTS.values())} entries"
                    f"{'' if full else '; NOT the full release'}): source image, both prompts (brackets removed), "
                    "instruction and edit mask per entry, converted by benchmark.querysets.pie.",
        license="none stated by the authors (obtained through their form; not redistributed)",
        source={"data": str(data), "mapping_file": MAPPING_FILE},
        full_release=full, scored_by=list(SCORED_BY), not_scored_by=dict(NOT_SCORED_BY),
        type_ids=dict(TYPE_IDS),
        mask_rule="official evaluate.py mask_decode: [start, length] runs over the row-major 512 x 512 image, "
                  "then the 1-pixel border set to 1; white = the edit region",
        prompt_rule="'[' and ']' removed from original_prompt / editing_prompt, nothing else changed",
        counts={"by_type_id": {k: by_id[k] for k in sorted(by_id)},
                "empty_instructions": sum(not q.instruction.strip() for q in queries),
                "no_blended_word": sum(q.blended_word is None for q in queries),
                "mask_pixels_mean": float(np.mean(mask_means))})
