"""The argparse specs of the launcher, the trainer, the configured tools and the known tools, read statically."""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import Any

from .. import known_tools
from ..caches.parse import ParseCache
from ..inputs import (
    inside,
    problem,
    read_text,
)
from ..model import ArgSpec, Project, Tool
from ..parsers.argspec import parse_argparse
from .config import _config_path_ok
from .documents import _no_cache


def _module_path(root: Path, project: Project, module: str) -> str:
    """The file of a dotted module name in the tree (``a/b.py``, ``a/b/__init__.py``, under src/ or source/*/)."""
    rel_path = module.replace(".", "/")
    bases = ["", "src/"] + sorted(f"{p}/" for p in project.paths if p.startswith("source/") and p.count("/") == 1)
    for base in bases:
        for cand in (f"{base}{rel_path}.py", f"{base}{rel_path}/__init__.py"):
            if cand in project.files:
                return cand
    return f"{rel_path}.py"


def _load_tools(root: Path, config: dict[str, Any], project: Project, cache: ParseCache) -> None:
    """The configured tools, each with its argparse read statically (the launcher's and trainer's shared)."""
    table = config.get("tools") or {}
    line = config.get("_lines", {}).get("tools", 1)
    for words, entry in table.items():
        entry = {"script": entry} if isinstance(entry, str) else entry
        path = entry.get("script") or _module_path(root, project, entry["module"])
        path = posixpath.normpath(path)
        spec = next((s for s in (project.launcher, project.trainer) if s is not None and s.path == path), None)
        if spec is None:
            why = inside(root, path)
            if why:
                project.problems.append(
                    problem(
                        "IN006",
                        "pyproject.toml",
                        line,
                        1,
                        f"[tool.skills-check.tools] {words!r}: {path} {why}; not read",
                    )
                )
                spec = ArgSpec(path=path)
            else:
                spec = load_argspec(root, path, cache)
                for f in spec.problems:
                    if f.code == "IN001":
                        f.message += f" (the script of {words!r} in [tool.skills-check.tools])"
        project.tools[words] = Tool(
            tuple(words.split()),
            spec,
            entry.get("forwards"),
            tuple(tuple(a.split()) for a in entry.get("also", [])),
            tuple(entry.get("runs_other", [])),
        )


def load_argspec(root: Path, relpath: str, cache: ParseCache | None = None) -> ArgSpec:
    """A script's argparse options, read with ``ast`` (the script is never imported or run)."""
    text, problems = read_text(root, relpath)
    if text is None:
        return ArgSpec(path=relpath, problems=problems)
    return _argspec(relpath, text, [], cache)


def _argspec(relpath: str, text: str, helper_texts: list[str], cache: ParseCache | None) -> ArgSpec:
    cache = cache or _no_cache()
    key_text = "\0".join([text, *helper_texts])
    spec = cache.get("py", relpath, key_text)
    if spec is None:
        spec = parse_argparse(relpath, text, helper_texts)
        cache.put("py", relpath, key_text, spec)
    return spec


def _load_launchers(root: Path, config: dict[str, Any], project: Project, cache: ParseCache) -> None:
    """The launcher's and trainer's argparse, the configured tools' and the known tools' (torchrun, JAX)."""
    for key in ("launcher", "trainer"):
        if not _config_path_ok(root, config, key, project):
            setattr(project, key, ArgSpec(path=str(config[key])))
            project.drift_notes.append(f"the {key} is outside the checked root: flags written for it are not judged")
            continue
        default_absent = key not in config.get("_given", ()) and not (
            (root / config[key]).exists() or (root / config[key]).is_symlink()
        )
        if default_absent:  # a layout without this script (e.g. upstream Isaac Lab has no launcher)
            setattr(project, key, ArgSpec(path=str(config[key])))
            project.drift_notes.append(
                f"no {key} at {config[key]} (set [tool.skills-check] {key} to check one): flags "
                "written for it are not judged"
            )
            continue
        spec = load_argspec(root, config[key], cache)
        for f in spec.problems:
            if f.code == "IN001":
                f.message += f" (set by [tool.skills-check] {key} or --{key})"
        if spec.incomplete and not any(p.code == "IN030" for p in spec.problems):
            project.drift_notes.append(
                f"the {key}'s options cannot all be read from {config[key]} ({spec.incomplete}): "
                "flags written for it are not judged"
            )
        setattr(project, key, spec)
    _load_tools(root, config, project, cache)
    known = known_tools.load()  # kept with the checker: the same findings with or without a .venv
    project.torchrun, project.jax_launcher = known.get("torchrun"), known.get("jax")
    if not known:
        project.drift_notes.append(
            f"{known_tools.SPEC_FILE.name} is missing beside the checker: torchrun and skrl's "
            "JAX launcher options not checked"
        )
