"""The docs agree with the code and with each other.

- The launcher options list-table in ``multi_gpu.rst`` matches the launcher's ``build_parser()``
  exactly: every option with all its aliases, its default and its choices.
- The NCCL workaround table in the skill's ``reference.md`` mirrors the maintained list-table in
  ``multi_gpu.rst`` row by row, and every ``NCCL_*=``/``CUDA_*=`` setting written in the skills or in
  ``troubleshooting.rst`` is in that list (diagnostics such as ``NCCL_DEBUG=INFO`` excepted).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
from mgpu_testing import REPO
from mgpu_testing.docs import LAUNCHER, load_script, rel
from parse_markdown import parse_markdown
from parse_rst import parse_rst

MULTI_GPU_RST = REPO / "docs" / "source" / "features" / "multi_gpu.rst"
TROUBLESHOOTING_RST = REPO / "docs" / "source" / "refs" / "troubleshooting.rst"
REFERENCE_MD = REPO / "skills" / "user" / "train-multi-gpu" / "reference.md"

SETTING = re.compile(r"(?<![A-Za-z0-9_])((?:NCCL|CUDA)_[A-Z0-9_]+)=([^\s`'\",;)]+)")
#: settings that change what NCCL/CUDA report or which devices a process sees, not how ranks talk
DIAGNOSTICS = {"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "CUDA_VISIBLE_DEVICES", "CUDA_LAUNCH_BLOCKING"}


# --------------------------------------------------------------------------- RST tables


def _table(doc, title: str) -> list[list[tuple[str, list[str]]]]:
    """Header and rows of the table titled ``title`` (the checker's parsers): each cell as (text, [inline code])."""
    assert not doc.problems, [f.message for f in doc.problems]
    for table in doc.tables:
        if table.title == title:
            return [[(" ".join(c.text.split()), [code.text for code in c.code]) for c in row]
                    for row in [table.header, *table.rows]]
    raise AssertionError(f"{doc.path}: no table titled {title!r}")


def rst_table(path: Path, title: str) -> list[list[tuple[str, list[str]]]]:
    return _table(parse_rst(rel(path), path.read_text(encoding="utf-8")), title)


def md_table(path: Path, title: str) -> list[list[tuple[str, list[str]]]]:
    return _table(parse_markdown(rel(path), path.read_text(encoding="utf-8")), title)


def settings_of(literals: list[str]) -> set[str]:
    return {lit for lit in literals if SETTING.fullmatch(lit)}


# --------------------------------------------------------------------------- launcher options


@pytest.fixture(scope="module")
def launcher_actions() -> list[argparse.Action]:
    parser = load_script(LAUNCHER, "_mgpu_docs_launcher_script").build_parser()
    return [a for a in parser._actions if a.option_strings and not isinstance(a, argparse._HelpAction)]


def default_text(value: object) -> str:
    return str(value)  # None -> "None", False -> "False", "gpu" -> "gpu", 0 -> "0"


def test_options_table_matches_launcher_argparse(launcher_actions) -> None:
    rows = rst_table(MULTI_GPU_RST, "Launcher options")
    header, body = rows[0], rows[1:]
    assert [cell[0] for cell in header] == ["Option", "Default", "Meaning"]
    documented: dict[frozenset[str], tuple[str, list[str], str, list[str]]] = {}
    for (opt_text, opt_lits), (def_text, def_lits), (meaning, meaning_lits) in body:
        flags = frozenset(lit for lit in opt_lits if lit.startswith("--"))
        assert flags, f"row without an option: {opt_text}"
        assert flags not in documented, f"option documented twice: {sorted(flags)}"
        documented[flags] = (def_text, def_lits, meaning, meaning_lits)

    expected = {frozenset(a.option_strings): a for a in launcher_actions}
    assert set(documented) == set(expected), (
        f"missing in the docs: {sorted(map(sorted, set(expected) - set(documented)))}; "
        f"not in the launcher: {sorted(map(sorted, set(documented) - set(expected)))}"
    )
    for flags, action in expected.items():
        def_text, def_lits, _meaning, meaning_lits = documented[flags]
        assert def_lits == [default_text(action.default)], (
            f"{action.option_strings[0]}: docs say default {def_text!r}, argparse has {action.default!r}"
        )
        if action.choices:
            missing = [str(c) for c in action.choices if str(c) not in meaning_lits]
            assert not missing, f"{action.option_strings[0]}: choices {missing} not listed in the docs"


# --------------------------------------------------------------------------- NCCL workarounds


def rst_workarounds() -> list[set[str]]:
    rows = rst_table(MULTI_GPU_RST, "NCCL workarounds")
    assert [cell[0] for cell in rows[0]] == ["Symptom", "Settings", "Seen on", "Cost"]
    return [settings_of(row[1][1]) for row in rows[1:]]


def reference_workarounds() -> list[set[str]]:
    rows = md_table(REFERENCE_MD, "NCCL workarounds")
    assert [cell[0] for cell in rows[0]] == ["Symptom", "Variable"], rows[0]
    return [settings_of(row[1][1]) for row in rows[1:]]


def test_nccl_list_has_the_required_rows() -> None:
    rows = rst_workarounds()
    required = [
        {"NCCL_P2P_DISABLE=1", "NCCL_P2P_LEVEL=LOC"},
        {"NCCL_SHM_DISABLE=1"},
        {"NCCL_IB_DISABLE=1", "NCCL_ALGO=Ring"},
        {"NCCL_CUMEM_HOST_ENABLE=0", "NCCL_CUMEM_ENABLE=0"},
        {"CUDA_DEVICE_ORDER=PCI_BUS_ID"},
    ]
    for settings in required:
        assert settings in rows, f"the NCCL list lacks a row with {sorted(settings)}"
    assert all(rows), "a workaround row without a VAR=value setting"


def test_reference_table_mirrors_the_rst_list() -> None:
    assert reference_workarounds() == rst_workarounds()


def test_every_written_setting_is_in_the_list() -> None:
    allowed = set().union(*rst_workarounds())
    files = [p for p in sorted((REPO / "skills").rglob("*")) if p.suffix in (".md", ".json") and p.is_file()]
    files.append(TROUBLESHOOTING_RST)
    assert len(files) > 5
    problems = []
    for path in files:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for m in SETTING.finditer(line):
                placeholder = m.group(2).startswith(("<", "$"))
                if m.group(1) not in DIAGNOSTICS and not placeholder and m.group(0) not in allowed:
                    problems.append(f"{path.relative_to(REPO)}:{n}: {m.group(0)} is not in the NCCL list")
    assert not problems, "\n".join(problems)


def test_setting_pattern() -> None:
    line = "TORCH_NCCL_DUMP_ON_TIMEOUT=1 NCCL_P2P_DISABLE=1, `CUDA_DEVICE_ORDER=PCI_BUS_ID`"
    assert [m.group(0) for m in SETTING.finditer(line)] == ["NCCL_P2P_DISABLE=1", "CUDA_DEVICE_ORDER=PCI_BUS_ID"]
