"""DR2xx: the launcher options table in multi_gpu.rst matches the launcher's argparse.

The table is found by its content: in the multi-GPU page, the table whose first column holds
``--flags`` that overlap the launcher's most. Its default column is the one titled "Default".
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from ..model import MISSING, Cell, Finding, Fix, Loc, Option, Project, RstDoc, Table, TextEdit
from .common import adopted, cached, finding, multi_gpu_doc, multi_gpu_path
from .registry import rule

FLAG_RE = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")
NONE_WORDS = frozenset({"", "none", "—", "–", "-", "unset", "(none)", "n/a"})
ONE_OF_RE = re.compile(r"\bone of\b(.*?)(?:[.;(]|$)", re.IGNORECASE | re.DOTALL)
HELP_FLAGS = frozenset({"-h", "--help"})


def _launcher_path(project: Project) -> str:
    """The launcher's path (its rules run only when the project has a launcher)."""
    assert project.launcher is not None
    return project.launcher.path


def _flags(cell: Cell) -> list[str]:
    """Option strings written in a cell: its code literals first, else flag-looking words."""
    found = [c.text.strip() for c in cell.code if c.text.strip().startswith("-")]
    if not found:
        found = FLAG_RE.findall(cell.text)
    return [f.split("=", 1)[0].split()[0] for f in found]


def _flag_column(table: Table) -> int | None:
    best, best_n = None, 0
    width = max((len(r) for r in table.rows), default=0)
    for col in range(width):
        n = sum(1 for row in table.rows if col < len(row) and row[col].text.strip().startswith("-"))
        if n > best_n:
            best, best_n = col, n
    if best is None or best_n < 2 or best_n * 2 < len(table.rows):
        return None
    return best


def options_table(project: Project) -> tuple[RstDoc, Table, int] | None:
    """(doc, table, flag column) of the launcher options table, or None."""

    def make() -> tuple[RstDoc, Table, int] | None:
        doc = multi_gpu_doc(project)
        if doc is None or project.launcher is None:
            return None
        launcher_flags = set(project.launcher.by_flag())
        best, best_score = None, 0
        for table in doc.tables:
            col = _flag_column(table)
            if col is None:
                continue
            written = {f for row in table.rows if col < len(row) for f in _flags(row[col])}
            score = len(written & launcher_flags)
            if score > best_score:
                best, best_score = (doc, table, col), score
        return best

    return cached(project, "options-table", make)


def _column(table: Table, word: str) -> int | None:
    for i, cell in enumerate(table.header):
        if word in cell.text.lower():
            return i
    return None


def _rows(project: Project) -> Iterator[tuple[RstDoc, Table, list[Cell], list[str]]]:
    found = options_table(project)
    if found is None:
        return
    doc, table, col = found
    for row in table.rows:
        if col < len(row):
            flags = _flags(row[col])
            if flags:
                yield doc, table, row, flags


def _options(project: Project) -> list[Option]:
    if project.launcher is None:
        return []
    return [o for o in project.launcher.options if o.flags[0].startswith("-") and not set(o.flags) & HELP_FLAGS]


def _truth(project: Project, opt: Option | None) -> Loc:
    assert project.launcher is not None
    if opt is None:
        first = min((o.line for o in project.launcher.options), default=1)
        return Loc(_launcher_path(project), first, 1)
    return Loc(_launcher_path(project), opt.line, opt.col)


@rule(
    "DR200",
    "options-table-present",
    profile="drift",
    cites="this repository's design (DESIGN.md, Sources of truth): the options table in multi_gpu.rst",
)
def options_table_present(project: Project) -> Iterator[Finding]:
    """The multi-GPU page has a table of the launcher's options (a column of --flags).

    The multi-GPU page exists (when there is a docs tree) and has a launcher options table. A convention
    of this repository: reported only where [tool.skills-check] `adopt` lists "options-table" (a tree
    that has the table gets DR201-DR205 either way).
    """
    doc = multi_gpu_doc(project)
    if not _options(project) or not adopted(project, "options-table"):
        return
    if doc is None:
        if project.rst:  # a docs tree without the page that documents the launcher
            yield finding(
                options_table_present,
                f"{multi_gpu_path(project)} does not exist; it must document the launcher's "
                f"{len(_options(project))} options",
                multi_gpu_path(project),
                1,
                1,
                truth=_truth(project, None),
            )
        return
    if options_table(project) is None:
        yield finding(
            options_table_present,
            f"no launcher options table (a column of --flags) found; the launcher "
            f"{_launcher_path(project)} defines {len(_options(project))} options",
            doc.path,
            1,
            1,
            truth=_truth(project, None),
        )


@rule(
    "DR201",
    "option-undocumented",
    profile="drift",
    cites="this repository's design (DESIGN.md, Sources of truth): launcher flags, aliases, defaults, choices (argparse is the truth)",
    fixable=True,
)
def option_undocumented(project: Project) -> Iterator[Finding]:
    """Every launcher option has a row in the options table.

    Every launcher option (except `-h/--help`) has a row.
    """
    found = options_table(project)
    if found is None:
        return
    doc, table, col = found
    written = {f for _, _, _, flags in _rows(project) for f in flags}
    for opt in _options(project):
        if not set(opt.flags) & written:
            yield finding(
                option_undocumented,
                f"launcher option {opt.canonical} ({_launcher_path(project)}:{opt.line}) has no row "
                "in the options table",
                doc.path,
                table.line,
                1,
                truth=_truth(project, opt),
                fix=_row_fix(project, doc, table, col, opt),
            )


@rule(
    "DR202",
    "option-unknown",
    profile="drift",
    cites="this repository's design (DESIGN.md, Sources of truth): launcher flags, aliases, defaults, choices (argparse is the truth)",
)
def option_unknown(project: Project) -> Iterator[Finding]:
    """Every flag in the options table is an option of the launcher.

    Every row's flag is a launcher option.
    """
    known = {f for o in _options(project) for f in o.flags} | HELP_FLAGS
    for doc, _, row, flags in _rows(project):
        by_flag = {f: o for o in _options(project) for f in o.flags}
        if not any(f in by_flag for f in flags):
            cell = row[0] if row else None
            for f in flags:
                if f not in known and cell is not None:
                    yield finding(
                        option_unknown,
                        f"{f} is in the options table but the launcher {_launcher_path(project)} has no such option",
                        doc.path,
                        cell.line,
                        cell.col,
                        truth=_truth(project, None),
                    )
                    break


@rule(
    "DR203",
    "option-alias",
    profile="drift",
    cites="this repository's design (DESIGN.md, Sources of truth): launcher flags, aliases, defaults, choices (argparse is the truth)",
)
def option_alias(project: Project) -> Iterator[Finding]:
    """A row lists exactly the option strings (name and aliases) the launcher defines for that option.

    A row lists exactly the option strings argparse defines for that option (`--num_gpus` with alias
    `--nproc_per_node`).
    """
    by_flag = {f: o for o in _options(project) for f in o.flags}
    for doc, table, row, flags in _rows(project):
        opts = {id(by_flag[f]): by_flag[f] for f in flags if f in by_flag}
        if len(opts) != 1:
            if len(opts) > 1:
                cell = row[0]
                yield finding(
                    option_alias,
                    f"one row names several launcher options: {', '.join(flags)}",
                    doc.path,
                    cell.line,
                    cell.col,
                )
            continue
        opt = next(iter(opts.values()))
        col = next(i for i, c in enumerate(row) if set(_flags(c)) & set(opt.flags))
        cell = row[col]
        missing = [f for f in opt.flags if f not in flags]
        extra = [f for f in flags if f not in opt.flags]
        if missing:
            yield finding(
                option_alias,
                f"{opt.canonical}: alias {', '.join(missing)} is not documented "
                f"({_launcher_path(project)}:{opt.line} defines {', '.join(opt.flags)})",
                doc.path,
                cell.line,
                cell.col,
                truth=_truth(project, opt),
            )
        if extra:
            yield finding(
                option_alias,
                f"{opt.canonical}: {', '.join(extra)} is not an alias the launcher defines "
                f"({_launcher_path(project)}:{opt.line} defines {', '.join(opt.flags)})",
                doc.path,
                cell.line,
                cell.col,
                truth=_truth(project, opt),
            )


def render_default(opt: Option) -> str:
    """How the table writes ``opt``'s default (the text DR204 compares)."""
    value = opt.default
    if value is MISSING or value is None:
        return "False" if not opt.takes_value else "None"
    return str(value)


def _default_fix(doc: RstDoc, cell: Cell, opt: Option, launcher: str) -> Fix | None:
    """Rewrite the Default cell's first line with the argparse default (None when it cannot be done simply)."""
    new = render_default(opt)
    if not _same_default(opt.default, new.strip("\"'") if new.lower() not in NONE_WORDS else None, opt):
        return None
    lines = doc.text.split("\n")
    idx = (cell.code[0].line if cell.code else cell.line) - 1
    if not 0 <= idx < len(lines):
        return None
    line = lines[idx]
    if cell.code:
        old = f"``{cell.code[0].text}``"
        if line.count(old) != 1:
            return None
        fixed = line.replace(old, f"``{new}``")
    else:
        m = re.match(r"^(\s*(?:\*\s+)?-\s+)(.*)$", line)
        if m is None or not m.group(2).strip() or len(cell.text.split("\n")) > 1:
            return None
        fixed = m.group(1) + f"``{new}``"
    return Fix(
        f"{opt.canonical}: default -> {new} (from {launcher}:{opt.line})",
        (TextEdit(doc.path, idx + 1, idx + 1, (fixed,)),),
        safe=True,
    )


def _row_fix(project: Project, doc: RstDoc, table: Table, col: int, opt: Option) -> Fix | None:
    """Insert a row for an undocumented option before the row of the next option in argparse order."""
    lines = doc.text.split("\n")
    rows = [r for r in table.rows if col < len(r)]
    if not rows:
        return None
    first_line = lines[rows[0][0].line - 1] if rows[0] else ""
    m = re.match(r"^(\s*)\*(\s+)-(\s+)", first_line)
    if m is None:
        return None
    bullet = m.group(1)
    cell_indent = bullet + " " * (1 + len(m.group(2)))
    order = [o.dest for o in _options(project)]
    by_flag = {f: o for o in _options(project) for f in o.flags}
    before = None
    for row in rows:
        flags = [f for f in _flags(row[col]) if f in by_flag]
        if flags and order.index(by_flag[flags[0]].dest) > order.index(opt.dest):
            before = row[0].line
            break
    if before is None:  # after the last row: the end of the table's indented block
        end = rows[-1][-1].line
        while end < len(lines) and (not lines[end].strip() or lines[end].startswith(cell_indent)):
            end += 1
        while end > rows[-1][-1].line and not lines[end - 1].strip():
            end -= 1
        before = end + 1
    width = max(len(table.header), max(len(r) for r in rows))
    dcol = _column(table, "default")
    flag_text = f"``{opt.canonical}``" + "".join(f" (alias ``{f}``)" for f in opt.flags[1:] if f.startswith("--"))
    cells = []
    for j in range(width):
        if j == col:
            cells.append(flag_text)
        elif j == dcol:
            cells.append(f"``{render_default(opt)}``")
        elif j == width - 1:
            cells.append(" ".join((opt.help or "(describe this option)").split()))
        else:
            cells.append("")
    new = [f"{bullet}* - {cells[0]}".rstrip()] + [f"{cell_indent}- {c}".rstrip() for c in cells[1:]]
    return Fix(
        f"added a row for {opt.canonical} (from {_launcher_path(project)}:{opt.line})",
        (TextEdit(doc.path, before, before - 1, tuple(new)),),
        safe=opt.help is not None,
    )


def _written_default(cell: Cell) -> str | None:
    """The default a cell states: its first code literal, else a single word; None for prose/empty."""
    if cell.code:
        text = cell.code[0].text.strip()
    else:
        text = cell.text.strip()
        if len(text.split()) > 1:
            return None
    text = text.strip("\"'")
    return None if text.lower() in NONE_WORDS else text


def _same_default(actual: Any, written: str | None, opt: Option) -> bool:
    if actual is MISSING or actual is None:
        if not opt.takes_value and written is not None:
            return written.lower() in ("false", "off")
        return written is None
    if isinstance(actual, bool):
        if written is None:
            return actual is False and not opt.takes_value
        return written.lower() in (("true", "on") if actual else ("false", "off"))
    if written is None:
        return False
    return str(actual) == written


@rule(
    "DR204",
    "option-default",
    profile="drift",
    cites="this repository's design (DESIGN.md, Sources of truth): launcher flags, aliases, defaults, choices (argparse is the truth)",
    fixable=True,
)
def option_default(project: Project) -> Iterator[Finding]:
    """The Default column states the launcher's argparse default (None, or False for a switch, when unset).

    The Default cell (its first code literal, else a single word) equals the argparse default compared
    as text. `None`, `—` or an empty cell mean no default (None); `False` for a switch.
    """
    found = options_table(project)
    if found is None:
        return
    _, table, _ = found
    dcol = _column(table, "default")
    if dcol is None:
        return
    by_flag = {f: o for o in _options(project) for f in o.flags}
    for doc, _, row, flags in _rows(project):
        opts = {id(by_flag[f]): by_flag[f] for f in flags if f in by_flag}
        if len(opts) != 1 or dcol >= len(row):
            continue
        opt = next(iter(opts.values()))
        cell = row[dcol]
        written = _written_default(cell)
        if not _same_default(opt.default, written, opt):
            actual = None if opt.default is MISSING else opt.default
            col = cell.code[0].col if cell.code else cell.col
            yield finding(
                option_default,
                f"{opt.canonical}: the table says default {written or 'None'!s}, the launcher's "
                f"default is {actual!r} ({_launcher_path(project)}:{opt.line})",
                doc.path,
                cell.code[0].line if cell.code else cell.line,
                col,
                truth=_truth(project, opt),
                fix=_default_fix(doc, cell, opt, _launcher_path(project)),
            )


def _written_choices(row: list[Cell], skip: int) -> tuple[list[str] | None, Cell | None]:
    """Values listed after "one of" in a row (None when the row lists none), and the cell holding them."""
    for i, cell in enumerate(row):
        if i == skip:
            continue
        m = ONE_OF_RE.search(cell.text)
        if m:
            words = re.split(r",|\bor\b|\band\b", m.group(1))
            return [w.strip().strip("`\"'") for w in words if w.strip().strip("`\"'")], cell
    return None, None


@rule(
    "DR205",
    "option-choices",
    profile="drift",
    cites="this repository's design (DESIGN.md, Sources of truth): launcher flags, aliases, defaults, choices (argparse is the truth)",
)
def option_choices(project: Project) -> Iterator[Finding]:
    """A row states the launcher option's choices: each choice is written, and a "one of ..." list adds none.

    For an option with `choices`: every choice is written in the row, and a "one of a, b, c" list in the
    row holds no other value.
    """
    found = options_table(project)
    if found is None:
        return
    _, _, fcol = found
    by_flag = {f: o for o in _options(project) for f in o.flags}
    for doc, _, row, flags in _rows(project):
        opts = {id(by_flag[f]): by_flag[f] for f in flags if f in by_flag}
        if len(opts) != 1:
            continue
        opt = next(iter(opts.values()))
        if not opt.choices:
            continue
        allowed = [str(c) for c in opt.choices]
        listed, cell = _written_choices(row, fcol)
        if listed is None:
            literals = {c.text.strip() for cell_ in row for c in cell_.code}
            words = set(re.findall(r"[\w.-]+", " ".join(c.text for c in row)))
            missing = [c for c in allowed if c not in literals and c not in words]
            cell = row[-1]
            extra: list[str] = []
        else:
            missing = [c for c in allowed if c not in listed]
            extra = [c for c in listed if c not in allowed]
        assert cell is not None
        if missing:
            yield finding(
                option_choices,
                f"{opt.canonical}: choice(s) {', '.join(missing)} not stated in the table "
                f"(choices: {', '.join(allowed)}; {_launcher_path(project)}:{opt.line})",
                doc.path,
                cell.line,
                cell.col,
                truth=_truth(project, opt),
            )
        if extra:
            yield finding(
                option_choices,
                f"{opt.canonical}: {', '.join(extra)} is not a choice the launcher accepts "
                f"(choices: {', '.join(allowed)}; {_launcher_path(project)}:{opt.line})",
                doc.path,
                cell.line,
                cell.col,
                truth=_truth(project, opt),
            )
