"""``check --fix``: apply the fixes (text edits) that the selected rules' findings carry.

Generic: the rules know what to change (``Finding.fix``); this module only applies edits, safely.
Every edit is planned before any file is written; edits that several findings share are applied
once; an edit overlapping another in the same file is skipped (the re-check reports what is left).
The rewrites are staged: every fixed file is written to a temp file beside it first, and only when all
were written are they renamed into place, so a full disk or an error part-way leaves every file as it
was (``FixError`` names the file that failed). A file is rewritten only inside the checked root, never
through or over a symbolic link; newlines (LF/CRLF) and a byte-order mark are kept. One fixer per tree:
``fix_lock`` holds a lock on the tree's root folder (``flock`` on its descriptor) for the whole read-fix-write cycle.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from .atomic_write import remove_quietly, write_atomic, write_temp
from .inputs import inside, read_bytes_bounded
from .model import Finding, Project, TextEdit


class FixError(Exception):
    """A planned rewrite failed; the message names the file and what was and was not rewritten."""


def writable(root: Path, relpath: str, create: bool = False) -> str | None:
    """None when ``relpath`` may be rewritten in place (``create``: or made, where nothing is there yet and its
    folder is); else why not (outside the root, a link, not a file)."""
    why = inside(root, relpath)
    if why:
        return why
    full = root / relpath
    if create and not os.path.lexists(full):
        return None if full.parent.is_dir() and not full.parent.is_symlink() else "has no folder to be made in"
    if full.is_symlink():
        return "is a symlink (a fix never replaces a link with a file)"
    if not full.is_file():
        return "is not a regular file"
    return None


def _apply(lines: list[str], edits: list[TextEdit]) -> tuple[list[str], list[TextEdit]]:
    """``lines`` with the non-overlapping ``edits`` applied (bottom-up); and the edits skipped."""
    chosen: list[TextEdit] = []
    skipped: list[TextEdit] = []
    for e in sorted(set(edits), key=lambda e: (e.start, e.end)):
        lo, hi = e.start, max(e.end, e.start - 1)
        if any(not (hi < c.start or lo > max(c.end, c.start - 1)) or (e.start == c.start) for c in chosen):
            skipped.append(e)
        else:
            chosen.append(e)
    out = list(lines)
    for e in sorted(chosen, key=lambda e: e.start, reverse=True):
        out[e.start - 1 : e.end] = list(e.lines)
    return out, skipped


def apply_fixes(project: Project, findings: list[Finding]) -> tuple[list[str], list[str]]:
    """Apply the fixes the ``findings`` carry; (what changed, notes about what did not)."""
    by_path: dict[str, list[TextEdit]] = {}
    described: dict[str, list[str]] = {}
    for f in findings:
        if f.fix is None:
            continue
        for e in f.fix.edits:
            by_path.setdefault(e.path, []).append(e)
        path = f.fix.edits[0].path if f.fix.edits else f.loc.path
        if f.fix.description not in described.setdefault(path, []):
            described[path].append(f.fix.description)
    notes: list[str] = []
    originals: dict[str, bytes | None] = {}  # None: a file the fixes make
    planned: list[tuple[str, bytes, list[str]]] = []  # (path, new bytes, what changed)
    for path in sorted(by_path):
        new_file = all(e.start == 1 and e.end == 0 for e in by_path[path]) and not os.path.lexists(project.root / path)
        why = writable(project.root, path, create=new_file)
        if why:
            notes.append(f"--fix: {path} {why}; not rewritten")
            continue
        raw = b"" if new_file else read_bytes_bounded(os.path.realpath(project.root / path), 16 * 1024 * 1024)
        if isinstance(raw, str):
            notes.append(f"--fix: {path}: {raw}; not rewritten")
            continue
        bom = b"\xef\xbb\xbf" if raw.startswith(b"\xef\xbb\xbf") else b""
        text = raw[len(bom) :].decode("utf-8", errors="surrogateescape")
        newline = "\r\n" if "\r\n" in text else "\n"
        lines = [] if new_file else text.replace("\r\n", "\n").split("\n")
        new, skipped = _apply(lines, by_path[path])
        if skipped:
            notes.append(f"--fix: {path}: {len(skipped)} overlapping edit(s) left for the next run")
        if new != lines:
            data = bom + newline.join(new).encode("utf-8", errors="surrogateescape")
            what = [d if d.startswith(path) else f"{path}: {d}" for d in described.get(path, [])]
            planned.append((path, data, what or [path]))
            originals[path] = None if new_file else raw
    write_all(project.root, [(path, data, originals[path]) for path, data, _ in planned])
    changes = [line for _, _, what in planned for line in what]
    return changes, notes


def write_all(root: Path, planned: list[tuple[str, bytes, bytes | None]]) -> None:
    """Rewrite each (path, new bytes, old bytes; None: a new file) under ``root``, all or none: every new text
    goes to a temp file beside its file first; only when all were written are they renamed into place. Raises
    FixError (every file as it was, no temp file or new file left)."""
    temps: list[str] = []
    try:
        for path, data, old in planned:
            why = writable(root, path, create=old is None)  # changed since it was planned?
            if why:
                raise OSError(why)
            temps.append(write_temp(root / path, data))
    except BaseException as exc:  # an interrupt too: no temp file is left behind
        for tmp in temps:
            remove_quietly(tmp)
        if not isinstance(exc, OSError):
            raise
        raise FixError(
            f"--fix could not write {path} ({getattr(exc, 'strerror', None) or exc}); no file was rewritten"
        ) from exc
    done: list[tuple[str, bytes | None]] = []
    try:
        for (path, _, old), tmp in zip(planned, temps):
            os.replace(tmp, root / path)
            done.append((path, old))
    except OSError as exc:
        for tmp in temps[len(done) :]:
            remove_quietly(tmp)
        for rel, old in done:  # put back what was already renamed into place (remove what was made)
            if old is None:
                remove_quietly(str(root / rel))
            else:
                write_atomic(root / rel, old)
        raise FixError(f"--fix could not rename into {path} ({exc.strerror or exc}); no file was rewritten") from exc


LOCK_WAIT_S = 30.0  # how long a second --fix of one tree waits for the first


@contextlib.contextmanager
def fix_lock(root: Path, wait_s: float | None = None) -> Iterator[None]:
    """Hold this tree's fix lock for the block: one fixer per tree, whatever cache folder each uses. The lock is
    ``fcntl.flock`` on the root folder itself (an open descriptor of the directory), so two users, or two
    shells with different ``XDG_CACHE_HOME``, share it, and nothing is written to hold it. Waits up to
    ``wait_s`` for another fixer, saying so on stderr; raises FixError when it is still held then, or when the
    folder cannot be opened."""
    import fcntl

    wait_s = LOCK_WAIT_S if wait_s is None else wait_s
    real = os.path.realpath(root)
    try:
        fd = os.open(real, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise FixError(f"--fix could not open {real} to lock it ({exc.strerror or exc})") from exc
    try:
        deadline, told = time.monotonic() + wait_s, False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise FixError(
                        f"another --fix of {real} held its lock for {wait_s:g} s; run again when it has ended"
                    ) from None
                if not told:
                    print(f"--fix: waiting up to {wait_s:g} s for another --fix of {real} to end", file=sys.stderr)
                    told = True
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
