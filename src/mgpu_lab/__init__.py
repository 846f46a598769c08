"""Runtime for the multi-GPU training launcher: the `mgpu-lab` CLI, built-in tasks, library adapters."""

__version__ = "0.1.0"
