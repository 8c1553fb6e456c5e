"""A judge served by an OpenAI-compatible engine (benchmark/models/judge_endpoint.py, docs/judge.md): against real HTTP
servers on 127.0.0.1 (tests/helpers/openai_server.py), the request format (OpenAI chat, PNG data URLs, greedy), the
identity (served model, its root, the server's version), the content-keyed reply cache, retries with backoff, the
concurrency limit, the API key kept out of every file and log, the config choice, and metrics=gedit through the
endpoint serving the tiny VLM equal to the in-process judge on the same model."""

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from local_servers import FileServer, serving
from openai_server import OpenAIServer, tiny_text_judge_reply

import benchmark.models.judge_endpoint as je
from benchmark.models.judge_endpoint import EndpointError, EndpointJudge

KEY = "sk-editmeter-test-" + "7f3a9c" * 4


def _image(colour, size=(60, 44)):
    from PIL import Image

    return Image.new("RGB", size, colour)


def _echo(images, text, system, max_tokens):
    sizes = ",".join(f"{im.width}x{im.height}" for im in images)
    return f"{text}|{len(images)}|{sizes}|{max_tokens}"


def _judge(server, tmp_path=None, **kw):
    return EndpointJudge(base_url=server.url, model=server.served,
                         cache_dir=str(tmp_path / "cache") if tmp_path else None, backoff_s=0.0, **kw)


def _requests(n):
    return [([_image((10 * i, 0, 0)), _image((0, 10 * i, 0))] if i % 2 else [_image((0, 0, 10 * i))], f"prompt {i}")
            for i in range(n)]


def test_requests_are_openai_chat_turns_with_png_data_urls_greedy_and_in_order():
    from PIL import Image

    from benchmark.models.vlm import HUB_DEFAULT_SYSTEM, qwen_vl_utils_image

    reqs = _requests(6)
    with serving(OpenAIServer(_echo, delay=0.02)) as srv:
        replies = _judge(srv, max_tokens=7, seed=3, concurrency=4).generate(reqs)
    # in order, whatever order the 4 threads finished in
    want = [_echo([qwen_vl_utils_image(im) for im in ims], text, None, 7) for ims, text in reqs]
    assert replies == want
    body = next(p for p in srv.payloads if p["messages"][1]["content"][-1]["text"] == "prompt 1")
    assert (body["temperature"], body["seed"], body["max_tokens"]) == (0, 3, 7)
    assert body["messages"][0] == {"role": "system", "content": HUB_DEFAULT_SYSTEM}
    parts = body["messages"][1]["content"]
    assert [p["type"] for p in parts] == ["image_url", "image_url", "text"]  # the images, then the prompt
    for part, original in zip(parts[:2], reqs[1][0], strict=True):
        head, data = part["image_url"]["url"].split(",", 1)
        assert head == "data:image/png;base64"
        sent = Image.open(io.BytesIO(base64.b64decode(data)))
        assert sent.format == "PNG"
        assert np.array_equal(np.asarray(sent), np.asarray(qwen_vl_utils_image(original)))  # lossless, as sized


def test_identity_names_the_served_model_its_root_the_server_version_and_the_decoding():
    with serving(OpenAIServer(_echo, version="1.0")) as a, serving(OpenAIServer(_echo, version="1.1")) as b, \
            serving(OpenAIServer(_echo, version=None, root="org/other")) as c:
        ids = {_judge(s).identity for s in (a, b, c)} | {_judge(a, max_tokens=9).identity,
                                                        _judge(a, seed=1).identity, _judge(a, revision="abc").identity}
        assert len(ids) == 6
        assert "server=1.1" in _judge(b).identity and "root=org/judge-model" in _judge(b).identity
        assert "server=unreported" in _judge(c).identity and "root=org/other" in _judge(c).identity
        with pytest.raises(EndpointError, match=r"does not serve 'other-name'; it serves 'judge'"):
            EndpointJudge(base_url=a.url, model="other-name").identity  # noqa: B018
    with serving(FileServer({"/v1/models": b"<html>a web page</html>"})) as web:
        with pytest.raises(EndpointError, match=r"did not answer as an OpenAI-compatible server.*ends in /v1"):
            EndpointJudge(base_url=f"{web.url}/v1", model="m").identity  # noqa: B018


def test_replies_are_cached_by_request_content_and_identity_so_a_rerun_never_asks_twice(tmp_path):
    reqs = _requests(4)
    with serving(OpenAIServer(_echo)) as srv:
        first = _judge(srv, tmp_path).generate(reqs)
        assert srv.calls == 4
        again = _judge(srv, tmp_path).generate(reqs)  # a new process's judge: the cache on disk answers
        assert again == first and srv.calls == 4
        changed = [(reqs[0][0], reqs[0][1])] + [([_image((1, 2, 3))], reqs[1][1])] + reqs[2:]  # one image changed
        _judge(srv, tmp_path).generate(changed)
        assert srv.calls == 5
        _judge(srv, tmp_path, max_tokens=9).generate(reqs)  # another identity asks anew
        assert srv.calls == 9
        assert _judge(srv).generate(reqs) == first and srv.calls == 13  # no cache_dir: no cache


def test_429_5xx_and_connection_errors_are_retried_with_exponential_backoff_then_fail_clearly(monkeypatch):
    slept = []
    monkeypatch.setattr(je, "_sleep", slept.append)
    reqs = _requests(1)
    with serving(OpenAIServer(_echo, fail=[503, 429, 500])) as srv:
        judge = EndpointJudge(base_url=srv.url, model=srv.served, max_retries=3, backoff_s=0.5)
        assert judge.generate(reqs) == _judge(srv).generate(reqs)
        assert slept == [0.5, 1.0, 2.0] and srv.calls == 5
        slept.clear()
        srv.fail = [502] * 10
        # still failing after the retries: that request's failure reply (a failure row), not the run's end
        (failed,) = EndpointJudge(base_url=srv.url, model=srv.served, max_retries=2, backoff_s=100).generate(reqs)
        assert failed == "" and failed.failure == "call_failed"
        assert re.search(r"failed POST .* 3 time\(s\), the last with HTTP 502", failed.error)
        assert slept == [60.0, 60.0]  # capped
        calls, srv.fail = srv.calls, [400]
        (refused,) = _judge(srv, max_retries=5).generate(reqs)
        assert refused.failure == "refused" and re.search(r"refused POST .*HTTP 400.*max-model-len", refused.error)
        assert srv.calls == calls + 1  # a refusal is not retried
        url, model = srv.url, srv.served
    slept.clear()
    with pytest.raises(EndpointError, match=r"failed GET .*/models 3 time\(s\).*(URLError|Connection)"):
        EndpointJudge(base_url=url, model=model, max_retries=2, backoff_s=0.25).generate(reqs)  # nobody listens
    assert slept == [0.25, 0.5]


@pytest.mark.parametrize("concurrency", [1, 3])
def test_no_more_requests_are_in_flight_than_the_concurrency_limit(concurrency):
    n = 2 * concurrency + 1  # more requests than the limit, and the slow replies overlap (on a loaded machine too)
    with serving(OpenAIServer(_echo, delay=0.4)) as srv:
        _judge(srv, concurrency=concurrency).generate(_requests(n))
    assert srv.calls == n and srv.max_in_flight == concurrency


def test_bad_settings_are_refused_by_name(monkeypatch):
    monkeypatch.delenv("EDITMETER_TEST_KEY", raising=False)
    for kw, match in (({"base_url": "127.0.0.1:8000"}, "base_url must be an http"), ({"model": ""}, "model must"),
                      ({"concurrency": 0}, "concurrency must"), ({"max_retries": -1}, "max_retries must"),
                      ({"images": "png"}, "images must be one of"), ({"timeout_s": 0}, "timeout_s must"),
                      ({"temperature": 3}, "temperature must"), ({"image_format": "webp"}, "image_format must"),
                      ({"text_first": "yes"}, "text_first must"), ({"seed": -1}, "seed must be an integer >= 0 or null"),
                      ({"api_key_env": "EDITMETER_TEST_KEY"}, "EDITMETER_TEST_KEY.*unset")):
        with pytest.raises(ValueError, match=match):
            EndpointJudge(**({"base_url": "http://127.0.0.1:1/v1", "model": "m"} | kw))


def test_the_config_chooses_the_endpoint_and_only_what_shapes_a_reply_enters_the_signature(tmp_path):
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from benchmark.commands.run import compose
    from benchmark.plan.config import metric_signature

    def sig(srv, *extra):
        cfg, _ = compose(["metrics=gedit", "profile=tiny", "metrics/gedit_judge@metrics.gedit.backbone=endpoint",
                          f"metrics.gedit.backbone.base_url={srv.url}", f"metrics.gedit.backbone.model={srv.served}",
                          *extra])
        suite = instantiate(cfg.metrics.gedit)
        assert isinstance(suite.backbone, EndpointJudge)
        return metric_signature(OmegaConf.to_container(cfg.metrics, resolve=True), {"gedit": suite.info}), suite

    with serving(OpenAIServer(_echo, version="1.0")) as a, serving(OpenAIServer(_echo, version="2.0")) as b:
        base, suite = sig(a)
        assert "server=1.0" in suite.components()["backbone"]
        assert suite.components()["judge"] == f"{a.served}@c8b87d4b81f34b6a147577a310d7e75f0698f6c2"
        # transport settings and the host leave it alone; the server's version and the decoding change it
        assert sig(a, "metrics.gedit.backbone.concurrency=9", "metrics.gedit.backbone.max_retries=0",
                   f"metrics.gedit.backbone.cache_dir={tmp_path}")[0] == base
        assert sig(b)[0] != base and sig(a, "metrics.gedit.backbone.max_tokens=64")[0] != base


@pytest.mark.parametrize(("metric", "model", "fmt", "max_tokens"), [("gedit", "gpt-4.1", "JPEG", 1400),
                                                                   ("imgedit", "gpt-4o", "PNG", None)])
def test_the_official_api_judges_send_no_system_turn_the_text_first_and_leave_decoding_to_the_api(
        metric, model, fmt, max_tokens, monkeypatch, tmp_path):
    from hydra.utils import instantiate
    from PIL import Image

    from benchmark.commands.run import compose

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with serving(OpenAIServer(_echo, served=model, version=None)) as srv:
        cfg, _ = compose([f"metrics={metric}", "profile=tiny", f"metrics/{metric}_judge@metrics.{metric}.backbone=openai",
                          f"metrics.{metric}.backbone.base_url={srv.url}", f"paths.results={tmp_path}"])
        judge = instantiate(cfg.metrics[metric].backbone)
        source = _image((200, 10, 10), (33, 21))
        assert judge.generate([([source, _image((10, 200, 10))], "the prompt")]) == [
            _echo([source, _image((10, 200, 10))], "the prompt", None, max_tokens)]  # sent as they are
    body = srv.payloads[0]
    assert [m["role"] for m in body["messages"]] == ["user"]  # no system turn
    parts = body["messages"][0]["content"]
    assert [p["type"] for p in parts] == ["text", "image_url", "image_url"]
    assert "temperature" not in body and "seed" not in body and body.get("max_tokens") == max_tokens
    head, data = parts[1]["image_url"]["url"].split(",", 1)
    sent = Image.open(io.BytesIO(base64.b64decode(data)))
    assert sent.format == fmt and head == f"data:image/{fmt.lower()};base64" and sent.size == (33, 21)
    assert set(srv.auth) == {f"Bearer {KEY}"}
    assert "temperature=server-default" in judge.identity and "|text_first" in judge.identity
    cached = json.loads(next(tmp_path.rglob("*.json")).read_text())
    assert cached["answered_by"] == model and KEY not in json.dumps(cached)


# ------------------------------------------------------------------------------------------- metrics=gedit pipeline
from test_gedit_protocol import _run, built  # noqa: E402, F401 (the GEdit-Bench fixture and its runner)


def test_gedit_through_the_endpoint_equals_the_in_process_judge_and_the_key_is_written_nowhere(
        built, tmp_path, monkeypatch, caplog, restore_logging):  # noqa: F811
    import logging

    from benchmark.io.errors import TooManyFailures
    from benchmark.stages.score import read_scores

    def rows(results):
        run_dir = next((results / "runs").glob("gedit-en-*/identity-*"))
        (sig,) = [p.name for p in (run_dir / "scores").iterdir()]
        got = read_scores(run_dir, sig).sort_values("query_id").reset_index(drop=True)
        return got[[c for c in got.columns if c not in ("seconds", "timestamp")]]

    common = ("queryset.language=en", "limit=2")
    for name in ("local", "endpoint"):
        (tmp_path / name).mkdir()
    # random weights write bytes, not scores: every query is a failure row that keeps its replies, and the run fails
    with pytest.raises(TooManyFailures):
        _run(built, tmp_path / "local", *common, "metrics.gedit.backbone.max_new_tokens=24",
             "metrics.gedit.backbone.dtype=float32")
    monkeypatch.setenv("EDITMETER_TEST_KEY", KEY)
    caplog.set_level(logging.DEBUG, logger="benchmark")
    with serving(OpenAIServer(tiny_text_judge_reply(), served="tiny-qwen")) as srv:
        backbone = {"_target_": "benchmark.models.judge_endpoint.EndpointJudge", "base_url": srv.url,
                    "model": "tiny-qwen", "max_tokens": 24, "api_key_env": "EDITMETER_TEST_KEY",
                    "cache_dir": str(tmp_path / "endpoint" / "results" / "judge_replies"), "backoff_s": 0.0}
        with pytest.raises(TooManyFailures):
            _run(built, tmp_path / "endpoint", *common, backbone=backbone)
    assert srv.calls == 4 and set(srv.auth) == {f"Bearer {KEY}"}
    local, remote = rows(tmp_path / "local" / "results"), rows(tmp_path / "endpoint" / "results")
    assert len(local) == 2 and set(local["status"]) == {"failed"}
    assert local["sc_reply"].str.len().min() > 0
    # who answered differs (the in-process model and its libraries; the served name and the server's version)
    assert set(local["judge_model"]) == {"Qwen/Qwen2.5-VL-72B-Instruct-AWQ-tiny"}
    assert set(local["judge_version"].str.split("|").str[0]) == {"local"}
    assert set(remote["judge_model"]) == set(remote["judge_answered_by"]) == {"tiny-qwen"}
    assert set(remote["judge_version"]) == {"0.0.test"} and set(remote["judge_failure"]) == {"unparseable"}
    same = [c for c in local.columns if not c.startswith("judge_") or c == "judge_failure"]
    pd.testing.assert_frame_equal(local[same], remote[same])  # same replies, same rows (NaN scores in the same places)
    files = [p for p in (tmp_path / "endpoint").rglob("*") if p.is_file()]
    assert len(list((tmp_path / "endpoint" / "results" / "judge_replies").rglob("*.json"))) == 4
    for path in files:
        assert KEY.encode() not in path.read_bytes(), path
    assert KEY not in caplog.text


def test_the_documented_endpoint_command_composes_to_the_endpoint_backbone():
    import re
    import shlex

    from benchmark.commands.run import compose

    doc = (Path(__file__).resolve().parents[1] / "docs" / "judge.md").read_text(encoding="utf-8")
    cmd = re.search(r"^editmeter run [^\n]*gedit_judge@[^\n]*\\\n[^\n]*$", doc, re.M).group(0)
    args = shlex.split(cmd.replace("\\\n", " "))[2:]
    cfg, _ = compose(args)
    node = cfg.metrics.gedit.backbone
    assert node._target_ == "benchmark.models.judge_endpoint.EndpointJudge"
    assert (node.base_url, node.api_key_env) == ("http://gpu-host:8000/v1", "JUDGE_API_KEY")
    assert (node.model, node.max_tokens, node.seed) == ("Qwen/Qwen2.5-VL-72B-Instruct-AWQ", 512, 42)


def test_a_served_judge_gets_the_next_rounds_requests_while_the_last_rounds_slowest_is_out(
        built, tmp_path, monkeypatch):  # noqa: F811
    """Rounds overlap (`PromptedJudgeSuite._overlapped_rounds`): with chunks of 2 queries (4 requests), concurrency 4
    and the first request slow, the second round's 4 requests are all answered while it is out (one round at a time:
    only the first round's other 3); never more than `concurrency` in flight; the rows equal one round at a time's."""
    import threading
    import time

    from benchmark.stages.score import read_scores

    def run(name):
        clock, slow, lock = [], {}, threading.Lock()

        def reply(images, text, system, max_tokens):
            with lock:
                first = not clock
                clock.append(time.perf_counter())
            if first:
                slow["start"] = clock[0]
                time.sleep(1.5)
                slow["end"] = time.perf_counter()
            return '{"score": [7, 8], "reasoning": "ok"}'

        (tmp_path / name).mkdir()
        with serving(OpenAIServer(reply, served="judge")) as srv:
            backbone = {"_target_": "benchmark.models.judge_endpoint.EndpointJudge", "base_url": srv.url,
                        "model": "judge", "concurrency": 4, "backoff_s": 0.0}
            _run(built, tmp_path / name, "queryset.language=en", "limit=6", "metrics.gedit.chunk_size=2",
                 backbone=backbone)
        run_dir = next((tmp_path / name / "results" / "runs").glob("gedit-en-*/identity-*"))
        (sig,) = [p.name for p in (run_dir / "scores").iterdir()]
        rows = read_scores(run_dir, sig).sort_values("query_id").reset_index(drop=True)
        during = sum(slow["start"] < t < slow["end"] for t in clock)
        return rows[[c for c in rows.columns if c not in ("seconds", "timestamp")]], during, srv

    overlapped, during, srv = run("overlapped")
    assert len(overlapped) >= 5 and srv.calls == 2 * len(overlapped) and srv.max_in_flight <= 4
    assert during >= 3 + 4, during
    monkeypatch.setattr(EndpointJudge, "overlapping_calls", False)
    one_at_a_time, during_serial, _ = run("serial")
    assert during_serial == 3
    pd.testing.assert_frame_equal(overlapped, one_at_a_time)
