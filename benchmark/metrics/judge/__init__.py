"""The judge suite: VIEScore SC / PQ / O from a local VLM's score-token probabilities (docs/judge.md)."""
