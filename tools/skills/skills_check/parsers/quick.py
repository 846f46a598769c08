"""A quick reader for plain markdown: what markdown-it would find in a document that keeps to a narrow, plain subset,
or None for anything else (markdown-it then parses it).

Why: most files of a large skill collection are plain (front matter of ``key: value`` lines, ATX headings,
paragraphs and top-level list items with simple links and code spans, closed code fences), and importing
markdown-it and PyYAML costs more than reading those files. The subset is chosen so that every construct in
it has one reading: a line that could start anything else (an indented line, a block quote, HTML, a table
row, a thematic break or setext underline, a link reference definition, an escape or entity, a tab or a
control character, a bracket that is not a simple link) sends the whole document to markdown-it. Only what
``parsers.markdown`` reads is kept, as plain tuples (a collection has tens of thousands of them: no token objects):
the front matter block, and per line a heading, a code fence, or the links, images and code spans of a paragraph
or list item line (nothing in the subset spans two lines; a line without any is left out).
``tests/test_checker_quick_markdown.py`` checks the document built from them equals the one built from
markdown-it's tokens, over every markdown file of the repository and generated variants.

``plain_mapping`` does the same for front matter YAML: one ``key: value`` pair per line, each value a plain
scalar that YAML reads as a string; anything else goes to PyYAML.
"""

from __future__ import annotations

import re
from typing import Any

# What ``quick_read`` gives for a line (0-based ``line``), each a tuple led by its kind:
HEADING = 0  # (HEADING, line, level, title): an ATX heading with a plain title
FENCE = 1  # (FENCE, line, end, markup, info, content): a closed code fence, ``end`` the line after its closer
SPANS = 2  # (SPANS, line, spans): a paragraph or list item line's code spans, links and images, in order
# a span: (CODE_SPAN, content) | (IMAGE, label, destination) | (LINK, label, destination)
CODE_SPAN, IMAGE, LINK = "`", "!", "["

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


def _spans(line: str) -> list[tuple[str, ...]] | None:
    """The code spans, links and images markdown-it finds in one plain line, or None when the line leaves the
    subset."""
    out: list[tuple[str, ...]] = []
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
            out.append((CODE_SPAN, content))
            pos = end + 1
        elif ch == "!" and not line.startswith("![", at):
            pos = at + 1
        else:
            image = ch == "!"
            found = (_IMAGE if image else _LINK).match(line, at)
            if found is None:
                return None
            out.append((IMAGE if image else LINK, found.group(1), found.group(2)))
            pos = found.end()


def _fence(lines: list[str], i: int) -> tuple[Any, ...] | None:
    """The fence opened at line ``i`` and closed within the document (a ``FENCE`` tuple), or None."""
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
            return (FENCE, i, j + 1, markup, info, content)
    return None


def _front_matter(lines: list[str]) -> tuple[str | None, int] | None:
    """(the front matter's YAML or None when there is none, the first body line); None when the block is outside
    the subset."""
    if not lines or not lines[0].startswith("-"):
        return None, 0
    if lines[0] != "---":
        return None
    for j in range(1, len(lines)):
        line = lines[j]
        if line == "---":
            if j == 1:
                return None
            return "\n".join(lines[1:j]), j + 1
        if line.startswith("...") or line.lstrip(" ").startswith("---"):
            return None
    return None


def _block(lines: list[str], i: int, out: list[tuple[Any, ...]], scanned: bool = False) -> int | None:
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
        return fence[2]
    first = line[0]
    if first in " >|<=" or not scanned and _OUTSIDE_LINE.search(line):
        return None
    if first in "-*_+" and _BREAKISH.fullmatch(line):
        return None
    if first == "#":
        m = _HEADING.fullmatch(line)
        if m is None or m.group(2).rstrip().endswith("#") or not _HEADING_PLAIN.fullmatch(m.group(2)):
            return None
        out.append((HEADING, i, len(m.group(1)), m.group(2).strip()))
        return i + 1
    marker = _MARKER.match(line)
    if marker is not None:
        rest = line[marker.end() :]
        if not rest or not (rest[0].isalpha() or rest[0] == "[" or rest[0] == "`" and rest[1:2] not in ("`", "")):
            return None
    spans = _spans(line)
    if spans is None:
        return None
    if spans:  # a line without a link, image or code span holds nothing parsers.markdown reads
        out.append((SPANS, i, spans))
    return i + 1


def quick_read(text: str) -> tuple[str | None, int, list[tuple[Any, ...]]] | None:
    """(the front matter's YAML or None, the first body line, what each body line holds: ``HEADING``, ``FENCE`` and
    ``SPANS`` tuples in order) for ``text``, or None when it leaves the plain subset this reader knows."""
    if _OUTSIDE_DOC.search(text):
        return None
    lines = text.split("\n")
    head = _front_matter(lines)
    if head is None:
        return None
    fm, i = head
    body = i
    out: list[tuple[Any, ...]] = []
    scanned = "```" not in text and "~~~" not in text  # no fence: every body line is searched at once
    # the body starts after "---\n", the front matter and "\n---\n" (a start a few characters early reads only
    # the closing dashes, which hold nothing the pattern looks for)
    if scanned and _OUTSIDE_LINE.search(text, len(fm) + 8 if fm is not None else 0):
        return None
    while i < len(lines):
        if not lines[i]:  # an empty line (most blank lines): nothing to read, no call
            i += 1
            continue
        nxt = _block(lines, i, out, scanned)
        if nxt is None:
            return None
        i = nxt
    return fm, body, out


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
