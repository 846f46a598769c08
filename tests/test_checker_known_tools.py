"""torchrun's and skrl's JAX launcher options are kept beside the checker (tools/skills/known_tools.json),
so a check never reads an installed environment. This compares the kept spec with the torch and skrl
installed here; when they are upgraded, refresh it with `python -m skills_check.known_tools --write`."""

from __future__ import annotations

from pathlib import Path

from mgpu_testing import REPO
from mgpu_testing.checker import make_tree
from skills_check import known_tools
from skills_check.loader import load_project


def _shape(spec):
    return sorted((o.flags, o.dest, o.takes_value, o.nargs, o.choices, o.action) for o in spec.options)


def test_kept_spec_matches_the_installed_torch_and_skrl() -> None:
    kept = known_tools.load()
    installed = known_tools.from_installed(REPO)
    assert set(installed) == set(known_tools.SOURCES), "torch and skrl are project dependencies"
    assert set(kept) == set(installed)
    for tool, (version, spec) in installed.items():
        assert _shape(kept[tool]) == _shape(spec), (
            f"{tool}: known_tools.json differs from the installed {known_tools.SOURCES[tool][0]} {version}: "
            "run `uv run --frozen python -m skills_check.known_tools --write`"
        )
    assert known_tools.render(installed) == known_tools.SPEC_FILE.read_text(encoding="utf-8")


def test_a_tree_without_an_environment_gets_the_kept_options(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "repo")
    assert not (tree / ".venv").exists()
    project = load_project(tree)
    assert (
        "--nproc-per-node" in project.torchrun.by_flag() and "--coordinator_address" in project.jax_launcher.by_flag()
    )
    assert project.torchrun.path == "torch/distributed/run.py"
    assert not [n for n in project.notes if "install" in n]
