"""The parts of a ``MarkdownDoc`` that every reader of markdown builds alike, whatever gives it the document's
structure (markdown-it-py's tokens, ``parsers.markdown``; markdown-it-pyrs' tree, ``parsers.markdown_rs``; the
quick reader, ``parsers.quick``): GitHub anchors, table row cells, where a code span or link sits on its line, code
fences that never close, HTML and YAML comments, and the frontmatter block."""

from __future__ import annotations

import functools
import itertools
import re

from ..model import Comment, MarkdownDoc
from ..problems import FENCE_UNCLOSED, FRONTMATTER_UNCLOSED, problem
from .frontmatter import read_frontmatter

_NOT_IN_ASCII_SLUG = re.compile(r"[^A-Za-z0-9_ -]")


@functools.cache
def _not_in_slug() -> re.Pattern[str]:
    """What a slug drops from a title with non-ASCII characters (compiled for the first such title: a Unicode
    class costs more to compile than most checks spend on slugs)."""
    return re.compile(r"[^\w\u4e00-\u9fff -]")


def slugify(title: str) -> str:
    """GitHub's anchor for a heading (as mdit-py-plugins' anchors plugin makes it): lower case, each space a
    hyphen, then only word characters, CJK ideographs and hyphens kept."""
    text = title.lower().replace(" ", "-")
    return (_NOT_IN_ASCII_SLUG if text.isascii() else _not_in_slug()).sub("", text)


def unique_slug(slug: str, slugs: set[str]) -> str:
    """``slug``, or ``slug-1``, ``slug-2``... the first not in ``slugs`` (added to it)."""
    candidate, n = slug, 0
    while candidate in slugs:
        n += 1
        candidate = f"{slug}-{n}"
    slugs.add(candidate)
    return candidate


#: a backslash and the character it escapes, or a pipe (a cell boundary unless escaped)
_ESCAPE_OR_PIPE = re.compile(r"\\.|\|", re.S)


def split_row(line: str) -> list[tuple[int, int]]:
    """Spans (start, end) of the cells of a GFM table row, content stripped; ``\\|`` does not split."""
    if "\\" in line:
        bounds = [m.start() for m in _ESCAPE_OR_PIPE.finditer(line) if m[0] == "|"]
    else:  # no escape: every pipe is a boundary
        bounds, at = [], line.find("|")
        while at >= 0:
            bounds.append(at)
            at = line.find("|", at + 1)
    cuts = [-1] + bounds + [len(line)]
    segs = [(a + 1, b) for a, b in itertools.pairwise(cuts)]
    if segs and bounds and not line[: bounds[0]].strip():
        segs = segs[1:]  # before a leading pipe
    if segs and bounds and not line[bounds[-1] + 1 :].strip():
        segs = segs[:-1]  # after a trailing pipe
    spans = []
    for start, end in segs:
        cell = line[start:end]
        left = cell.lstrip(" \t")
        start += len(cell) - len(left)
        spans.append((start, start + len(left.rstrip(" \t"))))
    return spans


def code_col(src: str, content: str, markup: str, cursor: dict[int, int], lineno: int) -> int:
    """1-based column of a code span of ``content`` (its backticks ``markup``) on line ``src`` (0-based ``lineno``),
    searched from where the last span or link of that line ended (``cursor``, moved past it)."""
    pos = src.find(content, cursor.get(lineno, 0)) if content else -1
    if pos < 0:
        return 1
    cursor[lineno] = pos + len(content)
    return max(1, pos - len(markup) + 1 if pos >= len(markup) else pos + 1)


def link_col(src: str, href: str, cursor: dict[int, int], lineno: int) -> int:
    """1-based column of a link or image to ``href`` on line ``src`` (its target where found, else its ``[``), searched
    as ``code_col`` searches."""
    start = cursor.get(lineno, 0)
    pos = src.find("](" + href, start)
    if pos >= 0:
        pos += 2  # point at the target
    elif href:
        pos = src.find(href, start)
    if pos < 0:
        pos = src.find("[", start)
    else:
        cursor[lineno] = pos + 1
    return max(1, pos + 1) if pos >= 0 else 1


def _is_fence(line: str, markup: str) -> tuple[bool, str]:
    """Whether ``line`` starts with a fence of ``markup``'s character at least as long; the text after it."""
    stripped = line.strip()
    run = len(stripped) - len(stripped.lstrip(markup[0]))
    return run >= len(markup), stripped[run:].strip()


_QUOTE_PREFIX = re.compile(r"^\s{0,3}(?:>\s?)+")


def fence_problems(
    doc: MarkdownDoc, lines: list[str], span: tuple[int, int], markup: str, content: str, quoted: bool
) -> None:
    """IN015: a fence never closed, or a would-be closing fence with text after it (it closes nothing).

    Whether the fence closed is read from its line span as markdown-it's token gives it (``span``: the opening
    line and the line after the last, 0-based; ``content``: its text), which covers the opening line, the content
    lines and, only when it closed, the closing line. So a fence inside a block quote or a list item is judged by
    CommonMark's rules, whatever prefix its lines carry."""
    start, end = span
    if not markup:
        return
    # a line that starts with the fence's markup holds it: where the content does not, only the closing line can
    for n in range(start + 1, end) if markup in content else ():
        line = _QUOTE_PREFIX.sub("", lines[n]) if quoted else lines[n]
        is_fence, rest = _is_fence(line, markup)
        if is_fence and rest:
            doc.problems.append(
                problem(
                    FENCE_UNCLOSED,
                    doc.path,
                    n + 1,
                    1,
                    f'"{lines[n].strip()[:40]}" inside the code '
                    f"block opened at line {start + 1} closes nothing: a closing fence takes no "
                    "text after it, so the block runs on; put the text on its own line",
                )
            )
    content_lines = content.count("\n")
    closed = end - start >= content_lines + 2
    if not closed:
        doc.problems.append(
            problem(
                FENCE_UNCLOSED,
                doc.path,
                start + 1,
                1,
                f'code fence "{markup}" opened here is never closed: the rest of the file is read as code',
            )
        )


HTML_COMMENT_RE = re.compile(r"<!--(.*?)-->", re.S)


def html_comments(doc: MarkdownDoc, content: str, first_line: int) -> None:
    """The HTML comments of an ``html_block`` token's ``content`` (its first line is ``first_line``)."""
    for m in HTML_COMMENT_RE.finditer(content):
        line = first_line + content.count("\n", 0, m.start())
        col = m.start() - (content.rfind("\n", 0, m.start()) + 1) + 1
        doc.comments.append(
            Comment(text=m.group(1).strip(), line=line, end_line=line + m.group(0).count("\n"), col=col)
        )


def inline_comments(doc: MarkdownDoc, lines: list[str], span: list[int] | None, html: list[str]) -> None:
    """The comments among an inline run's HTML (``html``: its ``html_inline`` contents, in order), located in the
    lines the run spans (``span``: its first line and the line after its last, 0-based)."""
    if not span:
        return
    cursor = span[0]
    for content in html:
        if not content.startswith("<!--"):
            continue
        head = content.split("\n", 1)[0]
        for i in range(cursor, min(span[1], len(lines))):
            col = lines[i].find(head)
            if col >= 0:
                cursor = i
                doc.comments.append(
                    Comment(text=content[4:-3].strip(), line=i + 1, end_line=i + 1 + content.count("\n"), col=col + 1)
                )
                break


def yaml_comments(doc: MarkdownDoc, content: str, first_line: int) -> None:
    """Whole-line ``#`` comments of frontmatter YAML, outside multi-line scalars (PyYAML's scanner tells
    where each scalar spans; it keeps no comments itself)."""
    if not any(line.lstrip().startswith("#") for line in content.split("\n")):
        return  # no line that could be a comment: nothing to scan for
    import yaml  # PyYAML: its scanner, for frontmatter with comment lines (see the module's doc)

    inside: set[int] = set()
    try:
        for token in yaml.scan(content, Loader=yaml.SafeLoader):
            if isinstance(token, yaml.ScalarToken):
                end = token.end_mark.line + (1 if token.end_mark.column > 0 else 0)  # a block scalar ends at col 0
                inside.update(range(token.start_mark.line + 1, end))
    except yaml.YAMLError:
        return  # an IN01x problem says why; no comment is read from YAML that does not scan
    for i, line in enumerate(content.split("\n")):
        if i not in inside and line.lstrip().startswith("#"):
            doc.comments.append(
                Comment(
                    text=line.lstrip()[1:].strip(),
                    line=first_line + i,
                    end_line=first_line + i,
                    col=len(line) - len(line.lstrip()) + 1,
                )
            )


def frontmatter_block(doc: MarkdownDoc, block: tuple[str, int, int] | None, lines: list[str]) -> None:
    """The frontmatter block the parser found (``block``: its YAML, its first line and the line after its last,
    0-based), or IN011 for one opened and never closed (``block`` None)."""
    if block is not None:
        front_block(doc, *block)
    elif lines and lines[0].rstrip() == "---":
        doc.problems.append(
            problem(
                FRONTMATTER_UNCLOSED,
                doc.path,
                1,
                1,
                "frontmatter block opened with --- is never closed; it is read as body text",
            )
        )
        doc.frontmatter_error = True


def front_block(doc: MarkdownDoc, content: str, start: int, end: int) -> None:
    """A closed frontmatter block (its YAML ``content``, lines ``start`` to ``end`` 0-based, end exclusive): its
    data, key lines and comments."""
    doc.body_start = end + 1
    read_frontmatter(doc, content, start + 2)
    yaml_comments(doc, content, start + 2)
