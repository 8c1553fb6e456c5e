"""An OpenAI-compatible chat server on 127.0.0.1 for the endpoint judge's tests (never the internet): GET /v1/models,
GET /version (as vLLM serves them) and POST /v1/chat/completions, whose images (base64 PNG data URLs) are decoded and
handed with the prompt text to `reply(images, text, system, max_tokens)`. It counts chat requests, records the most
requests in flight at once and the Authorization headers it saw, and can answer the first requests with error
statuses (`fail`). Each answer names `answered_by` as its `model` (default: the served name; a callable gets the
request's prompt text) and, when set, `fingerprint` as its `system_fingerprint`. `reply` may script a failure for a
request: `Status(503)` (answered with that HTTP status, every try), `Answer(None, "content_filter")` (a refusal:
no content, that finish_reason). `asked` lists the prompt text of every chat request in arrival order (retries
included)."""

from __future__ import annotations

import base64
import io
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Status:
    """A scripted HTTP error for one request (every try of it), e.g. Status(503) or Status(400, "content_policy")."""

    def __init__(self, code, message="scripted"):
        self.code, self.message = code, message


class Answer:
    """A scripted answer with its finish_reason and content (None: the content is null, as a content filter leaves)."""

    def __init__(self, content, finish_reason="stop"):
        self.content, self.finish_reason = content, finish_reason


class _Handler(BaseHTTPRequestHandler):
    server_version = "editmeter-test"

    def log_message(self, *args):  # quiet test output
        pass

    def _json(self, status, obj):
        data = json.dumps(obj).encode()
        self._leave()  # before the reply goes out: a client may send its next request as soon as it has it
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        srv = self.server
        srv.auth.append(self.headers.get("Authorization"))
        if self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": srv.served, "object": "model", "root": srv.root}]})
        elif self.path == "/version" and srv.version is not None:
            self._json(200, {"version": srv.version})
        else:
            self._json(404, {"error": "not found"})

    def do_POST(self):
        srv = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        srv.auth.append(self.headers.get("Authorization"))
        with srv.lock:
            srv.calls += 1
            srv.in_flight += 1
            srv.max_in_flight = max(srv.max_in_flight, srv.in_flight)
            self._counted = True
            status = srv.fail.pop(0) if srv.fail else 200
        try:
            time.sleep(srv.delay)
            if self.path != "/v1/chat/completions":
                self._json(404, {"error": "not found"})
            elif status != 200:
                self._json(status, {"error": f"scripted {status}"})
            elif body["model"] != srv.served:
                self._json(404, {"error": f"model {body['model']} not served"})
            else:
                from PIL import Image

                system = next((m["content"] for m in body["messages"] if m["role"] == "system"), None)
                user = next(m["content"] for m in body["messages"] if m["role"] == "user")
                images = [Image.open(io.BytesIO(base64.b64decode(p["image_url"]["url"].split(",", 1)[1])))
                          for p in user if p["type"] == "image_url"]
                text = "".join(p["text"] for p in user if p["type"] == "text")
                with srv.lock:
                    srv.asked.append(text)
                reply = srv.reply(images, text, system, body.get("max_tokens"))
                if isinstance(reply, Status):
                    self._json(reply.code, {"error": {"message": reply.message, "code": reply.message}})
                    return
                srv.payloads.append(body)
                answer = reply if isinstance(reply, Answer) else Answer(reply)
                by = srv.answered_by(text) if callable(srv.answered_by) else srv.answered_by
                out = {"id": "x", "object": "chat.completion", "model": by or srv.served, "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": answer.content},
                     "finish_reason": answer.finish_reason}]}
                if srv.fingerprint is not None:
                    out["system_fingerprint"] = srv.fingerprint
                self._json(200, out)
        finally:
            self._leave()

    def _leave(self):
        if getattr(self, "_counted", False):
            with self.server.lock:
                self.server.in_flight -= 1
            self._counted = False


class OpenAIServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, reply, *, served="judge", root="org/judge-model", version="0.0.test", fail=(), delay=0.0,
                 answered_by=None, fingerprint=None):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.reply, self.served, self.root, self.version = reply, served, root, version
        self.answered_by, self.fingerprint = answered_by, fingerprint
        self.asked: list[str] = []
        self.fail, self.delay = list(fail), delay
        self.lock = threading.Lock()
        self.calls = self.in_flight = self.max_in_flight = 0
        self.auth: list[str | None] = []
        self.payloads: list[dict] = []

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


def tiny_text_judge_reply(text_first: bool = False):
    """`reply` serving the tiny random-weight TextJudge (one model per system turn and token limit, one request at
    a time, as the in-process judge answers them; `text_first`: the prompt before the images, as ImgEdit-Bench's)."""
    from benchmark.models.vlm import TextJudge

    judges, lock = {}, threading.Lock()

    def reply(images, text, system, max_tokens):
        with lock:
            key = (system, max_tokens)
            if key not in judges:
                judges[key] = TextJudge(weights="tiny", dtype="float32", device="cpu", max_new_tokens=max_tokens,
                                        system=system, text_first=text_first)
            return judges[key].generate([(images, text)])[0]

    return reply
