"""Judge failures are data, never scores, and every judged row says who answered it (docs/judge.md, "Failures and
provenance"): against the local OpenAI-compatible server (tests/helpers/openai_server.py) scripting a 503 until the
retries run out, an HTTP 400 content-policy refusal, a content filter (null content), and an unparseable reply,
metrics=gedit writes failure rows that keep the reply and name the kind; `editmeter show` counts them by kind; a
rerun of the same command asks the judge again for exactly the failed requests; the rows carry the provenance
columns; old reply-cache entries are still read; the images sent decode to the very pixels prepared, each encoded
once."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from local_servers import serving
from openai_server import Answer, OpenAIServer, Status
from test_gedit_protocol import PQ_REPLIES, SC_REPLIES, _run, built  # noqa: F401 (the GEdit-Bench fixture)

import benchmark.models.judge_endpoint as je
from benchmark.models.judge_endpoint import EndpointError, EndpointJudge
from benchmark.models.judge_reply import JudgeReply, reply_columns

ROOT = Path(__file__).resolve().parents[1]
MARKER = "Editing instruction: "
GOOD = '{"score": [8, 6], "reasoning": "ok"}'


def _image(colour, size=(60, 44)):
    from PIL import Image

    return Image.new("RGB", size, colour)


class Script:
    """The server's replies: SC by the instruction quoted in the prompt, PQ by the edit's colour (the English rows
    of the GEdit fixture); `failing` maps a key to a scripted failure, dropped by `heal()`."""

    def __init__(self, failing):
        self.failing = dict(failing)
        self.calls: list[str] = []  # the key of every try that reached the server

    def key(self, images, text):
        if len(images) == 2:
            return "SC:" + text.split(MARKER, 1)[1].split("\n", 1)[0]
        colour = max(images[0].convert("RGB").getcolors(1 << 16))[1]
        return "PQ:" + ",".join(map(str, colour))

    def __call__(self, images, text, system, max_tokens):
        key = self.key(images, text)
        self.calls.append(key)
        if key in self.failing:
            return self.failing[key]
        return SC_REPLIES[key[3:]] if key.startswith("SC:") else PQ_REPLIES[key[3:]]

    def heal(self):
        self.failing.clear()


FAILING = {
    "SC:Change the sign's text to 'hello'": Status(503),                      # k1: 503 on every try
    "PQ:30,200,30": Answer(None, "content_filter"),                           # k2: content filter, no content
    "SC:Add a cat on the sofa": Status(400, "content_policy_violation"),      # k3: a 4xx refusal
    "SC:Make it look like autumn": "I cannot judge this.",                     # t1: does not parse
}
# SC_REPLIES scripts k3's SC as unparseable too; here every other reply parses
SC_REPLIES = SC_REPLIES | {"Add a cat on the sofa": '{"score": [5, 5]}'}
KINDS = {"k1": "call_failed", "k2": "refused", "k3": "refused", "t1": "unparseable"}


def _rows(results: Path, root: Path) -> pd.DataFrame:
    """The run's score rows indexed by the fixture's key (k1, k2, k3, t1, k5: its English rows)."""
    from test_gedit_builder import ROWS

    from benchmark.querysets.io import load_queryset
    from benchmark.stages.score import read_scores

    run_dir = next((results / "runs").glob("gedit-en-*/identity-*"))
    (sig,) = [p.name for p in (run_dir / "scores").iterdir()]
    rows = read_scores(run_dir, sig)
    key = {r[2]: r[0] for r in ROWS if r[3] == "en"}
    by_id = {q.id: key[q.instruction] for q in load_queryset(root).queries if q.instruction in key}
    return rows.set_index(rows["query_id"].map(by_id))


def test_failed_refused_and_unparseable_calls_are_failure_rows_counted_in_show_and_rescored_alone(
        built, tmp_path, monkeypatch, restore_logging):  # noqa: F811
    monkeypatch.setattr(je, "_sleep", lambda s: None)
    script = Script(FAILING)
    with serving(OpenAIServer(script, answered_by="judge-2025-04-14", fingerprint="fp_1a2b")) as srv:
        backbone = {"_target_": "benchmark.models.judge_endpoint.EndpointJudge", "base_url": srv.url,
                    "model": srv.served, "cache_dir": str(tmp_path / "results" / "judge_replies"), "max_retries": 2,
                    "backoff_s": 0.0, "concurrency": 3}
        summary = _run(built, tmp_path, "queryset.language=en", backbone=backbone)
        rows = _rows(tmp_path / "results", built)
        # five queries, two prompts each; k1's SC tried three times (two retries), the others once
        assert len(rows) == 5 and len(script.calls) == len(srv.asked) == 10 + 2
        assert summary["score"].failed == 4
        for key, kind in KINDS.items():
            row = rows.loc[key]
            assert row["status"] == "failed" and row["judge_failure"] == kind, key
            assert math.isnan(row["G_O"]) and math.isnan(row["G_SC"]) and math.isnan(row["G_PQ"])  # never a score
            assert f"({kind})" in row["reason"]
        assert "HTTP 503" in rows.loc["k1", "reason"] and "3 time(s)" in rows.loc["k1", "reason"]
        assert rows.loc["k1", "sc_reply"] == "" and rows.loc["k1", "pq_reply"] == PQ_REPLIES["200,30,30"]
        assert "finish_reason='content_filter'" in rows.loc["k2", "reason"] and rows.loc["k2", "pq_reply"] == ""
        assert "HTTP 400" in rows.loc["k3", "reason"] and "content_policy_violation" in rows.loc["k3", "reason"]
        assert rows.loc["t1", "sc_reply"] == "I cannot judge this."  # the raw reply is kept
        assert "does not parse" in rows.loc["t1", "reason"]
        assert rows.loc["k5", "status"] == "ok" and rows.loc["k5", "judge_failure"] == ""
        # provenance on every judged row: the model asked, the snapshot that answered, the fingerprint, the server
        assert set(rows["judge_model"]) == {"judge"} and set(rows["judge_version"]) == {"0.0.test"}
        assert rows.loc["k5", "judge_answered_by"] == "judge-2025-04-14"
        assert rows.loc["k5", "judge_fingerprint"] == "fp_1a2b"

        board = pd.read_csv(tmp_path / "results" / "leaderboard.csv").iloc[0]
        assert (board["n_ok"], board["n_failed"]) == (1, 4)
        assert "JUDGE FAILED 4/5 (1 call failed, 2 refused, 1 unparseable)" in board["mark"]
        shown = subprocess.run([sys.executable, "-m", "benchmark.commands.cli", "show", "--results",
                                str(tmp_path / "results")], capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert shown.returncode == 0, shown.stderr
        assert "JUDGE FAILED 4/5 (1 call failed, 2 refused, 1 unparseable)" in shown.stdout
        from benchmark.commands.report import build_report

        build_report(tmp_path / "results", tmp_path / "report", compare=False)
        html = (tmp_path / "report" / "index.html").read_text(encoding="utf-8")
        assert '<span class="badge failed">' in html and "JUDGE FAILED 4/5 (1 call failed, 2 refused" in html

        # the same command again, the judge now answering: exactly the four failed requests reach it
        script.heal()
        script.calls.clear()
        summary = _run(built, tmp_path, "queryset.language=en", backbone=backbone)
    assert sorted(script.calls) == ["PQ:30,200,30", "SC:Add a cat on the sofa", "SC:Change the sign's text to 'hello'",
                                    "SC:Make it look like autumn"]
    assert summary["score"].computed == 4 and summary["score"].reused == 1
    rows = _rows(tmp_path / "results", built)
    assert set(rows["status"]) == {"ok"} and set(rows["judge_failure"]) == {""}
    assert rows.loc["t1", "sc_reply"] == SC_REPLIES["Make it look like autumn"]
    board = pd.read_csv(tmp_path / "results" / "leaderboard.csv").iloc[0]
    assert (board["n_ok"], board["n_failed"]) == (5, 0) and "JUDGE FAILED" not in str(board["mark"])
    # the unparseable reply's cache entry was replaced by the new one; refusals and failures were never cached
    records = [json.loads(p.read_text()) for p in (tmp_path / "results" / "judge_replies").rglob("*.json")]
    assert len(records) == 10 and not any(r.get("rejected") for r in records)
    assert all(r["reply"] for r in records) and {r["fingerprint"] for r in records} == {"fp_1a2b"}


def test_a_refused_reply_and_a_failed_call_are_not_cached_and_an_unreachable_server_still_stops_the_run(
        tmp_path, monkeypatch):
    monkeypatch.setattr(je, "_sleep", lambda s: None)
    replies = {"a": Answer(None, "content_filter"), "b": Answer("partial", "content_filter"), "c": Status(502),
               "d": Status(401, "bad key"), "e": "fine"}
    with serving(OpenAIServer(lambda ims, text, *_: replies[text], fingerprint=None)) as srv:
        judge = EndpointJudge(base_url=srv.url, model=srv.served, cache_dir=str(tmp_path), max_retries=1,
                              backoff_s=0.0)
        got = judge.generate([([_image((1, 2, 3))], t) for t in "abce"])
        assert [r.failure for r in got] == ["refused", "refused", "call_failed", ""]
        assert got[1] == "partial" and "content_filter" in got[1].error  # the text that came back is kept
        assert got[3] == "fine" and got[3].fingerprint == "" and got[3].answered_by == srv.served
        assert len(list(tmp_path.rglob("*.json"))) == 1  # only the answer
        with pytest.raises(EndpointError, match="refused POST .*HTTP 401"):  # the key is wrong: every call would be
            judge.generate([([_image((1, 2, 3))], "d")])
        url = srv.url
    with pytest.raises(EndpointError, match=r"failed GET .*/models"):  # nobody listens: stops before judging
        EndpointJudge(base_url=url, model="judge", max_retries=0).generate([([_image((1, 2, 3))], "e")])


def test_cache_entries_of_the_first_layout_are_still_read_and_the_key_needs_no_encoding(tmp_path, monkeypatch):
    reqs = [([_image((9, 9, 9)), _image((1, 1, 1))], "old prompt")]
    with serving(OpenAIServer(lambda *a: "new reply")) as srv:
        judge = EndpointJudge(base_url=srv.url, model=srv.served, cache_dir=str(tmp_path))
        # an entry as the first layout wrote it: keyed by the request with its base64 data URLs, no fingerprint
        old_key = hashlib.sha256(json.dumps({"identity": judge.identity, "request": judge.payload(*reqs[0])},
                                            sort_keys=True, ensure_ascii=False).encode()).hexdigest()
        (tmp_path / old_key[:2]).mkdir()
        (tmp_path / old_key[:2] / f"{old_key}.json").write_text(json.dumps(
            {"reply": "old reply", "finish_reason": "stop", "answered_by": "judge-old", "identity": judge.identity}))
        (got,) = judge.generate(reqs)
        assert srv.calls == 0 and got == "old reply" and got.cached
        assert (got.answered_by, got.fingerprint) == ("judge-old", "")
        encoded = []
        monkeypatch.setattr(je, "data_url_bytes", lambda im, fmt, lv=None: encoded.append(im) or b"x")
        (again,) = EndpointJudge(base_url=srv.url, model=srv.served, cache_dir=str(tmp_path)).generate(reqs)
        assert again == "old reply" and srv.calls == 0 and encoded == []  # a hit under the new key: nothing encoded


@pytest.mark.parametrize(("fmt", "level"), [("png", None), ("jpeg", None), ("png", 1), ("png", 0)])
def test_each_distinct_image_is_encoded_once_and_decodes_to_the_very_pixels(fmt, level, monkeypatch):
    from PIL import Image

    rng = np.random.default_rng(0)
    source = Image.fromarray(rng.integers(0, 256, (70, 90, 3), dtype=np.uint8))
    edit = Image.fromarray(rng.integers(0, 256, (70, 90, 3), dtype=np.uint8))
    calls = []
    real = je.data_url_bytes
    monkeypatch.setattr(je, "data_url_bytes", lambda im, f, lv=None: calls.append(im.size) or real(im, f, lv))
    with serving(OpenAIServer(lambda *a: "ok")) as srv:
        judge = EndpointJudge(base_url=srv.url, model=srv.served, image_format=fmt, images="as_is", concurrency=2,
                              png_compress_level=level)
        judge.generate([([source, edit], "SC"), ([edit], "PQ")])  # the edit in both requests, as metrics=gedit
    assert len(calls) == 2  # source and edit, not three
    sent = {p["messages"][1]["content"][-1]["text"]: [c["image_url"]["url"] for c in p["messages"][1]["content"][:-1]]
            for p in srv.payloads}
    assert sent["SC"][1] == sent["PQ"][0]
    for url, im in zip(sent["SC"], (source, edit), strict=True):
        buf = io.BytesIO()
        im.save(buf, format=fmt.upper())  # PIL's defaults, as the official scripts encode
        official = f"data:image/{fmt};base64," + base64.b64encode(buf.getvalue()).decode()
        assert (url == official) == (level is None or level == 6)  # null: the official bytes
        if fmt == "png":  # lossless at every level: the server decodes the very pixels
            decoded = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
            assert np.array_equal(np.asarray(decoded), np.asarray(im))


def test_reply_columns_join_distinct_values_in_request_order():
    replies = [JudgeReply("a", model="m", answered_by="snap-2", fingerprint="fp_b", version="1"),
               JudgeReply("b", model="m", answered_by="snap-1", fingerprint="", version="1"),
               JudgeReply("c", model="m", answered_by="snap-2", fingerprint="fp_a", version="1")]
    assert reply_columns(replies) == {"judge_model": "m", "judge_answered_by": "snap-2;snap-1",
                                      "judge_fingerprint": "fp_b;fp_a", "judge_version": "1"}
    import copy

    back = copy.copy(replies[0])  # through __reduce__, as pickling to a worker process: the provenance survives
    assert back == "a" and back.meta == replies[0].meta
    with pytest.raises(ValueError, match="failure must be one of"):
        JudgeReply("x", failure="timeout")


@pytest.mark.parametrize("text_first", [False, True])
def test_the_request_body_is_byte_for_byte_json_dumps_of_the_request(text_first):
    judge = EndpointJudge(base_url="http://127.0.0.1:1/v1", model="m", text_first=text_first, images="as_is")
    images = [_image((10, 20, 30)), _image((200, 100, 0), (31, 17))]
    urls = [je.data_url_bytes(im) for im in images]
    text = 'quote " backslash \\ unicode 你好 é and a token-like @00@0'
    assert judge._body_bytes(urls, text) == json.dumps(judge.payload(images, text)).encode()


@pytest.mark.parametrize(("mode", "shape"), [("RGB", (45, 61, 3)), ("L", (31, 17)), ("RGBA", (7, 9, 4))])
def test_a_stored_png_decodes_to_the_very_pixels_and_other_modes_are_left_to_pil(mode, shape):
    from PIL import Image

    pixels = np.random.default_rng(1).integers(0, 256, shape, dtype=np.uint8)
    back = Image.open(io.BytesIO(je.stored_png(Image.fromarray(pixels, mode))))
    back.load()
    assert back.format == "PNG" and back.mode == mode and np.array_equal(np.asarray(back), pixels)
    palette = Image.fromarray(pixels[..., 0] if pixels.ndim == 3 else pixels, "L").convert("P")
    assert je.stored_png(palette) is None  # PIL writes it (png_compress_level 0 then means PIL's level 0)
    url = je.data_url_bytes(palette, "png", 0).decode()
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))),
                          np.asarray(palette))
