"""Finding the skills of a tree: every folder holding a ``SKILL.md``, in whatever layout it uses.

One walk of the tree indexes its paths (what rules ask "does this path exist?") and finds the skills:
``skills/<name>/``, ``skills/<group>/<name>/``, ``plugins/<p>/skills/<name>/``, ``.claude/skills/``,
``.agents/skills/``, hidden group folders (``skills/.curated/<name>``), or the root itself. The walk never
follows a folder link (a skill reached through an alias link is found once, at its real folder) and never
leaves the root. It skips version-control folders, virtual environments (any folder holding
``pyvenv.cfg``), ``node_modules``, caches, build output, and the folders the tree's ``.gitignore`` files
ignore (matched by ``pathspec``'s implementation of git's rules; files are matched only through their
folders, which keeps the walk cheap). Everything under a skill belongs to that skill:
no skill is looked for inside another.

``[tool.skills-check] skills`` (a folder, a glob, or a list of them) limits the skills to those at or
under the folders it names (the .gitignore files are then not read: the folders are named); without it,
every skill of the tree is checked.
"""

from __future__ import annotations

import glob
import os
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .inputs import inside, link_problem, read_text
from .model import Finding
from .problems import BAD_LINK, LEAVES_ROOT, TOO_LARGE, problem

# Folders never walked: version control, environments, caches, dependency and documentation build trees.
SKIP_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "__pycache__",
        "node_modules",
        ".venv",
        "venv",
        ".tox",
        ".nox",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".hypothesis",
        "site-packages",
        "_build",
        ".eggs",
        ".cache",
        ".skills-check",
    }
)
# Build output: skipped unless the folder itself is a skill (a skill may be called "build").
BUILD_DIRS = frozenset({"build", "dist", "target"})
MAX_INDEX = 200_000  # paths indexed; a tree past this is reported once and indexed no further
SKILL_FILE = "SKILL.md"


@dataclass
class Walk:
    """What one walk of the tree found (repository-relative POSIX paths; ``""`` is the root)."""

    paths: set[str] = field(default_factory=set)
    files: set[str] = field(default_factory=set)
    dir_links: dict[str, str] = field(default_factory=dict)  # in-root folder links: link -> target
    skills: list[str] = field(default_factory=list)  # folders holding SKILL.md, in walk order
    orphans: list[str] = field(default_factory=list)  # folders beside skills, with markdown but no SKILL.md
    problems: list[Finding] = field(default_factory=list)
    # folders whose SKILL.md is a link to another SKILL.md in the tree (a .gemini/skills/ mirror): the skill it
    # links to is checked, once; the mirror is neither a skill of its own nor an orphan. mirror -> target folder
    mirrors: dict[str, str] = field(default_factory=dict)


class Ignores:
    """The ``.gitignore`` files met on the walk, each applying below its own folder (deeper ones win)."""

    def __init__(self) -> None:
        self.specs: list[tuple[str, Any]] = []

    def add(self, base: str, text: str) -> None:
        import pathspec

        self.specs.append((base, pathspec.GitIgnoreSpec.from_lines(text.splitlines())))

    def ignored(self, relpath: str, is_dir: bool) -> bool:
        decision = None
        for base, spec in self.specs:
            if base and not relpath.startswith(base + "/"):
                continue
            sub = relpath[len(base) + 1 :] if base else relpath
            result = spec.check_file(sub + "/" if is_dir else sub)
            if result.include is not None:
                decision = result.include
        return bool(decision)


def _skipped(name: str, full: str, ignores: Ignores, relpath: str) -> bool:
    if name in SKIP_DIRS or name.endswith(".egg-info"):
        return True
    if name in BUILD_DIRS and not os.path.isfile(os.path.join(full, SKILL_FILE)):
        return True
    return bool(ignores.specs) and ignores.ignored(relpath, True)


def walk(root: Path, gitignore: bool = True) -> Walk:
    """Index ``root`` and find its skills (see the module docstring). ``gitignore=False``: the .gitignore
    files are not read (the configuration names the skill folders, so nothing is left to discover)."""
    out = Walk()
    real_root = os.path.realpath(root)
    ignores = Ignores()
    owner: dict[str, str | None] = {}  # folder -> the skill folder it belongs to (None: no skill)
    has_md: dict[str, bool] = {}
    links: list[tuple[str, Finding]] = []  # (parent folder, problem) of folder links that cannot be walked
    top = os.fspath(root)
    cut = len(top.rstrip(os.sep)) + 1
    for dirpath, dirnames, filenames, entries in _scan(top):
        base = dirpath[cut:].replace(os.sep, "/") if len(dirpath) >= cut else ""
        if "pyvenv.cfg" in filenames and base:  # a virtual environment, whatever its name
            dirnames[:] = []
            continue
        if gitignore and ".gitignore" in filenames:
            text, _ = read_text(root, posixpath.join(base, ".gitignore"))
            if text is not None:
                ignores.add(base, text)
        parent_owner = owner.get(posixpath.dirname(base)) if base else None
        is_skill = parent_owner is None and SKILL_FILE in filenames and entries[SKILL_FILE].is_file()
        mirrored = _mirrored_skill(real_root, entries[SKILL_FILE]) if is_skill else None
        if mirrored is not None:
            out.mirrors[base] = mirrored
            is_skill = False
            owner[base] = base  # its files belong to the mirror, not to an orphan folder
        else:
            owner[base] = base if is_skill else parent_owner
        if is_skill:
            out.skills.append(base)
        has_md[base] = any(n.endswith(".md") for n in filenames)
        kept = []
        for name in sorted(dirnames):
            rel_path = f"{base}/{name}" if base else name
            if not _skipped(name, os.path.join(dirpath, name), ignores, rel_path):
                kept.append(name)
        dirnames[:] = kept
        for name in [*dirnames, *sorted(filenames)]:  # ignored folders are pruned; files are all indexed
            rel_path = f"{base}/{name}" if base else name
            entry = entries[name]
            if entry.is_symlink():
                why = _link(real_root, entry.path, rel_path, out)
                if why is not None:
                    links.append((base, why))
                    continue
            out.paths.add(rel_path)
            if name not in dirnames and entry.is_file():
                out.files.add(rel_path)
        if len(out.paths) > MAX_INDEX:
            out.problems.append(
                problem(TOO_LARGE, ".", 1, 1, f"the tree has more than {MAX_INDEX} paths; the rest are not indexed")
            )
            break
    parents = {posixpath.dirname(s) for s in out.skills if s}
    out.problems += [f for parent, f in links if parent in parents]
    out.orphans = _orphans(out.skills, parents, owner, has_md)
    return out


def _scan(top: str) -> Iterator[tuple[str, list[str], list[str], dict[str, os.DirEntry[str]]]]:
    """``os.walk(top, followlinks=False)`` top-down (the caller may prune the folder names it is given), each
    folder with its ``os.scandir`` entries by name: they already know whether they are links, folders or
    files, so no path is looked at again. A folder that cannot be listed adds nothing."""
    try:
        with os.scandir(top) as it:
            entries = {e.name: e for e in it}
    except OSError:
        return
    dirs: list[str] = []
    files: list[str] = []
    for name, entry in entries.items():
        try:
            is_dir = entry.is_dir()
        except OSError:
            is_dir = False
        (dirs if is_dir else files).append(name)
    yield top, dirs, files, entries
    for name in dirs:
        if not entries[name].is_symlink():
            yield from _scan(os.path.join(top, name))


def _mirrored_skill(real_root: str, entry: os.DirEntry[str]) -> str | None:
    """The root-relative folder of the SKILL.md that ``entry`` (a folder's SKILL.md) links to, where it is a
    link to another file named SKILL.md inside the root; else None (a file, or a link to other markdown: the
    folder is a skill whose text lives elsewhere)."""
    if not entry.is_symlink():
        return None
    real = os.path.realpath(entry.path)
    if posixpath.basename(real) != SKILL_FILE or not real.startswith(real_root + os.sep):
        return None
    folder = os.path.dirname(os.path.relpath(real, real_root)).replace(os.sep, "/")
    return None if os.path.samefile(os.path.dirname(entry.path), os.path.dirname(real)) else folder


def _link(real_root: str, full: str, rel_path: str, out: Walk) -> Finding | None:
    """Record an in-root link; a finding (not recorded) for one that loops, dangles or leaves the root."""
    msg = link_problem(Path(full))
    if msg:
        return problem(BAD_LINK, rel_path, 1, 1, f"{msg}; skipped")
    real = os.path.realpath(full)
    if real != real_root and not real.startswith(real_root + os.sep):
        what = "folder" if os.path.isdir(full) else "file"
        return problem(LEAVES_ROOT, rel_path, 1, 1, f"{what} is a symlink leaving the checked root; not followed")
    if os.path.isdir(full):
        out.dir_links[rel_path] = os.path.relpath(real, real_root).replace(os.sep, "/")
    return None


def _orphans(skills: list[str], parents: set[str], owner: dict[str, str | None], has_md: dict[str, bool]) -> list[str]:
    """Folders beside skill folders (same parent, not the root) that hold markdown but no SKILL.md and no
    skill below."""
    above: set[str] = set()
    for s in skills:
        while s:
            s = posixpath.dirname(s)
            above.add(s)
    out = []
    for folder, md in sorted(has_md.items()):
        if not folder or not md or owner.get(folder) is not None or folder in above:
            continue
        parent = posixpath.dirname(folder)
        # beside skills in a skills folder; at the root (skills kept there) docs/ and the like are not skills
        if parent and parent in parents and not posixpath.basename(folder).startswith(("_", ".")):
            out.append(folder)
    return out


def configured(value: Any) -> list[str] | None:
    """``[tool.skills-check] skills`` as a list of folders/globs (None when not set)."""
    if value is None:
        return None
    return [value] if isinstance(value, str) else list(value)


def select(root: Path, found: Walk, patterns: list[str]) -> tuple[list[str], list[str], list[str]]:
    """The skills and orphan folders at or under the folders ``patterns`` name (globs expanded), and the
    patterns that name no folder (each a finding for the caller)."""
    folders: list[str] = []
    missing: list[str] = []
    for pattern in patterns:
        pattern = pattern.strip().strip("/") or "."
        if inside(root, pattern.split("*")[0].split("?")[0].split("[")[0] or "."):
            missing.append(pattern)
            continue
        if glob.has_magic(pattern):
            hits = sorted(glob.glob(pattern, root_dir=root, recursive=True, include_hidden=True))
        else:
            hits = [pattern] if (root / pattern).is_dir() else []
        hits = [posixpath.normpath(h.replace(os.sep, "/")) for h in hits if (root / h).is_dir()]
        if not hits:
            missing.append(pattern)
        folders += ["" if h == "." else h for h in hits]

    def under(path: str) -> bool:
        return any(not f or path == f or path.startswith(f + "/") for f in folders)

    return [s for s in found.skills if under(s)], [o for o in found.orphans if under(o)], missing


NO_SKILLS = 3  # exit status of a check that found no skill to check (never "clean")


def no_skill_line(project: Any) -> str:
    """The one line a check that found no skill prints (the language server shows it as a message)."""
    given = project.config.get("skills")
    where = (
        f"in {', '.join(given) if isinstance(given, list) else given} ([tool.skills-check] skills)"
        if given
        else f"under {project.root}"
    )
    return (
        f"error: no skill found {where}: a skill is a folder holding SKILL.md; nothing was checked (exit {NO_SKILLS})"
    )
