"""markdown-it-pyrs (markdown-it's Rust port) -> the tokens ``parsers.markdown`` reads from markdown-it-py.

Why: on real skill collections most documents are not plain enough for ``parsers.quick``, and markdown-it-py's
block and inline parsing was most of a check's time (about 60% on a collection of 80 skills); the Rust port
parses the same CommonMark + tables + front matter about ten times faster. It gives a tree of nodes with byte
spans (``srcmap``) instead of a token stream, so this module walks the tree and emits only the tokens
``parsers.markdown._token_document`` reads, with markdown-it-py's line maps and contents: front matter,
headings, inline runs (paragraphs, tight list items, table cells), code, HTML blocks, block quotes and tables.

``tests/test_checker_markdown_rs.py`` holds the document built from these tokens equal to the one built from
markdown-it-py's over every markdown file of the repository and generated documents;
``benchmarks/markdown_rs_equal.py`` does the same over a corpus of real repositories. A text with a carriage
return or a NUL (where the two ports number lines or bytes differently), or a machine without the package,
goes to markdown-it-py.
"""

from __future__ import annotations

import bisect
import functools
import os
import re
from typing import Any

#: inline nodes that the tree nests and markdown-it-py's inline token lists flat (their children are read)
_INLINE = frozenset(
    {"text", "text_special", "code_inline", "link", "autolink", "image", "em", "strong", "softbreak", "hardbreak",
     "html_inline"}
)  # fmt: skip


class Tok:
    """The fields of a markdown-it-py token that ``parsers.markdown`` reads."""

    __slots__ = ("attrs", "children", "content", "info", "map", "markup", "tag", "type")

    def __init__(
        self,
        type_: str,
        map_: list[int] | None = None,
        content: str = "",
        markup: str = "",
        info: str = "",
        tag: str = "",
        attrs: dict[str, str] | None = None,
        children: list[Tok] | None = None,
    ) -> None:
        self.type, self.map, self.content, self.markup, self.info = type_, map_, content, markup, info
        self.tag, self.attrs, self.children = tag, attrs or {}, children


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


class _Source:
    """The document's bytes (the tree's spans are byte offsets) and where each line starts."""

    def __init__(self, text: str) -> None:
        self.data = text.encode("utf-8")
        self.starts = [0]
        find, pos = self.data.find, self.data.find(b"\n")
        while pos >= 0:
            self.starts.append(pos + 1)
            pos = find(b"\n", pos + 1)

    def line(self, offset: int) -> int:
        """0-based line of byte ``offset``."""
        return bisect.bisect_right(self.starts, offset) - 1

    def lines(self, span: tuple[int, int]) -> list[int]:
        """markdown-it-py's map of a block spanning bytes ``span``: its first line and the line after its last."""
        start, end = span
        return [self.line(start), self.line(max(start, end - 1)) + 1]

    def plain(self, start: int, end: int) -> bool:
        """Whether bytes ``start`` to ``end`` hold no code span, link, image, autolink or HTML (no backtick,
        bracket or angle bracket): an inline run there gives nothing ``parsers.markdown`` reads but its text,
        which it reads only in headings."""
        find = self.data.find
        return find(b"`", start, end) < 0 and find(b"[", start, end) < 0 and find(b"<", start, end) < 0

    def text(self, start: int, end: int) -> str:
        return self.data[start:end].decode("utf-8", "replace")


def tokens(text: str) -> list[Tok] | None:
    """markdown-it-py's tokens of ``text`` as far as ``parsers.markdown`` reads them, or None where this port
    is not used (no package, or a carriage return or NUL in the text)."""
    parser = _parser()
    if parser is None or "\r" in text or "\x00" in text or ("<!--" in text and _old_comment(text)):
        return None
    try:
        tree = _quiet_tree(parser, text)
    except BaseException as exc:  # the port panics on some texts (pyo3's PanicException is no Exception)
        if type(exc).__name__ != "PanicException":
            raise
        return None  # markdown-it-py reads it
    src = _Source(text)
    out: list[Tok] = []
    _blocks(tree.children, src, out)
    return out


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
    """Whether an HTML comment in ``text`` holds ``--`` or starts with ``>``/``->``: CommonMark 0.31 (markdown-it-py)
    reads it as one comment, the Rust port by the older rule (the comment ends its HTML at the ``--``)."""
    return any("--" in m[1] or m[1].startswith((">", "->")) for m in _COMMENT.finditer(text))


def _blocks(nodes: list[Any], src: _Source, out: list[Tok]) -> None:
    """The tokens of block ``nodes``; a run of inline nodes (a tight list item's text) is one inline token."""
    run: list[Any] = []
    for node in nodes:
        name = node.name
        if name in _INLINE:
            run.append((name, node))
            continue
        if run:
            _text_run(run, src, out)
            run = []
        _block(name, node, src, out)
    if run:
        _text_run(run, src, out)


def _text_run(run: list[tuple[str, Any]], src: _Source, out: list[Tok]) -> None:
    """The inline token of a run of a paragraph's or tight list item's nodes, unless its source holds nothing
    ``parsers.markdown`` reads there (see ``_Source.plain``)."""
    if not src.plain(run[0][1].srcmap[0], run[-1][1].srcmap[1]):
        out.append(_inline_run(run, src))


def _named(nodes: list[Any]) -> list[tuple[str, Any]]:
    return [(node.name, node) for node in nodes]


def _block(name: str, node: Any, src: _Source, out: list[Tok]) -> None:
    """One block node's tokens (containers: their children's)."""
    if name == "paragraph":
        span = node.srcmap
        if not src.plain(*span):
            out.append(_inline_run(_named(node.children), src, src.lines(span)))
    elif name in ("heading", "lheading"):
        lines = src.lines(node.srcmap)
        out.append(Tok("heading_open", lines, tag=f"h{node.meta['level']}"))
        inline_end = lines[1] - 1 if name == "lheading" else lines[1]
        out.append(_inline_run(_named(node.children), src, [lines[0], inline_end], words=True))
    elif name in ("fence", "code_block", "html_block", "front_matter"):
        meta = node.meta
        content = str(meta.get("content", ""))
        if name == "fence":
            markup = str(meta.get("marker", "`")) * int(meta.get("marker_len", 3))
            out.append(Tok("fence", src.lines(node.srcmap), content, markup, str(meta.get("info", ""))))
        else:  # markdown-it-py's front matter content has no final line break
            out.append(
                Tok(name, src.lines(node.srcmap), content.removesuffix("\n") if name == "front_matter" else content)
            )
    elif name == "blockquote":
        out.append(Tok("blockquote_open", src.lines(node.srcmap)))
        _blocks(node.children, src, out)
        out.append(Tok("blockquote_close"))
    elif name == "table":
        _table(node, src, out)
    elif name not in ("hr", "definition"):  # lists, list items, the root: containers
        _blocks(node.children, src, out)


def _table(node: Any, src: _Source, out: list[Tok]) -> None:
    """A table's tokens: its head and rows, each cell an inline token on its row's line."""
    out.append(Tok("table_open", src.lines(node.srcmap)))
    for part in node.children:
        head = part.name == "thead"
        if head:
            out.append(Tok("thead_open"))
        for row in part.children:
            lines = src.lines(row.srcmap)
            out.append(Tok("tr_open", lines))
            for cell in row.children:
                start, end = cell.srcmap
                # markdown-it-py's cell text: its source, an escaped pipe unescaped (the escape split no cell)
                text = src.text(start, end).replace("\\|", "|")
                children = [] if src.plain(start, end) else _named(cell.children)
                out.append(_inline_run(children, src, lines, text))
            out.append(Tok("tr_close"))
        if head:
            out.append(Tok("thead_close"))
    out.append(Tok("table_close"))


def _inline_run(
    nodes: list[tuple[str, Any]],
    src: _Source,
    lines: list[int] | None = None,
    content: str | None = None,
    words: bool = False,
) -> Tok:
    """One inline token of named ``nodes`` (its map: ``lines``, else the nodes' own lines; its content:
    ``content``, else the source the nodes span where an HTML comment may be in it, which is all that is read
    of it there). ``words``: with the text of every text node (a heading's title); else only of link labels."""
    children: list[Tok] = []
    _flatten(nodes, src, children, words)
    if lines is None or (content is None and any(c.type == "html_inline" for c in children)):
        start, end = nodes[0][1].srcmap[0], nodes[-1][1].srcmap[1]
        lines = lines or src.lines((start, end))
        content = src.text(start, end) if content is None else content
    return Tok("inline", lines, content or "", children=children)


def _flatten(nodes: list[tuple[str, Any]], src: _Source, out: list[Tok], words: bool) -> None:
    """markdown-it-py's flat child tokens of nested inline ``nodes`` (emphasis: only what it holds). Text is
    kept where ``words`` (plain text is read only from headings and link labels; it moves no location)."""
    for name, node in nodes:
        if name in ("text", "text_special"):
            if words:
                out.append(Tok("text", content=node.meta["content"]))
        elif name in ("softbreak", "hardbreak"):
            out.append(Tok(name))
        elif name == "code_inline":
            meta = node.meta
            body = "".join(c.meta["content"] for c in node.children)
            out.append(Tok("code_inline", content=body, markup=meta["marker"] * int(meta["marker_len"])))
        elif name == "html_inline":
            out.append(Tok("html_inline", content=node.meta["content"]))
        elif name in ("link", "autolink"):
            out.append(Tok("link_open", attrs={"href": str(node.meta.get("url", ""))}))
            _flatten(_named(node.children), src, out, True)
            out.append(Tok("link_close"))
        elif name == "image":
            children = node.children  # the label's source: from after "![" to the end of its last node
            label = src.text(node.srcmap[0] + 2, children[-1].srcmap[1]) if children else ""
            out.append(Tok("image", content=label, attrs={"src": str(node.meta.get("url", ""))}))
        else:
            _flatten(_named(node.children), src, out, words)
