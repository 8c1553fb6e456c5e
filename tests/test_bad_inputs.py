"""Bad-input corpus: every hostile or careless input has one expected outcome, never a crash.

Outcomes: a `QuerySetError` naming the file (and line) before any work; a failure record whose reason names the
defect; a refused label. Plus the content-addressing properties: the query-set hash, external edits and the
editor signature change exactly when what determines a result changes. Everything is built in tmp dirs.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from benchmark.io.imageio import LIMITS, ImageInputError, load_rgb, set_limits
from benchmark.querysets.io import QuerySetError, load_queryset, read_queries
from benchmark.stages.edit import latest_records, run_edit_stage

ROOT = Path(__file__).resolve().parents[1]
GOOD = {"id": "q1", "image": "images/a.png", "edit_type": "bg_chg", "instruction": "Make it snowy.",
        "background": "snow"}
OBJ = {"id": "1", "name": "cup", "bbox": [1, 2, 30, 40]}


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    """A private file-hash cache per test (the stat cache must never leak a digest between tests)."""
    monkeypatch.setenv("EDITMETER_CACHE", str(tmp_path / "cache"))


def png_claiming(width: int, height: int) -> bytes:
    """A valid PNG header (IHDR) claiming `width` x `height` RGB pixels, followed by one tiny IDAT: ~70 bytes."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\x00\x00\x00\x00")) + chunk(b"IEND", b""))


def make_set(root: Path, records: list[dict], images: dict[str, object] | None = None) -> Path:
    """A query set folder: `images` maps relative path -> (w, h, colour) or raw bytes; default one 32x32 image."""
    images = images if images is not None else {"images/a.png": (32, 32, (120, 80, 40))}
    for rel, spec in images.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(spec, bytes):
            (root / rel).write_bytes(spec)
        else:
            w, h, colour = spec
            Image.new("RGB", (w, h), colour).save(root / rel)
    (root / "queryset.json").write_text(json.dumps({"name": "bad", "schema_version": 1}))
    (root / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return root


# --- 1. the query file: one QuerySetError naming file:line, before any work --------------------------------------

LINE_CASES = {
    "id ending in a newline": (json.dumps(GOOD | {"id": "q1\n"}).encode(), "is not allowed"),
    "id ending in a newline (raw)": (json.dumps(GOOD)[:-1].encode().replace(b'"q1"', b'"q1\\n"') + b"}",
                                     "is not allowed"),
    "bbox NaN": (json.dumps(GOOD | {"edit_type": "obj_remove", "target": OBJ | {"bbox": [0, 0, float("nan"), 3]}})
                 .encode(), "finite numbers"),
    "bbox Infinity": (json.dumps(GOOD | {"edit_type": "obj_remove", "target": OBJ | {"bbox": [0, 0, 3, float("inf")]}})
                      .encode(), "finite numbers"),
    "bbox bool": (json.dumps(GOOD | {"edit_type": "obj_remove", "target": OBJ | {"bbox": [False, 0, True, 3]}})
                  .encode(), "of numbers"),
    "invalid UTF-8": (json.dumps(GOOD).encode()[:-2] + b'\xff"}', "not valid UTF-8 (byte 0xff"),
    "lone surrogate (escaped)": (json.dumps(GOOD | {"instruction": "snow \ud800"}).encode(), "lone UTF-16 surrogate"),
    "lone surrogate key": (json.dumps(GOOD)[:-1].encode() + b', "\\udc80": 1}', "lone UTF-16 surrogate"),
    "100k-deep JSON": (b"[" * 100_000, "nested too deeply"),
    "100k-deep JSON object": (b'{"a":' * 100_000, "nested too deeply"),
    "2 MB line": (json.dumps(GOOD | {"instruction": "a" * 2_000_000}).encode(), "over the limit of 1,048,576"),
    "symlink-free path escape": (json.dumps(GOOD | {"image": "../x.png"}).encode(), "must not contain '..'"),
}


@pytest.mark.parametrize("case", list(LINE_CASES))
def test_bad_query_line_is_one_error_with_file_and_line(tmp_path, case):
    line, reason = LINE_CASES[case]
    path = tmp_path / "queries.jsonl"
    path.write_bytes(json.dumps(GOOD | {"id": "q0"}).encode() + b"\n\n" + line + b"\n")
    with pytest.raises(QuerySetError) as err:
        read_queries(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}:3: ") and reason in msg, msg


STREAM_CASES = {
    "scene graphs: invalid UTF-8": (b'{"1": {"name": "\xff"}}', "not valid UTF-8 (byte 0xff)"),
    "scene graphs: 100k-deep": (b'{"1": ' + b'{"a":' * 100_000 + b"1" + b"}" * 100_001, "nested too deeply at character"),
    "scene graphs: lone surrogate": (b'{"1": {"name": "\\udfff"}}', "lone UTF-16 surrogate"),
    "scene graphs: truncated": (b'{"1": {"name": "x"', "invalid JSON"),
}


@pytest.mark.parametrize("case", list(STREAM_CASES))
def test_bad_scene_graph_file_is_one_error_with_file_and_offset(tmp_path, case):
    from benchmark.querysets.json_stream import JSONStreamError, iter_object_entries

    data, reason = STREAM_CASES[case]
    (tmp_path / "sg.json").write_bytes(data)
    with pytest.raises(JSONStreamError) as err:
        list(iter_object_entries(tmp_path / "sg.json"))
    assert str(err.value).startswith(f"{tmp_path / 'sg.json'}: ") and reason in str(err.value), str(err.value)


@pytest.mark.parametrize(("meta", "reason"), [(b'{"name": "\xff"}', "not a UTF-8 JSON object"),
                                              (b"[" * 100_000, "not a UTF-8 JSON object"),
                                              (b"[1]", "must hold a JSON object")])
def test_bad_queryset_json_is_one_error(tmp_path, meta, reason):
    make_set(tmp_path, [GOOD])
    (tmp_path / "queryset.json").write_bytes(meta)
    with pytest.raises(QuerySetError, match=reason):
        load_queryset(tmp_path)


def test_missing_referenced_files_fail_loading_listing_the_first(tmp_path):
    records = [GOOD | {"id": f"q{i}", "image": f"images/m{i}.png"} for i in range(8)]
    records.append(GOOD | {"id": "ok"})
    make_set(tmp_path, records)
    with pytest.raises(QuerySetError) as err:
        load_queryset(tmp_path)
    msg = str(err.value)
    assert "8 referenced file(s) missing: images/m0.png (query q0)" in msg and "and 3 more" in msg, msg


def test_mask_and_target_are_referenced_files_too(tmp_path):
    rec = GOOD | {"edit_type": "obj_remove", "target": OBJ | {"mask": "masks/1.png"}, "target_image": "t/q1.png"}
    make_set(tmp_path, [rec])
    with pytest.raises(QuerySetError, match="2 referenced file") as err:
        load_queryset(tmp_path)
    assert "masks/1.png (query q1)" in str(err.value) and "t/q1.png (query q1)" in str(err.value)


def test_symlink_out_of_the_set_is_refused(tmp_path):
    outside = tmp_path / "private.png"
    Image.new("RGB", (32, 32)).save(outside)
    root = make_set(tmp_path / "qs", [GOOD | {"image": "images/link.png"}])
    (root / "images" / "link.png").symlink_to(outside)
    with pytest.raises(QuerySetError, match="refused.*images/link.png \\(query q1\\) -> .*private.png"):
        load_queryset(root)
    (root / "images" / "link.png").unlink()
    (root / "images" / "link.png").symlink_to(root / "images" / "a.png")  # a link inside the set is fine
    load_queryset(root)


def test_folder_link_out_of_the_set_needs_the_builders_declaration(tmp_path):
    elsewhere = tmp_path / "store"
    elsewhere.mkdir()
    Image.new("RGB", (32, 32)).save(elsewhere / "a.png")
    (tmp_path / "qs").mkdir()
    root = make_set(tmp_path / "qs", [GOOD], images={})
    (root / "images").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(QuerySetError, match="refused"):
        load_queryset(root)
    (root / "queryset.json").write_text(json.dumps({"name": "bad", "schema_version": 1, "linked_folders": ["images"]}))
    assert len(load_queryset(root)) == 1
    (root / "queryset.json").write_text(json.dumps({"name": "bad", "schema_version": 1, "linked_folders": ["x"]}))
    with pytest.raises(QuerySetError, match="linked_folders names 'x'"):
        load_queryset(root)


# --- 2. sources and prompts: a failure record with the reason, the run goes on -----------------------------------

class Echo:
    """Identity editor that records what it was asked to edit."""

    prompt_kind = "instruction"

    def __init__(self):
        from editors.identity import IdentityEditor

        self.inner, self.calls = IdentityEditor(), []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def edit_deferred(self, queries, images, *, seeds, prepared=None):
        self.calls += [q.id for q in queries]
        return self.inner.edit_deferred(queries, images, seeds=seeds, prepared=prepared)


def black_png() -> bytes:
    import io

    buf = io.BytesIO()
    Image.new("RGB", (32, 32)).save(buf, format="PNG")
    return buf.getvalue()


SOURCE_CASES = {
    # case: (image spec, record overrides, expected status, reason substring)
    "decompression bomb 60000x60000": (png_claiming(60000, 60000), {}, "failed", "over the limit of 4,194,304"),
    "PIL's own bomb limit (2^15 x 2^15)": (png_claiming(1 << 15, 1 << 15), {}, "failed", "over the limit"),
    "5000x5000 header (under PIL's limit)": (png_claiming(5000, 5000), {}, "failed",
                                             "5000x5000 = 25,000,000 pixels, over the limit of 4,194,304"),
    "1x1 source": ((1, 1, (9, 9, 9)), {}, "failed", "smaller than the minimum side of 16 px"),
    "15x400 source": ((15, 400, (9, 9, 9)), {}, "failed", "smaller than the minimum side"),
    "16x16 source": ((16, 16, (9, 9, 9)), {}, "ok", ""),
    "2,000-character instruction": ((32, 32, (1, 2, 3)), {"instruction": "a" * 2000}, "failed",
                                    "instruction is 2,000 characters, over the limit of 1,000"),
    "long target caption": ((32, 32, (1, 2, 3)), {"source_caption": "a", "target_caption": "b" * 1001}, "failed",
                            "target_caption is 1,001 characters"),
    "all-black source, identity edit": (black_png(), {}, "ok", ""),
}


def test_bad_sources_become_failure_records_with_reasons(tmp_path):
    ids = [f"s{i}" for i in range(len(SOURCE_CASES))]
    images, records = {}, []
    for qid, (spec, extra) in zip(ids, [(s, e) for s, e, *_ in SOURCE_CASES.values()], strict=True):
        images[f"images/{qid}.png"] = spec
        records.append(GOOD | {"id": qid, "image": f"images/{qid}.png"} | extra)
    qs = load_queryset(make_set(tmp_path / "qs", records, images))
    editor = Echo()
    run_edit_stage(qs, editor, tmp_path / "run", seed=0, batch_size=4, progress=False)
    recs = latest_records(tmp_path / "run")
    for qid, (case, (_, _, status, reason)) in zip(ids, SOURCE_CASES.items(), strict=True):
        assert recs[qid]["status"] == status, (case, recs[qid])
        assert reason in (recs[qid].get("reason") or ""), (case, recs[qid])
    # the refused sources never reached the model: checked from the header, before decoding
    assert sorted(editor.calls) == sorted(qid for qid, v in zip(ids, SOURCE_CASES.values(), strict=True)
                                          if v[1] == {} and v[2] == "ok")


def test_pixel_limit_is_configurable_and_checked_before_decoding(tmp_path, monkeypatch):
    Image.new("RGB", (100, 100)).save(tmp_path / "a.png")
    before = LIMITS.max_pixels
    try:
        set_limits(max_pixels=9_999)
        with pytest.raises(ImageInputError, match="100x100 = 10,000 pixels, over the limit of 9,999"):
            load_rgb(tmp_path / "a.png")
        monkeypatch.setattr(Image.Image, "load", lambda self: pytest.fail("decoded an image over the limit"))
        with pytest.raises(ImageInputError, match="over the limit"):
            load_rgb(tmp_path / "a.png")
    finally:
        set_limits(max_pixels=before)
    with pytest.raises(ValueError, match="positive integer"):
        set_limits(max_pixels=0)


def test_limits_come_from_the_config(tmp_path):
    from benchmark.commands.run import compose
    from benchmark.editing.editor import DEFAULT_MAX_PROMPT_CHARS, set_max_prompt_chars
    from benchmark.plan.config import apply_run_checks

    cfg, _ = compose(["limits.max_source_pixels=1234", "limits.min_source_side=3", "limits.max_prompt_chars=7"])
    before = (LIMITS.max_pixels, LIMITS.min_source_side)
    try:
        apply_run_checks(cfg, "identity")
        from benchmark.editing.editor import _MAX_PROMPT_CHARS

        assert (LIMITS.max_pixels, LIMITS.min_source_side, _MAX_PROMPT_CHARS[0]) == (1234, 3, 7)
    finally:
        set_limits(*before)
        set_max_prompt_chars(DEFAULT_MAX_PROMPT_CHARS)


@pytest.mark.parametrize(("override", "reason"), [
    ("limits.max_source_pixels=0", "limits.max_source_pixels must be a positive integer"),
    ("limits.min_source_side=-1", "limits.min_source_side must be a non-negative integer"),
    ("limits.max_prompt_chars=0", "limits.max_prompt_chars must be a positive integer"),
])
def test_a_bad_limit_is_one_run_error_naming_the_key(override, reason):
    from benchmark.commands.run import compose
    from benchmark.io.errors import RunError
    from benchmark.plan.config import SettingError, apply_run_checks

    cfg, _ = compose([override])
    before = (LIMITS.max_pixels, LIMITS.min_source_side)
    with pytest.raises(SettingError, match=reason) as info:
        apply_run_checks(cfg, "identity")
    assert isinstance(info.value, RunError)  # printed by the entry point without a traceback
    assert (LIMITS.max_pixels, LIMITS.min_source_side) == before


@pytest.mark.parametrize(("overrides", "key"), [
    (["batch_size=0"], "batch_size=0"), (["batch_size=-3"], "batch_size=-3"), (["batch_size=1.5"], "batch_size=1.5"),
    (["limit=0"], "limit=0"), (["limit=-1"], "limit=-1"), (["limit=abc"], "limit='abc'"),
    (["shard.count=0"], "shard.index=0 shard.count=0"), (["shard.index=2", "shard.count=2"], "shard.index=2 shard.count=2"),
    (["shard.index=-1", "shard.count=2"], "shard.index=-1 shard.count=2"),
    (["seed=abc"], "seed='abc'"), (["num_workers=-1"], "num_workers=-1"), (["stages=[edti]"], "stages=['edti']"),
    (["aggregate.bootstrap_resamples=-5"], "aggregate.bootstrap_resamples=-5"),
    (["max_failed_fraction=2"], "max_failed_fraction=2"), (["device=cudaa"], "device='cudaa'"),
    (["editor.device=gpu"], "editor.device='gpu'"),
])
def test_a_bad_run_setting_is_one_run_error_naming_it(overrides, key):
    """Before: batch_size=0, a bad shard, seed=abc, num_workers=-1 and device=cudaa ended in a traceback;
    batch_size=-3 edited nothing and then failed the score stage; limit=-1 ran every query but the last and limit=0
    none, and stages=[edti] ran nothing, all reported as done (exit 0). (stages=[] stays: it opens the run folder
    and writes run.json, as tests/test_shards.py does.)"""
    from benchmark.commands.run import compose
    from benchmark.io.errors import RunError
    from benchmark.plan.config import SettingError, apply_run_checks

    cfg, _ = compose(["editor=ip2p", *overrides])  # an editor with a `device` key
    with pytest.raises(SettingError) as info:
        apply_run_checks(cfg, "ip2p")
    message = str(info.value)
    assert isinstance(info.value, RunError) and message.startswith(f"{key}: ") and "use " in message, message


@pytest.mark.parametrize("overrides", [
    ["batch_size=1", "limit=1"], ["limit=null", "shard.index=1", "shard.count=2"], ["seed=-1", "num_workers=0"],
    ["stages=edit"], ["stages=[score,aggregate]"], ["aggregate.bootstrap_resamples=0", "max_failed_fraction=1"],
    ["device=cpu", "editor.device=cpu"], ["max_failed_fraction=0"],
])
def test_the_edge_values_of_run_settings_pass(overrides):
    from benchmark.commands.run import compose
    from benchmark.plan.config import apply_run_checks

    cfg, _ = compose(["editor=ip2p", *overrides])
    apply_run_checks(cfg, "ip2p")


def test_exif_orientation_is_ignored_pixels_in_stored_order(tmp_path):
    arr = np.zeros((20, 40, 3), np.uint8)
    arr[:, :20] = (250, 0, 0)
    im = Image.fromarray(arr)
    exif = im.getexif()
    exif[0x0112] = 6  # "rotate 90 CW to display"
    im.save(tmp_path / "r.png", exif=exif)
    with Image.open(tmp_path / "r.png") as check:
        assert check.getexif().get(0x0112) == 6
    out = load_rgb(tmp_path / "r.png")
    assert out.size == (40, 20) and np.array_equal(np.asarray(out), arr)


# --- 3. labels: refused before any work --------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["../../x", "org/model", "${oc.env:HOME}", "x\n", ".hidden", "a b", "a..b"])
def test_bad_score_names_are_refused_before_work(tmp_path, capsys, name):
    from benchmark.commands.score_edits import main

    edits = tmp_path / "edits"
    edits.mkdir()
    rc = main(["queryset=demo", f"edits={edits}", f"name={name}", "profile=tiny", f"paths.results={tmp_path / 'r'}"])
    err = capsys.readouterr().err
    assert rc == 2 and "NAME" in err and "[A-Za-z0-9_.-]" in err, err
    assert not (tmp_path / "r").exists() and not (tmp_path / "x-").exists()


def test_bad_editor_names_and_labels_are_refused():
    from benchmark.plan.config import LabelError, apply_run_checks, check_label

    with pytest.raises(LabelError, match="labels become folder names"):
        apply_run_checks({}, "org/model")
    assert check_label("my-model_v1.2") == "my-model_v1.2"


# --- 4. content addressing ---------------------------------------------------------------------------------------

def test_replacing_a_source_images_bytes_changes_the_hash(tmp_path):
    root = make_set(tmp_path, [GOOD])
    first = load_queryset(root).hash
    assert load_queryset(root).hash == first  # warm: same
    Image.new("RGB", (32, 32), (120, 80, 41)).save(root / "images" / "a.png")  # same size on disk, other pixels
    assert load_queryset(root).hash != first


def test_stat_cache_skips_unchanged_files_and_survives_corruption(tmp_path, monkeypatch):
    import benchmark.io.filehash as fh

    root = make_set(tmp_path / "qs", [GOOD | {"id": f"q{i}", "image": f"images/{i}.png"} for i in range(5)],
                    {f"images/{i}.png": (32, 32, (i, i, i)) for i in range(5)})
    cold = load_queryset(root).hash
    reads = []
    real = fh.sha256_file
    monkeypatch.setattr(fh, "sha256_file", lambda p: reads.append(p) or real(p))
    assert load_queryset(root).hash == cold and reads == []  # warm: nothing read
    os.utime(root / "images" / "2.png")  # touched, not changed: re-read, same hash
    assert load_queryset(root).hash == cold and [Path(p).name for p in reads] == ["2.png"]
    cache = fh.cache_file_for(root.resolve())
    for garbage in (b"{not json", b'{"version": 1, "scope": "x", "files": {}}', b"[" * 100_000,
                    json.dumps({"version": 1, "scope": str(root.resolve()), "files": {"images/0.png": [1, 2]}}).encode()):
        cache.write_bytes(garbage)
        reads.clear()
        assert load_queryset(root).hash == cold and len(reads) == 5  # ignored, rebuilt
    # a planted digest under the current stat key would be trusted: the key includes ctime, which no user can set
    # back, so an edit of the bytes always invalidates it
    (root / "images" / "0.png").write_bytes((root / "images" / "1.png").read_bytes())
    assert load_queryset(root).hash != cold


def _uncompressed_png(path: Path, value: int) -> None:
    Image.new("RGB", (20, 20), (value, value, value)).save(path, compress_level=0)  # size independent of pixels


def test_external_edits_are_keyed_by_content_not_names_and_sizes(tmp_path):
    from editors.external import ExternalEdits

    edits = tmp_path / "edits"
    edits.mkdir()
    _uncompressed_png(edits / "q1.png", 10)
    before = ExternalEdits(str(edits)).info()["content"]
    size = (edits / "q1.png").stat().st_size
    _uncompressed_png(edits / "q1.png", 200)
    assert (edits / "q1.png").stat().st_size == size
    assert ExternalEdits(str(edits)).info()["content"] != before


def test_external_16bit_edit_is_scaled_not_clipped(tmp_path):
    from benchmark.querysets.io import query_from_dict
    from editors.external import ExternalEdits

    edits = tmp_path / "edits"
    edits.mkdir()
    Image.fromarray(np.full((20, 20), 32896, np.uint16)).save(edits / "q1.png")
    [out] = ExternalEdits(str(edits)).edit([query_from_dict(GOOD)], [Image.new("RGB", (20, 20))], seeds=[0])
    assert np.asarray(out).max() == 128  # PIL's convert would clip it to 255


def test_external_edit_with_two_matching_files_fails_instead_of_picking_one(tmp_path):
    from editors.external import AmbiguousEditError, ExternalEdits

    edits = tmp_path / "edits"
    edits.mkdir()
    for name in ("q1.png", "q1.jpg", "a_q2.png", "b_q2.png", "q3.png", "x_q3.png"):
        Image.new("RGB", (20, 20)).save(edits / name)
    ext = ExternalEdits(str(edits))
    assert ext.missing(["q1", "q2", "q3", "q4"]) == ["q4"]  # ambiguous ids have files: their edits fail, no crash
    for qid in ("q1", "q2"):
        with pytest.raises(AmbiguousEditError, match=rf"query {qid}: several files match.*keep exactly one"):
            ext.find(qid)
    assert ext.find("q3") == edits / "q3.png"  # one exact stem match still wins over a prefixed one


def test_external_edit_regenerated_with_same_names_and_sizes_is_rescored(tmp_path, capsys):
    import pandas as pd

    from benchmark.commands.score_edits import main

    root = make_set(tmp_path / "qs", [GOOD | {"id": f"q{i}"} for i in range(2)],
                    {"images/a.png": (20, 20, (100, 100, 100))})
    edits = tmp_path / "edits"
    edits.mkdir()
    args = ["queryset=demo", f"queryset.root={root}", f"edits={edits}", "name=theirs", "profile=tiny",
            "metrics=basic", f"paths.results={tmp_path / 'r'}", "progress=false", "aggregate.bootstrap_resamples=20"]
    psnr = []
    for value in (90, 100):  # first a wrong edit, then the exact source: same names, same byte sizes
        for i in range(2):
            _uncompressed_png(edits / f"q{i}.png", value)
        assert main(args) == 0
        psnr.append(pd.read_csv(tmp_path / "r" / "leaderboard.csv").query("editor == 'theirs'")["psnr"].tolist())
    assert psnr[0][0] < 40 and sorted(psnr[1]) == [psnr[0][0], 100]  # a new run next to the old, not the old scores
    capsys.readouterr()


def insert_statement(path: Path, names: list[str], statement: str) -> None:
    """Put `statement` first in the body of the first top-level function or class of `names` in the file at
    `path`."""
    import ast

    lines = path.read_text().splitlines(keepends=True)
    wanted = {n.split(".")[0] for n in names}
    node = next(n for n in ast.parse("".join(lines)).body
                if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name in wanted)
    first = node.body[0]
    lines.insert(first.lineno - 1, " " * first.col_offset + statement + "\n")
    path.write_text("".join(lines))


def _project_copy(tmp_path: Path, monkeypatch) -> Path:
    import benchmark.plan.config as config

    for pkg in ("benchmark", "editors"):
        shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(config, "PROJECT_ROOT", tmp_path)
    return tmp_path


def test_editor_signature_covers_the_code_that_makes_the_edit(tmp_path, monkeypatch):
    from benchmark.plan import code_identity
    from benchmark.plan.config import editor_signature

    cfg = {"_target_": "editors.ip2p.InstructPix2PixEditor", "steps": 3}
    modules = code_identity.code_identity(cfg["_target_"]).modules
    for needed in ("editors.ip2p", "benchmark.editing.ip2p", "benchmark.editing.base", "benchmark.models.diffusion",
                   "benchmark.editing.editor", "benchmark.io.imageio"):
        assert needed in modules, modules
    assert "benchmark.metrics.pixel" not in modules and "benchmark.tables.leaderboard" not in modules
    root = _project_copy(tmp_path, monkeypatch)
    monkeypatch.setattr(code_identity, "PROJECT_ROOT", root)
    sig = editor_signature(cfg, {}, 0, "tiny")
    base = root / "benchmark" / "editing" / "base.py"
    base.write_text(base.read_text() + "\n# a comment does not change behaviour\nUNUSED_CONSTANT = 1\n")
    assert editor_signature(cfg, {}, 0, "tiny") == sig  # nothing the edit runs changed
    reached = sorted(k.split(":")[1] for k in code_identity.code_identity(cfg["_target_"]).digests
                     if k.startswith("benchmark.editing.ip2p:"))
    assert reached, "the ip2p editing module enters the key"
    insert_statement(root / "benchmark" / "editing" / "ip2p.py", reached, "_changed = 1")
    changed = editor_signature(cfg, {}, 0, "tiny")
    assert changed != sig
    identity = {"_target_": "editors.identity.IdentityEditor"}
    before = editor_signature(identity, {}, 0, "tiny")
    (root / "editors" / "identity.py").write_text((root / "editors" / "identity.py").read_text()
                                                  .replace("im.convert(\"RGB\").copy()", "im.convert(\"RGB\")"))
    assert editor_signature(identity, {}, 0, "tiny") != before


def test_editor_outside_the_checkout_hashes_its_module(tmp_path, monkeypatch):
    from benchmark.plan.config import editor_signature

    (tmp_path / "my_editor_mod.py").write_text("class E:\n    k = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = {"_target_": "my_editor_mod.E"}
    sig = editor_signature(cfg, {}, 0, "tiny")
    (tmp_path / "my_editor_mod.py").write_text("class E:\n    k = 2\n")
    assert editor_signature(cfg, {}, 0, "tiny") != sig


def test_caches_of_vanished_folders_are_pruned(tmp_path):
    import benchmark.io.filehash as fh

    gone = make_set(tmp_path / "gone", [GOOD])
    load_queryset(gone)
    gone_cache = fh.cache_file_for(gone.resolve())
    assert gone_cache.is_file()
    shutil.rmtree(gone)
    kept = make_set(tmp_path / "kept", [GOOD])
    load_queryset(kept)
    load_queryset(make_set(tmp_path / "new", [GOOD]))  # a new scope prunes
    assert not gone_cache.exists() and fh.cache_file_for(kept.resolve()).is_file()
