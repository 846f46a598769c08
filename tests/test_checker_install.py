"""The checker's own distribution (tools/skills/pyproject.toml, command ``skills-check``): its dependencies are
the script's PEP 723 list, it installs and runs from the checkout in a clean uv environment (no torch), and
it reports what the script reports."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import tomllib
from pathlib import Path

import pytest
from mgpu_testing import PYTHON, REPO, run
from mgpu_testing.checker import CLI, SKILL, TOOLS, check, edit, make_tree
from skills_check import cli

# PEP 723's reference regular expression for a script's metadata block
PEP723 = re.compile(r"(?m)^# /// (?P<type>[a-zA-Z0-9-]+)$\s(?P<content>(^#(| .*)$\s)+)^# ///$")
UV = shutil.which("uv")


def _script_metadata() -> dict:
    (block,) = [m for m in PEP723.finditer(CLI.read_text(encoding="utf-8")) if m.group("type") == "script"]
    content = "".join(
        line[2:] if line.startswith("# ") else line[1:] for line in block.group("content").splitlines(keepends=True)
    )
    return tomllib.loads(content)


def test_the_distribution_s_dependencies_are_the_script_s_pep723_list() -> None:
    project = tomllib.loads((TOOLS / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    script = _script_metadata()
    assert project["dependencies"] == script["dependencies"]
    assert project["requires-python"] == script["requires-python"]
    assert project["scripts"] == {"skills-check": "skills_check.cli:entry"}
    named = {re.split(r"[<>=!~; \[]", d, maxsplit=1)[0].lower() for d in project["dependencies"]}
    assert not named & {"torch", "numpy", "gymnasium", "mgpu-lab", "rsl-rl-lib", "rl-games", "skrl"}


def _clean_env(tmp: Path) -> dict[str, str]:
    """uv with its cache, its tools and their commands in ``tmp``, outside any project environment, with the
    Python already here (no download); where packages come from is left as this machine configures it."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT", "PYTHONPATH")}
    env.update(
        UV_CACHE_DIR=str(tmp / "cache"),
        UV_TOOL_DIR=str(tmp / "tools"),
        UV_TOOL_BIN_DIR=str(tmp / "bin"),
        UV_PYTHON_DOWNLOADS="never",
    )
    return env


@pytest.fixture(scope="module")
def drifted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tree with findings, so the reports compared hold something."""
    tree = make_tree(tmp_path_factory.mktemp("install") / "repo")
    edit(tree, SKILL, "--rl_library skrl", "--rl_library foo")
    with open(tree / SKILL, "a", encoding="utf-8") as fh:
        fh.write("\nSee [gone](missing.md).\n")
    return tree


@pytest.mark.e2e
@pytest.mark.skipif(UV is None, reason="uv is not on PATH")
@pytest.mark.timeout(600)
def test_uvx_from_the_checker_folder_runs_without_torch_and_matches_the_script(drifted: Path, tmp_path: Path) -> None:
    env = _clean_env(tmp_path)
    got = run(
        [UV, "tool", "run", "--from", str(TOOLS), "skills-check", "check", "--format", "json", "--no-cache"],
        timeout=540,
        env=env,
        cwd=drifted,
    )
    assert got.returncode == 1, got.stderr[-3000:]
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):  # the script's main, here
        rc = cli.main(["check", "--root", str(drifted), "--format", "json", "--no-cache"])
    script = json.loads(out.getvalue())
    assert rc == 1 and script["findings"]
    assert json.loads(got.stdout) == script  # findings, summary and notes alike
    cache = tmp_path / "cache"
    assert cache.is_dir() and not [p for p in cache.rglob("torch") if p.is_dir()], "torch was installed"


@pytest.mark.e2e
@pytest.mark.skipif(UV is None, reason="uv is not on PATH")
@pytest.mark.timeout(600)
def test_uv_tool_install_gives_the_skills_check_command(drifted: Path, tmp_path: Path) -> None:
    env = _clean_env(tmp_path)
    installed = run([UV, "tool", "install", str(TOOLS)], timeout=540, env=env, cwd=tmp_path)
    assert installed.returncode == 0, installed.stderr[-3000:]
    command = tmp_path / "bin" / "skills-check"
    helped = run([str(command), "check", "--help"], timeout=120, env=env, cwd=tmp_path)
    assert helped.returncode == 0 and helped.stdout.startswith("usage: skills-check check")
    sarif = run(
        [str(command), "check", "--root", str(drifted), "--format", "sarif", "--no-cache"],
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert sarif.returncode == 1 and json.loads(sarif.stdout)["version"] == "2.1.0"
    env_python = next((tmp_path / "tools" / "skills-check").glob("lib/python*/site-packages"))
    # the package the script runs, installed
    assert (env_python / "skills_check" / "cli.py").read_bytes() == (TOOLS / "skills_check" / "cli.py").read_bytes()
    assert not (env_python / "torch").exists()
    python = next((tmp_path / "tools" / "skills-check" / "bin").glob("python*"))
    loaded = run([str(python), "-c", ONLY_ITS_OWN], timeout=120, env=env, cwd=tmp_path)
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    assert json.loads(loaded.stdout) == {"plain": [], "everything": []}


# Imports the installed package, then every module of it but the language server (pygls is an extra), and prints
# the top-level modules each step added that come from site-packages other than skills_check and its parsers.
ONLY_ITS_OWN = """
import json, pkgutil, sys, sysconfig
site = sysconfig.get_paths()["purelib"]
deps = {"skills_check", "docutils", "markdown_it", "mdurl", "mdit_py_plugins", "yaml", "_yaml", "pathspec"}
def added(before):
    out = []
    for name in sorted(set(sys.modules) - before):
        top = name.split(".")[0]
        where = getattr(sys.modules[name], "__file__", None) or ""
        if "." not in name and top not in deps and where and (where.startswith(site) or not where.startswith(sys.base_prefix)):
            out.append(name)
    return out
before = set(sys.modules)
import skills_check
plain = added(before)
import skills_check.cli
for m in pkgutil.walk_packages(skills_check.__path__, "skills_check."):
    if not m.name.startswith(("skills_check.lsp", "skills_check.__main__")):
        __import__(m.name)
print(json.dumps({"plain": plain, "everything": added(before)}))
"""


def test_the_script_path_keeps_working(drifted: Path) -> None:
    got = run(
        [PYTHON, str(CLI), "check", "--root", str(drifted), "--format", "json", "--no-cache"], timeout=120, cwd=REPO
    )
    assert got.returncode == 1 and json.loads(got.stdout)["findings"] == check(drifted, "--no-cache")[1]
