"""Plug-in editor adapters, one module per editor (configured by configs/editor/<name>.yaml)."""
