"""Markdown (skills) -> ``MarkdownDoc``: frontmatter with per-key lines, headings with GitHub anchors,
links, inline code, fenced code and tables, all with 1-based lines and columns.

Uses markdown-it-py (CommonMark + tables) with the front_matter plugin, and PyYAML's composer for
the line of every frontmatter key (nested keys as ``metadata.author``). A document that keeps to a plain
subset is read by ``parsers.quick`` instead (what markdown-it's tokens would give, without importing it), and plain
``key: value`` frontmatter without PyYAML: both libraries are imported only when a document needs them.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from ..model import Cell, Code, Heading, Link, MarkdownDoc, Table
from ..problems import MARKUP_PROBLEM, problem
from . import markdown_rs
from .markdown_parts import (
    code_col,
    fence_problems,
    front_block,
    frontmatter_block,
    html_comments,
    inline_comments,
    link_col,
    slugify,
    split_row,
    unique_slug,
)
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
            code = Code(child.content, lineno + 1, code_col(src, child.content, child.markup, cursor, lineno))
            doc.code.append(code)
            if cell is not None:
                cell.code.append(code)
        elif kind in ("link_open", "image"):
            href = str(child.attrs.get("href") or child.attrs.get("src") or "")
            col = link_col(src, href, cursor, lineno)
            if kind == "image":
                doc.links.append(Link(target=unquote(href), text=child.content, line=lineno + 1, col=col))
            else:
                link_stack.append((unquote(href), lineno + 1, col, []))
        elif kind == "link_close" and link_stack:
            target, line, col, text = link_stack.pop()
            doc.links.append(Link(target=target, text="".join(text), line=line, col=col))
    return "".join(plain)


#: what markdown-it takes for a line break when it numbers lines (its input normalization)


def _quick_document(doc: MarkdownDoc, lines: list[str], read: tuple[str | None, int, list[Any]]) -> None:
    """``doc`` from what ``quick_read`` found: the same headings, code, links and problems as from
    markdown-it's tokens of the same text (placed the same way: ``_inline``'s search for each span from the last)."""
    fm, body, items = read
    if fm is not None:
        front_block(doc, fm, 0, body)
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
            fence_problems(doc, lines, (i, end), markup, content, False)
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


#: what markdown-it takes for a line break when it numbers lines (its input normalization)
MD_LINE_BREAK = re.compile(r"\r\n?|\n")


def parse_markdown(path: str, text: str) -> MarkdownDoc:
    """Parse markdown ``text`` (already decoded, ``\\n`` newlines) of the file at ``path``: by the quick reader
    where the text keeps to its subset, else from markdown-it-pyrs' tree where that port is installed and reads
    the text (``parsers.markdown_rs``), else from markdown-it-py's tokens."""
    lines = text.split("\n")
    doc = MarkdownDoc(path=path, text=text, n_lines=len(lines) - (1 if text.endswith("\n") else 0))
    try:
        read = quick_read(text)
        tree = markdown_rs.tree(text) if read is None else None
        tokens = _parser().parse(text) if read is None and tree is None else []
    except Exception as exc:  # markdown-it is total on str input; this is a last resort
        doc.problems.append(problem(MARKUP_PROBLEM, path, 1, 1, f"markdown parser failed: {exc}"))
        return doc
    if read is not None:
        _quick_document(doc, lines, read)
    elif tree is not None:
        markdown_rs.build(doc, lines, text, tree)
    else:
        # markdown-it's token line maps count a lone "\r" as a line break too: fences are read in its lines
        _token_document(doc, lines, MD_LINE_BREAK.split(text) if "\r" in text else lines, tokens)
    return doc


def _token_document(doc: MarkdownDoc, lines: list[str], md_lines: list[str], tokens: list[Any]) -> None:
    """``doc`` from markdown-it's ``tokens`` (``md_lines``: the text split where markdown-it counts a line)."""
    fm = tokens[0] if tokens and tokens[0].type == "front_matter" else None
    frontmatter_block(doc, (fm.content, *(fm.map or (0, 0))) if fm is not None else None, lines)
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
                inline_comments(doc, lines, tok.map, [c.content for c in tok.children or () if c.type == "html_inline"])
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
            # a block that ends the file without a final line break: its last line ends as the others do, as the
            # Rust port gives it (markdown-it-py leaves the break off, and a never-closed fence looked closed)
            content = tok.content + "\n" if tok.content and not tok.content.endswith("\n") else tok.content
            if t == "fence" and tok.map:
                fence_problems(doc, md_lines, tok.map, tok.markup, content, quotes > 0)
            first = (tok.map[0] + (2 if t == "fence" else 1)) if tok.map else 1
            lang = tok.info.split()[0] if t == "fence" and tok.info.strip() else None
            doc.code.append(Code(text=content, line=first, col=1, kind="block", lang=lang))
        elif t == "html_block" and tok.map:
            html_comments(doc, tok.content, tok.map[0] + 1)
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
