"""Reading a file someone else wrote, without trusting what is there: regular files only, bounded (stdlib only).

A FIFO in place of a file would block ``open()`` until a writer came; a device or ``/dev/zero`` behind a link
would never end; a folder raises at read time. :func:`read_regular` opens without blocking, checks the opened
file (not the name, which may change between a stat and the open) and reads at most ``limit`` bytes. Given a
folder (``within``), it opens the file only when its path resolves inside that folder: a run folder's file that is
a link to ``/etc/shadow`` is never opened with the reader's privileges (:class:`OutsideFolder`).
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


class OutsideFolder(OSError):
    """The path resolves outside the folder it must stay in (a link out of it); ``target`` is where it leads."""

    def __init__(self, path: str | os.PathLike, target: str, folder: str | os.PathLike) -> None:
        super().__init__(errno.EXDEV, f"a link out of {os.fspath(folder)} (to {target})", os.fspath(path))
        self.target = target


def resolved_inside(folder: str | os.PathLike, path: str | os.PathLike) -> str:
    """``path`` with every link resolved, when that lies inside ``folder`` (itself resolved); else OutsideFolder."""
    base, real = os.path.realpath(folder), os.path.realpath(path)
    if os.path.commonpath([base, real]) != base:
        raise OutsideFolder(path, real, folder)
    return real


def kind_of(mode: int) -> str:
    """What a file mode names, in words."""
    if stat.S_ISREG(mode):
        return "a file"
    return next((name for test, name in _KINDS if test(mode)), "not a file")


def read_regular(
    path: str | os.PathLike, limit: int, *, tail: bool = False, within: str | os.PathLike | None = None
) -> tuple[bytes, bool]:
    """(at most ``limit`` bytes of the regular file at ``path``, whether there was more; ``tail``: its last
    ``limit`` bytes). OSError when it cannot be read; :class:`NotRegularFile` when it is not a regular file
    (nothing read, never blocks); :class:`OutsideFolder` when ``within`` is given and the path resolves outside
    it (never opened: the resolved path is opened without following a link, and checked again once open)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    if within is not None:
        path = resolved_inside(within, path)
        flags |= getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags)
    try:
        if within is not None and os.path.isdir("/proc/self/fd"):  # a folder on the way swapped for a link since
            resolved_inside(within, os.readlink(f"/proc/self/fd/{fd}"))
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
