"""editmeter: benchmark harness for text-guided image editing."""

__version__ = "0.1.0"
