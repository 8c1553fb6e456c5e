"""ImgEdit-Bench Basic query set: `Benchmark/Basic/basic_edit.json` of PKU-YuanGroup/ImgEdit plus the source images
of the authors' `Benchmark.tar` -> editmeter queries.

ImgEdit-Bench Basic (Ye et al., "ImgEdit", arXiv 2506.03147) holds 737 edits of 171 source images in nine edit
types. `basic_edit.json` is an object keyed by a numeric string (the name the official scorer expects for the edit,
`<key>.png`); each entry has `id` (the source's path under the archive's image root, e.g. `animal/000342021.jpg`;
folder names may hold spaces, `daily object/...`), `prompt` (the instruction) and `edit_type` (one of `EDIT_TYPES`).

Each entry becomes one query `imgedit-<key>`: `instruction` is `prompt` as released, `edit_type` the release's type
namespaced `imgedit_` (`benchmark.io.types.IMGEDIT_TYPES`), `image` the source decoded once and stored losslessly as RGB
(`images/<pixel digest>.png`: entries that share a source share one file).

The repository states no license: nothing of it is redistributed. `datasets/manifests/imgedit.json` fetches
`basic_edit.json` (and metrics=imgedit's `prompts.json`) at a pinned commit with their sha256, and names the manual
step for the image archive (a Hugging Face dataset file without a pinned revision). `build` checks every entry and
image before it writes anything, and stops at the first bad entry with its key and the fix.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from pathlib import Path
from typing import Any

from benchmark.io.types import IMGEDIT_TYPES, Query

SOURCE_REPO = "PKU-YuanGroup/ImgEdit"
EDITS_FILE = "basic_edit.json"
FIELDS = ("id", "prompt", "edit_type")
# the release's edit_type -> editmeter edit type (`compose` is the paper's "Hybrid")
EDIT_TYPES: dict[str, str] = {t.removeprefix("imgedit_"): t for t in IMGEDIT_TYPES}
# entries per edit type in the release at the pinned commit: a file with other counts is not the full set
RELEASE_COUNTS: dict[str, int] = {"add": 95, "adjust": 94, "extract": 117, "replace": 92, "remove": 86,
                                  "background": 94, "style": 100, "compose": 23, "action": 36}
# metric configs that score ImgEdit-Bench (its own protocol first), and the suites that cannot, with why; recorded in
# queryset.json for the preflight's refusal and `editmeter show`
SCORED_BY = ("imgedit", "judge", "conventional", "basic")
NOT_SCORED_BY = {"hatie": "no scene graphs", "editval": "no scene graphs"}

assert sorted(RELEASE_COUNTS) == sorted(EDIT_TYPES)


class ImgEditFormatError(ValueError):
    """The files are not ImgEdit-Bench Basic's release format or an entry is unusable; the message names the key."""


def read_edits(path: str | os.PathLike[str]) -> dict[str, dict[str, str]]:
    """`basic_edit.json` as {key: entry}, checked for shape (numeric keys, the three fields, known edit types)."""
    from benchmark.querysets.io import check_id, check_relpath, read_keyed_json
    from benchmark.querysets.release import release_text

    path = Path(path)
    if not path.is_file():
        raise ImgEditFormatError(f"{path}: not found. Fetch it with `make data NAME=imgedit` "
                                 f"(Benchmark/Basic/{EDITS_FILE} of {SOURCE_REPO} at the manifest's commit)")
    raw = read_keyed_json(path, ImgEditFormatError, "edit key")
    for key, entry in raw.items():
        where = f"{path} entry {key[:40]!r}"
        if not key.isascii() or not key.isdigit():
            raise ImgEditFormatError(f"{where}: keys are decimal numbers in the release (e.g. '1082'); this one "
                                     "becomes a query id and the official edit file name, so it is refused")
        try:
            check_id(f"imgedit-{key}", "query id", why="the key becomes a query id and a file name")
        except ValueError as err:
            raise ImgEditFormatError(f"{where}: {err}") from None
        if not isinstance(entry, dict) or any(f not in entry for f in FIELDS):
            raise ImgEditFormatError(f"{where}: must be an object with {list(FIELDS)}")
        for f in FIELDS:
            release_text(entry[f], where, f, ImgEditFormatError)
        if entry["edit_type"] not in EDIT_TYPES:
            raise ImgEditFormatError(f"{where}: edit_type {entry['edit_type']!r} is not one of ImgEdit-Bench "
                                     f"Basic's {sorted(EDIT_TYPES)}")
        try:
            check_relpath(entry["id"], "id")
        except ValueError as err:
            raise ImgEditFormatError(f"{where}: {err}") from None
    return raw


def find_image_root(images: str | os.PathLike[str], rel: str, depth: int = 3) -> Path:
    """The folder under `images` (itself, or one at most `depth` levels down) that holds `rel`, the first entry's
    source: the official `--origin_img_root`, wherever the archive put it. Refused when none or several do."""
    images = Path(images)
    if not images.is_dir():
        raise ImgEditFormatError(f"{images}: not a folder. Give --images the unpacked Benchmark.tar (see "
                                 "datasets/manifests/imgedit.json)")
    found, level = [], [images]
    for _ in range(depth + 1):
        found += [d for d in level if (d / rel).is_file()]
        level = [c for d in level for c in sorted(d.iterdir()) if c.is_dir() and not c.is_symlink()]
    if len(found) != 1:
        what = "no folder" if not found else f"{len(found)} folders ({', '.join(map(str, found[:3]))})"
        raise ImgEditFormatError(f"{images}: {what} within {depth} levels hold{'s' if not found else ''} {rel!r} "
                                 f"(the first entry's source); give --images the folder that holds the sources' "
                                 "category folders (animal/, style/, ...), the official --origin_img_root")
    return found[0]


def _source(images: Path, root: Path, rel: str, where: str, dirs: dict[str, str] | None = None) -> Any:
    """The entry's source as RGB: a regular file under `root` that stays inside the --images folder `images`
    (symlinks leaving it refused), readable under `load_rgb`'s rules."""
    from benchmark.querysets.release import release_file, release_image

    if not (root / rel).exists():
        raise ImgEditFormatError(f"{where}: source image {root / rel} not found; the unpacked archive is incomplete "
                                 "(unpack Benchmark.tar again)")
    path = release_file(images, os.path.relpath(root / rel, images), where, "id", ImgEditFormatError, dirs)
    return release_image(path, where, f"source image {rel}", ImgEditFormatError)


def _numeric_order(key: str) -> tuple[int, str, str]:
    """Sort key of a decimal string in numeric order, without int() (a 5000-digit key would raise)."""
    digits = key.lstrip("0")
    return len(digits), digits, key


def _pixels_digest(im: Any) -> str:
    h = hashlib.sha256(f"{im.width}x{im.height}\n".encode())
    h.update(im.tobytes())
    return h.hexdigest()


def build(edits: str | os.PathLike[str], images: str | os.PathLike[str], out_dir: str | os.PathLike[str], *,
          name: str = "imgedit") -> dict[str, Any]:
    """Convert `basic_edit.json` and the sources under `images` into `out_dir` (images/, queries.jsonl,
    queryset.json), built in a staging folder moved into place only when everything passed."""
    from benchmark.querysets.release import staged_output

    edits = Path(edits)
    entries = read_edits(edits)
    keys = sorted(entries, key=_numeric_order)
    root = find_image_root(images, entries[keys[0]]["id"])
    with staged_output(out_dir, ImgEditFormatError) as out:
        return _write(edits, Path(images), root, entries, keys, out, name)


def _write(edits: Path, images: Path, root: Path, entries: dict[str, dict[str, str]], keys: list[str], out: Path,
           name: str) -> dict[str, Any]:
    """Each distinct source read, checked and written once into the staging folder `out` (linear in entries: the
    keys naming a source are grouped in one pass), then the queries."""
    from benchmark.io.filehash import sha256_file
    from benchmark.io.imageio import save_png
    from benchmark.querysets.io import write_built_queryset

    by_source: dict[str, list[str]] = {}
    for k in keys:
        by_source.setdefault(entries[k]["id"], []).append(k)
    sources = sorted(by_source)
    digests: dict[str, str] = {}
    dirs: dict[str, str] = {}  # each source folder's real path, resolved once
    for rel in sources:
        rgb = _source(images, root, rel, f"{edits} entries {by_source[rel][:3]}", dirs)
        digests[rel] = _pixels_digest(rgb)[:20]
        dest = out / "images" / f"{digests[rel]}.png"
        if not dest.is_file():
            save_png(rgb, dest)
    queries = [Query(id=f"imgedit-{k}", image=f"images/{digests[entries[k]['id']]}.png",
                     image_id=digests[entries[k]["id"]], edit_type=EDIT_TYPES[entries[k]["edit_type"]],
                     instruction=entries[k]["prompt"]) for k in keys]
    by_type = Counter(e["edit_type"] for e in entries.values())
    full = dict(by_type) == RELEASE_COUNTS
    return write_built_queryset(
        out, queries, name=name, error=ImgEditFormatError,
        description=f"ImgEdit-Bench Basic ({len(queries)} of the release's {sum(RELEASE_COUNTS.values())} edits"
                    f"{'' if full else '; NOT the full release'}): source image and instruction per edit, converted "
                    "by benchmark.querysets.imgedit.",
        license=f"none stated by {SOURCE_REPO} (fetched by the manifest, never redistributed)",
        source={"edits": str(edits), "edits_sha256": sha256_file(edits), "images": str(root)},
        full_release=full, scored_by=list(SCORED_BY), not_scored_by=dict(NOT_SCORED_BY),
        edit_types=dict(EDIT_TYPES), counts={"by_release_type": {t: by_type[t] for t in sorted(by_type)},
                                             "sources": len(sources)})
