"""The fix for the NCCL mirror rules (DR101-DR103, DR105): rewrite a mirrored workaround table from the
RST list, row by row, in the list's order.

Rows are paired by their settings, then by symptom text (a row whose fix is not a setting pairs only
with such a row). Only what differs changes: a paired row with other settings gets its settings cell
rewritten; list rows missing from the mirror are inserted from the RST text; mirror rows the list
lacks are removed. Every other byte of the file stays as it was.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from ..model import Cell, Fix, MarkdownDoc, RstDoc, Table
from ..parsers.markdown import split_row
from .common import edit_between, settings_in

_KEYWORDS = {
    "symptom": ("symptom", "problem", "issue", "error", "when"),
    "hardware": ("hardware", "seen", "where", "gpu", "system", "platform"),
    "cost": ("cost", "trade", "impact", "penalty", "price", "downside"),
    "settings": ("setting", "try", "workaround", "fix", "variable", "env"),
}


def settings(text: str) -> frozenset[tuple[str, str]]:
    """The set of (VAR, value) pairs written in ``text``."""
    return frozenset((var, value) for var, value, _ in settings_in(text))


def _cell_settings(cell: Cell) -> frozenset[tuple[str, str]]:
    return settings(cell.text) | settings(" ".join(c.text for c in cell.code))


def settings_column(table: Table) -> int | None:
    """Index of the column with the most rows holding a setting (first on ties; None when none does)."""
    width = max((len(r) for r in table.rows), default=0)
    counts = [sum(1 for row in table.rows if j < len(row) and _cell_settings(row[j])) for j in range(width)]
    if not counts or max(counts) == 0:
        return None
    return counts.index(max(counts))


def _role(header: str) -> str | None:
    h = header.lower()
    for role, words in _KEYWORDS.items():
        if any(w in h for w in words):
            return role
    return None


def _roles(table: Table) -> dict[str, int]:
    """role -> column index: settings by content, the others by header words; symptom defaults to col 0."""
    out: dict[str, int] = {}
    scol = settings_column(table)
    if scol is not None:
        out["settings"] = scol
    for j, cell in enumerate(table.header):
        role = _role(cell.text)
        if role and role != "settings" and role not in out and j != scol:
            out[role] = j
    if "symptom" not in out:
        first = next((j for j in range(len(table.header)) if j != scol and j not in out.values()), None)
        if first is not None:
            out["symptom"] = first
    return out


def rst_cell_markdown(cell: Cell) -> str:
    """An RST cell as markdown: its text with inline literals back in backticks, pipes escaped."""
    text = " ".join(cell.text.split())
    out, cursor = [], 0
    for code in cell.code:
        needle = " ".join(code.text.split())
        pos = text.find(needle, cursor)
        if pos < 0:
            continue
        out.append(text[cursor:pos])
        out.append(f"`{needle}`")
        cursor = pos + len(needle)
    out.append(text[cursor:])
    return "".join(out).replace("|", "\\|")


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[`*_]", "", text).lower().split())


@dataclass
class _Pairing:
    pairs: dict[int, int]  # rst row -> md row
    unpaired_md: list[int]


def _pair(rst_rows: list[tuple[frozenset, str]], md_rows: list[tuple[frozenset, str]]) -> _Pairing:
    """Pair list rows with mirror rows: same settings, then similar symptom or shared settings; a row
    whose fix is not a setting pairs only with such a row (by symptom, else by position)."""
    pairs: dict[int, int] = {}
    used: set[int] = set()
    for i, (s, _) in enumerate(rst_rows):  # 1. same settings
        for j, (t, _) in enumerate(md_rows):
            if j not in used and t and s == t:
                pairs[i] = j
                used.add(j)
                break
    cands = []
    for i, (s, sym) in enumerate(rst_rows):  # 2. similar symptom, 3. overlapping settings
        if i in pairs:
            continue
        for j, (t, msym) in enumerate(md_rows):
            if j in used or bool(s) != bool(t):
                continue
            ratio = difflib.SequenceMatcher(None, _norm(sym), _norm(msym)).ratio() if sym and msym else 0.0
            overlap = len(s & t)
            if ratio >= 0.6 or overlap:
                cands.append((ratio >= 0.6, overlap, ratio, -i, -j, i, j))
    for *_, i, j in sorted(cands, reverse=True):
        if i not in pairs and j not in used:
            pairs[i] = j
            used.add(j)
    for i, (s, _) in enumerate(rst_rows):  # 4. rows without settings at the same place
        if i not in pairs and not s and i < len(md_rows) and i not in used and not md_rows[i][0]:
            pairs[i] = i
            used.add(i)
    unpaired = [j for j in range(len(md_rows)) if j not in used]
    return _Pairing(pairs, unpaired)


def _fmt_settings(s: frozenset) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(s)) or "(none)"


def plan_fix(md: MarkdownDoc, md_table: Table, rst: RstDoc, rst_table: Table) -> tuple[list[str], list[str]]:
    """(new file lines, change descriptions) for ``md`` (lines without newlines)."""
    lines = md.text.split("\n")
    rroles, mroles = _roles(rst_table), _roles(md_table)
    rs, ms = rroles.get("settings"), mroles.get("settings")
    if rs is None or ms is None or not md_table.rows or any(not r for r in md_table.rows):
        return lines, []

    def cell(row: list[Cell], j: int | None) -> Cell | None:
        return row[j] if j is not None and j < len(row) else None

    rst_rows = []
    for row in rst_table.rows:
        c, sym = cell(row, rs), cell(row, rroles.get("symptom"))
        rst_rows.append((_cell_settings(c) if c else frozenset(), sym.text if sym else ""))
    md_rows = []
    for row in md_table.rows:
        c, sym = cell(row, ms), cell(row, mroles.get("symptom"))
        md_rows.append((_cell_settings(c) if c else frozenset(), sym.text if sym else ""))
    pairing = _pair(rst_rows, md_rows)
    changes: list[str] = []
    header_idx = md_table.line - 1
    header_line = lines[header_idx] if header_idx < len(lines) else ""
    lead = header_line.lstrip().startswith("|")
    trail = header_line.rstrip().endswith("|")
    body: list[str] = []  # the mirror's rows, in the list's order
    for i, row in enumerate(rst_table.rows):
        rset = rst_rows[i][0]
        src = f"{rst.path}:{row[0].line if row else rst_table.line}"
        if i in pairing.pairs:
            j = pairing.pairs[i]
            idx = md_table.rows[j][0].line - 1
            line = lines[idx]
            mset = md_rows[j][0]
            if mset != rset:
                spans = split_row(line)
                if ms < len(spans) and rs < len(row):
                    a, b = spans[ms]
                    line = line[:a] + rst_cell_markdown(row[rs]) + line[b:]
                    changes.append(
                        f"{md.path}:{idx + 1}: settings {_fmt_settings(mset)} -> {_fmt_settings(rset)} (from {src})"
                    )
            body.append(line)
            continue
        cells = []
        for j in range(max(len(md_table.header), 1)):
            role = next((r for r, col in mroles.items() if col == j), None)
            c = cell(row, rroles.get(role)) if role else None
            cells.append(rst_cell_markdown(c) if c else "")
        new = " | ".join(cells)
        body.append(("| " if lead else "") + new + (" |" if trail else ""))
        what = _fmt_settings(rset) if rset else f'"{" ".join(rst_rows[i][1].split())[:50]}"'
        changes.append(f"{md.path}: added row for {what} (from {src})")
    for j in pairing.unpaired_md:
        idx = md_table.rows[j][0].line - 1
        what = _fmt_settings(md_rows[j][0]) if md_rows[j][0] else f'"{" ".join(md_rows[j][1].split())[:50]}"'
        changes.append(f"{md.path}:{idx + 1}: removed row for {what} (not in {rst.path})")
    first = md_table.rows[0][0].line - 1 if md_table.rows else header_idx + 2
    last = md_table.rows[-1][0].line if md_table.rows else header_idx + 2
    old_body = lines[first:last]
    if body != old_body and not changes:
        changes.append(f"{md.path}:{first + 1}: rows reordered to follow {rst.path}:{rst_table.line}")
    if body == old_body:
        return lines, []
    return lines[:first] + body + lines[last:], changes


def mirror_fix(md: MarkdownDoc, md_table: Table, rst: RstDoc, rst_table: Table) -> Fix | None:
    """The edit that makes ``md_table`` mirror ``rst_table`` (None when nothing differs)."""
    old = md.text.split("\n")
    new, changes = plan_fix(md, md_table, rst, rst_table)
    if not changes:
        return None
    # safe unattended when the rewrite keeps every setting the table held (it only adds, fixes or reorders
    # rows from the list); dropping a setting the list lacks needs a person (maybe it belongs in the list)
    safe = settings("\n".join(old)) <= settings("\n".join(new))
    return edit_between(md.path, old, new, "; ".join(c.removeprefix(f"{md.path}: ") for c in changes), safe)
