"""Pipeline stages: edit, score, aggregate (its rows come from benchmark.tables.leaderboard, cached by
benchmark.tables.aggregate_cache)."""
