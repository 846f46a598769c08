"""The checked tree -> ``Project``: discovery, documents, tools, aliases; what the running rules need only."""

from __future__ import annotations

import functools
import posixpath
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from .. import discover
from ..caches.parse import ParseCache
from ..inputs import fresh_resolution, inside, link_problem, overlaid, rel
from ..model import Project, Skill
from ..problems import BAD_LINK, MARKUP_PROBLEM, NO_OPTIONS, UNREADABLE, problem
from . import prefetch
from .config import SetupError, _config_path_ok, load_config
from .documents import _link_target, _load_skill, _walk_files, load_markdown, load_rst, resolve_includes
from .tools import _load_launchers, load_argspec


def load_project(
    root: Path,
    overrides: dict[str, str | None] | None = None,
    use_cache: bool = False,
    overlay: Mapping[str, str] | None = None,
    cache: ParseCache | None = None,
    drift: bool = True,
    jobs: int = 1,
    early: prefetch.Prefetched | None = None,
) -> Project:
    """Parse everything the rules need from the tree at ``root`` (``use_cache``: see cache.py).

    ``jobs`` > 1: a worker process loads skills and parses the RST pages and scripts meanwhile
    (``prefetch.py``), or ``early``, one ``begin_load`` started; the project is the same.

    ``drift=False`` (no drift rule will run): the launcher, the trainer, the configured tools and the
    scripts named in code are not read, since only the drift rules judge flags against their argparse.

    For a long-running caller (the language server): ``overlay`` (repository-relative path -> text, e.g.
    an editor's unsaved buffers) is read in place of those files on disk, under the same guards, the rest
    of the tree from disk; ``cache`` is a ParseCache kept across loads (the caller saves it), used instead
    of reading and writing the cache file on each load.
    """
    fresh_resolution()
    with overlaid(overlay or {}):
        return _load_project(root, overrides, use_cache, cache, drift, jobs, early)


def begin_load(
    root: Path, overrides: dict[str, str | None] | None, use_cache: bool, jobs: int
) -> prefetch.Prefetched | None:
    """A worker started before the check reads its settings and rules (``prefetch.begin``; pass it to
    ``load_project`` as ``early``, and close it when the check stops before loading): with the settings read
    here, it walks the tree itself, then loads what it shares (``_worker_plan``). None for a tree whose parse
    cache exists (a warm check), or where the process may not fork."""
    root = Path(root)
    if not str(root).strip() or not root.is_dir():
        return None
    root = root.resolve()
    if jobs < 2 or use_cache and ParseCache(root, enabled=False).file.exists():
        return None
    try:
        config = load_config(root, overrides)
    except SetupError:
        return None  # the check reports it
    return prefetch.begin(root, lambda send: _worker_plan(root, config, use_cache, send), jobs)


def _worker_plan(root: Path, config: dict[str, Any], keep: bool, send: prefetch.Send) -> prefetch.Plan:
    """In an early worker: its walk of the tree (sent at once: the check takes it instead of walking), then what
    it shares, found as the loader finds it (nothing when that would not pay for the worker:
    ``prefetch.worth_a_worker``); ``keep``: the check keeps a parse cache."""
    project = Project(root=root, config=config)
    found = _walk(root, config)
    send(
        WALKED, (found.paths, found.files, found.dir_links, found.skills, found.orphans, found.problems, found.mirrors)
    )
    items = prefetch.plan(project, _discover(root, config, project, found), config["docs"], drift=True)
    if not prefetch.worth_a_worker(items):
        return prefetch.Plan([])
    return prefetch.Plan(items, _skill_loader(project, keep))


WALKED = ("walk", "")  # an early worker's walk of the tree (``discover.Walk``'s fields, in order)


def _walk(root: Path, config: dict[str, Any], early: prefetch.Prefetched | None = None) -> discover.Walk:
    """The tree's walk: ``early``'s (its worker walked the tree with the same settings), else walked here."""
    got = early.take(*WALKED, tuple) if early is not None else None
    if got is not None and len(got) == 7:
        return discover.Walk(*got)
    return discover.walk(root, gitignore=discover.configured(config.get("skills")) is None)


def _skill_loader(project: Project, keep: bool) -> Callable[[str], tuple[Skill, list, list]]:
    """In a worker, for the walked ``project``: a skill folder -> (the skill, the problems its loading adds to
    the project, and with ``keep`` the parses it put in the cache), what ``_shared_skill`` takes."""
    root, ordered = project.root, sorted(project.files)

    def load(folder: str) -> tuple[Skill, list, list]:
        scratch = Project(root=root, config=project.config)
        cache = prefetch.Recorder(root, keep)
        skill = _load_skill(root, root / folder / discover.SKILL_FILE, scratch, cache, ordered)
        return skill, scratch.problems, cache.puts

    return load


def _shared_skill(cache: ParseCache, folder: str, project: Project) -> Skill | None:
    """The skill in ``folder`` as the worker loaded it (its problems added to ``project``'s and its parses to
    the cache, as ``_load_skill`` here would), or None: this process loads it."""
    if not isinstance(cache, prefetch.Prefetched):
        return None
    got = cache.take("skill", folder, tuple)
    if got is None or len(got) != 3 or not isinstance(got[0], Skill) or not all(type(p) is list for p in got[1:]):
        return None
    skill, problems, puts = got
    project.problems += problems
    for kind, path, text, value in puts:
        cache.put(kind, path, text, value)
    return skill


def _load_project(
    root: Path,
    overrides: dict[str, str | None] | None,
    use_cache: bool,
    kept: ParseCache | None,
    drift: bool = True,
    jobs: int = 1,
    early: prefetch.Prefetched | None = None,
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
        return _load(root, config, cache, drift, jobs, early)
    finally:
        if kept is None:
            cache.save()


def _load(
    root: Path,
    config: dict[str, Any],
    cache: ParseCache,
    drift: bool = True,
    jobs: int = 1,
    early: prefetch.Prefetched | None = None,
) -> Project:
    project = Project(root=root, config=config)
    folders = _discover(root, config, project, _walk(root, config, early))
    if early is not None:
        shared = early.attach(cache)
    else:
        shared = prefetch.start(
            project, folders, config["docs"], cache, jobs, drift, _skill_loader(project, cache.enabled)
        )
    try:
        return _load_found(root, config, shared, drift, project, folders)
    finally:
        if isinstance(shared, prefetch.Prefetched):
            shared.close()


def _load_found(
    root: Path, config: dict[str, Any], cache: ParseCache, drift: bool, project: Project, folders: list[str]
) -> Project:
    """Everything after discovery: the skills' documents, the tools, the aliases, the agent files, the RST pages
    and what they show, the scripts and links the documents name. (The RST pages come late: a worker may be
    parsing them meanwhile, ``prefetch.py``; nothing before them reads them.)"""
    ordered = sorted(project.files)
    for folder in folders:
        skill = _shared_skill(cache, folder, project)
        project.skills.append(skill or _load_skill(root, root / folder / discover.SKILL_FILE, project, cache, ordered))
    if drift:
        _load_launchers(root, config, project, cache)
    _aliases(root, project)
    for path in sorted(p for p in project.files if AGENT_FILE_RE.search(p)):
        project.agent_files[path] = load_markdown(root, path, cache)
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
    _scripts_and_links(root, project, cache, drift)
    return project


def _aliases(root: Path, project: Project) -> None:
    """The discovery links: ``.agents/skills/<name>`` entries and the ``.claude/skills`` link."""
    agents = root / ".agents" / "skills"
    if agents.is_dir():
        for entry in sorted(agents.iterdir(), key=lambda p: p.name):
            msg = link_problem(entry)
            if msg and "loop" in msg:
                project.problems.append(problem(BAD_LINK, rel(root, entry), 1, 1, msg))
            target = _link_target(entry)
            if target is not None:
                project.aliases[entry.name] = target
    claude = root / ".claude" / "skills"
    if claude.exists() or claude.is_symlink():
        project.claude_skills = _link_target(claude)


# a Claude Code subagent: .claude/agents/<name>.md at the root, or a plugin's (plugins/<p>/agents/<name>.md)
AGENT_FILE_RE = re.compile(r"^(?:\.claude/agents|plugins/[^/]+/agents)/[^/]+\.md$")


PY_TOKEN_RE = re.compile(r"(?<![\w./-])((?:\./)?[\w.-]+(?:/[\w.-]+)*\.py)\b")


def _discover(root: Path, config: dict[str, Any], project: Project, found: discover.Walk) -> list[str]:
    """Index the tree from its walk ``found`` (``project.paths``/``files``/``dir_links``) and return its skill
    folders (discover.py); a configured ``skills`` folder or glob that names nothing is a finding where it was
    set."""
    patterns = discover.configured(config.get("skills"))
    project.paths, project.files, project.dir_links = found.paths, found.files, found.dir_links
    project.problems += found.problems
    if patterns is None:
        project.orphan_dirs = found.orphans
        return found.skills
    line = config.get("_lines", {}).get("skills")
    for pattern in patterns:  # refused as what it is, never reported as "no skill found"
        base = pattern.strip().rstrip("/").split("*")[0].split("?")[0].split("[")[0] or "."
        why = inside(root, base) if pattern.strip() else None
        if why is not None:
            origin = f"pyproject.toml:{line}: [tool.skills-check] skills" if line else "--skills"
            raise SetupError(f"{origin} {pattern!r} {why}: the checker reads nothing outside the root it checks")
    skills, project.orphan_dirs, missing = discover.select(root, found, patterns)
    for pattern in missing:
        where = ("pyproject.toml", line) if line else (pattern, 1)
        project.problems.append(
            problem(
                UNREADABLE,
                where[0],
                where[1],
                1,
                f"skills folder {pattern!r} not found (set by [tool.skills-check] skills or --skills)",
            )
        )
    return skills


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
    read = {path: text for s in project.skills for path, text in s.script_texts.items()}  # read by _load_skill
    for doc in docs:
        bases = ("", skill_dirs[doc.path]) if doc.path in skill_dirs else ("",)
        for token in _py_tokens(doc) if drift else ():
            for base in bases:
                path = posixpath.normpath(posixpath.join(base, token)) if base else posixpath.normpath(token)
                if path in project.files and path not in project.scripts and path not in tool_paths:
                    project.scripts[path] = load_argspec(root, path, cache, read.get(path))
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


def _py_tokens(doc: Any) -> list[str]:
    """The Python file names ``doc``'s code (spans, blocks, table cells) shows, each once, in order."""
    texts = [c.text for c in doc.code] + [
        c.text for t in doc.tables for r in [t.header, *t.rows] for cell in r for c in cell.code
    ]
    return list(dict.fromkeys(token for text in texts for token in _named_py(text)))


@functools.lru_cache(maxsize=4096)
def _named_py(text: str) -> tuple[str, ...]:
    """The Python file names one code text shows (a collection writes the same command in many files: each
    text is searched once)."""
    if ".py" not in text:
        return ()  # no Python file name can be in it: the pattern not searched (most code texts)
    return tuple(t.removeprefix("./") for t in PY_TOKEN_RE.findall(text))


def all_problems(project: Project) -> list:
    """Loader and parser findings of every document and spec."""
    out = list(project.problems)
    for skill in project.skills:
        out += skill.skill_md.problems
        for doc in skill.files.values():
            out += doc.problems
    for rst in [*project.rst.values(), *project.included.values()]:
        out += rst.problems
    scripts = {id(spec) for spec in project.scripts.values()}  # by identity: comparing specs field by field was
    for spec in (project.launcher, project.trainer, *project.scripts.values()):  # quadratic in the scripts
        if spec is not None:
            out += [p for p in spec.problems if p.code != NO_OPTIONS.code] if id(spec) in scripts else spec.problems
    for tool in project.tools.values():
        if tool.spec not in (project.launcher, project.trainer):
            out += tool.spec.problems
    for doc in project.linked.values():
        out += [p for p in doc.problems if p.code != MARKUP_PROBLEM.code]
    return out
