"""SK213: every file bundled in a skill is reachable from its text.

Claude's guidance on progressive disclosure: a file or folder the skill's markdown never names is one an agent
never opens. Files that tools read (lock files, build settings, the scripts' own tests), a gallery's catalog card
and files a convention reads are left alone.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator

from ..model import Finding, MarkdownDoc, Project, Skill
from .common import UNLISTED_OK, files_under, finding, folder_named, skill_docs, written_patterns
from .registry import rule

# Files the tools that run a skill's scripts read, and the scripts' own tests (for the people who maintain
# them): an agent runs the script, it does not open these.
TOOLING_FILES = re.compile(
    r"^(?:pyproject\.toml|uv\.lock|poetry\.lock|requirements[\w.-]*\.txt|setup\.(?:py|cfg)|package(?:-lock)?\.json|"
    r"yarn\.lock|pnpm-lock\.yaml|tsconfig\.json|Cargo\.(?:toml|lock)|go\.(?:mod|sum)|Gemfile(?:\.lock)?|"
    r"test_\w+\.py|\w+_test\.(?:py|go)|[\w.-]+\.(?:test|spec)\.[jt]sx?|conftest\.py)$"
)
# The folders the Agent Skills spec names for documentation agents read on demand: a document there is
# reached only when a text points at it.
DOC_FOLDERS = frozenset({"references", "reference", "docs"})
# A skill gallery's catalog card (name, version, tags for the gallery's index): read by the gallery's build,
# never by an agent. Only beside SKILL.md.
CATALOG_CARDS = frozenset({"metadata.json"})


def _mentions(skill: Skill) -> str:
    """The skill's markdown text, links included, as one string to search for file names."""
    parts = []
    for doc in skill_docs(skill):
        parts.append(doc.text)
        parts += [link.target for link in doc.links]
    return "\n".join(parts)


@rule(
    "SK213",
    "unreferenced-file",
    severity="warning",
    profile="claude",
    cites="Claude skill authoring best practices (docs.claude.com, agent skills best practices: progressive "
    "disclosure): SKILL.md points to each bundled file and says when to read or run it",
    whole_file=True,
)
def unreferenced_file(project: Project) -> Iterator[Finding]:
    """Every file bundled in a skill is named in its markdown (or sits in a folder it names), one finding a fact.

    A folder none of whose files is named is one finding, listing them.

    An agent reads SKILL.md and opens other files only when the text points at them: a file nothing
    names (by its path, its file name, or a folder of it such as `scripts/`) is never used, unless code uses it:
    another of the skill's scripts names it, or the text imports from its Python package. Where the text
    names the documents of a documentation folder (`references/`, `reference/`, `docs/`) one by one, a
    document there it leaves out is not reached either, though the folder is named too. Licence and README files, a gallery's
    `metadata.json` catalog card, the files the scripts' tools read (`pyproject.toml`, lock files,
    `requirements.txt`, `package.json`) and the scripts' tests, hidden files, caches and `evals/` (test cases
    for evaluation tools, not for agents) are exempt.
    """
    for skill in project.skills:
        if not skill.skill_md.readable:
            continue
        prefix = f"{skill.dir}/" if skill.dir else ""
        unnamed, listed_only, bundled = _unnamed_files(project, skill, prefix)
        for folder, files in _by_folder(unnamed, bundled):
            if folder:
                message = (
                    f"{folder}/ is in the skill ({_some(files)}) but nothing in its markdown names the folder or "
                    "any file in it: agents never open them (link what agents need from SKILL.md with when to "
                    "use it, or remove the folder)"
                )
            else:
                message = (
                    f"{files[0]} is in the skill but nothing in its markdown names it: agents never "
                    "open it (link it from SKILL.md with when to use it, or remove it)"
                )
            yield finding(unreferenced_file, message, prefix + files[0], 1)
        for folder, files in _by_parent(listed_only):
            yield finding(
                unreferenced_file,
                f"the skill names documents of {folder}/ one by one but not these ({_some(files)}): agents open "
                "the documents the text points at (link each from SKILL.md with when to read it, or remove it)",
                prefix + files[0],
                1,
            )


def _unnamed_files(project: Project, skill: Skill, prefix: str) -> tuple[list[str], list[str], set[str]]:
    """(files nothing names, documents only a folder of which is named, every file subject to the rule), each
    relative to the skill folder."""
    text = _mentions(skill)
    patterns = written_patterns([d for d in skill_docs(skill) if isinstance(d, MarkdownDoc)])
    conventional = _read_by_convention(project, skill)
    named = _FolderNames(text)
    unnamed: list[str] = []
    listed_only: list[str] = []
    bundled: set[str] = set()
    pointed: set[str] = set()  # folders holding a document the text names by itself
    for path in files_under(project, prefix):
        inner = path[len(prefix) :]
        parts = inner.split("/")
        if (
            inner == "SKILL.md"
            or parts[0] == "evals"
            or any(p.startswith((".", "__")) for p in parts)
            or UNLISTED_OK.match(parts[-1])
            or TOOLING_FILES.match(parts[-1])
            or inner in CATALOG_CARDS
        ):
            continue
        bundled.add(inner)
        folders = ["/".join(parts[:i]) for i in range(1, len(parts))]
        # a folder already found named spares a search of the text (a folder of a hundred schema files); the
        # file name then (``inner`` ends with it, so where the name is not in the text, ``inner`` is not)
        if parts[-1] in text or inner in conventional or any(p.fullmatch(inner) for p in patterns):
            pointed.add(posixpath.dirname(inner))
            continue
        if _used_by_code(skill, path, inner, text):
            pointed.add(posixpath.dirname(inner))
            continue
        if named.already(folders) or any(named(f) for f in folders):
            if parts[-1].endswith(".md") and parts[-2] in DOC_FOLDERS and not _linked_from_skill(skill, path):
                listed_only.append(inner)
            continue
        if any(d.path == path for d in skill.files.values()) and _linked_from_skill(skill, path):
            continue
        unnamed.append(inner)
    # a folder named as a whole is the pointer to its documents, unless the text names them one by one: then
    # the ones it leaves out are never opened
    return unnamed, [f for f in listed_only if posixpath.dirname(f) in pointed], bundled


def _used_by_code(skill: Skill, path: str, inner: str, text: str) -> bool:
    """Whether code uses the file though no text names it: another of the skill's scripts names it (a template
    or an archive a script reads), or it is a module of a Python package the text or another script imports
    from (`from core.gif_builder import ...` uses every module of `core/`)."""
    name = posixpath.basename(inner)
    others = [body for other, body in skill.script_texts.items() if other != path]
    if any(name in body for body in others):
        return True
    if not inner.endswith(".py") or "/" not in inner:
        return False
    parts = posixpath.dirname(inner).split("/")
    # the package as the text or another script imports it: from its folder's name down (scripts/pkg/x.py: pkg)
    for i in range(len(parts)):
        dotted = ".".join(parts[i:])
        if any(_names_module(body, dotted) for body in (text, *others)):
            return True
    return False


def _names_module(body: str, dotted: str) -> bool:
    """Whether ``body`` names a module of the package ``dotted`` (``pkg.name``, not after a word character or a
    dot: the pattern ``(?<![\\w.])pkg\\.\\w``, found by plain string search, as most bodies never name it)."""
    key = f"{dotted}."
    at = body.find(key)
    while at >= 0:
        before = body[at - 1] if at else " "
        after = body[at + len(key) : at + len(key) + 1]
        if not (before == "." or _word(before)) and _word(after):
            return True
        at = body.find(key, at + 1)
    return False


def _word(char: str) -> bool:
    """Whether ``char`` is a word character (the regular expressions' ``\\w``)."""
    return char.isalnum() or char == "_"


def _by_folder(unnamed: list[str], bundled: set[str]) -> list[tuple[str, list[str]]]:
    """The unnamed files as facts: each top-most folder every bundled file of which is unnamed (with its files),
    and each other file alone (folder "")."""
    left = set(unnamed)
    out: list[tuple[str, list[str]]] = []
    for inner in sorted(unnamed):
        if inner not in left:
            continue
        parts = inner.split("/")
        for i in range(1, len(parts)):
            folder = "/".join(parts[:i])
            inside = sorted(f for f in bundled if f.startswith(folder + "/"))
            if len(inside) > 1 and all(f in left for f in inside):
                out.append((folder, inside))
                left.difference_update(inside)
                break
        else:
            out.append(("", [inner]))
            left.discard(inner)
    return out


def _by_parent(files: list[str]) -> list[tuple[str, list[str]]]:
    groups: dict[str, list[str]] = {}
    for inner in sorted(files):
        groups.setdefault(posixpath.dirname(inner), []).append(inner)
    return sorted(groups.items())


def _some(files: list[str], shown: int = 4) -> str:
    """``files`` as a short list: the first few by name, then how many more."""
    names = ", ".join(posixpath.basename(f) for f in files[:shown])
    more = f" and {len(files) - shown} more" if len(files) > shown else ""
    return f"{len(files)} file{'s' if len(files) != 1 else ''}: {names}{more}"


class _FolderNames:
    """Whether a skill's markdown names each folder by itself, asked once per folder (a folder of a hundred
    schema files asks about the same two folders a hundred times)."""

    def __init__(self, text: str) -> None:
        self.bare = text.replace("./", "")
        self.known: dict[str, bool] = {}

    def already(self, folders: list[str]) -> bool:
        """Whether one of ``folders`` was asked about and found named (no new search)."""
        return any(self.known.get(f) for f in folders)

    def __call__(self, folder: str) -> bool:
        if folder not in self.known:
            self.known[folder] = folder_named(self.bare, folder)
        return self.known[folder]


_YAML_PATH_RE = re.compile(r"""(?m)^\s*[\w-]+:\s*["']?(\./)?([\w./-]+\.(?:png|svg|jpe?g|gif|webp|ico))["']?\s*$""")


def _read_by_convention(project: Project, skill: Skill) -> set[str]:
    """Skill-relative paths of the files an agent reads by convention (the loader's ``convention_files``:
    Codex's agents/openai.yaml) and of the images they name (its icons)."""
    out: set[str] = set(skill.convention_files)
    for text in skill.convention_files.values():
        for m in _YAML_PATH_RE.finditer(text):
            out.add(posixpath.normpath(m.group(2)))
    return out


def _linked_from_skill(skill: Skill, path: str) -> bool:
    return any(
        posixpath.normpath(posixpath.join(posixpath.dirname(d.path), link.target.split("#")[0])) == path
        for d in skill_docs(skill)
        for link in d.links
    )
