"""The argparse specs of the launcher, the trainer, the configured tools and the known tools, read statically."""

from __future__ import annotations

import copy
import posixpath
from pathlib import Path
from typing import Any

from .. import known_tools
from ..caches.parse import ParseCache
from ..inputs import inside, read_text
from ..model import ArgSpec, Project, Tool
from ..parsers.argspec import parse_argparse
from ..problems import LEAVES_ROOT, PYTHON_SYNTAX, UNREADABLE, problem
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


def _find_module(root: Path, project: Project, module: str) -> str | None:
    """``_module_path`` where the file is in the tree, else None."""
    path = _module_path(root, project, module)
    return path if path in project.files else None


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
                        LEAVES_ROOT,
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
                    if f.code == UNREADABLE.code:
                        f.message += f" (the script of {words!r} in [tool.skills-check.tools])"
        project.tools[words] = Tool(
            tuple(words.split()),
            spec,
            entry.get("forwards"),
            tuple(tuple(a.split()) for a in entry.get("also", [])),
            tuple(entry.get("runs_other", [])),
        )


def load_argspec(root: Path, relpath: str, cache: ParseCache | None = None, text: str | None = None) -> ArgSpec:
    """A script's argparse options, read with ``ast`` (the script is never imported or run); ``text``: the
    script's text as ``read_text`` gave it already (it is not read again)."""
    if text is None:
        text, problems = read_text(root, relpath)
        if text is None:
            return ArgSpec(path=relpath, problems=problems)
    return _argspec(relpath, text, [], cache)


def _argspec(relpath: str, text: str, helper_texts: list[str], cache: ParseCache | None) -> ArgSpec:
    cache = cache or _no_cache()
    key_text = "\0".join([text, *helper_texts])
    spec = cache.get("py", relpath, key_text, ArgSpec)
    if spec is None:
        spec = parse_argparse(relpath, text, helper_texts)
        cache.put("py", relpath, key_text, spec)
    return spec


def _load_launchers(root: Path, config: dict[str, Any], project: Project, cache: ParseCache) -> None:
    """The launcher's and trainer's argparse, the configured tools' and the known tools' (torchrun, JAX);
    without configured tools, the tools of Isaac Lab's layout where the tree has it."""
    if not config.get("tools"):
        _isaaclab_tools(root, project, cache)
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
            if project.tool_sources:  # its commands are found by its layout instead
                continue
            project.drift_notes.append(
                f"no {key} at {config[key]} (set [tool.skills-check] {key} to check one): flags "
                "written for it are not judged"
            )
            continue
        spec = load_argspec(root, config[key], cache)
        for f in spec.problems:
            if f.code == UNREADABLE.code:
                f.message += f" (set by [tool.skills-check] {key} or --{key})"
        if spec.incomplete and not any(p.code == PYTHON_SYNTAX.code for p in spec.problems):
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


# Isaac Lab's layout (its repository: source/<pkg>/<pkg>/...; an installed wheel: <pkg>/...), found without
# configuration: `isaaclab train_multigpu` is a parser that ``isaaclab/cli/multigpu.py`` builds over the
# ``MultiGpuLauncherCfg`` that ``isaaclab_rl/entrypoints/multigpu.py`` makes; the flags it does not know go
# to the per-rank trainer, `isaaclab train`, whose options are those its entry points and the simulation
# launcher add (each backend adds its own: the union is what a quoted flag may be).
ISAACLAB_LAUNCHER = ("isaaclab.cli.multigpu", "isaaclab_rl.entrypoints.multigpu", "MultiGpuLauncherCfg")
ISAACLAB_TRAINER = ("isaaclab_rl.entrypoints", "isaaclab_physx.app.kit_launcher", "isaaclab.app.app_launcher")


def _isaaclab_tools(root: Path, project: Project, cache: ParseCache) -> None:
    """`isaaclab train_multigpu` and `isaaclab train` where the tree is laid out like Isaac Lab's."""
    builder_mod, entry_mod, cls = ISAACLAB_LAUNCHER
    builder = _find_module(root, project, builder_mod)
    entry = _find_module(root, project, entry_mod)
    if not builder or not entry:
        return
    from ..parsers import configured

    builder_text, entry_text = read_text(root, builder)[0], read_text(root, entry)[0]
    if not isinstance(builder_text, str) or not isinstance(entry_text, str):
        return
    spec = load_argspec(root, builder, cache)

    def resolve(name: str) -> Any:
        value = configured.module_constant(entry_text, name)
        source = configured.imported_from(entry_text, name)
        if value is configured.UNKNOWN and source:
            path = _find_module(root, project, source)
            text = read_text(root, path)[0] if path else None
            value = configured.module_constant(text, name) if isinstance(text, str) else configured.UNKNOWN
        return value

    defaults = configured.config_classes(builder_text).get(cls)
    made = configured.instance_values(entry_text, cls, defaults or {}, resolve) if defaults is not None else []
    if made:
        spec = configured.apply_config(copy.deepcopy(spec), builder_text, cls, made[0][1])
    project.tools["isaaclab train_multigpu"] = Tool(
        ("isaaclab", "train_multigpu"), spec, "isaaclab train", (("python", "-m", "isaaclab", "train_multigpu"),)
    )
    project.tool_sources["isaaclab train_multigpu"] = f"Isaac Lab's layout: {builder} over {cls} in {entry}"
    trainer = _union(root, project, cache, ISAACLAB_TRAINER)
    if trainer is not None:
        project.tools["isaaclab train"] = Tool(
            ("isaaclab", "train"), trainer, None, (("python", "-m", "isaaclab", "train"),)
        )
        project.tool_sources["isaaclab train"] = (
            f"Isaac Lab's layout: the options its entry points add ({trainer.path})"
        )


def _union(root: Path, project: Project, cache: ParseCache, modules: tuple[str, ...]) -> ArgSpec | None:
    """One spec holding the options of every file of the modules (a package: every .py under it)."""
    files: list[str] = []
    for module in modules:
        path = _find_module(root, project, module)
        if not path:
            continue
        if path.endswith("/__init__.py"):
            folder = path[: -len("__init__.py")]
            files += sorted(p for p in project.files if p.startswith(folder) and p.endswith(".py"))
        else:
            files.append(path)
    if not files:
        return None
    union = ArgSpec(path=posixpath.dirname(_find_module(root, project, modules[0]) or files[0]))
    seen: set[str] = set()
    for path in files:
        spec = load_argspec(root, path, cache)
        for opt in spec.options:
            if not set(opt.flags) <= seen:
                union.options.append(opt)
                seen.update(opt.flags)
    return union if union.options else None
