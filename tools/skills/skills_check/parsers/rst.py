"""RST (Sphinx docs) -> ``RstDoc`` with plain docutils.

Sphinx directives and roles are registered as stand-ins (sphinx_stubs.py) so their content is parsed (tab-set,
dropdown, code-block with Sphinx options, toctree, ...) and ``:ref:``/``:doc:`` targets are kept with
their lines. ``literalinclude`` is recorded (argument, options, line) and never read here: the loader
reads the file with its guards. The registries are process-global; registration happens once, on first use.
Lines come from docutils where it knows them, else from searching the source text.
"""

from __future__ import annotations

import re
from typing import Any

import docutils.frontend
import docutils.utils
from docutils import nodes
from docutils.parsers.rst import Parser

from ..model import Cell, Code, Comment, Heading, Include, Link, RstDoc, Table
from ..problems import MARKUP_PROBLEM, NESTED_TOO_DEEP, problem
from .sphinx_stubs import (
    include_stub,
    register,
    toctree_stub,
)


def _settings() -> Any:
    """Fresh docutils settings for one document: nothing is included, fetched or passed through raw."""
    s = docutils.frontend.get_default_settings(Parser)
    s.report_level = 5
    s.halt_level = 5
    s.warning_stream = False
    s.file_insertion_enabled = False  # include, csv-table :file:/:url:, raw :file:/:url: read nothing
    s.raw_enabled = False
    s.syntax_highlight = "none"
    s.character_level_inline_markup = False
    s.tab_width = 8
    s.line_length_limit = 10_000
    return s


MAX_INDENT = 128  # columns of indentation (block quotes, list markers) a line may reach
_NESTING_RE = re.compile(r"^(?:[ ]|[-*+\u2022]\s|#\.\s|\d{1,9}[.)]\s|\|\s)*")


def too_deep(text: str) -> tuple[int, int] | None:
    """(line, columns) of the first line nested past MAX_INDENT columns, else None.

    docutils keeps a state machine and a slice of the input per nesting level, so thousands of nested
    block quotes take gigabytes; real documents stay far below this bound.
    """
    for i, line in enumerate(text.split("\n"), start=1):
        if len(line) <= MAX_INDENT or not line[:1].isspace() and line[:1] not in "-*+#0123456789|\u2022":
            continue
        cols = len(_NESTING_RE.match(line.expandtabs(8)).group(0))  # type: ignore[union-attr]  # matches any line
        if cols > MAX_INDENT:
            return i, cols
    return None


class _LineFinder:
    """Finds the line of a text snippet at or after a starting line (lines are 1-based)."""

    def __init__(self, text: str) -> None:
        self.lines = text.split("\n")
        self.taken: set[tuple[int, int, str]] = set()

    def find(self, needle: str, start: int, span: int = 400) -> tuple[int, int] | None:
        needle = needle.split("\n")[0].strip()
        if not needle:
            return None
        lo = max(0, start - 1)
        for i in range(lo, min(len(self.lines), lo + span)):
            col = self.lines[i].find(needle)
            if col >= 0:
                return i + 1, col + 1
        return None

    def find_next(self, needle: str, start: int, span: int = 400) -> tuple[int, int] | None:
        """Like ``find``, skipping occurrences already handed out for the same needle."""
        needle = needle.split("\n")[0].strip()
        if not needle:
            return None
        lo = max(0, start - 1)
        first = None
        for i in range(lo, min(len(self.lines), lo + span)):
            col = self.lines[i].find(needle)
            while col >= 0:
                if first is None:
                    first = (i + 1, col + 1)
                if (i + 1, col + 1, needle) not in self.taken:
                    self.taken.add((i + 1, col + 1, needle))
                    return i + 1, col + 1
                col = self.lines[i].find(needle, col + 1)
        return first


def _line(node: nodes.Node) -> int | None:
    try:
        _, line = docutils.utils.get_source_line(node)
    except Exception:
        line = None
    if line is None:
        parent = node.parent
        while parent is not None and line is None:
            line = getattr(parent, "line", None)
            parent = parent.parent
    return line


def _table(doc: RstDoc, finder: _LineFinder, table: nodes.table, section_title: str | None) -> Table:
    title_nodes = [c for c in table.children if isinstance(c, nodes.title)]
    title = title_nodes[0].astext() if title_nodes else section_title
    tline = _line(table) or 1
    found = finder.find(title_nodes[0].astext(), max(1, tline - 5)) if title_nodes else None
    start = found[0] if found else max(1, tline - 1)
    out = Table(header=[], rows=[], line=start, title=title)
    cursor = start

    def cell(entry: nodes.Element) -> Cell:
        nonlocal cursor
        text = entry.astext().strip()
        line, col = cursor, 1
        first_par = next(iter(entry.findall(nodes.TextElement)), None)
        hint = _line(first_par) if first_par is not None else None
        probe = text.split("\n")[0][:60]
        if first_par is not None and first_par.rawsource:
            probe = first_par.rawsource.split("\n")[0][:60]
        hit = finder.find(probe, max(cursor, 1)) if probe else None
        if hit is None and hint:
            hit = (hint, 1)
        if hit:
            line, col = hit
            cursor = line
        c = Cell(text=text, line=line, col=col)
        for lit in entry.findall(nodes.literal):
            code = _code_inline(finder, lit, line)
            c.code.append(code)
        return c

    for group in table.findall(nodes.tgroup):
        for part in group.children:
            if isinstance(part, (nodes.thead, nodes.tbody)):
                for row in part.children:
                    if not isinstance(row, nodes.row):
                        continue
                    cells = [cell(e) for e in row.children if isinstance(e, nodes.entry)]
                    if isinstance(part, nodes.thead) and not out.header:
                        out.header = cells
                    else:
                        out.rows.append(cells)
        break
    first = out.header[0].line if out.header else (out.rows[0][0].line if out.rows and out.rows[0] else start)
    for i in range(first - 1, max(0, first - 40) - 1, -1):
        src = finder.lines[i] if i < len(finder.lines) else ""
        if re.match(r"^\s*\.\. (list-table|csv-table|table)::", src) or (
            re.match(r"^\s*[+=][-=+ ]*$", src) and (i == 0 or not re.match(r"^\s*[+=|]", finder.lines[i - 1]))
        ):
            out.line = i + 1
            break
    return out


def _code_inline(finder: _LineFinder, lit: nodes.literal, hint: int) -> Code:
    text = lit.astext()
    raw = lit.rawsource or text
    hit = finder.find_next(raw, hint) or finder.find_next(text, hint)
    line, col = hit if hit else (hint, 1)
    return Code(text=text, line=line, col=col, kind="inline")


def parse_rst(path: str, text: str) -> RstDoc:
    """Parse RST ``text`` of the file at ``path``; problems docutils reports become findings."""
    register()
    doc = RstDoc(path=path, text=text, n_lines=len(text.split("\n")) - (1 if text.endswith("\n") else 0))
    deep = too_deep(text)
    if deep is not None:
        doc.problems.append(
            problem(
                NESTED_TOO_DEEP,
                path,
                deep[0],
                1,
                f"nested {deep[1]} columns deep (limit {MAX_INDENT}); the file is not parsed",
            )
        )
        doc.readable = False
        return doc
    finder = _LineFinder(text)
    messages: list[nodes.system_message] = []
    try:
        document = docutils.utils.new_document(path, _settings())
        document.reporter.attach_observer(messages.append)
        Parser().parse(text, document)
    except Exception as exc:  # docutils should not raise at halt_level 5; never let it escape
        doc.problems.append(problem(MARKUP_PROBLEM, path, 1, 1, f"docutils could not parse the file: {exc}"))
        return doc
    for msg in messages:
        level = msg.get("level", 0)
        if level < 2:
            continue
        line = msg.get("line") or 1
        body = msg.children[0].astext() if msg.children else msg.astext()
        body = " ".join(body.split())
        doc.problems.append(problem(MARKUP_PROBLEM, path, line, 1, body, "error" if level >= 3 else "warning"))
    try:
        for msg in list(document.findall(nodes.system_message)):
            if msg.parent is not None:
                msg.parent.remove(msg)
        _walk(doc, finder, document)
    except (RecursionError, MemoryError) as exc:  # absurdly deep nesting
        doc.problems.append(
            problem(MARKUP_PROBLEM, path, 1, 1, f"document too deeply nested to read: {type(exc).__name__}")
        )
    return doc


def _section(doc: RstDoc, finder: _LineFinder, node: nodes.section) -> None:
    """A section's heading: its title, its depth, the line its title's text is on, its anchor."""
    title = node.next_node(nodes.title)
    text = title.astext() if title is not None else ""
    level = 0
    parent = node
    while parent is not None:
        if isinstance(parent, nodes.section):
            level += 1
        parent = parent.parent
    hint = _line(title) if title is not None else None
    hit = finder.find(title.rawsource if title is not None and title.rawsource else text, max(1, (hint or 2) - 2))
    line = hit[0] if hit else (hint or 1)
    anchor = node["ids"][0] if node["ids"] else nodes.make_id(text)
    doc.ids.update(node["ids"])
    doc.headings.append(Heading(level=level, text=text, anchor=anchor, line=line))


def _literal_block(doc: RstDoc, finder: _LineFinder, node: nodes.Element, code_cursor: int) -> int:
    """A literal block's code, placed at its first line (searched from the last block's when docutils gives none);
    returns that line, where the next block's search starts."""
    line = node.get("first_line")
    if line is None:
        body = node.astext()
        hint = _line(node) or code_cursor
        first = next((ln for ln in body.split("\n") if ln.strip()), "")
        hit = finder.find(first, max(1, hint - body.count("\n") - 2))
        line = hit[0] if hit else hint
    src = finder.lines[line - 1] if 0 < line <= len(finder.lines) else ""
    col = len(src) - len(src.lstrip()) + 1 if src.strip() else 1
    doc.code.append(Code(text=node.astext(), line=line, col=col, kind="block", lang=node.get("language")))
    return line


def _walk(doc: RstDoc, finder: _LineFinder, document: nodes.document) -> None:
    code_cursor = 1
    in_tables: set[int] = set()
    for node in document.findall(nodes.Element):
        if isinstance(node, nodes.section):
            _section(doc, finder, node)
        elif isinstance(node, nodes.target):
            line = _line(node) or 1
            if not node.get("refuri"):
                doc.ids.update(node.get("ids", []))
            for name in node.get("names", []):
                if node.get("refuri"):
                    continue
                hit = finder.find(f"_{name}:", max(1, line - 3)) or finder.find(f"_{name}", max(1, line - 3))
                doc.labels.setdefault(name, hit[0] if hit else line)
        elif isinstance(node, nodes.reference) and node.get("refuri"):
            hint = _line(node) or 1
            hit = finder.find(node["refuri"], max(1, hint - 1))
            line, col = hit if hit else (hint, 1)
            doc.links.append(Link(target=node["refuri"], text=node.astext(), line=line, col=col, kind="url"))
        elif isinstance(node, nodes.inline) and "xref_kind" in node.attributes:
            hint = node["xref_line"] or _line(node) or 1
            hit = finder.find(node["xref_raw"], max(1, hint - 1))
            line, col = hit if hit else (hint, 1)
            doc.links.append(
                Link(target=node["xref_target"], text=node.astext(), line=line, col=col, kind=node["xref_kind"])
            )
        elif isinstance(node, include_stub):
            line = _line(node) or 1
            hit = finder.find(".. literalinclude::", max(1, line - 1), span=3)
            line, col = hit if hit else (line, 1)
            doc.includes.append(Include(target=node["target"], line=line, col=col, options=dict(node["options"])))
        elif isinstance(node, toctree_stub):
            for target, line in node["entries"]:
                doc.links.append(Link(target=target, text=target, line=line, col=1, kind="doc"))
        elif isinstance(node, nodes.literal):
            if any(id(p) in in_tables for p in _parents(node)):
                continue  # recorded with its table
            hint = _line(node) or 1
            doc.code.append(_code_inline(finder, node, hint))
        elif isinstance(node, (nodes.literal_block, nodes.doctest_block)):
            code_cursor = _literal_block(doc, finder, node, code_cursor)
        elif isinstance(node, nodes.comment):
            doc.comments.append(_comment(finder, node))
        elif isinstance(node, nodes.table):
            section = node.parent
            while section is not None and not isinstance(section, nodes.section):
                section = section.parent
            stitle = section.next_node(nodes.title).astext() if section is not None else None
            table = _table(doc, finder, node, stitle)
            doc.tables.append(table)
            in_tables.add(id(node))
            for row in [table.header, *table.rows]:
                for cell in row:
                    doc.code.extend(cell.code)


def _comment(finder: _LineFinder, node: nodes.comment) -> Comment:
    """An RST comment with its lines: docutils gives about the line after it, so its first line is found by its
    text and its last by RST's rule (the lines indented past the ``..``)."""
    text = node.astext()
    after = _line(node) or 1
    head = text.split("\n", 1)[0]
    hit = finder.find(f".. {head}" if head else "..", max(1, after - text.count("\n") - 3))
    line, col = hit if hit else (max(1, after - 1 - text.count("\n")), 1)
    end = line  # the comment goes on over the lines indented past its `..` (blank lines between them)
    for i in range(line, len(finder.lines)):
        src = finder.lines[i]
        if src.strip() and len(src) - len(src.lstrip()) < col:
            break
        end = i + 1 if src.strip() else end
    return Comment(text=text, line=line, end_line=end, col=col)


def _parents(node: nodes.Node):
    parent = node.parent
    while parent is not None:
        yield parent
        parent = parent.parent
