"""The server's parse cache: the checker's ``ParseCache`` (entries keyed by path and content digest, saved
at shutdown) with the decoded documents kept in memory across checks, so that a check after an edit parses
the edited file and decodes nothing else.

``ParseCache.get`` decodes its JSON entry and validates its shape on every hit: right for a fresh ``check``
process, which reads each file once, but most of a warm check's loading time in a server that loads the
same tree at every keystroke. An RST page whose text changed is parsed by sections (``rstchunks.py``): only
the sections an edit touched are parsed again. Here a hit for the same (kind, path, digest) returns a shallow copy of the
object decoded the first time, with its own ``problems`` list: the loader reassigns or extends a document's
``problems`` (read problems, ``literalinclude`` findings); nothing else of a parsed document is changed
after parsing (rules only read the model), so the rest is shared between checks safely.
"""

from __future__ import annotations

import copy
from typing import Any

from ..caches.parse import ParseCache, digest
from .rstchunks import ChunkedRst


def _fresh(value: Any) -> Any:
    """A shallow copy of a parsed object whose ``problems`` list is its own."""
    out = copy.copy(value)
    problems = getattr(out, "problems", None)
    if isinstance(problems, list):
        out.problems = list(problems)
    return out


class MemoParseCache(ParseCache):
    """A ``ParseCache`` that keeps decoded values by (kind, path) for the digest they were parsed from."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.memo: dict[tuple[str, str], tuple[str, Any]] = {}
        self.rst = ChunkedRst()  # RST pages by section (rstchunks.py)
        self.parsed = 0  # values put (files parsed) since the start: what the tests read

    def get(self, kind: str, path: str, text: str, expect: Any = Any) -> Any | None:
        if not self.enabled:
            return None
        key, dig = (kind, path), digest(text)
        kept = self.memo.get(key)
        if kept is not None and kept[0] == dig and (key in self.entries or kind == "rst"):
            self.used.add(key)
            return _fresh(kept[1])
        value = super().get(kind, path, text, expect)
        if value is None and kind == "rst":  # an RST page the editor changed: its changed sections parsed again
            value = self.rst.parse(path, text)
            if value is not None:
                self.used.add(key)  # (not written to the file: the next session parses the page whole once)
        if value is not None:
            self.memo[key] = (dig, _fresh(value))
        return value

    def prepare(self, path: str, text: str) -> None:
        """Parse an RST page by sections ahead of its first edit (a page the editor opened)."""
        if self.enabled and path.endswith(".rst"):
            self.rst.parse(path, text)

    def put(self, kind: str, path: str, text: str, value: Any) -> None:
        super().put(kind, path, text, value)
        self.parsed += 1
        if self.enabled and (kind, path) in self.entries:  # the format could hold it: kept as parsed
            self.memo[(kind, path)] = (digest(text), _fresh(value))

    def save(self) -> None:
        super().save()
        self.memo = {k: v for k, v in self.memo.items() if k in self.entries}
        self.rst = ChunkedRst()
