"""The query loop every metric suite shares: queries sorted by source image (so an original's features are reused
while they are in the cache), loaded by DataLoader workers, scored chunk by chunk, one row per query."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from benchmark.io.types import Query
from benchmark.metrics.memo import Memo

SOURCE_MEMO = 4  # decoded originals (and what is made from them) kept per loader: queries arrive sorted by source


def check_loading(load_threads: Any, prefetch: Any) -> tuple[int, bool]:
    """A suite's loading settings, checked (a typo such as `prefetch=yes` stops the run before any work):
    (loader threads, None giving `default_load_threads()`; prefetch)."""
    if load_threads is not None and (isinstance(load_threads, bool) or not isinstance(load_threads, int)
                                     or load_threads < 1):
        raise ValueError(f"load_threads must be a positive integer or null (one per core, at most 4), got "
                         f"{load_threads!r}")
    if not isinstance(prefetch, bool):
        raise ValueError(f"prefetch must be true or false, got {prefetch!r}")
    return (default_load_threads() if load_threads is None else load_threads), prefetch


def by_source(queries: Sequence[Query], edit_paths: Sequence[Path]) -> tuple[list[Query], list[Path]]:
    """Queries and their edit paths, ordered by (source image, query id)."""
    order = sorted(range(len(queries)), key=lambda i: (queries[i].image, queries[i].id))
    return [queries[i] for i in order], [edit_paths[i] for i in order]


def load_chunks(samples: Any, chunk_size: int, threads: int, *, prefetch: bool = False) -> Iterator[Any]:
    """The items of `samples` (a map-style dataset), in order, each chunk of `chunk_size` items loaded by `threads`
    threads together (PNG decoding, PIL resizes, hashing and array copies release the GIL, so a chunk loads on
    several cores). By default a chunk is loaded when its first item is asked for, not ahead: on a CPU its loading
    would only compete with the scoring of the previous chunk for the cores. `prefetch`: the next chunk starts
    loading when a chunk's first item is handed out, so it loads while that chunk is scored (what a GPU leaves the
    host's cores free for); the items and their order are the same."""
    from concurrent.futures import ThreadPoolExecutor

    starts = range(0, len(samples), chunk_size)

    def submit(pool: Any, start: int) -> list[Any]:
        return [pool.submit(samples.__getitem__, i) for i in range(start, min(start + chunk_size, len(samples)))]

    with ThreadPoolExecutor(max(1, threads), thread_name_prefix="editmeter-load") as pool:
        chunk: list[Any] = []
        ahead: list[Any] | None = None
        try:
            for k, start in enumerate(starts):
                chunk = ahead if ahead is not None else submit(pool, start)
                ahead = submit(pool, starts[k + 1]) if prefetch and k + 1 < len(starts) else None
                for future in chunk:
                    yield future.result()
        finally:  # a loop that stops early (an error, ^C) does not wait for loads nobody will read
            for future in (*chunk, *(ahead or ())):
                future.cancel()


def query_loader(samples: Any, *, chunk_size: int, num_workers: int = 0, load_threads: int | None = None,
                 prefetch: bool = False) -> Any:
    """The iterable of `samples`' items, in order, that a chunked scoring loop reads: DataLoader workers that load
    ahead when `num_workers` > 0; else each chunk loaded on `load_threads` threads (None: `default_load_threads()`)
    when asked for, or one chunk ahead with `prefetch` (`load_chunks`); else one by one in this process."""
    from torch.utils.data import DataLoader

    threads = default_load_threads() if load_threads is None else int(load_threads)
    if num_workers == 0 and (threads > 1 or prefetch):
        return load_chunks(samples, chunk_size, threads, prefetch=prefetch)
    return DataLoader(samples, batch_size=None, shuffle=False, num_workers=num_workers)


def default_load_threads() -> int:
    """Loader threads when none are configured: one per core, at most 4 (decoding a chunk scales to about that)."""
    import os

    return max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


def score_in_chunks(samples: Any, score: Callable[[list[Any]], list[dict[str, Any]]], *, chunk_size: int, desc: str,
                    num_workers: int = 0, progress: bool = True, timings: dict[str, float] | None = None,
                    load_threads: int | None = None, prefetch: bool = False) -> Iterator[list[dict[str, Any]]]:
    """Yield `score(chunk)` for consecutive chunks of `samples` (a map-style dataset of loaded queries, read in
    order), with a progress bar named `desc`. `timings["load images"]` accumulates the seconds spent waiting for
    loaded queries (decoding in this process, or waiting on the workers): the bench scripts' first step.
    Without DataLoader workers a chunk loads on `load_threads` threads (None: `default_load_threads()`), the way
    HATIE loads its chunks: same items, same order; only the loading is shared across cores. `prefetch`: those
    threads load the next chunk while `score` runs on the current one (for a GPU; `load_chunks`)."""
    import time

    from tqdm import tqdm

    loader = query_loader(samples, chunk_size=chunk_size, num_workers=num_workers, load_threads=load_threads,
                          prefetch=prefetch)
    bar = tqdm(total=len(samples), desc=desc, unit="query", disable=not progress, leave=False)
    chunk: list[Any] = []
    items, t0 = iter(loader), time.perf_counter()
    for item in items:
        if timings is not None:
            timings["load images"] = timings.get("load images", 0.0) + time.perf_counter() - t0
        chunk.append(item)
        if len(chunk) >= chunk_size:
            yield score(chunk)
            bar.update(len(chunk))
            chunk = []
        t0 = time.perf_counter()
    if chunk:
        yield score(chunk)
        bar.update(len(chunk))
    bar.close()


class QuerySamples:
    """Map-style dataset of the loaded inputs of each query (read in DataLoader workers). Subclasses say what an
    item holds (`item`) and how it is filled (`load`); a file that cannot be read or decoded becomes the item's
    `error` (a failure row with the reason), never an exception that ends the run."""

    def __init__(self, queryset: Any, queries: Sequence[Query], edit_paths: Sequence[Path]) -> None:
        self.queryset, self.queries, self.edit_paths = queryset, queries, edit_paths
        # what is made from an original, once for all of its queries (they arrive together, sorted by source);
        # keyed by the query set's file path, which a run does not change
        self.sources = Memo(SOURCE_MEMO)

    def __len__(self) -> int:
        return len(self.queries)

    def __getitem__(self, i: int) -> Any:
        from benchmark.io.imageio import ImageInputError

        q = self.queries[i]
        out = self.item(q)
        try:
            self.load(out, q, Path(self.edit_paths[i]))
        except (ImageInputError, OSError) as err:
            out.error = str(err)
        return out

    def original(self, query: Query, make: Callable[[Any], Any]) -> Any:
        """`make(decoded original)` for the query's source image, made once for all of its queries (`sources`); a
        file that cannot be read raises as `imageio.load_rgb` does, for this query and the next that asks."""
        from benchmark.io.imageio import load_rgb

        path = self.queryset.path(query.image)
        return self.sources.get(path, lambda: make(load_rgb(path)))

    def item(self, query: Query) -> Any:
        """An empty item for `query` (a dataclass with at least `query` and `error`)."""
        raise NotImplementedError

    def load(self, out: Any, query: Query, edit_path: Path) -> None:
        """Fill `out` from the query set's files and the edit at `edit_path`."""
        raise NotImplementedError
