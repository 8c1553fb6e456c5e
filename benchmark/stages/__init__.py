"""Pipeline stages: edit, score (aggregation lives in benchmark.leaderboard)."""
