"""Markdown (skills) -> ``MarkdownDoc``: frontmatter with per-key lines, headings with GitHub anchors,
links, inline code, fenced code and tables, all with 1-based lines and columns.

Uses markdown-it-py (CommonMark + tables) with the front_matter plugin, and PyYAML's composer for
the line of every frontmatter key (nested keys as ``metadata.author``). A document that keeps to a plain
subset is read by ``parsers.quick`` instead (what markdown-it's tokens would give, without importing it), and plain
``key: value`` frontmatter without PyYAML: both libraries are imported only when a document needs them.
"""

from __future__ import annotations

import functools
import itertools
import re
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from ..model import Cell, Code, Comment, Heading, Link, MarkdownDoc, Table
from ..problems import (
    FENCE_UNCLOSED,
    FRONTMATTER_UNCLOSED,
    MARKUP_PROBLEM,
    problem,
)
from . import markdown_rs
from .frontmatter import read_frontmatter
from .quick import CODE_SPAN, HEADING, SPANS, quick_read

if TYPE_CHECKING:
    from markdown_it import MarkdownIt


@functools.cache
def _parser() -> MarkdownIt:
    """The markdown-it parser (stateless between documents: each parse builds its own state)."""
    # markdown-it and its plugin cost more to import than a plain document costs to read: imported here, for
    # the first document parsers.quick leaves to it
    from markdown_it import MarkdownIt
    from mdit_py_plugins.front_matter import front_matter_plugin

    return MarkdownIt("commonmark").enable("table").use(front_matter_plugin)


def _tokens(text: str) -> list[Any]:
    """The tokens of ``text``: markdown-it-pyrs' tree read as markdown-it-py's tokens where that port is
    installed and reads the text (``parsers.markdown_rs``), else markdown-it-py's own."""
    fast = markdown_rs.tokens(text)
    return _parser().parse(text) if fast is None else fast


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
    bounds = [m.start() for m in _ESCAPE_OR_PIPE.finditer(line) if m[0] == "|"] if "|" in line else []
    cuts = [-1] + bounds + [len(line)]
    segs = [(a + 1, b) for a, b in itertools.pairwise(cuts)]
    if segs and bounds and not line[: bounds[0]].strip():
        segs = segs[1:]  # before a leading pipe
    if segs and bounds and not line[bounds[-1] + 1 :].strip():
        segs = segs[:-1]  # after a trailing pipe
    spans = []
    for start, end in segs:
        while start < end and line[start] in " \t":
            start += 1
        while end > start and line[end - 1] in " \t":
            end -= 1
        spans.append((start, end))
    return spans


def _find_col(line_text: str, needle: str, start: int) -> int:
    """0-based column of ``needle`` in ``line_text`` at or after ``start`` (-1 when absent)."""
    if not needle:
        return -1
    return line_text.find(needle, start)


def _inline(doc: MarkdownDoc, lines: list[str], tok: Any, cell: Cell | None = None) -> str:
    """Collect links and code spans of one inline token; return its plain text."""
    base = tok.map[0] if tok.map else 0
    offset = 0
    cursor: dict[int, int] = {}
    plain: list[str] = []
    link_stack: list[tuple[str, int, int, list[str]]] = []
    for child in tok.children or []:
        kind = child.type
        if kind == "text":  # the most common child, and the only one that needs no location
            plain.append(child.content)
            if link_stack:
                link_stack[-1][3].append(child.content)
            continue
        if kind in ("softbreak", "hardbreak"):
            offset += 1
            plain.append(" ")
            continue
        lineno = base + offset
        src = lines[lineno] if lineno < len(lines) else ""
        if kind == "code_inline":
            plain.append(child.content)
            if link_stack:
                link_stack[-1][3].append(child.content)
            pos = _find_col(src, child.content, cursor.get(lineno, 0))
            if pos >= 0:
                cursor[lineno] = pos + len(child.content)
                col = pos - len(child.markup) + 1 if pos >= len(child.markup) else pos + 1
            else:
                col = 1
            code = Code(text=child.content, line=lineno + 1, col=max(1, col), kind="inline")
            doc.code.append(code)
            if cell is not None:
                cell.code.append(code)
        elif kind in ("link_open", "image"):
            href = child.attrs.get("href") or child.attrs.get("src") or ""
            target = unquote(str(href))
            pos = _find_col(src, "](" + str(href), cursor.get(lineno, 0))
            if pos >= 0:
                pos += 2  # point at the target
            else:
                pos = _find_col(src, str(href), cursor.get(lineno, 0))
            if pos < 0:
                pos = src.find("[", cursor.get(lineno, 0))
            else:
                cursor[lineno] = pos + 1
            if kind == "image":
                doc.links.append(
                    Link(target=target, text=child.content, line=lineno + 1, col=max(1, pos + 1) if pos >= 0 else 1)
                )
            else:
                link_stack.append((target, lineno + 1, max(1, pos + 1) if pos >= 0 else 1, []))
        elif kind == "link_close" and link_stack:
            target, line, col, text = link_stack.pop()
            doc.links.append(Link(target=target, text="".join(text), line=line, col=col))
    return "".join(plain)


#: what markdown-it takes for a line break when it numbers lines (its input normalization)
MD_LINE_BREAK = re.compile(r"\r\n?|\n")


def _is_fence(line: str, markup: str) -> tuple[bool, str]:
    """Whether ``line`` starts with a fence of ``markup``'s character at least as long; the text after it."""
    stripped = line.strip()
    run = len(stripped) - len(stripped.lstrip(markup[0]))
    return run >= len(markup), stripped[run:].strip()


_QUOTE_PREFIX = re.compile(r"^\s{0,3}(?:>\s?)+")


def _fence_problems(
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
    for n in range(start + 1, end):
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


def _html_comments(doc: MarkdownDoc, content: str, first_line: int) -> None:
    """The HTML comments of an ``html_block`` token's ``content`` (its first line is ``first_line``)."""
    for m in HTML_COMMENT_RE.finditer(content):
        line = first_line + content.count("\n", 0, m.start())
        col = m.start() - (content.rfind("\n", 0, m.start()) + 1) + 1
        doc.comments.append(
            Comment(text=m.group(1).strip(), line=line, end_line=line + m.group(0).count("\n"), col=col)
        )


def _inline_comments(doc: MarkdownDoc, lines: list[str], tok: Any) -> None:
    """``html_inline`` comments among an inline token's children, located in the lines the token spans."""
    if not tok.map:
        return
    cursor = tok.map[0]
    for child in tok.children or ():
        if child.type != "html_inline" or not child.content.startswith("<!--"):
            continue
        head = child.content.split("\n", 1)[0]
        for i in range(cursor, min(tok.map[1], len(lines))):
            col = lines[i].find(head)
            if col >= 0:
                cursor = i
                doc.comments.append(
                    Comment(
                        text=child.content[4:-3].strip(),
                        line=i + 1,
                        end_line=i + 1 + child.content.count("\n"),
                        col=col + 1,
                    )
                )
                break


def _yaml_comments(doc: MarkdownDoc, content: str, first_line: int) -> None:
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


def _read_frontmatter(doc: MarkdownDoc, tokens: list[Any], lines: list[str]) -> None:
    """The frontmatter block markdown-it found (its YAML, key lines and comments), or IN011 for one never closed."""
    if tokens and tokens[0].type == "front_matter":
        fm = tokens[0]
        start, end = fm.map or (0, 0)
        _front_block(doc, fm.content, start, end)
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


def _front_block(doc: MarkdownDoc, content: str, start: int, end: int) -> None:
    """A closed frontmatter block (its YAML ``content``, lines ``start`` to ``end`` 0-based, end exclusive): its
    data, key lines and comments."""
    doc.body_start = end + 1
    read_frontmatter(doc, content, start + 2)
    _yaml_comments(doc, content, start + 2)


def _quick_document(doc: MarkdownDoc, lines: list[str], read: tuple[str | None, int, list[Any]]) -> None:
    """``doc`` from what ``quick_read`` found: the same headings, code, links and problems as from
    markdown-it's tokens of the same text (placed the same way: ``_inline``'s search for each span from the last)."""
    fm, body, items = read
    if fm is not None:
        _front_block(doc, fm, 0, body)
    slugs: set[str] = set()
    for item in items:
        kind, i = item[0], item[1]
        if kind == SPANS:
            _quick_spans(doc, lines[i], i + 1, item[2])
        elif kind == HEADING:
            title = item[3]
            doc.headings.append(Heading(item[2], title, unique_slug(slugify(title), slugs), i + 1))
        else:
            _, _, end, markup, info, content = item
            _fence_problems(doc, lines, (i, end), markup, content, False)
            doc.code.append(Code(content, i + 2, 1, "block", info.split()[0] if info.strip() else None))


def _quick_spans(doc: MarkdownDoc, src: str, line: int, spans: list[tuple[str, ...]]) -> None:
    """One line's code spans, links and images (``SPANS``), each found in ``src`` after the one before it as
    ``_inline`` finds a token's children."""
    cursor = 0
    for span in spans:
        if span[0] == CODE_SPAN:
            content = span[1]
            pos = src.find(content, cursor)
            if pos >= 0:
                cursor = pos + len(content)
            doc.code.append(Code(content, line, max(1, pos), "inline"))
            continue
        label, href = span[1], span[2]
        pos = src.find("](" + href, cursor)
        if pos >= 0:
            pos += 2  # point at the target
        else:
            pos = src.find(href, cursor)
        if pos < 0:
            pos = src.find("[", cursor)
        else:
            cursor = pos + 1
        doc.links.append(Link(unquote(href), label, line, pos + 1 if pos >= 0 else 1))


def parse_markdown(path: str, text: str) -> MarkdownDoc:
    """Parse markdown ``text`` (already decoded, ``\\n`` newlines) of the file at ``path``."""
    lines = text.split("\n")
    doc = MarkdownDoc(path=path, text=text, n_lines=len(lines) - (1 if text.endswith("\n") else 0))
    try:
        read = quick_read(text)
        tokens = _tokens(text) if read is None else []
    except Exception as exc:  # markdown-it is total on str input; this is a last resort
        doc.problems.append(problem(MARKUP_PROBLEM, path, 1, 1, f"markdown parser failed: {exc}"))
        return doc
    if read is not None:
        _quick_document(doc, lines, read)
    else:
        # markdown-it's token line maps count a lone "\r" as a line break too: fences are read in its lines
        _token_document(doc, lines, MD_LINE_BREAK.split(text) if "\r" in text else lines, tokens)
    return doc


def _token_document(doc: MarkdownDoc, lines: list[str], md_lines: list[str], tokens: list[Any]) -> None:
    """``doc`` from markdown-it's ``tokens`` (``md_lines``: the text split where markdown-it counts a line)."""
    _read_frontmatter(doc, tokens, lines)
    slugs: set[str] = set()  # GitHub-style anchors, repeats suffixed -1, -2 (mdit-py-plugins' own rule)
    last_heading: str | None = None
    table: Table | None = None
    row: list[Cell] | None = None
    in_head = False
    col_index = 0
    row_line = 0  # the table row being read: its line (0-based) and its cells' spans
    spans: list[tuple[int, int]] = []
    quotes = 0  # block quotes open around the current token
    for i, tok in enumerate(tokens):
        t = tok.type
        if t == "inline":  # the most common token first
            if row is not None and table is not None:
                cell = Cell(text=tok.content.strip(), line=row_line + 1, col=1)
                if col_index < len(spans):
                    cell.col = spans[col_index][0] + 1
                _inline(doc, lines, tok, cell)
                row.append(cell)
                col_index += 1
            elif not (i > 0 and tokens[i - 1].type == "heading_open"):
                _inline(doc, lines, tok)
            if "<!--" in tok.content:
                _inline_comments(doc, lines, tok)
        elif t in ("blockquote_open", "blockquote_close"):
            quotes += 1 if t == "blockquote_open" else -1
        elif t == "heading_open":
            title = _inline(doc, lines, tokens[i + 1])
            last_heading = title.strip()
            doc.headings.append(
                Heading(
                    level=int(tok.tag[1:]),
                    text=last_heading,
                    anchor=unique_slug(slugify(last_heading), slugs),
                    line=(tok.map[0] + 1) if tok.map else 1,
                )
            )
        elif t in ("fence", "code_block"):
            if t == "fence" and tok.map:
                _fence_problems(doc, md_lines, tok.map, tok.markup, tok.content, quotes > 0)
            first = (tok.map[0] + (2 if t == "fence" else 1)) if tok.map else 1
            lang = tok.info.split()[0] if t == "fence" and tok.info.strip() else None
            doc.code.append(Code(text=tok.content, line=first, col=1, kind="block", lang=lang))
        elif t == "html_block" and tok.map:
            _html_comments(doc, tok.content, tok.map[0] + 1)
        elif t == "table_open":
            table = Table(header=[], rows=[], line=(tok.map[0] + 1) if tok.map else 1, title=last_heading)
        elif t == "table_close" and table is not None:
            doc.tables.append(table)
            table = None
        elif t == "thead_open":
            in_head = True
        elif t == "thead_close":
            in_head = False
        elif t == "tr_open" and table is not None:
            row = []
            col_index = 0
            row_line = tok.map[0] if tok.map else table.line - 1
            spans = split_row(lines[row_line]) if row_line < len(lines) else []
        elif t == "tr_close" and table is not None and row is not None:
            if in_head:
                table.header = row
            else:
                table.rows.append(row)
            row = None
