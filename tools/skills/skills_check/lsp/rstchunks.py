"""An RST page parsed section by section, so that an edit in a long page parses one section again.

docutils parses a whole page at once (a 1,400-line page takes longer than an edit may). Here a page is
cut at its second-level section titles into a preamble (the lines before the first such title) and
chunks; each chunk is parsed by the checker's own ``parse_rst`` as the preamble, the chunk at its place,
and every other line blank, so its line numbers are the page's. The results are kept by the chunk's text
(moved by as many lines as the chunk moved), and the page's ``RstDoc`` is the preamble's parse then each
chunk's findings within its lines, in order.

A page whose parse could depend on more than one chunk is parsed whole (``chunked`` gives None): ids
docutils numbers across the page (``id1``: duplicate names, footnotes, anonymous targets), a name or id
in two chunks, substitution definitions, footnotes or citations, title styles that do not rank the same
in every chunk, or a page with fewer than three chunks (nothing to gain). tests/test_lsp.py checks that
every RST page of this repository and of the checker's fixtures gives the same ``RstDoc`` either way.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from ..caches.parse import digest
from ..model import Loc, RstDoc

_ADORN = re.compile(r"^([=\-~^*#+`:.'\"_<>])\1{2,}\s*$")
_NUMBERED_ID = re.compile(r"^id\d+$")
_GLOBAL_CONSTRUCTS = re.compile(r"^\s*\.\. (?:\||\[)", re.MULTILINE)  # substitutions, footnotes, citations
MIN_CHUNKS = 3


def _titles(lines: list[str]) -> list[tuple[int, tuple[str, str]]]:
    """(0-based line where the title starts, its style) for each section title: a text line at column 0 under
    an optional overline and over an underline of one repeated punctuation character."""
    out = []
    for i in range(1, len(lines)):
        under = _ADORN.match(lines[i])
        title = lines[i - 1]
        if not under or not title.strip() or title[0].isspace() or _ADORN.match(title):
            continue
        over = i >= 2 and lines[i - 2].rstrip() == lines[i].rstrip()
        if not over and i >= 2 and lines[i - 2].strip():
            continue  # a title follows a blank line (or its overline)
        out.append((i - 2 if over else i - 1, ("o" if over else "", under.group(1))))
    return out


def cut(text: str) -> tuple[list[str], int, list[tuple[int, int]]] | None:
    """(the page's lines, the preamble's line count, each chunk's (first, end) 0-based line span), or None
    when the page is not cut (too few second-level sections, or constructs numbered across the page)."""
    if _GLOBAL_CONSTRUCTS.search(text):
        return None
    lines = text.split("\n")
    titles = _titles(lines)
    styles: list[tuple[str, str]] = []
    for _, style in titles:
        if style not in styles:
            styles.append(style)
    if len(styles) < 2:
        return None
    starts = [at for at, style in titles if style == styles[1]]
    if len(starts) < MIN_CHUNKS:
        return None
    spans = [(a, b) for a, b in zip(starts, [*starts[1:], len(lines)], strict=True)]
    return lines, starts[0], spans


def _shift(value: Any, by: int) -> Any:
    """A parse result with every line number moved by ``by`` (the model's line fields and locations)."""
    if by == 0:
        return value
    if isinstance(value, Loc):
        return dataclasses.replace(value, line=value.line + by)
    if isinstance(value, list):
        return [_shift(v, by) for v in value]
    if isinstance(value, dict):
        return {k: _shift(v, by) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {}
        for f in dataclasses.fields(value):
            v = getattr(value, f.name)
            if f.name in ("line", "end_line", "start", "end") and isinstance(v, int):
                changes[f.name] = v + by
            elif isinstance(v, (list, dict, Loc)) or dataclasses.is_dataclass(v):
                changes[f.name] = _shift(v, by)
        return dataclasses.replace(value, **changes)
    return value


@dataclasses.dataclass
class _Part:
    """One chunk's parse: the lines it spans when parsed, and what it found there."""

    first: int  # 1-based first line of the chunk when parsed
    doc: RstDoc
    own_ids: set[str]
    own_labels: set[str]


class ChunkedRst:
    """Chunk parses kept by (path, preamble, chunk text) across checks."""

    def __init__(self) -> None:
        self.parts: dict[tuple[str, str, str], _Part] = {}
        self.heads: dict[tuple[str, str], RstDoc] = {}  # the preamble's parse, by (path, its digest)
        self.parses = 0  # docutils parses run (what the tests read)

    def parse(self, path: str, text: str) -> RstDoc | None:
        """The page's RstDoc from its chunks, or None: parse it whole."""
        from ..parsers.rst import parse_rst  # heavy (docutils): imported only when a page is parsed

        shape = cut(text)
        if shape is None:
            return None
        lines, pre, spans = shape
        preamble = "\n".join(lines[:pre])
        pre_key = digest(preamble)
        head = self.heads.get((path, pre_key))
        if head is None:
            head = parse_rst(path, preamble)
            self.parses += 1
        if not head.readable:
            return None
        self.heads = {k: v for k, v in self.heads.items() if k[0] != path} | {(path, pre_key): head}
        used: dict[tuple[str, str, str], _Part] = {}
        parts = []
        for a, b in spans:
            chunk = "\n".join(lines[a:b])
            key = (path, pre_key, digest(chunk))
            part = self.parts.get(key) or used.get(key)
            if part is None:
                blanked = "\n".join([*lines[:pre], *([""] * (a - pre)), *lines[a:b]])
                doc = parse_rst(path, blanked)
                self.parses += 1
                if not doc.readable:
                    return None
                part = _Part(a + 1, doc, doc.ids - head.ids, set(doc.labels) - set(head.labels))
            used[key] = part
            parts.append((a, b, part))
        self.parts = {k: v for k, v in self.parts.items() if k[0] != path} | used
        return _merge(path, text, len(lines), head, pre, parts)


def _within(items: list[Any], a: int, b: int) -> list[Any]:
    """The items whose line (or location's line) is among the 1-based lines a+1..b."""
    out = []
    for item in items:
        line = item.loc.line if hasattr(item, "loc") else item.line
        if a < line <= b:
            out.append(item)
    return out


def _merge(path: str, text: str, n: int, head: RstDoc, pre: int, parts: list[tuple[int, int, _Part]]) -> RstDoc | None:
    doc = RstDoc(path=path, text=text, n_lines=n - (1 if text.endswith("\n") else 0))
    fields = ("headings", "links", "code", "tables", "includes", "comments", "problems")
    for name in fields:
        getattr(doc, name).extend(getattr(head, name))
    doc.labels.update(head.labels)
    doc.ids.update(head.ids)
    seen_ids: set[str] = set()
    seen_labels: set[str] = set()
    for a, b, part in parts:
        if part.own_ids & seen_ids or part.own_labels & seen_labels:
            return None
        if any(_NUMBERED_ID.match(i) for i in part.own_ids):
            return None
        seen_ids |= part.own_ids
        seen_labels |= part.own_labels
        moved = _shift(part.doc, a + 1 - part.first)
        for name in fields:
            getattr(doc, name).extend(_within(getattr(moved, name), a, b))
        doc.ids |= part.own_ids
        for label, line in part.doc.labels.items():  # (names -> lines: moved here)
            if label in part.own_labels:
                doc.labels.setdefault(label, line + a + 1 - part.first)
    return doc if _levels_agree(doc.headings, text.split("\n")) else None


def _levels_agree(headings: list[Any], lines: list[str]) -> bool:
    """Each title style has one level, its rank among the styles in order of first use (docutils' rule)."""
    order: list[tuple[str, str]] = []
    for h in headings:
        at = h.line - 1
        if not 0 <= at + 1 < len(lines) or not _ADORN.match(lines[at + 1]):
            return False
        over = at >= 1 and lines[at - 1].rstrip() == lines[at + 1].rstrip()
        style = ("o" if over else "", lines[at + 1][0])
        if style not in order:
            order.append(style)
        if order.index(style) + 1 != h.level:
            return False
    return True
