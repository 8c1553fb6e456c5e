"""`editmeter score` on a folder laid out as MagicBrush's `edit_cli_single_multi_turn.py` writes it.

The script writes `<id>/<id>_1.png` for turn 1 (both settings), `<id>/<id>_iter_<t>.png` for turn t edited from
its own previous output and `<id>/<id>_inde_<t>.png` for turn t edited from the dataset's input; `<id>` is the
image id of the session's input file (`139306` of `139306-input.png`).
"""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from benchmark.io.session_edits import map_session_folder
from benchmark.querysets.io import query_from_dict

# sessions by image id -> turns; the query ids follow the MagicBrush builder's mb-<split>-<img_id>-t<turn>
SESSIONS = {"100": 2, "200": 1, "300": 3}


def records(sessions=SESSIONS, session_id=lambda img: f"mb-test-{img}"):
    return [{"id": f"mb-test-{img}-t{t}", "image": f"images/{img}-{t}.png", "image_id": img, "edit_type": "free_form",
             "instruction": f"turn {t}", "target_image": f"targets/{img}-{t}.png", "session": session_id(img),
             "turn": t} for img, n in sessions.items() for t in range(1, n + 1)]


def make_set(root: Path, recs: list[dict]) -> Path:
    for r in recs:
        for rel, v in ((r["image"], 90), (r["target_image"], 160)):
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            Image.new("RGB", (24, 24), (v, v, v)).save(root / rel)
    (root / "queryset.json").write_text(json.dumps({"name": "mbs", "schema_version": 1}))
    (root / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return root


def write(folder: Path, rel: str, value: int) -> None:
    (folder / rel).parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (24, 24), (value, value, value)).save(folder / rel)


# the authors' folder for SESSIONS, its iterated last turn of session 300 missing (a run stopped early)
LAYOUT = {"100/100_1.png": 11, "100/100_iter_2.png": 12, "100/100_inde_2.png": 22, "200/200_1.png": 31,
          "300/300_1.png": 41, "300/300_iter_2.png": 42, "300/300_inde_2.png": 52, "300/300_inde_3.png": 53}


@pytest.fixture
def edits(tmp_path):
    folder = tmp_path / "testResults"
    for rel, v in LAYOUT.items():
        write(folder, rel, v)
    (folder / "100" / "notes.txt").write_text("not an image: ignored")
    return folder


def queries(recs=None):
    return [query_from_dict(r) for r in (recs or records())]


def test_each_protocol_reads_turn_one_and_its_own_later_turns(edits):
    single = map_session_folder(edits, queries(), "single_turn")
    multi = map_session_folder(edits, queries(), "multi_turn")
    assert not single.refused and not multi.refused
    names = {p: {q: f.name for q, f in m.files.items()} for p, m in (("single", single), ("multi", multi))}
    assert names["single"] == {"mb-test-100-t1": "100_1.png", "mb-test-100-t2": "100_inde_2.png",
                               "mb-test-200-t1": "200_1.png", "mb-test-300-t1": "300_1.png",
                               "mb-test-300-t2": "300_inde_2.png", "mb-test-300-t3": "300_inde_3.png"}
    assert names["multi"] == {"mb-test-100-t1": "100_1.png", "mb-test-100-t2": "100_iter_2.png",
                              "mb-test-200-t1": "200_1.png", "mb-test-300-t1": "300_1.png",
                              "mb-test-300-t2": "300_iter_2.png"}  # 300's turn 3 is missing, not turn 2 again


def test_a_folder_maps_to_the_session_of_its_name_before_an_image_id(tmp_path):
    write(tmp_path, "a/a_1.png", 1)
    recs = records({"a": 1, "b": 1}, session_id=lambda img: {"a": "b", "b": "a"}[img])  # ids swapped on purpose
    got = map_session_folder(tmp_path, queries(recs), "single_turn").files
    assert {q: p.name for q, p in got.items()} == {"mb-test-b-t1": "a_1.png"}  # session "a" is image b's


@pytest.mark.parametrize("rel, why", [
    ("999/999_1.png", "no session of the query set has the id or image id '999'"),
    ("100/100_iter_3.png", "session 'mb-test-100' has 2 turn(s)"),
    ("200/200_inde_2.png", "has 1 turn(s)"),  # more generated turns than ground-truth ones
    ("100/100_inde_1.png", "turn 1 is 100_1"),
    ("100/100_final.png", "not a name the script writes"),
    ("100/200_1.png", "not a name the script writes"),
    ("100/100_iter_02.png", "not a name the script writes"),
    ("loose.png", "an image beside the session folders"),
    ("100/100_1.jpg", "a second file for turn 1"),
])
def test_a_file_that_maps_to_no_turn_is_refused_by_name(edits, rel, why):
    write(edits, rel, 7)
    refused = map_session_folder(edits, queries(), "single_turn").refused
    said = " ".join(f"{r}: {w}" for r, w in refused)
    assert len(refused) == 1 and rel in said and why in said, refused


def test_an_image_id_of_two_sessions_is_ambiguous(tmp_path):
    write(tmp_path, "x/x_1.png", 1)
    recs = records({"x": 1}) + [r | {"id": "other", "session": "s2"} for r in records({"x": 1})]
    [(rel, why)] = map_session_folder(tmp_path, queries(recs), "single_turn").refused
    assert rel == "x/x_1.png" and "ambiguous" in why


def _score(tmp_path, edits, *extra):
    from benchmark.commands.score_edits import main

    root = make_set(tmp_path / "qs", records())
    return main(["queryset=demo", f"queryset.root={root}", f"edits={edits}", "name=theirs", "profile=tiny",
                 "metrics=basic", f"paths.results={tmp_path / 'r'}", "progress=false",
                 "aggregate.bootstrap_resamples=20", *extra])


def _runs(results: Path) -> dict[str, Path]:
    out = {}
    for meta_path in sorted(results.glob("runs/*/theirs-*/run.json")):
        meta = json.loads(meta_path.read_text())
        out[meta["editor_info"]["protocol"]] = meta_path.parent
        # the run's own protocol, where the run records one, is the one the files were read for
        assert meta.get("protocol", meta["editor_info"]["protocol"]) == meta["editor_info"]["protocol"]
    return out


def _grey(path: Path) -> int:
    return int(np.asarray(Image.open(path))[0, 0, 0])


def test_score_runs_both_protocols_of_the_authors_folder_and_counts_missing_turns(tmp_path, edits, capsys):
    assert _score(tmp_path, edits) == 0
    out = capsys.readouterr().out
    assert "scoring both protocols" in out and "MISSING 1 edits" in out and "mb-test-300-t3" in out
    runs = _runs(tmp_path / "r")
    assert sorted(runs) == ["multi_turn", "single_turn"]
    for protocol, want in (("single_turn", {"100-t2": 22, "300-t2": 52, "300-t3": 53}),
                           ("multi_turn", {"100-t2": 12, "300-t2": 42})):
        for q, v in ({"100-t1": 11, "200-t1": 31, "300-t1": 41} | want).items():
            assert _grey(runs[protocol] / "edits" / f"mb-test-{q}.png") == v, (protocol, q)
    assert not (runs["multi_turn"] / "edits" / "mb-test-300-t3.png").exists()
    [part] = list((runs["multi_turn"] / "scores").glob("*/part-*.parquet"))
    rows = pd.read_parquet(part).set_index("query_id")
    assert rows.loc["mb-test-300-t3", "status"] == "missing"
    assert (rows.loc["mb-test-300-t2", "session"], rows.loc["mb-test-300-t2", "turn"]) == ("mb-test-300", 2)
    board = pd.read_csv(tmp_path / "r" / "leaderboard.csv").set_index("editor_sig")
    assert board.loc[runs["multi_turn"].name.split("-", 1)[1], "mark"].startswith("PARTIAL 5/6")
    turns = pd.read_csv(tmp_path / "r" / "leaderboard_turns.csv")
    turns = turns[~turns["setting"].str.startswith("turn_")].set_index("protocol")  # the figures, not the per-turn rows
    assert turns.loc["multi_turn", "setting"] == "final_turn" and turns.loc["single_turn", "setting"] == "all_turn"
    # final_turn: sessions 100 (turn 2), 200 (turn 1), 300 (turn 3: missing, never its turn 2); all_turn: six turns
    assert (turns.loc["multi_turn", "n_total"], turns.loc["multi_turn", "n_ok"]) == (3, 2)
    assert (turns.loc["single_turn", "n_total"], turns.loc["single_turn", "n_ok"]) == (6, 6)
    # L1 against the grey-90 sources, worked out by hand: final_turn (|12-90| + |31-90|) / 2 / 255; all_turn the
    # six independent turns |11|22|31|41|52|53 - 90| pooled
    assert turns.loc["multi_turn", "l1"] == pytest.approx((78 + 59) / 2 / 255, abs=1e-6)
    assert turns.loc["single_turn", "l1"] == pytest.approx((79 + 68 + 59 + 49 + 38 + 37) / 6 / 255, abs=1e-6)


def test_score_reads_only_the_protocol_asked_for(tmp_path, edits, capsys):
    assert _score(tmp_path, edits, "--protocol", "multi_turn") == 0
    assert sorted(_runs(tmp_path / "r")) == ["multi_turn"]
    capsys.readouterr()


def test_a_folder_without_iterated_files_is_scored_single_turn(tmp_path, edits, capsys):
    for p in edits.glob("*/*_iter_*.png"):
        p.unlink()
    assert _score(tmp_path, edits) == 0
    assert sorted(_runs(tmp_path / "r")) == ["single_turn"]
    assert "scoring single_turn (no <id>_iter_<t> file)" in capsys.readouterr().out


def test_score_refuses_a_folder_with_unmappable_files_before_any_work(tmp_path, edits, capsys):
    write(edits, "100/100_iter_3.png", 5)
    write(edits, "999/999_1.png", 5)
    assert _score(tmp_path, edits) == 2
    err = capsys.readouterr().err
    assert "2 file(s) map to no turn" in err and "100/100_iter_3.png" in err and "999/999_1.png" in err
    assert "edit_cli_single_multi_turn.py" in err
    assert not (tmp_path / "r" / "runs").exists()


def test_protocol_both_of_a_flat_folder_is_refused(tmp_path, capsys):
    flat = tmp_path / "flat"
    write(flat, "mb-test-200-t1.png", 1)
    assert _score(tmp_path, flat, "--protocol", "both") == 2
    assert "flat folder" in capsys.readouterr().err


def test_a_flat_folder_of_multi_turn_edits_is_one_run_of_that_protocol(tmp_path, capsys):
    flat = tmp_path / "flat"
    for q, v in (("100-t1", 11), ("100-t2", 12), ("200-t1", 31)):
        write(flat, f"mb-test-{q}.png", v)
    (flat / ".ipynb_checkpoints").mkdir()  # a hidden folder does not make it the session layout
    assert _score(tmp_path, flat, "--protocol", "multi_turn") == 0
    assert sorted(_runs(tmp_path / "r")) == ["multi_turn"]
    final = pd.read_csv(tmp_path / "r" / "leaderboard_turns.csv").iloc[0]
    assert final["setting"] == "final_turn" and (final["n_total"], final["n_ok"]) == (3, 2)  # 300's turn 3 missing
    capsys.readouterr()


def test_the_protocol_is_given_as_an_option_not_an_override(tmp_path, edits, capsys):
    with pytest.raises(SystemExit):
        _score(tmp_path, edits, "editor.protocol=multi_turn")
    assert "give --protocol instead" in capsys.readouterr().err


def test_the_external_editor_maps_the_layout_itself_and_refuses_what_it_cannot_map(tmp_path, edits):
    from benchmark.io.session_edits import SessionLayoutError
    from editors.external import ExternalEdits

    root = make_set(tmp_path / "qs", records())
    ext = ExternalEdits(str(edits), layout="magicbrush", protocol="multi_turn", queries=str(root / "queries.jsonl"))
    assert ext.missing([r["id"] for r in records()]) == ["mb-test-300-t3"]
    assert ext.find("mb-test-100-t2").name == "100_iter_2.png"
    assert ext.info()["protocol"] == "multi_turn" and ext.info()["layout"] == "magicbrush"
    with pytest.raises(ValueError, match="needs queries="):
        ExternalEdits(str(edits), layout="magicbrush")
    write(edits, "100/100_iter_7.png", 1)
    with pytest.raises(SessionLayoutError, match="100/100_iter_7.png: session 'mb-test-100' has 2 turn"):
        ExternalEdits(str(edits), layout="magicbrush", queries=str(root / "queries.jsonl"))


def test_a_multi_turn_folder_against_a_first_turn_set_says_the_set_needs_every_turn(tmp_path, edits, capsys):
    """A set built with the default `--turns first` (no sessions: turn-1 queries only) and the authors' multi-turn
    folder: not 'no query has an edit', but what the folder is and how to build the set it needs."""
    from benchmark.commands.score_edits import main

    firsts = [{k: v for k, v in r.items() if k not in ("session", "turn")} for r in records() if r["turn"] == 1]
    root = make_set(tmp_path / "qs", firsts)
    rc = main(["queryset=demo", f"queryset.root={root}", f"edits={edits}", "name=theirs", "profile=tiny",
               "metrics=basic", f"paths.results={tmp_path / 'r'}", "progress=false"])
    err = capsys.readouterr().err
    assert rc == 2 and "looks like MagicBrush's multi-turn layout (e.g. 100/100_1.png" in err
    assert "has no sessions" in err and "--turns all" in err and "no query has an edit" not in err
    assert not (tmp_path / "r" / "runs").exists()  # refused before any work
