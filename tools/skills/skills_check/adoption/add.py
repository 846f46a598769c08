"""``check --add-suppressions``: a suppression, with a reason to fill in, for each finding the check reports.

Adopting the checker on a tree with many findings, a team can accept them all where they stand and judge
them one by one after (as ruff's ``--add-noqa``). Plans text edits only; ``fix.apply_fixes`` writes them
(staged and renamed, inside the checked root, under the fix lock), then the check runs again.

Where each finding's suppression goes, in the file's own comment syntax (``suppress.py``):

- a finding at line 1, or of a rule whose findings are about a whole file (its length, a missing contents list:
  such a finding stays where it is computed whatever is written above it): ``disable-file CODE`` at the top (after the frontmatter's ``---`` where there is one),
  and the file's other suppressions leave that code out;
- markdown: ``<!-- skills-check: disable-next-line CODE -- REASON -->`` above the finding's line, with its
  indentation and blockquote markers; a finding inside a fenced or indented code block or a table (where a
  comment would be code, or would cut the table) gets ``disable CODE`` above the block and ``enable CODE``
  after it;
- YAML frontmatter: ``# skills-check: disable-next-line CODE -- REASON`` above a top-level key's line; a
  finding inside a key's value gets ``disable``/``enable`` around the key; one on the opening ``---``
  ``disable-file`` just after it (nothing may come before the ``---``);
- RST: ``.. skills-check: disable-next-line CODE -- REASON`` and a blank line above a top-level block that
  starts at the finding's line; otherwise ``disable``/``enable`` around the top-level block holding it (a
  paragraph, a directive with its body, a table), an explicit target ``.. _label:`` kept next to its title;
- every other file (JSON such as ``evals.json``, scripts, ``pyproject.toml``, a folder, a file the check
  could not parse): an entry ``"path" = ["CODE", ...]`` of ``[tool.skills-check.per-file-ignores]`` in
  the root's ``pyproject.toml`` with a ``# REASON`` comment (the table is added when the file has none; a
  tree without pyproject.toml gets one holding only the table; one whose table is inline gets a note instead).

The suppression stage's own findings (SU0xx) are never suppressed: ``--fix`` removes an unused suppression.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..inputs import read_text
from ..model import Finding, Fix, Loc, MarkdownDoc, Project, RstDoc, TextEdit
from .suppress import CONFIG_KEY, PREFIX, documents

REASON = "TODO: say why this is accepted"
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)\s*$")
_TARGET = re.compile(r"^\.\.\s+_[^:]+:")
_HEADER = re.compile(r"^\s*\[")

# The code of the findings that carry --add-suppressions' edits to --fix's writer: no rule's (they are never
# reported, only applied).
CARRIER = "add-suppressions"


@dataclass
class Plan:
    """What ``--add-suppressions`` will write: one finding-with-fix per file (its edits), and notes."""

    fixes: list[Finding] = field(default_factory=list)
    added: int = 0  # findings given a suppression
    notes: list[str] = field(default_factory=list)


@dataclass
class _Inserts:
    """The lines to insert before each line of one file (1-based; ``n + 1`` appends)."""

    before: dict[int, list[str]] = field(default_factory=dict)

    def add(self, line: int, new: list[str], first: bool = False) -> None:
        """Insert ``new`` before ``line``: ahead of what is already planned there when ``first`` (a block's
        ``disable``/``enable``), else after it (a ``disable-next-line`` stays next to its line)."""
        at = self.before.setdefault(line, [])
        if first:
            at[:0] = new
        else:
            at.extend(new)

    def edits(self, path: str) -> tuple[TextEdit, ...]:
        return tuple(TextEdit(path, line, line - 1, tuple(new)) for line, new in sorted(self.before.items()))


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _merged(spans: dict[tuple[int, int], list[str]]) -> list[tuple[int, int, list[str]]]:
    """Line spans that overlap or touch, merged (with their codes): one ``disable``/``enable`` pair each, so no
    block's ``enable`` ends another that is still meant to be open."""
    out: list[tuple[int, int, list[str]]] = []
    for (first, last), codes in sorted(spans.items()):
        if out and first <= out[-1][1] + 1:
            prev = out[-1]
            out[-1] = (prev[0], max(prev[1], last), prev[2] + codes)
        else:
            out.append((first, last, list(codes)))
    return out


def _codes(codes: Iterable[str]) -> str:
    return ",".join(sorted(set(codes)))


# -- markdown -----------------------------------------------------------------------------------------


def _md_blocks(doc: MarkdownDoc, lines: list[str]) -> tuple[list[tuple[int, int]], set[tuple[int, int]]]:
    """The (first, last) lines of each code block (fences included), table and setext heading (its text and
    underline): where no comment may go; and the indented code blocks among them."""
    out = []
    indented = set()
    for code in doc.code:
        if code.kind != "block":
            continue
        n = max(code.text.count("\n"), 1)
        first, last = code.line, code.line + n - 1
        if first > 1 and _FENCE.match(lines[first - 2]):
            first -= 1
            closing = code.line + code.text.count("\n")
            last = closing if closing <= len(lines) and _FENCE.match(lines[closing - 1]) else last
        else:
            indented.add((first, last))
        out.append((first, last))
    for table in doc.tables:
        rows = [c.line for row in table.rows for c in row] or [table.line + 1]
        out.append((table.line, max(rows)))
    for heading in doc.headings:
        under = heading.line + 1
        if under <= len(lines) and _SETEXT.match(lines[under - 1]) and not lines[heading.line - 1].startswith("#"):
            out.append((heading.line, under))
    return out, indented


def _frontmatter(doc: MarkdownDoc, lines: list[str], by_line: dict[int, list[str]], ins: _Inserts) -> None:
    """The suppressions inside the YAML frontmatter (lines 1 .. body_start - 1) for the findings there."""
    close = doc.body_start - 1  # the closing --- line

    def top_key(n: int) -> bool:
        text = lines[n - 1]
        return bool(text.strip()) and _indent(text) == 0 and not text.startswith(("#", "---", "-"))

    spans: dict[tuple[int, int], list[str]] = {}
    for line, codes in sorted(by_line.items()):
        if line <= 1:
            ins.add(2, [f"# {PREFIX} disable-file {_codes(codes)} -- {REASON}"], first=True)
        elif top_key(line) or line >= close:
            ins.add(line, [f"# {PREFIX} disable-next-line {_codes(codes)} -- {REASON}"])
        else:  # inside a key's value (a block scalar, a nested mapping): around the key
            start = next((n for n in range(line, 1, -1) if top_key(n)), 2)
            end = next((n for n in range(line + 1, close) if top_key(n)), close)
            spans.setdefault((start, end - 1), []).extend(codes)
    for first, last, codes in _merged(spans):
        ins.add(first, [f"# {PREFIX} disable {_codes(codes)} -- {REASON}"], first=True)
        ins.add(last + 1, [f"# {PREFIX} enable {_codes(codes)}"], first=True)


def _markdown(doc: MarkdownDoc, by_line: dict[int, list[str]], ins: _Inserts) -> None:
    lines = doc.text.split("\n")
    fm_end = doc.body_start - 1 if doc.frontmatter is not None or doc.frontmatter_error else 0
    blocks, indented = _md_blocks(doc, lines)
    wrapped: dict[tuple[int, int], list[str]] = {}
    _frontmatter(doc, lines, {n: c for n, c in by_line.items() if n <= fm_end}, ins)
    for line, codes in sorted(by_line.items()):
        if line <= fm_end:
            continue
        if line == 1:  # a finding on the whole file stays at line 1 whatever goes above it: the file's codes
            ins.add(1, [f"<!-- {PREFIX} disable-file {_codes(codes)} -- {REASON} -->"], first=True)
            continue
        block = next((b for b in blocks if b[0] <= line <= b[1]), None)
        if block is not None or not lines[line - 1].strip():
            wrapped.setdefault(block or (line, line), []).extend(codes)
            continue
        prefix = re.match(r"^[\s>]*", lines[line - 1]).group(0)  # type: ignore[union-attr]
        ins.add(line, [f"{prefix}<!-- {PREFIX} disable-next-line {_codes(codes)} -- {REASON} -->"])
    for first, last, codes in _merged(wrapped):
        prefix = re.match(r"^[\s>]*", lines[first - 1]).group(0)  # type: ignore[union-attr]
        if any(b[0] == first for b in indented):
            prefix = prefix[: max(len(prefix) - 4, 0)]  # an indented code block: the comment goes outside it
        ins.add(first, [f"{prefix}<!-- {PREFIX} disable {_codes(codes)} -- {REASON} -->"], first=True)
        ins.add(last + 1, [f"{prefix}<!-- {PREFIX} enable {_codes(codes)} -->"], first=True)


# -- RST ----------------------------------------------------------------------------------------------


def _rst_block(lines: list[str], line: int) -> tuple[int, int]:
    """The top-level block holding ``line``: from a non-blank, unindented line after a blank one (or the
    file's start) to the last non-blank line before the next such line; a target ``.. _x:`` above it joins
    it, so the label stays next to its title."""

    def starts(n: int) -> bool:
        text = lines[n - 1]
        return bool(text.strip()) and _indent(text) == 0 and (n == 1 or not lines[n - 2].strip())

    start = next((n for n in range(line, 0, -1) if starts(n)), 1)
    while start > 2 and not lines[start - 2].strip():
        above = next((n for n in range(start - 2, 0, -1) if lines[n - 1].strip()), 0)
        if above and _TARGET.match(lines[above - 1]) and starts(above):
            start = above
        else:
            break
    after = next((n for n in range(line + 1, len(lines) + 1) if starts(n)), len(lines) + 1)
    end = max(n for n in range(start, after) if n == start or lines[n - 1].strip())
    return start, max(end, line)  # a blank line after the block: the block and the blank line


def _rst(doc: RstDoc, by_line: dict[int, list[str]], ins: _Inserts) -> None:
    lines = doc.text.split("\n")
    grouped: dict[tuple[int, int], list[str]] = {}
    for line, codes in sorted(by_line.items()):
        if line == 1:  # on the whole file (see _markdown)
            ins.add(1, [f".. {PREFIX} disable-file {_codes(codes)} -- {REASON}", ""], first=True)
            continue
        grouped.setdefault(_rst_block(lines, line), []).extend(codes)
    for start, end, codes in _merged(grouped):
        lines_at = {n for n, _ in by_line.items() if start <= n <= end}
        if lines_at == {start} and not _TARGET.match(lines[start - 1]):
            ins.add(start, [f".. {PREFIX} disable-next-line {_codes(codes)} -- {REASON}", ""])
            continue
        ins.add(start, [f".. {PREFIX} disable {_codes(codes)} -- {REASON}", ""], first=True)
        blank_after = end >= len(lines) or not lines[end].strip()  # a comment ends at a blank line
        ins.add(end + 1, ["", f".. {PREFIX} enable {_codes(codes)}", *([] if blank_after else [""])], first=True)


# -- per-file ignores ---------------------------------------------------------------------------------


def _per_file(project: Project, wanted: dict[str, set[str]], plan: Plan, count: int) -> None:
    """Entries of ``[tool.skills-check.per-file-ignores]`` for the files that cannot hold a comment."""
    if not wanted:
        return
    listed = ", ".join(sorted(wanted))
    exists = "pyproject.toml" in project.paths
    text = read_text(project.root, "pyproject.toml")[0] if "pyproject.toml" in project.files else None
    if text is None and exists:
        plan.notes.append(
            f"--add-suppressions: pyproject.toml at the root cannot be read for [tool.skills-check.{CONFIG_KEY}]: "
            f"not suppressed in {listed}"
        )
        return
    if text is None:  # a tree without one: made, holding only the table (the checker's config file)
        plan.notes.append(f"--add-suppressions: pyproject.toml made at the root for [tool.skills-check.{CONFIG_KEY}]")
    text = (text or "").replace("\r\n", "\n")
    lines = text.split("\n") if text else []
    current = project.config.get(CONFIG_KEY) or {}
    header = project.config.get("_lines", {}).get(CONFIG_KEY)
    new_entries = [
        f"{json.dumps(path)} = {json.dumps(sorted(codes | set(current.get(path, []))))}  # {REASON}"
        for path, codes in sorted(wanted.items())
    ]
    out = list(lines)
    if header is None:
        while out and not out[-1].strip():
            out.pop()
        out += [*([""] if out else []), f"[tool.skills-check.{CONFIG_KEY}]", *new_entries, ""]
    elif _HEADER.match(lines[header - 1]):
        drop = {n for n, line in enumerate(lines) if any(line.startswith(json.dumps(p) + " ") for p in wanted)}
        out = [line for n, line in enumerate(lines) if n not in drop]
        at = header - sum(1 for n in drop if n < header)
        out[at:at] = new_entries
    else:
        plan.notes.append(
            f"--add-suppressions: [tool.skills-check] {CONFIG_KEY} is not a table of its own; add the entries "
            f"by hand: not suppressed in {listed}"
        )
        return
    try:
        table = tomllib.loads("\n".join(out))["tool"]["skills-check"][CONFIG_KEY]
        ok = all(set(codes) <= set(table.get(path, [])) for path, codes in wanted.items())
    except (tomllib.TOMLDecodeError, KeyError, TypeError):
        ok = False
    if not ok:
        plan.notes.append(f"--add-suppressions: pyproject.toml could not take the entries: not suppressed in {listed}")
        return
    edit = TextEdit("pyproject.toml", 1, len(lines), tuple(out))  # a new file: inserted before line 1
    fix = Fix(f"pyproject.toml: {len(wanted)} per-file-ignores entr(ies) added", (edit,))
    plan.fixes.append(Finding(CARRIER, "per-file ignores", Loc("pyproject.toml"), fix=fix))
    plan.added += count


def edits_for(doc: MarkdownDoc | RstDoc, by_line: dict[int, list[str]]) -> tuple[TextEdit, ...]:
    """The insertions that suppress, in one parsed markdown or RST document, the codes found at each line."""
    ins = _Inserts()
    whole = set(by_line.get(1, ()))  # line 1's codes are suppressed for the whole file: not again below
    by_line = {n: c if n == 1 else [x for x in c if x not in whole] for n, c in by_line.items()}
    by_line = {n: c for n, c in by_line.items() if c}
    if isinstance(doc, RstDoc):
        _rst(doc, by_line, ins)
    else:
        _markdown(doc, by_line, ins)
    return ins.edits(doc.path)


def plan(project: Project, findings: list[Finding], whole_file: Collection[str] = ()) -> Plan:
    """The edits that suppress each of ``findings`` (one Fix per file) and notes on what cannot be;
    ``whole_file``: the codes whose findings are about a whole file (suppressed for the file)."""
    out = Plan()
    docs: dict[str, Any] = {d.path: d for d in documents(project) if getattr(d, "readable", True)}
    inline: dict[str, dict[int, list[str]]] = {}
    wanted: dict[str, set[str]] = {}
    per_file = 0  # findings that go to per-file ignores
    own = sorted({f.code for f in findings if f.code.startswith("SU")})
    for f in findings:
        if f.code.startswith("SU"):
            continue
        doc = docs.get(f.loc.path)
        if doc is None or f.code.startswith("IN"):
            wanted.setdefault(f.loc.path, set()).add(f.code)
            per_file += 1
            continue
        text_lines = doc.text.split("\n")
        last = len(text_lines) - (1 if len(text_lines) > 1 and text_lines[-1] == "" else 0)
        n = 1 if f.code in whole_file else max(1, min(f.loc.line, last))
        codes = inline.setdefault(f.loc.path, {}).setdefault(n, [])
        codes += [] if f.code in codes else [f.code]
        out.added += 1
    for path, by_line in sorted(inline.items()):
        fix = Fix(f"{path}: suppressions added", edits_for(docs[path], by_line))
        out.fixes.append(Finding(CARRIER, "suppressions added", Loc(path), fix=fix))
    _per_file(project, wanted, out, per_file)
    if own:
        out.notes.append(f"--add-suppressions: {', '.join(own)} are the suppressions' own findings: not suppressed "
                         "(`check --fix` removes an unused suppression)")  # fmt: skip
    return out
