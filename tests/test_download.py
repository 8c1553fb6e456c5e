"""Downloads against a local HTTP server (127.0.0.1): resume after an interrupted transfer, checksum failures."""

import hashlib
import http.server
import json
import threading
import zipfile

import pytest

from benchmark.io.download import DownloadError, download_file, extract, fetch_manifest, load_manifest

PAYLOAD = bytes(range(256)) * 4096  # 1 MiB, several chunks


class _Handler(http.server.BaseHTTPRequestHandler):
    files: dict[str, bytes] = {}
    cut_after: dict[str, int] = {}  # path -> bytes to send before dropping the connection (once)
    honour_range = True
    requests: list[tuple[str, str | None]] = []

    def log_message(self, *args):  # keep pytest output clean
        pass

    def do_GET(self):
        data = self.files.get(self.path)
        rng = self.headers.get("Range")
        self.requests.append((self.path, rng))
        if data is None:
            self.send_error(404)
            return
        start = 0
        if rng and self.honour_range:
            start = int(rng.split("=")[1].split("-")[0])
            if start >= len(data):
                self.send_response(416)
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        body = data[start:]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        cut = self.cut_after.pop(self.path, None)
        if cut is not None:
            self.wfile.write(body[:cut])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(body)


@pytest.fixture()
def server():
    _Handler.files = {}
    _Handler.cut_after = {}
    _Handler.requests = []
    _Handler.honour_range = True
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_interrupted_transfer_resumes_with_range(server, tmp_path):
    _, base = server
    _Handler.files["/f.bin"] = PAYLOAD
    _Handler.cut_after["/f.bin"] = 300_000
    dest = tmp_path / "f.bin"
    with pytest.raises(DownloadError, match="run the same command again"):
        download_file(f"{base}/f.bin", dest, size=len(PAYLOAD), sha256=sha(PAYLOAD), progress=False)
    assert not dest.exists()
    part = tmp_path / "f.bin.part"
    assert 0 < part.stat().st_size < len(PAYLOAD)
    got = part.stat().st_size
    download_file(f"{base}/f.bin", dest, size=len(PAYLOAD), sha256=sha(PAYLOAD), progress=False)
    assert dest.read_bytes() == PAYLOAD and not part.exists()
    assert _Handler.requests[-1] == ("/f.bin", f"bytes={got}-")


def test_server_ignoring_range_restarts_instead_of_appending(server, tmp_path):
    _, base = server
    _Handler.files["/f.bin"] = PAYLOAD
    _Handler.honour_range = False
    (tmp_path / "f.bin.part").write_bytes(PAYLOAD[:1000])
    download_file(f"{base}/f.bin", tmp_path / "f.bin", sha256=sha(PAYLOAD), progress=False)
    assert (tmp_path / "f.bin").read_bytes() == PAYLOAD


def test_corrupted_download_is_detected_and_not_used(server, tmp_path):
    _, base = server
    bad = bytearray(PAYLOAD)
    bad[12345] ^= 0xFF
    _Handler.files["/f.bin"] = bytes(bad)
    dest = tmp_path / "f.bin"
    with pytest.raises(DownloadError, match="does not verify .*sha256"):
        download_file(f"{base}/f.bin", dest, size=len(PAYLOAD), sha256=sha(PAYLOAD), progress=False)
    assert not dest.exists() and not (tmp_path / "f.bin.part").exists()


def test_corrupted_existing_file_is_refetched(server, tmp_path):
    _, base = server
    _Handler.files["/f.bin"] = PAYLOAD
    dest = tmp_path / "f.bin"
    dest.write_bytes(b"garbage")
    download_file(f"{base}/f.bin", dest, sha256=sha(PAYLOAD), progress=False)
    assert dest.read_bytes() == PAYLOAD


def test_http_error_and_unreachable_host_have_clear_messages(server, tmp_path):
    _, base = server
    with pytest.raises(DownloadError, match="HTTP 404"):
        download_file(f"{base}/missing", tmp_path / "m", progress=False)
    with pytest.raises(DownloadError, match="cannot connect"):
        download_file("http://127.0.0.1:9/x", tmp_path / "x", progress=False, timeout=2)


def test_manifest_fetch_and_extract(server, tmp_path):
    _, base = server
    zpath = tmp_path / "src.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        zf.writestr("sceneGraphs/train.json", "{}")
    data = zpath.read_bytes()
    _Handler.files["/sg.zip"] = data
    mdir = tmp_path / "manifests"
    mdir.mkdir()
    (mdir / "toy.json").write_text(json.dumps({
        "name": "toy", "description": "d", "license": "l",
        "files": [{"name": "sg.zip", "url": f"{base}/sg.zip", "size": len(data), "sha256": sha(data), "extract": True}],
    }))
    manifest = load_manifest("toy", manifest_dir=mdir)
    fetch_manifest(manifest, tmp_path / "dl", progress=False)
    assert (tmp_path / "dl" / "sceneGraphs" / "train.json").read_text() == "{}"
    with pytest.raises(DownloadError, match="known data sets: toy"):
        load_manifest("nope", manifest_dir=mdir)


def test_a_manifest_whose_hand_placed_part_is_absent_says_what_arrived_and_what_next(server, tmp_path):
    """KRIS-Bench's shape: a prompt file fetched by URL and a release folder placed by hand. Listed after it or
    before it, the file is fetched, and the error names it as arrived, the folder as not there, and the next step."""
    _, base = server
    _Handler.files["/prompts.txt"] = b"prompt = 'x'\n"
    mdir = tmp_path / "manifests"
    mdir.mkdir()
    for order in (1, -1):
        files = [{"name": "prompts.txt", "url": f"{base}/prompts.txt", "sha256": sha(b"prompt = 'x'\n")},
                 {"name": "RELEASE", "url": None}][::order]
        (mdir / "toy.json").write_text(json.dumps({"name": "toy", "description": "d", "license": "l",
                                                   "manual": "Download the release by hand.", "files": files}))
        dest = tmp_path / f"dl{order}"
        with pytest.raises(DownloadError) as err:
            fetch_manifest(load_manifest("toy", manifest_dir=mdir), dest, progress=False)
        msg = str(err.value)
        assert f"Arrived: {dest / 'prompts.txt'}" in msg and f"Not there: {dest / 'RELEASE'}" in msg
        assert "Download the release by hand." in msg and "run the same command again" in msg
        assert (dest / "prompts.txt").is_file()  # kept
        (dest / "RELEASE").mkdir()
        assert fetch_manifest(load_manifest("toy", manifest_dir=mdir), dest, progress=False)


def test_zip_slip_is_refused(tmp_path):
    zpath = tmp_path / "evil.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        zf.writestr("../outside.txt", "x")
    with pytest.raises(DownloadError, match="escapes the folder"):
        extract(zpath, tmp_path / "out")
    assert not (tmp_path / "outside.txt").exists()


def test_bundled_manifests_are_valid():
    from benchmark.io.download import MANIFEST_DIR

    names = sorted(p.stem for p in MANIFEST_DIR.glob("*.json"))
    assert {"gqa_hatie", "hatie", "editval", "magicbrush"} <= set(names)
    for name in names:
        m = load_manifest(name)
        assert m.files or m.huggingface, name
        assert m.build or not m.huggingface, name  # only a files-only manifest (a judge's prompt file) builds nothing


def test_download_script_end_to_end(server, tmp_path):
    import subprocess
    import sys

    from conftest import ROOT

    _, base = server
    _Handler.files["/a.bin"] = PAYLOAD
    manifest = tmp_path / "toy.json"

    def run(sha, build="python build.py"):
        manifest.write_text(json.dumps({"name": "toy", "description": "d", "license": "l", "build": build,
                                        "files": [{"name": "a.bin", "url": f"{base}/a.bin", "sha256": sha}]}))
        return subprocess.run([sys.executable, "scripts/tools/download.py", str(manifest), "--dest", str(tmp_path / "dl"),
                               "--no-progress"], cwd=ROOT, capture_output=True, text=True)

    bad = run("0" * 64)
    assert bad.returncode == 1 and "error:" in bad.stderr and "does not verify" in bad.stderr
    assert not (tmp_path / "dl" / "a.bin").exists()
    good = run(sha(PAYLOAD))
    assert good.returncode == 0, good.stderr
    assert (tmp_path / "dl" / "a.bin").read_bytes() == PAYLOAD and "python build.py" in good.stdout
    files_only = run(sha(PAYLOAD), build="")  # a judge's prompt file: nothing to build afterwards
    assert files_only.returncode == 0 and "nothing to build" in files_only.stdout
    assert "build the query set" not in files_only.stdout
