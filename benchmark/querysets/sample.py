"""Stratified, seeded, nested samples of a query set (`queryset.sample=N`).

A sample is a query set of its own: its own name (`<set>-sample<N>-seed<s>`), its own content hash (over its
queries and their files), so its leaderboard rows are complete rows of the sample, never PARTIAL rows of the full
set. The draw is one fixed order of the whole set, and a sample of N is that order's first N queries:

1. within each (edit type, class) stratum, queries are ranked by a seeded hash of their id;
2. within each edit type, the classes are interleaved in proportion to their sizes: a query of rank r in a class of
   size m gets the key (r + 0.5) / m, and the type's queries are ordered by that key;
3. across edit types the same interleaving is applied to each query's position inside its type.

Step 3 gives every edit type its share of N (the Sainte-Laguë rounding of N x its share), step 2 every class its
share of its type's count. Because the order does not depend on N, the same seed gives the same sample, a larger
sample contains every smaller one, and each stratum's count never shrinks as N grows.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

from benchmark.io.types import (
    EDITVAL_TYPES,
    GEDIT_TYPES,
    HATIE_TYPES,
    IMGEDIT_TYPES,
    KRIS_TYPES,
    PIE_TYPES,
    RISE_TYPES,
    Query,
)

T = TypeVar("T")

# `sample_types` shorthands: the edit types of one benchmark family
TYPE_FAMILIES: dict[str, tuple[str, ...]] = {"hatie": HATIE_TYPES, "editval": EDITVAL_TYPES,
                                              "gedit": GEDIT_TYPES, "pie": PIE_TYPES, "imgedit": IMGEDIT_TYPES,
                                              "kris": KRIS_TYPES,
                                              "rise": RISE_TYPES}
STRATA = ("edit_type", "object_class")  # recorded in the sample's metadata


class SampleError(ValueError):
    """A sample request that cannot be honoured (too large, not a count or fraction, no queries of its types)."""


def _seeded(seed: int, key: str) -> str:
    """A reproducible pseudo-random sort key: sha256 of the seed and `key` (independent of Python's hash seed)."""
    return hashlib.sha256(f"{seed}\0{key}".encode()).hexdigest()


def _interleave(groups: dict[Hashable, list[T]], seed: int) -> list[T]:
    """Merge ordered groups so every prefix holds each group in proportion to its size: item r of a group of size m
    gets the key (r + 0.5) / m. Ties (equal keys of groups of one size) go by a seeded hash of the group's name, so
    no group is favoured by its name."""
    keyed = [((r + 0.5) / len(items), _seeded(seed, f"group:{name}"), r, item)
             for name, items in groups.items() for r, item in enumerate(items)]
    keyed.sort(key=lambda k: k[:3])
    return [k[3] for k in keyed]


def _grouped(items: Sequence[T], key: Callable[[T], Hashable]) -> dict[Hashable, list[T]]:
    out: dict[Hashable, list[T]] = defaultdict(list)
    for item in items:
        out[key(item)].append(item)
    return out


def sample_order(queries: Sequence[Query], seed: int) -> list[Query]:
    """Every query once, in the stratified order whose first N queries are the sample of N (module docstring)."""
    by_type: dict[Hashable, list[Query]] = {}
    for etype, of_type in _grouped(queries, lambda q: q.edit_type).items():
        classes = {cls: sorted(qs, key=lambda q: _seeded(seed, f"query:{q.id}"))
                   for cls, qs in _grouped(of_type, lambda q: q.object_class).items()}
        by_type[etype] = _interleave(classes, seed)
    return _interleave(by_type, seed)


def resolve_types(types: Any) -> tuple[str, ...] | None:
    """`sample_types`: None (every type), a family name ('hatie', 'editval') or a list of edit types."""
    if types is None:
        return None
    if isinstance(types, str):
        if types not in TYPE_FAMILIES:
            raise SampleError(f"sample_types={types!r}: give a family ({', '.join(TYPE_FAMILIES)}) or a list of "
                              "edit types, e.g. sample_types=[obj_add,obj_rep]")
        return TYPE_FAMILIES[types]
    return tuple(str(t) for t in types)


def sample_size(request: Any, pool: int) -> int:
    """The number of queries `request` asks for out of `pool`: an integer count, or a fraction in (0, 1)."""
    if isinstance(request, bool) or not isinstance(request, int | float):
        raise SampleError(f"sample={request!r}: give a number of queries (sample=28) or a fraction (sample=0.1)")
    if isinstance(request, float) and not request.is_integer():
        if not 0 < request < 1:
            raise SampleError(f"sample={request}: a fraction must be between 0 and 1; for a count give an integer")
        n = int(request * pool + 0.5)  # round half up: Python's round() would round 0.5 to even
        if n < 1:
            raise SampleError(f"sample={request} of {pool} queries is less than one query; give a larger fraction")
        return n
    n = int(request)
    if n < 1:
        raise SampleError(f"sample={n}: a sample needs at least one query")
    if n > pool:
        raise SampleError(f"sample={n} is larger than the {pool} queries it draws from; give at most {pool} "
                          "(or drop queryset.sample to run the whole set)")
    return n


def sample_name(name: str, n: int, seed: int) -> str:
    """The sample's query-set name, e.g. `demo-sample28-seed0` (a file-name-safe id)."""
    return f"{name}-sample{n}-seed{seed}"


def draw_sample(queries: Sequence[Query], request: Any, *, seed: int = 0,
                types: Any = None) -> tuple[list[Query], dict[str, Any]]:
    """(the sample's queries in file order, its metadata for queryset.json's `sample` field).

    Raises SampleError for a request it cannot honour: more queries than the pool, a sample that would be the whole
    set (run the set itself), no query of `types`."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise SampleError(f"sample_seed={seed!r}: must be an integer")
    wanted = resolve_types(types)
    pool = [q for q in queries if wanted is None or q.edit_type in wanted]
    if not pool:
        raise SampleError(f"sample_types={types!r}: the set has no query of these edit types")
    n = sample_size(request, len(pool))
    if n == len(queries):
        raise SampleError(f"sample={request!r} takes all {n} queries: that is the whole set; drop queryset.sample")
    chosen = {q.id for q in sample_order(pool, seed)[:n]}
    picked = [q for q in queries if q.id in chosen]
    meta = {"n": n, "seed": seed, "pool": len(pool), "set_size": len(queries),
            "types": list(wanted) if wanted is not None else None, "strata": list(STRATA)}
    return picked, meta
