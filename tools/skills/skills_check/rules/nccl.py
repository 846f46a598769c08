"""DR1xx: the NCCL workaround list in multi_gpu.rst is the truth for every NCCL_*/CUDA_* setting.

A workaround table is found by the settings it holds, not by its column titles: a table where at
least two rows hold ``VAR=value`` settings; its settings column is the column holding the most.
Settings are compared as exact ``VAR=value`` pairs. A row whose fix is not a setting (``docker run
--shm-size=1g``, "disable ACS in the BIOS", ``--device cuda:LOCAL_RANK``) is a row too: it holds no
setting, and a mirror holds it at the same place (DR105). DR104 allows the diagnostic variables
NCCL_DEBUG, NCCL_DEBUG_SUBSYS, NCCL_DEBUG_FILE, CUDA_VISIBLE_DEVICES, CUDA_LAUNCH_BLOCKING, CUDA_HOME
and CUDA_PATH (they change what is reported, which devices are seen or where the toolkit lives, not how
ranks communicate); TORCH_*, GLOO_* and other prefixes are not judged.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ..model import Finding, Fix, Loc, MarkdownDoc, Project, RstDoc, Table
from .common import (
    DIAGNOSTIC_VARS,
    adopted,
    all_skill_docs,
    cached,
    finding,
    line_col_of,
    multi_gpu_doc,
    multi_gpu_path,
    negative_lines_of,
    offset_to_line_col,
    rst_docs,
    settings_in,
)
from .registry import of, rule

MIN_ROWS = 2


@dataclass
class Setting:
    var: str
    value: str
    loc: Loc

    @property
    def pair(self) -> str:
        return f"{self.var}={self.value}"


def table_rows(doc: MarkdownDoc | RstDoc, table: Table) -> list[list[Setting]] | None:
    """Per row of a workaround table, the settings of its settings column (empty where the fix is not a
    setting); None when the table is not a workaround table."""
    width = max((len(r) for r in table.rows), default=0)
    counts = [sum(1 for row in table.rows if c < len(row) and any(settings_in(row[c].text))) for c in range(width)]
    if not counts or max(counts) < MIN_ROWS:
        return None
    col = counts.index(max(counts))
    out: list[list[Setting]] = []
    for row in table.rows:
        found: list[Setting] = []
        if col < len(row):
            cell = row[col]
            for var, value, _ in settings_in(cell.text):
                line, c = line_col_of(doc.text, f"{var}={value}", cell.line)
                found.append(Setting(var, value, Loc(doc.path, line, c)))
        out.append(found)
    return out


def _table_settings(doc: MarkdownDoc | RstDoc, table: Table) -> list[Setting] | None:
    """The settings of a workaround table (its settings column), or None when it is not one."""
    rows = table_rows(doc, table)
    return None if rows is None else [s for row in rows for s in row]


def truth_list(project: Project) -> tuple[RstDoc, Table, list[Setting]] | None:
    """The RST list-table of NCCL workarounds (the table in the multi-GPU page holding the most settings)."""

    def make() -> tuple[RstDoc, Table, list[Setting]] | None:
        doc = multi_gpu_doc(project)
        if doc is None:
            return None
        best = None
        for table in doc.tables:
            found = _table_settings(doc, table)
            if found and (best is None or len(found) > len(best[2])):
                best = (doc, table, found)
        return best

    return cached(project, "nccl-truth", make)


def mirror_tables(project: Project) -> list[tuple[MarkdownDoc, Table, list[Setting]]]:
    """Workaround tables in the skills' markdown (e.g. reference.md), each with its settings."""

    def make() -> list[tuple[MarkdownDoc, Table, list[Setting]]]:
        out = []
        for _, doc in all_skill_docs(project):
            for table in doc.tables:
                found = _table_settings(doc, table)
                if found:
                    out.append((doc, table, found))
        return out

    return cached(project, "nccl-mirrors", make)


def mirror_fix(project: Project, doc: MarkdownDoc, mtable: Table) -> Fix | None:
    """The edit that rewrites a mirrored table from the list (shared by DR101-DR103 and DR105)."""

    def make() -> Fix | None:
        from .nccl_fix import mirror_fix as plan

        truth = truth_list(project)
        return None if truth is None else plan(doc, mtable, truth[0], truth[1])

    return cached(project, f"nccl-fix:{doc.path}:{mtable.line}", make)


def _compare(project: Project) -> list[Finding]:
    def make() -> list[Finding]:
        truth = truth_list(project)
        if truth is None:
            return []
        rst, table, settings = truth
        want: dict[str, Setting] = {}
        for s in settings:
            want.setdefault(s.pair, s)
        out: list[Finding] = []
        for doc, mtable, mirror in mirror_tables(project):
            have: dict[str, Setting] = {}
            for s in mirror:
                have.setdefault(s.pair, s)
            extra = [s for p, s in have.items() if p not in want]
            missing = [s for p, s in want.items() if p not in have]
            missing_vars = {s.var for s in missing}
            extra_vars = {s.var for s in extra}
            for s in extra:
                if s.var in missing_vars:
                    truths = [m for m in missing if m.var == s.var]
                    listed = " or ".join(m.pair for m in truths)
                    out.append(
                        finding(
                            nccl_value,
                            f"{s.pair} differs from the NCCL list's {listed} ({truths[0].loc})",
                            doc.path,
                            s.loc.line,
                            s.loc.col,
                            truth=truths[0].loc,
                            fix=mirror_fix(project, doc, mtable),
                        )
                    )
                else:
                    out.append(
                        finding(
                            nccl_extra,
                            f"{s.pair} is not in the NCCL workaround list "
                            f"({rst.path}:{table.line}); add it there first",
                            doc.path,
                            s.loc.line,
                            s.loc.col,
                            truth=Loc(rst.path, table.line, 1),
                            fix=mirror_fix(project, doc, mtable),
                        )
                    )
            for m in missing:
                if m.var not in extra_vars:
                    out.append(
                        finding(
                            nccl_missing,
                            f"{m.pair} from the NCCL workaround list ({m.loc}) is missing from this table",
                            doc.path,
                            mtable.line,
                            1,
                            truth=m.loc,
                            fix=mirror_fix(project, doc, mtable),
                        )
                    )
        return out

    return cached(project, "nccl-compare", make)


@rule(
    "DR100",
    "nccl-list-present",
    profile="drift",
    cites="this repository's design (DESIGN.md, Sources of truth): the NCCL workaround list-table in multi_gpu.rst",
)
def nccl_list_present(project: Project) -> Iterator[Finding]:
    """When a skill mirrors an NCCL workaround table, the multi-GPU page holds the list it mirrors.

    The page must exist. A convention of this repository: reported only where [tool.skills-check] `adopt`
    lists "nccl-list" (a tree that has the list gets DR101-DR105 either way).
    """
    if not adopted(project, "nccl-list"):
        return
    doc = multi_gpu_doc(project)
    if doc is None:
        if project.rst:  # a docs tree without the page the mirror copies
            for mdoc, table, _ in mirror_tables(project):
                yield finding(
                    nccl_list_present,
                    f"this table mirrors the NCCL workaround list, but {multi_gpu_path(project)} does not exist",
                    mdoc.path,
                    table.line,
                    1,
                )
        return
    if truth_list(project) is not None:
        return
    for mdoc, table, _ in mirror_tables(project):
        yield finding(
            nccl_list_present,
            f"no NCCL workaround list-table found in {doc.path} for the table at {mdoc.path}:{table.line} to mirror",
            doc.path,
            1,
            1,
            truth=Loc(mdoc.path, table.line, 1),
        )


@rule(
    "DR101",
    "nccl-missing",
    profile="drift",
    cites="this repository's design (DESIGN.md, Sources of truth): reference.md mirrors the NCCL list",
    fixable=True,
)
def nccl_missing(project: Project) -> Iterator[Finding]:
    """Every setting of the RST NCCL list appears in a skill's mirrored workaround table.

    Reported at the mirrored table.
    """
    yield from (f for f in _compare(project) if f.code == of(nccl_missing).code)


@rule(
    "DR102",
    "nccl-value",
    profile="drift",
    cites="this repository's design (DESIGN.md, Sources of truth): settings compared as exact VAR=value pairs",
    fixable=True,
)
def nccl_value(project: Project) -> Iterator[Finding]:
    """A mirrored setting has the value the RST NCCL list gives its variable.

    A mirrored setting whose variable is on the list with another value (e.g. `NCCL_P2P_LEVEL=PIX`
    against `NCCL_P2P_LEVEL=LOC`).
    """
    yield from (f for f in _compare(project) if f.code == of(nccl_value).code)


@rule(
    "DR103",
    "nccl-extra",
    profile="drift",
    cites="this repository's design (DESIGN.md, Sources of truth): reference.md mirrors the NCCL list",
    fixable=True,
)
def nccl_extra(project: Project) -> Iterator[Finding]:
    """A mirrored workaround table holds no setting the RST NCCL list lacks."""
    yield from (f for f in _compare(project) if f.code == of(nccl_extra).code)


@rule(
    "DR104",
    "nccl-unlisted",
    profile="drift",
    cites="this repository's design (DESIGN.md, Sources of truth): every NCCL_*/CUDA_* setting in skills and docs is on the list",
)
def nccl_unlisted(project: Project) -> Iterator[Finding]:
    """Any NCCL_*/CUDA_* setting written in a skill or doc page is on the RST list (diagnostics excepted).

    Anywhere in a skill's markdown or an RST page: any `NCCL_*=`/`CUDA_*=` written there.
    """
    truth = truth_list(project)
    if truth is None:
        return
    rst, table, settings = truth
    listed = {s.pair for s in settings}
    in_tables = {(s.loc.path, s.loc.line, s.loc.col) for _, _, mirror in mirror_tables(project) for s in mirror}
    docs: list[MarkdownDoc | RstDoc] = [doc for _, doc in all_skill_docs(project)] + list(rst_docs(project))
    seen: set[str] = set()
    for doc in docs:
        if doc.path in seen:
            continue
        seen.add(doc.path)
        negative = negative_lines_of(project, doc)
        for var, value, offset in settings_in(doc.text):
            if var in DIAGNOSTIC_VARS or f"{var}={value}" in listed:
                continue
            line, col = offset_to_line_col(doc.text, offset)
            if (doc.path, line, col) in in_tables or line in negative:
                continue  # a mirrored table's cell: DR102/DR103 report it
            yield finding(
                nccl_unlisted,
                f"{var}={value} is not in the NCCL workaround list ({rst.path}:{table.line}); "
                "add it there first or write a listed setting",
                doc.path,
                line,
                col,
                truth=Loc(rst.path, table.line, 1),
            )


def _row_label(doc: MarkdownDoc | RstDoc, table: Table, i: int) -> str:
    row = table.rows[i]
    first = " ".join(row[0].text.split()) if row else ""
    return (first[:60] + "...") if len(first) > 63 else first


def _pairs(row: list[Setting]) -> frozenset[str]:
    return frozenset(s.pair for s in row)


def _describe(row: list[Setting]) -> str:
    return ", ".join(sorted(_pairs(row))) if row else "no setting (its fix is not a VAR=value)"


@rule(
    "DR105",
    "nccl-rows",
    profile="drift",
    cites="this repository's design (DESIGN.md, Sources of truth): reference.md mirrors the NCCL list row by row",
    fixable=True,
)
def nccl_rows(project: Project) -> Iterator[Finding]:
    """A mirrored workaround table has the list's rows in the list's order, rows whose fix is not a setting included.

    Such rows are `docker run --shm-size=1g` or "disable ACS in the BIOS". Row i holds exactly the
    settings of the list's row i, or none where the list's row holds none.
    """
    truth = truth_list(project)
    if truth is None:
        return
    rst, table, _ = truth
    want = table_rows(rst, table) or []
    for doc, mtable, _ in mirror_tables(project):
        have = table_rows(doc, mtable) or []
        for i in range(max(len(want), len(have))):
            if i >= len(have):
                loc = Loc(rst.path, table.rows[i][0].line if table.rows[i] else table.line, 1)
                yield finding(
                    nccl_rows,
                    f"the NCCL workaround list's row {i + 1} ({loc}: "
                    f'"{_row_label(rst, table, i)}", {_describe(want[i])}) has no row here; '
                    "mirror every row of the list, in its order",
                    doc.path,
                    mtable.line,
                    1,
                    truth=loc,
                    fix=mirror_fix(project, doc, mtable),
                )
                break
            line = mtable.rows[i][0].line if mtable.rows[i] else mtable.line
            if i >= len(want):
                yield finding(
                    nccl_rows,
                    f'row {i + 1} ("{_row_label(doc, mtable, i)}") is not in the NCCL '
                    f"workaround list ({rst.path}:{table.line}), which has {len(want)} row(s)",
                    doc.path,
                    line,
                    1,
                    truth=Loc(rst.path, table.line, 1),
                    fix=mirror_fix(project, doc, mtable),
                )
                break
            if _pairs(have[i]) != _pairs(want[i]):
                loc = Loc(rst.path, table.rows[i][0].line if table.rows[i] else table.line, 1)
                yield finding(
                    nccl_rows,
                    f"row {i + 1} holds {_describe(have[i])}, but the NCCL workaround list's "
                    f'row {i + 1} ({loc}: "{_row_label(rst, table, i)}") holds {_describe(want[i])}; '
                    "mirror every row of the list, in its order",
                    doc.path,
                    line,
                    1,
                    truth=loc,
                    fix=mirror_fix(project, doc, mtable),
                )
                break
