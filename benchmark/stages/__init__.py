"""Pipeline stages: edit, score, aggregate (its rows come from benchmark.leaderboard, cached by
benchmark.aggregate_cache)."""
