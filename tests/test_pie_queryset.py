"""PIE-Bench import from a folder written here in the release's format (mapping_file.json with [start, length] masks,
bracketed prompts, annotation_images/ at 512 x 512): hand-worked and property mask decodes, the import -> load round
trip, refusals naming the entry, and an `editmeter run` on the imported fixture."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from benchmark.io.types import PIE_TYPES
from benchmark.querysets.io import load_queryset
from benchmark.querysets.pie import IMAGE_SIDE, PieFormatError, build, decode_mask, strip_brackets

ROOT = Path(__file__).resolve().parents[1]
N = IMAGE_SIDE * IMAGE_SIDE


def encode(mask: np.ndarray) -> list[int]:
    """The release's encoding of a bool mask: [start, length] of each run of 1 in row-major order, flattened."""
    flat = np.concatenate([[0], mask.reshape(-1).astype(np.int8), [0]])
    edges = np.flatnonzero(np.diff(flat))
    starts, ends = edges[0::2], edges[1::2]
    return [int(v) for pair in zip(starts, ends - starts, strict=True) for v in pair]


def box(y0, y1, x0, x1):
    m = np.zeros((IMAGE_SIDE, IMAGE_SIDE), dtype=bool)
    m[y0:y1, x0:x1] = True
    return m


# id, image_path, original_prompt, editing_prompt, instruction, type id, blended word, mask
ENTRIES = [
    ("000000000000", "0_random_140/000000000000.jpg", "a slanted mountain bicycle on the road",
     "a slanted [rusty] mountain bicycle on the road", "Make the frame of the bike rusty", "0", "bicycle bicycle",
     encode(box(100, 300, 50, 400))),
    ("111000000001", "1_change_object_80/1_artificial/1_animal/111000000001.jpg", "a [cat] sitting on a chair",
     "a [dog] sitting on a chair", "Change the cat to a dog", "1", "cat dog", encode(box(200, 201, 0, 512))),
    ("300000000002", "3_delete_object_80/300000000002.jpg", "a bird [and a cloud] in the sky", "a bird in the sky",
     "Remove the cloud", "3", "", []),  # empty: only the border rule's pixels
    ("900000000003", "9_change_style_80/900000000003.jpg", "[a photo of] a house", "[a watercolor of] a house",
     "Make it a watercolor", "9", "", [0, N]),  # the whole image
]


def write_release(root: Path, entries=ENTRIES, *, size=(IMAGE_SIDE, IMAGE_SIDE), extra=None) -> Path:
    """A PIE-Bench release folder: annotation_images/<image_path> (JPEG) and mapping_file.json."""
    mapping = {}
    for i, (key, rel, src, tgt, instr, tid, bw, mask) in enumerate(entries):
        path = root / "annotation_images" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(i)
        Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(path, quality=90)
        mapping[key] = {"image_path": rel, "original_prompt": src, "editing_prompt": tgt, "editing_instruction": instr,
                        "editing_type_id": tid, "blended_word": bw, "mask": mask}
    if extra:
        extra(mapping)
    (root / "mapping_file.json").write_text(json.dumps(mapping))
    return root


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pie")
    data = write_release(tmp / "data")
    meta = build(data, tmp / "pie")
    return data, tmp / "pie", meta


# -- mask decoding ------------------------------------------------------------------------------------------------

def test_hand_worked_small_decodes_with_the_border_rule():
    # 4 x 4: run [5, 2] is flat pixels 5, 6 = (1, 1), (1, 2); the border is 1 whatever the runs say
    expect = np.array([[1, 1, 1, 1],
                       [1, 1, 1, 1],
                       [1, 0, 0, 1],
                       [1, 1, 1, 1]], dtype=bool)
    assert (decode_mask([5, 2], "t", side=4) == expect).all()
    # 5 x 5: [6, 3] = (1, 1..3), [17, 1] = (3, 2); a run may wrap a row: [9, 2] = (1, 4) and (2, 0), both border
    expect = np.ones((5, 5), dtype=bool)
    expect[1:4, 1:4] = False
    expect[1, 1:4] = True
    expect[3, 2] = True
    assert (decode_mask([17, 1, 6, 3, 9, 2], "t", side=5) == expect).all()


def test_hand_worked_512_decode():
    row, col = 100, 200
    m = decode_mask([row * IMAGE_SIDE + col, 10], "t")
    assert m.shape == (IMAGE_SIDE, IMAGE_SIDE)
    assert m[row, col:col + 10].all() and not m[row, col + 10] and not m[row, col - 1] and not m[row + 1, col]
    border = 4 * IMAGE_SIDE - 4
    assert m.sum() == border + 10
    assert decode_mask([], "t").sum() == border  # no runs: only the border
    assert decode_mask([0, N], "t").all()


def test_encode_then_decode_is_the_mask_with_its_border_set():
    rng = np.random.default_rng(3)
    for _ in range(5):
        # blobs of 8 x 4 pixels (runs that end mid-row and span rows), plus single pixels on the edges of runs
        coarse = rng.random((IMAGE_SIDE // 8, IMAGE_SIDE // 4)) < rng.uniform(0.05, 0.9)
        mask = np.kron(coarse, np.ones((8, 4), dtype=bool)) ^ (rng.random((IMAGE_SIDE, IMAGE_SIDE)) < 0.01)
        got = decode_mask(encode(mask), "t")
        want = mask.copy()
        want[0, :] = want[-1, :] = want[:, 0] = want[:, -1] = True
        assert (got == want).all()
        # the run order does not matter (a list of pairs, not a sequence)
        runs = encode(mask)
        pairs = [runs[i:i + 2] for i in range(0, len(runs), 2)]
        rng.shuffle(pairs)
        assert (decode_mask([v for p in pairs for v in p], "t") == got).all()


@pytest.mark.parametrize("encoded, words", [
    ([5], "odd number of values"),
    ([5, 2, 9], "odd number of values"),
    ([-1, 3], "mask[0] = -1 is negative"),
    ([5, -3], "mask[1] = -3 is negative"),
    ([10, 5, 12, 2], "overlap"),
    ([N, 1], "leaves the 512 x 512 image"),
    ([N - 2, 3], "leaves the 512 x 512 image"),
    ([5.0, 2], "mask[0] = 5.0 is not an integer"),
    ([5, "2"], "mask[1] = '2' is not an integer"),
    ([True, 2], "mask[0] = True is not an integer"),
    ({"counts": "x"}, "must be a list"),
])
def test_malformed_masks_are_refused(encoded, words):
    with pytest.raises(PieFormatError) as err:
        decode_mask(encoded, "entry '000000000007'")
    assert "entry '000000000007'" in str(err.value) and words in str(err.value)


def test_adjacent_runs_are_not_an_overlap():
    assert decode_mask([10, 5, 15, 2], "t", side=8).reshape(-1)[10:17].all()


# -- import -> load -----------------------------------------------------------------------------------------------

def test_import_then_load_round_trip(built):
    data, root, meta = built
    qs = load_queryset(root, name="pie")
    assert qs.hash == meta["content_hash"] and len(qs) == len(ENTRIES)
    by_id = {q.id: q for q in qs.queries}
    for key, rel, src, tgt, instr, tid, bw, mask in ENTRIES:
        q = by_id[f"pie-{key}"]
        assert q.edit_type == PIE_TYPES[int(tid)]
        assert q.source_caption == src.replace("[", "").replace("]", "")
        assert q.target_caption == tgt.replace("[", "").replace("]", "")
        assert "[" not in q.source_caption + q.target_caption and q.instruction == instr
        assert q.blended_word == (bw or None)
        with Image.open(root / q.edit_mask) as im:
            assert ((np.asarray(im) > 0) == decode_mask(mask, "t")).all()
        with Image.open(root / q.image) as a, Image.open(data / "annotation_images" / rel) as b:
            assert np.array_equal(np.asarray(a), np.asarray(b.convert("RGB")))
    assert by_id["pie-000000000000"].target_caption == "a slanted rusty mountain bicycle on the road"
    assert by_id["pie-300000000002"].source_caption == "a bird and a cloud in the sky"
    assert meta["full_release"] is False and "NOT the full release" in meta["description"]
    assert meta["counts"]["by_type_id"] == {"0": 1, "1": 1, "3": 1, "9": 1}
    assert meta["scored_by"][0] == "pie" and "hatie" in meta["not_scored_by"]


def test_rebuild_gives_the_same_hash_and_a_changed_mask_changes_it(built, tmp_path):
    data, _, meta = built
    assert build(data, tmp_path / "again")["content_hash"] == meta["content_hash"]

    def grow(mapping):
        mapping["111000000001"]["mask"] = encode(box(200, 202, 0, 512))

    other = write_release(tmp_path / "data2", extra=grow)
    assert build(other, tmp_path / "grown")["content_hash"] != meta["content_hash"]


def test_bracket_stripping_changes_nothing_else():
    for s in ("a [red] car", "[a photo of] a cat ", "no brackets", "[[x]]", "a  [b]  c"):
        out = strip_brackets(s)
        assert "[" not in out and "]" not in out
        assert out == "".join(c for c in s if c not in "[]")


def test_pie_is_a_sampling_family(built):
    _, root, _ = built
    qs = load_queryset(root, name="pie", sample=2, sample_types="pie")
    assert len(qs) == 2 and all(q.edit_type in PIE_TYPES for q in qs.queries)


# -- malformed folders --------------------------------------------------------------------------------------------

def _refused(tmp_path, words, **kw):
    data = write_release(tmp_path / "data", **kw)
    with pytest.raises(PieFormatError) as err:
        build(data, tmp_path / "out")
    for w in words:
        assert w in str(err.value), str(err.value)
    assert not (tmp_path / "out").exists()  # nothing written: an earlier build in the folder stays as it was
    return str(err.value)


def test_a_bad_mask_is_refused_naming_the_entry(tmp_path):
    def bad(mapping):
        mapping["111000000001"]["mask"] = [10, 5, 12, 2]
    _refused(tmp_path, ["entry '111000000001'", "overlap"], extra=bad)


def test_a_missing_image_is_refused_naming_the_entry(tmp_path):
    def gone(mapping):
        mapping["300000000002"]["image_path"] = "3_delete_object_80/nope.jpg"
    _refused(tmp_path, ["entry '300000000002'", "nope.jpg not found"], extra=gone)


def test_an_unreadable_or_transparent_source_is_refused_by_the_harness_image_rules(tmp_path):
    """Sources load through the harness's own loader (benchmark.io.imageio.load_rgb): a truncated file and an image
    with transparent pixels are refused naming the entry, as every other query set's sources are."""
    def truncate(mapping):
        path = tmp_path / "data" / "annotation_images" / mapping["111000000001"]["image_path"]
        path.write_bytes(path.read_bytes()[:200])
    _refused(tmp_path, ["entry '111000000001'", "not usable"], extra=truncate)

    def transparent(mapping):
        path = tmp_path / "t" / "data" / "annotation_images" / mapping["300000000002"]["image_path"]
        im = Image.new("RGBA", (IMAGE_SIDE, IMAGE_SIDE), (0, 0, 0, 0))
        path.with_suffix(".png").parent.mkdir(parents=True, exist_ok=True)
        im.save(path.with_suffix(".png"))
        mapping["300000000002"]["image_path"] = str(Path(mapping["300000000002"]["image_path"]).with_suffix(".png"))
    _refused(tmp_path / "t", ["entry '300000000002'", "transparent"], extra=transparent)


def test_a_source_of_another_size_is_refused(tmp_path):
    _refused(tmp_path, ["entry '000000000000'", "is 256 x 512", "must be that size"], size=(256, 512))


@pytest.mark.parametrize("change, words", [
    (lambda m: m.__setitem__("12345", m.pop("000000000000")), ["entry '12345'", "12 digits"]),
    (lambda m: m["000000000000"].__setitem__("editing_type_id", 3), ["entry '000000000000'", "editing_type_id must be"]),
    (lambda m: m["000000000000"].__setitem__("editing_type_id", "10"), ["entry '000000000000'", "'10' is not one of"]),
    (lambda m: m["000000000000"].pop("mask"), ["entry '000000000000'", "missing field(s) ['mask']"]),
    (lambda m: m["000000000000"].__setitem__("original_prompt", "[]"), ["entry '000000000000'", "original_prompt"]),
    (lambda m: m["000000000000"].__setitem__("image_path", "../x.jpg"), ["entry '000000000000'", "'..'"]),
])
def test_bad_entries_are_refused_naming_the_entry(tmp_path, change, words):
    _refused(tmp_path, words, extra=change)


def test_duplicate_ids_and_a_missing_mapping_file_are_refused(tmp_path):
    data = write_release(tmp_path / "data")
    text = (data / "mapping_file.json").read_text()
    first = json.dumps({"000000000000": json.loads(text)["000000000000"]})[1:-1]
    (data / "mapping_file.json").write_text(text[:-1] + ", " + first + "}")
    with pytest.raises(PieFormatError, match=r"duplicate key\(s\) \['000000000000'\]"):
        build(data, tmp_path / "out")
    with pytest.raises(PieFormatError, match="mapping_file.json: not found"):
        build(tmp_path / "nowhere", tmp_path / "out")


def test_the_script_builds_and_reports_errors(tmp_path):
    data = write_release(tmp_path / "data")
    script = [sys.executable, "-m", "benchmark.commands.cli", "data", "build", "pie", "--data"]
    done = subprocess.run([*script, str(data), "--out", str(tmp_path / "pie")], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["counts"]["queries"] == len(ENTRIES)
    done = subprocess.run([*script, str(tmp_path), "--out", str(tmp_path / "x")], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 2 and "error:" in done.stderr and "mapping_file.json: not found" in done.stderr


# -- running it ---------------------------------------------------------------------------------------------------

def test_editmeter_run_on_the_imported_fixture(built, tmp_path, capsys, restore_logging):
    import pandas as pd

    from benchmark.commands import cli

    _, root, _ = built
    results = tmp_path / "results"
    common = ["editor=identity", "queryset=pie", f"queryset.root={root}", "profile=tiny", f"paths.results={results}",
              "progress=false", "aggregate.bootstrap_resamples=50"]
    assert cli.main(["run", *common, "metrics=basic"]) == 0
    lb = pd.read_csv(results / "leaderboard.csv")
    row = lb[(lb["editor"] == "identity") & (lb["queryset"] == "pie")].iloc[0]
    assert row["n_ok"] == len(ENTRIES)
    from benchmark.tables.show import render

    assert "HATIE/EditVal do not apply to pie (no scene graphs)" in render(results)
    capsys.readouterr()
    assert cli.main(["run", *common, "metrics=hatie"]) == 1  # refused up front, naming the suites that apply
    err = capsys.readouterr().err
    assert "HATIE does not apply to query set pie (no scene graphs)" in err
    assert "Use metrics=pie, metrics=conventional, metrics=basic" in err


def test_the_imported_fixture_scores_with_metrics_pie(built, tmp_path, restore_logging):
    """The release-format fixture, imported, scored by PIE-Bench's own suite at the tiny profile: identity keeps
    structure and background perfect, the whole-image mask (the style entry) has no background to compare, and
    overedit scores worse; the per-type table has PIE's edit types."""
    import pandas as pd

    from benchmark.commands import cli

    _, root, _ = built
    results = tmp_path / "results"
    for editor in ("identity", "overedit"):
        assert cli.main(["run", f"editor={editor}", "queryset=pie", f"queryset.root={root}", "profile=tiny",
                         "metrics=pie", f"paths.results={results}", "progress=false",
                         "aggregate.bootstrap_resamples=20"]) == 0
    board = pd.read_csv(results / "leaderboard.csv").set_index("editor")
    ident, over = board.loc["identity"], board.loc["overedit"]
    assert ident["n_ok"] == over["n_ok"] == len(ENTRIES)
    assert ident["structure_1e3"] == 0 and ident["mse_bg_1e4"] == 0 and ident["lpips_bg_1e3"] == 0
    assert ident["n_no_background"] == 1  # 900000000003's mask covers the image
    assert over["structure_1e3"] > 0 and over["mse_bg_1e4"] > 0 and over["psnr_bg"] < ident["psnr_bg"]
    by_type = pd.read_csv(results / "leaderboard_by_type.csv")
    assert set(by_type["edit_type"]) == {PIE_TYPES[int(e[5])] for e in ENTRIES}


def test_bpm_reads_pie_instructions_and_skips_whole_image_types(built):
    """PIE queries carry no structured edit fields: BPM parses the instruction (never asks for a target object, which
    would fail every query) and leaves background and style changes out."""
    from hydra.utils import instantiate

    from benchmark.commands.run import compose

    _, root, _ = built
    qs = load_queryset(root, name="pie")
    cfg, _ = compose(["profile=tiny", "metrics=bpm", "queryset=demo"])
    suite = instantiate(cfg.metrics.bpm)
    applies = {q.edit_type: suite.applies_to(q, "description") for q in qs.queries}
    assert applies == {"pie_random": True, "pie_change_object": True, "pie_delete_object": True,
                       "pie_change_style": False}
    parsed = suite.parse([q for q in qs.queries if applies[q.edit_type]])
    assert not any(isinstance(p, str) and "names no object" in p for p in parsed), parsed
