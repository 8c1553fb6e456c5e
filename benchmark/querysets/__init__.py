"""Query-set builders (one module per source) and the common JSONL reader/writer (`io`)."""

from benchmark.querysets.io import QuerySet, QuerySetError, load_queryset, read_queries, write_queries

__all__ = ["QuerySet", "QuerySetError", "load_queryset", "read_queries", "write_queries"]
