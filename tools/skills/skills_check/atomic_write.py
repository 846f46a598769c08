"""The checker's one atomic file write (its caches and ``--fix`` both use it)."""

from __future__ import annotations

import os
from pathlib import Path


def write_temp(path: Path, data: bytes) -> str:
    """Write ``data`` to a new temp file beside ``path`` (with ``path``'s permission bits when it exists) and
    return the temp file's path; the caller renames it over ``path`` (``os.replace``) or removes it. The temp
    file is removed when this write fails."""
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
    except BaseException:
        remove_quietly(tmp)
        raise
    return tmp


def remove_quietly(path: str) -> None:
    """Remove ``path``; one already gone (or not removable) is left as it is."""
    try:
        os.unlink(path)
    except OSError:
        pass


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temp file in its folder and ``os.replace``: a reader never sees half
    a file, a file that existed keeps its permission bits, and the temp file is removed when the write fails."""
    tmp = write_temp(path, data)
    try:
        os.replace(tmp, path)
    except BaseException:
        remove_quietly(tmp)
        raise
