"""Work done once per test session, however many pytest-xdist workers ask for it.

Under xdist every worker is a process of its own with its own session fixtures; a session fixture that
starts a real 2-rank job or a Sphinx build would run once per worker. :func:`once` runs it once: the first
worker to ask computes it under a file lock in the folder all workers of this session share (the parent of
their base temp folders) and records the result as JSON; the others wait on the lock and read the record.
Without xdist it simply computes (the folder pytest gives this session is its own).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock


def shared_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder every worker of this session shares (this session's own base temp folder without xdist)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def once(tmp_path_factory: pytest.TempPathFactory, name: str, compute: Callable[[Path], Any]) -> Any:
    """``compute(folder)``'s JSON-able result, computed by one worker of this session in ``folder`` (a new
    shared folder whose name starts with ``name``); every other caller waits for it and reads the record. A
    ``compute`` that raises records nothing: the next caller tries again."""
    root = shared_root(tmp_path_factory)
    record = root / f"{name}.json"
    with FileLock(str(root / f"{name}.lock")):
        if record.exists():
            return json.loads(record.read_text())
        folder = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=root))  # fresh, even after a worker's failed try
        result = compute(folder)
        written = root / f"{name}.json.tmp"
        written.write_text(json.dumps(result))
        os.replace(written, record)  # a reader sees the whole record or none
        return result
