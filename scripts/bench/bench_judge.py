"""Is the judge the bottleneck, or editmeter? metrics=gedit through the endpoint backbone against a stand-in server.

    python scripts/bench/bench_judge.py [--queries 128] [--size 512] [--delay 0.2] [--concurrency 4,16] [--keep DIR]
                                  [override ...]   (e.g. metrics.gedit.backbone.png_compress_level=null)

Builds a GEdit-Bench-format set of `--queries` English queries (random-noise sources of `--size` px, about as hard
to compress as photos; saved with `datasets` and converted by `benchmark.querysets.gedit.build`, as
`editmeter data build gedit` does) and stand-in prompt text of the protocol's layout (never the authors' wording). A
stand-in OpenAI-compatible server runs in its own process on 127.0.0.1 (offline): it answers every chat request
after `--delay` seconds with a well-formed GEdit reply, without decoding the images. For each concurrency, the
identity editor's edits are scored by metrics=gedit (two requests per query: SC over [source, edit], PQ over the
edit) with an empty reply cache, and the script prints the score stage's seconds, the judge-bound time
(requests x delay / concurrency: what a server answering in `--delay` allows at best) and their ratio. A ratio
near 1 means the judge is the bottleneck; the gap is editmeter's own work (loading, encoding, hashing) that did not
overlap the judge's waiting. `score CPU s` is the CPU time the scoring process spent (all its threads): on a
machine shared with other work it says what the wall time cannot, the work editmeter itself does.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

FAKE_COMMIT = "feedface" * 5
# stand-in prompt text in the release file's form (module-level string assignments): never the authors' wording
PROMPTS = '''_context_no_delimit = """Rate AI-edited images. Reply as {"score": [...], "reasoning": "..."}."""
_prompts_0shot_two_image_edit_rule = """RULES: the first image is the original, the second the edit."""
_prompts_0shot_tie_rule_SC = """
Two scores from 0 to 10: editing success, then over-editing.
Editing instruction: <instruction>
"""
_prompts_0shot_rule_PQ = """RULES: two scores from 0 to 10: naturalness, then artifacts."""
'''
REPLY = '{"score": [7, 8], "reasoning": "stand-in"}'
TYPES = ("background_change", "color_alter", "material_alter", "motion_change", "ps_human", "style_change",
         "subject-add", "subject-remove", "subject-replace", "text_change", "tone_transfer")


def serve(delay: float, port_file: Path) -> None:
    """The stand-in server (own process: its JSON parsing must not take the scorer's GIL)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    state = {"requests": 0, "bytes": 0}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _json(self, obj):
            data = json.dumps(obj).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/v1/models":
                self._json({"object": "list", "data": [{"id": "stand-in", "object": "model", "root": "stand-in"}]})
            elif self.path == "/version":
                self._json({"version": "stand-in"})
            else:
                with lock:
                    self._json(dict(state))

        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            with lock:
                state["requests"] += 1
                state["bytes"] += len(body)
            time.sleep(delay)
            self._json({"id": "x", "object": "chat.completion", "model": "stand-in", "system_fingerprint": "fp_bench",
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": REPLY},
                                     "finish_reason": "stop"}]})

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    port_file.write_text(str(srv.server_address[1]))
    srv.serve_forever()


def build_set(folder: Path, n: int, size: int) -> Path:
    import numpy as np
    from PIL import Image

    import datasets
    from benchmark.querysets.gedit import build

    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)) for _ in range(n)]
    features = {"key": datasets.Value("string"), "task_type": datasets.Value("string"),
                "instruction": datasets.Value("string"), "instruction_language": datasets.Value("string"),
                "input_image": datasets.Image(), "input_image_raw": datasets.Image(),
                "Intersection_exist": datasets.Value("bool")}
    cols = {"key": [f"k{i:04d}" for i in range(n)], "task_type": [TYPES[i % len(TYPES)] for i in range(n)],
            "instruction": [f"Make change number {i}" for i in range(n)], "instruction_language": ["en"] * n,
            "input_image": images, "input_image_raw": images, "Intersection_exist": [i % 2 == 0 for i in range(n)]}
    datasets.disable_progress_bars()
    ds = datasets.Dataset.from_dict(cols, features=datasets.Features(features))
    datasets.DatasetDict({"train": ds}).save_to_disk(str(folder / "hf"))
    build(folder / "hf", folder / "gedit")
    return folder / "gedit"


def score_seconds(root: Path, work: Path, url: str, concurrency: int, extra: list[str]) -> tuple[float, float]:
    """(wall seconds of the score stage, CPU seconds this process spent in it) of one run: metrics=gedit, the
    endpoint backbone as configs/metrics/gedit_judge/endpoint.yaml sets it (the stand-in server, this concurrency,
    an empty reply cache)."""
    from benchmark.commands.run import compose, run_pipeline

    work.mkdir(parents=True, exist_ok=True)
    prompts = work / "prompts.txt"
    prompts.write_text(PROMPTS, encoding="utf-8")
    sha = hashlib.sha256(PROMPTS.encode()).hexdigest()
    b = "metrics.gedit.backbone"

    def run(stage: str) -> Any:
        cfg, choices = compose([
            "editor=identity", "queryset=gedit", f"queryset.root={root}", "queryset.language=en", "metrics=gedit",
            "metrics/gedit_judge@metrics.gedit.backbone=endpoint", "profile=tiny", f"paths.results={work / 'results'}",
            "progress=false", f"stages=[{stage}]", f"metrics.gedit.prompts_file={prompts}",
            f"metrics.gedit.prompts_sha256={sha}", f"metrics.gedit.prompts_commit={FAKE_COMMIT}", f"{b}.base_url={url}",
            f"{b}.model=stand-in", f"{b}.revision=null", f"{b}.cache_dir={work / 'judge_replies'}",
            f"{b}.concurrency={concurrency}", *extra])
        return run_pipeline(cfg, choices["editor"])

    run("edit")  # the identity editor's edits (PNG files), not timed
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    summary = run("score")
    after = resource.getrusage(resource.RUSAGE_SELF)
    return float(summary["score"].seconds), after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--queries", type=int, default=128)
    ap.add_argument("--size", type=int, default=512, help="source side in pixels")
    ap.add_argument("--delay", type=float, default=0.2, help="seconds the stand-in server takes per request")
    ap.add_argument("--concurrency", default="4,16", help="comma-separated backbone concurrency values")
    ap.add_argument("overrides", nargs="*", help="more run overrides, e.g. metrics.gedit.chunk_size=32")
    ap.add_argument("--keep", type=Path, default=None, help="work in this folder and keep it (default: a temp one)")
    ap.add_argument("--serve", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve is not None:
        serve(args.delay, args.serve)
        return 0
    import logging
    import urllib.request

    logging.basicConfig(level=logging.WARNING)
    tmp = tempfile.TemporaryDirectory() if args.keep is None else None
    work = Path(tmp.name) if tmp else args.keep
    work.mkdir(parents=True, exist_ok=True)
    port_file = work / "port"
    port_file.unlink(missing_ok=True)
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port_file), "--delay", str(args.delay)])
    try:
        t0 = time.perf_counter()
        root = build_set(work, args.queries, args.size)
        print(f"built {args.queries} GEdit-format queries at {args.size} px in {time.perf_counter() - t0:.1f} s")
        while not port_file.is_file() or not port_file.read_text():
            time.sleep(0.05)
        url = f"http://127.0.0.1:{port_file.read_text()}/v1"
        print(f"{'concurrency':>11}  {'requests':>8}  {'MB/request':>10}  {'score s':>8}  {'judge-bound s':>13}  "
              f"{'ratio':>6}  {'score CPU s':>11}")
        for c in [int(v) for v in args.concurrency.split(",")]:
            before = json.loads(urllib.request.urlopen(url.removesuffix("/v1") + "/stats").read())  # noqa: S310
            seconds, cpu = score_seconds(root, work / f"c{c}", url, c, args.overrides)
            after = json.loads(urllib.request.urlopen(url.removesuffix("/v1") + "/stats").read())  # noqa: S310
            n = after["requests"] - before["requests"]
            mb = (after["bytes"] - before["bytes"]) / max(n, 1) / 1e6
            bound = n * args.delay / c
            print(f"{c:>11}  {n:>8}  {mb:>10.2f}  {seconds:>8.1f}  {bound:>13.1f}  {seconds / bound:>6.2f}  {cpu:>11.1f}")
    finally:
        server.terminate()
        server.wait()
        if tmp:
            tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
