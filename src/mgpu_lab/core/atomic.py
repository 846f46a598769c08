"""The one atomic file write of the package: temp file in the target's folder, then ``os.replace`` (stdlib only).

A reader (or a crash) sees the old file or the new one, never a torn one. Checkpoints also ``fsync`` the file
and the folder (``durable``); heartbeats, written several times a second, do not need to survive a power cut.
"""

from __future__ import annotations

import os
import tempfile

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import BinaryIO


def atomic_write(
    path: str | os.PathLike,
    write: Callable[[BinaryIO], object],
    *,
    durable: bool = True,
    before_replace: Callable[[str, str], None] | None = None,
) -> str:
    """Write through ``write(fileobj)`` to ``.<name>.<random>.tmp`` beside ``path``, then rename it over ``path``.

    The folder is created if missing. A failed write (disk full, read-only file system) removes the temp file
    and raises OSError naming ``path``. ``before_replace(tmp, path)`` runs between the two (a testing hook).
    The temp name is hidden, so no checkpoint pattern matches it. Returns ``path`` as a string.
    """
    target = os.fspath(path)
    folder = os.path.dirname(target) or "."
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        if before_replace is not None:
            before_replace(tmp, target)
        os.replace(tmp, target)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError) and exc.errno is not None and exc.filename is None:
            raise OSError(exc.errno, exc.strerror, target) from exc
        raise
    if durable:
        try:  # make the rename itself durable
            dfd = os.open(folder, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError:
            pass
    return target


def atomic_write_bytes(path: str | os.PathLike, data: bytes, *, durable: bool = True) -> str:
    """:func:`atomic_write` of ``data``."""
    return atomic_write(path, lambda f: f.write(data), durable=durable)
