"""Edit stage: run an editor over a query set into a content-addressed folder, resumably.

Layout of one run folder (`results/runs/<queryset>-<hash>/<editor>-<signature>/`):
    edits/<query id>.png   one image per successful query, written atomically (the PNG is the commit point)
    edits.jsonl            one record per attempt: status, seed, seconds, reason, run id

A rerun skips queries whose PNG exists and, unless `retry_failed`, queries recorded as failed. A PNG whose record
was lost (killed between rename and log append) gets a `recovered` record, never a recomputation.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from benchmark.editor import Editor, query_seed
from benchmark.fileio import append_jsonl, read_jsonl_tolerant
from benchmark.imageio import ImageInputError, load_rgb, save_png
from benchmark.querysets.io import QuerySet
from benchmark.types import EditRecord, Query

log = logging.getLogger(__name__)

EDITS_DIR = "edits"
EDITS_LOG = "edits.jsonl"
# zlib level for edited images. Measured on tiny-model outputs (256 px): level 6 (PIL's default) 17.6 ms per image,
# level 1 3.6 ms for 17% larger files. PIL's encoder holds the GIL, so a writer thread cannot hide the cost from a
# Python-heavy editor loop; making it cheap is what shrinks the stage overhead. Lossless either way.
EDIT_PNG_LEVEL = 1


@dataclass(frozen=True)
class EditStats:
    total: int
    computed: int
    skipped: int
    failed: int
    seconds: float


class InvalidOutput(ValueError):
    """An editor returned something that is not a usable edit for its query."""


def edit_path(run_dir: Path, query_id: str) -> Path:
    return run_dir / EDITS_DIR / f"{query_id}.png"


def latest_records(run_dir: Path) -> dict[str, dict]:
    """Last record per query id from `edits.jsonl`."""
    out: dict[str, dict] = {}
    for rec in read_jsonl_tolerant(run_dir / EDITS_LOG):
        out[rec["query_id"]] = rec
    return out


def validate_output(image: object, expected_size: tuple[int, int]) -> Image.Image:
    """Return a usable RGB image or raise InvalidOutput naming the defect."""
    if isinstance(image, np.ndarray):
        if np.issubdtype(image.dtype, np.floating) and not np.isfinite(image).all():
            raise InvalidOutput("output contains NaN or infinite values")
        raise InvalidOutput(f"editor returned a numpy array {image.shape}; the Editor contract asks for PIL images")
    if not isinstance(image, Image.Image):
        raise InvalidOutput(f"editor returned {type(image).__name__}, expected PIL.Image.Image")
    if image.mode != "RGB":
        raise InvalidOutput(f"editor returned mode {image.mode}, expected RGB")
    if image.size != expected_size:
        raise InvalidOutput(f"output is {image.size[0]}x{image.size[1]}, source is {expected_size[0]}x{expected_size[1]}")
    if np.asarray(image).max() == 0:
        raise InvalidOutput("all-black output (a NaN in the model, or a safety checker blanking it)")
    return image


class _SourceImages:
    """Map-style dataset: index -> (index, image or error message). Errors travel as data, not exceptions."""

    def __init__(self, queryset: QuerySet, queries: Sequence[Query]):
        self.queryset, self.queries = queryset, queries

    def __len__(self) -> int:
        return len(self.queries)

    def __getitem__(self, i: int) -> tuple[int, Image.Image | str]:
        try:
            return i, load_rgb(self.queryset.path(self.queries[i].image))
        except ImageInputError as err:
            return i, str(err)


def _batches(dataset: _SourceImages, batch_size: int, num_workers: int):
    from torch.utils.data import DataLoader

    return DataLoader(dataset, batch_size=batch_size, shuffle=False, num_workers=num_workers, collate_fn=list)


def run_edit_stage(
    queryset: QuerySet,
    editor: Editor,
    run_dir: Path,
    *,
    seed: int,
    batch_size: int = 8,
    num_workers: int = 0,
    retry_failed: bool = False,
    run_id: str = "",
    progress: bool = True,
) -> EditStats:
    """Edit every query that has no finished output yet; returns counts and wall time."""
    from tqdm import tqdm

    start = time.perf_counter()
    records = latest_records(run_dir)
    recovered, todo = [], []
    for q in queryset.queries:
        done = edit_path(run_dir, q.id).is_file()
        rec = records.get(q.id)
        if done:
            if rec is None or rec["status"] != "ok":
                recovered.append(EditRecord(q.id, "ok", query_seed(seed, q.id), run_id=run_id, recovered=True))
            continue
        if rec is not None and rec["status"] == "failed" and not retry_failed:
            continue
        todo.append(q)
    append_jsonl(run_dir / EDITS_LOG, [asdict(r) for r in recovered])
    skipped = len(queryset) - len(todo)
    computed = failed = 0
    editor_name = type(editor).__name__
    bar = tqdm(total=len(todo), desc=f"edit {editor_name}", unit="img", disable=not progress, leave=False)
    # PNG encoding runs on a writer thread while the next batch is edited (it is a large share of the time for
    # fast models). A batch's log lines are appended only after its PNGs exist: the PNG stays the commit point.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="edit-writer") as writer:
        pending = None
        for items in _batches(_SourceImages(queryset, todo), batch_size, num_workers) if todo else []:
            batch_records: list[EditRecord] = []
            ready: list[tuple[Query, Image.Image]] = []
            for i, image in items:
                q = todo[i]
                if isinstance(image, str):
                    batch_records.append(EditRecord(q.id, "failed", query_seed(seed, q.id), reason=image, run_id=run_id))
                else:
                    ready.append((q, image))
            writes: list[tuple[Image.Image, Path]] = []
            if ready:
                batch_records += _edit_batch(editor, ready, run_dir, seed=seed, run_id=run_id, writes=writes)
            if pending is not None:
                _commit(run_dir, *pending)
            pending = (writer.submit(_write_all, writes), batch_records)
            computed += len(batch_records)
            failed += sum(r.status == "failed" for r in batch_records)
            bar.update(len(items))
        if pending is not None:
            _commit(run_dir, *pending)
    bar.close()
    return EditStats(len(queryset), computed, skipped, failed, time.perf_counter() - start)


def _write_all(writes: list[tuple[Image.Image, Path]]) -> None:
    for image, path in writes:
        save_png(image, path, EDIT_PNG_LEVEL)


def _commit(run_dir: Path, written: Future, records: list[EditRecord]) -> None:
    """Wait for a batch's PNGs, then log its records (a write error propagates, as before)."""
    written.result()
    append_jsonl(run_dir / EDITS_LOG, [asdict(r) for r in records])


def _edit_batch(editor: Editor, ready: list[tuple[Query, Image.Image]], run_dir: Path, *, seed: int, run_id: str,
                writes: list[tuple[Image.Image, Path]] | None = None) -> list[EditRecord]:
    """Edit a batch; if the batch call fails, retry each query alone so one bad query cannot sink the others."""
    queries = [q for q, _ in ready]
    seeds = [query_seed(seed, q.id) for q in queries]
    t0 = time.perf_counter()
    try:
        editor.check_prompts(queries)
        outputs = editor.edit(queries, [im for _, im in ready], seeds=seeds)
        if not isinstance(outputs, list | tuple) or len(outputs) != len(queries):
            n = len(outputs) if isinstance(outputs, list | tuple) else type(outputs).__name__
            raise InvalidOutput(f"editor returned {n} outputs for {len(queries)} queries")
    except Exception as err:  # noqa: BLE001 - any editor error becomes a recorded failure
        if len(ready) > 1:
            out: list[EditRecord] = []
            for item in ready:
                out += _edit_batch(editor, [item], run_dir, seed=seed, run_id=run_id, writes=writes)
            return out
        q = queries[0]
        log.warning("edit failed for %s: %s: %s", q.id, type(err).__name__, err)
        return [EditRecord(q.id, "failed", seeds[0], reason=f"{type(err).__name__}: {err}", run_id=run_id)]
    per_item = (time.perf_counter() - t0) / len(queries)
    records = []
    for (q, source), s, image in zip(ready, seeds, outputs, strict=True):
        try:
            checked = validate_output(image, source.size)
            if writes is None:
                save_png(checked, edit_path(run_dir, q.id), EDIT_PNG_LEVEL)
            else:  # saved by the caller (writer thread) before this record is logged
                writes.append((checked, edit_path(run_dir, q.id)))
            records.append(EditRecord(q.id, "ok", s, seconds=per_item, run_id=run_id))
        except InvalidOutput as err:
            records.append(EditRecord(q.id, "failed", s, seconds=per_item, reason=f"InvalidOutput: {err}", run_id=run_id))
    return records
