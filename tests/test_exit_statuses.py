"""The exit-status tables in the feature doc and the skill's reference say what the code defines
(``mgpu_lab.core.errors.EXIT_STATUSES``): the same statuses, in order, each row starting with the code's words.
Parsed as the checker parses them (docutils for the RST list-table, markdown-it-py for the markdown table)."""

from __future__ import annotations

import re

from mgpu_testing import REPO

from mgpu_lab.core import errors

RST = REPO / "docs" / "source" / "features" / "multi_gpu.rst"
REFERENCE = REPO / "skills" / "user" / "train-multi-gpu" / "reference.md"


def table_rows(doc, where: str) -> list[tuple[str, str]]:
    tables = [t for t in doc.tables if t.title == "Exit status"]
    assert len(tables) == 1, f"{where}: {len(tables)} tables titled 'Exit status'"
    return [(row[0].text, row[1].text) for row in tables[0].rows]


def rst_table() -> list[tuple[str, str]]:
    """(status, meaning) rows of the list-table titled "Exit status" (the checker's docutils adapter)."""
    from skills_check.parsers.rst import parse_rst

    return table_rows(parse_rst(str(RST), RST.read_text(encoding="utf-8")), RST.name)


def markdown_table() -> list[tuple[str, str]]:
    """(status, meaning) rows of the table under the reference's "Exit status" heading (markdown-it-py)."""
    from skills_check.parsers.markdown import parse_markdown

    return table_rows(parse_markdown(str(REFERENCE), REFERENCE.read_text(encoding="utf-8")), REFERENCE.name)


def check(rows: list[tuple[str, str]], where: str) -> None:
    statuses = [re.sub(r"\s+", " ", status) for status, _ in rows]
    assert statuses == list(errors.EXIT_STATUSES), f"{where}: statuses {statuses}"
    for status, meaning in rows:
        words = errors.EXIT_STATUSES[re.sub(r"\s+", " ", status)]
        assert meaning.lower().startswith(words.lower()), (
            f"{where}: status {status} should start with {words!r}: {meaning}"
        )


def test_the_feature_docs_table_is_the_codes() -> None:
    check(rst_table(), RST.name)


def test_the_skill_references_table_is_the_codes() -> None:
    check(markdown_table(), REFERENCE.name)


def test_the_contract_numbers() -> None:
    assert (errors.EXIT_OK, errors.EXIT_FAILED, errors.EXIT_USAGE, errors.EXIT_HANG, errors.EXIT_RDZV) == (
        0,
        1,
        2,
        3,
        4,
    )
    assert errors.EXIT_SIGNAL_BASE == 128
