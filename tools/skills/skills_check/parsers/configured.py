"""A parser built by a function over a config dataclass, read with ``ast`` only (never imported).

Isaac Lab 3.0's ``train_multigpu`` is one: ``isaaclab/cli/multigpu.py`` defines a frozen dataclass
(``MultiGpuLauncherCfg``) and ``build_parser(cfg)``, whose options depend on the config
(``if cfg.rl_libraries: parser.add_argument("--rl_library", choices=cfg.rl_libraries, ...)``); an entry
module (``isaaclab_rl/entrypoints/multigpu.py``) makes the instance (``LAUNCHER_CFG =
MultiGpuLauncherCfg(prog=..., rl_libraries=MULTI_GPU_BACKENDS)``). Given the builder's ``ArgSpec`` (every
option ``parse_argparse`` found) and the instance's field values, ``apply_config`` leaves out the options
of branches the config turns off and fills in choices the config gives. A value that cannot be read
statically is unknown: its branch's options stay (never a finding from a guess).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

from ..model import ArgSpec

UNKNOWN = object()  # a config value that cannot be read statically


def _literal(node: ast.expr | None) -> Any:
    if node is None:
        return UNKNOWN
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return UNKNOWN


def _tree(text: str) -> ast.Module | None:
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None


def module_constant(text: str, name: str) -> Any:
    """The literal a module binds ``name`` to at its top level (``X = (...)``, ``X: T = (...)``), or UNKNOWN."""
    tree = _tree(text)
    for node in tree.body if tree else ():
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return _literal(node.value)
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            return _literal(node.value)
    return UNKNOWN


def imported_from(text: str, name: str) -> str | None:
    """The absolute module a ``from MODULE import name`` at the top of ``text`` names, or None."""
    tree = _tree(text)
    for node in tree.body if tree else ():
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.level == 0
            and any((a.asname or a.name) == name for a in node.names)
        ):
            return node.module
    return None


def config_classes(text: str) -> dict[str, dict[str, Any]]:
    """Each dataclass in ``text`` with the defaults of its fields (UNKNOWN where a field has none)."""
    tree = _tree(text)
    out: dict[str, dict[str, Any]] = {}
    for node in tree.body if tree else ():
        if isinstance(node, ast.ClassDef) and any("dataclass" in ast.unparse(d) for d in node.decorator_list):
            out[node.name] = {
                s.target.id: _literal(s.value)
                for s in node.body
                if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
            }
    return out


def instance_values(
    text: str, cls: str, defaults: dict[str, Any], resolve: Callable[[str], Any]
) -> list[tuple[str, dict[str, Any]]]:
    """Every ``NAME = cls(...)`` at the top of ``text``: (NAME, field -> value); a name given as a value is
    looked up with ``resolve`` (its module's literal), else UNKNOWN."""
    tree = _tree(text)
    found = []
    for node in tree.body if tree else ():
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
            continue
        call = node.value
        if not (isinstance(call.func, ast.Name) and call.func.id == cls) or call.args:
            continue
        values = dict(defaults)
        for kw in call.keywords:
            if kw.arg is None:
                return []  # **kwargs: not readable
            value = _literal(kw.value)
            if value is UNKNOWN and isinstance(kw.value, ast.Name):
                value = resolve(kw.value.id)
            values[kw.arg] = value
        target = node.targets[0]
        found.append((target.id if isinstance(target, ast.Name) else "?", values))
    return found


def _builder(tree: ast.Module, cls: str) -> tuple[ast.FunctionDef, str] | None:
    """The function that takes the config (a parameter annotated with ``cls``) and makes a parser."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and "ArgumentParser" in ast.unparse(node):
            for arg in node.args.args:
                if arg.annotation is not None and ast.unparse(arg.annotation).strip("'\"") == cls:
                    return node, arg.arg
    return None


def _field_test(test: ast.expr, param: str) -> tuple[str, bool] | None:
    """``cfg.field`` -> (field, True); ``not cfg.field`` -> (field, False); else None."""
    negate = False
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test, negate = test.operand, True
    if isinstance(test, ast.Attribute) and isinstance(test.value, ast.Name) and test.value.id == param:
        return test.attr, not negate
    return None


def _lines(stmts: list[ast.stmt]) -> set[int]:
    return {n for s in stmts for n in range(s.lineno, (s.end_lineno or s.lineno) + 1)}


def apply_config(spec: ArgSpec, builder_text: str, cls: str, values: dict[str, Any]) -> ArgSpec:
    """``spec`` (the builder module's options) as the config ``values`` makes them: options in branches it
    turns off are left out; ``choices=cfg.field`` becomes the field's value where it is known."""
    tree = _tree(builder_text)
    found = _builder(tree, cls) if tree else None
    if found is None:
        return spec
    func, param = found
    off: set[int] = set()
    choices: dict[int, tuple[Any, ...]] = {}
    for node in ast.walk(func):
        if isinstance(node, ast.If) and (test := _field_test(node.test, param)) is not None:
            value = values.get(test[0], UNKNOWN)
            if value is not UNKNOWN:
                off |= _lines(node.orelse if bool(value) == test[1] else node.body)
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            for kw in node.keywords:
                if kw.arg == "choices" and (test := _field_test(kw.value, param)) is not None:
                    value = values.get(test[0], UNKNOWN)
                    if isinstance(value, (tuple, list)):
                        choices.update(
                            dict.fromkeys(range(node.lineno, (node.end_lineno or node.lineno) + 1), tuple(value))
                        )
    options = []
    for opt in spec.options:
        if opt.line in off:
            continue
        if opt.line in choices:
            opt.choices = choices[opt.line]
        options.append(opt)
    spec.options = options
    return spec
