"""Time and peak memory of every importer on synthetic releases of N entries (docs/querysets.md, "Importer scale").

    python scripts/bench/bench_importers.py --n 1000 10000 100000 [--importers pie imgedit gedit magicbrush tiger genai]

Each release is written to a temporary folder first (not timed); each build then runs in a fresh process, which
reports its wall time and its peak resident memory (ru_maxrss). PIE entries share one 512 x 512 source file (the
build decodes, checks and writes each entry's); ImgEdit entries each have a distinct 40 x 32 source (the case that
was quadratic); GEdit and MagicBrush rows carry 32 x 32 PNG cells; the judge sets reference shared images.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IMPORTERS = ("pie", "imgedit", "gedit", "magicbrush", "tiger", "genai")


def _png(colour: tuple[int, int, int], size: tuple[int, int] = (32, 32)) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, colour).save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


def make_pie(tmp: Path, n: int) -> list[str]:
    from PIL import Image

    data = tmp / "data"
    (data / "annotation_images" / "0_random").mkdir(parents=True)
    Image.new("RGB", (512, 512), (90, 120, 150)).save(data / "annotation_images" / "0_random" / "src.png")
    mapping = {f"{i:012d}": {"image_path": "0_random/src.png", "original_prompt": f"a [cat] {i}",
                             "editing_prompt": f"a [dog] {i}", "editing_instruction": "make it a dog",
                             "editing_type_id": str(i % 10), "blended_word": "cat dog",
                             "mask": [1000 + i % 500, 3000, 90000, 20000]} for i in range(n)}
    (data / "mapping_file.json").write_text(json.dumps(mapping))
    return ["pie", str(data), str(tmp / "out")]


def make_imgedit(tmp: Path, n: int) -> list[str]:
    from PIL import Image

    images = tmp / "unpacked"
    types = ("add", "adjust", "extract", "replace", "remove", "background", "style", "compose", "action")
    edits = {}
    for i in range(n):
        rel = f"cat{i % 100}/{i:07d}.png"
        (images / rel).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (40, 32), (i % 256, (i // 256) % 256, (i // 65536) % 256)).save(images / rel,
                                                                                         compress_level=1)
        edits[str(i + 1)] = {"id": rel, "prompt": f"edit {i}", "edit_type": types[i % len(types)]}
    (tmp / "basic_edit.json").write_text(json.dumps(edits))
    return ["imgedit", str(tmp / "basic_edit.json"), str(images), str(tmp / "out")]


def _save_hub(path: Path, columns: dict[str, list], kinds: dict[str, str]) -> None:
    import datasets

    feats = {k: ({"bytes": datasets.Value("binary"), "path": datasets.Value("string")} if v == "image"
                 else datasets.Value(v)) for k, v in kinds.items()}
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(columns, features=datasets.Features(feats))}
                         ).save_to_disk(str(path))


def make_gedit(tmp: Path, n: int) -> list[str]:
    tasks = ("background_change", "color_alter", "material_alter", "motion_change", "ps_human", "style_change",
             "subject-add", "subject-remove", "subject-replace", "text_change", "tone_transfer")
    pics = [{"bytes": _png((i, 7, 9)), "path": None} for i in range(256)]
    cols = {"key": [f"k{i // 2}" for i in range(n)], "task_type": [tasks[(i // 2) % len(tasks)] for i in range(n)],
            "instruction": [f"edit {i}" for i in range(n)], "instruction_language": ["en", "cn"] * (n // 2) + ["en"] * (n % 2),
            "input_image": [pics[(i // 2) % 256] for i in range(n)], "input_image_raw": [pics[0]] * n,
            "Intersection_exist": [i % 3 == 0 for i in range(n)]}
    kinds = {"key": "string", "task_type": "string", "instruction": "string", "instruction_language": "string",
             "input_image": "image", "input_image_raw": "image", "Intersection_exist": "bool"}
    _save_hub(tmp / "hf", cols, kinds)
    return ["gedit", str(tmp / "hf"), str(tmp / "out")]


def make_magicbrush(tmp: Path, n: int) -> list[str]:
    from PIL import Image

    mask = Image.new("RGB", (32, 32))
    mask.paste((255, 255, 255), (4, 4, 12, 12))
    buf = io.BytesIO()
    mask.save(buf, format="PNG")
    m = {"bytes": buf.getvalue(), "path": None}
    src, tgt = {"bytes": _png((10, 20, 30)), "path": None}, {"bytes": _png((200, 20, 30)), "path": None}
    cols = {"img_id": [str(100000 + i) for i in range(n)], "turn_index": [1] * n, "source_img": [src] * n,
            "mask_img": [m] * n, "instruction": [f"edit {i}" for i in range(n)], "target_img": [tgt] * n}
    kinds = {"img_id": "string", "turn_index": "int32", "source_img": "image", "mask_img": "image",
             "instruction": "string", "target_img": "image"}
    _save_hub(tmp / "hf", cols, kinds)
    return ["magicbrush", str(tmp / "hf"), str(tmp / "out")]


def make_tiger(tmp: Path, n: int) -> list[str]:
    folder = tmp / "tiger"
    (folder / "images").mkdir(parents=True)
    for i in range(4):
        (folder / "images" / f"{i}.png").write_bytes(_png((40 * i, 9, 9), (16, 16)))
    items = [{"prompt": f"p{i}", "path_src": "images/0.png", "paths_generated": ["images/1.png", "images/2.png"],
              "human_vote": {"ranking": ("A>B", "B>A", "A=B=Good")[i % 3]}} for i in range(n)]
    (folder / "EditReward_Bench_2pair.json").write_text(json.dumps(items))
    return ["tiger", str(folder)]


def make_genai(tmp: Path, n: int) -> list[str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    img = {"bytes": _png((5, 6, 7), (16, 16)), "path": "x.png"}
    votes = ("leftvote", "rightvote", "tievote", "bothbad_vote")
    rows = [{"instruct_prompt": f"p{i}", "source_image": img, "left_output_image": img, "right_output_image": img,
             "vote_type": votes[i % 4]} for i in range(n)]
    pq.write_table(pa.Table.from_pylist(rows), tmp / "genai.parquet")
    return ["genai", str(tmp / "genai.parquet")]


def run_one(argv: list[str]) -> None:
    """In the child: run one importer, print {seconds, peak_rss_mb, queries}."""
    kind, *args = argv
    start = time.perf_counter()
    if kind == "pie":
        from benchmark.querysets.pie import build
        count = build(args[0], args[1])["counts"]["queries"]
    elif kind == "imgedit":
        from benchmark.querysets.imgedit import build
        count = build(args[0], args[1], args[2])["counts"]["queries"]
    elif kind == "gedit":
        from benchmark.querysets.gedit import build
        count = build(args[0], args[1])["counts"]["queries"]
    elif kind == "magicbrush":
        from benchmark.querysets.magicbrush import build
        count = build(args[0], args[1], split="train")["counts"]["queries"]
    elif kind == "tiger":
        from benchmark.commands.metaeval.judges import read_tiger
        count = len(read_tiger(Path(args[0])).groups)
    else:
        from benchmark.commands.metaeval.judges import read_genai
        count = len(read_genai(Path(args[0])).groups)
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": round(seconds, 2), "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                      // 1024, "queries": count}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--importers", nargs="+", choices=IMPORTERS, default=list(IMPORTERS))
    ap.add_argument("--one", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        run_one(args.one)
        return 0
    makers = {"pie": make_pie, "imgedit": make_imgedit, "gedit": make_gedit, "magicbrush": make_magicbrush,
              "tiger": make_tiger, "genai": make_genai}
    print("| importer | entries | seconds | seconds per 1k | peak RSS (MB) |\n|---|---|---|---|---|", flush=True)
    for kind in args.importers:
        for n in args.n:
            tmp = Path(tempfile.mkdtemp(prefix=f"bench-{kind}-"))
            try:
                child = makers[kind](tmp, n)
                done = subprocess.run([sys.executable, __file__, "--one", *child], capture_output=True, text=True,
                                      env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
                if done.returncode:
                    print(f"| {kind} | {n} | failed: {done.stderr.strip().splitlines()[-1][:200]} | | |", flush=True)
                    continue
                r = json.loads(done.stdout.strip().splitlines()[-1])
                print(f"| {kind} | {n:,} | {r['seconds']} | {1000 * r['seconds'] / n:.3f} | {r['peak_rss_mb']} |",
                      flush=True)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
