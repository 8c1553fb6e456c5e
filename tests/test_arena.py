"""The arena (docs/arena.md): GenArena's battle protocol and Bradley-Terry ratings, compared with the `genarena`
package itself (a test dependency, pinned in pyproject's test extra), and `editmeter arena` on demo_mini against a
stand-in OpenAI-compatible judge on 127.0.0.1."""

import hashlib
import itertools
import json
import random
import types

import numpy as np
import pytest
from conftest import ROOT
from PIL import Image

from benchmark.metrics.arena import protocol as P
from benchmark.metrics.arena import ratings as R

ARENA_YAML = (ROOT / "configs" / "arena.yaml").read_text()
PINNED_SHA = next(line.split(":")[1].split()[0] for line in ARENA_YAML.splitlines() if line.startswith("prompts_sha256"))
PINNED_COMMIT = next(line.split(":")[1].split()[0] for line in ARENA_YAML.splitlines()
                     if line.startswith("prompts_commit"))

# replies as a judge may write them, malformed ones included
REPLIES = [
    '{"score": 6, "better_response": "A", "confidence": 0.7}',
    '{"score": 1, "better_response": "B", "confidence": 0.3}',
    '```json\n{"score": 5, "better_response": "A"}\n```',
    '```\n{"better_response": " b "}\n```',
    '{"better_response": "a"}',
    '{"better_response": "Response B"}',
    '{"better_response": "BOTH"}',            # contains a B (and no A): reads B
    '{"better_response": "tie"}',             # names neither: refused
    '{"better_response": "AB"}',              # contains an A: reads A
    '{"better_response": 1}',                 # not a string
    '{"score": 4}',                           # no better_response
    '{"better_response": "A", "score": "5"}',
    '{"better_response": "A", "score": "five"}',
    '{"better_response": "B", "score": null}',
    '{"better_response": "B", "confidence": "high"}',
    '{"better_response": "B", "confidence": [1]}',
    '{"better_response": "A", "score": 9.5, "confidence": -2}',
    '{"better_response": "B", "reasoning": {"x": "unterminated',   # repaired by json_repair
    '[{"better_response": "A"}]',             # a list, not an object
    'Response A is better.',                  # prose
    '',
    'null',
    '{"better_response": "A",, "score": 6,}',
]


def _genarena():
    pytest.importorskip("genarena", reason="the comparison needs the `genarena` package (pip install -e '.[test]')")
    from genarena import battle, bt_elo
    from genarena.prompts import mmrb2

    return battle, bt_elo, mmrb2


class _ScriptedVLM:
    def __init__(self, replies):
        self.replies = list(replies)

    def call(self, messages):
        r = self.replies.pop(0)
        if r is None:
            raise RuntimeError("scripted failure")
        return r


def _ours(reply):
    try:
        return P.parse_reply(reply)
    except P.ReplyError:
        return None


@pytest.mark.parametrize("reply", REPLIES)
def test_reply_parsing_matches_genarena(reply):
    battle, _, mmrb2 = _genarena()
    theirs = battle._call_vlm_judge(_ScriptedVLM([reply]), mmrb2, "make it red", [], b"a", b"b")
    assert _ours(reply) == (theirs.winner if theirs.parse_success else None)


def test_battle_verdicts_match_genarena_on_every_pair_of_scripted_replies():
    battle, _, mmrb2 = _genarena()
    sample = types.SimpleNamespace(instruction="make it red", input_images=[], index=0)
    pool = REPLIES[:8] + REPLIES[-4:] + [None]  # None: the call fails
    outcomes = set()
    for r1, r2 in itertools.product(pool, repeat=2):
        theirs = battle.execute_battle(_ScriptedVLM([r1, r2]), mmrb2, sample, b"a", b"b", "x", "y")
        ours = P.verdict(r1, r2)
        assert (ours.outcome, ours.consistent) == (theirs.final_winner, theirs.is_consistent), (r1, r2)
        assert ours.failed_calls == (not theirs.original_call.parse_success) + (not theirs.swapped_call.parse_success)
        outcomes.add((ours.outcome, ours.consistent))
    assert outcomes == {("model_a", True), ("model_b", True), ("tie", False)}


def test_sides_and_combination_match_genarena_with_ties_allowed():
    battle, _, _ = _genarena()
    values = ["A", "B", "a", "tie", "TIE", "x", None]
    for v, swapped in itertools.product(values, (False, True)):
        assert P.to_side(v, swapped) == battle._convert_position_winner_to_model(v, swapped)
    sides = ["model_a", "model_b", "tie", None]
    for s1, s2 in itertools.product(sides, repeat=2):
        assert P.combine(s1, s2) == battle._combine_votes(s1, s2, True)
    assert P.combine("tie", "tie") == ("tie", True)  # GenArena: two ties agree (consistent), unlike a split


def _battles(rng, models, n, p_tie=0.2, skew=None):
    out = []
    for _ in range(n):
        a, b = rng.sample(models, 2)
        u = rng.random()
        if u < p_tie:
            w = "tie"
        else:
            strength = (skew or {}).get(a, 0.5)
            w = "model_a" if rng.random() < strength else "model_b"
        out.append((a, b, w))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_bradley_terry_fit_matches_genarena(seed):
    _, bt_elo, _ = _genarena()
    rng = random.Random(seed)
    models = [f"m{i}" for i in range(rng.randint(2, 6))]
    skew = {m: rng.random() for m in models}
    battles = _battles(rng, models, rng.randint(5, 300), rng.choice([0.0, 0.2, 0.6]), skew)
    extra = models + ["unseen"]
    for kwargs in ({}, {"models": extra}):
        theirs = bt_elo.compute_bt_elo_ratings(battles, **kwargs)
        ours = R.fit(battles, **kwargs)
        assert ours.keys() == theirs.keys()
        for m in ours:
            assert ours[m] == pytest.approx(theirs[m], abs=1e-9)
    # anchored: earlier ratings held fixed, a new model fitted against them (and one not connected to any anchor)
    fixed = {m: 1000 + 100 * rng.uniform(-2, 2) for m in models[: max(1, len(models) - 1)]}
    newer = battles + [(models[0], "new", rng.choice(["model_a", "model_b", "tie"])) for _ in range(20)] + \
        [("island1", "island2", "model_a"), ("island2", "island1", "tie")]
    theirs = bt_elo.compute_bt_elo_ratings(newer, fixed_ratings=fixed)
    ours = R.fit(newer, fixed=fixed)
    assert ours.keys() == theirs.keys()
    for m in ours:
        assert ours[m] == pytest.approx(theirs[m], abs=1e-9)
        if m in fixed:
            assert ours[m] == fixed[m]


def test_fit_keeps_genarenas_quirk_for_a_model_that_lost_everything():
    _, bt_elo, _ = _genarena()
    battles = [("a", "b", "model_a"), ("b", "c", "model_a"), ("a", "c", "model_a")] * 3
    ours, theirs = R.fit(battles), bt_elo.compute_bt_elo_ratings(battles)
    assert ours["c"] == theirs["c"] == 1000.0  # no points: p = 0, rated 1000 (not minus infinity)
    assert ours["a"] > ours["b"]


@pytest.mark.parametrize("anchored", [False, True])
def test_bootstrap_matches_genarena_on_the_same_draws(monkeypatch, anchored):
    _, bt_elo, _ = _genarena()
    rng = random.Random(7)
    models = ["p", "q", "r", "s"]
    battles = _battles(rng, models, 240, 0.25, {"p": 0.8, "q": 0.6, "r": 0.4, "s": 0.3})
    fixed = {"p": 1100.0, "q": 1020.0} if anchored else None
    unique, counts = R.outcome_counts(battles)
    draws = R.draw_counts(counts, 100, seed=3)
    queue = [list(d) for d in draws]
    monkeypatch.setattr(bt_elo, "_multinomial_sample", lambda n, weights: queue.pop(0))
    theirs = bt_elo.compute_bootstrap_bt_elo(battles, num_bootstrap=100, fixed_ratings=fixed)
    assert not queue
    ours = R.bootstrap_from_counts(unique, counts, draws, fixed=fixed)
    assert (ours.n_battles, ours.n_resamples) == (theirs.num_battles, theirs.num_bootstrap)
    for mine, their in ((ours.rating, theirs.ratings), (ours.low, theirs.ci_lower), (ours.high, theirs.ci_upper),
                        (ours.std, theirs.std)):
        assert mine.keys() == their.keys()
        for m in mine:
            assert mine[m] == pytest.approx(their[m], abs=1e-9)
    assert ours == R.bootstrap(battles, n_resamples=100, seed=3, fixed=fixed)  # the same seeded draws
    assert ours != R.bootstrap(battles, n_resamples=100, seed=4, fixed=fixed)


def test_bootstrap_draws_are_multinomial_of_the_battle_counts():
    draws = R.draw_counts([5, 0, 15], 200, seed=1)
    assert all(sum(d) == 20 and d[1] == 0 for d in draws)
    assert abs(np.mean([d[2] for d in draws]) - 15) < 0.5


# -- the pinned prompt module ----------------------------------------------------------------------------------------
FIXTURE_PROMPT = '''"""a stand-in prompt module of the pinned module's shape (not GenArena's text)"""
ALLOW_TIE = False
PROMPT_TEXT = """Compare two edits. Answer JSON with better_response A or B."""


def build_prompt(instruction, input_images, output_image_a, output_image_b):
    content = [{"type": "text", "text": PROMPT_TEXT}, {"type": "text", "text": "[TASK:]"},
               {"type": "text", "text": instruction}]
    if input_images:
        content.append({"type": "text", "text": "[SOURCE:]"})
    content += [{"type": "text", "text": "[FIRST:]"}, {"type": "text", "text": "[SECOND:]"}]
    return [{"role": "user", "content": content}]


def parse_response(response):
    raise NotImplementedError
'''


def write_fixture_prompt(folder):
    path = folder / "prompt.txt"
    path.write_text(FIXTURE_PROMPT)
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


def test_fixture_prompt_is_read_as_data_and_an_altered_file_refused(tmp_path):
    path, sha = write_fixture_prompt(tmp_path)
    prompt = P.read_prompt(path, sha, PINNED_COMMIT)
    assert prompt.labels == ("[TASK:]", "[SOURCE:]", "[FIRST:]", "[SECOND:]") and prompt.allow_tie is False
    assert prompt.request("edit", 1) == (prompt.text, "[TASK:]", "edit", "[SOURCE:]", 0, "[FIRST:]", 1, "[SECOND:]", 2)
    path.write_text(FIXTURE_PROMPT.replace("A or B", "A/B"))
    with pytest.raises(P.ProtocolError, match="sha256"):
        P.read_prompt(path, sha, PINNED_COMMIT)
    with pytest.raises(P.ProtocolError, match="40-hex"):
        P.read_prompt(path, sha, "main")


def test_pinned_module_is_the_installed_genarena_release_and_laid_out_as_its_build_prompt():
    _, _, mmrb2 = _genarena()
    prompt = P.read_prompt(mmrb2.__file__, PINNED_SHA, PINNED_COMMIT)  # the release's file has the pinned sha256
    assert prompt.text == mmrb2.PROMPT_TEXT and prompt.allow_tie == mmrb2.ALLOW_TIE
    content = mmrb2.build_prompt("make it red", [b"src"], b"aa", b"bb")[0]["content"]
    images = {mmrb2._create_image_content(b)["image_url"]["url"]: i for i, b in enumerate([b"src", b"aa", b"bb"])}
    theirs = tuple(c["text"] if c["type"] == "text" else images[c["image_url"]["url"]] for c in content)
    assert prompt.request("make it red", 1) == theirs


# -- the call log ----------------------------------------------------------------------------------------------------
def test_call_log_skips_torn_and_altered_lines(tmp_path):
    from benchmark.stages.arena import CallLog

    log = CallLog(tmp_path)
    rec = {"key": "k1", "query_id": "q", "first": "x", "second": "y", "reply": '{"better_response": "A"}',
           "failure": "", "error": "", "judge": "j", "answered_by": "", "cache_key": ""}
    log.add([rec, rec | {"key": "k2"}, rec | {"key": "k3"}])
    lines = (tmp_path / "calls.jsonl").read_text().splitlines()
    lines[1] = lines[1].replace('\\"A\\"', '\\"B\\"')  # altered by hand: its digest no longer matches
    (tmp_path / "calls.jsonl").write_text("\n".join(lines) + "\n" + lines[2][:40])  # and a torn last line
    again = CallLog(tmp_path)
    assert set(again.calls) == {"k1", "k3"} and again.skipped == 2


# -- editmeter arena end to end ----------------------------------------------------------------------------------------
EDITORS = {  # name -> how its edit is made from the source (uint8 array)
    "copy": lambda a, r: a,
    "dim": lambda a, r: (a * 0.92).astype(np.uint8),
    "noisy": lambda a, r: np.clip(a + r.normal(0, 40, a.shape), 0, 255).astype(np.uint8),
    "flip": lambda a, r: a[:, ::-1],
}


@pytest.fixture(scope="module")
def demo_mini():
    from benchmark.commands.run import compose
    from benchmark.plan.config import read_plan
    from benchmark.plan.preflight import load_queries

    return load_queries(read_plan(compose(["queryset=demo_mini"])[0]))


def make_run(results, qs, editor, *, fail=(), qhash="h" * 64):
    run = results / "runs" / f"demo_mini-{qhash[:10]}" / f"{editor}-{hashlib.sha256(editor.encode()).hexdigest()[:12]}"
    (run / "edits").mkdir(parents=True)
    meta = {"queryset": "demo_mini", "queryset_hash": qhash, "queryset_size": len(qs), "editor": editor,
            "editor_sig": run.name[-12:], "prompt_kind": "instruction", "profile": "tiny", "seed": 0,
            "metric_sig": "m", "metrics": {}, "git_sha": "x", "versions": {}, "device": "cpu"}
    (run / "run.json").write_text(json.dumps(meta))
    rng = np.random.default_rng(0)
    records = []
    for q in qs:
        if q.id in fail:
            records.append({"query_id": q.id, "status": "failed", "reason": "scripted"})
            continue
        a = np.asarray(Image.open(qs.path(q.image)).convert("RGB"))
        Image.fromarray(EDITORS[editor](a.astype(float) if editor != "flip" and editor != "copy" else a, rng)).save(
            run / "edits" / f"{q.id}.png")
        records.append({"query_id": q.id, "status": "ok", "reason": ""})
    (run / "edits.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return run


def closest_to_source(noise=0.0):
    """A stand-in judge preferring the edit closer to the source in pixels (position-blind); with `noise`, it
    answers the other one in that share of calls (seeded by the request's pixels)."""

    def reply(images, text, system, max_tokens):
        src, a, b = (np.asarray(im.convert("RGB"), dtype=float) for im in images)
        da, db = np.abs(a - src).mean(), np.abs(b - src).mean()
        better = "A" if da <= db else "B"
        if noise and random.Random(hashlib.sha256(a.tobytes() + b.tobytes()).hexdigest()).random() < noise:
            better = "B" if better == "A" else "A"
        return json.dumps({"reasoning": {}, "score": 5, "better_response": better, "confidence": 0.5})

    return reply


def arena(results, server, prompt, sha, *extra):
    from benchmark.commands.arena import main

    return main(["queryset=demo_mini", f"paths.results={results}", f"arena.prompts_file={prompt}",
                 f"arena.prompts_sha256={sha}", f"arena.judges.endpoint.base_url={server.url}",
                 "arena.judges.endpoint.model=judge", "arena.judges.endpoint.backoff_s=0", *extra])


@pytest.fixture
def server():
    from helpers.openai_server import OpenAIServer

    servers = []

    def start(reply, **kw):
        import threading

        srv = OpenAIServer(reply, **kw)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def test_arena_on_demo_judges_only_new_pairs_and_a_rerun_asks_nothing(tmp_path, demo_mini, server, capsys):
    results = tmp_path / "results"
    for name in ("copy", "dim", "noisy"):
        make_run(results, demo_mini, name, fail={"demo000-obj_add"} if name == "noisy" else ())
    prompt, sha = write_fixture_prompt(tmp_path)
    srv = server(closest_to_source())
    full = "arena.sampling.mode=full"
    assert arena(results, srv, prompt, sha, full, "--dry-run") == 0
    assert "80 judge calls to make" in capsys.readouterr().out  # 14 + 13 + 13 shared queries, 2 calls each
    assert srv.calls == 0
    assert arena(results, srv, prompt, sha, full) == 0
    out = capsys.readouterr().out
    assert srv.calls == 80
    # each call is one user turn laid out as build_prompt lays it: text, label, instruction, label, source, A, B
    body = srv.payloads[0]
    assert [m["role"] for m in body["messages"]] == ["user"] and body["max_tokens"] == 4096
    content = body["messages"][0]["content"]
    assert [c["type"] for c in content] == ["text"] * 4 + ["image_url", "text", "image_url", "text", "image_url"]
    assert [c["text"] for c in content if c["type"] == "text"][:2] == ["Compare two edits. Answer JSON with "
                                                                        "better_response A or B.", "[TASK:]"]
    assert [c["text"] for c in content if c["type"] == "text"][3:] == ["[SOURCE:]", "[FIRST:]", "[SECOND:]"]
    data = json.loads((results / "arena" / "demo_mini" / "ratings.json").read_text())
    editors = {e["editor"]: e for e in data["editors"]}
    assert [editors[m]["wins"] for m in ("copy", "dim", "noisy")] == [27, 13, 0]  # closer to the source wins
    # GenArena's quirk, kept: an editor with no point (it lost every battle) is rated 1000, above `dim`
    assert editors["noisy"]["rating"] == 1000.0 and editors["noisy"]["no_points"]
    assert editors["dim"]["rating"] < 1000.0 < editors["copy"]["rating"]
    assert not editors["dim"]["no_points"]
    pairs = {(p["a"], p["b"]): p for p in data["pairs"]}
    assert pairs[("copy", "noisy")]["battles"] == 13 and pairs[("copy", "noisy")]["missing_or_failed"] == 1
    assert all(p["consistency"] == 1.0 for p in data["pairs"])
    assert data["win_rate"]["copy"]["dim"] == 1.0 and data["win_rate"]["dim"]["copy"] == 0.0
    assert "win rate of the row over the column" in out and "95% CI" in out and "noisy won no point" in out
    # a rerun asks nothing and rates the same
    assert arena(results, srv, prompt, sha, full) == 0
    assert srv.calls == 80
    assert json.loads((results / "arena" / "demo_mini" / "ratings.json").read_text())["editors"] == data["editors"]
    # a fourth editor: only its three pairs are judged (14 shared queries each, but 13 with noisy)
    make_run(results, demo_mini, "flip")
    assert arena(results, srv, prompt, sha, full) == 0
    assert srv.calls == 80 + 2 * (14 + 14 + 13)
    four = json.loads((results / "arena" / "demo_mini" / "ratings.json").read_text())
    assert four["calls_asked"] == 82 and four["calls_predicted"] == 82 and four["calls_reused"] == 80
    assert {e["editor"] for e in four["editors"]} == {"copy", "dim", "noisy", "flip"}


def test_failed_calls_are_ties_counted_apart_or_dropped(tmp_path, demo_mini, server):
    from helpers.openai_server import Status

    results = tmp_path / "results"
    for name in ("copy", "dim"):
        make_run(results, demo_mini, name)
    prompt, sha = write_fixture_prompt(tmp_path)
    judge = closest_to_source()
    asked = []

    def flaky(images, text, system, max_tokens):
        asked.append(1)
        return Status(400, "content_policy") if len(asked) % 4 == 0 else (
            "not json" if len(asked) % 7 == 0 else judge(images, text, system, max_tokens))

    srv = server(flaky)
    assert arena(results, srv, prompt, sha, "arena.sampling.mode=full", "arena.judges.endpoint.concurrency=1") == 0
    data = json.loads((results / "arena" / "demo_mini" / "ratings.json").read_text())
    pair = data["pairs"][0]
    failed = pair["with_failed_call"]
    assert failed > 0 and pair["ties"] == failed and pair["battles"] == 14  # GenArena: a failed call is a tie
    assert sum(e["failed_calls"] for e in data["editors"]) > 0
    assert arena(results, srv, prompt, sha, "arena.sampling.mode=full", "arena.drop_failed=true") == 0
    dropped = json.loads((results / "arena" / "demo_mini" / "ratings.json").read_text())
    assert dropped["dropped_battles_with_failed_call"] == failed
    assert dropped["editors"][0]["wins"] + dropped["editors"][0]["ties"] + dropped["editors"][0]["losses"] == 14


def test_shards_merge_into_the_single_run(tmp_path, demo_mini, server):
    prompt, sha = write_fixture_prompt(tmp_path)
    srv = server(closest_to_source(noise=0.3))
    outs = []
    for layout in ("single", "sharded"):
        results = tmp_path / layout
        for name in ("copy", "dim", "noisy"):
            make_run(results, demo_mini, name)
        if layout == "sharded":
            for i in range(3):
                assert arena(results, srv, prompt, sha, "arena.sampling.mode=full", "--shard",
                             f"{i}/3") == 0
            before = srv.calls
        assert arena(results, srv, prompt, sha, "arena.sampling.mode=full") == 0
        if layout == "sharded":
            assert srv.calls == before  # the unsharded command only rates
        data = json.loads((results / "arena" / "demo_mini" / "ratings.json").read_text())
        outs.append({k: data[k] for k in ("editors", "pairs", "win_rate")})
    assert outs[0] == outs[1]


def test_adaptive_sampling_stops_on_a_judge_with_strong_preferences(tmp_path, demo_mini, server):
    results = tmp_path / "results"
    for name in ("copy", "dim", "noisy"):
        make_run(results, demo_mini, name)
    prompt, sha = write_fixture_prompt(tmp_path)
    srv = server(closest_to_source(noise=0.15))
    settings = ["arena.sampling.min_battles=4", "arena.sampling.batch=2", "arena.sampling.max_battles=14"]
    path = results / "arena" / "demo_mini" / "ratings.json"
    # a target the first round meets: it stops there, at min_battles per pair, 2 calls per battle
    assert arena(results, srv, prompt, sha, *settings, "arena.sampling.target_ci=100000") == 0
    data = json.loads(path.read_text())
    assert "<= target_ci" in data["stopped"] and data["rounds"] == 1 and srv.calls == 3 * 4 * 2
    first_widest = max(e["ci_high"] - e["ci_low"] for e in data["editors"])
    # a target just under the first round's widest interval: more rounds, then a stop on the target or at the cap
    assert arena(results, srv, prompt, sha, *settings, f"arena.sampling.target_ci={first_widest - 1e-6}") == 0
    data = json.loads(path.read_text())
    assert data["rounds"] > 1 and data["calls_reused"] == 24 and all(p["battles"] > 4 for p in data["pairs"])
    widest = max(e["ci_high"] - e["ci_low"] for e in data["editors"])
    assert widest <= first_widest - 1e-6 or all(p["battles"] == 14 for p in data["pairs"])
    # a target it cannot reach: every pair runs to max_battles
    assert arena(results, srv, prompt, sha, *settings, "arena.sampling.target_ci=0.001") == 0
    data = json.loads(path.read_text())
    assert "max_battles" in data["stopped"] and all(p["battles"] == 14 for p in data["pairs"])
    assert srv.calls == 3 * 14 * 2  # every call asked once over the three runs


def test_runs_of_different_query_set_contents_are_refused(tmp_path, demo_mini, server, capsys):
    results = tmp_path / "results"
    make_run(results, demo_mini, "copy")
    make_run(results, demo_mini, "dim", qhash="g" * 64)
    prompt, sha = write_fixture_prompt(tmp_path)
    srv = server(closest_to_source())
    assert arena(results, srv, prompt, sha) == 2
    assert "different contents of query set demo_mini" in capsys.readouterr().err
    assert srv.calls == 0


def test_anchored_fit_holds_earlier_ratings(tmp_path, demo_mini, server):
    results = tmp_path / "results"
    for name in ("copy", "dim", "noisy"):
        make_run(results, demo_mini, name)
    prompt, sha = write_fixture_prompt(tmp_path)
    srv = server(closest_to_source(noise=0.3))
    assert arena(results, srv, prompt, sha, "arena.sampling.mode=full") == 0
    first = results / "arena" / "demo_mini" / "ratings.json"
    earlier = tmp_path / "earlier.json"
    earlier.write_text(first.read_text())
    old = {e["editor"]: e["rating"] for e in json.loads(first.read_text())["editors"]}
    make_run(results, demo_mini, "flip")
    calls = srv.calls
    assert arena(results, srv, prompt, sha, "arena.sampling.mode=full", f"arena.anchor={earlier}") == 0
    data = json.loads(first.read_text())
    new = {e["editor"]: e for e in data["editors"]}
    assert all(new[m]["rating"] == old[m] and new[m]["anchored"] for m in old)
    assert not new["flip"]["anchored"]
    assert srv.calls - calls == 2 * 3 * 14  # only flip's pairs


def test_kill_9_loses_no_battle(tmp_path, demo_mini, server):
    """`editmeter arena` killed with SIGKILL while it judges: every call it logged is whole and never asked again,
    and the rerun's ratings are the uninterrupted run's."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from conftest import child_pythonpath

    prompt, sha = write_fixture_prompt(tmp_path)
    judge = closest_to_source(noise=0.3)
    srv = server(lambda *a: (time.sleep(0.02), judge(*a))[1])
    settings = ["queryset=demo_mini", f"arena.prompts_file={prompt}", f"arena.prompts_sha256={sha}",
                f"arena.judges.endpoint.base_url={srv.url}", "arena.judges.endpoint.model=judge",
                "arena.judges.endpoint.concurrency=1", "arena.chunk=4", "arena.sampling.mode=full"]
    killed, whole = tmp_path / "killed", tmp_path / "whole"
    for results in (killed, whole):
        for name in ("copy", "dim", "noisy"):
            make_run(results, demo_mini, name)
    log = killed / "arena" / "demo_mini" / "calls.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "benchmark.commands.cli", "arena", f"paths.results={killed}", *settings],
                            cwd=ROOT, env=os.environ | {"PYTHONPATH": child_pythonpath(ROOT)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline and (not log.is_file() or len(log.read_text().splitlines()) < 12):
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    from benchmark.stages.arena import CallLog

    logged = len(CallLog(log.parent).calls)
    asked_before = srv.calls
    assert 12 <= logged < 84 and asked_before < 84
    from benchmark.commands.arena import main

    assert main([f"paths.results={killed}", *settings]) == 0
    assert srv.calls - asked_before == 84 - logged  # nothing logged is asked again
    assert main([f"paths.results={whole}", *settings]) == 0
    a, b = (json.loads((r / "arena" / "demo_mini" / "ratings.json").read_text()) for r in (killed, whole))
    assert a["editors"] == b["editors"] and a["pairs"] == b["pairs"]


def test_manifest_fetches_the_pinned_prompt_where_the_config_reads_it():
    from benchmark.io.download import load_manifest

    (f,) = load_manifest("genarena").files
    assert f.sha256 == PINNED_SHA and f"/{PINNED_COMMIT}/{P.REPO_PATH}" in f.url and P.REPO in f.url
    assert f"${{paths.datasets}}/genarena/downloads/{f.name}" in ARENA_YAML


def test_drift_between_two_judges_arenas(tmp_path, demo_mini, server, capsys):
    from benchmark.commands.arena import main

    results = tmp_path / "results"
    for name in ("copy", "dim", "noisy"):
        make_run(results, demo_mini, name)
    prompt, sha = write_fixture_prompt(tmp_path)
    saved = []
    near = closest_to_source(noise=0.1)  # no editor without a point (GenArena would rate it 1000)
    far = lambda *a: json.dumps({"better_response": "B" if '"A"' in near(*a) else "A"})  # noqa: E731
    for model, reply in (("judge", near), ("judge2", far)):  # a second judge preferring the edit farther away
        srv = server(reply, served=model)
        assert arena(results, srv, prompt, sha, "arena.sampling.mode=full", f"arena.judges.endpoint.model={model}") == 0
        assert srv.calls == 84
        saved.append(tmp_path / f"r{len(saved)}.json")
        saved[-1].write_text((results / "arena" / "demo_mini" / "ratings.json").read_text())
    capsys.readouterr()
    assert main(["--drift", str(saved[0]), str(saved[0]), "--json"]) == 0
    same = json.loads(capsys.readouterr().out)
    assert same["kendall_tau"] == pytest.approx(1.0) and same["rank_flips"] == []
    assert all(r["shift"] == 0 for r in same["editors"])
    assert main(["--drift", str(saved[0]), str(saved[1]), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["kendall_tau"] == pytest.approx(-1.0)  # the reversed judge reverses the order
    assert [tuple(f) for f in d["rank_flips"]] == [("copy", "dim"), ("copy", "noisy"), ("dim", "noisy")]
    from benchmark.metrics.arena.tables import ratings_text

    other = json.loads(saved[1].read_text()) | {"queryset": "demo"}
    saved[1].write_text(json.dumps(other))  # altered by hand: refused by its digest
    assert main(["--drift", str(saved[0]), str(saved[1])]) == 2
    assert "does not match its content digest" in capsys.readouterr().err
    saved[1].write_text(ratings_text(other))
    assert main(["--drift", str(saved[0]), str(saved[1])]) == 2
    assert "different query sets" in capsys.readouterr().err


def test_show_prints_the_arena_ratings(tmp_path, demo_mini, server, capsys):
    from benchmark.tables.leaderboard import main as show

    results = tmp_path / "results"
    for name in ("copy", "dim"):
        make_run(results, demo_mini, name)
    prompt, sha = write_fixture_prompt(tmp_path)
    assert show(["show", "--arena", "--results", str(results)]) == 0
    assert "no arena under" in capsys.readouterr().out
    assert arena(results, server(closest_to_source(noise=0.2)), prompt, sha, "arena.sampling.mode=full") == 0
    table = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("copy "))
    assert show(["show", "--arena", "--results", str(results), "--queryset", "demo_mini"]) == 0
    out = capsys.readouterr().out
    assert "== arena demo_mini: GenArena's pairwise protocol" in out and table in out and "95% CI" in out
    assert show(["show", "--arena", "--results", str(results), "--queryset", "demo"]) == 0
    assert "no arena under" in capsys.readouterr().out


def test_metaeval_judges_measures_the_arena_judge_on_genai_votes_beside_the_pointwise_ones(tmp_path, server, capsys):
    """GenAI-Bench's fixture (left wins, right wins, tie, both bad) judged by a stand-in judge ranking
    red > green > gray > blue (position-blind; two identical edits: it answers A both times, an inconsistent tie):
    left wins (right), left wins (wrong: people chose right), green over gray (wrong: people tied), a tie (right):
    2/4 with the judge's ties, 2/4 calling everything a tie: pairwise accuracy with ties 0.5."""
    import pandas as pd
    from test_metaeval_judges import _cli, _table, genai_fixture

    rank = {(200, 30, 30): 4, (30, 200, 30): 3, (90, 90, 90): 2, (30, 30, 200): 1}

    def reply(images, text, system, max_tokens):
        a, b = (rank[im.convert("RGB").getpixel((0, 0))] for im in images[1:])
        return json.dumps({"better_response": "A" if a >= b else "B"})

    srv = server(reply)
    prompt, sha = write_fixture_prompt(tmp_path)
    args = ("--judges", "arena", "--sets", f"genai={genai_fixture(tmp_path)}", "profile=tiny",
            f"paths.results={tmp_path / 'results'}", f"arena.prompts_file={prompt}", f"arena.prompts_sha256={sha}",
            f"arena.judges.endpoint.base_url={srv.url}", "arena.judges.endpoint.model=judge", "--resamples", "0")
    assert _cli(*args) == 0
    assert srv.calls == 7  # 4 pairs, 2 calls each; the two calls of two identical edits are one call
    table, meta = _table(tmp_path)
    row = table[(table.judge == "arena") & (table.subtask == "all")].iloc[0]
    assert row.value == pytest.approx(0.5) and row.n_pairs == 4
    assert meta["metric_sigs"]["arena"].startswith(f"arena@{sha[:12]}")
    assert "7 judge call(s) made, 1 reused" in capsys.readouterr().out
    assert _cli(*args) == 0 and srv.calls == 7  # a rerun asks nothing
    again, _ = _table(tmp_path)
    pd.testing.assert_series_equal(again.value, table.value)


def test_interleaved_prompt_names_each_image_once_in_order():
    from benchmark.models.judge_reply import interleaved

    image = lambda i: {"type": "image", "i": i}  # noqa: E731
    assert interleaved(("t", 0, "u", 1), 2, image) == [{"type": "text", "text": "t"}, image(0),
                                                      {"type": "text", "text": "u"}, image(1)]
    for bad in (("t", 1, 0), ("t", 0), ("t", 0, 0, 1), ("t", True, 1)):
        with pytest.raises(ValueError, match="each of its 2 images once, in order"):
            interleaved(bad, 2, image)


def two_runs_and_a_judge(tmp_path, demo_mini, server):
    """Runs of the copy and dim editors on demo_mini, the fixture prompt and a judge preferring the closer edit:
    (results folder, judge server, prompt path, its sha256)."""
    results = tmp_path / "results"
    for name in ("copy", "dim"):
        make_run(results, demo_mini, name)
    prompt, sha = write_fixture_prompt(tmp_path)
    return results, server(closest_to_source()), prompt, sha


def test_a_mistyped_arena_setting_stops_with_a_suggestion(tmp_path, demo_mini, server, capsys):
    results, srv, prompt, sha = two_runs_and_a_judge(tmp_path, demo_mini, server)
    assert arena(results, srv, prompt, sha, "arena.sampling.min_batles=5") == 2
    assert "arena.sampling.min_batles (did you mean arena.sampling.min_battles?)" in capsys.readouterr().err
    assert arena(results, srv, prompt, sha, "arena.sampling.batch=0") == 2
    assert "arena.sampling.batch must be a positive integer" in capsys.readouterr().err
    assert srv.calls == 0


def test_an_altered_ratings_file_is_refused_by_its_readers_and_a_rerun_rewrites_it(tmp_path, demo_mini, server, capsys):
    from benchmark.commands.arena import main
    from benchmark.commands.report.arena import read_arenas
    from benchmark.metrics.arena.tables import arena_tables

    results, srv, prompt, sha = two_runs_and_a_judge(tmp_path, demo_mini, server)
    assert arena(results, srv, prompt, sha, "arena.sampling.mode=full") == 0
    path = results / "arena" / "demo_mini" / "ratings.json"
    good = path.read_text()
    assert read_arenas(results)[1] == [] and "== arena demo_mini" in arena_tables(results)
    data = json.loads(good)
    data["editors"][0]["rating"] += 100  # a rating changed by hand
    path.write_text(json.dumps(data))
    shown, notes = read_arenas(results)
    assert shown == [] and len(notes) == 1 and "does not match its content digest" in notes[0]
    assert "does not match its content digest" in arena_tables(results) and "== arena" not in arena_tables(results)
    capsys.readouterr()
    assert main(["--drift", str(path), str(path)]) == 2
    assert "ratings.json: does not match its content digest" in capsys.readouterr().err
    calls = srv.calls
    assert arena(results, srv, prompt, sha, "arena.sampling.mode=full", f"arena.anchor={path}") == 2
    assert arena(results, srv, prompt, sha, "arena.sampling.mode=full") == 0  # the rerun rewrites it
    again, before = json.loads(path.read_text()), json.loads(good)
    assert srv.calls == calls and again["editors"] == before["editors"] and again["pairs"] == before["pairs"]
    assert read_arenas(results)[1] == []


def test_adaptive_sampling_stops_on_the_target_between_the_first_round_and_the_cap(tmp_path, demo_mini, server):
    """Run to the cap once to learn each round's widest interval; then a target that a middle round meets: a fresh
    arena stops at that round, with fewer battles than the cap and only those battles' calls asked."""
    settings = ["arena.sampling.min_battles=4", "arena.sampling.batch=2", "arena.sampling.max_battles=14"]
    prompt, sha = write_fixture_prompt(tmp_path)
    full, fresh = tmp_path / "full", tmp_path / "fresh"
    for results in (full, fresh):
        for name in ("copy", "dim", "noisy"):
            make_run(results, demo_mini, name)
    assert arena(full, server(closest_to_source(noise=0.25)), prompt, sha, *settings,
                 "arena.sampling.target_ci=0.001") == 0
    widest = json.loads((full / "arena" / "demo_mini" / "ratings.json").read_text())["widest_ci_by_round"]
    assert len(widest) == 6  # 4, 6, ..., 14 battles per pair
    # a round after the first whose interval is narrower than every earlier round's, and before the last
    # (noise 0.25: every editor wins some battles, so the intervals narrow as battles grow)
    middle = [i for i in range(1, len(widest) - 1) if widest[i] < min(widest[:i])]
    assert middle, widest
    j = middle[0]
    srv = server(closest_to_source(noise=0.25))
    assert arena(fresh, srv, prompt, sha, *settings, f"arena.sampling.target_ci={widest[j]!r}") == 0
    data = json.loads((fresh / "arena" / "demo_mini" / "ratings.json").read_text())
    assert data["rounds"] == j + 1 and "<= target_ci" in data["stopped"]
    assert data["widest_ci_by_round"] == widest[:j + 1]
    assert all(p["battles"] == 4 + 2 * j < 14 for p in data["pairs"])
    assert srv.calls == 3 * (4 + 2 * j) * 2


def _arena_with(results, prompt, sha, *extra):
    """`editmeter arena` with only the arena's own judge settings given (no endpoint defaults filled in)."""
    from benchmark.commands.arena import main

    return main(["queryset=demo_mini", f"paths.results={results}", f"arena.prompts_file={prompt}",
                 f"arena.prompts_sha256={sha}", "arena.sampling.mode=full", "arena.sampling.min_battles=2", "arena.sampling.max_battles=2",
                 *extra])


def test_the_openai_backbone_sends_the_key_named_by_api_key_env_and_refuses_without_it(tmp_path, demo_mini, server,
                                                                                       monkeypatch, capsys):
    results = tmp_path / "results"
    for name in ("copy", "dim"):
        make_run(results, demo_mini, name)
    prompt, sha = write_fixture_prompt(tmp_path)
    srv = server(closest_to_source(), served="gpt-4.1")
    judge = ["arena.judge=openai", f"arena.judges.openai.base_url={srv.url}", "arena.judges.openai.backoff_s=0"]
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert _arena_with(results, prompt, sha, *judge) == 2
    err = capsys.readouterr().err
    assert "OPENAI_API_KEY" in err and "Traceback" not in err and srv.calls == 0
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key")
    assert _arena_with(results, prompt, sha, *judge) == 0
    data = json.loads((results / "arena" / "demo_mini" / "ratings.json").read_text())
    assert srv.calls == 2 * 2 and set(a for a in srv.auth if a is not None) == {"Bearer sk-test-key"}
    assert data["judge"].startswith("gpt-4.1") or "gpt-4.1" in data["judge_identity"]
    assert {e["editor"]: e["wins"] for e in data["editors"]} == {"copy": 2, "dim": 0}


def test_the_local_backbone_runs_in_process_and_its_unparsable_replies_are_failed_calls_not_ties(tmp_path, demo_mini):
    """arena.judge=local on the tiny profile: a random-weight Qwen2.5-VL answers noise, which GenArena's parser
    cannot read; every battle is a tie by default, and each call is counted as failed, apart from real ties."""
    results = tmp_path / "results"
    for name in ("copy", "dim"):
        make_run(results, demo_mini, name)
    prompt, sha = write_fixture_prompt(tmp_path)
    assert _arena_with(results, prompt, sha, "arena.judge=local", "profile=tiny",
                       "arena.judges.local.max_new_tokens=8") == 0
    data = json.loads((results / "arena" / "demo_mini" / "ratings.json").read_text())
    assert data["battles"] == 2 and data["calls_asked"] == 4
    # each editor's two battles, two failed calls each: ties by GenArena's rule, and counted apart as failed
    assert all(e["failed_calls"] == 4 and e["ties"] == 2 and e["wins"] == e["losses"] == 0 for e in data["editors"])
    assert [p["with_failed_call"] for p in data["pairs"]] == [2]
    assert data["judge"] == "Qwen/Qwen2.5-VL-7B-Instruct-tiny"
    calls = [json.loads(line) for line in (results / "arena" / "demo_mini" / "calls.jsonl").read_text().splitlines()]
    assert len(calls) == 4 and all(c["judge"] == data["judge"] for c in calls)
