"""`editmeter data build <name> [options]`: one builder per query set, each turning a downloaded (or placed) release
into a query set folder (docs/querysets.md). Each builder is a thin parser; the work is in benchmark/querysets/<name>.py,
imported only when that builder runs. A refusal (a missing input, a malformed release) prints one `error:` line and
exits 2.

    editmeter data build gedit --dataset datasets/gedit/downloads/train --out datasets/gedit
    editmeter data build hatie --queries ... --masks ... --images ... --out datasets/hatie
    editmeter data build demo                                  # regenerate datasets/demo and datasets/demo_sessions
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

PROG = "editmeter data build"


def _parser(name: str, description: str, epilog: str | None = None) -> argparse.ArgumentParser:
    return argparse.ArgumentParser(prog=f"{PROG} {name}", description=description, epilog=epilog,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def _report(meta: dict, *keys: str, ascii: bool = True) -> int:
    """Print the built set's `content_hash` and the given fields of its queryset.json as JSON; exit status 0."""
    print(json.dumps({k: meta[k] for k in ("content_hash", *keys)}, indent=2, ensure_ascii=ascii))
    return 0


def _error(err: BaseException, code: int = 2) -> int:
    print(f"error: {err}", file=sys.stderr)
    return code


def build_editval(argv: list[str]) -> int:
    ap = _parser("editval", BUILDERS["editval"][1], epilog="""\
    make data NAME=editval
    editmeter data build editval --editval datasets/editval/downloads/object.json \\
        --coco-annotations datasets/editval/downloads/annotations/instances_train2017.json \\
        --download-images --out datasets/editval      # or --images /path/to/coco/train2017""")
    ap.add_argument("--editval", type=Path, required=True, help="EditVal object.json")
    ap.add_argument("--coco-annotations", type=Path, required=True, help="instances_train2017.json")
    ap.add_argument("--images", type=Path, default=None, help="COCO train2017 image folder (files are copied)")
    ap.add_argument("--download-images", action="store_true", help="fetch the ~92 images from the COCO server")
    ap.add_argument("--out", type=Path, default=Path("datasets/editval"))
    args = ap.parse_args(argv)
    from benchmark.io.download import DownloadError, load_manifest, require_inputs
    from benchmark.querysets.editval import EditValFormatError, build

    url = load_manifest("editval").image_url if args.download_images else None
    try:
        require_inputs("editval", args.editval, args.coco_annotations, *([args.images] if args.images else []))
        meta = build(args.editval, args.coco_annotations, args.out, images_dir=args.images, image_url=url)
    except (EditValFormatError, DownloadError, FileNotFoundError) as err:
        return _error(err)
    print((args.out / "summary.md").read_text())
    return _report(meta, "counts")


def build_gedit(argv: list[str]) -> int:
    ap = _parser("gedit", BUILDERS["gedit"][1], epilog="""\
    make data NAME=gedit             # saves the train split to datasets/gedit/downloads/train
    editmeter data build gedit --dataset datasets/gedit/downloads/train --out datasets/gedit \\
        [--image input_image_raw]""")
    ap.add_argument("--dataset", required=True, help="folder written by save_to_disk, or a hub id")
    ap.add_argument("--split", default="train", help="the release has one split, train (its test samples)")
    ap.add_argument("--revision", default=None, help="hub commit when --dataset is a hub id (recorded)")
    ap.add_argument("--image", choices=("input_image", "input_image_raw"), default="input_image",
                    help="source image: the release's resized one (what its scorer compares with) or the raw upload")
    ap.add_argument("--out", type=Path, default=Path("datasets/gedit"))
    args = ap.parse_args(argv)
    from benchmark.io.download import HUB_ID, require_inputs
    from benchmark.querysets.gedit import GEditFormatError, build

    try:
        if not HUB_ID.match(args.dataset):  # a hub id is read from the hub, a folder must exist
            require_inputs("gedit", args.dataset)
        meta = build(args.dataset, args.out, split=args.split, image=args.image, revision=args.revision)
    except (GEditFormatError, FileNotFoundError) as err:
        return _error(err)
    return _report(meta, "counts", ascii=False)


def load_callable(spec: str | None):
    """'package.module:function' -> the function (None stays None)."""
    if not spec:
        return None
    import importlib

    module, _, name = spec.partition(":")
    if not name:
        raise ValueError(f"{spec!r}: expected 'module:function'")
    return getattr(importlib.import_module(module), name)


def build_gqa_hatie(argv: list[str]) -> int:
    ap = _parser("gqa_hatie", BUILDERS["gqa_hatie"][1], epilog="""\
    make data NAME=gqa_hatie
    editmeter data build gqa_hatie --scene-graphs datasets/gqa_hatie/downloads/train_sceneGraphs.json \\
        --images datasets/gqa_hatie/downloads/images --out datasets/gqa_hatie [--per-type 7000] [--workers 2]

The detector check, the CLIP background ranking and the occlusion VQA filter are off unless given as
`module:function` callables (see benchmark/querysets/gqa.py for their signatures). The scoring suite's models:
    --mask-fn benchmark.models.segmenter:detector_masks     (IoU >= 0.5 between GQA box and segmenter mask)
    --scorer  benchmark.models.clip:background_scores        (bg_chg: the half least CLIP-aligned backgrounds)
    --vqa-fn  benchmark.models.vqa:occlusion_vqa             (App. A occlusion filter)
They load real weights; EDITMETER_WEIGHTS=tiny uses the random stand-ins (tests).""")
    ap.add_argument("--scene-graphs", type=Path, required=True, help="GQA *_sceneGraphs.json")
    ap.add_argument("--images", type=Path, required=True, help="folder of <image_id>.jpg")
    ap.add_argument("--out", type=Path, default=Path("datasets/gqa_hatie"))
    ap.add_argument("--per-type", type=int, default=None, help="queries per edit type (balanced over classes)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--max-images", type=int, default=None, help="scan only the first N images")
    ap.add_argument("--mask-fn", help="detector check: module:function(image, boxes, classes) -> masks")
    ap.add_argument("--scorer", help="background ranking: module:function(image, texts) -> scores")
    ap.add_argument("--vqa-fn", help="occlusion filter: module:function(image, question) -> P(yes)")
    args = ap.parse_args(argv)
    from benchmark.io.download import require_inputs
    from benchmark.querysets.gqa import BuildConfig, GQAFormatError, Materializer, build

    cfg = BuildConfig(seed=args.seed, queries_per_type=args.per_type, workers=args.workers, max_images=args.max_images)
    try:
        require_inputs("gqa_hatie", args.scene_graphs, args.images)
        m = Materializer(out_dir=args.out, images_dir=args.images, seed=args.seed, mask_fn=load_callable(args.mask_fn),
                         scorer=load_callable(args.scorer), vqa_fn=load_callable(args.vqa_fn))
        meta = build(args.scene_graphs, args.out, cfg=cfg, materializer=m)
    except (GQAFormatError, ValueError, FileNotFoundError, ImportError, AttributeError) as err:
        return _error(err)
    print((args.out / "summary.md").read_text())
    return _report(meta, "counts", "filters", "timings")


def build_imgedit(argv: list[str]) -> int:
    ap = _parser("imgedit", BUILDERS["imgedit"][1], epilog="""\
    make data NAME=imgedit           # fetches basic_edit.json and prompts.json (pinned), unpacks Benchmark.tar
    editmeter data build imgedit --edits datasets/imgedit/downloads/basic_edit.json \\
        --images datasets/imgedit/downloads --out datasets/imgedit

--images is the unpacked archive: the folder that holds the sources' category folders (animal/, style/, ...), or a
folder at most three levels above it.""")
    ap.add_argument("--edits", type=Path, required=True, help="Benchmark/Basic/basic_edit.json of the release")
    ap.add_argument("--images", type=Path, required=True, help="the unpacked Benchmark.tar (the sources' root)")
    ap.add_argument("--out", type=Path, default=Path("datasets/imgedit"))
    args = ap.parse_args(argv)
    from benchmark.querysets.imgedit import ImgEditFormatError, build

    try:
        meta = build(args.edits, args.images, args.out)
    except ImgEditFormatError as err:
        return _error(err)
    return _report(meta, "full_release", "counts")


def build_kris(argv: list[str]) -> int:
    ap = _parser("kris", BUILDERS["kris"][1], epilog="""\
    huggingface-cli download --repo-type dataset Liang0223/KRIS_Bench --local-dir datasets/kris/downloads
    editmeter data build kris --release datasets/kris/downloads/KRIS_Bench --out datasets/kris""")
    ap.add_argument("--release", required=True, help="the release's KRIS_Bench/ folder (one folder per task)")
    ap.add_argument("--out", type=Path, default=Path("datasets/kris"))
    args = ap.parse_args(argv)
    from benchmark.io.download import require_inputs
    from benchmark.querysets.kris import KrisFormatError, build

    try:
        require_inputs("kris", args.release)
        meta = build(args.release, args.out)
    except (KrisFormatError, FileNotFoundError) as err:
        return _error(err)
    for task, n in meta["counts"]["skipped"].items():
        print(f"skipped {n} entries of {task}: {meta['counts']['skipped_reason'][task]}", file=sys.stderr)
    return _report(meta, "counts", ascii=False)


def build_magicbrush(argv: list[str]) -> int:
    ap = _parser("magicbrush", BUILDERS["magicbrush"][1], epilog="""\
    make data NAME=magicbrush        # saves the dev split to datasets/magicbrush/downloads/dev
    editmeter data build magicbrush --dataset datasets/magicbrush/downloads/dev --split dev \\
        --out datasets/magicbrush [--turns all] [--captions <split folder>/global_descriptions.json]""")
    ap.add_argument("--dataset", required=True, help="folder written by save_to_disk, or a hub id")
    ap.add_argument("--split", default="dev", help="dev or test (test: a local dataset with the same features)")
    ap.add_argument("--turns", choices=("first", "all"), default="first")
    ap.add_argument("--captions", type=Path, default=None,
                    help="global_descriptions.json of the split (the test split has one): source and target captions, "
                         "the text MagicBrush's CLIP-T uses")
    ap.add_argument("--out", type=Path, default=Path("datasets/magicbrush"))
    args = ap.parse_args(argv)
    from benchmark.io.download import HUB_ID, require_inputs
    from benchmark.querysets.magicbrush import MagicBrushFormatError, build

    try:
        if not HUB_ID.match(args.dataset):  # a hub id is read from the hub, a folder must exist
            require_inputs("magicbrush", args.dataset)
        meta = build(args.dataset, args.out, split=args.split, turns=args.turns, captions=args.captions)
    except (MagicBrushFormatError, FileNotFoundError) as err:
        return _error(err)
    return _report(meta, "counts")


def build_pie(argv: list[str]) -> int:
    ap = _parser("pie", BUILDERS["pie"][1], epilog="""\
    make data NAME=pie               # prints how to get the release (the authors' form) and checks the files
    editmeter data build pie --data datasets/pie/downloads --out datasets/pie

--data is the release's `data` folder: mapping_file.json and annotation_images/.""")
    ap.add_argument("--data", type=Path, required=True, help="folder holding mapping_file.json and annotation_images/")
    ap.add_argument("--out", type=Path, default=Path("datasets/pie"))
    args = ap.parse_args(argv)
    from benchmark.querysets.pie import PieFormatError, build

    try:
        meta = build(args.data, args.out)
    except PieFormatError as err:
        return _error(err)
    return _report(meta, "full_release", "counts")


def build_rise(argv: list[str]) -> int:
    ap = _parser("rise", BUILDERS["rise"][1], epilog="""\
    make data NAME=rise      # RISEBench-360: datav2_total_w_subtask.json and data.zip (unpacked) of PhoenixZ/RISEBench
    editmeter data build rise --data datasets/rise/downloads/datav2_total_w_subtask.json --out datasets/rise

    # RISEBench-64, the repository's subset: data/data_total.json of a PhoenixZ810/RISEBench checkout
    editmeter data build rise --data path/to/RISEBench/data/data_total.json --out datasets/rise64

--images is the folder that holds <category>_images/; by default the JSON file's folder or its data/ subfolder.""")
    ap.add_argument("--data", type=Path, required=True, help="the release's JSON list of samples")
    ap.add_argument("--images", type=Path, default=None, help="the folder holding <category>_images/")
    ap.add_argument("--out", type=Path, default=Path("datasets/rise"))
    ap.add_argument("--name", default="rise", help="the query set's name")
    args = ap.parse_args(argv)
    from benchmark.querysets.rise import RiseFormatError, build

    try:
        meta = build(args.data, args.out, images=args.images, name=args.name)
    except RiseFormatError as err:
        return _error(err)
    return _report(meta, "release", "counts")


def build_hatie(argv: list[str]) -> int:
    ap = _parser("hatie", BUILDERS["hatie"][1], epilog="""\
    make data NAME=hatie   # the files are placed by hand; the command checks they are there
    editmeter data build hatie --queries datasets/hatie/downloads/queries_w_remove.pkl \\
        --masks datasets/hatie/downloads/editable_objs_mask.pkl --images datasets/hatie/downloads/images \\
        --out datasets/hatie""")
    ap.add_argument("--queries", type=Path, required=True, help="queries_w_remove.pkl or queries_wo_remove.pkl")
    ap.add_argument("--masks", type=Path, required=True, help="editable_objs_mask.pkl")
    ap.add_argument("--images", type=Path, required=True, help="folder of <image_id>.jpg from the release")
    ap.add_argument("--out", type=Path, default=Path("datasets/hatie"))
    args = ap.parse_args(argv)
    from benchmark.io.download import require_inputs
    from benchmark.io.safe_pickle import UnsafePickleError
    from benchmark.querysets.hatie import HatieFormatError, import_release

    try:
        require_inputs("hatie", args.queries, args.masks, args.images)
        meta = import_release(args.queries, args.masks, args.images, args.out)
    except (HatieFormatError, UnsafePickleError, FileNotFoundError) as err:
        return _error(err, code=2)  # a refusal, as every builder's
    return _report(meta, "counts")


def build_demo(argv: list[str]) -> int:
    from benchmark.io.provenance import PROJECT_ROOT
    from benchmark.querysets.demo import DEMO_IMAGES, DEMO_SEED, DEMO_SIZE

    ap = _parser("demo", BUILDERS["demo"][1], epilog="""\
    editmeter data build demo [--out datasets/demo] [--sessions-out datasets/demo_sessions]""")
    ap.add_argument("--out", type=Path, default=PROJECT_ROOT / "datasets" / "demo")
    ap.add_argument("--images", type=int, default=DEMO_IMAGES)
    ap.add_argument("--size", type=int, default=DEMO_SIZE)
    ap.add_argument("--seed", type=int, default=DEMO_SEED)
    ap.add_argument("--sessions-out", type=Path, default=PROJECT_ROOT / "datasets" / "demo_sessions")
    args = ap.parse_args(argv)
    import shutil

    from benchmark.querysets import demo_sessions
    from benchmark.querysets.demo import build

    for sub in ("images", "masks", "targets", "edit_masks"):
        shutil.rmtree(args.out / sub, ignore_errors=True)
    build(args.out, n_images=args.images, size=args.size, seed=args.seed)
    print(f"wrote {args.out}")
    for sub in ("images", "targets", "edit_masks"):
        shutil.rmtree(args.sessions_out / sub, ignore_errors=True)
    demo_sessions.build(args.sessions_out, args.out)
    print(f"wrote {args.sessions_out}")
    return 0


# name -> (builder, one line: what it builds from what); the order of `editmeter data build`'s list
BUILDERS: dict[str, tuple[Callable[[list[str]], int], str]] = {
    "demo": (build_demo, "Regenerate the bundled demo query sets (datasets/demo/ and its sessions, "
                         "datasets/demo_sessions/) deterministically."),
    "gqa_hatie": (build_gqa_hatie, "Build the HATIE-style query set from GQA scene graphs and images "
                                   "(queryset=gqa_hatie)."),
    "hatie": (build_hatie, "Import the released HATIE set (queryset=hatie) from its pickles, through the restricted "
                           "unpickler."),
    "editval": (build_editval, "Build the EditVal query set (queryset=editval) from object.json and COCO train2017 "
                               "annotations."),
    "magicbrush": (build_magicbrush, "Build the MagicBrush query set (queryset=magicbrush) from a saved Hugging Face "
                                     "dataset (or a hub id)."),
    "gedit": (build_gedit, "Build the GEdit-Bench query set (queryset=gedit) from a saved Hugging Face dataset "
                           "(or a hub id)."),
    "pie": (build_pie, "Build the PIE-Bench query set (queryset=pie) from the authors' release folder."),
    "imgedit": (build_imgedit, "Build the ImgEdit-Bench Basic query set (queryset=imgedit) from the release's "
                               "basic_edit.json and the sources."),
    "kris": (build_kris, "Build the KRIS-Bench query set (queryset=kris) from a local copy of the release's "
                         "KRIS_Bench/ folder."),
    "rise": (build_rise, "Build the RISEBench query set (queryset=rise) from a local copy of either release."),
}


def usage() -> str:
    width = max(map(len, BUILDERS)) + 2
    lines = [f"usage: {PROG} <name> [options]   (`{PROG} <name> --help` for a builder's options)", "", "builders:"]
    lines += [f"  {name:<{width}}{text}" for name, (_, text) in BUILDERS.items()]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """`editmeter data build <name> ...`: run one builder. No name, or an unknown one: the list, exit 2."""
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in BUILDERS:
        print(f"error: unknown builder {name!r}; choose from: {', '.join(BUILDERS)}\n\n{usage()}", file=sys.stderr)
        return 2
    return BUILDERS[name][0](rest)
