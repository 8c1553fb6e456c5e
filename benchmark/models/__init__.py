"""Loaders for learned components (metric backbones, segmenters, diffusion pipelines).

Every loader has one code path fed from one of two weight sources:
`pretrained` (real checkpoints by id) or `tiny` (random weights of the same classes, saved once to a cache
folder and loaded back through the same `from_pretrained(path)` call). See `benchmark.io.model_cache`.
"""
