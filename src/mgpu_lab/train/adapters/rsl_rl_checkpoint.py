"""rsl_rl's checkpoint format, read without rsl_rl (the launcher's checks and the runner both use it)."""

from __future__ import annotations

from mgpu_lab.runs.checkpoint import LIBRARY_KEYS
from mgpu_lab.train.dist import load_torch_checkpoint


def check_checkpoint(path: str) -> dict:
    """An rsl_rl checkpoint's contents, read without running code from it (UsageError when it is not one)."""
    return load_torch_checkpoint(path, *LIBRARY_KEYS["rsl_rl"], "rsl_rl")
