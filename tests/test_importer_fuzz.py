"""Seeded hostile variants of every importer's input (PIE-Bench, ImgEdit-Bench, GEdit-Bench, MagicBrush and its
captions, the judge meta-evaluation sets): each must give a clear refusal (the importer's own error type, which
its script prints as one line and exits 1 on) or a documented acceptance that then loads, and never a traceback, a
hang (SIGALRM deadline), a partial or changed output, or a read outside the release folder.

The variant kinds are fixed; the seed picks the entry each one hits and the hostile value (`EDITMETER_FUZZ_SEEDS`,
default "0", runs more: `EDITMETER_FUZZ_SEEDS=0,1,2,3 pytest tests/test_importer_fuzz.py`).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import re
import signal
import struct
import subprocess
import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from benchmark.querysets.io import load_queryset
from benchmark.querysets.release import STAGING_PREFIX

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")
SEEDS = [int(s) for s in os.environ.get("EDITMETER_FUZZ_SEEDS", "0").split(",") if s.strip()]
DEADLINE_S = 20
OUTSIDE_COLOUR = (1, 2, 3)  # the image kept outside every release: a build that reads it has left the folder


# ------------------------------------------------------------------------------------------------ the harness
@contextlib.contextmanager
def deadline(seconds: int = DEADLINE_S):
    def hung(*_: Any) -> None:
        raise TimeoutError(f"hung for {seconds} s")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def snapshot(path: Path) -> Any:
    """Every entry under `path` (links not followed) with its size: what a refused build must leave as it was."""
    if not os.path.lexists(path):
        return None
    out = []
    for dirpath, dirs, files in os.walk(path):
        for name in dirs + files:
            p = Path(dirpath) / name
            out.append((str(p.relative_to(path)), p.is_symlink(), p.lstat().st_size if p.is_file() else -1))
    return sorted(out)


@dataclass
class Variant:
    name: str
    expect: str  # "refused" or "accepted"
    make: Callable[[Any], Any]  # mutates the importer's context
    pattern: str = ""  # a refusal's message must match this (regex, searched)
    check: Callable[[Path], None] | None = None  # an acceptance's extra check on the built folder


@dataclass
class Outcome:
    name: str
    got: str
    message: str = ""
    problems: list[str] = field(default_factory=list)


def attempt(variant: Variant, run: Callable[[], Any], out: Path, error: type[Exception]) -> Outcome:
    """Run one build; a refusal must be `error` with nothing changed, an acceptance must load."""
    before = snapshot(out)
    res = Outcome(variant.name, "")
    try:
        with deadline():
            run()
        res.got = "accepted"
    except error as err:
        res.got, res.message = "refused", str(err)
        if not res.message.strip():
            res.problems.append("empty refusal message")
        if snapshot(out) != before:
            res.problems.append(f"a refused build changed its output: {snapshot(out)} (was {before})")
    except Exception as err:  # noqa: BLE001 - any other type is the traceback this test exists to catch
        res.got, res.message = "traceback", f"{type(err).__name__}: {err}"[:300]
        return res
    if res.got == "accepted":
        if out.is_dir() and any(p.name.startswith(STAGING_PREFIX) for p in out.iterdir()):
            res.problems.append("staging folder left behind")
        try:
            qs = load_queryset(out)
        except Exception as err:  # noqa: BLE001
            res.problems.append(f"built but does not load: {type(err).__name__}: {err}"[:300])
        else:
            for q in qs:
                with Image.open(qs.path(q.image)) as im:
                    if im.convert("RGB").getpixel((0, 0)) == OUTSIDE_COLOUR:
                        res.problems.append(f"{q.id}: its image is the one outside the release")
        if variant.check is not None and not res.problems:
            try:
                variant.check(out)
            except AssertionError as err:
                res.problems.append(f"check failed: {err}")
    if res.got != variant.expect:
        res.problems.append(f"expected {variant.expect}, got {res.got}: {res.message[:300]}")
    elif variant.pattern and not re.search(variant.pattern, res.message):
        res.problems.append(f"refusal does not say {variant.pattern!r}: {res.message[:300]}")
    return res


def report(outcomes: list[Outcome]) -> None:
    bad = [f"{o.name}: {'; '.join(o.problems) or o.got + ' ' + o.message}" for o in outcomes
           if o.problems or o.got == "traceback"]
    assert not bad, f"{len(bad)} of {len(outcomes)} variants misbehaved:\n" + "\n".join(bad)


# -------------------------------------------------------------------------------------------- hostile values
def big_number(rng: random.Random) -> str:
    return "9" * rng.randint(4400, 6000)


def deep(rng: random.Random) -> str:
    n = rng.randint(100_000, 200_000)
    return "[" * n + "]" * n


def with_nul(rng: random.Random, text: str = "a prompt") -> str:
    i = rng.randint(0, len(text))
    return text[:i] + "\x00" + text[i:]


def surrogate_escape(rng: random.Random) -> str:
    return rng.choice(['"a \\ud800 b"', '"\\udfff"', '"x\\udc00"'])


def long_text(rng: random.Random) -> str:
    return "x" * rng.randint(70_000, 1_100_000)


def png(im: Image.Image) -> bytes:
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


def bomb_png(side: int = 60_000) -> bytes:
    """A PNG header claiming side x side pixels (refused from the header, never decoded)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)) + \
        chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + chunk(b"IEND", b"")


def sixteen_bit(side: int, value: int = 32896) -> bytes:
    return png(Image.fromarray(np.full((side, side), value, dtype=np.uint16)))


def transparent(side: int) -> bytes:
    im = Image.new("RGBA", (side, side), (10, 20, 30, 255))
    im.putpixel((1, 1), (10, 20, 30, 0))
    return png(im)


def opaque_rgba(side: int) -> bytes:
    return png(Image.new("RGBA", (side, side), (10, 20, 30, 255)))


def outside_image(tmp: Path, side: int) -> Path:
    """An image outside the release folder (its colour marks a read of it)."""
    path = tmp / "outside" / "secret.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (side, side), OUTSIDE_COLOUR).save(path)
    return path


def first_pixel(out: Path, folder: str = "images") -> tuple[int, ...]:
    files = sorted((out / folder).iterdir())
    with Image.open(files[0]) as im:
        return im.convert("RGB").getpixel((0, 0))


# ------------------------------------------------------------------------------------- JSON-text variants
def json_variants(target: str) -> list[tuple[str, str, Callable[[random.Random], str], str]]:
    """Raw JSON text put where `target` (a placeholder value) was: (name, expect, text, pattern)."""
    return [
        (f"{target}: a 5000-digit number", "refused", big_number, "number of"),
        (f"{target}: nesting 100k+ deep", "refused", deep, "nested"),
        (f"{target}: NaN", "refused", lambda rng: rng.choice(["NaN", "Infinity", "-Infinity"]), "not a JSON number"),
        (f"{target}: a 400-digit float", "refused", lambda rng: "1" * 400 + ".5", "number of"),
        (f"{target}: a lone surrogate", "refused", surrogate_escape, "surrogate"),
    ]


# --------------------------------------------------------------------------------------------------- PIE-Bench
PIE_SIDE = 512


@dataclass
class PieCtx:
    tmp: Path
    rng: random.Random
    data: Path
    entries: dict[str, dict[str, Any]]
    raw: dict[str, str] = field(default_factory=dict)  # placeholder -> raw JSON text
    text: Callable[[str], str] | None = None
    out: Path | None = None

    def key(self) -> str:
        return self.rng.choice(sorted(self.entries))

    def image(self, key: str) -> Path:
        return self.data / "annotation_images" / self.entries[key]["image_path"]


def pie_release(tmp: Path, rng: random.Random) -> PieCtx:
    data = tmp / "data"
    entries = {}
    for i, key in enumerate(("000000000001", "100000000002", "900000000003")):
        rel = f"{key[0]}_type/{key}.png"
        path = data / "annotation_images" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        im = Image.new("RGB", (PIE_SIDE, PIE_SIDE), (40 * i + 20, 90, 200 - 40 * i))
        im.save(path)
        entries[key] = {"image_path": rel, "original_prompt": f"a [cat] number {i}",
                        "editing_prompt": f"a [dog] number {i}", "editing_instruction": "make it a dog",
                        "editing_type_id": key[0], "blended_word": "cat dog", "mask": [100, 50, 2000, 30]}
    return PieCtx(tmp, rng, data, entries)


def pie_set(field_: str, value: Any) -> Callable[[PieCtx], None]:
    def make(c: PieCtx) -> None:
        c.entries[c.key()][field_] = value(c.rng) if callable(value) else value
    return make


def pie_raw(field_: str, text: Callable[[random.Random], str]) -> Callable[[PieCtx], None]:
    def make(c: PieCtx) -> None:
        c.entries[c.key()][field_] = "@@RAW@@"
        c.raw['"@@RAW@@"'] = text(c.rng)
    return make


def pie_image(content: Callable[[PieCtx], bytes]) -> Callable[[PieCtx], None]:
    def make(c: PieCtx) -> None:
        c.image(c.key()).write_bytes(content(c))
    return make


def pie_link_out(c: PieCtx) -> None:
    path = c.image(c.key())
    path.unlink()
    path.symlink_to(outside_image(c.tmp, PIE_SIDE))


def pie_link_folder_out(c: PieCtx) -> None:
    key = c.key()
    folder = c.image(key).parent
    outside = outside_image(c.tmp, PIE_SIDE).parent
    Image.new("RGB", (PIE_SIDE, PIE_SIDE), OUTSIDE_COLOUR).save(outside / Path(c.entries[key]["image_path"]).name)
    for p in folder.iterdir():
        p.unlink()
    folder.rmdir()
    folder.symlink_to(outside)


def pie_fifo(c: PieCtx) -> None:
    path = c.image(c.key())
    path.unlink()
    os.mkfifo(path)


def pie_link_inside(c: PieCtx) -> None:
    keys = sorted(c.entries)
    path = c.image(keys[1])
    path.unlink()
    path.symlink_to(c.image(keys[0]))


def pie_out_symlink(c: PieCtx) -> None:
    target = c.tmp / "elsewhere"
    target.mkdir()
    c.out.symlink_to(target)


def pie_out_images_symlink(c: PieCtx) -> None:
    target = c.tmp / "elsewhere"
    target.mkdir()
    c.out.mkdir()
    (c.out / "images").symlink_to(target)


def pie_duplicate_key(c: PieCtx) -> None:
    key = c.key()
    c.text = lambda t: t.replace("{", '{"' + key + '": {}, ', 1)


def pie_not_utf8(c: PieCtx) -> None:
    c.text = lambda t: t.replace("number 0", "number \udcff0")


def pie_check_16bit(out: Path) -> None:
    qs = load_queryset(out)
    got = {q.id: Image.open(qs.path(q.image)).getpixel((5, 5)) for q in qs}
    assert (128, 128, 128) in got.values(), f"16-bit 32896 should store 128 (load_rgb's /257), got {got}"


PIE_VARIANTS = [
    *(Variant(name, expect, pie_raw("mask", text), pattern) for name, expect, text, pattern in json_variants("mask")),
    *(Variant(name, expect, pie_raw("original_prompt", text), pattern)
      for name, expect, text, pattern in json_variants("original_prompt")[-1:]),
    Variant("duplicate entry id", "refused", pie_duplicate_key, "duplicate key"),
    *(Variant(f"NUL in {f}", "refused", pie_set(f, with_nul), "NUL")
      for f in ("original_prompt", "editing_prompt", "editing_instruction", "blended_word")),
    Variant("a 70k-1M character prompt", "refused", pie_set("editing_prompt", long_text), "characters"),
    Variant("null prompt", "refused", pie_set("original_prompt", None), "must be text, got null"),
    Variant("number as instruction", "refused", pie_set("editing_instruction", 123), "must be text, got int"),
    Variant("list as blended_word", "refused", pie_set("blended_word", ["cat"]), "must be text"),
    Variant("int editing_type_id", "refused", pie_set("editing_type_id", 3), "must be text"),
    Variant("unknown editing_type_id", "refused", pie_set("editing_type_id", "10"), "is not one of"),
    Variant("mask of odd length", "refused", pie_set("mask", [1, 2, 3]), "odd number"),
    Variant("negative mask value", "refused", pie_set("mask", [-5, 3]), "negative"),
    Variant("float mask value", "refused", pie_set("mask", [2.7, 3]), "not an integer"),
    Variant("bool mask value", "refused", pie_set("mask", [True, 3]), "not an integer"),
    Variant("mask run past the image", "refused", pie_set("mask", [PIE_SIDE * PIE_SIDE - 1, 5]), "leaves"),
    Variant("mask as a string", "refused", pie_set("mask", "1 2"), "must be a list"),
    Variant("absolute image_path", "refused",
            pie_set("image_path", lambda rng: rng.choice(["/etc/hostname", "/dev/zero", "/proc/self/environ"])),
            "relative"),
    Variant("image_path with ..", "refused",
            pie_set("image_path", lambda rng: rng.choice(["../outside/secret.png", "0_type/../../../x.png"])), r"'\.\.'"),
    Variant("image_path empty", "refused", pie_set("image_path", ""), "must be a non-empty"),
    Variant("image symlinked outside", "refused", pie_link_out, "outside the release"),
    Variant("image folder symlinked outside", "refused", pie_link_folder_out, "outside the release"),
    Variant("image is a FIFO", "refused", pie_fifo, "not a regular file"),
    Variant("image path is a folder", "refused", pie_set("image_path", "0_type"), "not a regular file"),
    Variant("16-bit source", "accepted", pie_image(lambda c: sixteen_bit(PIE_SIDE)), check=pie_check_16bit),
    Variant("source with transparency", "refused", pie_image(lambda c: transparent(PIE_SIDE)), "transparent"),
    Variant("opaque RGBA source", "accepted", pie_image(lambda c: opaque_rgba(PIE_SIDE))),
    Variant("decompression bomb header", "refused", pie_image(lambda c: bomb_png()), "over the limit"),
    Variant("empty image file", "refused", pie_image(lambda c: b""), "not a readable image"),
    Variant("truncated image", "refused",
            pie_image(lambda c: png(Image.new("RGB", (PIE_SIDE, PIE_SIDE), (9, 9, 9)))[:60]), "not a readable image"),
    Variant("wrong-size source", "refused", pie_image(lambda c: png(Image.new("RGB", (256, 256)))), "512 x 512"),
    Variant("5000-digit entry id", "refused",
            lambda c: c.entries.__setitem__("1" * 5000, c.entries.pop(c.key())), "12 digits"),
    Variant("entry id with a path", "refused",
            lambda c: c.entries.__setitem__("../00000001", c.entries.pop(c.key())), "12 digits"),
    Variant("missing field", "refused", lambda c: c.entries[c.key()].pop("mask"), "missing field"),
    Variant("top level a list", "refused", lambda c: setattr(c, "text", lambda t: f"[{t}]"), "non-empty JSON object"),
    Variant("empty object", "refused", lambda c: setattr(c, "text", lambda t: "{}"), "non-empty JSON object"),
    Variant("not UTF-8", "refused", pie_not_utf8, "UTF-8"),
    Variant("image symlinked to another inside the release", "accepted", pie_link_inside),
    Variant("unicode prompts", "accepted", pie_set("editing_prompt", "ein [Hund] 狗 🐕")),
    Variant("--out is a symlink", "refused", pie_out_symlink, "symlink"),
    Variant("--out/images is a symlink", "refused", pie_out_images_symlink, "symlink"),
]


def write_pie(c: PieCtx) -> None:
    text = json.dumps(c.entries, ensure_ascii=False)
    for placeholder, raw in c.raw.items():
        text = text.replace(placeholder, raw)
    if c.text is not None:
        text = c.text(text)
    (c.data / "mapping_file.json").write_bytes(text.encode("utf-8", "surrogateescape"))


@pytest.mark.parametrize("seed", SEEDS)
def test_pie_bench_importer_holds_against_hostile_releases(tmp_path, seed):
    from benchmark.querysets.pie import PieFormatError, build

    outcomes = []
    for n, v in enumerate(PIE_VARIANTS):
        rng = random.Random(f"pie-{seed}-{n}")
        c = pie_release(tmp_path / f"v{n}", rng)
        c.out = tmp_path / f"v{n}" / "out"
        v.make(c)
        write_pie(c)
        outcomes.append(attempt(v, lambda c=c: build(c.data, c.out), c.out, PieFormatError))
        if v.name.startswith("--out"):
            elsewhere = tmp_path / f"v{n}" / "elsewhere"
            if any(elsewhere.iterdir()):
                outcomes[-1].problems.append(f"wrote through the link into {elsewhere}")
    report(outcomes)


def test_a_refused_pie_rebuild_leaves_the_previous_build_as_it_was(tmp_path):
    from benchmark.querysets.pie import PieFormatError, build

    c = pie_release(tmp_path, random.Random(0))
    write_pie(c)
    meta = build(c.data, tmp_path / "out")
    before = snapshot(tmp_path / "out")
    keys = sorted(c.entries)
    c.entries[keys[-1]]["editing_instruction"] = "bad \x00"  # the last entry: the others are written first
    write_pie(c)
    with pytest.raises(PieFormatError, match="NUL"):
        build(c.data, tmp_path / "out")
    assert snapshot(tmp_path / "out") == before
    assert load_queryset(tmp_path / "out").hash == meta["content_hash"]


def test_the_pie_script_prints_a_refusal_as_one_line_and_exits_1(tmp_path):
    c = pie_release(tmp_path, random.Random(0))
    pie_link_out(c)
    write_pie(c)
    done = subprocess.run([sys.executable, "-m", "benchmark.commands.cli", "data", "build", "pie", "--data", str(c.data), "--out",
                           str(tmp_path / "out")], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: ") and "outside" in done.stderr
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------------------ ImgEdit-Bench
IMG_SIDE = 32


@dataclass
class ImgCtx:
    tmp: Path
    rng: random.Random
    images: Path
    entries: dict[str, dict[str, Any]]
    raw: dict[str, str] = field(default_factory=dict)
    text: Callable[[str], str] | None = None
    out: Path | None = None

    def key(self) -> str:
        return self.rng.choice(sorted(self.entries))

    def source(self, key: str) -> Path:
        return self.images / self.entries[key]["id"]


def imgedit_release(tmp: Path, rng: random.Random) -> ImgCtx:
    images = tmp / "unpacked"
    entries = {}
    for i, (key, etype) in enumerate((("1", "add"), ("2", "remove"), ("10", "style"))):
        rel = f"animal/{i:06d}.png"
        (images / rel).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (IMG_SIDE + 8, IMG_SIDE), (30 * i + 10, 100, 50)).save(images / rel)
        entries[key] = {"id": rel, "prompt": f"edit number {i}", "edit_type": etype}
    return ImgCtx(tmp, rng, images, entries)


def img_set(field_: str, value: Any) -> Callable[[ImgCtx], None]:
    def make(c: ImgCtx) -> None:
        c.entries[c.key()][field_] = value(c.rng) if callable(value) else value
    return make


def img_raw(field_: str, text: Callable[[random.Random], str]) -> Callable[[ImgCtx], None]:
    def make(c: ImgCtx) -> None:
        c.entries[c.key()][field_] = "@@RAW@@"
        c.raw['"@@RAW@@"'] = text(c.rng)
    return make


def img_key(new: Callable[[random.Random], str]) -> Callable[[ImgCtx], None]:
    def make(c: ImgCtx) -> None:
        c.entries[new(c.rng)] = c.entries.pop(c.key())
    return make


def img_file(content: Callable[[ImgCtx], bytes]) -> Callable[[ImgCtx], None]:
    def make(c: ImgCtx) -> None:
        c.source(c.key()).write_bytes(content(c))
    return make


def img_link_out(c: ImgCtx) -> None:
    path = c.source(c.key())
    path.unlink()
    path.symlink_to(outside_image(c.tmp, IMG_SIDE))


def img_fifo(c: ImgCtx) -> None:
    path = c.source(sorted(c.entries)[-1])  # not the first key's: that one locates the image root
    path.unlink()
    os.mkfifo(path)


def img_dev_zero(c: ImgCtx) -> None:
    path = c.source(sorted(c.entries)[-1])
    path.unlink()
    path.symlink_to("/dev/zero")


IMGEDIT_VARIANTS = [
    *(Variant(name, expect, img_raw("prompt", text), pattern) for name, expect, text, pattern in json_variants("prompt")),
    Variant("duplicate key", "refused",
            lambda c: setattr(c, "text", lambda t: t.replace("{", '{"1": {}, ', 1)), "duplicate key"),
    Variant("NUL in the prompt", "refused", img_set("prompt", with_nul), "NUL"),
    Variant("a 70k-1M character prompt", "refused", img_set("prompt", long_text), "characters"),
    Variant("null prompt", "refused", img_set("prompt", None), "must be text, got null"),
    Variant("number as prompt", "refused", img_set("prompt", 7), "must be text, got int"),
    Variant("list as edit_type", "refused", img_set("edit_type", ["add"]), "must be text"),
    Variant("5000-digit key", "refused", img_key(lambda rng: "1" * rng.randint(4400, 6000)), "query id"),
    Variant("200-digit key", "refused", img_key(lambda rng: "2" * 200), "query id"),
    Variant("non-digit key", "refused", img_key(lambda rng: rng.choice(["1a", "-1", "１２", "../1"])), "decimal"),
    Variant("leading-zero key", "accepted", img_key(lambda rng: "0007")),
    Variant("absolute source id", "refused",
            img_set("id", lambda rng: rng.choice(["/etc/hostname", "/dev/zero"])), "relative"),
    Variant("source id with ..", "refused", img_set("id", "../outside/secret.png"), r"'\.\.'"),
    Variant("source symlinked outside", "refused", img_link_out, "outside the release"),
    Variant("source is a FIFO", "refused", img_fifo, "not a regular file|not found"),
    Variant("source links to /dev/zero", "refused", img_dev_zero, "outside the release|not a regular file"),
    Variant("16-bit source", "accepted", img_file(lambda c: sixteen_bit(IMG_SIDE)),
            check=lambda out: None if (128, 128, 128) in {first_pixel(out)} | {
                Image.open(p).getpixel((3, 3)) for p in (out / "images").iterdir()} else pytest.fail("16-bit")),
    Variant("source with transparency", "refused", img_file(lambda c: transparent(IMG_SIDE)), "transparent"),
    Variant("decompression bomb header", "refused", img_file(lambda c: bomb_png()), "over the limit"),
    Variant("empty source", "refused", img_file(lambda c: b""), "not a readable image"),
    Variant("unknown edit_type", "refused", img_set("edit_type", "recolour"), "is not one of"),
    Variant("top level a list", "refused", lambda c: setattr(c, "text", lambda t: f"[{t}]"), "non-empty JSON object"),
    Variant("--out is a symlink", "refused", lambda c: (c.tmp / "elsewhere").mkdir() or c.out.symlink_to(
        c.tmp / "elsewhere"), "symlink"),
]


def write_imgedit(c: ImgCtx) -> Path:
    text = json.dumps(c.entries, ensure_ascii=False)
    for placeholder, raw in c.raw.items():
        text = text.replace(placeholder, raw)
    if c.text is not None:
        text = c.text(text)
    path = c.tmp / "basic_edit.json"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("seed", SEEDS)
def test_imgedit_importer_holds_against_hostile_releases(tmp_path, seed):
    from benchmark.querysets.imgedit import ImgEditFormatError, build

    outcomes = []
    for n, v in enumerate(IMGEDIT_VARIANTS):
        c = imgedit_release(tmp_path / f"v{n}", random.Random(f"imgedit-{seed}-{n}"))
        c.out = tmp_path / f"v{n}" / "out"
        v.make(c)
        edits = write_imgedit(c)
        outcomes.append(attempt(v, lambda c=c, e=edits: build(e, c.images, c.out), c.out, ImgEditFormatError))
    report(outcomes)


# ------------------------------------------------------------------------------------------------- GEdit-Bench
@dataclass
class HubCtx:
    tmp: Path
    rng: random.Random
    rows: list[dict[str, Any]]
    types: dict[str, Any] = field(default_factory=dict)  # column -> datasets.Value type name override
    out: Path | None = None
    folder: Path | None = None
    damage: Callable[[Path], None] | None = None  # applied to the saved folder after `save_to_disk`

    def last(self) -> dict[str, Any]:
        """The last row: a refusal there comes after the others were read (the partial-output case)."""
        return self.rows[-1]


def cell(data: bytes | None, path: str | None = None) -> dict[str, Any]:
    return {"bytes": data, "path": path}


def gedit_rows() -> list[dict[str, Any]]:
    rows = []
    for i, (key, task, lang) in enumerate((("k1", "text_change", "en"), ("k1", "text_change", "cn"),
                                          ("k2", "color_alter", "en"))):
        im = png(Image.new("RGB", (IMG_SIDE, IMG_SIDE), (50 * i + 5, 60, 70)))
        rows.append({"key": key, "task_type": task, "instruction": f"instruction {i}", "instruction_language": lang,
                     "input_image": cell(im), "input_image_raw": cell(im), "Intersection_exist": i % 2 == 0})
    return rows


def save_hub(c: HubCtx, columns: dict[str, str]) -> Path:
    import datasets

    feats = {}
    for name, kind in columns.items():
        kind = c.types.get(name, kind)
        feats[name] = {"bytes": datasets.Value("binary"), "path": datasets.Value("string")} if kind == "image" \
            else datasets.Value(kind)
    ds = datasets.Dataset.from_dict({k: [r[k] for r in c.rows] for k in columns}, features=datasets.Features(feats))
    path = c.folder or c.tmp / "hf"
    datasets.DatasetDict({"train": ds}).save_to_disk(str(path))
    if c.damage is not None:
        c.damage(path)
    return path


def damaged(how: Callable[[Path], None]) -> Callable[[HubCtx], None]:
    def make(c: HubCtx) -> None:
        c.damage = how
    return make


def truncate(name: str, keep: float) -> Callable[[Path], None]:
    """Cut the saved folder's file `name` (a glob) to `keep` of its bytes, as an interrupted copy leaves it."""
    def how(folder: Path) -> None:
        f = next(folder.rglob(name))
        data = f.read_bytes()
        f.write_bytes(data[:int(len(data) * keep)])
    return how


def garbage(name: str) -> Callable[[Path], None]:
    return lambda folder: next(folder.rglob(name)).write_bytes(b'{"splits": ["tra\x00\xff')


# the saved dataset folder itself damaged: each is one error naming the file (or the folder and "0 rows")
SAVED_FOLDER_VARIANTS = [
    Variant("empty dataset (0 rows)", "refused", lambda c: c.rows.clear(), r"hf/train: 0 rows"),
    Variant("truncated .arrow", "refused", damaged(truncate("*.arrow", 0.3)),
            r"hf/train/data-00000-of-00001\.arrow: not a readable Arrow file"),
    Variant("garbage dataset_dict.json", "refused", damaged(garbage("dataset_dict.json")),
            r"hf/dataset_dict\.json: "),
]


GEDIT_COLUMNS = {"key": "string", "task_type": "string", "instruction": "string", "instruction_language": "string",
                 "input_image": "image", "input_image_raw": "image", "Intersection_exist": "bool"}


def hub_set(col: str, value: Any, *, row: str = "last") -> Callable[[HubCtx], None]:
    def make(c: HubCtx) -> None:
        r = c.last() if row == "last" else c.rng.choice(c.rows)
        r[col] = value(c) if callable(value) else value
    return make


def in_folder_file(c: HubCtx, content: bytes, name: str = "extra.png") -> str:
    c.folder = c.tmp / "hf"
    c.folder.mkdir(parents=True, exist_ok=True)
    (c.folder / name).write_bytes(content)
    return name


def in_folder_fifo(c: HubCtx) -> str:
    c.folder = c.tmp / "hf"
    c.folder.mkdir(parents=True, exist_ok=True)
    os.mkfifo(c.folder / "pipe.png")
    return "pipe.png"


def path_only(path: Callable[[HubCtx], str]) -> Callable[[HubCtx], dict[str, Any]]:
    return lambda c: cell(None, path(c))


HOSTILE_CELLS = [
    ("cell naming /dev/zero", "refused", path_only(lambda c: "/dev/zero"), "relative"),
    ("cell with an absolute path outside", "refused",
     path_only(lambda c: str(outside_image(c.tmp, IMG_SIDE))), "relative"),
    ("cell with ../", "refused", path_only(lambda c: "../outside/secret.png"), r"'\.\.'"),
    ("cell naming a FIFO in the folder", "refused", path_only(in_folder_fifo), "not a regular file"),
    ("cell naming a file in the folder", "accepted",
     path_only(lambda c: in_folder_file(c, png(Image.new("RGB", (IMG_SIDE, IMG_SIDE), (7, 7, 7))))), ""),
    ("16-bit image", "accepted", lambda c: cell(sixteen_bit(IMG_SIDE)), ""),
    ("image with transparency", "refused", lambda c: cell(transparent(IMG_SIDE)), "transparent"),
    ("12000 x 12000 image header", "refused", lambda c: cell(bomb_png(12_000)), "over the limit"),
    ("empty bytes", "refused", lambda c: cell(b""), "no image bytes|empty"),
    ("garbage bytes", "refused", lambda c: cell(b"GIF89a not really"), "not a readable image"),
    ("no bytes, no path", "refused", lambda c: cell(None, None), "empty"),
]


def gedit_16bit_check(out: Path) -> None:
    assert any(Image.open(p).getpixel((3, 3)) == (128, 128, 128) for p in (out / "images").iterdir()), \
        "a 16-bit 32896 image must store 128 (load_rgb's /257)"


GEDIT_VARIANTS = [
    *(Variant(f"input_image: {name}", expect, hub_set("input_image", value), pattern,
              gedit_16bit_check if "16-bit" in name else None) for name, expect, value, pattern in HOSTILE_CELLS),
    Variant("key None", "refused", hub_set("key", None), "key must be text, got null"),
    Variant("key with a path", "refused", hub_set("key", "../k"), "not allowed"),
    Variant("200-character key", "refused", hub_set("key", "k" * 200), "not allowed"),
    Variant("NUL in the instruction", "refused", hub_set("instruction", lambda c: with_nul(c.rng)), "NUL"),
    Variant("a 70k-1M character instruction", "refused", hub_set("instruction", lambda c: long_text(c.rng)),
            "characters"),
    Variant("null instruction", "refused", hub_set("instruction", None), "instruction"),
    Variant("unknown task_type", "refused", hub_set("task_type", "make_it_pop"), "unknown task_type"),
    Variant("null task_type", "refused", hub_set("task_type", None), "unknown task_type"),
    Variant("unknown language", "refused", hub_set("instruction_language", "fr"), "instruction_language"),
    Variant("null Intersection_exist", "refused", hub_set("Intersection_exist", None), "true or false"),
    Variant("duplicate row", "refused", lambda c: c.rows.append(dict(c.rows[0])), "duplicate"),
    Variant("--out/images is a symlink", "refused",
            lambda c: ((c.tmp / "elsewhere").mkdir(), c.out.mkdir(), (c.out / "images").symlink_to(c.tmp / "elsewhere")),
            "symlink"),
    *SAVED_FOLDER_VARIANTS,
    Variant("truncated state.json", "refused", damaged(truncate("state.json", 0.5)), r"hf/train/state\.json:"),
]


@pytest.mark.parametrize("seed", SEEDS)
def test_gedit_importer_holds_against_hostile_datasets(tmp_path, seed):
    from benchmark.querysets.gedit import GEditFormatError, build

    outcomes = []
    for n, v in enumerate(GEDIT_VARIANTS):
        c = HubCtx(tmp_path / f"v{n}", random.Random(f"gedit-{seed}-{n}"), gedit_rows())
        c.tmp.mkdir(parents=True)
        c.out = c.tmp / "out"
        v.make(c)
        data = save_hub(c, GEDIT_COLUMNS)
        outcomes.append(attempt(v, lambda c=c, d=data: build(d, c.out), c.out, GEditFormatError))
        if (c.tmp / "elsewhere").is_dir() and any((c.tmp / "elsewhere").iterdir()):
            outcomes[-1].problems.append("wrote through the images/ link")
    report(outcomes)


def test_the_gedit_script_prints_a_damaged_saved_dataset_as_one_line_naming_the_file(tmp_path):
    """`editmeter data build gedit` on a saved dataset whose .arrow file was cut short: one line naming the file, the
    refusal's exit status (2, as every builder but hatie), nothing written, no pyarrow traceback."""
    c = HubCtx(tmp_path, random.Random(0), gedit_rows(), damage=truncate("*.arrow", 0.3))
    data = save_hub(c, GEDIT_COLUMNS)
    done = subprocess.run([sys.executable, "-m", "benchmark.commands.cli", "data", "build", "gedit", "--dataset", str(data), "--out",
                           str(tmp_path / "out")], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    errors = [ln for ln in done.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and "data-00000-of-00001.arrow: not a readable Arrow file" in errors[0], done.stderr
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------------- MagicBrush + captions
MB_COLUMNS = {"img_id": "string", "turn_index": "int32", "source_img": "image", "mask_img": "image",
              "instruction": "string", "target_img": "image"}


def mb_rows() -> list[dict[str, Any]]:
    def im(colour):
        return cell(png(Image.new("RGB", (IMG_SIDE, IMG_SIDE), colour)))

    mask = Image.new("RGB", (IMG_SIDE, IMG_SIDE))
    mask.paste((255, 255, 255), (4, 4, 12, 12))
    return [{"img_id": img, "turn_index": t, "source_img": im((10 * t, 20, 30)), "mask_img": cell(png(mask)),
             "instruction": f"edit {img} {t}", "target_img": im((200, 20, 10 * t))}
            for img, t in (("327726", 1), ("327726", 2), ("242679", 1))]


CAPTIONS = {"327726": {"327726-input.png": "a dog", "327726-output1.png": "a dog in a hat",
                       "327726-output2.png": "a dog in snow"},
            "242679": {"242679-input.png": "a blue car", "242679-output1.png": "a red car"}}


@dataclass
class CaptionCtx(HubCtx):
    captions: str = ""


def captions_raw(edit: Callable[[random.Random, str], str]) -> Callable[[CaptionCtx], None]:
    def make(c: CaptionCtx) -> None:
        c.captions = edit(c.rng, json.dumps(CAPTIONS))
    return make


def caption_value(raw: Callable[[random.Random], str]) -> Callable[[CaptionCtx], None]:
    return captions_raw(lambda rng, t: t.replace('"a red car"', raw(rng)))


MB_VARIANTS = [
    *(Variant(f"source_img: {name}", expect, hub_set("source_img", value), pattern)
      for name, expect, value, pattern in HOSTILE_CELLS if "16-bit" not in name and "in the folder" not in name),
    Variant("16-bit source", "accepted", hub_set("source_img", lambda c: cell(sixteen_bit(IMG_SIDE)), row="any"),
            check=gedit_16bit_check),
    Variant("mask: decompression bomb header", "refused", hub_set("mask_img", lambda c: cell(bomb_png())),
            "over the limit"),
    Variant("mask: garbage", "refused", hub_set("mask_img", lambda c: cell(b"\x89PNG broken")), "not a readable"),
    Variant("target: transparency", "refused", hub_set("target_img", lambda c: cell(transparent(IMG_SIDE))),
            "transparent"),
    Variant("target of another size", "refused",
            hub_set("target_img", lambda c: cell(png(Image.new("RGB", (IMG_SIDE, 20))))), "differ in size"),
    Variant("turn_index 2.7", "refused",
            lambda c: (c.types.__setitem__("turn_index", "float32"), c.rows[1].__setitem__("turn_index", 2.7)),
            "turn_index must be an integer"),
    Variant("turn_index 0", "refused", hub_set("turn_index", 0), "at least 1"),
    Variant("turn_index null", "refused", hub_set("turn_index", None), "must be an integer"),
    Variant("img_id None", "refused", hub_set("img_id", None), "img_id must be text"),
    Variant("img_id with a path", "refused", hub_set("img_id", "../../x"), "not allowed"),
    Variant("NUL in the instruction", "refused", hub_set("instruction", lambda c: with_nul(c.rng)), "NUL"),
    Variant("blank instruction", "refused", hub_set("instruction", "   "), "needs source_img"),
    Variant("duplicate (img_id, turn)", "refused", lambda c: c.rows.append(dict(c.rows[0])), "duplicate"),
    Variant("captions: duplicate key", "refused", captions_raw(
        lambda rng, t: t.replace('"242679-input.png": "a blue car"',
                                 '"242679-input.png": "a blue car", "242679-input.png": "a green car"')),
            "duplicate key"),
    Variant("captions: NUL", "refused", caption_value(lambda rng: json.dumps(with_nul(rng, "a red car"))), "NUL"),
    Variant("captions: lone surrogate", "refused", caption_value(surrogate_escape), "surrogate"),
    Variant("captions: a number", "refused", caption_value(lambda rng: "12"), "must be text"),
    Variant("captions: a 5000-digit number", "refused", caption_value(big_number), "number of"),
    Variant("captions: nesting 100k+ deep", "refused", caption_value(deep), "nested"),
    Variant("captions: a list", "refused", captions_raw(lambda rng, t: "[" + t + "]"), "expected"),
    Variant("captions: missing one", "refused", captions_raw(lambda rng, t: t.replace("242679-output1", "nope")),
            "no caption"),
    *SAVED_FOLDER_VARIANTS,
]


@pytest.mark.parametrize("seed", SEEDS)
def test_magicbrush_importer_holds_against_hostile_datasets_and_captions(tmp_path, seed):
    from benchmark.querysets.magicbrush import MagicBrushFormatError, build

    outcomes = []
    for n, v in enumerate(MB_VARIANTS):
        c = CaptionCtx(tmp_path / f"v{n}", random.Random(f"mb-{seed}-{n}"), mb_rows())
        c.tmp.mkdir(parents=True)
        c.out = c.tmp / "out"
        c.captions = json.dumps(CAPTIONS)
        v.make(c)
        data = save_hub(c, MB_COLUMNS)
        (c.tmp / "captions.json").write_text(c.captions, encoding="utf-8")
        outcomes.append(attempt(v, lambda c=c, d=data: build(d, c.out, split="train", turns="all",
                                                              captions=c.tmp / "captions.json"),
                                c.out, MagicBrushFormatError))
    report(outcomes)


def test_the_magicbrush_script_prints_a_damaged_saved_dataset_as_one_line_naming_the_file(tmp_path):
    """`editmeter data build magicbrush` on a saved dataset whose .arrow file was cut short: one line naming the file,
    exit status 2, nothing written."""
    c = HubCtx(tmp_path, random.Random(0), mb_rows(), damage=truncate("*.arrow", 0.3))
    data = save_hub(c, MB_COLUMNS)
    done = subprocess.run([sys.executable, "-m", "benchmark.commands.cli", "data", "build", "magicbrush", "--dataset", str(data),
                           "--split", "train", "--out", str(tmp_path / "out")], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    errors = [ln for ln in done.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and "not a readable Arrow file" in errors[0], done.stderr
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------------------- judge sets
def tiger_folder(tmp: Path, items: Any, raw: str | None = None, name: str = "EditReward_Bench_3pair.json") -> Path:
    folder = tmp / "tiger"
    (folder / "images").mkdir(parents=True, exist_ok=True)
    for i in range(5):
        (folder / "images" / f"{i}.png").write_bytes(png(Image.new("RGB", (16, 16), (40 * i, 9, 9))))
    (folder / name).write_text(raw if raw is not None else json.dumps(items), encoding="utf-8")
    return folder


def tiger_item(ranking: Any = "A>B>C", n: int = 3, **over: Any) -> dict[str, Any]:
    item = {"prompt": "p", "path_src": "images/0.png", "paths_generated": [f"images/{i + 1}.png" for i in range(n)],
            "human_vote": {"ranking": ranking}}
    return {**item, **over}


def tiger_variants(rng: random.Random) -> list[tuple[str, str, Callable[[Path], Path], str]]:
    good = tiger_item()
    k = rng.randint(0, 2)

    def items(bad: dict[str, Any], name: str = "EditReward_Bench_3pair.json") -> Callable[[Path], Path]:
        listed = [good] * 3
        listed[k] = bad
        return lambda tmp: tiger_folder(tmp, listed, name=name)

    return [
        ("ranking A>C with 2 edits", "refused", items(tiger_item("A>C", 2), "EditReward_Bench_2pair.json"),
         f"item {k}: ranking 'A>C' does not order its 2 edits"),
        ("ranking A>A", "refused", items(tiger_item(rng.choice(["A>A", "A>A>B"]), 3)), f"item {k}: ranking"),
        ("ranking A>B>D with 3 edits", "refused", items(tiger_item("A>B>D", 3)), f"item {k}: ranking 'A>B>D'"),
        ("tie form with 3 edits", "refused", items(tiger_item("A=B=Good", 3)), f"item {k}: ranking"),
        ("ranking a number", "refused", items(tiger_item(3, 3)), f"item {k}: ranking must be text"),
        ("null prompt", "refused", items(tiger_item(prompt=None)), f"item {k}: prompt must be text, got null"),
        ("number prompt", "refused", items(tiger_item(prompt=5)), "prompt must be text"),
        ("paths_generated a number", "refused", items(tiger_item(paths_generated=7)), "paths_generated must be a list"),
        ("one edit", "refused", items(tiger_item("A>B", 1)), "1 edits"),
        ("human_vote a list", "refused", items(tiger_item(human_vote=["A>B"])), "missing"),
        ("item a number", "refused", items(5), "missing"),
        ("absolute image path", "refused", items(tiger_item(path_src="/etc/hostname")), "relative"),
        ("image path with ..", "refused", items(tiger_item(path_src="../outside/secret.png")), r"'\.\.'"),
        ("edit path a number", "refused", items(tiger_item(paths_generated=[1, 2, 3])), "must be text"),
        ("empty set", "refused", lambda tmp: tiger_folder(tmp, []), "no items"),
        ("top level an object", "refused", lambda tmp: tiger_folder(tmp, {"a": 1}), "must hold a JSON list"),
        ("a 5000-digit number", "refused", lambda tmp: tiger_folder(tmp, None, raw=f"[{big_number(rng)}]"),
         "number of"),
        ("nesting 100k+ deep", "refused", lambda tmp: tiger_folder(tmp, None, raw=deep(rng)), "nested"),
        ("duplicate key", "refused", lambda tmp: tiger_folder(
            tmp, None, raw='[{"prompt": "a", "prompt": "b"}]'), "duplicate key"),
        ("a lone surrogate in the prompt", "refused", lambda tmp: tiger_folder(
            tmp, None, raw=json.dumps([good]).replace('"p"', surrogate_escape(rng))), "surrogate"),
        ("well-formed 2/3/4-edit rankings", "accepted", lambda tmp: tiger_folder(
            tmp, [tiger_item("B>A", 2), tiger_item("A=B=Bad", 2), tiger_item("C>A>B", 3),
                  tiger_item("D>B>A>C", 4)]), ""),
    ]


def tiger_link_out(tmp: Path) -> Path:
    folder = tiger_folder(tmp, [tiger_item()])
    (folder / "images" / "2.png").unlink()
    (folder / "images" / "2.png").symlink_to(outside_image(tmp, 16))
    return folder


def tiger_fifo(tmp: Path) -> Path:
    folder = tiger_folder(tmp, [tiger_item()])
    (folder / "images" / "3.png").unlink()
    os.mkfifo(folder / "images" / "3.png")
    return folder


def parquet(path: Path, rows: list[dict[str, Any]]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def editscore_row(**over: Any) -> dict[str, Any]:
    img = {"bytes": png(Image.new("RGB", (16, 16), (5, 6, 7))), "path": "x.png"}
    return {"key": ["a", "b"], "instruction": "edit", "input_image": img, "output_images": [img, img],
            "task_type": "color_alter", "dimension": "overall", **over}


def genai_row(**over: Any) -> dict[str, Any]:
    img = {"bytes": png(Image.new("RGB", (16, 16), (5, 6, 7))), "path": "x.png"}
    return {"instruct_prompt": "edit", "source_image": img, "left_output_image": img, "right_output_image": img,
            "vote_type": "leftvote", **over}


@pytest.mark.parametrize("seed", SEEDS)
def test_judge_set_readers_hold_against_hostile_sets(tmp_path, seed):
    from benchmark.commands.metaeval import judges as J

    rng = random.Random(f"judges-{seed}")
    cases: list[tuple[str, str, Callable[[Path], Any], str]] = [
        (f"tiger: {name}", expect, lambda tmp, f=folder: J.read_tiger(f(tmp)), pattern)
        for name, expect, folder, pattern in tiger_variants(rng)]
    cases += [
        ("tiger: edit symlinked outside", "refused", lambda tmp: J.read_tiger(tiger_link_out(tmp)), "outside"),
        ("tiger: edit is a FIFO", "refused", lambda tmp: J.read_tiger(tiger_fifo(tmp)), "not a regular file"),
        ("editscore: one-element key", "refused",
         lambda tmp: J.read_editscore(parquet(tmp / "e.parquet", [editscore_row(key=["a"])])), "key must be a list of 2"),
        ("editscore: key a number", "refused",
         lambda tmp: J.read_editscore(parquet(tmp / "e.parquet", [editscore_row(key=5)])), "key must be a list of 2"),
        ("editscore: output_images a number", "refused",
         lambda tmp: J.read_editscore(parquet(tmp / "e.parquet", [editscore_row(output_images=3)])),
         "output_images is int"),
        ("editscore: null instruction", "refused",
         lambda tmp: J.read_editscore(parquet(tmp / "e.parquet", [editscore_row(instruction=None)])),
         "instruction must be text, got null"),
        ("editscore: number dimension", "refused",
         lambda tmp: J.read_editscore(parquet(tmp / "e.parquet", [editscore_row(dimension=1)])), "dimension must be text"),
        ("editscore: image a path only", "refused",
         lambda tmp: J.read_editscore(parquet(tmp / "e.parquet", [editscore_row(
             input_image={"bytes": None, "path": "/etc/hostname"})])), "not an embedded image"),
        ("genai: null prompt", "refused",
         lambda tmp: J.read_genai(parquet(tmp / "g.parquet", [genai_row(instruct_prompt=None)])),
         "instruct_prompt must be text, got null"),
        ("genai: NUL in the prompt", "refused",
         lambda tmp: J.read_genai(parquet(tmp / "g.parquet", [genai_row(instruct_prompt="a\x00b")])), "NUL"),
        ("genai: vote_type a list", "refused",
         lambda tmp: J.read_genai(parquet(tmp / "g.parquet", [genai_row(vote_type=["leftvote"])])), "vote_type"),
        ("genai: empty set", "refused",
         lambda tmp: J.read_genai(_empty_genai(tmp)), "no rows"),
    ]
    outcomes = []
    for n, (name, expect, read, pattern) in enumerate(cases):
        v = Variant(name, expect, lambda c: None, pattern)
        res = Outcome(name, "")
        try:
            with deadline():
                read(tmp_path / f"v{n}")
            res.got = "accepted"
        except J.JudgeSetError as err:
            res.got, res.message = "refused", str(err)
        except Exception as err:  # noqa: BLE001
            res.got, res.message = "traceback", f"{type(err).__name__}: {err}"[:300]
        if res.got != expect:
            res.problems.append(f"expected {expect}, got {res.got}: {res.message[:300]}")
        elif v.pattern and not re.search(v.pattern, res.message):
            res.problems.append(f"refusal does not say {v.pattern!r}: {res.message[:300]}")
        outcomes.append(res)
    report(outcomes)


def _empty_genai(tmp: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.Table.from_pylist([genai_row()]).schema
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / "empty.parquet"
    pq.write_table(schema.empty_table(), path)
    return path


class _CountingSuite:
    """A judge that scores every edit it is given 1.0 and records how many it got."""

    judge_column = "score"

    def __init__(self) -> None:
        self.seen = 0

    def score_images(self, batch):
        self.seen += len(batch)
        return [{"query_id": q.id, "status": "ok", "score": 1.0} for q, _, _ in batch]


def test_an_unreadable_edit_image_is_a_failure_row_not_a_traceback(tmp_path):
    from benchmark.commands.metaeval import judges as J

    folder = tiger_folder(tmp_path, [tiger_item("A>B>C", 3), tiger_item("B>A", 2)])
    (folder / "images" / "1.png").write_bytes(b"")
    (folder / "images" / "2.png").write_bytes(transparent(16))
    (folder / "images" / "3.png").write_bytes(bomb_png())
    hset = J.read_tiger(folder)
    suite = _CountingSuite()
    judge = J.Judge("counting", suite, "score", "counting@1")
    scores, failed = J.score_set(judge, hset)
    assert sorted(failed) == ["EditReward_Bench_3pair:0#0", "EditReward_Bench_3pair:0#1",
                              "EditReward_Bench_3pair:0#2", "EditReward_Bench_3pair:1#0",
                              "EditReward_Bench_3pair:1#1"]
    assert all(r.startswith("unreadable image") for r in failed.values())
    assert "transparent" in failed["EditReward_Bench_3pair:0#1"] and "over the limit" in failed[
        "EditReward_Bench_3pair:0#2"]
    assert suite.seen == 0 and all(np.isnan(v) for v in scores.values())


def test_an_empty_judge_set_exits_nonzero_with_one_line(tmp_path, capsys):
    from benchmark.commands.cli import main

    code = main(["metaeval", "judges", "--judges", "gedit", "--sets", f"genai={_empty_genai(tmp_path)}",
                 "profile=tiny", f"paths.results={tmp_path / 'results'}"])
    err = capsys.readouterr().err
    assert code != 0 and err.startswith("error: ") and "no rows; the set is empty" in err and err.count("\n") == 1
    assert not (tmp_path / "results").exists()


def test_a_build_into_the_folder_that_holds_its_download_touches_only_its_own_entries(tmp_path):
    """`--data datasets/pie/downloads --out datasets/pie`: the release inside --out survives builds and refusals."""
    from benchmark.querysets.pie import PieFormatError, build

    out = tmp_path / "pie"
    c = pie_release(out / "downloads", random.Random(0))
    c.data = out / "downloads" / "data"
    write_pie(c)
    build(c.data, out)
    assert sorted(p.name for p in out.iterdir()) == ["downloads", "edit_masks", "images", "queries.jsonl",
                                                     "queryset.json", "summary.md"]
    c.entries[sorted(c.entries)[0]]["image_path"] = "../../x.png"
    write_pie(c)
    release = snapshot(out / "downloads")
    with pytest.raises(PieFormatError):
        build(c.data, out)
    assert snapshot(out / "downloads") == release and len(load_queryset(out).queries) == 3
