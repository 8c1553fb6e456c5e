"""KRIS-Bench by its official protocol (`metrics=kris`): the authors' per-dimension prompts, replies parsed as their
scripts parse them, and their normalised per-category, meta-category and overall means (docs/judge.md, "KRIS-Bench's
protocol")."""
