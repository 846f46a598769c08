"""markdown-it-pyrs (markdown-it's Rust port) -> ``MarkdownDoc``, built straight from the port's tree.

Why: on real skill collections most documents are not plain enough for ``parsers.quick``, and markdown-it-py's
block and inline parsing was most of a check's time (about 60% on a collection of 80 skills); the Rust port
parses the same CommonMark + tables + front matter about ten times faster. It gives a tree of nodes with byte
spans (``srcmap``) instead of a token stream. Reading that tree into markdown-it-py's tokens first, and the
tokens into the document, cost as much again as the parse, so ``build`` walks the tree once and makes the
document ``parsers.markdown`` makes from markdown-it-py's tokens: the same front matter, headings, code, links,
tables, comments and problems, in the same order, with the parts both readers share (``parsers.markdown_parts``).

``tests/test_checker_markdown_rs.py`` holds the document built here equal to the one built from markdown-it-py's
tokens over every markdown file of the repository and generated documents; ``benchmarks/markdown_rs_equal.py``
does the same over a corpus of real repositories. A text with a carriage return or a NUL (where the two ports
number lines or bytes differently), or a machine without the package, goes to markdown-it-py (``tree`` is None).
"""

from __future__ import annotations

import bisect
import functools
import itertools
import os
import re
from typing import Any
from urllib.parse import unquote

from ..model import Cell, Code, Heading, Link, MarkdownDoc, Table
from .markdown_parts import (
    code_col,
    fence_problems,
    frontmatter_block,
    html_comments,
    inline_comments,
    link_col,
    slugify,
    split_row,
    unique_slug,
)

#: inline nodes that the tree nests and markdown-it-py's inline token lists flat (their children are read)
_INLINE = frozenset(
    {"text", "text_special", "code_inline", "link", "autolink", "image", "em", "strong", "softbreak", "hardbreak",
     "html_inline"}
)  # fmt: skip


@functools.cache
def _parser() -> Any:
    """The Rust parser, or None where markdown-it-pyrs is not installed."""
    try:
        import markdown_it_pyrs  # markdown-it's Rust port: see the module's doc
    except ImportError:
        return None
    return markdown_it_pyrs.MarkdownIt("commonmark").enable_many(["table", "front_matter"])


def available() -> bool:
    """Whether markdown-it-pyrs can be imported here."""
    return _parser() is not None


def tree(text: str) -> Any | None:
    """The port's tree of ``text``, or None where this port is not used (no package, a carriage return or NUL in
    the text, a comment the two ports read apart, or a text the port panics on): markdown-it-py reads it then."""
    parser = _parser()
    if parser is None or "\r" in text or "\x00" in text or ("<!--" in text and _old_comment(text)):
        return None
    try:
        return _quiet_tree(parser, text)
    except BaseException as exc:  # the port panics on some texts (pyo3's PanicException is no Exception)
        if type(exc).__name__ != "PanicException":
            raise
        return None  # markdown-it-py reads it


_NULL: list[int] = []  # /dev/null, opened once


def _quiet_tree(parser: Any, text: str) -> Any:
    """The port's tree of ``text``, with file descriptor 2 on /dev/null meanwhile: where the port panics (a Rust
    bug on some backtick runs), Rust's panic hook writes its message and backtrace there, which is no output of
    the checker's; the panic itself still arrives as an exception."""
    if not _NULL:
        _NULL.append(os.open(os.devnull, os.O_WRONLY))
    saved = os.dup(2)
    try:
        os.dup2(_NULL[0], 2)
        return parser.tree(text)
    finally:
        os.dup2(saved, 2)
        os.close(saved)


_COMMENT = re.compile(r"<!--(.*?)-->", re.S)


def _old_comment(text: str) -> bool:
    """Whether an HTML comment in ``text`` that may be read inline holds ``--`` or starts with ``>``/``->``: CommonMark
    0.31 (markdown-it-py) reads it as one comment, the Rust port by the older rule (the comment ends its HTML at the
    ``--``). Not one that opens a line after a blank one (or the text) and holds no other comment's start: that
    starts an HTML block at the top level (or lies in a code block), which both ports end alike, at the first line
    holding ``-->`` (a table kept out of the page in a comment, say)."""
    for m in _COMMENT.finditer(text):
        if "--" in m[1] or m[1].startswith((">", "->")):
            start = m.start()
            opens_block = text[max(0, start - 2) : start] in ("", "\n\n") or start == 1 and text[0] == "\n"
            if not opens_block or "<!--" in m[1]:
                return True
    return False


#: what an inline run must hold for ``parsers.markdown`` to read more than its text there: a code span, link,
#: image, autolink or HTML (a backtick, bracket or angle bracket)
_SPECIAL = re.compile(rb"[`\[<]")


def build(doc: MarkdownDoc, lines: list[str], text: str, root: Any) -> None:
    """Fill ``doc`` (``lines``: ``text`` split at its line breaks) from ``root``, the port's tree of ``text``."""
    nodes = root.children
    front = nodes[0] if nodes and nodes[0].name == "front_matter" else None
    reader = _Reader(doc, lines, text)
    if front is not None:  # markdown-it-py's front matter content has no final line break
        start, end = reader.lines(front.srcmap)
        frontmatter_block(doc, (str(front.meta.get("content", "")).removesuffix("\n"), start, end), lines)
        nodes = nodes[1:]
    else:
        frontmatter_block(doc, None, lines)
    reader.blocks(nodes)


class _Run:
    """One inline run being read (what markdown-it-py's inline token holds): its first line and the line breaks
    passed, where each line's last code span or link ended, its plain text, the links open around the current
    node (target, line, column, their text) and its HTML."""

    __slots__ = ("base", "cursor", "html", "links", "offset", "plain")

    def __init__(self, base: int) -> None:
        self.base, self.offset = base, 0
        self.cursor: dict[int, int] = {}
        self.plain: list[str] = []
        self.links: list[tuple[str, int, int, list[str]]] = []
        self.html: list[str] = []


class _Reader:
    """The tree's nodes into ``doc``, in document order (as ``parsers.markdown`` reads markdown-it-py's tokens)."""

    def __init__(self, doc: MarkdownDoc, lines: list[str], text: str) -> None:
        self.doc, self.src_lines, self.source = doc, lines, text
        self.data = text.encode("utf-8")  # the tree's spans are byte offsets
        self.ascii = len(self.data) == len(text)  # ... which are the text's own offsets then
        sizes = [n + 1 for n in map(len, self.data.split(b"\n"))]
        self.starts = list(itertools.accumulate(sizes, initial=0))  # where each line starts
        self.slugs: set[str] = set()  # GitHub-style anchors, repeats suffixed -1, -2 (mdit-py-plugins' own rule)
        self.last_heading: str | None = None
        self.quotes = 0  # block quotes open around the current node

    def lines(self, span: tuple[int, int]) -> list[int]:
        """markdown-it-py's map of a block spanning bytes ``span``: its first line and the line after its last."""
        start, end = span
        return [bisect.bisect_right(self.starts, start) - 1, bisect.bisect_right(self.starts, max(start, end - 1))]

    def text(self, start: int, end: int) -> str:
        return self.source[start:end] if self.ascii else self.data[start:end].decode("utf-8", "replace")

    def plain(self, start: int, end: int) -> bool:
        """Whether bytes ``start`` to ``end`` hold nothing ``parsers.markdown`` reads but text (``_SPECIAL``),
        which it reads only in headings."""
        return _SPECIAL.search(self.data, start, end) is None

    def blocks(self, nodes: Any) -> None:
        """Block ``nodes`` in order; a run of inline nodes (a tight list item's text) is one inline run."""
        run: list[Any] = []
        for node in nodes:
            name = node.name
            if name in _INLINE:
                run.append(node)
                continue
            if run:
                self.text_run(run)
                run = []
            self.block(name, node)
        if run:
            self.text_run(run)

    def text_run(self, run: list[Any]) -> None:
        start, end = run[0].srcmap[0], run[-1].srcmap[1]
        if not self.plain(start, end):
            span = self.lines((start, end))
            self.comments(self.inline(run, span[0], False), span)

    def comments(self, read: _Run, span: list[int]) -> None:
        if read.html:
            inline_comments(self.doc, self.src_lines, span, read.html)

    def block(self, name: str, node: Any) -> None:
        """One block node (containers: their children)."""
        if name == "paragraph":
            span = node.srcmap
            if not self.plain(*span):
                lines = self.lines(span)
                self.comments(self.inline(node.children, lines[0], False), lines)
        elif name in ("heading", "lheading"):
            self.heading(name, node)
        elif name == "fence":
            meta = node.meta
            markup = str(meta.get("marker", "`")) * int(meta.get("marker_len", 3))
            content, info, lines = str(meta.get("content", "")), str(meta.get("info", "")), self.lines(node.srcmap)
            fence_problems(self.doc, self.src_lines, (lines[0], lines[1]), markup, content, self.quotes > 0)
            lang = info.split()[0] if info.strip() else None
            self.doc.code.append(Code(text=content, line=lines[0] + 2, col=1, kind="block", lang=lang))
        elif name == "code_block":
            content = str(node.meta.get("content", ""))
            self.doc.code.append(Code(text=content, line=self.lines(node.srcmap)[0] + 1, col=1, kind="block"))
        elif name == "html_block":
            html_comments(self.doc, str(node.meta.get("content", "")), self.lines(node.srcmap)[0] + 1)
        elif name == "blockquote":
            self.quotes += 1
            self.blocks(node.children)
            self.quotes -= 1
        elif name == "table":
            self.table(node)
        elif name not in ("hr", "definition", "front_matter"):  # lists, list items: containers
            self.blocks(node.children)

    def heading(self, name: str, node: Any) -> None:
        lines = self.lines(node.srcmap)
        span = [lines[0], lines[1] - 1 if name == "lheading" else lines[1]]
        read = self.inline(node.children, lines[0], True)
        title = "".join(read.plain).strip()
        self.last_heading = title
        anchor = unique_slug(slugify(title), self.slugs)
        self.doc.headings.append(Heading(level=int(node.meta["level"]), text=title, anchor=anchor, line=lines[0] + 1))
        self.comments(read, span)

    def table(self, node: Any) -> None:
        """A table: its head and rows, each cell read as an inline run on its row's line."""
        table = Table(header=[], rows=[], line=self.lines(node.srcmap)[0] + 1, title=self.last_heading)
        for part in node.children:
            head = part.name == "thead"
            for row in part.children:
                lines = self.lines(row.srcmap)
                line = lines[0]
                spans = split_row(self.src_lines[line]) if line < len(self.src_lines) else []
                cells: list[Cell] = []
                for k, cell_node in enumerate(row.children):
                    start, end = cell_node.srcmap
                    # markdown-it-py's cell text: its source, an escaped pipe unescaped (the escape split no cell)
                    text = self.text(start, end).replace("\\|", "|")
                    cell = Cell(text=text.strip(), line=line + 1, col=spans[k][0] + 1 if k < len(spans) else 1)
                    if not self.plain(start, end):
                        self.comments(self.inline(cell_node.children, line, False, cell), lines)
                    cells.append(cell)
                if head:
                    table.header = cells
                else:
                    table.rows.append(cells)
        self.doc.tables.append(table)

    def inline(self, nodes: Any, base: int, words: bool, cell: Cell | None = None) -> _Run:
        """The code spans and links of inline ``nodes`` starting on line ``base``; ``words``: their plain text
        too (a heading's title)."""
        read = _Run(base)
        self._walk(nodes, read, words, cell)
        return read

    def _walk(self, nodes: Any, read: _Run, words: bool, cell: Cell | None) -> None:
        """Nested inline ``nodes`` in the order of markdown-it-py's flat inline tokens (emphasis: what it holds).
        Text is read where ``words`` (headings) and in link labels; it moves no location."""
        for node in nodes:
            name = node.name
            if name == "text" or name == "text_special":
                if words:
                    content = node.meta["content"]
                    read.plain.append(content)
                    if read.links:
                        read.links[-1][3].append(content)
            elif name == "softbreak" or name == "hardbreak":
                read.offset += 1
                read.plain.append(" ")
            elif name == "code_inline":
                self._code(node, read, cell)
            elif name == "html_inline":
                read.html.append(node.meta["content"])
            elif name == "link" or name == "autolink":
                href = str(node.meta.get("url", ""))
                read.links.append((unquote(href), read.base + read.offset + 1, self._link_col(href, read), []))
                self._walk(node.children, read, True, cell)
                target, line, col, words_in = read.links.pop()
                self.doc.links.append(Link(target=target, text="".join(words_in), line=line, col=col))
            elif name == "image":
                children = node.children  # the label's source: from after "![" to the end of its last node
                label = self.text(node.srcmap[0] + 2, children[-1].srcmap[1]) if children else ""
                href = str(node.meta.get("url", ""))
                line = read.base + read.offset + 1
                self.doc.links.append(Link(target=unquote(href), text=label, line=line, col=self._link_col(href, read)))
            else:
                self._walk(node.children, read, words, cell)

    def _line(self, read: _Run) -> tuple[int, str]:
        lineno = read.base + read.offset
        return lineno, self.src_lines[lineno] if lineno < len(self.src_lines) else ""

    def _link_col(self, href: str, read: _Run) -> int:
        lineno, src = self._line(read)
        return link_col(src, href, read.cursor, lineno)

    def _code(self, node: Any, read: _Run, cell: Cell | None) -> None:
        meta, children = node.meta, node.children
        body = children[0].meta["content"] if len(children) == 1 else "".join(c.meta["content"] for c in children)
        read.plain.append(body)
        if read.links:
            read.links[-1][3].append(body)
        lineno, src = self._line(read)
        code = Code(
            body, lineno + 1, code_col(src, body, meta["marker"] * int(meta["marker_len"]), read.cursor, lineno)
        )
        self.doc.code.append(code)
        if cell is not None:
            cell.code.append(code)
