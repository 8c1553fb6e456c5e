"""Human judgements as pairs: a pairwise-preference CSV, or per-image ratings (ImagenHub's published files)
converted to pairs. The formats and every conversion rule are in docs/metaeval.md.

Pairwise CSV (one row per judgement; several raters of one pair = several rows):

    query_id,image_a,image_b,preferred[,editor_a,editor_b][,rater][,criterion][,split]

`image_a` / `image_b`: an image file, or a folder holding `<query_id>.<ext>`; relative paths are read from the
CSV's folder. `preferred`: a, b or tie. Rows of one (criterion, query, image pair) are combined by majority vote.

Per-image ratings (ImagenHub, `eval/human_ratings/Text-Guided_IE/*_rater{1,2,3}.tsv`): a TSV per rater with a `uid`
column (e.g. `sample_100081_1.jpg`) and one column per editor holding `[SC, PQ]`, each in {0, 0.5, 1}.
"""

from __future__ import annotations

import csv
import itertools
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".webp", ".bmp")
REQUIRED = ("query_id", "image_a", "image_b", "preferred")
OPTIONAL = ("editor_a", "editor_b", "rater", "criterion", "split")
PREFERRED = {"a": 1, "b": -1, "tie": 0}
SPLITS = ("train", "test")
MAX_SHOWN = 10
CELL = re.compile(r"^\s*\[\s*([-+0-9.eE]+)\s*,\s*([-+0-9.eE]+)\s*\]\s*$")
ASPECTS = ("overall", "SC", "PQ")
RATER_RULES = ("mean", "majority")


class HumanDataError(ValueError):
    """A human-judgement file is unusable; the message names the file, the line or column, and the fix."""


@dataclass(frozen=True)
class Pair:
    """One judged comparison of two edits of the same query (after raters are combined)."""

    query_id: str
    image_a: Path
    image_b: Path
    human: int  # +1: people preferred a, -1: b, 0: tie (no majority)
    editor_a: str = ""
    editor_b: str = ""
    split: str = ""
    votes: int = 1  # judgements combined into `human`


def _fail(path: Path, problems: list[str], fix: str) -> HumanDataError:
    more = f" (and {len(problems) - MAX_SHOWN} more)" if len(problems) > MAX_SHOWN else ""
    shown = "\n  ".join(problems[:MAX_SHOWN])
    return HumanDataError(f"{path}: {len(problems)} problem(s){more}:\n  {shown}\n{fix}")


def find_image(ref: Path, query_id: str) -> Path | None:
    """`ref` itself when it is a file; in a folder, the one file `<query_id>.<ext>`; else None."""
    if ref.is_file():
        return ref
    if ref.is_dir():
        hits = [ref / f"{query_id}{ext}" for ext in IMAGE_EXTENSIONS if (ref / f"{query_id}{ext}").is_file()]
        return hits[0] if len(hits) == 1 else None
    return None


def read_pairs(path: Path, *, criterion: str | None = None) -> tuple[list[Pair], dict[str, int]]:
    """Pairs from a pairwise-preference CSV, raters combined by majority vote (a draw is a tie).

    `criterion` keeps the rows of that criterion (needed when the file has a `criterion` column with several
    values). Returns (pairs, counts): counts of rows read, rows kept, pairs, and pairs whose raters disagreed.
    Every problem (missing column, unknown `preferred`, missing image) is collected and raised at once."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as err:
        raise HumanDataError(f"{path}: cannot read the preference CSV ({type(err).__name__}: {err})") from None
    reader = csv.DictReader(text.splitlines())
    header = [h.strip() for h in (reader.fieldnames or [])]
    reader.fieldnames = header
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise HumanDataError(f"{path}: missing column(s) {', '.join(missing)}; the header is {header or '(empty)'}. "
                             f"Required: {', '.join(REQUIRED)}; optional: {', '.join(OPTIONAL)} (docs/metaeval.md)")
    rows = list(reader)
    if not rows:
        raise HumanDataError(f"{path}: no rows after the header")
    if "criterion" in header:
        values = sorted({(r.get("criterion") or "").strip() for r in rows})
        if criterion is None and len(values) > 1:
            raise HumanDataError(f"{path}: the criterion column holds {', '.join(values)}; choose one with "
                                 "--criterion NAME")
        if criterion is not None:
            if criterion not in values:
                raise HumanDataError(f"{path}: no rows with criterion {criterion!r}; it has {', '.join(values)}")
            rows = [r for r in rows if (r.get("criterion") or "").strip() == criterion]
    elif criterion is not None:
        raise HumanDataError(f"{path}: --criterion {criterion} given, but the file has no criterion column")
    base = path.parent
    problems: list[str] = []
    votes: dict[tuple[str, Path, Path], list[int]] = {}
    meta: dict[tuple[str, Path, Path], tuple[str, str, str]] = {}
    for line, r in enumerate(rows, start=2):
        r = {k: (v or "").strip() for k, v in r.items() if k is not None}
        qid, pref = r.get("query_id", ""), r.get("preferred", "").lower()
        if not qid:
            problems.append(f"line {line}: empty query_id")
            continue
        if pref not in PREFERRED:
            problems.append(f"line {line}: preferred = {r.get('preferred')!r}; use a, b or tie")
            continue
        imgs = []
        for col in ("image_a", "image_b"):
            ref = Path(r.get(col, ""))
            found = find_image(ref if ref.is_absolute() else base / ref, qid) if r.get(col) else None
            if found is None:
                problems.append(f"line {line}: {col} = {r.get(col)!r}: no such image file, nor a folder with exactly "
                                f"one {qid}.<ext>")
            imgs.append(found)
        split = r.get("split", "").lower()
        if split and split not in SPLITS:
            problems.append(f"line {line}: split = {r.get('split')!r}; use train or test (or leave it empty)")
        if None in imgs or (split and split not in SPLITS):
            continue
        a, b = imgs[0].resolve(), imgs[1].resolve()  # type: ignore[union-attr]
        if a == b:
            problems.append(f"line {line}: image_a and image_b are the same file {a}")
            continue
        ea, eb = r.get("editor_a", ""), r.get("editor_b", "")
        h = PREFERRED[pref]
        if (qid, b, a) in votes:  # the same pair listed the other way round: one pair, votes flipped
            a, b, ea, eb, h = b, a, eb, ea, -h
        key = (qid, a, b)
        votes.setdefault(key, []).append(h)
        old = meta.setdefault(key, (ea, eb, split))
        if old != (ea, eb, split):
            problems.append(f"line {line}: pair ({qid}, {a.name}, {b.name}) was listed before with editors/split "
                            f"{old}, here {(ea, eb, split)}")
    if problems:
        raise _fail(path, problems, "Fix these rows (docs/metaeval.md describes the CSV).")
    pairs, disagreed = [], 0
    for (qid, a, b), vs in votes.items():
        ea, eb, split = meta[(qid, a, b)]
        total = sum(vs)
        disagreed += len(set(vs)) > 1
        pairs.append(Pair(qid, a, b, int(math.copysign(1, total)) if total else 0, ea, eb, split, len(vs)))
    return pairs, {"rows": len(rows), "pairs": len(pairs), "rater_disagreements": disagreed}


# ----------------------------------------------------------------------------------------- per-image ratings
@dataclass(frozen=True)
class Ratings:
    """One rater's file: uid -> editor -> (SC, PQ)."""

    path: Path
    editors: tuple[str, ...]
    cells: dict[str, dict[str, tuple[float, float]]]


def read_ratings(path: Path) -> Ratings:
    """One ImagenHub rater TSV; every malformed cell is named (file, line, editor column) in one error."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise HumanDataError(f"{path}: cannot read the ratings file ({type(err).__name__}: {err})") from None
    rows = list(csv.reader(lines, delimiter="\t"))
    if not rows or not rows[0] or rows[0][0].strip() != "uid" or len(rows[0]) < 3:
        got = rows[0] if rows else "(empty file)"
        raise HumanDataError(f"{path}: want a tab-separated header `uid<TAB>editor1<TAB>editor2...` (at least two "
                             f"editors), got {got}")
    editors = tuple(h.strip() for h in rows[0][1:])
    if len(set(editors)) != len(editors) or not all(editors):
        raise HumanDataError(f"{path}: editor columns must be unique and named, got {list(editors)}")
    problems: list[str] = []
    cells: dict[str, dict[str, tuple[float, float]]] = {}
    for line, row in enumerate(rows[1:], start=2):
        if not any(c.strip() for c in row):
            continue
        uid = row[0].strip()
        if len(row) != len(editors) + 1:
            problems.append(f"line {line}: {len(row)} fields, the header has {len(editors) + 1}")
            continue
        if uid in cells:
            problems.append(f"line {line}: uid {uid} repeated")
            continue
        cells[uid] = {}
        for ed, cell in zip(editors, row[1:], strict=True):
            m = CELL.match(cell)
            vals = (float(m[1]), float(m[2])) if m else None
            if vals is None or not all(0.0 <= v <= 1.0 for v in vals):
                problems.append(f"line {line}, column {ed}: {cell!r} is not [SC, PQ] with both in [0, 1]")
                continue
            cells[uid][ed] = vals
    if problems:
        raise _fail(path, problems, "Each cell must read like [0.5, 1] (docs/metaeval.md).")
    return Ratings(path, editors, cells)


def image_score(sc: float, pq: float, aspect: str) -> float:
    """A rater's score of one image: SC, PQ, or ImagenHub's overall sqrt(SC * PQ)."""
    if aspect == "SC":
        return sc
    if aspect == "PQ":
        return pq
    return math.sqrt(sc * pq)


def query_id_mapper(rule: str) -> Callable[[str], str]:
    """uid -> query id: `stem` (the uid without its extension), `magicbrush-<split>` (ImagenHub's
    `sample_<img_id>_<turn>.jpg` -> editmeter's MagicBrush id `mb-<split>-<img_id>-t<turn>`), or a CSV file with
    columns uid,query_id."""
    if rule == "stem":
        return lambda uid: Path(uid).stem
    if rule.startswith("magicbrush-"):
        split = rule.removeprefix("magicbrush-")
        pat = re.compile(r"^sample_(\d+)_(\d+)$")

        def mb(uid: str) -> str:
            m = pat.match(Path(uid).stem)
            if not m:
                raise HumanDataError(f"uid {uid!r} is not ImagenHub's sample_<img_id>_<turn>.<ext> (--query-ids {rule})")
            return f"mb-{split}-{m[1]}-t{int(m[2])}"

        return mb
    path = Path(rule)
    if not path.is_file():
        raise HumanDataError(f"--query-ids {rule!r}: not `stem`, `magicbrush-<split>`, nor a CSV file (uid,query_id)")
    with path.open(encoding="utf-8-sig", newline="") as fh:
        reader = csv.DictReader(fh)
        if not reader.fieldnames or not {"uid", "query_id"} <= set(reader.fieldnames):
            raise HumanDataError(f"{path}: want columns uid,query_id, got {reader.fieldnames}")
        table = {r["uid"].strip(): r["query_id"].strip() for r in reader}

    def mapped(uid: str) -> str:
        if uid not in table:
            raise HumanDataError(f"{path}: no query_id for uid {uid!r}")
        return table[uid]

    return mapped


def ratings_to_pairs(raters: Sequence[Ratings], images: Path, *, aspect: str = "overall", rule: str = "mean",
                     query_ids: Callable[[str], str] = lambda uid: Path(uid).stem,
                     skip_missing: bool = False) -> tuple[list[Pair], dict[str, int]]:
    """Every pair of editors rated on the same sample becomes one judged pair.

    `rule` = `mean`: each image's score is the mean over the raters who rated it; the higher mean is preferred,
    equal means are a tie. `majority`: each rater votes for the image they scored higher (equal: no vote); the side
    with more votes is preferred, equal votes are a tie. Images: `<images>/<editor>/<uid>` or
    `<images>/<editor>/<query id>.<ext>`; a missing one is an error naming it (or, with `skip_missing`, its pairs are
    dropped and counted)."""
    if aspect not in ASPECTS:
        raise HumanDataError(f"aspect {aspect!r}: use one of {', '.join(ASPECTS)}")
    if rule not in RATER_RULES:
        raise HumanDataError(f"rater rule {rule!r}: use one of {', '.join(RATER_RULES)}")
    editors = raters[0].editors
    for r in raters[1:]:
        if set(r.editors) != set(editors):
            raise HumanDataError(f"{r.path}: editors {sorted(r.editors)} differ from {raters[0].path}'s "
                                 f"{sorted(editors)}; every rater file must rate the same editors")
    uids = sorted(set().union(*(r.cells for r in raters)))
    images = Path(images)
    paths: dict[tuple[str, str], Path] = {}
    missing: list[str] = []
    for uid in uids:
        qid = query_ids(uid)
        for ed in editors:
            p = images / ed / uid
            found = p if p.is_file() else find_image(images / ed, qid)
            if found is None:
                missing.append(f"{p} (nor {images / ed}/{qid}.<ext>)")
            else:
                paths[(uid, ed)] = found.resolve()
    if missing and not skip_missing:
        raise _fail(images, [f"missing image {m}" for m in missing],
                    "Point --images at ImagenHub's result folder (<root>/<editor>/<uid>), or pass --skip-missing "
                    "to drop those pairs (they are counted).")
    pairs: list[Pair] = []
    counts = {"samples": len(uids), "pairs_skipped_missing_image": 0, "rater_disagreements": 0}
    for uid in uids:
        qid = query_ids(uid)
        for ea, eb in itertools.combinations(editors, 2):
            if (uid, ea) not in paths or (uid, eb) not in paths:
                counts["pairs_skipped_missing_image"] += 1
                continue
            rated = [(image_score(*r.cells[uid][ea], aspect), image_score(*r.cells[uid][eb], aspect))
                     for r in raters if uid in r.cells and ea in r.cells[uid] and eb in r.cells[uid]]
            if not rated:
                continue
            signs = [int(math.copysign(1, x - y)) if x != y else 0 for x, y in rated]
            counts["rater_disagreements"] += len({s for s in signs if s}) > 1
            if rule == "mean":
                d = sum(x for x, _ in rated) / len(rated) - sum(y for _, y in rated) / len(rated)
                h = 0 if abs(d) < 1e-12 else int(math.copysign(1, d))
            else:
                v = sum(signs)
                h = 0 if v == 0 else int(math.copysign(1, v))
            pairs.append(Pair(qid, paths[(uid, ea)], paths[(uid, eb)], h, ea, eb, "", len(rated)))
    counts["pairs"] = len(pairs)
    return pairs, counts


def with_split(pairs: Sequence[Pair], train_fraction: float, seed: int) -> list[Pair]:
    """Pairs whose `split` is empty get train / test by query (all pairs of a query on one side), seeded; given
    splits are kept. Raises HumanDataError when either side ends up empty."""
    import numpy as np

    free = sorted({p.query_id for p in pairs if not p.split})
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(free))
    n_train = int(round(train_fraction * len(free)))
    side = {free[i]: ("train" if k < n_train else "test") for k, i in enumerate(order)}
    out = [p if p.split else replace(p, split=side[p.query_id]) for p in pairs]
    for s in SPLITS:
        if not any(p.split == s for p in out):
            raise HumanDataError(f"the {s} split has no pairs ({len(out)} pairs in all); adjust --train-fraction "
                                 "or the CSV's split column")
    return out
