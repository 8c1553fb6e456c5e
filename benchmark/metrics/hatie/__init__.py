"""HATIE's evaluation suite (specification: docs/hatie.md): per-task workflows over segmentations and four
similarities, per-query weighted aggregation, model-level scores. `HatieSuite` is the entry point."""
