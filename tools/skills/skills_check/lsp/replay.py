"""The first diagnostics of a session from the findings the last session left, while nothing changed since.

A new server spends most of its first second importing its protocol library and checking the tree. When the
tree is as the last check left it (the result cache's test: the checker, the tree's folders and the content
of every file that check read), the findings that check stored are published first, and the real check
follows and sends only what differs (nothing, when the tree is unchanged). The findings are stored as the
parse cache stores documents: plain JSON through ``caches.codec``, decoded and checked for shape before use,
then entry by entry for what a fresh check could give on this tree (:func:`admissible`: a known rule code and
severity, a one-line printable message, every place a relative path inside the root at a line and column the
file has); anything else drops the whole replay and the session waits for its own check. Only a check whose open
documents all hold what their files hold is stored or replayed: an unsaved buffer is not the tree the cache
describes.
"""

from __future__ import annotations

import json
import os
import posixpath
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

from ..caches.codec import CodecError, conforms, decode, encode
from ..caches.results import ResultCache
from ..inputs import read_text
from ..model import Finding, Loc, Project
from .convert import SEVERITY, split_lines

#: the result cache's argument set for the language server's findings (beside the command line's reports)
ARGS = {"lsp": "findings", "version": 1}
#: the longest message a replayed finding may carry (a fresh one is a line of a few hundred characters)
MAX_MESSAGE = 4096

LinesOf = Callable[[str], Sequence[str] | None]  # a file's lines by repository path (None: no text to read)


def _relative_inside(path: str) -> bool:
    """A repository path as the checker writes one: relative, normalized, printable, never climbing out."""
    return (
        bool(path)
        and path.isprintable()
        and not os.path.isabs(path)
        and posixpath.normpath(path) == path
        and path != ".."
        and not path.startswith("../")
    )


def _placed(loc: Loc, lines_of: LinesOf) -> bool:
    """A place a fresh finding could name: inside the root, at a line and column its file has (line 1, column 1
    of a path with no text: a folder, a missing or unreadable file)."""
    if not _relative_inside(loc.path) or type(loc.line) is not int or type(loc.col) is not int:
        return False
    lines = lines_of(loc.path)
    if lines is None:
        return (loc.line, loc.col) == (1, 1)
    return 1 <= loc.line <= len(lines) and 1 <= loc.col <= len(lines[loc.line - 1]) + 1


def admissible(findings: list[Finding], lines_of: LinesOf, known: Collection[str]) -> bool:
    """Whether every stored finding is one a fresh check could give on the tree as it is: its code among
    ``known``, its severity one the checker gives, its message one printable line, its place and its truth's
    placed (:func:`_placed`), its fix's edits on paths inside the root."""
    for f in findings:
        if f.code not in known or f.severity not in SEVERITY:
            return False
        if not (0 < len(f.message) <= MAX_MESSAGE and f.message.isprintable()):
            return False
        if not _placed(f.loc, lines_of) or (f.truth is not None and not _placed(f.truth, lines_of)):
            return False
        if f.fix is not None and not all(_relative_inside(e.path) for e in f.fix.edits):
            return False
    return True


def disk_lines(root: Path) -> LinesOf:
    """A file's lines as read from disk under ``root`` (under the checker's guards), each file read once."""
    kept: dict[str, list[str] | None] = {}

    def lines_of(path: str) -> list[str] | None:
        if path not in kept:
            text, _ = read_text(root, path)
            kept[path] = split_lines(text) if text is not None else None
        return kept[path]

    return lines_of


def buffers_match_disk(root: Path, texts: dict[str, str]) -> bool:
    """Whether every open document's text is its file's text on disk."""
    for rel, text in texts.items():
        disk, _ = read_text(root, rel)
        if disk != text:
            return False
    return True


def recall(
    root: Path, texts: dict[str, str], known: Collection[str] | None = None, lines_of: LinesOf | None = None
) -> list[Finding] | None:
    """The findings stored for the tree as it is now (``texts``: the open documents), or None: none stored, or
    one entry not :func:`admissible` (``known``: the rule codes, every rule's when None; ``lines_of``: the
    files' lines, from disk when None)."""
    if not buffers_match_disk(root, texts):
        return None
    hit = ResultCache(root, ARGS).lookup()
    if hit is None:
        return None
    try:
        findings = decode(json.loads(hit["stdout"]))
    except (CodecError, ValueError, TypeError, RecursionError):
        return None
    if not conforms(findings, list[Finding]):
        return None
    if known is None:
        from ..runner import load_rules

        known = {r.code for r in load_rules()}
    return findings if admissible(findings, lines_of or disk_lines(root), known) else None


class Recorder:
    """Stores a check's findings for the next session; made before the check starts (the result cache
    refuses inputs that changed while it ran), and stores only findings that differ from the last stored."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.last = ""

    def start(self) -> ResultCache:
        return ResultCache(self.root, ARGS)

    def store(self, cache: ResultCache, project: Project, findings: list[Finding], texts: dict[str, str]) -> None:
        try:
            data = json.dumps(encode(findings), separators=(",", ":"))
        except (CodecError, ValueError, TypeError):
            return
        if data == self.last or not buffers_match_disk(self.root, texts):
            return
        cache.store(project, data, "", 0)
        self.last = data
