"""Carry-over (benchmark.stages.carry) and `editmeter verify` (benchmark.commands.verify): an earlier run whose setting is this
run's and whose code differs gives its edits once a re-edited sample is pixel-identical; a difference re-edits
everything and says where; `verify` re-edits a sample of a finished run and exits 1 on a difference."""

import json
import shutil

import numpy as np
import pandas as pd
import pytest
from PIL import Image

import benchmark.plan.config as config
from benchmark.commands.run import compose, run_pipeline
from benchmark.io.types import Query
from benchmark.stages import carry

DEMO = ("queryset=demo_mini", "profile=tiny", "progress=false", "aggregate.bootstrap_resamples=20",
        "metrics=basic", "batch_size=1")


def _run(tmp_path, *extra, editor="identity"):
    cfg, choices = compose([*DEMO, f"editor={editor}", f"paths.results={tmp_path / 'results'}", *extra])
    return run_pipeline(cfg, choices["editor"])


def _records(run_dir):
    out = {}
    for line in (run_dir / "edits.jsonl").read_text().splitlines():
        rec = json.loads(line)
        out[rec["query_id"]] = rec
    return out


def _code_changed(monkeypatch, label="changed"):
    """As if the code that makes the pixels had changed: the code part of every editor key differs."""
    monkeypatch.setattr(config, "editor_code_digest", lambda target, protocol="single_turn": label)


def _one_level_off(monkeypatch, ids=None):
    """The identity editor's pixels changed: pixel (0, 0) one level brighter (darker at 255)."""
    from editors.identity import IdentityEditor

    plain = IdentityEditor.edit

    def edit(self, queries, images, *, seeds):
        out = plain(self, queries, images, seeds=seeds)
        for q, im in zip(queries, out, strict=True):
            if ids is None or q.id in ids:
                r, g, b = im.getpixel((0, 0))
                im.putpixel((0, 0), (r + 1 if r < 255 else 254, g, b))
        return out

    monkeypatch.setattr(IdentityEditor, "edit", edit)


def test_an_upgrade_that_changes_no_pixel_adopts_the_earlier_edits_after_a_verified_sample(tmp_path, monkeypatch,
                                                                                            capsys):
    first = _run(tmp_path)
    old_dir = tmp_path / "results" / "runs" / first["run_dir"].split("/runs/")[1]
    _code_changed(monkeypatch)
    capsys.readouterr()
    second = _run(tmp_path, "carry.sample=2")
    out = capsys.readouterr().out
    new_dir = tmp_path / "results" / "runs" / second["run_dir"].split("/runs/")[1]
    assert new_dir != old_dir
    line = next(x for x in out.splitlines() if "carry-over" in x)
    budget = next(x for x in out.splitlines() if "budget:" in x)
    assert "0 queries to do (14 to carry over from an earlier run of this setting" in budget, budget
    verdict = carry.read_verdict(new_dir)
    k = len(verdict["compared"])
    assert verdict["verdict"] == "identical" and 7 <= k < 14  # every edit type (7), then what the slots hold
    assert f"verified {k}/{k} identical" in line and f"adopted the other {14 - k} edits" in line, line
    recs = _records(new_dir)
    carried = [r for r in recs.values() if "carried_from" in r]
    assert len(carried) == 14 - k and len(recs) == 14
    assert all(r["carried_from"]["run"].endswith(old_dir.name) and r["carried_from"]["verified"] ==
               f"{k}/{k} identical" for r in carried)
    for q in recs:  # adopted or re-edited, every PNG equals the earlier run's
        assert (new_dir / "edits" / f"{q}.png").read_bytes() == (old_dir / "edits" / f"{q}.png").read_bytes()
    assert second["edit"].computed == 0 and second["edit"].skipped == 14
    meta = json.loads((new_dir / "run.json").read_text())
    (src, entry), = meta["carried_from"].items()
    assert src.endswith(old_dir.name) and entry["edits"] == 14 - k and entry["verified"] == f"{k}/{k} identical"
    assert meta["editor_key"]["code"] == "changed" and meta["editor_key"]["setting"] == \
        json.loads((old_dir / "run.json").read_text())["editor_key"]["setting"]
    lb = pd.read_csv(tmp_path / "results" / "leaderboard.csv")
    row = lb[lb["editor_sig"] == second["editor_sig"]].iloc[0]
    assert row["carried_from"].startswith(f"{old_dir.name}: {14 - k} edits, verified {k}/{k} identical at ")
    from benchmark.commands.report.collect import read_runs
    from benchmark.commands.report.html import provenance_html
    from benchmark.tables.leaderboard import format_table

    shown = format_table(tmp_path / "results")
    assert f"identity {second['editor_sig'][:6]}: edits carried over from {old_dir.name}: {14 - k} edits" in shown
    html = provenance_html(read_runs(tmp_path / "results")[0])
    assert f"{14 - k} edits carried over from " in html and f"verified {k}/{k} identical" in html
    # a rerun verifies nothing again and adopts nothing more
    capsys.readouterr()
    third = _run(tmp_path, "carry.sample=2")
    assert third["edit"].computed == 0 and "carry-over from" not in capsys.readouterr().out


def test_a_run_of_the_first_key_scheme_is_carried_over(tmp_path, monkeypatch, capsys):
    """Runs made before keys followed the pixels (scheme 1: no `editor_key` in run.json) are found by their setting,
    computed from the config, info, seed and profile they recorded."""
    first = _run(tmp_path)
    new_dir = tmp_path / "results" / "runs" / first["run_dir"].split("/runs/")[1]
    old_dir = new_dir.parent / "identity-2819345737d0"
    shutil.copytree(new_dir, old_dir)
    shutil.rmtree(new_dir)
    meta = json.loads((old_dir / "run.json").read_text())
    del meta["editor_key"], meta["editor_option"]
    meta["editor_sig"] = "2819345737d0"
    (old_dir / "run.json").write_text(json.dumps(meta))
    capsys.readouterr()
    again = _run(tmp_path)
    out = capsys.readouterr().out
    assert again["editor_sig"] == first["editor_sig"]
    assert "carry-over from runs/demo_mini-6e4fedcfe4/identity-2819345737d0" in out and "14/14 identical" in out


def test_a_changed_pixel_is_found_and_every_query_is_edited_again(tmp_path, monkeypatch, capsys):
    _run(tmp_path)
    _code_changed(monkeypatch)
    _one_level_off(monkeypatch, ids={"demo000-obj_add"})
    capsys.readouterr()
    second = _run(tmp_path, "carry.sample=2")
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "carry-over" in x)
    assert "1 differ (demo000-obj_add: max 1 level(s)" in line and "every query is edited again" in line, line
    new_dir = tmp_path / "results" / "runs" / second["run_dir"].split("/runs/")[1]
    recs = _records(new_dir)
    assert len(recs) == 14 and not any("carried_from" in r for r in recs.values())
    assert carry.read_verdict(new_dir)["verdict"] == "different"
    assert second["edit"].computed + len(carry.read_verdict(new_dir)["compared"]) == 14
    # resumed: the verdict stands, nothing is adopted later
    (new_dir / "edits" / "demo001-obj_add.png").unlink()
    capsys.readouterr()
    third = _run(tmp_path, "carry.sample=2")
    assert third["edit"].computed == 1 and not any("carried_from" in r for r in _records(new_dir).values())


def test_a_tolerance_is_an_option_recorded_where_it_was_used(tmp_path, monkeypatch, capsys):
    _run(tmp_path)
    _code_changed(monkeypatch)
    _one_level_off(monkeypatch, ids={"demo000-obj_add"})
    second = _run(tmp_path, "carry.sample=2", "carry.tolerance=1")
    new_dir = tmp_path / "results" / "runs" / second["run_dir"].split("/runs/")[1]
    verdict = carry.read_verdict(new_dir)
    assert verdict["verdict"] == "within_tolerance" and verdict["tolerance"] == 1
    carried = [r["carried_from"] for r in _records(new_dir).values() if "carried_from" in r]
    assert carried and all(c["tolerance"] == 1 and "1 within 1 level(s)" in c["verified"] for c in carried)
    lb = pd.read_csv(tmp_path / "results" / "leaderboard.csv")
    assert "(tolerance 1 level(s))" in lb[lb["editor_sig"] == second["editor_sig"]].iloc[0]["carried_from"]


def test_reuse_strict_edits_everything(tmp_path, monkeypatch, capsys):
    _run(tmp_path)
    _code_changed(monkeypatch)
    capsys.readouterr()
    second = _run(tmp_path, "reuse=strict")
    assert second["edit"].computed == 14 and "carry-over" not in capsys.readouterr().out


@pytest.mark.parametrize("bad", ["reuse=copy", "carry.sample=0", "carry.tolerance=256", "carry.tolerance=0.5"])
def test_bad_carry_settings_are_refused_before_any_work(tmp_path, bad):
    from benchmark.plan.config import SettingError

    with pytest.raises(SettingError, match="reuse|carry"):
        _run(tmp_path, bad)
    assert not (tmp_path / "results" / "runs").exists()


def test_a_tampered_verdict_is_verified_again(tmp_path, monkeypatch):
    _run(tmp_path)
    _code_changed(monkeypatch)
    second = _run(tmp_path, "carry.sample=2")
    new_dir = tmp_path / "results" / "runs" / second["run_dir"].split("/runs/")[1]
    path = new_dir / carry.CARRY_FILE
    data = json.loads(path.read_text())
    data["verdict"] = "different"
    path.write_text(json.dumps(data))
    assert carry.read_verdict(new_dir) is None


def _q(i, edit_type, session=None, turn=None):
    return Query(id=f"q{i:02d}", image=f"{i}.png", edit_type=edit_type, session=session, turn=turn)


def _sample(queries, ids, n, sizes, batch_size=1, ends=()):
    return [q.id for q in carry.stratified_slots(carry.batch_slots(queries, batch_size), ids, n, sizes, ends)]


def test_the_sample_covers_both_ends_every_type_size_class_and_first_and_last_turns():
    queries = [_q(i, ["a", "b", "c"][i % 3], session=f"s{i // 4}", turn=i % 4 + 1) for i in range(40)]
    sizes = {q.id: ((512, 512) if i < 30 else (1200, 800)) for i, q in enumerate(queries)}
    ids = {q.id for q in queries}
    got = _sample(queries, ids, 5, sizes)
    assert got == _sample(queries, ids, 5, sizes)  # deterministic
    assert got[0] == "q00" and got[-1] == "q39"
    by_id = {q.id: q for q in queries}
    assert {by_id[i].edit_type for i in got} == {"a", "b", "c"}
    assert {carry.size_class(*sizes[i]) for i in got} == {carry.size_class(512, 512), carry.size_class(1200, 800)}
    assert any(by_id[i].turn == 1 for i in got) and any(by_id[i].turn == 4 for i in got)
    assert len(_sample(queries, ids, 16, sizes)) == 16
    assert _sample(queries, set(), 16, sizes) == []
    assert set(_sample(queries, {"q05", "q06"}, 16, sizes)) == {"q05", "q06"}
    assert "q17" in _sample(queries, ids, 5, sizes, ends=["q17"])  # a shard's end


def test_the_sample_is_whole_batch_slots_and_no_more_than_the_strata_need():
    queries = [_q(i, ["a", "b"][i // 8 % 2]) for i in range(64)]  # slots of 8: all a, all b, all a, ...
    sizes = {q.id: (512, 512) for q in queries}
    ids = {q.id for q in queries}
    got = _sample(queries, ids, 16, sizes, batch_size=8)
    assert len(got) == 16  # the two end slots hold both types and 16 queries
    assert got == [f"q{i:02d}" for i in range(8)] + [f"q{i:02d}" for i in range(56, 64)]
    got = _sample(queries, ids, 1, sizes, batch_size=8)
    assert len(got) == 16  # ends first: their slots cover both types already
    # a failed query (not a candidate) rides along in its slot, and the count is of candidates
    got = _sample(queries, ids - {"q03"}, 16, sizes, batch_size=8)
    assert "q03" in got and len(got) == 24
    assert [q.id for q in carry.batch_slots(queries[:10], 4)[2]] == ["q08", "q09"]


def test_multi_turn_slots_follow_the_waves_and_leave_out_turns_without_a_previous_edit():
    queries = [_q(i, "a", session=f"s{i // 3}", turn=i % 3 + 1) for i in range(9)]  # 3 sessions of 3 turns
    queries += [_q(9, "a", session="s3", turn=1)]  # a one-turn session
    slots = carry.protocol_slots(queries, 3, "multi_turn")
    assert [[q.id for q in s] for s in slots] == [["q00", "q03", "q06"], ["q09"], ["q01", "q04", "q07"],
                                                  ["q02", "q05", "q08"]]
    assert carry.protocol_slots(queries, 3) == carry.batch_slots(queries, 3)  # single_turn as before
    slots = carry.protocol_slots(queries, 2, "multi_turn", ready=lambda qid: qid != "q04")  # s1's turn 2 failed
    assert [[q.id for q in s] for s in slots] == [["q00", "q03"], ["q06", "q09"], ["q01", "q04"], ["q07"],
                                                  ["q02", "q08"]]
    sizes = {q.id: (512, 512) for q in queries}
    got = carry.stratified_slots(slots, {q.id for q in queries}, 1, sizes)
    turns = {q.turn for q in got}
    assert turns == {1, 3} and "q05" not in [q.id for q in got]  # first, later and last turns; never q05


def test_compare_pngs_measures_levels_and_share(tmp_path):
    a = np.zeros((4, 5, 3), np.uint8)
    b = a.copy()
    b[0, 0, 1] = 3
    b[1, 1, 0] = 1
    Image.fromarray(a).save(tmp_path / "a.png")
    Image.fromarray(b).save(tmp_path / "b.png")
    d = carry.compare_pngs("q", tmp_path / "a.png", tmp_path / "b.png")
    assert (d.identical, d.max_level, d.share) == (False, 3, 2 / 20) and d.mean_level == pytest.approx(4 / 60)
    assert carry.compare_pngs("q", tmp_path / "a.png", tmp_path / "a.png").identical
    Image.fromarray(np.zeros((5, 5, 3), np.uint8)).save(tmp_path / "c.png")
    assert "size" in carry.compare_pngs("q", tmp_path / "a.png", tmp_path / "c.png").note


# -- editmeter verify ------------------------------------------------------------------------------------------------

def test_verify_reports_identical_then_names_altered_edits_and_exits_1(tmp_path, capsys):
    from benchmark.commands.cli import main
    from benchmark.commands.verify import read_report

    first = _run(tmp_path)
    run_dir = tmp_path / "results" / "runs" / first["run_dir"].split("/runs/")[1]
    capsys.readouterr()
    assert main(["verify", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "reproduced: 14/14 identical, 0 different" in out
    for qid in ("demo000-obj_add", "demo001-bg_chg"):  # one level off in a few pixels
        path = run_dir / "edits" / f"{qid}.png"
        arr = np.asarray(Image.open(path).convert("RGB")).copy()
        arr[:2, :3, 0] = np.where(arr[:2, :3, 0] < 255, arr[:2, :3, 0] + 1, 254)
        Image.fromarray(arr).save(path)
    out_file = tmp_path / "verify.json"
    assert main(["verify", str(run_dir), "--sample", "16", "--out", str(out_file)]) == 1
    out = capsys.readouterr().out
    assert "demo000-obj_add: different (max 1 level(s)" in out and "demo001-bg_chg: different" in out
    assert "DIFFERENT: 12/14 identical, 2 different" in out
    report = read_report(out_file)
    assert report["counts"] == {"identical": 12, "within_tolerance": 0, "different": 2}
    bad = {c["query"]: c for c in report["compared"] if c["verdict"] != "identical"}
    w, h = Image.open(run_dir / "edits" / "demo000-obj_add.png").size
    assert set(bad) == {"demo000-obj_add", "demo001-bg_chg"}
    assert bad["demo000-obj_add"]["max_level"] == 1 and bad["demo000-obj_add"]["share"] == pytest.approx(6 / (w * h))
    assert main(["verify", str(run_dir), "--tolerance", "1"]) == 0
    assert "2 within 1 level(s)" in capsys.readouterr().out
    report_text = out_file.read_text().replace('"different":2', '"different":0')
    out_file.write_text(report_text)
    from benchmark.commands.verify import VerifyError

    with pytest.raises(VerifyError, match="digest"):
        read_report(out_file)


def test_verify_refuses_what_it_cannot_compare(tmp_path, capsys):
    from benchmark.commands.cli import main

    assert main(["verify", str(tmp_path)]) == 2
    assert "no run.json here" in capsys.readouterr().err
    first = _run(tmp_path)
    run_dir = tmp_path / "results" / "runs" / first["run_dir"].split("/runs/")[1]
    assert main(["verify", str(run_dir), "seed=3"]) == 2
    assert "setting rebuilt now" in capsys.readouterr().err


@pytest.mark.slow
def test_verify_a_p2p_tiny_run_is_identical(tmp_path, capsys):
    """The issue's check: a p2p run of 16 demo queries, verified with fresh inversions: 16/16 identical."""
    from benchmark.commands.cli import main

    cfg, choices = compose(["queryset=demo", "profile=tiny", "progress=false", "metrics=basic", "limit=16",
                            "editor=p2p", "stages=[edit]", f"paths.results={tmp_path / 'results'}"])
    summary = run_pipeline(cfg, choices["editor"])
    run_dir = tmp_path / "results" / "runs" / summary["run_dir"].split("/runs/")[1]
    capsys.readouterr()
    assert main(["verify", str(run_dir), "limit=16"]) == 0
    assert "16/16 identical" in capsys.readouterr().out


# -- multi-turn: the sample is re-edited wave by wave from the earlier run's previous turns ---------------------------

SESSIONS = ("queryset=demo_sessions", "profile=tiny", "progress=false", "aggregate.bootstrap_resamples=20",
            "metrics=basic", "protocol=multi_turn", "editor=overedit")


def _multi(results, *extra):
    cfg, choices = compose([*SESSIONS, f"paths.results={results}", *extra])
    summary = run_pipeline(cfg, choices["editor"])
    return summary, results / "runs" / summary["run_dir"].split("/runs/")[1]


def _later_turns_off(monkeypatch):
    """overedit's pixels changed from turn 2 on: pixel (0, 0) of every later turn's edit one level off."""
    from editors.overedit import OverEditEditor

    plain = OverEditEditor.edit

    def edit(self, queries, images, *, seeds):
        out = plain(self, queries, images, seeds=seeds)
        for q, im in zip(queries, out, strict=True):
            if (q.turn or 1) > 1:
                r, g, b = im.getpixel((0, 0))
                im.putpixel((0, 0), (r + 1 if r < 255 else 254, g, b))
        return out

    monkeypatch.setattr(OverEditEditor, "edit", edit)


def _pngs(run_dir):
    return {p.stem: p.read_bytes() for p in sorted((run_dir / "edits").glob("*.png"))}


def _table(results, sig):
    lb = pd.read_csv(results / "leaderboard.csv")
    row = lb[lb["editor_sig"] == sig].iloc[0]
    return row.drop(labels=[c for c in lb.columns if c in ("editor_sig", "run_dir", "carried_from", "git_sha",
                                                           "updated_at", "run_id")], errors="ignore")


@pytest.mark.parametrize("batch_size", [1, 4])
def test_a_multi_turn_upgrade_that_changes_no_pixel_adopts_the_earlier_turns(tmp_path, monkeypatch, capsys,
                                                                               batch_size):
    results = tmp_path / "results"
    _, old_dir = _multi(results, f"batch_size={batch_size}")
    _code_changed(monkeypatch)
    capsys.readouterr()
    second, new_dir = _multi(results, "carry.sample=2", f"batch_size={batch_size}")
    out = capsys.readouterr().out
    assert new_dir != old_dir
    budget = next(x for x in out.splitlines() if "budget:" in x)
    assert "0 queries to do (10 to carry over from an earlier run of this setting" in budget, budget
    line = next(x for x in out.splitlines() if "carry-over from" in x)
    verdict = carry.read_verdict(new_dir)
    k = len(verdict["compared"])
    assert verdict["verdict"] == "identical" and 2 <= k < 10
    # the sample covers turn 1, a later turn and a session's last turn
    assert any(q.endswith("-t1") for q in verdict["sample"]) and any(q.endswith("-t3") for q in verdict["sample"])
    assert f"verified {k}/{k} identical" in line and f"adopted the other {10 - k} edits" in line, line
    recs, old = _records(new_dir), _records(old_dir)
    carried = [r for r in recs.values() if "carried_from" in r]
    assert len(carried) == 10 - k and len(recs) == 10
    for r in recs.values():  # adopted or re-edited, each keeps the key of the input it was made from
        assert (r.get("input_sha256"), r.get("input_from")) == (old[r["query_id"]].get("input_sha256"),
                                                                 old[r["query_id"]].get("input_from"))
    assert _pngs(new_dir) == _pngs(old_dir)
    assert second["edit"].computed == 0 and second["edit"].skipped == 10
    # a rerun edits nothing; the tables equal a from-scratch run of the new code
    capsys.readouterr()
    third, _ = _multi(results, "carry.sample=2", f"batch_size={batch_size}")
    assert third["edit"].computed == 0 and "carry-over from" not in capsys.readouterr().out
    fresh, fresh_dir = _multi(tmp_path / "fresh", f"batch_size={batch_size}")
    assert fresh["edit"].computed == 10 and _pngs(fresh_dir) == _pngs(new_dir)
    pd.testing.assert_series_equal(_table(results, second["editor_sig"]),
                                   _table(tmp_path / "fresh", fresh["editor_sig"]), check_names=False)


def test_a_multi_turn_change_from_turn_2_on_is_found_and_every_turn_is_edited_again(tmp_path, monkeypatch, capsys):
    results = tmp_path / "results"
    _, old_dir = _multi(results, "batch_size=1")
    _code_changed(monkeypatch)
    _later_turns_off(monkeypatch)
    capsys.readouterr()
    second, new_dir = _multi(results, "carry.sample=2", "batch_size=1")
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "carry-over from" in x)
    verdict = carry.read_verdict(new_dir)
    assert verdict["verdict"] == "different" and "every query is edited again" in line, line
    assert "demo002-session-t3: max 1 level(s)" in line, line  # the last turn, edited from the earlier run's turn 2
    recs = _records(new_dir)
    assert not any("carried_from" in r for r in recs.values())
    # the sampled turn 3 was made from the earlier run's turn 2, not this run's: stale, so the turns stage edits it
    # again; only the sampled turn 1 (made from its own image) is kept
    stale = [json.loads(x) for x in (new_dir / "edits.jsonl").read_text().splitlines()]
    assert sum(r["query_id"] == "demo002-session-t3" for r in stale) == 2
    assert second["edit"].computed == 9 and second["edit"].skipped == 1
    fresh, fresh_dir = _multi(tmp_path / "fresh", "batch_size=1")
    assert _pngs(fresh_dir) == _pngs(new_dir)
    for q, r in _records(fresh_dir).items():
        assert recs[q].get("input_sha256") == r.get("input_sha256")


def test_verify_a_multi_turn_run_re_edits_later_turns_from_its_own_previous_turns(tmp_path, capsys):
    from benchmark.commands.cli import main

    _, run_dir = _multi(tmp_path / "results", "batch_size=4")
    capsys.readouterr()
    assert main(["verify", str(run_dir)]) == 0
    assert "reproduced: 10/10 identical, 0 different" in capsys.readouterr().out
    path = run_dir / "edits" / "demo000-session-t3.png"  # one level off in a few pixels, its key kept
    im = Image.open(path)
    arr = np.asarray(im.convert("RGB")).copy()
    arr[:2, :3, 0] = np.where(arr[:2, :3, 0] < 255, arr[:2, :3, 0] + 1, 254)
    from benchmark.stages.turn_keys import png_input_sha256, save_keyed_png

    save_keyed_png(Image.fromarray(arr), path, 1, png_input_sha256(path))
    assert main(["verify", str(run_dir)]) == 1
    out = capsys.readouterr().out
    assert "demo000-session-t3: different (max 1 level(s)" in out and "DIFFERENT: 9/10 identical, 1 different" in out
