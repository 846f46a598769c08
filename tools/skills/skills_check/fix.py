"""``check --fix``: apply the fixes (text edits) that the selected rules' findings carry.

Generic: the rules know what to change (``Finding.fix``); this module only applies edits, safely.
Every edit is planned before any file is written; edits that several findings share are applied
once; an edit overlapping another in the same file is skipped (the re-check reports what is left).
A file is rewritten atomically (temp file + rename), only inside the checked root, never through or
over a symbolic link; newlines (LF/CRLF) and a byte-order mark are kept. When a write fails,
``FixError`` names the file and says which files were rewritten and which were not.
"""

from __future__ import annotations

import os
from pathlib import Path

from .atomic_write import write_atomic
from .inputs import inside, read_bytes_bounded
from .model import Finding, Project, TextEdit


class FixError(Exception):
    """A planned rewrite failed; the message names the file and what was and was not rewritten."""


def writable(root: Path, relpath: str) -> str | None:
    """None when ``relpath`` may be rewritten in place; else why not (outside the root, a link, not a file)."""
    why = inside(root, relpath)
    if why:
        return why
    full = root / relpath
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
    planned: list[tuple[str, bytes, list[str]]] = []
    for path in sorted(by_path):
        why = writable(project.root, path)
        if why:
            notes.append(f"--fix: {path} {why}; not rewritten")
            continue
        raw = read_bytes_bounded(os.path.realpath(project.root / path), 16 * 1024 * 1024)
        if isinstance(raw, str):
            notes.append(f"--fix: {path}: {raw}; not rewritten")
            continue
        bom = b"\xef\xbb\xbf" if raw.startswith(b"\xef\xbb\xbf") else b""
        text = raw[len(bom) :].decode("utf-8", errors="surrogateescape")
        newline = "\r\n" if "\r\n" in text else "\n"
        lines = text.replace("\r\n", "\n").split("\n")
        new, skipped = _apply(lines, by_path[path])
        if skipped:
            notes.append(f"--fix: {path}: {len(skipped)} overlapping edit(s) left for the next run")
        if new != lines:
            data = bom + newline.join(new).encode("utf-8", errors="surrogateescape")
            what = [d if d.startswith(path) else f"{path}: {d}" for d in described.get(path, [])]
            planned.append((path, data, what or [path]))
    changes: list[str] = []
    done: list[str] = []
    for i, (path, data, what) in enumerate(planned):
        try:
            why = writable(project.root, path)  # changed since it was planned?
            if why:
                raise OSError(why)
            write_atomic(project.root / path, data)
        except OSError as exc:
            left = [p for p, _, _ in planned[i:]]
            raise FixError(
                f"--fix could not write {path} ({getattr(exc, 'strerror', None) or exc}); rewritten: "
                f"{', '.join(done) or 'none'}; not rewritten: {', '.join(left)}"
            ) from exc
        done.append(path)
        changes += what
    return changes, notes
