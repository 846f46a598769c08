"""Runtime for the multi-GPU training launcher: the `isaaclab` CLI, built-in tasks, library adapters."""

__version__ = "0.1.0"
