"""Reading a file someone else wrote, without trusting what is there: regular files only, bounded (stdlib only).

A FIFO in place of a file would block ``open()`` until a writer came; a device or ``/dev/zero`` behind a link
would never end; a folder raises at read time. :func:`read_regular` opens without blocking, checks the opened
file (not the name, which may change between a stat and the open) and reads at most ``limit`` bytes.
"""

from __future__ import annotations

import errno
import os
import stat

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


class NotRegularFile(OSError):
    """The path names something other than a regular file; ``kind`` says what (``a FIFO``, ``a folder`` ...)."""

    def __init__(self, path: str | os.PathLike, kind: str) -> None:
        super().__init__(errno.EINVAL, f"{kind}, not a regular file", os.fspath(path))
        self.kind = kind


def kind_of(mode: int) -> str:
    """What a file mode names, in words."""
    if stat.S_ISREG(mode):
        return "a file"
    return next((name for test, name in _KINDS if test(mode)), "not a file")


def read_regular(path: str | os.PathLike, limit: int, *, tail: bool = False) -> tuple[bytes, bool]:
    """(at most ``limit`` bytes of the regular file at ``path``, whether there was more; ``tail``: its last
    ``limit`` bytes). OSError when it cannot be read; :class:`NotRegularFile` when it is not a regular file
    (nothing read, never blocks)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(path, kind_of(mode))
        if tail:
            size = os.fstat(fd).st_size
            if size > limit:
                os.lseek(fd, size - limit - 1, os.SEEK_SET)
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) <= limit:
            return data, False
        return (data[-limit:] if tail else data[:limit]), True
    finally:
        os.close(fd)
