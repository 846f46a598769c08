"""The package's module-level imports form no cycle, and the launcher's dry-run path stays stdlib-only.

Read with ``ast`` (nothing is imported): an edge A -> B for every module-level ``import``/``from ... import``
of an ``mgpu_lab`` module in A (imports inside functions are lazy by design and not edges here; a module's
import of its own parent package is not a cycle either)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from mgpu_testing import REPO

SRC = REPO / "src"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def graph(*, lazy: bool = False) -> dict[str, set[str]]:
    """Module -> the package modules it imports at module level (``lazy``: inside functions too)."""
    modules = {module_name(p): p for p in SRC.rglob("*.py")}
    edges: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree) if lazy else tree.body:
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for target in targets:
                if target in modules and target != name and not name.startswith(target + "."):
                    edges[name].add(target)
    return edges


@pytest.mark.parametrize("lazy", [False, True], ids=["module level", "function level too"])
def test_no_import_cycle_in_the_package(lazy: bool) -> None:
    """No cycle, not even through an import inside a function (such an import defers a cost, it hides no cycle)."""
    edges = graph(lazy=lazy)
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                raise AssertionError(
                    "import cycle: " + " -> ".join(path[path.index(nxt) :] + [node, nxt])
                    if nxt in path
                    else f"import cycle through {node} -> {nxt}"
                )
            if nxt not in state:
                visit(nxt, path + [node])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [])


def test_the_launchers_modules_import_only_the_stdlib_at_module_level() -> None:
    """What ``--dry_run`` loads must not pull torch, numpy or gymnasium in through a module-level import."""
    edges = graph()
    light = {
        "mgpu_lab.launch.launcher",
        "mgpu_lab.launch.argv_checks",
        "mgpu_lab.launch.any_script",
        "mgpu_lab.launch.script_check",
        "mgpu_lab.job.config",
        "mgpu_lab.core.errors",
        "mgpu_lab.core.names",
        "mgpu_lab.core.safe_read",
        "mgpu_lab.launch.devices",
        "mgpu_lab.train.checks",
        "mgpu_lab.runs",  # the packages: their __init__ imports nothing
        "mgpu_lab.train",
        "mgpu_lab.runs.run_dir",
        "mgpu_lab.job.kill_grace",
        "mgpu_lab.core.source_loader",
        "mgpu_lab.core.help_format",
        "mgpu_lab.launch.cluster",
        "mgpu_lab.train.tasks.catalog",
    }
    for name in light:
        assert edges[name] <= light | {"mgpu_lab"}, (name, edges[name] - light)
        rel = name.replace(".", "/")
        path = SRC / (rel + ".py") if (SRC / (rel + ".py")).exists() else SRC / rel / "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"))
        tops = {a.name.split(".")[0] for n in tree.body if isinstance(n, ast.Import) for a in n.names}
        tops |= {n.module.split(".")[0] for n in tree.body if isinstance(n, ast.ImportFrom) and n.module}
        assert not tops & {"torch", "numpy", "gymnasium", "jax", "rsl_rl", "rl_games", "skrl"}, (name, tops)


def test_the_adapters_checkpoint_side_imports_no_rl_library_at_module_level() -> None:
    """The launcher's --checkpoint checks (before any rank) load an adapter for its checkpoint functions: neither
    the adapter nor anything it imports at module level may import an RL library (rsl_rl alone pulls tensordict and
    torch._dynamo in: seconds for a one-line refusal). The library's subclasses live in modules ``train()`` imports."""
    edges = graph()
    libraries = {"rsl_rl", "rl_games", "skrl", "tensordict", "jax", "flax"}
    for adapter in ("rsl_rl", "rl_games", "skrl"):
        seen, queue = set(), [f"mgpu_lab.train.adapters.{adapter}"]
        while queue:
            name = queue.pop()
            if name in seen:
                continue
            seen.add(name)
            queue.extend(edges[name])
            path = SRC / (name.replace(".", "/") + ".py")
            if not path.is_file():
                path = SRC / name.replace(".", "/") / "__init__.py"
            tree = ast.parse(path.read_text(encoding="utf-8"))
            tops = set()
            for node in ast.walk(tree):
                if isinstance(node, ast.Import) and _at_module_level(tree, node):
                    tops |= {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.module and _at_module_level(tree, node):
                    tops.add(node.module.split(".")[0])
            assert not tops & libraries, (adapter, name, tops & libraries)


def _at_module_level(tree: ast.Module, node: ast.stmt) -> bool:
    """Whether ``node`` runs when its module is imported: at the top, or inside a top-level try/if block."""
    for top in tree.body:
        if top is node:
            return True
        if isinstance(top, (ast.Try, ast.If)) and any(n is node for n in ast.walk(top)):
            return not (isinstance(top, ast.If) and "TYPE_CHECKING" in ast.unparse(top.test))
    return False
