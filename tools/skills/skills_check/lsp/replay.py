"""The first diagnostics of a session from the findings the last session left, while nothing changed since.

A new server spends most of its first second importing its protocol library and checking the tree. When the
tree is as the last check left it (the result cache's test: the checker, the tree's folders and the content
of every file that check read), the findings that check stored are published first, and the real check
follows and sends only what differs (nothing, when the tree is unchanged). The findings are stored as the
parse cache stores documents: plain JSON through ``caches.codec``, decoded and checked for shape before use;
anything else is ignored and the session waits for its own check. Only a check whose open documents all hold
what their files hold is stored or replayed: an unsaved buffer is not the tree the cache describes.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..caches.codec import CodecError, conforms, decode, encode
from ..caches.results import ResultCache
from ..inputs import read_text
from ..model import Finding, Project

#: the result cache's argument set for the language server's findings (beside the command line's reports)
ARGS = {"lsp": "findings", "version": 1}


def buffers_match_disk(root: Path, texts: dict[str, str]) -> bool:
    """Whether every open document's text is its file's text on disk."""
    for rel, text in texts.items():
        disk, _ = read_text(root, rel)
        if disk != text:
            return False
    return True


def recall(root: Path, texts: dict[str, str]) -> list[Finding] | None:
    """The findings stored for the tree as it is now (``texts``: the open documents), or None."""
    if not buffers_match_disk(root, texts):
        return None
    hit = ResultCache(root, ARGS).lookup()
    if hit is None:
        return None
    try:
        findings = decode(json.loads(hit["stdout"]))
    except (CodecError, ValueError, TypeError, RecursionError):
        return None
    return findings if conforms(findings, list[Finding]) else None


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
