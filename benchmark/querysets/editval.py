"""EditVal query set: the release's `object.json` + COCO train2017 instance annotations -> editmeter queries.

`object.json` is `{coco_class: {coco_image_id: {edit_type: {"from": [...], "to": [...]}}}}` (spec/editval.md).
Every (from, to) pair becomes one query on the image, with the instruction and description prompts of the EditVal
paper's Table 3. The edited object is the image's largest non-crowd COCO instance of the class (EditVal names a
class, not an instance); its mask is rasterised from the COCO polygon / RLE with pycocotools and its box converted
from COCO's [x, y, w, h] to corners [x0, y0, x1, y1] (the release misreads these boxes: spec/editval.md defect 1).
Class keys keep natural names in prompts ("stop_sign" -> "stop sign", defect 4).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmark.io.types import EDITVAL_TYPES, ObjectRef, Query
from benchmark.querysets.captions import article
from benchmark.querysets.coco_classes import COCO_CLASSES, natural_name

# positional_addition `to` values read "<object> <where>"; the where-phrases and their relation keys.
POSITIONS: dict[str, str] = {"to the left": "left", "to left": "left", "left": "left", "to the right": "right",
                             "to right": "right", "right": "right", "on top": "on top", "above": "above",
                             "below": "below", "under": "below", "behind": "behind", "in front": "in front"}
POSITION_PHRASES = {"left": "to the left of", "right": "to the right of", "on top": "on top of", "above": "above",
                    "below": "below", "behind": "behind", "in front": "in front of"}
SIZE_WORDS = {"small": "shrink", "smaller": "shrink", "large": "enlarge", "larger": "enlarge", "big": "enlarge", "bigger": "enlarge"}


class EditValFormatError(ValueError):
    """object.json or the COCO annotations do not fit; the message names the file, class, image and edit type."""


def parse_position(value: str, where: str) -> tuple[str, str]:
    """'bag below' -> ('bag', 'below'); 'cup to left' -> ('cup', 'left')."""
    text = " ".join(value.lower().split())
    for phrase in sorted(POSITIONS, key=len, reverse=True):
        if text.endswith(" " + phrase):
            return text[: -len(phrase) - 1].strip(), POSITIONS[phrase]
    raise EditValFormatError(f"{where}: positional_addition value {value!r} does not end in one of {sorted(POSITIONS)}")


def prompts(edit_type: str, cls: str, frm: str, to: str) -> tuple[str, str]:
    """(instruction, description) per EditVal Table 3's patterns."""
    a = article
    if edit_type == "object_addition":
        return f"Add {a(to)} {to} to the {cls}", f"A {to} along with the {cls}"
    if edit_type == "object_replacement":
        return f"Replace the {cls} with {a(to)} {to}", f"{a(to).capitalize()} {to} in place of the {cls}"
    if edit_type == "positional_addition":
        obj, rel = to.split("\x1f")
        return f"Add {a(obj)} {obj} {POSITION_PHRASES[rel]} the {cls}", f"{a(obj).capitalize()} {obj} {POSITION_PHRASES[rel]} the {cls}"
    if edit_type == "size":
        return f"Change the size of the {cls} to {to}", f"{a(to).capitalize()} {to} {cls}"
    if edit_type == "position_replacement":
        where = "the center" if to == "center" else f"the {to}"
        return f"Move the {cls} to {where} of the image", f"{a(cls).capitalize()} {cls} at {where} of the image"
    if edit_type == "alter_parts":
        part = to[4:] if to.lower().startswith("add ") else to
        return f"{to[:1].upper()}{to[1:]} to the {cls}", f"{a(cls).capitalize()} {cls} with {part}"
    if edit_type == "background":
        return f"Change the background to {to}", f"{a(cls).capitalize()} {cls} with {a(to)} {to} in the background"
    if edit_type == "texture":
        return f"Change the texture of the {cls} to {to}", f"{a(cls).capitalize()} {cls} with {a(to)} {to} texture"
    if edit_type == "style":
        return f"Change the style of the image to {to}", f"{a(to).capitalize()} {to} of {a(cls)} {cls}"
    if edit_type == "color":
        return f"Change the color of the {cls} to {to}", f"{a(to).capitalize()} {to} {cls}"
    if edit_type == "shape":
        return f"Change the shape of the {cls} to {to}", f"{a(cls).capitalize()} {cls} in the shape of {a(to)} {to}"
    if edit_type == "action":
        return f"Make the {cls} {to}", f"{a(cls).capitalize()} {cls} {to}"
    if edit_type == "viewpoint":
        return f"Change the viewpoint of the {cls} to {to}", f"{a(cls).capitalize()} {cls} seen from {to}"
    raise EditValFormatError(f"no prompt template for edit type {edit_type!r}")


def _query_fields(edit_type: str, frm: str, to: str, where: str) -> dict[str, Any]:
    if edit_type in ("object_addition", "object_replacement"):
        return {"new_class": to, **({"attribute_before": frm} if frm else {})}
    if edit_type == "positional_addition":
        obj, rel = to.split("\x1f")
        return {"new_class": obj, "relation": rel}
    if edit_type == "size":
        if to.lower() not in SIZE_WORDS:
            raise EditValFormatError(f"{where}: size value {to!r} is not one of {sorted(SIZE_WORDS)}")
        return {"size_change": SIZE_WORDS[to.lower()], "attribute_after": to}
    if edit_type == "position_replacement":
        return {"relation": to, **({"attribute_before": frm} if frm else {})}
    if edit_type == "background":
        return {"background": to, **({"attribute_before": frm} if frm else {})}
    if edit_type == "style":
        return {"style": to}
    return {"attribute_after": to, **({"attribute_before": frm} if frm else {})}


def _quiet_coco(path: Path) -> Any:
    from pycocotools.coco import COCO

    with contextlib.redirect_stdout(io.StringIO()):  # COCO() prints progress lines
        return COCO(str(path))


def build(editval_json: str | os.PathLike[str], coco_annotations: str | os.PathLike[str], out_dir: str | os.PathLike[str], *,
          images_dir: str | os.PathLike[str] | None = None, image_url: str | None = None, name: str = "editval",
          progress: bool = True) -> dict[str, Any]:
    """Convert EditVal into `out_dir`. Images come from `images_dir` (COCO train2017 folder, copied) or are
    downloaded one by one from `image_url` (a template with `{file_name}`)."""
    import numpy as np

    from benchmark.io.download import download_file
    from benchmark.io.imageio import save_mask
    from benchmark.querysets.io import write_built_queryset

    editval_json, out = Path(editval_json), Path(out_dir)
    try:
        spec = json.loads(editval_json.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise EditValFormatError(f"{editval_json}:{err.lineno}: not valid JSON ({err.msg})") from None
    if not isinstance(spec, Mapping):
        raise EditValFormatError(f"{editval_json}: expected {{coco_class: {{image_id: {{edit_type: ...}}}}}}")
    coco = _quiet_coco(Path(coco_annotations))
    cat_ids = {c["name"]: c["id"] for c in coco.loadCats(coco.getCatIds())}
    queries: list[Query] = []
    for cls_key, images in spec.items():
        cls = natural_name(cls_key)
        if cls not in COCO_CLASSES or cls not in cat_ids:
            raise EditValFormatError(f"{editval_json}: class {cls_key!r} is not a COCO class of {coco_annotations}")
        for image_key, edits in images.items():
            where = f"{editval_json}: {cls_key} / {image_key}"
            try:
                img = coco.loadImgs(int(image_key))[0]
            except (KeyError, ValueError, IndexError):
                raise EditValFormatError(f"{where}: image id not in {coco_annotations} (EditVal uses COCO train2017)") from None
            anns = coco.loadAnns(coco.getAnnIds(imgIds=img["id"], catIds=[cat_ids[cls]], iscrowd=None))
            anns = [a for a in anns if not a.get("iscrowd")] or anns
            if not anns:
                raise EditValFormatError(f"{where}: the image has no {cls!r} annotation")
            ann = max(anns, key=lambda a: (a["area"], -a["id"]))
            mask_rel = f"masks/{img['id']}/{ann['id']}.png"
            with warnings.catch_warnings():  # pycocotools' decoder warns about numpy 2's copy keyword; harmless
                warnings.simplefilter("ignore", DeprecationWarning)
                mask = np.asarray(coco.annToMask(ann), dtype=bool)
            save_mask(mask, out / mask_rel)
            x, y, w, h = (float(v) for v in ann["bbox"])
            target = ObjectRef(id=str(ann["id"]), name=cls, mask=mask_rel, bbox=(x, y, x + w, y + h))
            image_rel = f"images/{img['file_name']}"
            _fetch_image(out / image_rel, img["file_name"], images_dir, image_url, progress, download_file)
            if not isinstance(edits, Mapping):
                raise EditValFormatError(f"{where}: expected {{edit_type: {{'from': [...], 'to': [...]}}}}")
            for edit_type, ft in edits.items():
                w_ = f"{where} / {edit_type}"
                if edit_type not in EDITVAL_TYPES:
                    raise EditValFormatError(f"{w_}: unknown edit type; EditVal's are {list(EDITVAL_TYPES)}")
                if not isinstance(ft, Mapping) or not isinstance(ft.get("to"), list):
                    raise EditValFormatError(f"{w_}: needs {{'from': [...], 'to': [...]}}")
                froms = [str(f).strip() for f in (ft.get("from") or [""])] or [""]
                k = 0
                for frm in froms:
                    for to in ft["to"]:
                        to = " ".join(str(to).split())
                        if edit_type == "positional_addition":
                            to = "\x1f".join(parse_position(to, w_))
                        instruction, description = prompts(edit_type, cls, frm, to)
                        queries.append(Query(
                            id=f"ev-{img['id']}-{edit_type}-{k}", image=image_rel, image_id=str(img["id"]),
                            edit_type=edit_type, instruction=instruction,
                            source_caption=f"A photo of {article(cls)} {cls}", target_caption=description,
                            target=target, editable_objects=(target,), **_query_fields(edit_type, frm, to, w_)))
                        k += 1
    if not queries:
        raise EditValFormatError(f"{editval_json}: no queries")
    queries.sort(key=lambda q: q.id)
    return write_built_queryset(
        out, queries, name=name,
        description="EditVal (Basu et al. 2023): 13 edit types on COCO train2017 images, converted by "
                    "benchmark.querysets.editval; prompts follow the paper's Table 3.",
        license="EditVal object.json has no license file (not redistributed); COCO annotations CC BY 4.0, "
                "images under their Flickr licenses",
        target_instance="largest non-crowd COCO instance of the class")


def _fetch_image(dest: Path, file_name: str, images_dir: str | os.PathLike[str] | None, image_url: str | None,
                 progress: bool, download_file: Any) -> None:
    if dest.is_file():
        return
    if images_dir is not None and (Path(images_dir) / file_name).is_file():
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(Path(images_dir) / file_name, dest)
        return
    if image_url:
        download_file(image_url.format(file_name=file_name), dest, progress=progress)
        return
    raise EditValFormatError(f"{file_name}: not found in {images_dir}; pass the COCO train2017 folder "
                             "(--images) or --download-images")
