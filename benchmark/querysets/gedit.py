"""GEdit-Bench query set: the Hugging Face release (`stepfun-ai/GEdit-Bench`, split `train`) -> editmeter queries.

GEdit-Bench (Step1X-Edit, arXiv 2504.17761) holds real-world edit requests: 606 edits in 11 task categories, each
with an English and a Chinese instruction (1,212 rows). A row has the features `key`, `task_type`, `instruction`,
`instruction_language` ("en" / "cn"), `input_image` (the release's resized source), `input_image_raw` (the original
upload) and `Intersection_exist` (the row belongs to the "intersection" subset that the official statistics script
reports beside the full set).

Each row becomes one query (an editor gets one instruction; GEdit-Bench scores EN and CN separately): its edit type
is the row's task type namespaced `gedit_` (`TASK_TYPES`), `instruction` is the row's text and `language` its
language ("en" or "zh", the BCP 47 code of GEdit's "cn"); `instruction_en` / `instruction_zh` hold both texts where
the other language's row of the same edit exists (same task type and key; or, where the keys differ, the one row of
the other language with the same source image); `subsets` is ("intersection",) where `Intersection_exist` is true.

The built folder holds every row. `load_gedit` (configs/queryset/gedit.yaml) picks one language (`language: en`,
the default, GEdit-Bench-EN; `cn`; or `both`) and optionally the intersection subset, each a set of its own name
and hash. Source image: `input_image` by default, the image the official scorer compares edits with (its
`_SRCIMG.png`); its example generation script feeds editors `input_image_raw` resized to about 512 x 512 pixels of
area. `image="input_image_raw"` keeps the original uploads instead (larger, slower to edit).

HATIE and EditVal do not apply (no scene graphs, no object annotations): the metrics that do are listed in
`SCORED_BY` and recorded in queryset.json, where the preflight and `editmeter show` read them.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Literal

from benchmark.io.types import GEDIT_TYPES, Query

HUB_ID = "stepfun-ai/GEdit-Bench"
FEATURES = ("key", "task_type", "instruction", "instruction_language", "input_image", "input_image_raw",
            "Intersection_exist")
IMAGE_FEATURES = ("input_image", "input_image_raw")
# the release's task_type values (Step1X-Edit GEdit-Bench/calculate_statistics.py GROUPS) -> editmeter edit types
TASK_TYPES: dict[str, str] = {
    "background_change": "gedit_background_change",
    "color_alter": "gedit_color_alter",
    "material_alter": "gedit_material_alter",
    "motion_change": "gedit_motion_change",
    "ps_human": "gedit_ps_human",
    "style_change": "gedit_style_change",
    "subject-add": "gedit_subject_add",
    "subject-remove": "gedit_subject_remove",
    "subject-replace": "gedit_subject_replace",
    "text_change": "gedit_text_change",
    "tone_transfer": "gedit_tone_transfer",
}
# the release's instruction_language -> Query.language (BCP 47)
LANGUAGES: dict[str, str] = {"en": "en", "cn": "zh"}
SUBSET = "intersection"
# metric configs that score GEdit-Bench (gedit: its official protocol; judge: the probability readout of the same
# VIEScore questions), and the suites that cannot, with why; recorded in queryset.json for the preflight's refusal
# and `editmeter show`
SCORED_BY = ("gedit", "judge", "conventional", "basic")
NOT_SCORED_BY = {"hatie": "no scene graphs", "editval": "no scene graphs"}

assert sorted(TASK_TYPES.values()) == sorted(GEDIT_TYPES)


class GEditFormatError(ValueError):
    """The dataset does not have GEdit-Bench's features or a row is unusable; the message names the row."""


def load_split(dataset: str | os.PathLike[str], split: str, revision: str | None = None) -> Any:
    """A saved dataset folder (`save_to_disk`, a Dataset or a DatasetDict), or a hub id (needs the network)."""
    import datasets
    from benchmark.querysets.hub_split import load_split as load

    ds = load(dataset, split, features=FEATURES, what="GEdit-Bench", error=GEditFormatError, revision=revision,
              hint=f". Is it {HUB_ID}'s {split!r} split? Fetch it with: make data NAME=gedit")
    # images are read as stored bytes and decoded here, so an unreadable one is reported with its row
    return ds.cast_column("input_image", datasets.Image(decode=False)).cast_column(
        "input_image_raw", datasets.Image(decode=False))


def _decode(cell: Any, where: str, feature: str, folder: Path | None) -> Any:
    """The RGB image of one `Image(decode=False)` cell ({'bytes', 'path'}) under `load_rgb`'s rules (pixel limit
    from the header, 16-bit scaled, transparency refused); a cell without bytes names a file, read only when it
    is a regular file inside the saved dataset `folder`. GEditFormatError naming the row."""
    from benchmark.querysets.release import cell_bytes, release_image

    fix = "Re-fetch the dataset (make data NAME=gedit) or drop the row from your local copy"
    if not isinstance(cell, dict) or (cell.get("bytes") is None and not cell.get("path")):
        raise GEditFormatError(f"{where}: {feature} is empty; the row needs an image. {fix}")
    try:
        raw = cell_bytes(cell, where, feature, GEditFormatError, folder)
    except GEditFormatError as err:
        raise GEditFormatError(f"{err}. {fix}") from None
    try:
        return release_image(raw, where, feature, GEditFormatError)
    except GEditFormatError as err:
        raise GEditFormatError(f"{err}. {fix}") from None


def _pixels_digest(im: Any) -> str:
    """sha256 of an RGB image's size and pixels: equal sources share one file, whatever their encoding."""
    h = hashlib.sha256(f"{im.width}x{im.height}\n".encode())
    h.update(im.tobytes())
    return h.hexdigest()


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise GEditFormatError(f"{where}: instruction is empty or not text ({value!r}); every row needs one")
    # unchanged, outer whitespace included: the official scorer quotes the release's text as it is into its prompt
    return value


def build(dataset: str | os.PathLike[str], out_dir: str | os.PathLike[str], *, split: str = "train",
          image: Literal["input_image", "input_image_raw"] = "input_image", revision: str | None = None,
          name: str = "gedit") -> dict[str, Any]:
    """Convert GEdit-Bench into `out_dir` (images/, queries.jsonl, queryset.json): every row, both languages."""
    from benchmark.querysets.release import staged_output

    if image not in IMAGE_FEATURES:
        raise ValueError(f"image must be one of {IMAGE_FEATURES}, got {image!r}")
    ds = load_split(dataset, split, revision)
    with staged_output(out_dir, GEditFormatError) as out:
        return _write(ds, dataset, split, image, revision, name, out)


def _write(ds: Any, dataset: str | os.PathLike[str], split: str, image: str, revision: str | None, name: str,
           out: Path) -> dict[str, Any]:
    """Every row checked and its source written into the staging folder `out`, then the queries."""
    from benchmark.io.imageio import save_png
    from benchmark.querysets.io import check_id, write_built_queryset
    from benchmark.querysets.release import release_text

    folder = Path(dataset) if Path(dataset).is_dir() else None
    cols = {f: list(ds[f]) for f in FEATURES if f not in IMAGE_FEATURES}  # small columns; images row by row
    rows: list[dict[str, Any]] = []
    seen: dict[tuple[str, str, str], int] = {}
    for i in range(len(ds)):
        key, task, lang = cols["key"][i], cols["task_type"][i], cols["instruction_language"][i]
        where = f"{dataset} [{split}] row {i} (key {key!r}, task_type {task!r}, language {lang!r})"
        if task not in TASK_TYPES:
            raise GEditFormatError(f"{where}: unknown task_type {task!r}; GEdit-Bench's are {sorted(TASK_TYPES)}. "
                                   "A newer release? Add its types to TASK_TYPES in benchmark/querysets/gedit.py "
                                   "and GEDIT_TYPES in benchmark/io/types.py")
        if lang not in LANGUAGES:
            raise GEditFormatError(f"{where}: unknown instruction_language {lang!r}; expected one of "
                                   f"{sorted(LANGUAGES)}")
        flag = cols["Intersection_exist"][i]
        if not isinstance(flag, bool):
            raise GEditFormatError(f"{where}: Intersection_exist must be true or false, got {flag!r}")
        qid = f"gedit-{lang}-{TASK_TYPES[task].removeprefix('gedit_')}-{key}"
        release_text(key, where, "key", GEditFormatError)
        try:
            check_id(str(key), "key", why="keys become query ids and file names")
            check_id(qid)
        except ValueError as err:
            raise GEditFormatError(f"{where}: {err}") from None
        if (lang, task, key) in seen:
            raise GEditFormatError(f"{where}: duplicate (language, task_type, key); first on row "
                                   f"{seen[(lang, task, key)]}")
        seen[(lang, task, key)] = i
        release_text(cols["instruction"][i], where, "instruction", GEditFormatError, allow_empty=True)
        text = _text(cols["instruction"][i], where)
        rgb = _decode(ds[i][image], where, image, folder)
        digest = _pixels_digest(rgb)[:20]
        rel = f"images/{digest}.png"
        if not (out / rel).is_file():
            save_png(rgb, out / rel)
        rows.append({"row": i, "id": qid, "key": str(key), "task": task, "lang": LANGUAGES[lang], "text": text,
                     "image": rel, "image_id": digest, "intersection": flag})
    if not rows:
        raise GEditFormatError(f"{dataset} [{split}]: no rows")
    pairs = _pair(rows)
    queries = []
    for r in rows:
        texts = {r["lang"]: r["text"]}
        if r["id"] in pairs:
            other = pairs[r["id"]]
            texts[other["lang"]] = other["text"]
        queries.append(Query(id=r["id"], image=r["image"], image_id=r["image_id"], edit_type=TASK_TYPES[r["task"]],
                             instruction=r["text"], language=r["lang"], instruction_en=texts.get("en"),
                             instruction_zh=texts.get("zh"), subsets=(SUBSET,) if r["intersection"] else ()))
    queries.sort(key=lambda q: q.id)
    by_lang = Counter(q.language for q in queries)
    return write_built_queryset(
        out, queries, name=name, error=GEditFormatError,
        description=f"GEdit-Bench ({split} split, {len(queries)} instructions: {dict(by_lang)}): source image and "
                    "instruction per row, English and Chinese kept, converted by benchmark.querysets.gedit.",
        license="MIT (GEdit-Bench dataset card)",
        source={"dataset": str(dataset), "split": split, "revision": revision, "image": image},
        scored_by=list(SCORED_BY), not_scored_by=dict(NOT_SCORED_BY),
        task_types=dict(TASK_TYPES), languages=dict(LANGUAGES),
        counts={"by_language": dict(by_lang),
                "intersection": dict(Counter(q.language for q in queries if SUBSET in q.subsets)),
                "pairs": {"by_key": pairs.by_key, "by_image": pairs.by_image,
                          "unpaired": len(queries) - 2 * (pairs.by_key + pairs.by_image)}})


class _Pairs(dict):
    """query id -> the row of the same edit in the other language; counts how each pair was found."""

    by_key = 0
    by_image = 0


def _pair(rows: list[dict[str, Any]]) -> _Pairs:
    """EN <-> ZH rows of one edit: same task type and key; among the rest, the only row of each language with the
    same task type and source image (never a guess between several)."""
    out = _Pairs()
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[(r["task"], r["key"])].append(r)
    for group in groups.values():
        by_lang = {r["lang"]: r for r in group}
        if len(group) == 2 and set(by_lang) == {"en", "zh"}:
            out[by_lang["en"]["id"]], out[by_lang["zh"]["id"]] = by_lang["zh"], by_lang["en"]
            out.by_key += 1
    rest: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r["id"] not in out:
            rest[(r["task"], r["image_id"])].append(r)
    for group in rest.values():
        langs = Counter(r["lang"] for r in group)
        if len(group) == 2 and langs == Counter({"en": 1, "zh": 1}):
            en, zh = sorted(group, key=lambda r: r["lang"])
            out[en["id"]], out[zh["id"]] = zh, en
            out.by_image += 1
    return out


def load_gedit(root: str | os.PathLike[str], name: str = "gedit", build: str | None = None,
               language: Literal["en", "cn", "zh", "both"] = "en", subset: Literal["full", "intersection"] = "full",
               sample: int | float | None = None, sample_seed: int = 0, sample_types: Any = None) -> Any:
    """The built GEdit-Bench folder as a query set: one `language` (en, cn, or both) and `subset` (full, or the
    intersection subset), each a set of its own name (`gedit-en`, `gedit-cn-intersection`, ...) and hash;
    `sample` draws a seeded stratified sample of that selection (docs/querysets.md#samples)."""
    from benchmark.querysets.io import QuerySetError, load_queryset, selected_set

    langs = {"en": ("en",), "cn": ("zh",), "zh": ("zh",), "both": ("en", "zh")}
    if language not in langs:
        raise QuerySetError(f"queryset.language={language!r}: give en, cn or both")
    if subset not in ("full", SUBSET):
        raise QuerySetError(f"queryset.subset={subset!r}: give full or {SUBSET}")
    full = load_queryset(root, name=name, build=build)
    picked = [q for q in full.queries if q.language in langs[language] and (subset == "full" or SUBSET in q.subsets)]
    if not picked:
        raise QuerySetError(f"{full.root}: no GEdit-Bench query in language {language!r}, subset {subset!r}; "
                            f"rebuild it: {build or 'editmeter data build gedit'}")
    label = name + ("" if language == "both" else f"-{'cn' if language == 'zh' else language}") + (
        f"-{SUBSET}" if subset == SUBSET else "")
    meta = {**full.meta, "selection": {"language": language, "subset": subset}}
    return selected_set(full, picked, label, meta=meta, sample=sample, sample_seed=sample_seed,
                        sample_types=sample_types)
