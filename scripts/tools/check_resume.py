"""Does an interrupted-and-resumed edit run give the PNGs of an uninterrupted one? Prints differing PNGs per editor.

    python scripts/tools/check_resume.py sdedit ip2p p2p diffedit [--n 8] [--batch-size 4] [--done 3]

For each editor (tiny profile, demo set): edit the first `n` queries uninterrupted, then simulate a kill after
`done` queries (later PNGs and records removed) and resume. Offline; writes only to a temp folder.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("editors", nargs="+")
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--done", type=int, default=3, help="queries finished before the simulated kill")
    args = ap.parse_args()
    from hydra.utils import instantiate

    from benchmark.commands.run import compose
    from benchmark.stages.edit import EDITS_LOG, edit_path, run_edit_stage

    for name in args.editors:
        cfg, _ = compose([f"editor={name}", "queryset=demo", "profile=tiny"])
        qs = instantiate(cfg.queryset).subset(args.n)
        editor = instantiate(cfg.editor)
        with tempfile.TemporaryDirectory() as tmp:
            whole, resumed = Path(tmp) / "whole", Path(tmp) / "resumed"
            run_edit_stage(qs, editor, whole, seed=0, batch_size=args.batch_size, progress=False)
            shutil.copytree(whole, resumed)
            for q in qs.queries[args.done:]:
                edit_path(resumed, q.id).unlink(missing_ok=True)
            log = resumed / EDITS_LOG
            log.write_text("".join(line + "\n" for line in log.read_text().splitlines()[:args.done]))
            run_edit_stage(qs, editor, resumed, seed=0, batch_size=args.batch_size, progress=False)
            differ = sum(edit_path(whole, q.id).read_bytes() != edit_path(resumed, q.id).read_bytes() for q in qs)
        print(f"{name}: {differ} of {len(qs)} PNGs differ after resuming at {args.done} (batch {args.batch_size})")


if __name__ == "__main__":
    main()
