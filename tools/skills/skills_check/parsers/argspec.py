"""Python source -> ``ArgSpec``: the options an argparse script accepts, read with ``ast`` only.

The script is never imported or run. Parsers are names bound to ``ArgumentParser(...)``,
``.add_argument_group(...)``, ``.add_mutually_exclusive_group(...)`` or ``.add_parser(...)``; every
``add_argument`` on them (or on such a call directly) is read: option strings, dest, default, choices,
action, nargs. Names used for defaults/choices resolve to module-level literals when they can.
Also finds torchrun's and skrl's JAX launcher sources in an installed environment without importing
them.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..model import MISSING, ArgSpec, Option
from ..problems import NO_OPTIONS, PYTHON_SYNTAX, problem

_NO_VALUE = {"store_true", "store_false", "store_const", "append_const", "count", "help", "version"}
_GROUP_CALLS = {"add_argument_group", "add_mutually_exclusive_group", "add_parser"}


def _attr_name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def _is_parser_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and _attr_name(node.func) in ({"ArgumentParser"} | _GROUP_CALLS)


class _Consts:
    """Module-level NAME = literal assignments, for resolving defaults and choices."""

    def __init__(self, tree: ast.Module) -> None:
        self.values: dict[str, Any] = {}
        for stmt in tree.body:
            targets: list[ast.expr] = []
            value = None
            if isinstance(stmt, ast.Assign):
                targets, value = stmt.targets, stmt.value
            elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
                targets, value = [stmt.target], stmt.value
            for t in targets:
                if isinstance(t, ast.Name) and value is not None:
                    ok, v = self.literal(value)
                    if ok:
                        self.values[t.id] = v

    def literal(self, node: ast.expr) -> tuple[bool, Any]:
        try:
            return True, ast.literal_eval(node)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            pass
        if isinstance(node, ast.Name) and node.id in getattr(self, "values", {}):
            return True, self.values[node.id]
        if isinstance(node, ast.Call) and _attr_name(node.func) in ("sorted", "list", "tuple", "keys"):
            if isinstance(node.func, ast.Attribute) and node.func.attr == "keys":
                ok, v = self.literal(node.func.value)
                return (True, list(v)) if ok and isinstance(v, dict) else (False, None)
            if len(node.args) == 1:
                ok, v = self.literal(node.args[0])
                if ok and isinstance(v, (list, tuple, dict, set, str)):
                    name = _attr_name(node.func)
                    try:
                        seq = list(v)
                        return True, sorted(seq) if name == "sorted" else (tuple(seq) if name == "tuple" else seq)
                    except TypeError:
                        return False, None
        return False, None


class _Source:
    """Source segments of nodes, with the text split into lines once (ast.get_source_segment re-splits)."""

    def __init__(self, text: str) -> None:
        self.lines = [line + "\n" for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]

    def segment(self, node: ast.AST) -> str | None:
        try:
            l0, l1 = node.lineno - 1, node.end_lineno - 1  # type: ignore[attr-defined]
            c0, c1 = node.col_offset, node.end_col_offset  # type: ignore[attr-defined]
        except AttributeError:
            return None
        if l1 is None or c1 is None or l0 >= len(self.lines):
            return None
        if l0 == l1:
            return self.lines[l0].encode()[c0:c1].decode(errors="replace")
        first = self.lines[l0].encode()[c0:].decode(errors="replace")
        last = self.lines[l1].encode()[:c1].decode(errors="replace") if l1 < len(self.lines) else ""
        return first + "".join(self.lines[l0 + 1 : l1]) + last


_DEF_RE = re.compile(r"^[ \t]*(?:async[ \t]+)?def[ \t]+(\w+)", re.MULTILINE)
_KEYS = ("add_argument", "ArgumentParser", "set_defaults", "add_parser", "_group")


def _walk_relevant(tree: ast.Module, source: _Source):
    """ast.walk over top-level statements whose text mentions argparse calls (and every class)."""
    for stmt in tree.body:
        if not isinstance(stmt, ast.ClassDef):
            end = getattr(stmt, "end_lineno", None) or stmt.lineno
            chunk = "".join(source.lines[stmt.lineno - 1 : end])
            if not any(key in chunk for key in _KEYS):
                continue
        yield from ast.walk(stmt)


def _flag_action_classes(classes: list[ast.ClassDef], source: _Source | None = None) -> set[str]:
    """Names of Action subclasses that take no value (``nargs=0`` in their source)."""
    out: set[str] = set()
    for node in classes:
        if source is not None:
            end = getattr(node, "end_lineno", None) or node.lineno
            if "nargs" not in "".join(source.lines[node.lineno - 1 : end]):
                continue  # no nargs in its text: not walked
        for sub in ast.walk(node):
            if (
                isinstance(sub, ast.keyword)
                and sub.arg == "nargs"
                and isinstance(sub.value, ast.Constant)
                and sub.value.value == 0
            ):
                out.add(node.name)
                break
    return out


def _scope_nodes(scope: ast.AST):
    """Nodes of one function (or the module) without descending into nested functions and classes."""
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def _handed_parsers(tree: ast.Module, functions: list[Any], made_at: list[int]) -> list[tuple[str, str, int]]:
    """(callee, name, line) where a parser made in a scope is passed to a call in that same scope.

    Only the scopes that make a parser (the innermost function around each ``made_at`` line, or the
    module) are walked.
    """
    scopes: list[ast.AST] = []
    for line in made_at:
        around = [f for f in functions if f.lineno <= line <= (getattr(f, "end_lineno", None) or f.lineno)]
        scope: ast.AST = max(around, key=lambda f: f.lineno) if around else tree
        if scope not in scopes:
            scopes.append(scope)
    out = []
    for scope in scopes:
        nodes = list(_scope_nodes(scope))
        made = {
            t.id
            for n in nodes
            if isinstance(n, ast.Assign) and _is_parser_call(n.value)
            for t in n.targets
            if isinstance(t, ast.Name)
        }
        for n in nodes:
            if isinstance(n, ast.Call) and made and _attr_name(n.func) not in ("add_argument", "set_defaults"):
                for arg in [*n.args, *(kw.value for kw in n.keywords)]:
                    if isinstance(arg, ast.Name) and arg.id in made:
                        out.append((_attr_name(n.func) or "a function", arg.id, n.lineno))
    return sorted(out, key=lambda t: t[2])


@dataclass
class _Found:
    """What one pass over the statements that can matter finds: parser names, calls, classes, functions."""

    parsers: set[str] = field(default_factory=set)  # names bound to a parser or a group
    main_parsers: list[ast.Call] = field(default_factory=list)  # ArgumentParser(...) calls
    calls: list[ast.Call] = field(default_factory=list)  # .add_argument(...) and .set_defaults(...) calls
    classes: list[ast.ClassDef] = field(default_factory=list)
    made_at: list[int] = field(default_factory=list)  # lines where a parser is assigned
    functions: list[Any] = field(default_factory=list)

    def on_parser(self, recv: ast.expr) -> bool:
        """Whether a call's receiver is (likely) one of the parsers."""
        if not self.parsers and not self.main_parsers:
            return True
        if isinstance(recv, ast.Name):
            return recv.id in self.parsers or "parser" in recv.id.lower() or "group" in recv.id.lower()
        if isinstance(recv, ast.Attribute):
            return recv.attr in self.parsers
        return _is_parser_call(recv)


def _parse_tree(spec: ArgSpec, text: str) -> ast.Module | None:
    """The module's tree, or None with an IN030 problem on ``spec``."""
    try:
        return ast.parse(text, filename=spec.path)
    except SyntaxError as exc:
        spec.problems.append(
            problem(
                PYTHON_SYNTAX, spec.path, exc.lineno or 1, exc.offset or 1, f"Python source does not parse: {exc.msg}"
            )
        )
    except (ValueError, RecursionError, MemoryError) as exc:
        spec.problems.append(problem(PYTHON_SYNTAX, spec.path, 1, 1, f"Python source does not parse: {exc}"))
    return None


def _find(tree: ast.Module, source: _Source) -> _Found:
    """One pass over the statements that can matter; the parser calls come back sorted by position."""
    found = _Found()
    for node in _walk_relevant(tree, source):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found.functions.append(node)
        if isinstance(node, ast.Call):
            name = _attr_name(node.func)
            if name == "ArgumentParser":
                found.main_parsers.append(node)
            elif name in ("add_argument", "set_defaults") and isinstance(node.func, ast.Attribute):
                found.calls.append(node)

        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            if node.value is not None and _is_parser_call(node.value):
                found.made_at.append(node.lineno)
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Name):
                        found.parsers.add(t.id)
                    elif isinstance(t, ast.Attribute):
                        found.parsers.add(t.attr)
        elif isinstance(node, ast.withitem):
            if _is_parser_call(node.context_expr) and isinstance(node.optional_vars, ast.Name):
                found.parsers.add(node.optional_vars.id)
        elif isinstance(node, ast.ClassDef):
            found.classes.append(node)
    found.main_parsers.sort(key=lambda n: (n.lineno, n.col_offset))
    found.calls.sort(key=lambda n: (n.lineno, n.col_offset))
    return found


def _all_flag_actions(classes: list[ast.ClassDef], source: _Source, helper_sources: list[str] | None) -> set[str]:
    """Value-less Action classes defined here or in the helper modules' sources (unparsable ones skipped)."""
    flag_actions = _flag_action_classes(classes, source)
    for src in helper_sources or []:
        try:
            flag_actions |= _flag_action_classes([n for n in ast.parse(src).body if isinstance(n, ast.ClassDef)])
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            pass
    return flag_actions


def _main_keyword(main_parsers: list[ast.Call], consts: _Consts, name: str) -> tuple[bool, Any]:
    """(found and literal, value) of the keyword ``name`` of the first ArgumentParser call (its last mention)."""
    result: tuple[bool, Any] = (False, None)
    for call in main_parsers[:1]:
        for kw in call.keywords:
            if kw.arg == name:
                result = consts.literal(kw.value)
    return result


def _handed_note(tree: ast.Module, text: str, found: _Found) -> str | None:
    """Why the options may be incomplete: the parser is passed to a function this file does not define."""
    local = set(_DEF_RE.findall(text)) if found.made_at else set()  # every function the file defines
    for callee, arg, line in _handed_parsers(tree, found.functions, found.made_at):
        if callee not in local:  # a local helper's add_argument calls are read too
            return f"its parser is passed to {callee}() at line {line}, which may add options"
    return None


def _read_calls(spec: ArgSpec, found: _Found, source: _Source, consts: _Consts, flag_actions: set[str]) -> None:
    """Each add_argument on a parser becomes an option of ``spec``; set_defaults overrides their defaults."""
    set_defaults: dict[str, Any] = {}
    for call in found.calls:
        name = call.func.attr  # type: ignore[attr-defined]
        if name == "set_defaults" and found.on_parser(call.func.value):  # type: ignore[attr-defined]
            for kw in call.keywords:
                if kw.arg:
                    ok, v = consts.literal(kw.value)
                    set_defaults[kw.arg] = v if ok else source.segment(kw.value)
            continue
        if name != "add_argument" or not found.on_parser(call.func.value):  # type: ignore[attr-defined]
            continue
        opt = _option(source, call, consts, flag_actions)
        if opt is None:
            spec.problems.append(
                problem(
                    NO_OPTIONS,
                    spec.path,
                    call.lineno,
                    call.col_offset + 1,
                    "add_argument with non-literal option strings; not read",
                    "warning",
                )
            )
            if spec.incomplete is None:
                spec.incomplete = f"add_argument at line {call.lineno} has non-literal option strings"
            continue
        spec.options.append(opt)
    for opt in spec.options:
        if opt.dest in set_defaults:
            opt.default = set_defaults[opt.dest]


def _add_help_option(spec: ArgSpec, main_parsers: list[ast.Call]) -> None:
    """argparse's own -h/--help, unless the script adds its own one."""
    if (main_parsers or spec.options) and not any("--help" in o.flags for o in spec.options):
        line = main_parsers[0].lineno if main_parsers else 1
        spec.options.append(
            Option(flags=("-h", "--help"), dest="help", line=line, default=MISSING, action="help", takes_value=False)
        )


def parse_argparse(path: str, text: str, helper_sources: list[str] | None = None) -> ArgSpec:
    """Read the argparse options of the Python source ``text`` (file ``path``).

    ``helper_sources``: source texts of modules it imports custom Action classes from (read, never run).
    """
    spec = ArgSpec(path=path)
    if "argparse" not in text and not any(key in text for key in _KEYS):
        spec.incomplete = "no argparse options found"  # nothing to read: not parsed (a helper's few hundred lines
        return spec  # cost a quarter of a millisecond each, and a collection names hundreds of them)
    tree = _parse_tree(spec, text)
    if tree is None:
        return spec
    consts = _Consts(tree)
    source = _Source(text)
    found = _find(tree, source)
    flag_actions = _all_flag_actions(found.classes, source, helper_sources)
    ok, allow_abbrev = _main_keyword(found.main_parsers, consts, "allow_abbrev")
    if ok:
        spec.allow_abbrev = bool(allow_abbrev)
    ok, value = _main_keyword(found.main_parsers, consts, "add_help")
    add_help = bool(value) if ok else True  # argparse's default when absent or not a literal
    spec.incomplete = _handed_note(tree, text, found)
    _read_calls(spec, found, source, consts, flag_actions)
    if add_help:
        _add_help_option(spec, found.main_parsers)
    if not spec.options:
        spec.incomplete = spec.incomplete or "no argparse options found"
        if "argparse" in text:  # a parser the checker failed to read (a script without one is only noted)
            spec.problems.append(problem(NO_OPTIONS, path, 1, 1, "no argparse add_argument calls found", "warning"))
    return spec


def _option(source: _Source, call: ast.Call, consts: _Consts, flag_actions: set[str]) -> Option | None:
    flags: list[str] = []
    for arg in call.args:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            flags.append(arg.value)
        else:
            return None
    if not flags:
        return None
    kw: dict[str, ast.expr] = {k.arg: k.value for k in call.keywords if k.arg}
    action: str | None = None
    if "action" in kw:
        ok, v = consts.literal(kw["action"])
        if ok and isinstance(v, str):
            action = v
        else:
            action = _attr_name(kw["action"]) or source.segment(kw["action"])
    default: Any = MISSING
    if "default" in kw:
        ok, v = consts.literal(kw["default"])
        default = v if ok else source.segment(kw["default"])
    choices = None
    if "choices" in kw:
        ok, v = consts.literal(kw["choices"])
        if ok:
            try:
                choices = tuple(v)
            except TypeError:
                choices = None
    nargs = None
    if "nargs" in kw:
        ok, v = consts.literal(kw["nargs"])
        nargs = v if ok else source.segment(kw["nargs"])
    positional = not flags[0].startswith("-")
    if "dest" in kw and isinstance(kw["dest"], ast.Constant) and isinstance(kw["dest"].value, str):
        dest = kw["dest"].value
    elif positional:
        dest = flags[0]
    else:
        long = next((f for f in flags if f.startswith("--")), flags[0])
        dest = long.lstrip("-").replace("-", "_")
    takes_value = True
    if action in _NO_VALUE or action in flag_actions or nargs == 0:
        takes_value = False
    if action == "BooleanOptionalAction":
        takes_value = False
        flags += [f"--no-{f[2:]}" for f in list(flags) if f.startswith("--")]
    if action in ("store_true", "store_false") and default is MISSING:
        default = action == "store_false"
    help_text = None
    if "help" in kw:
        ok, v = consts.literal(kw["help"])
        help_text = v if ok and isinstance(v, str) else None
    first = call.args[0]
    return Option(
        flags=tuple(flags),
        dest=dest,
        line=first.lineno,
        col=first.col_offset + 1,
        default=default,
        choices=choices,
        action=action,
        nargs=nargs,
        takes_value=takes_value,
        help=help_text,
    )


def site_packages(root: Path) -> list[Path]:
    """Candidate site-packages folders: the checked tree's .venv first, then the running interpreter's."""
    out: list[Path] = []
    for pattern in (".venv/lib/python3*/site-packages", ".venv/Lib/site-packages"):
        import glob

        out += [Path(p) for p in sorted(glob.glob(str(root / pattern)))]
    for entry in sys.path:
        if entry and entry.endswith(("site-packages", "dist-packages")):
            out.append(Path(entry))
    seen: set[Path] = set()
    return [p for p in out if not (p in seen or seen.add(p))]  # type: ignore[func-returns-value]


def find_installed(root: Path, package: str, relpath: str) -> Path | None:
    """``<package>/<relpath>`` in an installed environment, located without importing ``package``."""
    for sp in site_packages(root):
        cand = sp / package / relpath
        if cand.is_file():
            return cand
    try:
        spec = importlib.util.find_spec(package)  # top-level only: finds, imports nothing
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            cand = Path(loc) / relpath
            if cand.is_file():
                return cand
    return None
