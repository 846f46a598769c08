"""Reading input files safely: inside the root, regular files, size caps, UTF-8.

Every problem here becomes a ``Finding`` with a location (its codes are in problems.py); nothing raises.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path, PurePosixPath
from types import MappingProxyType

from .model import Finding
from .problems import (
    BAD_LINK,
    BINARY,
    BYTE_ORDER_MARK,
    LEAVES_ROOT,
    MAX_BYTES,
    MAX_MARKDOWN_BYTES,
    NOT_REGULAR,
    NOT_UTF8,
    TOO_LARGE,
    UNREADABLE,
    problem,
)


def rel(root: Path, path: Path) -> str:
    """``path`` relative to ``root`` as a POSIX string (the path itself when outside root)."""
    if os.sep == "/" and isinstance(root, PurePosixPath) and isinstance(path, PurePosixPath):
        top, full = str(root), str(path)  # a pure path's string is normalized: the prefix test is relative_to's
        if full.startswith(top) and full[len(top) : len(top) + 1] == "/" and top != "/":
            return full[len(top) + 1 :]
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


def link_problem(path: Path) -> str | None:
    """A message when ``path`` is a symlink that loops or dangles, else None."""
    try:
        if not path.is_symlink():
            return None
    except OSError:
        return None
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "symlink loop"
        try:
            return f"dangling symlink -> {os.readlink(path)}"
        except OSError:
            return "dangling symlink"
    return None


# Resolved folders, by path: one check reads hundreds of files in a few dozen folders, and resolving each
# file's whole path again (an lstat per component) was a tenth of a cold check. Cleared by each load
# (``fresh_resolution``), so a long-running caller (the language server) never keeps a stale one.
_REAL_DIRS: dict[str, str] = {}


def fresh_resolution() -> None:
    """Forget the folders resolved so far (a new check starts)."""
    _REAL_DIRS.clear()


def _real_dir(folder: str) -> str:
    """``os.path.realpath(folder)`` for a normalized absolute folder, each folder on the way resolved once per
    check (one lstat per new folder: its parent's resolution is reused)."""
    real = _REAL_DIRS.get(folder)
    if real is None:
        parent, name = os.path.split(folder)
        if not name or parent == folder:
            real = os.path.realpath(folder)
        else:
            joined = os.path.join(_real_dir(parent), name)
            real = os.path.realpath(joined) if os.path.islink(joined) else joined
        _REAL_DIRS[folder] = real
    return real


def realpath(path: str) -> str:
    """``os.path.realpath(path)``, its folder resolved once per check: the last component is resolved here
    each time (a link there is followed as realpath would)."""
    head, tail = os.path.split(os.path.normpath(path))
    if not tail or tail in (".", "..") or not os.path.isabs(head):
        return os.path.realpath(path)
    joined = os.path.join(_real_dir(head), tail)
    return os.path.realpath(joined) if os.path.islink(joined) else joined


def inside(root: Path, relpath: str) -> str | None:
    """None when ``root/relpath`` resolves inside ``root``; else why not (one phrase)."""
    if not relpath or os.path.isabs(relpath) or relpath.replace("\\", "/").split("/")[0] == "..":
        return "is outside the checked root (absolute or ../ path)"
    norm = os.path.normpath(relpath)
    if norm == ".." or norm.startswith("../"):
        return "is outside the checked root (../ path)"
    real_root = realpath(str(root))
    try:
        real = realpath(os.path.join(real_root, norm))
    except (OSError, ValueError, RuntimeError):
        return "cannot be resolved"
    if real != real_root and not real.startswith(real_root.rstrip(os.sep) + os.sep):
        return "is a symlink leaving the checked root"
    return None


def cap_for(relpath: str) -> int:
    return MAX_MARKDOWN_BYTES if relpath.lower().endswith(".md") else MAX_BYTES


def read_bytes_bounded(path: str, max_bytes: int, checked: bool = False) -> bytes | str:
    """The bytes of a regular file at most ``max_bytes`` long, or a phrase saying why not.

    Opens without blocking (a FIFO swapped in after the check never blocks) and checks the opened file
    again, so a device or FIFO is never read. ``checked``: the caller has just looked at the path (a regular
    file within the cap), so it is not looked at again before opening.
    """
    if not checked:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return "file not found"
        except OSError as exc:
            return "symlink loop" if exc.errno == errno.ELOOP else f"cannot read: {exc.strerror or exc}"
        problem = _not_readable_as_file(st, max_bytes)
        if problem:
            return problem
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        return "symlink loop" if exc.errno == errno.ELOOP else f"cannot read: {exc.strerror or exc}"
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode):
            return "not a regular file"
        chunks, total = [], 0
        while True:
            # the size fstat gave, plus one byte to see the end (a request far past a small file makes the
            # allocator map and unmap a large buffer per file); at least a page, should the file have grown
            want = min(1 << 20, max_bytes + 1 - total, max(opened.st_size + 1 - total, 4096))
            chunk = os.read(fd, want)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                return f"too large: more than {max_bytes} bytes"
            if len(chunk) < want and total == opened.st_size:
                break  # the whole file as it was when opened: no second call to be told it ends
        return b"".join(chunks)
    except OSError as exc:
        return f"cannot read: {exc.strerror or exc}"
    finally:
        os.close(fd)


def _why(relpath: str, why: str, max_bytes: int) -> Finding:
    if why == "file not found" or why.startswith(("cannot read", "is a directory")):
        return problem(UNREADABLE, relpath, 1, 1, why if why != "file not found" else "file not found")
    if why == "symlink loop":
        return problem(BAD_LINK, relpath, 1, 1, "symlink loop; not read")
    if why == "not a regular file":
        return problem(NOT_REGULAR, relpath, 1, 1, "not a regular file (a FIFO, device or socket); not read")
    size = why.split(": ", 1)[1]
    return problem(TOO_LARGE, relpath, 1, 1, f"file is {size} (limit {max_bytes // 1024} KB); not parsed")


def decode(relpath: str, data: bytes) -> tuple[str | None, list[Finding]]:
    """UTF-8 text with newlines normalized, or (None, [finding]); a BOM is stripped and reported."""
    found: list[Finding] = []
    nul = data.find(b"\0")
    if nul >= 0:
        line = data.count(b"\n", 0, nul) + 1
        return None, [problem(BINARY, relpath, line, 1, "binary file (NUL bytes); not parsed")]
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
        why = (
            "some skill loaders then miss the frontmatter"
            if data.startswith(b"---")
            else "tools that compare bytes or read the first line see it (a shebang, a heading, a table)"
        )
        found.append(
            problem(
                BYTE_ORDER_MARK,
                relpath,
                1,
                1,
                f"file starts with a UTF-8 byte-order mark; {why}: save it without the BOM",
                "warning",
            )
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        return None, [
            problem(NOT_UTF8, relpath, line, col, f"not valid UTF-8 (byte 0x{data[exc.start]:02x}); not parsed")
        ]
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text, found


# Unsaved editor text (the language server's open buffers): repository-relative POSIX path -> text.
# Set only for the duration of one ``load_project(..., overlay=...)`` call, in that call's context.
_OVERLAY: ContextVar[Mapping[str, str]] = ContextVar("skills_check_overlay", default=MappingProxyType({}))


@contextmanager
def overlaid(texts: Mapping[str, str]) -> Iterator[None]:
    """Within the block, ``read_text`` takes a file's text from ``texts`` (path -> text) instead of the disk;
    the other guards (inside the root, not a link loop, the size cap, decoding) apply to it as to a file."""
    token = _OVERLAY.set(MappingProxyType(dict(texts)))
    try:
        yield
    finally:
        _OVERLAY.reset(token)


def _read_plain_file(root: Path, relpath: str, cap: int) -> bytes | str | None:
    """``read_text``'s common case in fewer system calls: ``relpath`` is a plain relative path inside the root
    whose last component is no link (one lstat says so, and gives the type and size checked before opening);
    its bytes, or why not (as ``read_bytes_bounded`` words it). None: anything else (a link, a path that
    cannot be looked at, one leaving the root), left to the full checks."""
    norm = os.path.normpath(relpath)
    if os.path.isabs(norm) or norm == ".." or norm.startswith("../") or "\\" in relpath:
        return None
    real_root = _real_dir(os.path.normpath(os.path.abspath(root)))
    head, tail = os.path.split(norm)
    folder = _real_dir(os.path.join(real_root, head)) if head else real_root
    if folder != real_root and not folder.startswith(real_root.rstrip(os.sep) + os.sep):
        return None
    path = os.path.join(folder, tail)
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return None
    return _not_readable_as_file(st, cap) or read_bytes_bounded(path, cap, checked=True)


def read_text(root: Path, relpath: str, *, max_bytes: int | None = None) -> tuple[str | None, list[Finding]]:
    """Read ``root/relpath`` as UTF-8 text, never outside ``root`` and only a regular file within the cap;
    on failure (None, [finding]). Within ``overlaid(...)``, an overlaid path's text replaces the file's."""
    cap = cap_for(relpath) if max_bytes is None else max_bytes
    quick = _read_plain_file(root, relpath, cap) if relpath and not _OVERLAY.get() else None
    if quick is not None:
        return decode(relpath, quick) if isinstance(quick, bytes) else (None, [_why(relpath, quick, cap)])
    shown = relpath or "."
    loop = link_problem(root / relpath) if relpath else None
    if loop:
        return None, [problem(BAD_LINK, shown, 1, 1, f"{loop}; not read")]
    leaves = inside(root, relpath)
    if leaves:
        return None, [problem(LEAVES_ROOT, shown, 1, 1, f"{leaves}; not read")]
    unsaved = _OVERLAY.get().get(posixpath.normpath(relpath)) if relpath else None
    if unsaved is not None:
        data = unsaved.encode("utf-8", "surrogatepass")
        if len(data) > cap:
            return None, [_why(shown, f"too large: {len(data)} bytes", cap)]
        return decode(shown, data)
    found = read_bytes_bounded(realpath(os.path.join(realpath(str(root)), relpath)), cap)
    if isinstance(found, str):
        return None, [_why(shown, found, cap)]
    data = found
    return decode(shown, data)


def read_installed(path: Path) -> str | None:
    """Text of an installed package's source (torch's run.py): a regular file under the cap, else None."""
    data = read_bytes_bounded(str(path), MAX_BYTES)
    if isinstance(data, str):
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


PSEUDO_FS = frozenset(
    "proc sysfs devtmpfs devpts cgroup cgroup2 debugfs tracefs securityfs pstore bpf configfs fusectl mqueue "
    "hugetlbfs binfmt_misc autofs efivarfs rpc_pipefs nsfs".split()
)


def refused_root(root: Path, mounts: str = "/proc/self/mounts") -> str | None:
    """Why ``root`` cannot be a checked root (a filesystem's root ``/``, by its name or another one such as a bind
    mount, or inside a pseudo filesystem such as /proc or /sys: walking it reads the whole machine or files that
    never end), else None."""
    real = os.path.realpath(root)
    if real == os.path.realpath("/"):
        return "is the filesystem root"
    try:
        if os.path.samestat(os.stat(real), os.stat("/")):
            return "is the filesystem root under another name (a bind mount of /: same device and inode)"
    except OSError:
        pass  # a root that cannot be looked at is refused where it is read
    fstype, point = "", ""
    try:
        with open(mounts, encoding="utf-8", errors="replace") as fh:
            table = [line.split()[1:3] for line in fh if len(line.split()) >= 3]
    except OSError:  # no mount table: the usual places
        table = [["/proc", "proc"], ["/sys", "sysfs"], ["/dev", "devtmpfs"]]
    for where, kind in table:
        where = where.replace("\\040", " ")
        if (real == where or real.startswith(where.rstrip("/") + "/")) and len(where) >= len(point):
            fstype, point = kind, where
    if fstype in PSEUDO_FS:
        return f"is on a pseudo filesystem ({fstype} at {point})"
    return None


def _not_readable_as_file(st: os.stat_result, cap: int) -> str | None:
    """Why a file of this ``stat`` is not read (a folder, not a regular file, over ``cap`` bytes), or None."""
    if stat.S_ISDIR(st.st_mode):
        return "is a directory, expected a file"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_size > cap:
        return f"too large: {st.st_size} bytes"
    return None
