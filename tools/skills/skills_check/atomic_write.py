"""The checker's one atomic file write (its caches and ``--fix`` both use it)."""

from __future__ import annotations

import os
from pathlib import Path


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temp file in its folder and ``os.replace``: a reader never sees half
    a file, a file that existed keeps its permission bits, and the temp file is removed when the write fails."""
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        try:
            os.chmod(tmp, path.stat().st_mode & 0o7777)
        except OSError:  # a new file: mkstemp's private mode is right for a cache
            pass
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
