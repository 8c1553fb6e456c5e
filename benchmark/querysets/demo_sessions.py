"""The demo world's multi-turn sessions (`queryset=demo_sessions`): MagicBrush's shape, rendered exactly, offline.

A few demo scenes each get a session of 2-3 edits applied one after another: turn t's source is the exact render of
the scene after turns 1..t-1 (what MagicBrush gives as turn t's input: the previous turn's ground truth), its target
the render after turns 1..t, its edit mask the pixels the edit may change. Queries are `free_form` like
MagicBrush's, with instruction, captions and `session` / `turn`. The set lives in its own folder
(datasets/demo_sessions), built from the demo's scene graphs, so the demo's own queries, files and hashes are
untouched. `editmeter data build demo` writes both; a test checks the bundled files against a fresh build.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmark.io.types import ObjectRef, Query
from benchmark.querysets import demo

# (scene, edits in turn order): 2-3 turns per session; `style` renders the whole image, so it only ends a session
SESSIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("demo000", ("color", "background", "remove")),
    ("demo001", ("background", "color")),
    ("demo002", ("remove", "color", "background")),
    ("demo003", ("color", "style")),
)


def session_id(scene: str) -> str:
    """The session id of the demo scene `scene`'s session (its queries are `<session id>-t<turn>`)."""
    return f"{scene}-session"


def _step(graph: dict[str, Any], kind: str, scene: str) -> Query:
    """The demo query of one edit of `graph`, chosen without randomness: the lowest-numbered object's colour (to the
    first other colour), the background (to the first other location), the highest-numbered object removed, or the
    first style."""
    objs = graph["objects"]
    ids = sorted(objs, key=int)
    probe = {"id": "probe", "image": "x", "image_id": scene}
    if kind == "color":
        oid = ids[0]
        before = demo._color_of(objs[oid])
        after = next(c for c in demo.COLORS if c != before)
        ref = ObjectRef(id=oid, name=objs[oid]["name"], mask="x")
        return Query(**probe, edit_type="attr_chg", target=ref, attribute_before=before, attribute_after=after,
                     instruction=f"Change the color of the {objs[oid]['name']} to {after}.")
    if kind == "background":
        bg = next(b for b in demo.BACKGROUNDS if b != graph["location"])
        return Query(**probe, edit_type="bg_chg", background=bg, instruction=f"Change the background to a {bg}.")
    if kind == "remove":
        if len(ids) < 2:
            raise ValueError(f"demo session of {scene}: a remove step needs a scene with two objects left")
        oid = ids[-1]
        return Query(**probe, edit_type="obj_remove", target=ObjectRef(id=oid, name=objs[oid]["name"], mask="x"),
                     instruction=f"Remove the {objs[oid]['name']}.")
    if kind == "style":
        style = demo.STYLES[0]
        return Query(**probe, edit_type="style_chg", style=style,
                     instruction=f"Make it look like {demo._article(style)} {style}.")
    raise ValueError(f"unknown demo session step {kind!r}")


def session_queries(graphs: dict[str, Any]) -> list[tuple[Query, Any, Any, Any]]:
    """Every turn of `SESSIONS` as (query, source pixels, target pixels, edit mask), sessions in order."""
    import numpy as np

    out = []
    for scene, steps in SESSIONS:
        graph, style = graphs[scene], None
        for t, kind in enumerate(steps, start=1):
            if style is not None:
                raise ValueError(f"demo session of {scene}: a style edit must be the last turn")
            step = _step(graph, kind, scene)
            edited, style = demo.apply_edit(graph, step)
            qid = f"{session_id(scene)}-t{t}"
            source, target = demo.render(graph), demo.render(edited, style)
            mask = demo.edit_region(graph, edited, step)
            if not (source != target).any() or ((source != target).any(axis=2) & ~mask).any():
                raise ValueError(f"{qid}: the edit changes nothing, or changes pixels outside its mask")
            q = Query(id=qid, image=f"images/{qid}.png", image_id=scene, edit_type="free_form",
                      instruction=step.instruction, edit_mask=f"edit_masks/{qid}.png",
                      target_image=f"targets/{qid}.png", source_caption=demo._caption(graph),
                      target_caption=demo._caption(edited, style), session=session_id(scene), turn=t)
            out.append((q, source, target, np.asarray(mask)))
            graph = edited
    return out


def build(out_dir: Path, demo_root: Path) -> Path:
    """Write the sessions set into `out_dir` from the scene graphs of the demo set in `demo_root`."""
    from PIL import Image

    from benchmark.io.fileio import atomic_write_text
    from benchmark.io.imageio import save_mask, save_png
    from benchmark.io.types import SCHEMA_VERSION
    from benchmark.querysets.io import META_FILE, check_sessions, write_queries

    out_dir = Path(out_dir)
    graphs = demo.load_scene_graphs(Path(demo_root) / "scene_graphs.json")
    made = session_queries(graphs)
    queries = [q for q, *_ in made]
    check_sessions(queries)
    for q, source, target, mask in made:
        save_png(Image.fromarray(source), out_dir / q.image)
        save_png(Image.fromarray(target), out_dir / q.target_image)
        save_mask(mask, out_dir / q.edit_mask)
    write_queries(out_dir / "queries.jsonl", queries)
    meta = {
        "name": "demo_sessions",
        "schema_version": SCHEMA_VERSION,
        "description": "Multi-turn sessions in the demo world (MagicBrush's shape: turn t's source is the exact "
                       "result of turns 1..t-1). Regenerate with `editmeter data build demo`.",
        "license": "CC0-1.0 (generated by editmeter)",
        "generator": {"module": "benchmark.querysets.demo_sessions",
                      "sessions": [[scene, list(steps)] for scene, steps in SESSIONS]},
    }
    atomic_write_text(out_dir / META_FILE, json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return out_dir
