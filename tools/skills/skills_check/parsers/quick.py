"""A quick reader for plain markdown: the tokens markdown-it would give a document that keeps to a narrow, plain
subset, or None for anything else (markdown-it then parses it).

Why: most files of a large skill collection are plain (front matter of ``key: value`` lines, ATX headings,
paragraphs and top-level list items with simple links and code spans, closed code fences), and importing
markdown-it and PyYAML costs more than reading those files. The subset is chosen so that every construct in
it has one reading: a line that could start anything else (an indented line, a block quote, HTML, a table
row, a thematic break or setext underline, a link reference definition, an escape or entity, a tab or a
control character, a bracket that is not a simple link) sends the whole document to markdown-it. Only the
tokens ``parsers.markdown`` reads are made (headings, inline children with links, images and code spans, code
fences, the front matter block); paragraph and list wrappers are left out, a heading is one ``heading`` token
(its plain title as content), and each paragraph line is its own inline token (nothing in the subset spans two
lines), made only for a line with a link, image or code span. ``tests/test_checker_quick_markdown.py`` checks the
document built from these tokens equals the one built from markdown-it's, over every markdown file of the
repository and generated variants.

``plain_mapping`` does the same for front matter YAML: one ``key: value`` pair per line, each value a plain
scalar that YAML reads as a string; anything else goes to PyYAML.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

NO_ATTRS: Mapping[str, str] = MappingProxyType({})  # a token without attributes (read, never written)


class Tok:
    """The attributes of a markdown-it token that ``parsers.markdown`` reads (given by position: the reader
    makes thousands of them a document collection)."""

    __slots__ = ("attrs", "children", "content", "info", "map", "markup", "tag", "type")

    def __init__(
        self,
        type: str,
        map: list[int] | None = None,
        content: str = "",
        tag: str = "",
        markup: str = "",
        info: str = "",
        attrs: Mapping[str, str] = NO_ATTRS,
        children: list[Tok] | None = None,
    ) -> None:
        self.type, self.map, self.content, self.tag = type, map, content, tag
        self.markup, self.info, self.attrs, self.children = markup, info, attrs, children


# A character that could start a construct outside the subset anywhere on a line (outside code fences):
# control characters and tabs, escapes, entities, HTML and autolinks, table pipes.
_OUTSIDE_DOC = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\r\t\x85\u2028\u2029]")
_OUTSIDE_LINE = re.compile(r"[\\<&|]|\]:")
# thematic breaks, setext underlines, a lone list marker: any line of only these characters
_BREAKISH = re.compile(r"[-*_=+ ]+")
_HEADING = re.compile(r"(#{1,6}) +(\S.*)")
_HEADING_PLAIN = re.compile(r"[^`*_\[\]<>&\\|]*")
# a list item's marker (the item's text must then start plainly: a letter, a link, a code span)
_MARKER = re.compile(r"(?:[-*+]|\d{1,9}[.)])(?: |$)")
_FENCE = re.compile(r"(`{3,}|~{3,})(.*)")
_LABEL = r"([^\[\]`*_<>&\\!\n]*)"
_DEST = r"((?!//)[A-Za-z0-9._~/#?=+,;-]+)"
_LINK = re.compile(r"\[" + _LABEL + r"\]\(" + _DEST + r"\)")
_IMAGE = re.compile(r"!\[" + _LABEL + r"\]\(" + _DEST + r"\)")
_SPECIAL = re.compile(r"[`\[\]!]")


def _inline(line: str) -> list[Tok] | None:
    """The children markdown-it gives one plain line (links, images, code spans; text only inside a link), or
    None when the line leaves the subset."""
    out: list[Tok] = []
    pos = 0
    while True:
        m = _SPECIAL.search(line, pos)
        if m is None:
            return out
        at = m.start()
        ch = line[at]
        if ch == "`":
            if line.startswith("``", at):
                return None
            end = line.find("`", at + 1)
            if end < 0 or line.startswith("``", end):
                return None
            content = line[at + 1 : end]
            if content.startswith(" ") and content.endswith(" ") and content.strip():
                content = content[1:-1]
            out.append(Tok("code_inline", None, content, "", "`"))
            pos = end + 1
        elif ch == "!" and not line.startswith("![", at):
            pos = at + 1
        else:
            image = ch == "!"
            found = (_IMAGE if image else _LINK).match(line, at)
            if found is None:
                return None
            label, dest = found.group(1), found.group(2)
            if image:
                out.append(Tok("image", None, label, "", "", "", {"src": dest}))
            else:
                out.append(Tok("link_open", None, "", "", "", "", {"href": dest}))
                if label:
                    out.append(Tok("text", None, label))
                out.append(Tok("link_close"))
            pos = found.end()


def _fence(lines: list[str], i: int) -> Tok | None:
    """The fence opened at line ``i`` and closed within the document, or None."""
    m = _FENCE.fullmatch(lines[i])
    assert m is not None
    markup, info = m.group(1), m.group(2)
    if markup[0] == "`" and "`" in info:
        return None
    closer = re.compile(" {0,3}" + re.escape(markup[0]) + "{" + str(len(markup)) + ",} *")
    for j in range(i + 1, len(lines)):
        if closer.fullmatch(lines[j]):
            body = lines[i + 1 : j]
            content = "\n".join(body) + "\n" if body else ""
            return Tok("fence", [i, j + 1], content, "code", markup, info)
    return None


def _front_matter(lines: list[str]) -> tuple[Tok | None, int] | None:
    """(the front matter token or None, the first body line); None when the block is outside the subset."""
    if not lines or not lines[0].startswith("-"):
        return None, 0
    if lines[0] != "---":
        return None
    for j in range(1, len(lines)):
        line = lines[j]
        if line == "---":
            if j == 1:
                return None
            return Tok("front_matter", [0, j + 1], "\n".join(lines[1:j]), "", "---"), j + 1
        if line.startswith("...") or line.lstrip(" ").startswith("---"):
            return None
    return None


def _block(lines: list[str], i: int, out: list[Tok], scanned: bool = False) -> int | None:
    """Read the block line ``i`` starts into ``out``; the next line, or None when it leaves the subset.
    ``scanned``: the document holds no fence and its body was searched for ``_OUTSIDE_LINE`` as a whole."""
    line = lines[i]
    if not line.strip():
        return i + 1
    if line.startswith(("```", "~~~")):  # its info string and body are taken as they are
        fence = _fence(lines, i)
        if fence is None:
            return None
        out.append(fence)
        return fence.map[1]  # type: ignore[index]
    first = line[0]
    if first in " >|<=" or not scanned and _OUTSIDE_LINE.search(line):
        return None
    if first in "-*_+" and _BREAKISH.fullmatch(line):
        return None
    if first == "#":
        m = _HEADING.fullmatch(line)
        if m is None or m.group(2).rstrip().endswith("#") or not _HEADING_PLAIN.fullmatch(m.group(2)):
            return None
        text = m.group(2).strip()
        span = [i, i + 1]
        # one token where markdown-it gives three (heading_open, inline, heading_close): a plain title is its text
        out.append(Tok("heading", span, text, f"h{len(m.group(1))}", m.group(1)))
        return i + 1
    marker = _MARKER.match(line)
    if marker is not None:
        rest = line[marker.end() :]
        if not rest or not (rest[0].isalpha() or rest[0] == "[" or rest[0] == "`" and rest[1:2] not in ("`", "")):
            return None
    children = _inline(line)
    if children is None:
        return None
    if children:  # a line without a link, image or code span holds nothing parsers.markdown reads
        out.append(Tok("inline", [i, i + 1], line.strip(), "", "", "", NO_ATTRS, children))
    return i + 1


def quick_tokens(text: str) -> list[Any] | None:
    """markdown-it's tokens for ``text`` (those ``parsers.markdown`` reads), or None when ``text`` leaves the
    plain subset this reader knows."""
    if _OUTSIDE_DOC.search(text):
        return None
    lines = text.split("\n")
    head = _front_matter(lines)
    if head is None:
        return None
    fm, i = head
    out: list[Tok] = [fm] if fm is not None else []
    scanned = "```" not in text and "~~~" not in text  # no fence: every body line is searched at once
    # the body starts after "---\n", the front matter and "\n---\n" (a start a few characters early reads only
    # the closing dashes, which hold nothing the pattern looks for)
    if scanned and _OUTSIDE_LINE.search(text, len(fm.content) + 8 if fm is not None else 0):
        return None
    while i < len(lines):
        if not lines[i]:  # an empty line (most blank lines): nothing to read, no call
            i += 1
            continue
        nxt = _block(lines, i, out, scanned)
        if nxt is None:
            return None
        i = nxt
    return out


# A plain scalar YAML resolves to a string: it starts with an ASCII letter (no indicator, number, date), is
# not one of YAML 1.1's booleans or nulls, and holds no ": " (a nested mapping) or " #" (a comment) and no
# character YAML refuses or reads as a line break.
_KEY_VALUE = re.compile(r"([A-Za-z_][A-Za-z0-9_-]*): ([A-Za-z](?:[^\n]*\S)?)")
_NOT_STRINGS = frozenset({"yes", "no", "true", "false", "on", "off", "null", "y", "n", "~"})
_YAML_BREAKS = re.compile(r": | #|:$")


def _yaml_printable(text: str) -> bool:
    """Every character of ``text`` one YAML takes as it is: printable (its c-printable set), not a byte-order
    mark, not one it reads as a line break (NEL, U+2028, U+2029)."""
    return all(
        0x20 <= o <= 0x7E
        or (0xA0 <= o <= 0xD7FF and o not in (0x2028, 0x2029))
        or (0xE000 <= o <= 0xFFFD and o != 0xFEFF)
        or 0x10000 <= o <= 0x10FFFF
        for o in map(ord, text)
    )


def plain_mapping(content: str) -> tuple[dict[str, str], dict[str, int]] | None:
    """(data, key -> 0-based line) for front matter YAML of plain ``key: value`` lines whose values YAML reads
    as strings, each key once; None for anything else."""
    data: dict[str, str] = {}
    where: dict[str, int] = {}
    for n, line in enumerate(content.split("\n")):
        m = _KEY_VALUE.fullmatch(line)
        if m is None:
            return None
        key, value = m.group(1), m.group(2)
        if key in data or key.lower() in _NOT_STRINGS or value.lower() in _NOT_STRINGS:
            return None
        if _YAML_BREAKS.search(value) or not (value.isprintable() if value.isascii() else _yaml_printable(value)):
            return None
        data[key] = value
        where[key] = n
    return data, where
