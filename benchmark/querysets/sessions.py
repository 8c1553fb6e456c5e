"""Selections that keep multi-turn sessions whole: shards and samples of a query set with sessions.

Under protocol=multi_turn turn t of a session is edited from the editor's own edit of turn t-1, so a selection that
holds turn t without turn t-1 gives that turn nothing to be edited from. Here a session is one unit:

- `shard_whole_sessions`: the run plan's shards (`benchmark.plan.run_plan.RunPlan.selected`). A session counts as one
  position, that of its first query in id order; a set without sessions is sliced exactly as `QuerySet.shard`
  slices it.
- `load_session_set`: the loader of query-set configs whose set has sessions (`demo_sessions`, `magicbrush`): it
  loads as `load_queryset` does, and `sample=N` draws N whole sessions (`draw_sessions`); a set without sessions is
  sampled by queries, exactly as `load_queryset` samples it.

These live outside `benchmark.querysets.io` and `.sample` on purpose: editors' signatures hash those modules (the
oracle editor reads the demo world through them), so changing them would re-edit every existing run.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

from benchmark.io.types import Query


def unit(q: Query) -> str:
    """The selection unit of a query: its session, or itself when it belongs to none."""
    return q.session if q.session is not None else f"\0{q.id}"


def first_turns(queries: Sequence[Query]) -> list[Query]:
    """The first query of each selection unit (a session's turn 1; a query outside any session itself), in the
    order of those first queries in `queries`."""
    firsts: dict[str, Query] = {}
    for q in sorted(queries, key=lambda q: q.turn or 1):  # stable: first turns keep their order in `queries`
        firsts.setdefault(unit(q), q)
    return list(firsts.values())


def longest_session(queries: Sequence[Query]) -> int:
    """The most queries one selection unit holds: the longest session's turns (1 for a set without sessions)."""
    from collections import Counter

    return max(Counter(unit(q) for q in queries).values(), default=1)


def shard_whole_sessions(queryset: Any, index: int, count: int) -> Any:
    """`queryset.shard(index, count)` with each session kept in one shard (module docstring)."""
    if not any(q.session is not None for q in queryset.queries):
        return queryset.shard(index, count)
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"shard index {index} / count {count}: need count >= 1 and 0 <= index < count")
    if count == 1:
        return queryset
    ordered = sorted(queryset.queries, key=lambda q: q.id)
    position: dict[str, int] = {}
    for q in ordered:
        position.setdefault(unit(q), len(position))
    return dataclasses.replace(queryset, queries=tuple(q for q in ordered if position[unit(q)] % count == index))


def draw_sessions(queries: Sequence[Query], request: Any, *, seed: int = 0,
                  types: Any = None) -> tuple[list[Query], dict[str, Any]]:
    """(the sample's queries in file order, its metadata) for a set with sessions: N (or the fraction) counts
    sessions, drawn whole, in the stratified order of `benchmark.querysets.sample` applied to their first turns (a
    query outside any session is a session of one). Nested like any sample: a larger one holds every smaller one.
    SampleError for a request it cannot honour."""
    from benchmark.querysets.sample import STRATA, SampleError, resolve_types, sample_order, sample_size

    if isinstance(seed, bool) or not isinstance(seed, int):
        raise SampleError(f"sample_seed={seed!r}: must be an integer")
    wanted = resolve_types(types)
    firsts = first_turns(queries)
    pool = [q for q in firsts if wanted is None or q.edit_type in wanted]
    if not pool:
        raise SampleError(f"sample_types={types!r}: the set has no session whose first turn is of these edit types")
    n = sample_size(request, len(pool))
    if n == len(firsts):
        raise SampleError(f"sample={request!r} takes all {n} sessions: that is the whole set; drop queryset.sample")
    chosen = {unit(q) for q in sample_order(pool, seed)[:n]}
    picked = [q for q in queries if unit(q) in chosen]
    meta = {"n": n, "unit": "sessions", "queries": len(picked), "seed": seed, "pool": len(pool),
            "set_size": len(queries), "sessions": len(firsts), "types": list(wanted) if wanted is not None else None, "strata": list(STRATA)}
    return picked, meta


def sample_sessions(queryset: Any, request: Any = None, seed: int = 0, types: Any = None) -> Any:
    """`queryset` itself when `request` is None; else its sample as a query set of its own, as
    `benchmark.querysets.io.sample_set` makes one: whole sessions for a set with sessions (`draw_sessions`), queries
    for a set without."""
    from benchmark.querysets.io import (
        QuerySet,
        QuerySetError,
        content_hash,
        file_digests,
        records_hash,
        sample_set,
    )
    from benchmark.querysets.sample import SampleError, sample_name

    if request is None:
        return queryset
    if not any(q.session is not None for q in queryset.queries):
        return sample_set(queryset, request, seed, types)
    try:
        picked, info = draw_sessions(queryset.queries, request, seed=seed, types=types)
    except SampleError as err:
        raise QuerySetError(f"query set {queryset.name}: {err}") from None
    info = {**info, "parent": queryset.name, "parent_records_hash": records_hash(list(queryset.queries))}
    meta = {**queryset.meta, "sample": info}
    return QuerySet(name=sample_name(queryset.name, info["n"], seed), root=queryset.root, queries=tuple(picked),
                    hash=content_hash(picked, file_digests(queryset.root, picked, meta)), meta=meta)


def load_session_set(root: str | os.PathLike[str], name: str | None = None, build: str | None = None,
                     first: int | None = None, sample: int | float | None = None, sample_seed: int = 0,
                     sample_types: Any = None, per_source: int | None = None) -> Any:
    """`benchmark.querysets.io.load_queryset` for a set that may hold sessions: the same arguments and set, and a
    sample (`sample`, `sample_seed`, `sample_types`) of whole sessions (`sample_sessions`)."""
    from benchmark.querysets.io import load_queryset

    full = load_queryset(root, name=name, build=build, first=first, per_source=per_source)
    return sample_sessions(full, sample, sample_seed, sample_types)
