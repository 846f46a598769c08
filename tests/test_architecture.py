"""The package's shape, checked: sub-packages by concern, the import contracts, short functions, one definition of
the shared names. Static reads of the source (``ast``) and import-linter's own check, in-process."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from mgpu_testing import REPO

SRC = REPO / "src" / "mgpu_lab"
CHECKER = REPO / "tools" / "skills"
SCRIPTS = REPO / "scripts" / "reinforcement_learning"
PROBE = REPO / "skills" / "user" / "train-multi-gpu" / "scripts"  # the NCCL probe: standalone, same rules
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
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id.endswith("Parser"):
            continue  # the parser itself, of a class of the script's own (the probe's one-line-error parser)
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
        for root in (SRC, CHECKER, SCRIPTS, PROBE)
        for path, name, length, node in _functions(root)
        if length > LONGEST and not _literal_argparse_builder(node)
    }
    assert long == {}, long


#: The most lines a module may have: past it, a module holds more than one concern (split it along its seams).
LONGEST_MODULE = 500


def test_no_module_over_500_lines() -> None:
    long = {
        path.relative_to(REPO).as_posix(): n
        for root in (SRC, CHECKER)
        for path in sorted(root.rglob("*.py"))
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > LONGEST_MODULE
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


def _string_constants(path: Path) -> list[tuple[int, str]]:
    """Every string constant in a module's code (docstrings and comments are no constants a program reads)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def _compared_or_passed(path: Path) -> list[tuple[int, str]]:
    """String constants a module compares with (``==``, ``!=``) or passes as an argument: where a phase goes."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Compare) and all(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops):
            values = [node.left, *node.comparators]
        elif isinstance(node, ast.Call):
            values = [*node.args, *(k.value for k in node.keywords)]
        else:
            continue
        found += [(v.lineno, v.value) for v in values if isinstance(v, ast.Constant) and isinstance(v.value, str)]
    return found


#: The configuration step: the launch is parsed, and the scheduler's environment read, here and only here.
CONFIGURATION_STEP = {"job/config.py", "launch/cluster.py", "launch/shm_ranks.py"}


def test_the_environment_is_read_once_in_the_configuration_step() -> None:
    """No ``PET_`` or ``SLURM_`` variable is named outside the configuration step: downstream code reads the typed
    fields it folded them into (:class:`mgpu_lab.job.config.SchedulerEnv`)."""
    found = [
        f"{path.relative_to(SRC).as_posix()}:{line}: {text!r}"
        for path in sorted(SRC.rglob("*.py"))
        if path.relative_to(SRC).as_posix() not in CONFIGURATION_STEP
        for line, text in _string_constants(path)
        if "PET_" in text or "SLURM_" in text
    ]
    assert found == []


@pytest.mark.parametrize("text", ["latest", "MGPU_LAB_JOB_KEY", "MGPU_LAB_SUPERVISE_DIR", "MGPU_LAB_JOB_TAG"])
def test_each_protocol_word_is_spelled_once(text: str) -> None:
    """The rank protocol's words are spelled in one place; everything else uses the name given to them."""
    found = [
        f"{path.relative_to(SRC).as_posix()}:{line}"
        for path in sorted(SRC.rglob("*.py"))
        for line, value in _string_constants(path)
        if value == text
    ]
    assert len(found) == 1, found


def test_phases_and_failure_kinds_are_enums_not_literals() -> None:
    """Both ends of the rank protocol name phases and failure kinds through heartbeat's enums."""
    words = {"start", "train", "done", "exception", "refused"}
    found = [
        f"{path.relative_to(SRC).as_posix()}:{line}: {value!r}"
        for name in (
            "health/rank_progress.py",
            "health/rank_entry.py",
            "health/watchdog.py",
            "health/culprit.py",
            "health/failures.py",
        )
        for path in [SRC / name]
        for line, value in _compared_or_passed(path)
        if value in words
    ]
    assert found == [], found


def _silent_imports(root: Path) -> list[str]:
    """Each group of function-level imports under ``root`` whose first line carries no comment (``path:line: text``)."""
    silent = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        lines = path.read_text(encoding="utf-8").splitlines()
        for func in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for block in ast.walk(func):
                for field in ("body", "orelse", "finalbody"):
                    body = getattr(block, field, None)
                    if not isinstance(body, list):
                        continue
                    previous_was_import = False
                    for stmt in body:
                        is_import = isinstance(stmt, (ast.Import, ast.ImportFrom))
                        if is_import and not previous_was_import and "#" not in lines[stmt.lineno - 1]:
                            silent.append(f"{rel}:{stmt.lineno}: {lines[stmt.lineno - 1].strip()}")
                        previous_was_import = is_import
    return sorted(set(silent))  # a nested function's block is walked from each enclosing function too


def test_a_function_level_import_says_why() -> None:
    """An import inside a function defers a cost (torch, a module a start-up path must not load): each group of
    them says which, in a comment on its first line, in every package. The rest import at module level."""
    silent = _silent_imports(SRC)
    assert silent == [], silent


def test_the_import_sweep_sees_a_silent_import(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        "def f():\n"
        "    import json  # json: only here\n"
        "    import os\n"
        "\n"
        "    if True:\n"
        "        pass\n"
        "    else:\n"
        "        import shutil\n"
        "    try:\n"
        "        pass\n"
        "    finally:\n"
        "        from pathlib import Path\n"
        "    import re\n",
        encoding="utf-8",
    )
    assert _silent_imports(tmp_path) == [
        "m.py:12: from pathlib import Path",
        "m.py:13: import re",
        "m.py:8: import shutil",
    ]


# A rule code is written once, where its rule is defined: the first argument of ``@rule(...)`` (the rules) or of
# ``CoreCode(...)`` (the core's input and suppression codes); everywhere else the checker names the rule (its
# function, ``registry.of(func).code``, or the core code's constant). Docstrings are the rules' explanations, in
# words, and may name other rules; RULES.md and the tests are outside this.
_DEFINERS = ("rule", "CoreCode")


def _rule_codes() -> set[str]:
    from skills_check.runner import load_rules  # the checker's registry: only the tests that need it load it

    return {r.code for r in load_rules()}


def _code_literals(source: str, pattern: re.Pattern[str]) -> list[tuple[int, str]]:
    """(line, text) of each string literal of ``source`` holding a rule code, outside a code's definition and
    the docstrings."""
    tree = ast.parse(source)
    allowed: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _DEFINERS and node.args:
            allowed.add(id(node.args[0]))
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                allowed.add(id(first.value))
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in allowed
        and pattern.search(node.value)
    ]


def test_each_rule_code_is_written_once_where_its_rule_is_defined() -> None:
    codes = _rule_codes()
    prefixes = {code.rstrip("0123456789") for code in codes}
    assert {"SK", "DR", "IN", "SU"} <= prefixes
    pattern = re.compile(rf"\b(?:{'|'.join(sorted(prefixes))})\d{{3}}\b")
    found = {
        f"{path.relative_to(REPO).as_posix()}:{line}": text
        for path in sorted((CHECKER / "skills_check").rglob("*.py"))
        for line, text in _code_literals(path.read_text(encoding="utf-8"), pattern)
    }
    assert found == {}, found
    definitions = [
        text
        for path in sorted((CHECKER / "skills_check").rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _DEFINERS and node.args
        for text in [ast.literal_eval(node.args[0])]
        if isinstance(text, str) and pattern.fullmatch(text)
    ]
    assert len(definitions) == len(set(definitions)) and set(definitions) == codes


def test_the_code_literal_scan_sees_a_code_outside_its_definition() -> None:
    pattern = re.compile(r"\b(?:SK|IN)\d{3}\b")
    source = (
        '"""Module text naming SK101."""\n'
        '@rule("SK101", "x")\n'
        "def f(p):\n"
        '    """Docstring naming SK102."""\n'
        '    yield finding("SK101", f"see IN001 {p}")\n'
        'X = CoreCode("IN001", "summary", "text")\n'
    )
    assert _code_literals(source, pattern) == [(5, "SK101"), (5, "see IN001 ")]
