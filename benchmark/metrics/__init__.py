"""Metrics: per-sample scores with declared metadata. Only `benchmark.tables.leaderboard` aggregates."""

from benchmark.metrics.base import PairwiseMetric, ScoreBatch

__all__ = ["PairwiseMetric", "ScoreBatch"]
