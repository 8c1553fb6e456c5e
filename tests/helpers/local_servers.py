"""Local HTTP servers on 127.0.0.1 for download tests (never the internet): plain files (URL weights) and a
minimal Hugging Face hub (the endpoints `snapshot_download` / `hf_hub_download` use), counting file downloads."""

from __future__ import annotations

import hashlib
import json
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit


class _Handler(BaseHTTPRequestHandler):
    server_version = "editmeter-test"

    def log_message(self, *args):  # quiet test output
        pass

    def do_HEAD(self):
        self._serve(body=False)

    def do_GET(self):
        self._serve(body=True)

    def _send(self, status, data=b"", headers=None, body=True):
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)

    def _serve(self, body):
        path = unquote(urlsplit(self.path).path)
        found = self.server.route(path)
        if found is None:
            self._send(404, b"not found", {"X-Error-Code": "EntryNotFound"}, body)
            return
        data, headers = found
        if body and headers.pop("_count", False):
            self.server.downloads.append(path)
        self._send(200, data, headers, body)


class FileServer(ThreadingHTTPServer):
    """Serves {path: bytes}."""

    def __init__(self, files):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.files, self.downloads = dict(files), []

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}"

    def route(self, path):
        if path in self.files:
            return self.files[path], {"Content-Type": "application/octet-stream", "_count": True}
        return None


class FakeHub(FileServer):
    """repos: {repo_id: (commit sha, {filename: bytes})}; any revision name or the sha resolves to that commit."""

    def __init__(self, repos):
        super().__init__({})
        self.repos = repos

    def route(self, path):
        if path.startswith("/api/models/"):
            rest = path[len("/api/models/"):]
            repo = rest.split("/revision/")[0].split("/tree/")[0]
            if repo not in self.repos:
                return None
            sha, files = self.repos[repo]
            if "/tree/" in rest:
                tree = [{"type": "file", "path": f, "size": len(b), "oid": hashlib.sha1(b).hexdigest()}
                        for f, b in files.items()]
                return json.dumps(tree).encode(), {"Content-Type": "application/json"}
            info = {"id": repo, "modelId": repo, "sha": sha, "private": False, "downloads": 0, "likes": 0,
                    "tags": [], "siblings": [{"rfilename": f, "size": len(b)} for f, b in files.items()]}
            return json.dumps(info).encode(), {"Content-Type": "application/json"}
        if "/resolve/" in path:
            repo, _, rest = path.lstrip("/").partition("/resolve/")
            _rev, _, filename = rest.partition("/")
            if repo not in self.repos or filename not in self.repos[repo][1]:
                return None
            sha, files = self.repos[repo]
            data = files[filename]
            return data, {"X-Repo-Commit": sha, "ETag": f'"{hashlib.sha256(data).hexdigest()}"', "_count": True}
        return None


@contextmanager
def serving(server):
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
