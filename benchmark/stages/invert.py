"""The edit stage's inversion pass: invert each distinct source once, `batch_size` sources at a time, before editing.

For an editor that shares inversions between queries (it has `invert_sources` and an `inversion_store`, e.g. P2P),
the queries of one source need its inversion once. Inverting in the edit batches would optimise a batch of 8 queries
that hold only 2 or 3 sources (HATIE: 2.73 queries per source); inverting here first runs the optimisation on
`batch_size` distinct sources at a time, whatever a shard or a resume leaves, and the edit pass then reads every
inversion from the store. What cannot be inverted here (an unreadable source, a model error) is left to the edit
pass, which inverts it in its own batch and records any failure against the query, as for any editor.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from benchmark.editing.editor import Editor, query_seed
from benchmark.io.imageio import LIMITS, ImageInputError, load_rgb
from benchmark.io.types import Query
from benchmark.querysets.io import QuerySet

log = logging.getLogger(__name__)


def shares_inversions(editor: Editor) -> bool:
    """Whether `editor` inverts sources into a store the edit pass reads (the inversion pass applies)."""
    return hasattr(editor, "invert_sources") and getattr(editor, "inversion_store", None) is not None


def distinct_sources(queries: Sequence[Query]) -> list[Query]:
    """The first query of each distinct (source image, source caption), in selection order."""
    first: dict[tuple[str, str | None], Query] = {}
    for q in queries:
        first.setdefault((q.image, q.source_caption), q)
    return list(first.values())


def run_inversion_pass(queryset: QuerySet, editor: Editor, queries: Sequence[Query], *, seed: int, batch_size: int,
                       progress: bool = True, fail_fast: bool = False) -> int:
    """Store the inversion of every distinct source of `queries` that the store lacks; returns how many sources were
    handed to the editor (each is inverted only if the store lacks it)."""
    from tqdm import tqdm

    if not shares_inversions(editor):
        return 0
    claims = getattr(editor.inversion_store, "claims", None)
    if claims is not None:  # a killed worker's claim files: they claim nothing, and a person would think it stuck
        claims.remove_stale()
    sources = [q for q in distinct_sources(queries) if q.source_caption]
    bar = tqdm(total=len(sources), desc=f"invert sources {type(editor).__name__}", unit="src", disable=not progress,
               leave=False)
    handed = 0
    try:
        for start in range(0, len(sources), batch_size):
            chunk, images = [], []
            for q in sources[start:start + batch_size]:
                try:
                    image = load_rgb(queryset.path(q.image), min_side=LIMITS.min_source_side,
                                     max_pixels=LIMITS.max_pixels)
                    images.append(editor.prepare(image))
                    chunk.append(q)
                except (ImageInputError, OSError, ValueError) as err:
                    if fail_fast:
                        raise
                    log.debug("inversion pass: %s left to the edit pass (%s)", q.id, err)
            if chunk:
                try:
                    editor.invert_sources(chunk, images, seeds=[query_seed(seed, q.id) for q in chunk])
                    handed += len(chunk)
                except Exception as err:  # noqa: BLE001 - the edit pass inverts these again and records failures
                    if fail_fast:
                        raise
                    log.warning("inversion pass: %d source(s) from %s left to the edit pass: %s: %s", len(chunk),
                                chunk[0].id, type(err).__name__, err)
            bar.update(min(batch_size, len(sources) - start))
    finally:
        bar.close()
    return handed
