"""KRIS-Bench query set: a local copy of the release's `KRIS_Bench/` folder (mercurystraw/Kris_Bench; the Hugging Face
dataset Liang0223/KRIS_Bench) -> editmeter queries.

KRIS-Bench (Wu et al., "KRIS-Bench: Benchmarking Next-Level Intelligent Image Editing Models") holds 1,267 edits in
twenty task folders (the paper lists 22 tasks; lmms-eval's KRIS-Bench task splits temporal prediction into three by
its target frame). Each folder holds its images and
`annotation.json`, an object keyed by a decimal string whose entries have `ori_img` (the source's file name in the
folder; a list of several for `multi-element_composition` and `temporal_prediction`), `gt_img` (a ground-truth image
or ""), `ins_en` (the instruction) and `explain_en` (the real-world knowledge the edit should show, or "").

Each single-source entry becomes one query `kris-<task>-<key>`: `instruction` is `ins_en` as released (unstripped:
the official scripts quote it so), `explanation` is `explain_en` (absent when empty), `edit_type` the task namespaced
`kris_` (`benchmark.io.types.KRIS_TYPES`), `image` the source and `target_image` the ground truth where `gt_img` names
one (viewpoint_change's judge sees it), each decoded once and stored losslessly as RGB (`images/<pixel digest>.png`).

Not supported: an editmeter query holds one source image, so the entries of `multi-element_composition` (2-5 input
images) and `temporal_prediction` (three frames) are skipped; `build` counts them per task with the reason
(`queryset.json`'s `counts.skipped`) and says so on the console. Every other entry and image is checked before
anything is written, and the first bad one stops the build with its task, key and the fix.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from pathlib import Path
from typing import Any

from benchmark.io.types import KRIS_TYPES, Query

SOURCE_REPO = "mercurystraw/Kris_Bench"
ANNOTATION = "annotation.json"
# release task folder -> editmeter edit type
TASKS: dict[str, str] = {name: "kris_" + name.replace("-", "_") for name in (
    "count_change", "color_change", "size_adjustment", "part_completion", "anomaly_correction", "viewpoint_change",
    "position_movement", "temporal_prediction", "humanities", "practical_knowledge", "biology", "chemistry",
    "geography", "medicine", "mathematics", "physics", "abstract_reasoning", "rule-based_reasoning",
    "multi-element_composition", "multi-instruction_execution")}
# tasks whose entries have several input images: editmeter's Query holds one source, so they are skipped (counted)
MULTI_INPUT = {"multi-element_composition": "2 to 5 input images (a composition of several sources)",
               "temporal_prediction": "three input frames (predict the missing one)"}
RELEASE_TOTAL = 1267  # edits in the release (the paper's count), over all twenty folders
# metric configs that score KRIS-Bench (its own protocol first), and the suites that cannot, with why
SCORED_BY = ("kris", "judge", "conventional", "basic")
NOT_SCORED_BY = {"hatie": "no scene graphs", "editval": "no scene graphs"}

assert sorted(TASKS.values()) == sorted(KRIS_TYPES)


class KrisFormatError(ValueError):
    """The folder is not KRIS-Bench's release format or an entry is unusable; the message names the task and key."""


def _string(entry: dict[str, Any], field: str, where: str, *, required: bool) -> str:
    value = entry.get(field, None if required else "")
    if not isinstance(value, str) or (required and not value.strip()):
        raise KrisFormatError(f"{where}: {field} must be a {'non-empty ' if required else ''}string, got {value!r}")
    return value


def _inside(folder: Path, rel: str, field: str, where: str) -> Path:
    """`folder / rel`, refused unless `rel` is a plain relative path whose file stays inside `folder` (a symlink
    leading out of the release is refused too)."""
    from benchmark.querysets.io import check_relpath

    try:
        check_relpath(rel, field)
    except ValueError as err:
        raise KrisFormatError(f"{where}: {err}") from None
    path = folder / rel
    if not path.resolve().is_relative_to(folder.resolve()):
        raise KrisFormatError(f"{where}: {field} {rel!r} leads outside the task folder {folder}; the release's "
                              "images lie in their task's folder")
    return path


def read_task(folder: Path) -> dict[str, dict[str, Any]]:
    """One task's `annotation.json` as {key: entry}, checked for shape (decimal keys, the fields as strings; a list
    `ori_img` only where the task has several inputs)."""
    from benchmark.querysets.io import check_id, read_keyed_json

    task = folder.name
    raw = read_keyed_json(folder / ANNOTATION, KrisFormatError, "edit key")
    for key, entry in raw.items():
        where = f"{folder / ANNOTATION} entry {key!r}"
        if not key.isascii() or not key.isdigit():
            raise KrisFormatError(f"{where}: keys are decimal numbers in the release (e.g. '12'); this one becomes a "
                                  "query id and the official edit file name, so it is refused")
        try:
            check_id(f"kris-{task}-{key}", why="the key becomes a query id and a file name")
        except ValueError as err:
            raise KrisFormatError(f"{where}: {err}") from None
        if not isinstance(entry, dict) or "ori_img" not in entry or "ins_en" not in entry:
            raise KrisFormatError(f"{where}: must be an object with 'ori_img' and 'ins_en' (and 'gt_img', "
                                  "'explain_en')")
        _string(entry, "ins_en", where, required=True)
        for field in ("gt_img", "explain_en"):
            _string(entry, field, where, required=False)
        ori = entry["ori_img"]
        if task in MULTI_INPUT:
            if not isinstance(ori, list) or not ori or not all(isinstance(n, str) and n for n in ori):
                raise KrisFormatError(f"{where}: ori_img must be a non-empty list of file names in {task}")
        elif not isinstance(ori, str) or not ori:
            raise KrisFormatError(f"{where}: ori_img must be one file name in {task} (the official script joins it "
                                  f"to the folder), got {ori!r}")
    return raw


def find_tasks(release: str | os.PathLike[str]) -> list[Path]:
    """The task folders of `release` (the `KRIS_Bench/` folder) that hold an `annotation.json`, refused when a folder
    with one is not a KRIS-Bench task or none is there."""
    release = Path(release)
    if not release.is_dir():
        raise KrisFormatError(f"{release}: not a folder. Give --release the KRIS_Bench/ folder of the release (see "
                              "datasets/manifests/kris.json)")
    found = sorted(d for d in release.iterdir() if d.is_dir() and (d / ANNOTATION).is_file())
    unknown = [d.name for d in found if d.name not in TASKS]
    if unknown:
        raise KrisFormatError(f"{release}: folder(s) {unknown} hold an {ANNOTATION} but are not KRIS-Bench tasks "
                              f"({sorted(TASKS)}); remove them or give the release's own KRIS_Bench/ folder")
    if not found:
        raise KrisFormatError(f"{release}: no task folder with an {ANNOTATION}; give --release the KRIS_Bench/ "
                              f"folder that holds {', '.join(sorted(TASKS)[:3])}, ...")
    for d in found:
        if d.is_symlink():
            raise KrisFormatError(f"{d}: a task folder is a symbolic link; give a plain copy of the release")
    return found


def _load(path: Path, where: str) -> Any:
    """The image at `path` as RGB, refused unless it is a readable image file (the harness's own source rules)."""
    from benchmark.io.imageio import ImageInputError, load_rgb

    if not path.is_file():
        raise KrisFormatError(f"{where}: image {path} not found; the copy of the release is incomplete")
    try:
        return load_rgb(path)
    except ImageInputError as err:
        raise KrisFormatError(f"{where}: image {path.name} is not usable: {err}") from None


def _pixels_digest(im: Any) -> str:
    h = hashlib.sha256(f"{im.width}x{im.height}\n".encode())
    h.update(im.tobytes())
    return h.hexdigest()[:20]


def build(release: str | os.PathLike[str], out_dir: str | os.PathLike[str], *, name: str = "kris") -> dict[str, Any]:
    """Convert the release folder `release` (KRIS_Bench/) into `out_dir` (images/, queries.jsonl, queryset.json).
    The entries of the several-input tasks are skipped and counted (`counts.skipped`). Built in a staging folder
    moved into place only when everything passed (`release.staged_output`)."""
    from benchmark.querysets.release import staged_output

    with staged_output(out_dir, KrisFormatError) as out:
        return _build(Path(release), out, name)


def _build(release: Path, out: Path, name: str) -> dict[str, Any]:
    from benchmark.io.imageio import save_png
    from benchmark.querysets.io import write_built_queryset

    planned: list[tuple[str, str, dict[str, Any], Path, Path | None]] = []
    skipped: dict[str, int] = {}
    seen: Counter[str] = Counter()
    for folder in find_tasks(release):
        entries = read_task(folder)
        seen[folder.name] = len(entries)
        if folder.name in MULTI_INPUT:
            skipped[folder.name] = len(entries)
            continue
        for key in sorted(entries, key=int):
            e, where = entries[key], f"{folder / ANNOTATION} entry {key!r}"
            src = _inside(folder, e["ori_img"], "ori_img", where)
            gt = _inside(folder, e["gt_img"], "gt_img", where) if e.get("gt_img") else None
            planned.append((folder.name, key, e, src, gt))
    if not planned:
        raise KrisFormatError(f"{release}: no entry with one source image (only {sorted(skipped)}, which editmeter "
                              "cannot edit); nothing to build")
    digests: dict[Path, str] = {}
    for task, key, _e, src, gt in planned:  # every image decoded and checked before anything is written
        for path in (src, gt):
            if path is not None and path not in digests:
                digests[path] = _pixels_digest(_load(path, f"{release / task / ANNOTATION} entry {key!r}"))
    for path, digest in digests.items():
        dest = out / "images" / f"{digest}.png"
        if not dest.is_file():
            save_png(_load(path, str(path)), dest)
    queries = [Query(id=f"kris-{task}-{key}", image=f"images/{digests[src]}.png", image_id=digests[src],
                     edit_type=TASKS[task], instruction=e["ins_en"], explanation=e.get("explain_en") or None,
                     target_image=f"images/{digests[gt]}.png" if gt is not None else None)
               for task, key, e, src, gt in planned]
    total = sum(seen.values())
    full = total == RELEASE_TOTAL and sorted(seen) == sorted(TASKS)
    reasons = {t: f"{MULTI_INPUT[t]}: an editmeter query holds one source image" for t in skipped}
    return write_built_queryset(
        out, queries, name=name, error=KrisFormatError,
        description=f"KRIS-Bench ({len(queries)} single-source edits of {total} read"
                    f"{'' if full else '; NOT the full release'}"
                    f"{'; skipped ' + ', '.join(f'{t} ({n})' for t, n in skipped.items()) if skipped else ''}): "
                    "source image, instruction, knowledge explanation and ground truth where given, converted by "
                    "benchmark.querysets.kris.",
        license=f"as stated by {SOURCE_REPO} (the release is read from a local copy, never redistributed)",
        source={"release": str(release)}, full_release=full, scored_by=list(SCORED_BY),
        not_scored_by=dict(NOT_SCORED_BY), edit_types={t: TASKS[t] for t in sorted(seen)},
        counts={"by_release_task": {t: seen[t] for t in sorted(seen)}, "skipped": dict(sorted(skipped.items())),
                "skipped_reason": reasons, "read": total})
