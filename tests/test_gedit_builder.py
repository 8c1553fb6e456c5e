"""GEdit-Bench conversion from a local dataset built with `datasets.Dataset` and saved to disk (no network): the
`editmeter data build gedit` on the saved folder, the language / subset selections, samples by task type, refusals naming the row,
a basic run on the built set, HATIE refused up front, and `editmeter show`'s not-applicable line."""

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from PIL import Image

from benchmark.io.types import GEDIT_TYPES
from benchmark.querysets.gedit import GEditFormatError, build, load_gedit
from benchmark.querysets.io import QuerySetError, load_queryset

ROOT = Path(__file__).resolve().parents[1]
ZH_TEXT = "把招牌上的文字改成“你好”"

# key, task_type, instruction, language, colour of the source, Intersection_exist
ROWS = [
    ("k1", "text_change", "Change the sign's text to 'hello'", "en", (200, 30, 30), True),
    ("k1", "text_change", ZH_TEXT, "cn", (200, 30, 30), True),
    ("k2", "background_change", "Make the background a beach", "en", (30, 200, 30), False),
    ("k2", "background_change", "把背景换成海滩", "cn", (30, 200, 30), False),
    ("k3", "subject-add", "Add a cat on the sofa", "en", (30, 30, 200), True),  # no Chinese row: unpaired
    ("t1", "tone_transfer", "Make it look like autumn", "en", (120, 90, 10), False),  # pair by source image
    ("t1zh", "tone_transfer", "让它看起来像秋天", "cn", (120, 90, 10), False),
    ("k5", "text_change", "Replace the word 'open' with 'closed'", "en", (90, 90, 90), True),
    ("k5", "text_change", "把“营业”改成“休息”", "cn", (90, 90, 90), True),
]


def picture(colour, size=(32, 32)):
    im = Image.new("RGB", size, colour)
    im.putpixel((3, 5), (255 - colour[0], 7, 9))  # not flat: every source is its own image
    return im


def gedit_dataset(tmp_path, rows=ROWS, *, drop=(), images=None):
    import datasets

    features = {"key": datasets.Value("string"), "task_type": datasets.Value("string"),
                "instruction": datasets.Value("string"), "instruction_language": datasets.Value("string"),
                "input_image": datasets.Image(), "input_image_raw": datasets.Image(),
                "Intersection_exist": datasets.Value("bool")}
    cols = {"key": [r[0] for r in rows], "task_type": [r[1] for r in rows], "instruction": [r[2] for r in rows],
            "instruction_language": [r[3] for r in rows], "input_image": images or [picture(r[4]) for r in rows],
            "input_image_raw": [picture(r[4], (48, 40)) for r in rows],
            "Intersection_exist": [r[5] for r in rows]}
    for name in drop:
        del cols[name], features[name]
    ds = datasets.Dataset.from_dict(cols, features=datasets.Features(features))
    path = tmp_path / "gedit_hf"
    datasets.DatasetDict({"train": ds}).save_to_disk(str(path))
    return path


def run_script(dataset, out, *extra):
    return subprocess.run([sys.executable, "-m", "benchmark.commands.cli", "data", "build", "gedit", "--dataset", str(dataset),
                           "--out", str(out), *extra], capture_output=True, text=True, cwd=ROOT, timeout=120)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The fixture dataset built by the script users run."""
    tmp = tmp_path_factory.mktemp("gedit")
    done = run_script(gedit_dataset(tmp), tmp / "gedit")
    assert done.returncode == 0, done.stderr
    return tmp / "gedit", json.loads(done.stdout)


def test_every_row_is_a_query_with_its_type_language_and_both_instructions(built):
    root, printed = built
    full = load_queryset(root)
    assert printed["content_hash"] == full.hash and len(full) == len(ROWS)
    meta = full.meta
    assert meta["counts"]["by_language"] == {"en": 5, "zh": 4}
    assert meta["counts"]["pairs"] == {"by_key": 3, "by_image": 1, "unpaired": 1}
    assert meta["counts"]["intersection"] == {"en": 3, "zh": 2}
    assert meta["counts"]["images"] == 5  # an EN and a CN row of one edit share their source file
    assert meta["scored_by"] == ["gedit", "judge", "conventional", "basic"] and "hatie" in meta["not_scored_by"]
    q = {x.id: x for x in full}
    zh = q["gedit-cn-text_change-k1"]
    assert zh.edit_type == "gedit_text_change" and zh.language == "zh" and zh.instruction == ZH_TEXT
    assert zh.instruction_zh == ZH_TEXT and zh.instruction_en == "Change the sign's text to 'hello'"
    assert zh.subsets == ("intersection",) and zh.object_class == "free-form"
    en = q["gedit-en-text_change-k1"]
    assert (en.instruction, en.instruction_zh, en.image) == (zh.instruction_en, ZH_TEXT, zh.image)
    lone = q["gedit-en-subject_add-k3"]
    assert lone.instruction_zh is None and lone.instruction_en == lone.instruction and lone.language == "en"
    assert q["gedit-cn-tone_transfer-t1zh"].instruction_en == "Make it look like autumn"  # paired by its image
    assert {x.edit_type for x in full} <= set(GEDIT_TYPES)
    # the Chinese text is stored as UTF-8 text, not escapes, and reads back equal
    assert ZH_TEXT in (root / "queries.jsonl").read_text(encoding="utf-8")
    with Image.open(full.path(zh.image)) as im:
        assert im.size == (32, 32)  # input_image by default


def test_language_and_subset_selections_are_sets_of_their_own(built):
    root, _ = built
    en, cn = load_gedit(root), load_gedit(root, language="cn")
    both, inter = load_gedit(root, language="both"), load_gedit(root, language="en", subset="intersection")
    assert (en.name, cn.name, both.name, inter.name) == ("gedit-en", "gedit-cn", "gedit", "gedit-en-intersection")
    assert {q.language for q in en} == {"en"} and {q.language for q in cn} == {"zh"}
    assert (len(en), len(cn), len(both), len(inter)) == (5, 4, 9, 3)
    assert len({en.hash, cn.hash, both.hash, inter.hash}) == 4
    assert all("intersection" in q.subsets for q in inter) and inter.meta["selection"]["subset"] == "intersection"
    with pytest.raises(QuerySetError, match="queryset.language='fr'"):
        load_gedit(root, language="fr")


def test_stratified_sample_by_gedit_task_types(built):
    root, _ = built
    s = load_gedit(root, language="both", sample=4, sample_seed=1)
    assert len(s) == 4 and s.name == "gedit-sample4-seed1" and s.meta["sample"]["pool"] == 9
    # the types hold 4, 2, 2 and 1 of the 9 queries: a sample of 4 gives each its rounded share
    assert Counter(q.edit_type for q in s) == {"gedit_text_change": 2, "gedit_background_change": 1,
                                               "gedit_tone_transfer": 1}
    ids = [{q.id for q in load_gedit(root, language="both", sample=n, sample_seed=1)} for n in range(1, 9)]
    assert all(a < b for a, b in zip(ids, ids[1:], strict=False))  # nested: a larger sample holds the smaller
    assert load_gedit(root, language="both", sample=4, sample_seed=1).hash == s.hash
    only = load_gedit(root, language="both", sample=2, sample_types=["gedit_text_change"])
    assert {q.edit_type for q in only} == {"gedit_text_change"} and only.meta["sample"]["pool"] == 4


def test_hash_is_stable_across_rebuilds_and_follows_image_bytes(tmp_path, built):
    _, printed = built
    data = gedit_dataset(tmp_path)
    again = build(data, tmp_path / "again")
    assert again["content_hash"] == printed["content_hash"]  # another folder, another run: the same set
    changed = list(ROWS)
    changed[2] = (*ROWS[2][:4], (31, 200, 30), ROWS[2][5])  # one channel of one source, one level
    other = build(gedit_dataset(tmp_path / "c", changed), tmp_path / "changed")
    assert other["content_hash"] != printed["content_hash"]
    raw = build(data, tmp_path / "raw", image="input_image_raw")
    assert raw["content_hash"] != printed["content_hash"] and raw["source"]["image"] == "input_image_raw"
    with Image.open(next((tmp_path / "raw" / "images").iterdir())) as im:
        assert im.size == (48, 40)


def test_instructions_keep_their_outer_whitespace_as_the_official_scorer_quotes_them(tmp_path):
    from benchmark.metrics.gedit.protocol import Prompts

    padded = " Add a cat on the sofa \n"
    rows = [("k3", "subject-add", padded, "en", (30, 30, 200), True),
            ("k3", "subject-add", "\u3000在沙发上加一只猫", "cn", (30, 30, 200), True)]  # an ideographic space
    build(gedit_dataset(tmp_path / "p", rows), tmp_path / "padded")
    q = {x.id: x for x in load_queryset(tmp_path / "padded")}
    en, zh = q["gedit-en-subject_add-k3"], q["gedit-cn-subject_add-k3"]
    assert en.instruction == padded and en.instruction_en == padded and zh.instruction == "\u3000在沙发上加一只猫"
    # the SC prompt quotes the text unchanged, spaces and newline included
    prompts = Prompts(sc="Instruction: <instruction>|", pq="", commit="0" * 40, sha256="0" * 64)
    assert prompts.sc_for(en.instruction) == "Instruction: " + padded + "|"
    # a stripped copy is another set: its hash differs (sets rebuilt from releases with such text get a new hash)
    stripped = build(gedit_dataset(tmp_path / "s", [(r[0], r[1], r[2].strip(), *r[3:]) for r in rows]),
                     tmp_path / "stripped")
    assert stripped["content_hash"] != load_queryset(tmp_path / "padded").hash


def test_bad_rows_are_refused_naming_the_row_and_the_fix(tmp_path):
    bad_type = [ROWS[0], ("k9", "make_it_pop", "pop", "en", (1, 2, 3), False)]
    with pytest.raises(GEditFormatError, match=r"row 1 \(key 'k9', task_type 'make_it_pop'.*unknown task_type.*"
                                               r"TASK_TYPES in benchmark/querysets/gedit.py"):
        build(gedit_dataset(tmp_path / "t", bad_type), tmp_path / "o1")
    with pytest.raises(GEditFormatError, match=r"missing GEdit-Bench feature\(s\) \['Intersection_exist'\]"):
        build(gedit_dataset(tmp_path / "f", drop=("Intersection_exist",)), tmp_path / "o2")
    with pytest.raises(GEditFormatError, match=r"row 0 .*instruction is empty"):
        build(gedit_dataset(tmp_path / "e", [("k1", "text_change", "  ", "en", (1, 2, 3), False)]), tmp_path / "o3")
    with pytest.raises(GEditFormatError, match=r"row 1 .*duplicate \(language, task_type, key\); first on row 0"):
        build(gedit_dataset(tmp_path / "d", [ROWS[0], ROWS[0]]), tmp_path / "o4")
    with pytest.raises(GEditFormatError, match=r"no split 'test'"):
        build(gedit_dataset(tmp_path / "s"), tmp_path / "o5", split="test")


def test_an_unreadable_image_is_refused_by_the_script_naming_its_row(tmp_path):
    cells = [picture(ROWS[0][4]), {"bytes": b"not a png", "path": None}]
    gedit_dataset(tmp_path, ROWS[:2], images=cells).rename(tmp_path / "broken")
    done = run_script(tmp_path / "broken", tmp_path / "out")
    assert done.returncode == 2
    assert "row 1 (key 'k1', task_type 'text_change', language 'cn'): input_image is not a readable image" in done.stderr


def test_basic_run_completes_hatie_is_refused_up_front_and_show_says_why(built, tmp_path, capsys):
    from benchmark.commands.run import compose, run_pipeline
    from benchmark.io.errors import PreflightError
    from benchmark.tables.show import render

    root, _ = built
    common = ["editor=identity", "queryset=gedit", f"queryset.root={root}", "queryset.language=both", "profile=tiny",
              f"paths.results={tmp_path}", "progress=false", "aggregate.bootstrap_resamples=50"]
    cfg, choices = compose([*common, "metrics=basic"])
    summary = run_pipeline(cfg, choices["editor"])
    assert summary["edit"].computed == len(ROWS) and summary["edit"].failed == 0
    assert summary["score"].failed == 0 and summary["score"].computed == len(ROWS)
    run_json = Path(summary["run_dir"]) / "run.json"
    before = run_json.stat().st_mtime_ns
    for suite in ("hatie", "editval", "standard"):
        cfg, choices = compose([*common, f"metrics={suite}"])
        with pytest.raises(PreflightError) as err:
            run_pipeline(cfg, choices["editor"])
        msg = str(err.value)
        assert "\n" not in msg and "not apply to query set gedit (no scene graphs)" in msg, msg
        assert "Use metrics=gedit, metrics=judge, metrics=conventional, metrics=basic" in msg
    assert run_json.stat().st_mtime_ns == before  # refused before the run folder was touched
    shown = render(tmp_path)
    assert "HATIE/EditVal do not apply to gedit (no scene graphs)" in shown
    assert "metrics=basic" in shown and shown.count("HATIE/EditVal do not apply") == 1


def test_bpm_parses_gedit_instructions_and_skips_whole_image_types(built):
    """GEdit queries carry only an instruction: BPM parses its text (as for MagicBrush), never asks the query's
    structured fields (which would fail every query), and leaves the whole-image categories out."""
    from hydra.utils import instantiate

    from benchmark.commands.run import compose
    from benchmark.metrics.bpm.suite import BpmSuite

    root, _ = built
    qs = load_gedit(root=str(root), language="both")
    cfg, _ = compose(["profile=tiny", "metrics=bpm", "queryset=demo"])
    suite: BpmSuite = instantiate(cfg.metrics.bpm)
    applies = {q.edit_type: suite.applies_to(q, "instruction") for q in qs.queries}
    assert not applies["gedit_background_change"] and not applies["gedit_tone_transfer"]
    assert applies["gedit_text_change"] and applies["gedit_subject_add"]
    kept = [q for q in qs.queries if applies[q.edit_type]]
    parsed = suite.parse(kept)
    add = [p for q, p in zip(kept, parsed, strict=True) if q.edit_type == "gedit_subject_add"]
    assert add and all(getattr(p, "target_object", None) == "cat" for p in add), add
    # whatever the rules cannot read is a parse failure naming the instruction, not a missing-field error
    assert not any(isinstance(p, str) and "names no object" in p for p in parsed), parsed
