"""Import the released HATIE benchmark set (query pickles + editable-object mask pickle) as an editmeter query set.

The release ships pickles (a dict of query lists and a list of mask records). They are read once, only through the restricted unpickler
(`benchmark.io.safe_pickle`), and converted to `queries.jsonl` plus one PNG mask per editable object
(`masks/<image_id>/<object_id>.png`, {0,255} grayscale, a few hundred bytes each), so nothing downstream ever loads a
pickle or holds all masks in memory.

Released query -> editmeter `Query`:

| released | editmeter |
|---|---|
| `id` | `id` (as a string, so edits named `<prefix>_<id>` map back) |
| `original_caption`, `target_caption`, `instruction` | `source_caption`, `target_caption`, `instruction` |
| obj_rep `original` = [oid, class], `target` = class | `target` (object), `new_class` |
| obj_add `anchor` = [oid, class], `target` = class, `location` | `anchor`, `new_class`, `relation` |
| obj_remove / attr_chg / obj_resize `target` = [oid, class] | `target`; attr_chg `after` (and `before`) -> `attribute_after` (`attribute_before`); obj_resize `subtype` -> `size_change` |
| bg_chg `target`, `editable_objs` = [class, ...] | `background`; objects matched by class name |
| style_chg `target` | `style` |

Every query carries all editable objects of its image (`editable_objects`, with masks), which the HATIE scorer uses
for bg_chg and style_chg.
"""

from __future__ import annotations

import os
import re
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.io.types import HATIE_TYPES, ObjectRef, Query
from benchmark.querysets.io import check_id

QUERIES_MAX_BYTES = 2**30  # the released query pickles are tens of MB; the mask pickle gets safe_pickle's default
KNOWN_KEYS = {"type", "id", "original_caption", "target_caption", "instruction", "original", "target", "anchor",
              "location", "after", "before", "subtype", "editable_objs"}


class HatieFormatError(ValueError):
    """The released files do not have the expected shape; the message names the file, the record and the field."""


SAFE_EXT = re.compile(r"\.[A-Za-z0-9]{1,8}")


def safe_id(value: Any, what: str, where: str) -> str:
    """`value` as an id usable as one path component, or HatieFormatError (no `/`, `\\`, `..`, NUL, newline,
    leading dot or dash, absolute path, over 128 characters)."""
    if isinstance(value, bool) or not isinstance(value, str | int | np.integer):
        raise HatieFormatError(f"{where}: {what} must be a string or an integer, got {type(value).__name__}")
    # Image, object and query ids become file names (masks/<image>/<object>.png, edits/<query>.png): the rule of
    # query ids (`check_id`). The release's ids are decimal digits.
    text = str(value)
    try:
        return check_id(text, what)
    except ValueError:
        raise HatieFormatError(f"{where}: {what} {text[:80]!r} is not a safe id (1-128 characters from "
                               "[A-Za-z0-9_.-], starting with a letter or digit, no '..': ids become file names)"
                               ) from None


def confined(root: Path, rel: str) -> Path:
    """`root / rel`, refused unless it resolves inside `root` (symlinked folders included)."""
    base = root.resolve()
    path = (base / rel).resolve()
    if not path.is_relative_to(base):
        raise HatieFormatError(f"refusing to write {rel!r}: it resolves to {path}, outside the output folder {base}")
    return path


def _pair(value: Any, where: str) -> tuple[str, str]:
    if not (isinstance(value, list | tuple) and len(value) == 2):
        raise HatieFormatError(f"{where}: expected [object_id, class name], got {value!r}")
    return safe_id(value[0], "object id", where), str(value[1])


def _text(raw: Mapping[str, Any], key: str) -> str | None:
    """`raw[key]` as text; absent or null stays None, so the schema reports the field as missing instead of the
    query carrying the string "None"."""
    value = raw.get(key)
    return None if value is None else str(value)


def _bbox(mask: np.ndarray) -> tuple[float, float, float, float] | None:
    """Inclusive min/max of the nonzero rows / columns (docs/hatie.md section 1)."""
    ys, xs = np.nonzero(mask)
    if len(xs) == 0:
        return None
    return (float(xs.min()), float(ys.min()), float(xs.max()), float(ys.max()))


def write_masks(mask_records: Sequence[Any], out_dir: Path, source: str) -> dict[str, dict[str, dict[str, Any]]]:
    """Write one PNG per editable object; return {image_id: {object_id: {"mask": rel, "bbox": ..., "name": ...}}}."""
    from benchmark.io.imageio import save_mask

    if not isinstance(mask_records, list | tuple):
        raise HatieFormatError(f"{source}: expected a list of {{'image', 'editable_objs'}} records, got {type(mask_records).__name__}")
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for i, rec in enumerate(mask_records):
        where = f"{source}: record {i}"
        if not isinstance(rec, Mapping) or "image" not in rec or not isinstance(rec.get("editable_objs"), Mapping):
            raise HatieFormatError(f"{where}: needs 'image' and an 'editable_objs' mapping")
        image_id = safe_id(rec["image"], "image id", where)
        objs = out.setdefault(image_id, {})
        for oid, info in rec["editable_objs"].items():
            oid = safe_id(oid, "object id", where)
            if not isinstance(info, Mapping) or "mask" not in info:
                raise HatieFormatError(f"{where}, object {oid!r}: needs a 'mask' array")
            mask = np.asarray(info["mask"])
            if mask.ndim != 2:
                raise HatieFormatError(f"{where}, object {oid!r}: mask has shape {mask.shape}, expected (H, W)")
            mask = mask > 0.5 if mask.dtype.kind == "f" else mask.astype(bool)
            bbox = _bbox(mask)
            if bbox is None:
                raise HatieFormatError(f"{where}, object {oid!r}: mask is empty")
            rel = f"masks/{image_id}/{oid}.png"
            save_mask(mask, confined(out_dir, rel))
            name = next((str(info[k]) for k in ("name", "class", "category") if k in info), None)
            objs[str(oid)] = {"mask": rel, "bbox": bbox, "name": name}
    return out


def convert_query(raw: Any, image_id: str, objects: dict[str, dict[str, Any]], source: str,
                  image_ext: str = ".jpg") -> Query:
    """One released query dict -> `Query` (see the module table)."""
    if not isinstance(raw, Mapping):
        raise HatieFormatError(f"{source}: image {image_id!r}: a query must be a dict, got {type(raw).__name__}")
    where = f"{source}: image {image_id!r}, query {raw.get('id')!r}"
    edit_type = raw.get("type")
    if edit_type not in HATIE_TYPES:
        raise HatieFormatError(f"{where}: type {edit_type!r} is not one of {list(HATIE_TYPES)}")
    qid = safe_id(raw.get("id"), "query id", where)  # absent or not a string / integer: named by safe_id

    def ref(pair_value: Any, field: str) -> ObjectRef:
        oid, name = _pair(pair_value, f"{where}, {field}")
        info = objects.get(oid)
        if info is None:
            raise HatieFormatError(f"{where}: {field} object {oid!r} has no mask in the editable-object mask file")
        return ObjectRef(id=oid, name=name, mask=info["mask"], bbox=info["bbox"])

    kw: dict[str, Any] = {}
    if edit_type == "obj_rep":
        kw.update(target=ref(raw.get("original"), "original"), new_class=_text(raw, "target"))
    elif edit_type == "obj_add":
        kw.update(anchor=ref(raw.get("anchor"), "anchor"), new_class=_text(raw, "target"),
                  relation=_text(raw, "location"))
    elif edit_type in ("obj_remove", "attr_chg", "obj_resize"):
        kw["target"] = ref(raw.get("target"), "target")
        if edit_type == "attr_chg":
            kw["attribute_after"] = _text(raw, "after") or None
            if raw.get("before") is not None:
                kw["attribute_before"] = str(raw["before"])
        if edit_type == "obj_resize":
            kw["size_change"] = raw.get("subtype")
    elif edit_type == "bg_chg":
        kw["background"] = _text(raw, "target") or ""
    elif edit_type == "style_chg":
        kw["style"] = _text(raw, "target") or ""
    editable = tuple(
        ObjectRef(id=oid, name=info["name"], mask=info["mask"], bbox=info["bbox"])
        for oid, info in sorted(objects.items()) if info.get("name")
    )
    if edit_type == "bg_chg":
        wanted = raw.get("editable_objs") or []
        names = {o.name for o in editable}
        missing = [n for n in wanted if n not in names]
        if missing:
            raise HatieFormatError(f"{where}: editable_objs {missing} have no named mask for this image")
    from benchmark.querysets.io import query_from_dict, query_to_dict

    q = Query(id=qid, image=f"images/{image_id}{image_ext}", image_id=image_id, edit_type=edit_type,
              instruction=str(raw.get("instruction") or ""), source_caption=str(raw.get("original_caption") or ""),
              target_caption=str(raw.get("target_caption") or ""), editable_objects=editable, **kw)
    try:
        return query_from_dict(query_to_dict(q))  # the schema's own validation, with the record named
    except ValueError as err:
        raise HatieFormatError(f"{where}: {err}") from None


def _name_objects(queries: Mapping[str, Any], objects: dict[str, dict[str, dict[str, Any]]]) -> None:
    """Objects in the mask file carry no class name in the release: take it from the queries that mention them.

    An object no query names by id can still be named by a bg_chg query's `editable_objs` when exactly one object
    and exactly one listed class are left over (classes are unique per image in HATIE); anything more ambiguous
    stays unnamed and is reported by `convert_query`.
    """
    for image_id, qs in queries.items():
        objs = objects.get(str(image_id), {})
        qs = [raw for raw in (qs if isinstance(qs, list | tuple) else []) if isinstance(raw, Mapping)]
        for raw in qs:
            for field in ("original", "anchor", "target"):
                v = raw.get(field)
                if isinstance(v, list | tuple) and len(v) == 2 and str(v[0]) in objs and not objs[str(v[0])]["name"]:
                    objs[str(v[0])]["name"] = str(v[1])
        for raw in qs:
            if raw.get("type") != "bg_chg":
                continue
            named = {info["name"] for info in objs.values() if info["name"]}
            left = [str(n) for n in raw.get("editable_objs") or [] if str(n) not in named]
            unnamed = [oid for oid, info in objs.items() if not info["name"]]
            if len(left) == 1 and len(unnamed) == 1:
                objs[unnamed[0]]["name"] = left[0]


def import_release(queries_pkl: str | os.PathLike[str], masks_pkl: str | os.PathLike[str],
                   images_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str], *, name: str = "hatie",
                   image_ext: str = ".jpg") -> dict[str, Any]:
    """Convert the release into `out_dir` (queryset.json, queries.jsonl, masks/, images -> `images_dir`)."""
    from benchmark.io.safe_pickle import restricted_load
    from benchmark.querysets.io import write_built_queryset

    if not SAFE_EXT.fullmatch(image_ext):
        raise HatieFormatError(f"image_ext {image_ext!r} must look like '.jpg'")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    out = out.resolve()  # every write below is checked to resolve inside this folder
    images_dir = Path(images_dir).resolve()
    raw_queries = restricted_load(queries_pkl, max_bytes=QUERIES_MAX_BYTES)  # restricted: plain data only
    if not isinstance(raw_queries, Mapping):
        raise HatieFormatError(f"{queries_pkl}: expected {{image_id: [query, ...]}}, got {type(raw_queries).__name__}")
    objects = write_masks(restricted_load(masks_pkl), out, str(masks_pkl))  # restricted loader, see above
    _name_objects(raw_queries, objects)
    queries: list[Query] = []
    ignored: Counter = Counter()
    seen: dict[str, str] = {}
    missing_images = []
    for image_id, qs in raw_queries.items():
        image_id = safe_id(image_id, "image id", str(queries_pkl))
        if not isinstance(qs, list | tuple):
            raise HatieFormatError(f"{queries_pkl}: image {image_id!r}: expected a list of queries")
        if not (images_dir / f"{image_id}{image_ext}").is_file():
            missing_images.append(image_id)
        for raw in qs:
            q = convert_query(raw, image_id, objects.get(image_id, {}), str(queries_pkl), image_ext)
            if q.id in seen:
                raise HatieFormatError(f"{queries_pkl}: query id {q.id} appears for images {seen[q.id]!r} and {image_id!r}")
            seen[q.id] = image_id
            ignored.update(k for k in raw if k not in KNOWN_KEYS)
            queries.append(q)
    if missing_images:
        raise HatieFormatError(f"{images_dir}: {len(missing_images)} image(s) of the query file are missing, e.g. "
                               f"{missing_images[:3]}; extract the release's image archive there")
    link = out / "images"  # a link named inside `out`; where it points is the user's --images folder
    if link.resolve() != images_dir:
        if link.is_symlink() or link.exists():
            if not link.is_symlink():
                raise HatieFormatError(f"{link} exists and is not a link to {images_dir}; move it away first")
            link.unlink()
        link.symlink_to(images_dir, target_is_directory=True)
    queries.sort(key=lambda q: (len(q.id), q.id))
    meta = write_built_queryset(
        out, queries, name=name,
        description="The released HATIE benchmark set (HATIE paper, CVPR 2025), imported from its pickles by "
                    "benchmark.querysets.hatie; object masks are the release's editable-object masks.",
        license="CC0-1.0 (HATIE release)",
        source_files={"queries": Path(queries_pkl).name, "masks": Path(masks_pkl).name},
        counts={"objects": sum(len(v) for v in objects.values())},
        ignored_query_keys=dict(ignored),
        bbox="inclusive min/max of each mask's nonzero pixels")
    print((out / "summary.md").read_text(), file=sys.stderr)
    return meta

