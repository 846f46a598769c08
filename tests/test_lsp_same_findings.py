"""The command line and the language server hold a tree to the same rules: one check session (session.py)
chooses, runs and suppresses for both, so on every fixture tree of the checker (tests/fixtures/checker/...)
``check --format json`` and the server's check (in process, no editor text) find the same findings."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from lsprotocol import types
from mgpu_testing import REPO
from mgpu_testing.checker import RULE_FIXTURES, check, make_tree
from pygls.workspace import PositionCodec
from skills_check.lsp import server as lsp
from test_checker_snapshots import CASES, build

FIXTURES = REPO / "tests" / "fixtures" / "checker"
COPIED = ("foreign", "foreign_cli", "isaaclab_layout", "quiet")  # trees used as they are stored
LAYOUTS = sorted(p.name for p in (FIXTURES / "layouts").iterdir() if p.is_dir())
TREES = ["base", *COPIED, *(f"layouts/{name}" for name in LAYOUTS), *(f"rules/{code}" for code in CASES)]


def _tree(name: str, dest: Path) -> Path:
    """The fixture tree ``name``, made in ``dest`` as the tests of its kind make it."""
    if name == "base":
        return make_tree(dest)
    if name.startswith("rules/"):
        return build(RULE_FIXTURES / name.removeprefix("rules/"), dest)
    shutil.copytree(FIXTURES / name, dest, symlinks=True)
    return dest


@pytest.fixture(scope="module")
def server() -> lsp.CheckerServer:
    made = lsp.CheckerServer()  # no client: positions counted in code points, as the findings count them
    made.codec = lambda: PositionCodec(types.PositionEncodingKind.Utf32)  # type: ignore[method-assign]
    return made


def test_every_fixture_tree_is_listed() -> None:
    stored = {p.name for p in FIXTURES.iterdir() if p.is_dir()}
    assert stored == {"base", "layouts", "rules", *COPIED}  # a new kind of fixture tree joins TREES
    assert len(LAYOUTS) >= 5 and len(CASES) >= 60


@pytest.mark.parametrize("name", TREES)
def test_the_command_line_and_the_language_server_find_the_same(
    name: str, server: lsp.CheckerServer, tmp_path: Path
) -> None:
    tree = _tree(name, tmp_path / "repo")
    _, findings = check(tree)
    expected = sorted((f["path"], f["line"], f["col"], f["code"], f["message"], f["severity"]) for f in findings)
    server.start(types.InitializeParams(capabilities=types.ClientCapabilities(), root_uri=tree.as_uri()))
    result = server.check(lsp.Snapshot())
    got = sorted((f.loc.path, f.loc.line, f.loc.col, f.code, f.message, f.severity) for f in result.findings)
    assert got == expected
    if name.startswith("rules/"):
        assert any(f[3] == name.removeprefix("rules/") for f in got)  # the fixture fails as it should
