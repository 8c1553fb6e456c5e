"""MagicBrush's final_turn / all_turn figures (`leaderboard_turns.csv`), pinned on hand-worked sessions.

The pairing rules are those of MagicBrush's `evaluation/image_eval.py`: `final_turn` pairs each session's last turn
(the highest turn number, compared as a number) of the iterated (multi-turn) outputs, `all_turn` every turn of the
independent (single-turn) outputs; each figure is the mean over its pairs, so a long session weighs more in
all_turn and counts once in final_turn. Where the script would score a session's last generated turn in place of a
missing last turn, editmeter counts the turn as missing.
"""

import json
from pathlib import Path

import pandas as pd
import pytest

from benchmark.io.score_cache import INDEX_COLUMNS, INDEX_FILE, load_query_index
from benchmark.io.turns import final_turns, owed_queries
from benchmark.stages.aggregate import write_leaderboards
from benchmark.tables.leaderboard import main

SHA = "ab" * 32
QS_HASH = "e" * 64
MSIG = "sigconv"


def sessions_of(spec: dict[str, int]) -> list[tuple[str, str, int]]:
    """(query id, session, turn) of sessions named -> number of turns."""
    return [(f"{s}-t{t}", s, t) for s, n in spec.items() for t in range(1, n + 1)]


def make_run(results: Path, editor: str, protocol: str | None, values: dict[str, float], spec: dict[str, int], *,
             missing: tuple[str, ...] = (), failed: tuple[str, ...] = (), extra: tuple[str, ...] = ()) -> Path:
    """A scored run of a set with sessions `spec` (plus queries `extra` of no session): `l1_gt` per query id from
    `values`, `missing` left unscored, `failed` failed rows; run.json's protocol (None: the field is absent)."""
    triples = sessions_of(spec)
    qids = [q for q, _, _ in triples] + list(extra)
    sig = f"{editor}{protocol or ''}".replace("_", "")
    run_dir = results / "runs" / f"mb-{QS_HASH[:10]}" / f"{editor}-{sig}"
    folder = run_dir / "scores" / MSIG
    folder.mkdir(parents=True)
    rows = [[q, q.split("-")[0], "free_form", "free-form", ""] for q in qids]
    (folder / INDEX_FILE).write_text(json.dumps({
        "format": 1, "queryset": "mb", "queryset_hash": QS_HASH, "n_total": len(qids), "columns": INDEX_COLUMNS,
        "rows": rows, "sessions": [list(t) for t in triples]}))
    where = {q: (s, t) for q, s, t in triples}
    records = []
    for q in qids:
        if q in missing:
            continue
        status = "failed" if q in failed else "ok"
        s, t = where.get(q, (None, None))
        records.append({"query_id": q, "image_id": q.split("-")[0], "edit_type": "free_form",
                        "object_class": "free-form", "status": status, "reason": "x" if q in failed else "",
                        "edit_sha256": SHA, "session": s, "turn": t,
                        "l1_gt": float("nan") if q in failed else values[q]})
    frame = pd.DataFrame(records)
    frame["turn"] = frame["turn"].astype("Int64")
    frame.to_parquet(folder / f"part-{0:020d}-h-1-00000.parquet", index=False)
    entry = {"metric_set": "conventional", "metric_order": ["l1_gt"], "column_order": ["l1_gt"], "suite": None,
             "metrics": {"l1_gt": {"version": "1", "higher_is_better": False, "description": "L1 vs ground truth"}}}
    meta = {"queryset": "mb", "queryset_hash": QS_HASH, "queryset_size": len(qids), "editor": editor,
            "editor_sig": sig, "prompt_kind": "instruction", "profile": "tiny", "seed": 0, "git_sha": "abc",
            "versions": {"x": "1"}, "device": "cpu", "editor_info": {"name": editor}, "editor_config": {},
            "selection": {"shard": [0, 1], "limit": None, "n_selected": len(qids)}, "metric_sig": MSIG, **entry,
            "scored": {MSIG: entry}}
    if protocol is not None:
        meta["protocol"] = protocol
    (run_dir / "run.json").write_text(json.dumps(meta))
    return run_dir


# s1: one turn; s2: three turns. Hand-worked: final_turn = (0.1 + 0.6) / 2 = 0.35 (one pair per session);
# all_turn = (0.1 + 0.2 + 0.4 + 0.6) / 4 = 0.325 (pairs pooled); a mean of session means would be 0.25.
SPEC = {"s1": 1, "s2": 3}
VALUES = {"s1-t1": 0.1, "s2-t1": 0.2, "s2-t2": 0.4, "s2-t3": 0.6}


def turns_table(results: Path, by_turn: bool = False) -> pd.DataFrame:
    """leaderboard_turns.csv's rows of MagicBrush's figures (`by_turn`: its per-turn rows instead)."""
    write_leaderboards(results, None, 50, 0)
    t = pd.read_csv(results / "leaderboard_turns.csv", keep_default_na=False, na_values=["", "nan"])
    return t[t["setting"].str.startswith("turn_") == by_turn].reset_index(drop=True)


def test_final_turn_is_one_pair_per_session_and_all_turn_pools_every_turn(tmp_path):
    make_run(tmp_path, "ed", "multi_turn", VALUES, SPEC)
    make_run(tmp_path, "ed", "single_turn", VALUES, SPEC)
    t = turns_table(tmp_path).set_index("protocol")
    final, every = t.loc["multi_turn"], t.loc["single_turn"]
    assert final["setting"] == "final_turn" and every["setting"] == "all_turn"
    assert final["l1_gt"] == pytest.approx(0.35) and final["l1_gt_n"] == 2
    assert (final["n_total"], final["n_ok"], final["n_sessions"], final["complete"]) == (2, 2, 2, True)
    assert every["l1_gt"] == pytest.approx(0.325) and every["l1_gt_n"] == 4
    assert (every["n_total"], every["n_sessions"]) == (4, 2)


def test_the_final_turn_is_the_highest_turn_as_a_number_not_as_text(tmp_path):
    spec = {"long": 10}
    values = {f"long-t{t}": t / 100 for t in range(1, 11)}  # as text, "long-t9" sorts after "long-t10"
    assert final_turns(sessions_of(spec)) == {"long": "long-t10"}
    make_run(tmp_path, "ed", "multi_turn", values, spec)
    assert turns_table(tmp_path).iloc[0]["l1_gt"] == pytest.approx(0.10)


def test_a_one_turn_session_counts_its_only_turn_in_both_settings():
    one = sessions_of({"solo": 1})
    assert owed_queries(one, "final_turn", {"solo-t1"}) == (["solo-t1"], 1)
    assert owed_queries(one, "all_turn", {"solo-t1"}) == (["solo-t1"], 1)


def test_a_session_missing_its_last_turn_is_missing_not_scored_at_an_earlier_turn(tmp_path):
    # fewer generated turns than ground-truth ones: the script scores s2's last generated turn (0.4) as its final
    # turn, giving (0.1 + 0.4) / 2 = 0.25; editmeter counts s2's final turn as missing and marks the row
    make_run(tmp_path, "ed", "multi_turn", VALUES, SPEC, missing=("s2-t3",))
    make_run(tmp_path, "ed", "single_turn", VALUES, SPEC, missing=("s2-t3",))
    t = turns_table(tmp_path).set_index("protocol")
    final, every = t.loc["multi_turn"], t.loc["single_turn"]
    assert final["l1_gt"] == pytest.approx(0.1) and (final["n_ok"], final["n_missing"]) == (1, 1)
    assert not final["complete"] and final["mark"].startswith("PARTIAL 1/2")
    assert every["l1_gt"] == pytest.approx((0.1 + 0.2 + 0.4) / 3, abs=1e-6) and every["mark"].startswith("PARTIAL 3/4")


def test_each_turn_index_has_its_own_row_over_the_sessions_that_have_it(tmp_path):
    # turn 1: s1 and s2, (0.1 + 0.2) / 2; turn 2: s2 only, 0.4; turn 3: s2's, missing here, so PARTIAL 0/1
    make_run(tmp_path, "ed", "multi_turn", VALUES, SPEC, missing=("s2-t3",))
    t = turns_table(tmp_path, by_turn=True).set_index("setting")
    assert list(t.index) == ["turn_1", "turn_2", "turn_3"] and set(t["protocol"]) == {"multi_turn"}
    assert t.loc["turn_1", "l1_gt"] == pytest.approx(0.15) and t.loc["turn_1", "n_sessions"] == 2
    assert t.loc["turn_2", "l1_gt"] == pytest.approx(0.4) and t.loc["turn_2", "complete"]
    assert (t.loc["turn_3", "n_total"], t.loc["turn_3", "n_missing"]) == (1, 1)
    assert t.loc["turn_3", "mark"].startswith("PARTIAL 0/1")


def test_a_failed_final_turn_is_counted_failed_and_left_out_of_the_mean(tmp_path):
    make_run(tmp_path, "ed", "multi_turn", VALUES, SPEC, failed=("s2-t3",))
    final = turns_table(tmp_path).iloc[0]
    assert final["l1_gt"] == pytest.approx(0.1) and (final["n_ok"], final["n_failed"], final["n_missing"]) == (1, 1, 0)


def test_queries_of_no_session_are_in_neither_figure_and_a_run_json_without_protocol_is_single_turn(tmp_path):
    make_run(tmp_path, "ed", None, VALUES | {"plain": 9.0}, SPEC, extra=("plain",))
    row = turns_table(tmp_path).iloc[0]
    assert (row["protocol"], row["setting"]) == ("single_turn", "all_turn")
    assert row["l1_gt"] == pytest.approx(0.325) and row["n_total"] == 4
    overall = pd.read_csv(tmp_path / "leaderboard.csv").iloc[0]
    assert overall["l1_gt"] == pytest.approx((0.1 + 0.2 + 0.4 + 0.6 + 9.0) / 5)  # the per-query table is unchanged


def test_runs_of_sets_without_sessions_give_no_turn_rows(tmp_path):
    from synthetic_runs import make_run as plain_run

    plain_run(tmp_path, "ed", {"steps": 1})
    t = turns_table(tmp_path)
    assert len(t) == 0 and {"protocol", "setting", "n_total", "mark"} <= set(t.columns)


def test_an_unknown_protocol_in_run_json_gives_no_figure_and_a_warning(tmp_path):
    from benchmark.io.score_cache import ResultsWarning

    make_run(tmp_path, "ed", "sideways", VALUES, SPEC)
    with pytest.warns(ResultsWarning, match="protocol 'sideways'"):
        assert len(turns_table(tmp_path)) == 0


@pytest.mark.parametrize("meta, want", [
    ({}, "single_turn"), ({"protocol": None}, "single_turn"), ({"protocol": "multi_turn"}, "multi_turn"),
    ({"editor_info": {"protocol": "multi_turn"}}, "multi_turn"),
    ({"protocol": "multi_turn", "editor_info": {"protocol": "multi_turn"}}, "multi_turn")])
def test_the_protocol_is_run_jsons_else_the_one_the_editor_read_the_edits_for(meta, want):
    from benchmark.io.turns import protocol_of

    assert protocol_of(meta) == want


def test_a_run_json_protocol_that_contradicts_its_editors_is_refused():
    from benchmark.io.turns import ProtocolError, protocol_of

    with pytest.raises(ProtocolError, match="read the edits of protocol 'multi_turn'"):
        protocol_of({"protocol": "single_turn", "editor_info": {"protocol": "multi_turn"}})


def test_the_turn_rows_come_back_identical_from_the_aggregate_cache(tmp_path):
    import benchmark.tables.aggregate_cache as ac

    make_run(tmp_path, "ed", "multi_turn", VALUES, SPEC)
    path = tmp_path / "leaderboard_turns.csv"
    write_leaderboards(tmp_path, None, 50, 0, cache=False)
    fresh = path.read_bytes()
    write_leaderboards(tmp_path, None, 50, 0)  # writes the entry
    write_leaderboards(tmp_path, None, 50, 0)  # reads it back
    assert ac.LAST_STATS.reused == 1 and path.read_bytes() == fresh


@pytest.mark.parametrize("sessions, why", [
    ("x", "not a list"), ([["a", "s", 0]], "turn from 1"), ([["zz", "s", 1]], "not in the index"),
    ([["a", "s", 1], ["b", "s", 3]], "not 1..n"), ([["a", "s", 1], ["a", "s", 2]], "twice")])
def test_a_bad_sessions_entry_in_the_query_index_is_refused(tmp_path, sessions, why):
    from benchmark.io.score_cache import BadCacheFile

    path = tmp_path / INDEX_FILE
    path.write_text(json.dumps({"format": 1, "queryset": "q", "queryset_hash": "h", "n_total": 2,
                                "columns": INDEX_COLUMNS, "rows": [["a", "", "", "", ""], ["b", "", "", "", ""]],
                                "sessions": sessions}))
    with pytest.raises(BadCacheFile, match=why):
        load_query_index(path)


def test_show_sets_the_two_settings_side_by_side_per_editor(tmp_path, capsys):
    make_run(tmp_path, "ed", "multi_turn", VALUES, SPEC)
    make_run(tmp_path, "ed", "single_turn", VALUES, SPEC)
    make_run(tmp_path, "other", "single_turn", VALUES, SPEC, missing=("s1-t1",))
    write_leaderboards(tmp_path, None, 50, 0)
    assert main(["show", "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    side = out[out.index("side by side"):].splitlines()
    assert "single-turn (all_turn)" in side[1] and "multi-turn (final_turn)" in side[1]
    ed = next(line for line in side if line.startswith("ed "))
    left, right = ed.split("|")
    assert "0.325" in left and "complete" in left and "0.350" in right and "complete" in right
    other = next(line for line in side if line.startswith("other "))
    assert "PARTIAL 3/4" in other.split("|")[0] and "no run" in other.split("|")[1]
    by_turn = side[side.index(next(line for line in side if line.startswith("by turn"))) + 1:]
    assert by_turn[0].split()[:3] == ["editor", "protocol", "sig"] and "turn 3" in by_turn[0]
    multi = next(line for line in by_turn if line.split()[:2] == ["ed", "multi_turn"])
    assert [cell.split("±")[0] for cell in multi.split()[3:]] == ["0.150", "0.400", "0.600"]


def test_show_has_no_side_by_side_view_without_a_multi_turn_run(tmp_path, capsys):
    make_run(tmp_path, "ed", "single_turn", VALUES, SPEC)
    write_leaderboards(tmp_path, None, 50, 0)
    assert main(["show", "--results", str(tmp_path)]) == 0
    assert "side by side" not in capsys.readouterr().out


def test_a_multi_turn_row_is_tagged_in_the_overall_tables():
    from benchmark.tables.show import editor_cell

    assert editor_cell({"editor": "ed", "protocol": "multi_turn"}) == "ed [multi-turn]"
    assert editor_cell({"editor": "ed", "protocol": "single_turn"}) == editor_cell({"editor": "ed"}) == "ed"


@pytest.mark.parametrize("change, why", [
    ({"drop": "turn"}, "without 'turn'"), ({"drop": "session"}, "without 'session'"),
    ({"turn": 0}, "whole turn number from 1"), ({"session": ""}, "empty session id"),
    ({"session": None}, "a turn on a row of no session")])
def test_a_score_part_with_a_bad_session_or_turn_is_refused(tmp_path, change, why):
    from benchmark.io.score_cache import BadCacheFile, check_part

    row = {"query_id": "s1-t1", "image_id": "s1", "edit_type": "free_form", "object_class": "free-form",
           "status": "ok", "reason": "", "edit_sha256": SHA, "session": "s1", "turn": 1, "l1_gt": 0.5}
    row = {k: v for k, v in (row | change).items() if k != change.get("drop") and k != "drop"}
    path = tmp_path / "part.parquet"
    pd.DataFrame([row]).to_parquet(path, index=False)
    with pytest.raises(BadCacheFile, match=why):
        check_part(path, None)


def test_a_score_part_mixing_rows_of_sessions_and_of_none_is_read(tmp_path):
    from benchmark.io.score_cache import check_part

    base = {"image_id": "", "edit_type": "free_form", "object_class": "free-form", "status": "ok", "reason": "",
            "edit_sha256": SHA, "l1_gt": 0.5}
    frame = pd.DataFrame([base | {"query_id": "s1-t2", "session": "s1", "turn": 2},
                          base | {"query_id": "plain", "session": None, "turn": None}])
    frame.astype({"turn": "Int64"}).to_parquet(tmp_path / "part.parquet", index=False)
    got = check_part(tmp_path / "part.parquet", None)
    assert got.loc[0, "turn"] == 2 and pd.isna(got.loc[1, "session"])
