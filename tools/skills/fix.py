"""``check --fix``: rewrite ``reference.md``'s NCCL workaround table from the RST list-table.

Both tables are found by the settings they hold (``NCCL_*=``/``CUDA_*=`` pairs), never by exact column
titles, so an upstream-style table (Symptom | Try) works too. Rows are paired by their settings, then by
symptom text. Only what differs changes: a paired row with other settings gets its settings cell
rewritten; RST rows missing from the markdown are inserted in RST order; markdown rows whose settings
the RST list does not hold are removed. Every other byte of the file stays as it was; the write is
atomic (temp file + rename).
"""

from __future__ import annotations

import difflib
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from inputs import inside
from model import Cell, MarkdownDoc, Project, RstDoc, Table
from parse_markdown import split_row

try:  # share the rules' notion of a setting and of a workaround table when the rules package is there
    from rules.common import settings_in as _rules_settings_in
    from rules.nccl import mirror_tables as _rules_mirrors
    from rules.nccl import truth_list as _rules_truth
except Exception:  # pragma: no cover - rules package absent or broken
    _rules_settings_in = _rules_truth = _rules_mirrors = None

MIN_ROWS = 2  # a workaround table has at least this many rows holding settings (as the drift rules say)

_SETTING = re.compile(r"(?<![A-Za-z0-9_])((?:NCCL|CUDA)_[A-Z0-9_]+)=([A-Za-z0-9_.:/,-]*[A-Za-z0-9_/-])")
_KEYWORDS = {
    "symptom": ("symptom", "problem", "issue", "error", "when"),
    "hardware": ("hardware", "seen", "where", "gpu", "system", "platform"),
    "cost": ("cost", "trade", "impact", "penalty", "price", "downside"),
    "settings": ("setting", "try", "workaround", "fix", "variable", "env"),
}


def settings(text: str) -> frozenset[tuple[str, str]]:
    """The set of (VAR, value) pairs written in ``text``."""
    if _rules_settings_in is not None:
        return frozenset((var, value) for var, value, _ in _rules_settings_in(text))
    return frozenset((m.group(1), m.group(2).rstrip(".,:")) for m in _SETTING.finditer(text))


def _cell_settings(cell: Cell) -> frozenset[tuple[str, str]]:
    return settings(cell.text) | settings(" ".join(c.text for c in cell.code))


def settings_column(table: Table) -> int | None:
    """Index of the column with the most rows holding a setting (first on ties; None when none does)."""
    width = max((len(r) for r in table.rows), default=0)
    counts = [sum(1 for row in table.rows if j < len(row) and _cell_settings(row[j])) for j in range(width)]
    if not counts or max(counts) == 0:
        return None
    return counts.index(max(counts))


def settings_table(tables: list[Table]) -> Table | None:
    """The workaround table among ``tables``: at least MIN_ROWS rows with settings, the most settings."""
    best, best_n = None, 0
    for t in tables:
        col = settings_column(t)
        if col is None:
            continue
        rows = [r for r in t.rows if col < len(r) and _cell_settings(r[col])]
        n = sum(len(_cell_settings(r[col])) for r in rows)
        if len(rows) >= MIN_ROWS and n > best_n:
            best, best_n = t, n
    return best


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
                    changes.append(f"{md.path}:{idx + 1}: settings {_fmt_settings(mset)} -> {_fmt_settings(rset)}"
                                   f" (from {src})")
            body.append(line)
            continue
        cells = []
        for j in range(max(len(md_table.header), 1)):
            role = next((r for r, col in mroles.items() if col == j), None)
            c = cell(row, rroles.get(role)) if role else None
            cells.append(rst_cell_markdown(c) if c else "")
        new = " | ".join(cells)
        body.append(("| " if lead else "") + new + (" |" if trail else ""))
        what = _fmt_settings(rset) if rset else f"\"{' '.join(rst_rows[i][1].split())[:50]}\""
        changes.append(f"{md.path}: added row for {what} (from {src})")
    for j in pairing.unpaired_md:
        idx = md_table.rows[j][0].line - 1
        what = _fmt_settings(md_rows[j][0]) if md_rows[j][0] else f"\"{' '.join(md_rows[j][1].split())[:50]}\""
        changes.append(f"{md.path}:{idx + 1}: removed row for {what} (not in {rst.path})")
    first = md_table.rows[0][0].line - 1 if md_table.rows else header_idx + 2
    last = md_table.rows[-1][0].line if md_table.rows else header_idx + 2
    old_body = lines[first:last]
    if body != old_body and not changes:
        changes.append(f"{md.path}:{first + 1}: rows reordered to follow {rst.path}:{rst_table.line}")
    if body == old_body:
        return lines, []
    return lines[:first] + body + lines[last:], changes


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        try:
            os.chmod(tmp, path.stat().st_mode & 0o7777)
        except OSError:
            pass
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _truth(project: Project) -> tuple[RstDoc, Table] | None:
    if _rules_truth is not None:
        found = _rules_truth(project)
        return (found[0], found[1]) if found else None
    docs = sorted(project.rst.items(), key=lambda kv: (not kv[0].endswith("multi_gpu.rst"), kv[0]))
    for _, doc in docs:
        if doc.readable:
            table = settings_table(doc.tables)
            if table is not None:
                return doc, table
    return None


def _writable(project: Project, relpath: str) -> str | None:
    """None when ``relpath`` may be rewritten in place; else why not (outside the root, a link, not a file)."""
    why = inside(project.root, relpath)
    if why:
        return why
    full = project.root / relpath
    if full.is_symlink():
        return "is a symlink (a fix never replaces a link with a file)"
    if not full.is_file():
        return "is not a regular file"
    return None


def fix_project(project: Project) -> tuple[list[str], list[str]]:
    """Apply the fix to every skill's reference.md; (changes, notes).

    Every rewrite is planned before any is written; each is atomic. When a write fails, ``FixError``
    names the file and says which files were rewritten and which were not.
    """
    truth = _truth(project)
    if truth is None:
        return [], ["--fix: no RST table of NCCL settings found; nothing rewritten"]
    rst, rst_table = truth
    changes: list[str] = []
    notes: list[str] = []
    targets: list[tuple[MarkdownDoc, Table]] = []
    if _rules_mirrors is not None:
        best: dict[str, tuple[MarkdownDoc, Table, int]] = {}
        for doc, table, found in _rules_mirrors(project):
            if doc.path.endswith("/reference.md") and len(found) > best.get(doc.path, (None, None, 0))[2]:
                best[doc.path] = (doc, table, len(found))  # one table per file: the one with most settings
        targets = [(d, t) for d, t, _ in (best[p] for p in sorted(best))]
    else:
        for skill in project.skills:
            for path, doc in sorted(skill.files.items()):
                table = settings_table(doc.tables) if doc.readable and path.endswith("/reference.md") else None
                if table is not None:
                    targets.append((doc, table))
    planned: list[tuple[str, bytes, list[str]]] = []
    for doc, table in targets:
        new_lines, doc_changes = plan_fix(doc, table, rst, rst_table)
        if not doc_changes:
            continue
        why = _writable(project, doc.path)
        if why:
            notes.append(f"--fix: {doc.path} {why}; not rewritten")
            continue
        raw = (project.root / doc.path).read_bytes()
        newline = "\r\n" if b"\r\n" in raw else "\n"
        bom = b"\xef\xbb\xbf" if raw.startswith(b"\xef\xbb\xbf") else b""
        planned.append((doc.path, bom + newline.join(new_lines).encode("utf-8"), doc_changes))
    done: list[str] = []
    for i, (path, data, doc_changes) in enumerate(planned):
        try:
            if _writable(project, path):  # changed since it was planned
                raise OSError(_writable(project, path))
            _write_atomic(project.root / path, data)
        except OSError as exc:
            left = [p for p, _, _ in planned[i:]]
            raise FixError(f"--fix could not write {path} ({getattr(exc, 'strerror', None) or exc}); rewritten: "
                           f"{', '.join(done) or 'none'}; not rewritten: {', '.join(left)}") from exc
        done.append(path)
        changes += doc_changes
    if not changes and not notes:
        notes.append("--fix: reference tables already match the RST list")
    return changes, notes


class FixError(Exception):
    """A planned rewrite failed; the message names the file and what was and was not rewritten."""
