"""RISEBench query set: a local copy of either release of PhoenixZ810/RISEBench -> editmeter queries.

RISEBench (Zhao et al., "Envisioning Beyond the Pixels", arXiv 2504.02826) asks for reasoning-informed edits in
four categories: temporal, causal, spatial and logical reasoning. Two releases share one format, a JSON list of
samples whose image paths are relative to an image root holding `<category>_images/`:
- RISEBench-64, in the repository: `data/data_total.json` with `data/<category>_images/` beside it;
- RISEBench-360, the Hugging Face dataset PhoenixZ/RISEBench: `datav2_total_w_subtask.json`, and `data.zip`, which
  unpacks to `data/<category>_images/`.
A sample has `index` (its name; the official scorer looks for the edit as `<index>.png`), `category`,
`instruction`, `image` (the source) and, as its category needs, `reference` (the intended result in words),
`reference_img` (the intended result, or a puzzle's answer, as an image), `reference_txt` (a logical answer in
words), `subtask` (RISEBench-360) and the flags `consistency_free`, `reasoning_img`, `reasoning_wo_ins`.

Each sample becomes one query `rise-<index>`: `edit_type` the category namespaced `rise_` (`CATEGORIES`),
`instruction` as released (the official judge quotes it unchanged), `image` the source decoded once and stored
losslessly as RGB, `reference_image` the reference image as the official judge request sees it (PIL's
`convert("RGB")` of an RGBA or palette file: its alpha dropped, never composited). What the judge needs and the
editor must never see is in `judge_hints`: the reference texts, the subtask, and for each flag column of the file
its cell as JSON text ("nan" where the sample has none: the official script reads the file as one pandas table and
tests these cells with `pd.isna`, and one test looks at the column's presence only).

`build` checks every sample and image before it writes anything; a sample that the official script could not judge
(no reference for its category, an unknown category) or that would be unsafe (an index that is not a file name, an
image path leaving the image root, an unreadable or transparent source) is refused, and the error names every
refused sample and their count. Nothing is dropped silently.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

from benchmark.io.types import RISE_TYPES, Query

SOURCE_REPO = "PhoenixZ810/RISEBench"
HUB_ID = "PhoenixZ/RISEBench"
# the release's category -> editmeter edit type
CATEGORIES: dict[str, str] = {"temporal_reasoning": "rise_temporal", "causal_reasoning": "rise_causal",
                              "spatial_reasoning": "rise_spatial", "logical_reasoning": "rise_logical"}
FLAGS = ("consistency_free", "reasoning_img", "reasoning_wo_ins")
TEXTS = ("reference", "reference_txt", "subtask")
KNOWN = ("index", "category", "instruction", "image", "reference_img", *FLAGS, *TEXTS)
# samples per category of the two releases (README; data/data_total.json at the pinned commit)
RELEASE_COUNTS: dict[str, dict[str, int]] = {
    "RISEBench-64": {"temporal_reasoning": 16, "causal_reasoning": 16, "spatial_reasoning": 16,
                     "logical_reasoning": 16},
    "RISEBench-360": {"temporal_reasoning": 85, "causal_reasoning": 90, "spatial_reasoning": 100,
                      "logical_reasoning": 85},
}
SCORED_BY = ("rise", "conventional", "basic")
NOT_SCORED_BY = {"hatie": "no scene graphs", "editval": "no scene graphs",
                 "gedit": "GEdit-Bench's prompts and groups", "imgedit": "ImgEdit-Bench's per-type prompts"}
MAX_LISTED = 10

assert sorted(CATEGORIES.values()) == sorted(RISE_TYPES)


class RiseFormatError(ValueError):
    """The files are not a RISEBench release or samples are unusable; the message names every refused sample."""


def read_samples(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The release's JSON list of samples (objects), read under the release rules (`release.read_json`: a key
    repeated inside an object refused, bounded numbers and depth)."""
    path = Path(path)
    if not path.is_file():
        raise RiseFormatError(f"{path}: not found. Fetch it with `make data NAME=rise` (RISEBench-360), or give "
                              f"data/data_total.json of a {SOURCE_REPO} checkout (RISEBench-64)")

    from benchmark.querysets.release import read_json

    # the release rules: bounded numbers and depth, a key twice in one object refused, no lone surrogate
    raw = read_json(path, RiseFormatError)
    if not isinstance(raw, list) or not raw or not all(isinstance(s, dict) for s in raw):
        raise RiseFormatError(f"{path}: must hold a non-empty JSON list of sample objects (RISEBench's "
                              "data_total.json / datav2_total_w_subtask.json)")
    return raw


def find_image_root(data: Path) -> Path:
    """Where the release's image paths start: the JSON's folder (RISEBench-64's data/) or its data/ subfolder
    (RISEBench-360's unpacked data.zip), whichever holds a `<category>_images/` folder."""
    for root in (data.parent, data.parent / "data"):
        if any((root / f"{c}_images").is_dir() for c in CATEGORIES):
            return root
    raise RiseFormatError(f"{data}: neither {data.parent} nor {data.parent / 'data'} holds a <category>_images/ "
                          "folder (e.g. temporal_reasoning_images/); unpack data.zip beside the JSON file, or give "
                          "--images the folder that holds them")


def _inside(root: Path, rel: str, what: str) -> Path:
    from benchmark.querysets.io import check_relpath

    check_relpath(rel, what)
    path = root / rel
    real, top = os.path.realpath(path), os.path.realpath(root)
    if not real.startswith(top.rstrip(os.sep) + os.sep):
        raise ValueError(f"{what} {rel!r} leads outside the image root {root} (a link?)")
    if not path.is_file():
        raise ValueError(f"{what} {path} not found; the release copy is incomplete")
    return path


def _reference_rgb(path: Path) -> Any:
    """The reference image as the official request encodes it: RGBA / palette converted to RGB (alpha dropped)."""
    from PIL import Image

    from benchmark.io.imageio import LIMITS, ImageInputError

    try:
        with Image.open(path) as im:
            if im.width * im.height > LIMITS.max_pixels:
                raise ImageInputError(f"{path}: {im.width}x{im.height} pixels, over the limit {LIMITS.max_pixels}")
            im.load()
            return im.convert("RGB")
    except (OSError, ValueError, Image.DecompressionBombError) as err:
        raise ImageInputError(f"{path}: not a readable image ({type(err).__name__}: {err})") from None


def _pixels_digest(im: Any) -> str:
    h = hashlib.sha256(f"{im.width}x{im.height}\n".encode())
    h.update(im.tobytes())
    return h.hexdigest()


def _cell(value: Any) -> str:
    """A flag cell as the official pandas table holds it, as JSON text ("null" for None)."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _check(sample: dict[str, Any], where: str, columns: set[str]) -> dict[str, str]:
    """The sample's judge hints; ValueError naming what makes it unusable."""
    from benchmark.querysets.io import check_id, check_text

    index = sample.get("index")
    if isinstance(index, bool) or not isinstance(index, str | int):
        raise ValueError(f"index must be a name, got {index!r}")
    check_id(str(index), "index", why="it names the edit's file, as the official scorer finds it")
    if sample.get("category") not in CATEGORIES:
        raise ValueError(f"category {sample.get('category')!r} is not one of RISEBench's {sorted(CATEGORIES)}")
    text = sample.get("instruction")
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"instruction must be non-empty text, got {text!r}")
    check_text(text, "instruction")
    unknown = sorted(set(sample) - set(KNOWN))
    if unknown:
        raise ValueError(f"unknown field(s) {unknown}: a newer release? Add what they mean to "
                         "benchmark/querysets/rise.py and metrics=rise before using it")
    hints: dict[str, str] = {}
    for name in TEXTS:
        value = sample.get(name)
        if value is None:
            continue
        if not isinstance(value, str):
            raise ValueError(f"{name} must be text, got {value!r}")
        hints[name] = check_text(value, name)
    for name in FLAGS:
        if name in columns:  # every sample of the file gets the column, as in the official pandas table
            hints[name] = _cell(sample[name]) if name in sample else "nan"
    if sample.get("reference_img") is not None:
        hints["reference_img"] = "true"
    elif "reference_img" in columns:
        hints["reference_img"] = "nan"
    from benchmark.io.rise_protocol import Prompts, requests_for

    stand_in = Prompts(texts=_FORMAT_CHECK, commit="", sha256="")
    requests_for(CATEGORIES[sample["category"]], text, hints, stand_in)  # refuses what the official cannot judge
    return hints


# prompts that only need the official placeholders: `requests_for` on them checks a sample's fields
_FORMAT_CHECK = {n: "{instruct}" for n in (
    "prompt_consist", "prompt_reasoning", "prompt_reasoning_w_input", "prompt_generation", "prompt_spatial_ref",
    "prompt_spatial_ref_img", "prompt_spatial_ref_w_input", "prompt_spatial_qual", "prompt_spatial_cons",
    "prompt_logical_cons_ans", "prompt_logical_cons", "prompt_logical_txt", "prompt_logical_img",
    "prompt_logical_img_wo_q")}


def build(data: str | os.PathLike[str], out_dir: str | os.PathLike[str], *, images: str | os.PathLike[str] | None = None,
          name: str = "rise") -> dict[str, Any]:
    """Convert a RISEBench release (`data`: its JSON list; `images`: the image root, found beside it by default) into
    `out_dir` (images/, queries.jsonl, queryset.json), built in a staging folder moved into place only when
    everything passed (`release.staged_output`)."""
    from benchmark.querysets.release import staged_output

    with staged_output(out_dir, RiseFormatError) as out:
        return _build(Path(data), out, images, name)


def _build(data: Path, out: Path, images: str | os.PathLike[str] | None, name: str) -> dict[str, Any]:
    from benchmark.io.filehash import sha256_file
    from benchmark.io.imageio import ImageInputError, load_rgb, save_png
    from benchmark.querysets.io import write_built_queryset

    samples = read_samples(data)
    columns = {k for s in samples for k in s}
    root = find_image_root(data) if images is None else Path(images)
    if not root.is_dir():
        raise RiseFormatError(f"{root}: not a folder; give --images the folder that holds <category>_images/")
    refused: list[str] = []
    kept: list[tuple[dict[str, Any], dict[str, str], Any, Any]] = []
    seen: dict[str, int] = {}
    for i, sample in enumerate(samples):
        where = f"sample {i} (index {sample.get('index')!r})"
        try:
            hints = _check(sample, where, columns)
            index = str(sample["index"])
            if index in seen:
                raise ValueError(f"index {index!r} also names sample {seen[index]}")
            seen[index] = i
            src = _inside(root, sample.get("image"), "image")
            source = load_rgb(src)  # the harness's source rules: pixel limit from the header, no transparency
            reference = None
            if sample.get("reference_img") is not None:
                reference = _reference_rgb(_inside(root, sample["reference_img"], "reference_img"))
        except (ValueError, ImageInputError) as err:
            refused.append(f"{where}: {err}")
            continue
        kept.append((sample, hints, source, reference))
    if refused:
        listed = "\n  ".join(refused[:MAX_LISTED])
        more = f"\n  ... and {len(refused) - MAX_LISTED} more" if len(refused) > MAX_LISTED else ""
        raise RiseFormatError(f"{data}: {len(refused)} of {len(samples)} samples refused; nothing was written. Fix "
                              f"or remove them in your copy (or re-fetch the release):\n  {listed}{more}")
    queries = []
    for sample, hints, source, reference in kept:
        digest = _pixels_digest(source)[:20]
        rel = f"images/{digest}.png"
        if not (out / rel).is_file():
            save_png(source, out / rel)
        ref_rel = None
        if reference is not None:
            ref_rel = f"references/{_pixels_digest(reference)[:20]}.png"
            if not (out / ref_rel).is_file():
                save_png(reference, out / ref_rel)
        queries.append(Query(id=f"rise-{sample['index']}", image=rel, image_id=digest,
                             edit_type=CATEGORIES[sample["category"]], instruction=sample["instruction"],
                             reference_image=ref_rel, judge_hints=tuple(sorted(hints.items()))))
    by_cat = Counter(s["category"] for s in samples)
    release = next((r for r, counts in RELEASE_COUNTS.items() if dict(by_cat) == counts), None)
    return write_built_queryset(
        out, queries, name=name, error=RiseFormatError,
        description=f"RISEBench ({release or f'{len(queries)} samples, NOT a full release'}): source image, "
                    "instruction and the judge's references per sample, converted by benchmark.querysets.rise.",
        license=f"as stated by {SOURCE_REPO} / {HUB_ID} (fetched, never redistributed)",
        source={"data": str(data), "data_sha256": sha256_file(data), "images": str(root)},
        release=release, full_release=release is not None, scored_by=list(SCORED_BY),
        not_scored_by=dict(NOT_SCORED_BY), edit_types=dict(CATEGORIES),
        counts={"by_category": {c: by_cat[c] for c in CATEGORIES if by_cat[c]},
                "subtasks": dict(Counter(s["subtask"] for s in samples if isinstance(s.get("subtask"), str))),
                "reference_images": sum(r is not None for *_, r in kept)})
