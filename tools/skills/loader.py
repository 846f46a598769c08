"""The checked tree -> ``Project``: skills, RST docs, argparse specs, discovery aliases, config.

Paths come from ``pyproject.toml`` ``[tool.skills-check]`` (keys ``skills``, ``docs``, ``launcher``,
``trainer``), overridden by command-line flags. Files that cannot be read become findings; only a
missing root or an unreadable ``pyproject.toml`` stops the check (``SetupError``, exit 2).
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any

from cache import ParseCache
from inputs import link_problem, problem, read_text, rel
from model import ArgSpec, MarkdownDoc, Project, RstDoc, Skill
from parse_argparse import find_installed, parse_argparse

_CACHE = ParseCache(Path("."), enabled=False)  # replaced per load_project call

DEFAULTS: dict[str, str] = {
    "skills": "skills",
    "docs": "docs",
    "launcher": "scripts/reinforcement_learning/train_multigpu.py",
    "trainer": "scripts/reinforcement_learning/train.py",
}
_SKIP_DIRS = {"_build", ".git", "__pycache__", "node_modules", ".venv"}


class SetupError(Exception):
    """The check cannot start (missing root, unreadable pyproject.toml, bad config)."""


def load_config(root: Path, overrides: dict[str, str | None] | None = None) -> dict[str, Any]:
    """DEFAULTS, updated from pyproject's [tool.skills-check], then from non-None ``overrides``."""
    config: dict[str, Any] = dict(DEFAULTS)
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        try:
            data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise SetupError(f"{pyproject}: cannot read: {exc}") from exc
        table = data.get("tool", {}).get("skills-check", {})
        if not isinstance(table, dict):
            raise SetupError(f"{pyproject}: [tool.skills-check] must be a table")
        for key, value in table.items():
            if key in DEFAULTS and not isinstance(value, str):
                raise SetupError(f"{pyproject}: [tool.skills-check] {key} must be a string path")
            config[key] = value
    for key, value in (overrides or {}).items():
        if value is not None:
            config[key] = value
    return config


def _walk_files(root: Path, top: Path, suffix: str, project: Project) -> list[Path]:
    """Files under ``top`` ending in ``suffix`` (sorted), not following directory links; loops reported."""
    out: list[Path] = []
    if not top.is_dir():
        return out
    for dirpath, dirnames, filenames in os.walk(top, followlinks=False, onerror=lambda e: None):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        for d in list(dirnames):
            full = Path(dirpath) / d
            msg = link_problem(full)
            if msg:
                project.problems.append(problem("IN005", rel(root, full), 1, 1, f"{msg}; skipped"))
        for name in sorted(filenames):
            full = Path(dirpath) / name
            if name.endswith(suffix):
                out.append(full)
            elif full.is_symlink() and link_problem(full):
                project.problems.append(problem("IN005", rel(root, full), 1, 1, f"{link_problem(full)}; skipped"))
    return sorted(out)


def import_parse_rst():  # noqa: ANN201
    """Import the RST parser module without what it never uses.

    docutils imports ``urllib.request`` at module level (for ``include``/``csv-table`` URLs, disabled
    here) and ``pygments`` (highlighting, off here): about a quarter of a second. While docutils loads,
    ``pygments`` is hidden and ``urllib.request`` is a stand-in whose ``urlopen`` imports the real
    module on first call; both are restored afterwards, so later imports see the real modules.
    """
    import sys
    import types

    if "parse_rst" in sys.modules:
        return sys.modules["parse_rst"]
    saved = {name: sys.modules.get(name) for name in ("pygments", "urllib.request")}
    stub = types.ModuleType("urllib.request")

    def urlopen(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        if sys.modules.get("urllib.request") is stub:
            del sys.modules["urllib.request"]
        import urllib.request as real

        return real.urlopen(*args, **kwargs)

    stub.urlopen = urlopen  # type: ignore[attr-defined]
    try:
        if saved["pygments"] is None:
            sys.modules["pygments"] = None  # type: ignore[assignment]
        if saved["urllib.request"] is None:
            sys.modules["urllib.request"] = stub
        try:
            import docutils.parsers.rst.directives.misc  # noqa: F401
            import docutils.parsers.rst.directives.tables  # noqa: F401
            import docutils.utils.code_analyzer  # noqa: F401
        except Exception:
            pass
    finally:
        for name, module in saved.items():
            if module is None:
                if name in sys.modules and sys.modules[name] in (None, stub):
                    del sys.modules[name]
            else:
                sys.modules[name] = module
    import parse_rst

    return parse_rst


def load_markdown(root: Path, relpath: str) -> MarkdownDoc:
    text, problems = read_text(root, relpath)
    if text is None:
        return MarkdownDoc(path=relpath, text="", n_lines=0, problems=problems, readable=False)
    doc = _CACHE.get("md", relpath, text)
    if doc is None:
        from parse_markdown import parse_markdown

        doc = parse_markdown(relpath, text)
        _CACHE.put("md", relpath, text, doc)
    return doc


def load_rst(root: Path, relpath: str) -> RstDoc:
    text, problems = read_text(root, relpath)
    if text is None:
        return RstDoc(path=relpath, text="", n_lines=0, problems=problems, readable=False)
    doc = _CACHE.get("rst", relpath, text)
    if doc is None:
        doc = import_parse_rst().parse_rst(relpath, text)
        _CACHE.put("rst", relpath, text, doc)
    return doc


def load_argspec(root: Path, relpath: str, helpers: list[Path] | None = None) -> ArgSpec:
    text, problems = read_text(root, relpath)
    if text is None:
        return ArgSpec(path=relpath, problems=problems)
    helper_texts = []
    for h in helpers or []:
        try:
            helper_texts.append(h.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            pass
    key_text = "\0".join([text, *helper_texts])
    spec = _CACHE.get("py", relpath, key_text)
    if spec is None:
        spec = parse_argparse(relpath, text, helper_texts)
        _CACHE.put("py", relpath, key_text, spec)
    return spec


def _link_target(path: Path) -> str | None:
    """Target of a link: readlink, or the text of a one-line file (a Windows checkout); '' for a real dir."""
    if path.is_symlink():
        try:
            return os.readlink(path)
        except OSError:
            return None
    if path.is_dir():
        return ""
    if path.is_file():
        try:
            if path.stat().st_size > 1024:
                return None
            text = path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            return None
        return text if text and "\n" not in text else None
    return None


def _load_skill(root: Path, skill_md: Path, project: Project) -> Skill:
    sdir = skill_md.parent
    srel = rel(root, sdir)
    skill = Skill(dir=srel, audience=sdir.parent.name, skill_md=load_markdown(root, rel(root, skill_md)))
    for md in _walk_files(root, sdir, ".md", project):
        if md == skill_md:
            continue
        relpath = rel(root, md)
        skill.files[relpath] = load_markdown(root, relpath)
    evals = sdir / "evals" / "evals.json"
    if evals.exists() or evals.is_symlink():
        relpath = rel(root, evals)
        skill.evals_json = relpath
        text, problems = read_text(root, relpath)
        project.problems.extend(problems)
        if text is not None:
            try:
                skill.evals = json.loads(text)
            except json.JSONDecodeError as exc:
                project.problems.append(problem("IN040", relpath, exc.lineno, exc.colno,
                                                f"evals.json does not parse: {exc.msg}"))
            except RecursionError:
                project.problems.append(problem("IN040", relpath, 1, 1, "evals.json nests too deeply"))
    return skill


def _skill_files(root: Path, skills_dir: Path, project: Project) -> list[Path]:
    """``skills/*/*/SKILL.md``, reporting link loops on the way."""
    out: list[Path] = []
    if not skills_dir.is_dir():
        project.problems.append(problem("IN001", rel(root, skills_dir), 1, 1, "skills folder not found"))
        return out
    for audience in sorted(skills_dir.iterdir(), key=lambda p: p.name):
        msg = link_problem(audience)
        if msg:
            project.problems.append(problem("IN005", rel(root, audience), 1, 1, f"{msg}; skipped"))
            continue
        if not audience.is_dir():
            continue
        for sdir in sorted(audience.iterdir(), key=lambda p: p.name):
            msg = link_problem(sdir)
            if msg:
                project.problems.append(problem("IN005", rel(root, sdir), 1, 1, f"{msg}; skipped"))
                continue
            skill_md = sdir / "SKILL.md"
            msg = link_problem(skill_md)
            if msg:
                project.problems.append(problem("IN005", rel(root, skill_md), 1, 1, f"{msg}; skipped"))
                continue
            if sdir.is_dir() and skill_md.exists():
                out.append(skill_md)
    return out


def load_project(root: Path, overrides: dict[str, str | None] | None = None, use_cache: bool = False) -> Project:
    """Parse everything the rules need from the tree at ``root`` (``use_cache``: see cache.py)."""
    global _CACHE
    root = Path(root)
    if not root.is_dir():
        raise SetupError(f"{root}: not a directory")
    root = root.resolve()
    config = load_config(root, overrides)
    _CACHE = ParseCache(root, enabled=use_cache)
    try:
        return _load(root, config)
    finally:
        _CACHE.save()
        _CACHE = ParseCache(root, enabled=False)


def _load(root: Path, config: dict[str, Any]) -> Project:
    project = Project(root=root, config=config)
    for skill_md in _skill_files(root, root / config["skills"], project):
        project.skills.append(_load_skill(root, skill_md, project))
    docs = root / config["docs"]
    if docs.is_dir():
        for rst in _walk_files(root, docs, ".rst", project):
            relpath = rel(root, rst)
            project.rst[relpath] = load_rst(root, relpath)
    else:
        project.notes.append(f"no docs folder at {config['docs']}")
    for key in ("launcher", "trainer"):
        spec = load_argspec(root, config[key])
        for f in spec.problems:
            if f.code == "IN001":
                f.message += f" (set by [tool.skills-check] {key} or --{key})"
        if not spec.options:
            project.notes.append(f"the {key}'s options cannot be read from {config[key]}: flags written for it are "
                                 "not judged")
        setattr(project, key, spec)
    run_py = find_installed(root, "torch", "distributed/run.py")
    if run_py is not None:
        helpers = [run_py.parent / "argparse_util.py"]
        project.torchrun = load_argspec(root, str(run_py), helpers)
        project.torchrun.path = rel(root, run_py)
        _relocate(project.torchrun)
    else:
        project.notes.append("torch is not installed: torchrun options not checked")
    jax_py = find_installed(root, "skrl", "utils/distributed/jax/launcher.py")
    if jax_py is not None:
        project.jax_launcher = load_argspec(root, str(jax_py))
        project.jax_launcher.path = rel(root, jax_py)
        _relocate(project.jax_launcher)
    else:
        project.notes.append("skrl is not installed: skrl JAX launcher options not checked")
    agents = root / ".agents" / "skills"
    if agents.is_dir():
        for entry in sorted(agents.iterdir(), key=lambda p: p.name):
            msg = link_problem(entry)
            if msg and "loop" in msg:
                project.problems.append(problem("IN005", rel(root, entry), 1, 1, msg))
            target = _link_target(entry)
            if target is not None:
                project.aliases[entry.name] = target
    claude = root / ".claude" / "skills"
    if claude.exists() or claude.is_symlink():
        project.claude_skills = _link_target(claude)
    return project


def _relocate(spec: ArgSpec) -> None:
    """Give an installed tool's findings the spec's (relative) path."""
    for f in spec.problems:
        f.loc = type(f.loc)(spec.path, f.loc.line, f.loc.col)


def all_problems(project: Project) -> list:
    """Loader and parser findings of every document and spec."""
    out = list(project.problems)
    for skill in project.skills:
        out += skill.skill_md.problems
        for doc in skill.files.values():
            out += doc.problems
    for doc in project.rst.values():
        out += doc.problems
    for spec in (project.launcher, project.trainer):
        if spec is not None:
            out += spec.problems
    return out
