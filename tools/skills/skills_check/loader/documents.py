"""Markdown and RST documents, skills and evals.json read from the tree (each through the parse cache)."""

from __future__ import annotations

import json
import os
import posixpath
from dataclasses import replace
from pathlib import Path
from typing import Any

from .. import discover
from ..caches.parse import ParseCache
from ..inputs import inside, link_problem, read_bytes_bounded, read_text, realpath, rel
from ..model import Code, Include, Loc, MarkdownDoc, Project, RstDoc, Skill, paths_under
from ..problems import (
    BAD_LINK,
    BYTE_ORDER_MARK,
    EVALS_JSON_BROKEN,
    INCLUDE_FAILED,
    LEAVES_ROOT,
    MAX_BYTES,
    TOO_MANY_EVALS,
    problem,
)


def _walk_files(root: Path, top: Path, suffix: str, project: Project) -> list[Path]:
    """Files under ``top`` ending in ``suffix`` (sorted), not following directory links; loops reported.

    ``os.walk``'s top-down order (folders by name, the skipped ones pruned), read with ``os.scandir``, whose
    entries already know whether they are links: no path is looked at again unless it is one."""
    return [Path(p) for p in _walk_paths(root, top, suffix, project)]


def _walk_paths(root: Path, top: Path, suffix: str, project: Project) -> list[str]:
    """``_walk_files`` as strings (``top`` joined with each name): a skill's walk makes no path objects."""
    out: list[str] = []
    if not top.is_dir():
        return []
    _walk_folder(root, os.fspath(top), suffix, project, out)
    return sorted(out, key=lambda p: p.split(os.sep))


def _walk_folder(root: Path, folder: str, suffix: str, project: Project, out: list[str]) -> None:
    try:
        with os.scandir(folder) as it:
            entries = list(it)
    except OSError:
        return  # as os.walk with an onerror that ignores: an unreadable folder adds nothing
    dirs: list[os.DirEntry[str]] = []
    for entry in entries:
        try:
            is_dir = entry.is_dir()
        except OSError:
            is_dir = False
        if not is_dir:
            if entry.name.endswith(suffix):
                out.append(entry.path)
            elif entry.is_symlink():
                msg = link_problem(Path(entry.path))
                if msg:
                    project.problems.append(problem(BAD_LINK, rel(root, Path(entry.path)), 1, 1, f"{msg}; skipped"))
        elif entry.name not in discover.SKIP_DIRS:
            dirs.append(entry)
    dirs.sort(key=lambda e: e.name)
    for entry in dirs:
        if not entry.is_symlink():
            continue
        full = Path(entry.path)
        msg = link_problem(full)
        if msg:
            project.problems.append(problem(BAD_LINK, rel(root, full), 1, 1, f"{msg}; skipped"))
        elif inside(root, rel(root, full)):
            project.problems.append(
                problem(
                    LEAVES_ROOT, rel(root, full), 1, 1, "folder is a symlink leaving the checked root; not followed"
                )
            )
    for entry in dirs:
        if not entry.is_symlink():
            _walk_folder(root, entry.path, suffix, project, out)


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

    if f"{__package__}.parsers.rst" in sys.modules:
        return sys.modules[f"{__package__}.parsers.rst"]
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
    from ..parsers import rst as parse_rst

    return parse_rst


def _no_cache() -> ParseCache:
    return ParseCache(Path("."), enabled=False)


def load_markdown(root: Path, relpath: str, cache: ParseCache | None = None) -> MarkdownDoc:
    text, problems = read_text(root, relpath)
    if text is None:
        return MarkdownDoc(path=relpath, text="", n_lines=0, problems=problems, readable=False)
    cache = cache or _no_cache()
    doc = cache.get("md", relpath, text, MarkdownDoc)
    if doc is None:
        from ..parsers.markdown import parse_markdown

        doc = parse_markdown(relpath, text)
        cache.put("md", relpath, text, doc)
    doc.problems = problems + doc.problems
    return doc


def load_rst(root: Path, relpath: str, cache: ParseCache | None = None) -> RstDoc:
    text, problems = read_text(root, relpath)
    if text is None:
        return RstDoc(path=relpath, text="", n_lines=0, problems=problems, readable=False)
    cache = cache or _no_cache()
    doc = cache.get("rst", relpath, text, RstDoc)
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


def _read_included(root: Path, page: RstDoc, inc: Include, path: str) -> RstDoc | None:
    """The file ``inc`` shows, read through ``read_text``'s guards; None, with its problems reported at the
    directive, when it cannot be read."""
    text, problems = read_text(root, path)
    if text is None:
        page.problems.extend(
            replace(
                p,
                loc=Loc(page.path, max(1, inc.line), max(1, inc.col)),
                message=f"literalinclude {inc.target}: {p.message}",
                severity="error",
            )
            for p in problems
        )
        return None
    n_lines = len(text.split("\n")) - (1 if text.endswith("\n") else 0)
    return RstDoc(path=path, text=text, n_lines=n_lines, problems=problems)


def resolve_includes(
    root: Path, page: RstDoc, included: dict[str, RstDoc], skip: frozenset[str] | set[str] = frozenset()
) -> None:
    """Read the files ``page``'s literalinclude directives show (through ``read_text``'s guards: inside
    the root, regular files, size caps) into ``included``: per file an RstDoc with the file's text and
    one code block per shown run of lines, located in that file. A file that cannot be shown becomes a
    finding at the directive, and is never opened when it leaves the root or is not a regular file.
    Files in ``skip`` (pages and skill files checked as documents themselves) are not added again.
    """
    from ..parsers.includes import IncludeError, runs, shown_lines

    if len(page.includes) > MAX_INCLUDES:
        extra = page.includes[MAX_INCLUDES]
        page.problems.append(
            problem(
                INCLUDE_FAILED,
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
        doc = included[path] if path in included else _read_included(root, page, inc, path)
        if doc is None:
            continue
        try:
            shown = shown_lines(doc.text, inc.options)
        except IncludeError as exc:
            page.problems.append(
                problem(
                    INCLUDE_FAILED, page.path, inc.line, inc.col, f"literalinclude {inc.target}: {exc}; nothing checked"
                )
            )
            continue
        shown_chars += sum(len(t) + 1 for _, t in shown)
        if shown_chars > MAX_SHOWN:
            page.problems.append(
                problem(
                    INCLUDE_FAILED,
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


CONVENTION_FILES = ("agents/openai.yaml",)
SCRIPT_SUFFIXES = (
    ".py",
    ".sh",
    ".bash",
    ".ps1",
    ".js",
    ".ts",
    ".rb",
    ".pl",
)  # a skill's scripts, read as text  # read by Codex: the skill's interface (display name, icons, prompt)


def _load_skill(
    root: Path, skill_md: Path, project: Project, cache: ParseCache, ordered: list[str] | None = None
) -> Skill:
    """The skill whose SKILL.md is ``skill_md``; ``ordered``: ``project.files`` sorted (computed when not given)."""
    sdir = skill_md.parent
    srel = "" if sdir == root else rel(root, sdir)
    skill = Skill(
        dir=srel, audience=sdir.parent.name if srel else "", skill_md=load_markdown(root, rel(root, skill_md), cache)
    )
    top, own = os.fspath(root) + os.sep, os.fspath(skill_md)
    for md in _walk_paths(root, sdir, ".md", project):
        if md == own:
            continue
        relpath = md[len(top) :].replace(os.sep, "/") if md.startswith(top) else rel(root, Path(md))
        skill.files[relpath] = load_markdown(root, relpath, cache)
    prefix = f"{srel}/" if srel else ""
    ordered = sorted(project.files) if ordered is None else ordered
    marked: set[str] = set()  # scripts that start with a byte-order mark (their text does not show it)
    for path in [p for p in paths_under(ordered, prefix) if p.endswith(SCRIPT_SUFFIXES)]:
        text, problems = read_text(root, path)
        if text is not None:
            skill.script_texts[path] = text
        if any(p.code == BYTE_ORDER_MARK.code for p in problems):
            marked.add(path)
    for name in CONVENTION_FILES:
        if (sdir / name).is_file():
            text, problems = read_text(root, rel(root, sdir / name))
            project.problems.extend(problems)
            skill.convention_files[name] = text or ""
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
    _entry_scripts(root, skill, ordered, marked)
    return skill


def _entry_scripts(root: Path, skill: Skill, ordered: list[str], marked: set[str]) -> None:
    """The skill's scripts/ files that are entry points (a shebang or a ``__main__`` guard); ``ordered``: the
    tree's files, sorted; ``marked``: the scripts whose text was read from bytes starting with a byte-order mark
    (a shebang after one is none)."""
    folder = skill.join("scripts")
    prefix = f"{folder}/"
    for path in [p for p in paths_under(ordered, prefix) if "/" not in p[len(prefix) :]]:
        name = path[len(prefix) :]
        if name.startswith((".", "_")):
            continue
        text = skill.script_texts.get(path)  # read by the skill's loader (a script of a known suffix, decoded)
        if text is not None and "__main__" in text:
            skill.entry_scripts.append(path)
            continue
        if text is not None and not text.startswith("#!"):
            continue  # no shebang: decoding only drops a byte-order mark, it never makes one
        if text is not None and path not in marked:
            skill.entry_scripts.append(path)  # the bytes start as the text does
            continue
        data = read_bytes_bounded(os.path.join(realpath(str(root)), path), MAX_BYTES)
        if isinstance(data, bytes) and (data.startswith(b"#!") or b"__main__" in data):
            skill.entry_scripts.append(path)


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
        return None, [
            problem(EVALS_JSON_BROKEN, relpath, exc.lineno, exc.colno, f"evals.json does not parse: {exc.msg}")
        ]
    except _BigInt as exc:
        offset = text.find(str(exc.args[0]))
        line = text.count("\n", 0, max(offset, 0)) + 1
        return None, [
            problem(
                EVALS_JSON_BROKEN,
                relpath,
                line,
                1,
                f"evals.json holds an integer of {len(exc.args[0])} digits (limit {MAX_INT_DIGITS}); not read",
            )
        ]
    except (RecursionError, ValueError, MemoryError) as exc:
        return None, [problem(EVALS_JSON_BROKEN, relpath, 1, 1, f"evals.json cannot be read: {type(exc).__name__}")]
    problems = []
    entries = data
    if isinstance(data, dict):
        entries = next((data[k] for k in ("evals", "evaluations", "cases") if isinstance(data.get(k), list)), None)
    if isinstance(entries, list) and len(entries) > MAX_EVAL_ENTRIES:
        problems.append(
            problem(
                TOO_MANY_EVALS,
                relpath,
                1,
                1,
                f"evals.json has {len(entries)} entries; only the first {MAX_EVAL_ENTRIES} are checked",
            )
        )
        del entries[MAX_EVAL_ENTRIES:]
    return data, problems
