"""The query loop every metric suite shares: queries sorted by source image (so an original's features are reused
while they are in the cache), loaded by DataLoader workers, scored chunk by chunk, one row per query."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from benchmark.types import Query


def by_source(queries: Sequence[Query], edit_paths: Sequence[Path]) -> tuple[list[Query], list[Path]]:
    """Queries and their edit paths, ordered by (source image, query id)."""
    order = sorted(range(len(queries)), key=lambda i: (queries[i].image, queries[i].id))
    return [queries[i] for i in order], [edit_paths[i] for i in order]


def score_in_chunks(samples: Any, score: Callable[[list[Any]], list[dict[str, Any]]], *, chunk_size: int, desc: str,
                    num_workers: int = 0, progress: bool = True) -> Iterator[list[dict[str, Any]]]:
    """Yield `score(chunk)` for consecutive chunks of `samples` (a map-style dataset of loaded queries, read in
    order), with a progress bar named `desc`."""
    from torch.utils.data import DataLoader
    from tqdm import tqdm

    loader = DataLoader(samples, batch_size=None, shuffle=False, num_workers=num_workers)
    bar = tqdm(total=len(samples), desc=desc, unit="query", disable=not progress, leave=False)
    chunk: list[Any] = []
    for item in loader:
        chunk.append(item)
        if len(chunk) >= chunk_size:
            yield score(chunk)
            bar.update(len(chunk))
            chunk = []
    if chunk:
        yield score(chunk)
        bar.update(len(chunk))
    bar.close()
