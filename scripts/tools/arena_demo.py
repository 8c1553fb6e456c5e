"""A tiny arena on demo_mini, offline (`make demo-arena`; docs/arena.md, "The demo").

Edits demo_mini with three weight-free editors (identity, oracle, overedit), then runs `editmeter arena` against a
stand-in OpenAI-compatible judge on 127.0.0.1 (tests/helpers/openai_server.py) that prefers the edit closer to the
target image in pixels, with a seeded 20% of answers flipped. The prompt is a stand-in module of the pinned one's
shape, written into the results folder: the real prompt needs `make data NAME=genarena`, the real judge a server
(docs/arena.md). Then a fourth editor (tiny random-weight ip2p) is added and the arena run again: only its three
pairs are judged, and the line `judge calls: N made, M reused` says so. A third run asks nothing.

    python scripts/tools/arena_demo.py [--results results/arena_demo]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "helpers"))

STAND_IN_PROMPT = '''"""A stand-in of the pinned GenArena prompt module's shape, for the offline demo (not GenArena's text)."""
ALLOW_TIE = False
PROMPT_TEXT = """Which edited image follows the instruction better? Reply with JSON: {"better_response": "A" or "B"}."""


def build_prompt(instruction, input_images, output_image_a, output_image_b):
    parts = [PROMPT_TEXT, "[INSTRUCTION:]", instruction]
    if input_images:
        parts.append("[SOURCE:]")
    return parts + ["[EDIT A:]", "[EDIT B:]"]


def parse_response(response):
    raise NotImplementedError
'''


def judge(targets: dict[tuple[str, str], object], flip: float = 0.2):
    """reply(images, text, ...): the edit nearer the query's target image (found by its source's pixels and its
    instruction in the prompt; else the source) wins; `flip` of the
    answers (seeded by the request's pixels) name the other one."""
    import numpy as np

    def reply(images, text, system, max_tokens):
        src, a, b = (np.asarray(im.convert("RGB"), dtype=float) for im in images)
        digest = hashlib.sha256(src.tobytes()).hexdigest()
        ref = next((t for (d, instruction), t in targets.items() if d == digest and instruction in text), None)
        ref = src if ref is None else np.asarray(ref, dtype=float)
        better = "A" if np.abs(a - ref).mean() <= np.abs(b - ref).mean() else "B"
        if random.Random(hashlib.sha256(a.tobytes() + b.tobytes()).hexdigest()).random() < flip:
            better = "B" if better == "A" else "A"
        return json.dumps({"reasoning": {}, "score": 5, "better_response": better, "confidence": 0.5})

    return reply


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", type=Path, default=ROOT / "results" / "arena_demo")
    args = ap.parse_args()
    results = args.results.resolve()
    run = [sys.executable, "-m", "benchmark.commands.cli", "run", "queryset=demo_mini", "profile=tiny", "metrics=basic",
           "stages=[edit]", f"paths.results={results}"]
    subprocess.run([*run[:4], "--multirun", "editor=identity,oracle,overedit", *run[4:]], check=True, cwd=ROOT)

    import numpy as np
    from openai_server import OpenAIServer
    from PIL import Image

    from benchmark.commands.arena import main as arena
    from benchmark.commands.run import compose
    from benchmark.plan.config import read_plan
    from benchmark.plan.preflight import load_queries

    qs = load_queries(read_plan(compose(["queryset=demo_mini"])[0]))
    targets = {}
    for q in qs:
        if q.target_image:
            src = np.asarray(Image.open(qs.path(q.image)).convert("RGB"), dtype=float)
            key = (hashlib.sha256(src.tobytes()).hexdigest(), q.instruction)  # a source serves several queries
            targets[key] = Image.open(qs.path(q.target_image)).convert("RGB")
    prompt = results / "arena_demo_prompt.txt"
    prompt.write_text(STAND_IN_PROMPT)
    sha = hashlib.sha256(prompt.read_bytes()).hexdigest()
    server = OpenAIServer(judge(targets), served="stand-in-judge")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings = ["queryset=demo_mini", f"paths.results={results}", f"arena.prompts_file={prompt}",
                f"arena.prompts_sha256={sha}", f"arena.judges.endpoint.base_url={server.url}",
                "arena.judges.endpoint.model=stand-in-judge"]
    try:
        print("\n== the arena of three editors ==", flush=True)
        if arena(settings):
            return 1
        print("\n== a fourth editor (tiny ip2p): only its pairs are judged ==", flush=True)
        subprocess.run([*run, "editor=ip2p"], check=True, cwd=ROOT)
        if arena(settings):
            return 1
        print("\n== again: nothing to judge ==", flush=True)
        if arena(settings):
            return 1
    finally:
        server.shutdown()
    print(f"\nstand-in judge: {server.calls} chat requests in all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
