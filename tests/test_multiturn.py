"""protocol=multi_turn: turn t edited from the editor's own edit of turn t-1 (MagicBrush's
edit_cli_single_multi_turn.py), content-addressed by the input's pixels, batched by turn, failures propagated."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT
from PIL import Image

from benchmark.editing.editor import query_seed
from benchmark.io.imageio import load_rgb
from benchmark.querysets.io import load_queryset
from benchmark.stages.turn_keys import pixel_sha256, png_input_sha256

SESSIONS_ROOT = ROOT / "datasets" / "demo_sessions"


def run(results: Path, *extra: str, editor: str = "overedit"):
    """The pipeline in-process on demo_sessions (edit stage only unless `extra` says otherwise)."""
    from benchmark.commands.run import compose, run_pipeline

    cfg, choices = compose([f"editor={editor}", "queryset=demo_sessions", "profile=tiny", f"paths.results={results}",
                            "progress=false", "aggregate.bootstrap_resamples=50", *extra])
    return run_pipeline(cfg, choices["editor"])


def edits(summary) -> dict[str, bytes]:
    folder = Path(summary["run_dir"]) / "edits"
    return {p.stem: p.read_bytes() for p in sorted(folder.glob("*.png"))}


def pixels(path: Path) -> np.ndarray:
    return np.asarray(load_rgb(path))


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (Path(run_dir) / "edits.jsonl").read_text().splitlines()]


def overedit(image: Image.Image, query_id: str, seed: int = 0) -> np.ndarray:
    from editors.overedit import OverEditEditor

    ed = OverEditEditor(mirror=True, channel_roll=1, invert=False, noise_std=12.0)  # configs/editor/overedit.yaml
    return np.asarray(ed.edit([None], [image], seeds=[query_seed(seed, query_id)])[0])


@pytest.fixture(scope="module")
def sessions_qs():
    return load_queryset(SESSIONS_ROOT)


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """overedit on demo_sessions under each protocol, batch size 4, in one results folder."""
    results = tmp_path_factory.mktemp("both")
    single = run(results, "stages=[edit,score,aggregate]", "batch_size=4")
    multi = run(results, "stages=[edit,score,aggregate]", "batch_size=4", "protocol=multi_turn")
    return results, single, multi


# -- the authors' script, pinned ---------------------------------------------------------------------------------


def test_turn_t_is_edited_from_the_editors_own_edit_of_turn_t_minus_1(both, sessions_qs):
    """The script's multi-turn loop: turn 1 from the dataset's input (the `_1.png` both settings share), turn t > 1
    from the saved output of turn t-1, re-read from its file (here: its PNG's pixels)."""
    _, single, multi = both
    run_dir = Path(multi["run_dir"])
    by_id = {q.id: q for q in sessions_qs}
    for q in sessions_qs:
        mine = pixels(run_dir / "edits" / f"{q.id}.png")
        if q.turn == 1:
            assert np.array_equal(mine, overedit(load_rgb(sessions_qs.path(q.image)), q.id)), q.id
            assert np.array_equal(mine, pixels(Path(single["run_dir"]) / "edits" / f"{q.id}.png")), q.id
        else:
            prev = next(p for p in sessions_qs if p.session == q.session and p.turn == q.turn - 1)
            chained = load_rgb(run_dir / "edits" / f"{prev.id}.png")
            assert np.array_equal(mine, overedit(chained, q.id)), q.id
            # the single-turn edit of the same query starts from the dataset's input instead
            assert not np.array_equal(mine, pixels(Path(single["run_dir"]) / "edits" / f"{q.id}.png")), q.id
        assert by_id[q.id].session is not None


def test_each_record_and_png_carry_the_key_of_the_pixels_received(both, sessions_qs):
    _, single, multi = both
    run_dir = Path(multi["run_dir"])
    recs = {r["query_id"]: r for r in records(run_dir)}
    for q in sessions_qs:
        if q.turn == 1:
            source, prev_id = load_rgb(sessions_qs.path(q.image)), None
        else:
            prev_id = next(p.id for p in sessions_qs if p.session == q.session and p.turn == q.turn - 1)
            source = load_rgb(run_dir / "edits" / f"{prev_id}.png")
        assert recs[q.id]["input_sha256"] == pixel_sha256(source) == png_input_sha256(run_dir / "edits" / f"{q.id}.png")
        assert recs[q.id].get("input_from") == prev_id
    # single-turn records and PNGs keep their old form
    assert not any("input_sha256" in r for r in records(Path(single["run_dir"])))
    assert png_input_sha256(next((Path(single["run_dir"]) / "edits").glob("*.png"))) is None


def test_seed_per_turn_is_the_querys_own(both, sessions_qs):
    """The script seeds every edit with its one global seed; here each turn keeps the harness's per-query seed
    (hash of seed and query id), so a multi-turn turn 1 is the single-turn turn 1 (the script's shared `_1.png`)
    and no turn's noise depends on batching or on the session's other turns."""
    _, _, multi = both
    run_dir = Path(multi["run_dir"])
    recs = {r["query_id"]: r for r in records(run_dir)}
    assert all(recs[q.id]["seed"] == query_seed(0, q.id) for q in sessions_qs)
    t1 = load_rgb(run_dir / "edits" / "demo000-session-t1.png")
    t2 = pixels(run_dir / "edits" / "demo000-session-t2.png")
    assert np.array_equal(t2, overedit(t1, "demo000-session-t2"))
    assert not np.array_equal(t2, overedit(t1, "demo000-session-t1"))  # not the session's one seed


def test_the_authors_output_names():
    """edit_cli_single_multi_turn.py: `<id>/<id>_1.png` for turn 1 in both settings, `_iter_<t>` for multi-turn
    turns, `_inde_<t>` for single-turn ones (the files `editmeter score` meets in the authors' output folders)."""
    from benchmark.querysets.magicbrush import script_output_name

    assert script_output_name("139306", 1, "multi_turn") == "139306/139306_1.png"
    assert script_output_name("139306", 1, "single_turn") == "139306/139306_1.png"
    assert script_output_name("139306", 3, "multi_turn") == "139306/139306_iter_3.png"
    assert script_output_name("139306", 2, "single_turn") == "139306/139306_inde_2.png"
    with pytest.raises(ValueError):
        script_output_name("139306", 0, "multi_turn")


def test_the_previous_output_is_resized_by_the_scripts_rule_for_any_input():
    """The script passes turn t-1's saved output through the same sizing as any input (longer side to
    `resolution`, sides to multiples of 64, ImageOps.fit with Lanczos). Its own 512 x 512 output comes back
    unchanged; our edit of a 640 x 480 source (kept at the source's size) is fitted to 512 x 384 again, as that
    source was."""
    from benchmark.editing.ip2p import Pix2PixEditor

    ed = object.__new__(Pix2PixEditor)
    ed.resize, ed.resolution, ed.size_multiple = "aspect", 512, 64
    rng = np.random.default_rng(0)
    square = Image.fromarray(rng.integers(0, 256, (512, 512, 3), dtype=np.uint8))
    assert np.array_equal(np.asarray(ed.prepare(square)), np.asarray(square))
    wide = Image.fromarray(rng.integers(0, 256, (480, 640, 3), dtype=np.uint8))
    assert ed.prepare(wide).size == (512, 384)


# -- protocol in the signature, run.json, rows, compare ---------------------------------------------------------


def test_protocol_is_in_the_signature_run_json_and_every_row(both):
    import pandas as pd

    results, single, multi = both
    assert single["editor_sig"] != multi["editor_sig"] and single["run_dir"] != multi["run_dir"]
    for summary, protocol in ((single, "single_turn"), (multi, "multi_turn")):
        assert json.loads((Path(summary["run_dir"]) / "run.json").read_text())["protocol"] == protocol
    for table in ("leaderboard.csv", "leaderboard_by_type.csv", "leaderboard_by_class.csv"):
        lb = pd.read_csv(results / table, dtype=str)
        got = dict(zip(lb["editor_sig"], lb["protocol"], strict=True))
        assert got == {single["editor_sig"]: "single_turn", multi["editor_sig"]: "multi_turn"}, table


def test_single_turn_keeps_the_signature_it_had_before_protocols():
    """single_turn adds nothing to the signed setting, so runs made before the setting keep their folders; multi_turn
    enters the setting and the code that chains the turns."""
    from benchmark.plan.config import editor_key, editor_signature

    cfg = {"_target_": "editors.overedit.OverEditEditor", "mirror": True}
    before = editor_signature(cfg, {"a": 1}, 0, "tiny")
    assert editor_signature(cfg, {"a": 1}, 0, "tiny", protocol="single_turn") == before
    assert editor_signature(cfg, {"a": 1}, 0, "tiny", protocol="multi_turn") != before
    single, multi = editor_key(cfg, {"a": 1}, 0, "tiny"), editor_key(cfg, {"a": 1}, 0, "tiny", protocol="multi_turn")
    assert single["setting"] != multi["setting"] and single["code"] != multi["code"]


def test_compare_refuses_runs_of_two_protocols(both):
    from benchmark.commands.compare import CompareError, compare_runs

    results, single, multi = both
    names = [Path(single["run_dir"]).name, Path(multi["run_dir"]).name]
    with pytest.raises(CompareError, match="different protocols.*single_turn.*multi_turn.*name runs of one protocol"):
        compare_runs(results, names, n_resamples=50)
    with pytest.raises(CompareError, match="different protocols"):  # every run of the set: no pair is left
        compare_runs(results, None, queryset="demo_sessions", n_resamples=50)


def test_unknown_protocol_and_a_set_without_sessions_are_refused(tmp_path):
    from benchmark.io.protocols import ProtocolSettingError

    with pytest.raises(ProtocolSettingError, match="protocol='multi'"):
        run(tmp_path, "protocol=multi")
    from benchmark.commands.run import compose, run_pipeline

    cfg, choices = compose(["editor=identity", "queryset=demo_mini", "profile=tiny", f"paths.results={tmp_path}",
                            "progress=false", "protocol=multi_turn"])
    with pytest.raises(ProtocolSettingError, match="demo_mini.*no sessions"):
        run_pipeline(cfg, choices["editor"])
    assert not (tmp_path / "runs").exists()


def test_edits_made_elsewhere_are_read_as_they_are_never_chained():
    """`editmeter score --protocol multi_turn` runs the external editor under protocol=multi_turn: its files were
    made from their inputs elsewhere, so the ordinary edit stage reads them; only an editor that edits here chains."""
    from benchmark.io.protocols import ProtocolSettingError
    from benchmark.stages.edit import run_edit_stage
    from benchmark.stages.turns import edit_stage, run_turns_stage
    from editors.external import ExternalEdits
    from editors.overedit import OverEditEditor

    elsewhere, here = object.__new__(ExternalEdits), object.__new__(OverEditEditor)
    assert edit_stage("multi_turn", elsewhere) is run_edit_stage
    assert edit_stage("multi_turn", here) is run_turns_stage
    assert edit_stage("single_turn", here) is run_edit_stage
    with pytest.raises(ProtocolSettingError, match="edits made elsewhere"):
        run_turns_stage(None, elsewhere, Path("unused"), seed=0)



def test_a_run_whose_external_editor_read_another_protocols_files_is_refused(tmp_path):
    from benchmark.io.protocols import ProtocolSettingError

    folder = tmp_path / "made-elsewhere"
    folder.mkdir()
    with pytest.raises(ProtocolSettingError, match="read the edits of protocol 'multi_turn'.*protocol=multi_turn"):
        run(tmp_path, "editor=external", f"editor.folder={folder}", "editor.protocol=multi_turn", "preflight=false")
    assert not (tmp_path / "runs").exists()


# -- content addressing, resume, batching, failures --------------------------------------------------------------


def test_batch_size_1_equals_batch_size_4(both, tmp_path):
    _, _, multi = both
    assert edits(run(tmp_path, "protocol=multi_turn", "batch_size=1", "stages=[edit]")) == edits(multi)


def test_a_changed_turn_re_edits_the_later_turns_of_its_session_only(tmp_path, sessions_qs):
    first = run(tmp_path, "protocol=multi_turn", "stages=[edit]")
    run_dir = Path(first["run_dir"])
    before = edits(first)
    stamps = {p.stem: p.stat().st_mtime_ns for p in (run_dir / "edits").glob("*.png")}
    # turn 1 of one session now holds another edit (as a re-edit that came out different would)
    t1 = run_dir / "edits" / "demo000-session-t1.png"
    changed = Image.fromarray(255 - pixels(t1))
    changed.save(t1)
    n_records = len(records(run_dir))
    again = run(tmp_path, "protocol=multi_turn", "stages=[edit]")
    assert again["edit"].computed == 2  # turns 2 and 3 of that session, nothing else
    new = records(run_dir)[n_records:]
    assert sorted(r["query_id"] for r in new) == ["demo000-session-t2", "demo000-session-t3"]
    t2 = pixels(run_dir / "edits" / "demo000-session-t2.png")
    assert np.array_equal(t2, overedit(changed, "demo000-session-t2"))
    after = edits(again)
    for qid in before:
        if qid.startswith("demo000-"):
            continue
        assert after[qid] == before[qid] and (run_dir / "edits" / f"{qid}.png").stat().st_mtime_ns == stamps[qid]
    # a rerun with nothing changed edits nothing
    assert run(tmp_path, "protocol=multi_turn", "stages=[edit]")["edit"].computed == 0


def test_a_failed_turn_fails_the_rest_of_its_session_naming_it(tmp_path, monkeypatch):
    from benchmark.io.errors import TooManyFailures

    bad = ["editor=identity", "editor._target_=failing_editor.FailsOnInstruction", "protocol=multi_turn",
           "stages=[edit]"]
    monkeypatch.setenv("EDITMETER_TEST_FAIL_WORD", "background")
    with pytest.raises(TooManyFailures):  # 5 of 10 failed
        run(tmp_path, *bad)
    run_dir = next((tmp_path / "runs").glob("*/*"))
    recs = {r["query_id"]: r for r in records(run_dir)}
    # demo000: turn 2 changes the background (fails), turn 3 follows it; demo001: turn 1 fails, turn 2 follows
    assert recs["demo000-session-t1"]["status"] == "ok"
    assert recs["demo000-session-t2"]["error_type"] == "ValueError"
    t3 = recs["demo000-session-t3"]
    assert t3["status"] == "failed" and t3["error_type"] == "PreviousTurnFailed"
    assert "turn 2 of session 'demo000-session' (query demo000-session-t2)" in t3["reason"]
    assert "cannot edit demo000-session-t2" in t3["reason"]
    assert recs["demo001-session-t2"]["error_type"] == "PreviousTurnFailed"
    assert "query=demo000-session-t3" in (run_dir / "failures.log").read_text()
    failed = {q for q, r in recs.items() if r["status"] == "failed"}
    assert failed == {"demo000-session-t2", "demo000-session-t3", "demo001-session-t1", "demo001-session-t2",
                      "demo002-session-t3"}
    assert not any((run_dir / "edits" / f"{q}.png").exists() for q in failed)
    # a rerun leaves the failures as they are; with the cause fixed, retry_failed edits them and the turns after them
    n = len(records(run_dir))
    with pytest.raises(TooManyFailures):
        run(tmp_path, *bad)
    assert len(records(run_dir)) == n
    monkeypatch.setenv("EDITMETER_TEST_FAIL_WORD", "")
    summary = run(tmp_path, *bad, "retry_failed=true")
    assert summary["run_dir"] == str(run_dir) and summary["edit"].failed_total == 0
    assert len(list(run_dir.glob("edits/*.png"))) == 10


def test_a_selection_that_cuts_a_session_is_refused(sessions_qs):
    from benchmark.stages.turns import SessionSelectionError, sessions

    t2 = [q for q in sessions_qs if q.turn == 2]
    with pytest.raises(SessionSelectionError, match=r"turns \[2\] of session 'demo000-session'"):
        sessions(t2)
    chains = sessions(sessions_qs.queries)
    assert [len(c) for c in chains] == [3, 2, 3, 2]


def test_shards_keep_sessions_whole_and_other_sets_shard_as_before(sessions_qs, demo_qs):
    from benchmark.plan.run_plan import RunPlan
    from benchmark.querysets.sessions import shard_whole_sessions

    shards = [shard_whole_sessions(sessions_qs, i, 3) for i in range(3)]
    assert sorted(q.id for s in shards for q in s) == sorted(q.id for q in sessions_qs)
    for s in shards:
        held = {q.session for q in s}
        assert all({q.id for q in sessions_qs if q.session == h} <= {q.id for q in s} for h in held)
    assert sum(1 for s in shards if len(s)) == 3
    ordered = sorted(demo_qs.queries, key=lambda q: q.id)
    assert [q.id for q in shard_whole_sessions(demo_qs, 1, 4)] == [q.id for i, q in enumerate(ordered) if i % 4 == 1]
    # the run plan's selection is this one (runs, launches)
    plan = object.__new__(RunPlan)
    object.__setattr__(plan, "selection", type("S", (), {"shard_index": 1, "shard_count": 3, "limit": None})())
    assert plan.selected(sessions_qs).queries == shards[1].queries
    assert plan.all_shards(sessions_qs) == [q for s in shards for q in s.queries]


def test_samples_draw_whole_sessions_nested(sessions_qs, demo_qs):
    from benchmark.querysets.io import QuerySetError, load_queryset, sample_set
    from benchmark.querysets.sessions import load_session_set, sample_sessions

    two, three = sample_sessions(sessions_qs, 2), sample_sessions(sessions_qs, 3)
    for s in (two, three):
        got = {q.session for q in s}
        assert {q.id for q in s} == {q.id for q in sessions_qs if q.session in got}
    assert len({q.session for q in two}) == 2 and {q.id for q in two} <= {q.id for q in three}
    assert two.meta["sample"]["unit"] == "sessions" and two.name == "demo_sessions-sample2-seed0"
    with pytest.raises(QuerySetError, match="all 4 sessions"):
        sample_sessions(sessions_qs, 4)
    # the configs of sets with sessions load through load_session_set: the same set, samples of whole sessions
    loaded = load_session_set(SESSIONS_ROOT, name="demo_sessions", sample=2)
    assert (loaded.name, loaded.hash) == (two.name, two.hash)
    assert load_session_set(SESSIONS_ROOT).hash == load_queryset(SESSIONS_ROOT).hash
    # a set without sessions is sampled by queries, as load_queryset samples it
    assert sample_sessions(demo_qs, 7).hash == sample_set(demo_qs, 7).hash


def test_ip2p_tiny_runs_the_sessions_in_both_protocols(tmp_path):
    """In-process (what `editmeter run` runs): ip2p tiny edits every turn under both protocols, the
    multi-turn turns 2.. from its own edits (other pixels than the single-turn ones), turn 1 alike up to the one
    level a batched diffusion editor may move with its batch (wave 1 batches the sessions' first turns together)."""
    single = run(tmp_path, "stages=[edit]", "batch_size=4", editor="ip2p")
    multi = run(tmp_path, "stages=[edit]", "batch_size=4", "protocol=multi_turn", editor="ip2p")
    a, b = edits(single), edits(multi)
    assert len(a) == len(b) == 10 and multi["edit"].failed_total == 0
    for qid in a:
        diff = np.abs(pixels(Path(single["run_dir"]) / "edits" / f"{qid}.png").astype(int)
                      - pixels(Path(multi["run_dir"]) / "edits" / f"{qid}.png"))
        assert diff.max() <= 1 if qid.endswith("-t1") else diff.mean() > 2, (qid, diff.max(), diff.mean())


@pytest.mark.slow
def test_ip2p_tiny_runs_the_sessions_in_both_protocols_through_editmeter_run(tmp_path):
    """The same through the `editmeter run` command line, with scoring and the leaderboard."""
    import subprocess
    import sys

    from conftest import HELPERS, child_pythonpath

    env = dict(os.environ, PYTHONPATH=child_pythonpath(HELPERS, ROOT), HF_HUB_OFFLINE="1")
    for protocol in ("single_turn", "multi_turn"):
        out = subprocess.run([sys.executable, "-m", "benchmark.commands.cli", "run", "editor=ip2p", "queryset=demo_sessions",
                              "profile=tiny", f"protocol={protocol}", f"paths.results={tmp_path}", "progress=false",
                              "aggregate.bootstrap_resamples=50", "batch_size=4"],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-2000:]
        assert "edit: 10 edited, 0 failed" in out.stdout
    import pandas as pd

    lb = pd.read_csv(tmp_path / "leaderboard.csv", dtype=str)
    assert sorted(lb["protocol"]) == ["multi_turn", "single_turn"] and set(lb["complete"]) == {"True"}


def test_kill9_in_the_middle_of_a_session_resumes_at_that_turn(tmp_path, both):
    """SIGKILL a real run inside wave 2 (turn 2 of the sessions); the rerun edits only what is missing, from turn 2
    on, and every PNG equals the uninterrupted run's."""
    import signal
    import subprocess
    import sys
    import time

    from conftest import HELPERS, child_pythonpath

    env = dict(os.environ, PYTHONPATH=child_pythonpath(HELPERS, ROOT), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    # overedit's settings (configs/editor/overedit.yaml) under a slowed class: batches of 2, so wave 2 has two
    cmd = [sys.executable, "-m", "benchmark.commands.run", "editor=overedit", "queryset=demo_sessions", "profile=tiny",
           "protocol=multi_turn", f"paths.results={tmp_path}", "progress=false", "stages=[edit]", "batch_size=2",
           "editor._target_=slow_editor.SlowOverEdit", "+editor.delay_s=0.4"]
    pngs = lambda: list(tmp_path.glob("runs/*/*/edits/*.png"))  # noqa: E731
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    end = time.time() + 180
    while time.time() < end and proc.poll() is None and len(pngs()) < 5:  # wave 1 done, wave 2's first batch
        time.sleep(0.01)
    time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = {p.stem for p in pngs()}
    assert {q for q in done if q.endswith("-t1")} == {f"demo00{i}-session-t1" for i in range(4)}
    assert 4 < len(done) < 10, done
    run_dir = next(tmp_path.glob("runs/*/*"))
    n = len(records(run_dir))
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True, timeout=300)
    rerun = [r for r in records(run_dir)[n:] if not r.get("recovered")]
    assert {r["query_id"] for r in rerun} == {f"{q}" for q in edits({"run_dir": run_dir})} - done
    # the slowed class is not overedit's folder: compare the pixels, the keys and the bytes' pixels
    _, _, multi = both
    clean = Path(multi["run_dir"])
    for p in (run_dir / "edits").glob("*.png"):
        assert np.array_equal(pixels(p), pixels(clean / "edits" / p.name)), p.name
        assert png_input_sha256(p) == png_input_sha256(clean / "edits" / p.name), p.name
    assert not list(tmp_path.rglob("*.tmp"))


# -- the report --------------------------------------------------------------------------------------------------


def test_report_grid_shows_a_sessions_turns_one_after_another(tmp_path):
    """Turns follow one another by turn, whatever their ids, each row labelled with its session and turn."""
    from benchmark.commands.report.grid import build_grid
    from benchmark.io.types import Query
    from benchmark.querysets.io import write_queries

    root = tmp_path / "qs"
    (root / "images").mkdir(parents=True)
    (root / "queryset.json").write_text(json.dumps({"name": "t", "schema_version": 1}))
    qs = [Query(id=qid, image=f"images/{qid}.png", edit_type="free_form", instruction="x", session=se, turn=tu)
          for qid, se, tu in (("s-b", "s", 1), ("s-a", "s", 2), ("lone", None, None))]
    for q in qs:
        Image.new("RGB", (16, 16)).save(root / q.image)
    write_queries(root / "queries.jsonl", qs)
    grid = build_grid("k", "t", "h", [], load_queryset(root), "", tmp_path / "out", 10)
    assert [(r["id"], r.get("se"), r.get("tu")) for r in grid.rows] == [("lone", None, None), ("s-b", "s", 1),
                                                                         ("s-a", "s", 2)]


def test_report_marks_each_runs_protocol(both, tmp_path):
    from benchmark.commands.report import build_report

    results, single, multi = both
    out = tmp_path / "report"
    build_report(results, out)
    text = (out / "data" / "meta.js").read_text(encoding="utf-8")
    runs = json.loads(text[len("EM.meta = "):-2])["grids"][0]["runs"]
    assert {r["sig"]: r["protocol"] for r in runs} == {single["editor_sig"]: "single_turn",
                                                       multi["editor_sig"]: "multi_turn"}
    # the page sets the editor's two settings side by side: one row, its single-turn run left, multi-turn right
    page = (out / "index.html").read_text(encoding="utf-8")
    table = re.search(r'<h2 id="turns">.*?<table class="lb turns">(.*?)</table>', page, re.S).group(1)
    assert "single-turn (all_turn)" in table and "multi-turn (final_turn)" in table
    (row,) = re.findall(r"<tbody>(.*?)</tbody>", table, re.S)[0].split("</tr>")[:-1]
    cells = re.findall(r"<td>(.*?)</td>", row)
    assert cells[0] == "overedit"
    assert cells.index(single["editor_sig"][:8]) < cells.index(multi["editor_sig"][:8])
    by_turn = re.search(r'<table class="lb by-turn">(.*?)</table>', page, re.S).group(1)
    assert "turn 3" in by_turn and by_turn.count("<tr>") == 3  # the header and one row per protocol


@pytest.mark.skipif(not (Path("/usr/bin/chromium").is_file() and Path("/usr/bin/chromedriver").is_file()),
                    reason="needs Debian's chromium and chromium-driver")
def test_report_page_shows_each_sessions_turns_in_order_with_the_protocol(both, tmp_path):
    """In a browser: the grid's rows of a session follow one another, labelled 'session <id> · turn <t>', and the
    multi-turn run's column says how its turns were chained."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait

    from benchmark.commands.report import build_report

    results, *_ = both
    out = tmp_path / "report"
    build_report(results, out, page_size=10)
    options = Options()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--allow-file-access-from-files"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))
    try:
        driver.get((out / "index.html").resolve().as_uri())
        wait = WebDriverWait(driver, 20)
        wait.until(lambda d: d.find_elements("css selector", "#grid-table table.grid tbody tr"))
        labels = [e.text for e in driver.find_elements("css selector", "#grid-table td.q .turn")]
        assert labels[:3] == [f"session demo000-session · turn {t}" for t in (1, 2, 3)]
        assert len(driver.find_elements("css selector", "#grid-table tr.session-start")) == 4
        assert "multi_turn: turn t edited from turn t-1's edit" in driver.find_element("id", "grid-table").text
    finally:
        driver.quit()


def test_the_budget_counts_a_protocols_own_edits_as_done(both):
    """A finished single-turn run of the same editor is not the multi-turn run's work: its estimate still counts
    every turn to do (and the other way round)."""
    from benchmark.plan.budget import done_ids

    results, single, multi = both
    meta = json.loads((Path(single["run_dir"]) / "run.json").read_text())
    args = (results, Path(single["run_dir"]).parent.name, "overedit", meta["editor_config"], 0, "tiny", None)
    assert len(done_ids(*args, "single_turn")) == len(done_ids(*args, "multi_turn")) == 10
    (Path(multi["run_dir"]) / "run.json").rename(Path(multi["run_dir"]) / "run.json.aside")
    try:
        assert done_ids(*args, "multi_turn") == set() and len(done_ids(*args, "single_turn")) == 10
    finally:
        (Path(multi["run_dir"]) / "run.json.aside").rename(Path(multi["run_dir"]) / "run.json")
