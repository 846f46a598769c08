"""The package's module-level imports form no cycle, and the launcher's dry-run path stays stdlib-only.

Read with ``ast`` (nothing is imported): an edge A -> B for every module-level ``import``/``from ... import``
of an ``mgpu_lab`` module in A (imports inside functions are lazy by design and not edges here; a module's
import of its own parent package is not a cycle either)."""

from __future__ import annotations

import ast
from pathlib import Path

from mgpu_testing import REPO

SRC = REPO / "src"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in SRC.rglob("*.py")}
    edges: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:  # module level only
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for target in targets:
                if target in modules and target != name and not name.startswith(target + "."):
                    edges[name].add(target)
    return edges


def test_no_import_cycle_in_the_package() -> None:
    edges = graph()
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
        "mgpu_lab.core.errors",
        "mgpu_lab.launch.devices",
        "mgpu_lab.train.checks",
        "mgpu_lab.runs.run_dir",
        "mgpu_lab.job.kill_grace",
        "mgpu_lab.core.source_loader",
        "mgpu_lab.core.help_format",
        "mgpu_lab.launch.cluster",
        "mgpu_lab.train.tasks.catalog",
    }
    for name in light:
        assert edges[name] <= light | {"mgpu_lab"}, (name, edges[name] - light)
        tree = ast.parse((SRC / (name.replace(".", "/") + ".py")).read_text(encoding="utf-8"))
        tops = {a.name.split(".")[0] for n in tree.body if isinstance(n, ast.Import) for a in n.names}
        tops |= {n.module.split(".")[0] for n in tree.body if isinstance(n, ast.ImportFrom) and n.module}
        assert not tops & {"torch", "numpy", "gymnasium", "jax", "rsl_rl", "rl_games", "skrl"}, (name, tops)
