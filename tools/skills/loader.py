"""The checked tree -> ``Project``: skills, RST docs, argparse specs, discovery aliases, config.

Paths come from ``pyproject.toml`` ``[tool.skills-check]`` (keys ``skills``, ``docs``, ``launcher``,
``trainer``), overridden by command-line flags. The tools whose command lines are checked come from its
``tools`` table: command words -> the script or module whose argparse defines them, e.g.

    [tool.skills-check.tools]
    "mgpu-lab train" = "scripts/reinforcement_learning/train.py"
    "mgpu-lab train_multigpu" = { script = "scripts/reinforcement_learning/train_multigpu.py",
                                  forwards = "mgpu-lab train", also = ["python -m mgpu_lab.cli train_multigpu"] }

``module = "pkg.cli.train"`` names a module instead of a script (found at ``pkg/cli/train.py``, under
``src/`` or ``source/*/`` too); ``forwards`` names the tool that gets the flags this one does not know. Files that cannot be read become findings; only a
missing root or an unreadable ``pyproject.toml`` stops the check (``SetupError``, exit 2).
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import discover
import known_tools
from cache import ParseCache
from inputs import (
    MAX_BYTES,
    inside,
    link_problem,
    overlaid,  # the language server's unsaved buffers (load_project(overlay=...))
    problem,
    read_bytes_bounded,
    read_text,
    rel,
)
from model import ArgSpec, Code, MarkdownDoc, Project, RstDoc, Skill, Tool
from parse_argparse import parse_argparse

DEFAULTS: dict[str, str] = {
    "docs": "docs",
    "launcher": "scripts/reinforcement_learning/train_multigpu.py",
    "trainer": "scripts/reinforcement_learning/train.py",
}
# This repository's conventions a tree can adopt (``adopt = [...]``); the rules that encode them
# (rules/common.py ``adopted``) report only where adopted.
CONVENTIONS = ("options-table", "nccl-list", "skill-metadata")
_SKIP_DIRS = discover.SKIP_DIRS


class SetupError(Exception):
    """The check cannot start (missing root, unreadable pyproject.toml, bad config)."""


def _key_line(text: str, key: str) -> int:
    """The line of ``key = ...`` in pyproject.toml's text (1 when not found)."""
    for i, line in enumerate(text.split("\n"), start=1):
        if line.strip().startswith((f"{key} ", f"{key}=", f'"{key}"', f"{key}.", f"[tool.skills-check.{key}")):
            return i
    return 1


def load_config(root: Path, overrides: dict[str, str | None] | None = None) -> dict[str, Any]:
    """DEFAULTS, updated from pyproject's [tool.skills-check], then from non-None ``overrides``.

    ``config["_lines"]`` maps each key set in pyproject.toml to its line (for findings about it).
    """
    config: dict[str, Any] = dict(DEFAULTS)
    lines: dict[str, int] = {}
    if (root / "pyproject.toml").exists() or (root / "pyproject.toml").is_symlink():
        text, problems = read_text(root, "pyproject.toml")
        if text is None:
            raise SetupError(f"pyproject.toml:{problems[0].loc.line}: {problems[0].message}")
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise SetupError(f"pyproject.toml: does not parse: {exc}") from exc
        tool = data.get("tool", {})
        if not isinstance(tool, dict):
            raise SetupError(
                f"pyproject.toml:{_key_line(text, 'tool')}: `tool` must be a table, not {type(tool).__name__}"
            )
        table = tool.get("skills-check", {})
        if not isinstance(table, dict):
            raise SetupError(f"pyproject.toml:{_key_line(text, 'skills-check')}: [tool.skills-check] must be a table")
        for key, value in table.items():
            if key == "tools":
                _check_tools(value, text)
            if key == "adopt" and (not isinstance(value, list) or not all(v in CONVENTIONS for v in value)):
                raise SetupError(
                    f"pyproject.toml:{_key_line(text, key)}: [tool.skills-check] adopt must be a list "
                    f"of {', '.join(CONVENTIONS)}"
                )
            if key == "skills" and not (
                isinstance(value, str) or (isinstance(value, list) and value and all(isinstance(v, str) for v in value))
            ):
                raise SetupError(
                    f"pyproject.toml:{_key_line(text, key)}: [tool.skills-check] skills must be a folder "
                    "or glob, or a list of them"
                )
            if key in DEFAULTS and not isinstance(value, str):
                raise SetupError(
                    f"pyproject.toml:{_key_line(text, key)}: [tool.skills-check] {key} must be a string path"
                )
            config[key] = value
            lines[key] = _key_line(text, key)
    given = set(lines)
    for key, value in (overrides or {}).items():
        if value is not None:
            config[key] = value
            lines.pop(key, None)
            given.add(key)
    config["_lines"] = lines
    config["_given"] = given  # keys set in pyproject.toml or by a flag (the others are defaults)
    return config


def _check_tools(value: Any, text: str) -> None:
    """``[tool.skills-check.tools]``: command words -> a path, or a table (script/module, forwards, also)."""
    line = _key_line(text, "tools") if "tools" in text else 1

    def bad(why: str) -> SetupError:
        return SetupError(f"pyproject.toml:{line}: [tool.skills-check.tools] {why}")

    if not isinstance(value, dict):
        raise bad("must be a table: command words = script path, or a table with script or module")
    for words, entry in value.items():
        if not words.split():
            raise bad("has an empty command")
        if isinstance(entry, str):
            continue
        if not isinstance(entry, dict):
            raise bad(f"{words!r} must be a script path or a table")
        unknown = set(entry) - {"script", "module", "forwards", "also", "runs_other"}
        if unknown:
            raise bad(
                f"{words!r} has unknown key(s) {', '.join(sorted(unknown))} (script, module, forwards, also, "
                "runs_other)"
            )
        runs_other = entry.get("runs_other", [])
        if not isinstance(runs_other, list) or not all(isinstance(a, str) and a.startswith("-") for a in runs_other):
            raise bad(f"{words!r}: runs_other must be a list of the tool's own options (such as --train_script)")
        if sum(isinstance(entry.get(k), str) for k in ("script", "module")) != 1 or any(
            k in entry and not isinstance(entry[k], str) for k in ("script", "module", "forwards")
        ):
            raise bad(f"{words!r} needs one of script (a path) or module (a dotted name), as a string")
        if entry.get("forwards") is not None and entry["forwards"] not in value:
            raise bad(f"{words!r} forwards to {entry['forwards']!r}, which is not a tool of this table")
        also = entry.get("also", [])
        if not isinstance(also, list) or not all(isinstance(a, str) and a.split() for a in also):
            raise bad(f"{words!r}: also must be a list of command lines")


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


def _config_path_ok(root: Path, config: dict[str, Any], key: str, project: Project) -> bool:
    """Whether a configured path stays inside the root; else an IN006 finding where it was set."""
    why = inside(root, str(config[key]))
    if why is None:
        return True
    line = config.get("_lines", {}).get(key)
    where = ("pyproject.toml", line) if line else (str(config[key]) or ".", 1)
    origin = "[tool.skills-check]" if line else "--"
    project.problems.append(problem("IN006", where[0], where[1], 1, f"{origin}{key} = {config[key]!r} {why}; not read"))
    return False


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
            elif full.is_symlink() and inside(root, rel(root, full)):
                project.problems.append(
                    problem(
                        "IN006", rel(root, full), 1, 1, "folder is a symlink leaving the checked root; not followed"
                    )
                )
        for name in sorted(filenames):
            full = Path(dirpath) / name
            if name.endswith(suffix):
                out.append(full)
            elif full.is_symlink() and link_problem(full):
                project.problems.append(problem("IN005", rel(root, full), 1, 1, f"{link_problem(full)}; skipped"))
    return sorted(out)


def import_parse_rst():
    """Import the RST parser module without what it never uses.

    docutils imports ``urllib.request`` and ``urllib.error`` at module level (for ``include``/``csv-table``
    URLs, disabled here) and ``pygments`` (highlighting, off here): about a quarter of a second. While
    docutils loads, ``pygments`` is hidden, ``urllib.request`` is a stand-in whose ``urlopen`` imports the
    real module on first call and ``urllib.error`` one whose errors are ``OSError`` (the real ones derive
    from it, so docutils' ``except URLError`` still catches them); all are restored afterwards, so later
    imports see the real modules.
    """
    import sys
    import types

    if "parse_rst" in sys.modules:
        return sys.modules["parse_rst"]
    saved = {name: sys.modules.get(name) for name in ("pygments", "urllib.request", "urllib.error")}
    stub = types.ModuleType("urllib.request")
    errors = types.ModuleType("urllib.error")
    errors.URLError = errors.HTTPError = errors.ContentTooShortError = OSError  # type: ignore[attr-defined]

    def urlopen(*args, **kwargs):
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
        if saved["urllib.error"] is None:
            sys.modules["urllib.error"] = errors
        try:
            import docutils.parsers.rst.directives.misc
            import docutils.parsers.rst.directives.tables
            import docutils.utils.code_analyzer  # noqa: F401
        except Exception:
            pass
    finally:
        for name, module in saved.items():
            if module is None:
                if name in sys.modules and sys.modules[name] in (None, stub, errors):
                    del sys.modules[name]
            else:
                sys.modules[name] = module
    import parse_rst

    return parse_rst


def _no_cache() -> ParseCache:
    return ParseCache(Path("."), enabled=False)


def load_markdown(root: Path, relpath: str, cache: ParseCache | None = None) -> MarkdownDoc:
    text, problems = read_text(root, relpath)
    if text is None:
        return MarkdownDoc(path=relpath, text="", n_lines=0, problems=problems, readable=False)
    cache = cache or _no_cache()
    doc = cache.get("md", relpath, text)
    if doc is None:
        from parse_markdown import parse_markdown

        doc = parse_markdown(relpath, text)
        cache.put("md", relpath, text, doc)
    doc.problems = problems + doc.problems
    return doc


def load_rst(root: Path, relpath: str, cache: ParseCache | None = None) -> RstDoc:
    text, problems = read_text(root, relpath)
    if text is None:
        return RstDoc(path=relpath, text="", n_lines=0, problems=problems, readable=False)
    cache = cache or _no_cache()
    doc = cache.get("rst", relpath, text)
    if doc is None:
        doc = import_parse_rst().parse_rst(relpath, text)
        cache.put("rst", relpath, text, doc)
    doc.problems = problems + doc.problems
    return doc


MAX_INCLUDES = 100  # literalinclude directives read per page (each may read a file up to the size cap)
MAX_SHOWN = MAX_BYTES  # characters of included code per page: the rules' work stays that of a page at its cap


def _source_dir(root: Path, page: str) -> str:
    """The Sphinx source folder of ``page``: its nearest folder holding conf.py (the root when none)."""
    folder = posixpath.dirname(page)
    while folder:
        if (root / folder / "conf.py").is_file():
            return folder
        folder = posixpath.dirname(folder)
    return ""


def resolve_includes(
    root: Path, page: RstDoc, included: dict[str, RstDoc], skip: frozenset[str] | set[str] = frozenset()
) -> None:
    """Read the files ``page``'s literalinclude directives show (through ``read_text``'s guards: inside
    the root, regular files, size caps) into ``included``: per file an RstDoc with the file's text and
    one code block per shown run of lines, located in that file. A file that cannot be shown becomes a
    finding at the directive, and is never opened when it leaves the root or is not a regular file.
    Files in ``skip`` (pages and skill files checked as documents themselves) are not added again.
    """
    from includes import IncludeError, runs, shown_lines

    if len(page.includes) > MAX_INCLUDES:
        extra = page.includes[MAX_INCLUDES]
        page.problems.append(
            problem(
                "IN022",
                page.path,
                extra.line,
                extra.col,
                f"more than {MAX_INCLUDES} literalinclude directives in one page; the rest are not read",
            )
        )
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    shown_chars = 0
    for inc in page.includes[:MAX_INCLUDES]:
        if "pyobject" in inc.options:
            continue  # a Python object's lines: not selected here, and no commands to check
        target = inc.target.replace("\\", "/")
        base = _source_dir(root, page.path) if target.startswith("/") else posixpath.dirname(page.path)
        path = posixpath.normpath(posixpath.join(base, target.lstrip("/"))) if target else ""
        key = (path, tuple(sorted(inc.options.items())))
        if path in skip or key in seen:
            continue  # a document checked itself, or the same lines shown again
        seen.add(key)
        doc = included.get(path)
        if doc is None:
            text, problems = read_text(root, path)
            if text is None:
                page.problems.extend(
                    problem(p.code, page.path, inc.line, inc.col, f"literalinclude {inc.target}: {p.message}")
                    for p in problems
                )
                continue
            doc = RstDoc(
                path=path,
                text=text,
                n_lines=len(text.split("\n")) - (1 if text.endswith("\n") else 0),
                problems=problems,
            )
        try:
            shown = shown_lines(doc.text, inc.options)
        except IncludeError as exc:
            page.problems.append(
                problem("IN022", page.path, inc.line, inc.col, f"literalinclude {inc.target}: {exc}; nothing checked")
            )
            continue
        shown_chars += sum(len(t) + 1 for _, t in shown)
        if shown_chars > MAX_SHOWN:
            page.problems.append(
                problem(
                    "IN022",
                    page.path,
                    inc.line,
                    inc.col,
                    f"literalinclude {inc.target}: the "
                    f"page's included code passes {MAX_SHOWN // 1024} KB; this and the rest "
                    "are not checked",
                )
            )
            break
        included[path] = doc
        for first, text in runs(shown):
            code = Code(text=text, line=first, col=1, kind="block", lang=inc.options.get("language") or None)
            if code not in doc.code:
                doc.code.append(code)


def load_rst_documents(
    root: Path, relpath: str, cache: ParseCache | None = None, skip: set[str] | frozenset[str] = frozenset()
) -> list[RstDoc]:
    """The RST page at ``relpath`` and, after it, one document per file it shows with literalinclude
    (files in ``skip``, e.g. the other pages a caller reads itself, are left out, as in ``load_project``)."""
    page = load_rst(root, relpath, cache)
    included: dict[str, RstDoc] = {}
    if page.readable:
        resolve_includes(Path(root).resolve(), page, included, {relpath, *skip})
    return [page, *included.values()]


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


def _load_skill(root: Path, skill_md: Path, project: Project, cache: ParseCache) -> Skill:
    sdir = skill_md.parent
    srel = "" if sdir == root else rel(root, sdir)
    skill = Skill(
        dir=srel, audience=sdir.parent.name if srel else "", skill_md=load_markdown(root, rel(root, skill_md), cache)
    )
    for md in _walk_files(root, sdir, ".md", project):
        if md == skill_md:
            continue
        relpath = rel(root, md)
        skill.files[relpath] = load_markdown(root, relpath, cache)
    evals = sdir / "evals" / "evals.json"
    if evals.exists() or evals.is_symlink():
        relpath = rel(root, evals)
        skill.evals_json = relpath
        text, problems = read_text(root, relpath)
        project.problems.extend(problems)
        if text is not None:
            skill.evals_text = text
            skill.evals, problems = load_evals(relpath, text)
            project.problems.extend(problems)
    return skill


MAX_EVAL_ENTRIES = 1000  # evals.json entries checked; past it, one finding
MAX_INT_DIGITS = 100  # an integer literal longer than this in evals.json is a finding, not parsed


class _BigInt(Exception):
    pass


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _BigInt(text)
    return int(text)


def load_evals(relpath: str, text: str) -> tuple[Any, list]:
    """evals.json -> (data, problems): bounded (integer length, entry count, nesting)."""
    try:
        data = json.loads(text, parse_int=_parse_int)
    except json.JSONDecodeError as exc:
        return None, [problem("IN040", relpath, exc.lineno, exc.colno, f"evals.json does not parse: {exc.msg}")]
    except _BigInt as exc:
        offset = text.find(str(exc.args[0]))
        line = text.count("\n", 0, max(offset, 0)) + 1
        return None, [
            problem(
                "IN040",
                relpath,
                line,
                1,
                f"evals.json holds an integer of {len(exc.args[0])} digits (limit {MAX_INT_DIGITS}); not read",
            )
        ]
    except (RecursionError, ValueError, MemoryError) as exc:
        return None, [problem("IN040", relpath, 1, 1, f"evals.json cannot be read: {type(exc).__name__}")]
    problems = []
    entries = data
    if isinstance(data, dict):
        entries = next((data[k] for k in ("evals", "evaluations", "cases") if isinstance(data.get(k), list)), None)
    if isinstance(entries, list) and len(entries) > MAX_EVAL_ENTRIES:
        problems.append(
            problem(
                "IN041",
                relpath,
                1,
                1,
                f"evals.json has {len(entries)} entries; only the first {MAX_EVAL_ENTRIES} are checked",
            )
        )
        del entries[MAX_EVAL_ENTRIES:]
    return data, problems


def load_project(
    root: Path,
    overrides: dict[str, str | None] | None = None,
    use_cache: bool = False,
    overlay: Mapping[str, str] | None = None,
    cache: ParseCache | None = None,
    drift: bool = True,
) -> Project:
    """Parse everything the rules need from the tree at ``root`` (``use_cache``: see cache.py).

    ``drift=False`` (no drift rule will run): the launcher, the trainer, the configured tools and the
    scripts named in code are not read, since only the drift rules judge flags against their argparse.

    For a long-running caller (the language server): ``overlay`` (repository-relative path -> text, e.g.
    an editor's unsaved buffers) is read in place of those files on disk, under the same guards, the rest
    of the tree from disk; ``cache`` is a ParseCache kept across loads (the caller saves it), used instead
    of reading and writing the cache file on each load.
    """
    with overlaid(overlay or {}):
        return _load_project(root, overrides, use_cache, cache, drift)


def _load_project(
    root: Path, overrides: dict[str, str | None] | None, use_cache: bool, kept: ParseCache | None, drift: bool = True
) -> Project:
    if not str(root).strip():
        raise SetupError("--root is empty: give the folder to check")
    root = Path(root)
    if not root.is_dir():
        raise SetupError(f"{root}: not a directory")
    root = root.resolve()
    config = load_config(root, overrides)
    cache = kept or ParseCache(root, enabled=use_cache)
    try:
        return _load(root, config, cache, drift)
    finally:
        if kept is None:
            cache.save()


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


def _load(root: Path, config: dict[str, Any], cache: ParseCache, drift: bool = True) -> Project:
    project = Project(root=root, config=config)
    for folder in _discover(root, config, project):
        project.skills.append(_load_skill(root, root / folder / discover.SKILL_FILE, project, cache))
    docs = root / config["docs"]
    if not _config_path_ok(root, config, "docs", project):
        pass
    elif docs.is_dir():
        for rst in _walk_files(root, docs, ".rst", project):
            relpath = rel(root, rst)
            project.rst[relpath] = load_rst(root, relpath, cache)
    else:
        if "docs" in config.get("_given", ()):  # a default folder that is absent is no news
            project.notes.append(f"no docs folder at {config['docs']}")
    shown_elsewhere = set(project.rst) | {d.path for s in project.skills for d in (s.skill_md, *s.files.values())}
    for page in list(project.rst.values()):
        if page.readable:
            resolve_includes(root, page, project.included, shown_elsewhere)
    if drift:
        _load_launchers(root, config, project, cache)
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
    by_folder: dict[str, list[str]] = {}
    for path in project.files:
        by_folder.setdefault(posixpath.dirname(path), []).append(path)
    for skill in project.skills:
        _entry_scripts(root, skill, project, by_folder)
    _scripts_and_links(root, project, cache, drift)
    return project


PY_TOKEN_RE = re.compile(r"(?<![\w./-])((?:\./)?[\w.-]+(?:/[\w.-]+)*\.py)\b")


def _discover(root: Path, config: dict[str, Any], project: Project) -> list[str]:
    """Index the tree (``project.paths``/``files``/``dir_links``) and return its skill folders (discover.py);
    a configured ``skills`` folder or glob that names nothing is a finding where it was set."""
    patterns = discover.configured(config.get("skills"))
    found = discover.walk(root, gitignore=patterns is None)
    project.paths, project.files, project.dir_links = found.paths, found.files, found.dir_links
    project.problems += found.problems
    if patterns is None:
        project.orphan_dirs = found.orphans
        return found.skills
    skills, project.orphan_dirs, missing = discover.select(root, found, patterns)
    line = config.get("_lines", {}).get("skills")
    for pattern in missing:
        where = ("pyproject.toml", line) if line else (pattern, 1)
        project.problems.append(
            problem(
                "IN001",
                where[0],
                where[1],
                1,
                f"skills folder {pattern!r} not found (set by [tool.skills-check] skills or --skills)",
            )
        )
    return skills


def _entry_scripts(root: Path, skill: Skill, project: Project, by_folder: dict[str, list[str]]) -> None:
    """The skill's scripts/ files that are entry points (a shebang or a ``__main__`` guard)."""
    folder = skill.join("scripts")
    prefix = f"{folder}/"
    for path in sorted(by_folder.get(folder, [])):
        name = path[len(prefix) :]
        if name.startswith((".", "_")):
            continue
        data = read_bytes_bounded(os.path.join(os.path.realpath(root), path), MAX_BYTES)
        if isinstance(data, bytes) and (data.startswith(b"#!") or b"__main__" in data):
            skill.entry_scripts.append(path)


def _documents(project: Project) -> list[Any]:
    docs: list[Any] = [d for s in project.skills for d in (s.skill_md, *s.files.values())]
    return [d for d in [*docs, *project.rst.values(), *project.included.values()] if d.readable]


def _scripts_and_links(root: Path, project: Project, cache: ParseCache, drift: bool = True) -> None:
    """Parse what the rules will ask about: every .py a skill or doc names in code (its argparse, read
    statically) and every other .md/.rst file they link to. Nothing outside the root is read."""
    docs = _documents(project)
    doc_paths = {d.path for d in docs}
    tool_paths = {project.config.get("launcher"), project.config.get("trainer")} | {
        t.spec.path for t in project.tools.values()
    }
    skill_dirs = {d.path: s.dir for s in project.skills for d in (s.skill_md, *s.files.values())}
    for doc in docs:
        texts = [c.text for c in doc.code] + [
            c.text for t in doc.tables for r in [t.header, *t.rows] for cell in r for c in cell.code
        ]
        bases = ("", skill_dirs[doc.path]) if doc.path in skill_dirs else ("",)
        for text in texts if drift else ():
            for token in PY_TOKEN_RE.findall(text):
                token = token.removeprefix("./")
                for base in bases:
                    path = posixpath.normpath(posixpath.join(base, token)) if base else posixpath.normpath(token)
                    if path in project.files and path not in project.scripts and path not in tool_paths:
                        project.scripts[path] = load_argspec(root, path, cache)
        for link in doc.links:
            target = link.target.split("#", 1)[0]
            if not target or "://" in target or target.startswith(("mailto:", "//")):
                continue
            if link.kind == "doc":
                continue
            path = posixpath.normpath(
                target.lstrip("/")
                if target.startswith("/")
                else posixpath.join(posixpath.dirname(doc.path), unquote(target))
            )
            known = path in project.rst or path in doc_paths
            if known or path in project.linked or path not in project.files:
                continue
            if path.endswith(".md"):
                project.linked[path] = load_markdown(root, path, cache)
            elif path.endswith(".rst"):
                project.linked[path] = load_rst(root, path, cache)


def all_problems(project: Project) -> list:
    """Loader and parser findings of every document and spec."""
    out = list(project.problems)
    for skill in project.skills:
        out += skill.skill_md.problems
        for doc in skill.files.values():
            out += doc.problems
    for rst in [*project.rst.values(), *project.included.values()]:
        out += rst.problems
    for spec in (project.launcher, project.trainer, *project.scripts.values()):
        if spec is not None:
            out += (
                [p for p in spec.problems if p.code != "IN031"] if spec in project.scripts.values() else spec.problems
            )
    for tool in project.tools.values():
        if tool.spec not in (project.launcher, project.trainer):
            out += tool.spec.problems
    for doc in project.linked.values():
        out += [p for p in doc.problems if p.code not in ("IN020",)]
    return out
