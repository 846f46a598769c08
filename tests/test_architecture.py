"""The package's shape, checked: sub-packages by concern, the import contracts, short functions, one definition of
the shared names. Static reads of the source (``ast``) and import-linter's own check, in-process."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from mgpu_testing import REPO

SRC = REPO / "src" / "mgpu_lab"
CHECKER = REPO / "tools" / "skills"
SCRIPTS = REPO / "scripts" / "reinforcement_learning"
LONGEST = 80


def _functions(root: Path) -> list[tuple[str, str, int, ast.FunctionDef | ast.AsyncFunctionDef]]:
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                found.append((path.relative_to(REPO).as_posix(), node.name, length, node))
    return found


def _literal_argparse_builder(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A ``build_parser`` whose body only makes a parser, adds to it and returns it (the entry scripts' kind)."""
    if node.name != "build_parser":
        return False
    for stmt in node.body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):  # the docstring
            continue
        if isinstance(stmt, ast.Return):
            continue
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Name):  # a hook, e.g. parser.error = f
            continue
        call = stmt.value if isinstance(stmt, (ast.Assign, ast.Expr)) else None
        if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Attribute):
            return False
        if call.func.attr not in (
            "ArgumentParser",
            "add_argument",
            "add_argument_group",
            "add_mutually_exclusive_group",
            "set_defaults",
            "add_subparsers",
            "add_parser",
        ):
            return False
    return True


def test_no_function_over_80_lines() -> None:
    long = {
        (path, name): length
        for root in (SRC, CHECKER, SCRIPTS)
        for path, name, length, node in _functions(root)
        if length > LONGEST and not _literal_argparse_builder(node)
    }
    assert long == {}, long


def test_the_entry_scripts_parsers_are_the_exempt_kind() -> None:
    builders = [node for _, name, _, node in _functions(SCRIPTS) if name == "build_parser"]
    assert len(builders) == 3 and all(_literal_argparse_builder(node) for node in builders)


def test_the_counter_sees_a_long_function(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(LONGEST))
    (tmp_path / "m.py").write_text(f"def long():\n{body}\n", encoding="utf-8")
    tree = ast.parse((tmp_path / "m.py").read_text())
    (node,) = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    assert node.end_lineno - node.lineno + 1 == LONGEST + 1 and not _literal_argparse_builder(node)


def test_every_module_sits_in_a_sub_package() -> None:
    assert sorted(p.name for p in SRC.glob("*.py")) == ["__init__.py"]
    assert {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()} == {
        "cli",
        "core",
        "health",
        "job",
        "launch",
        "runs",
        "train",
    }


def test_the_import_contracts_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    """import-linter's own check over the contracts in pyproject.toml (the same as ``lint-imports`` in CI)."""
    from importlinter.application.use_cases import lint_imports
    from importlinter.configuration import configure

    configure()
    monkeypatch.chdir(REPO)
    assert lint_imports(cache_dir=None, no_logo=True) is True


@pytest.mark.parametrize("name", ["LATEST", "JOB_KEY_ENV", "COLLECTIVES", "RESTART_ENV"])
def test_one_definition(name: str) -> None:
    """Each shared name is assigned in exactly one module of the package."""
    homes = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AnnAssign)
                else []
            )
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                homes.append(path.relative_to(SRC).as_posix())
    assert len(homes) == 1, homes


def test_one_definition_of_process_liveness() -> None:
    """Only core/procs.py defines a liveness function (the others import it)."""
    defs = [path for path, name, _, _ in _functions(SRC) if name in ("alive", "_alive", "_pid_alive", "pid_alive")]
    assert defs == ["src/mgpu_lab/core/procs.py"]
