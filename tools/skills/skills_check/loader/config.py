"""``[tool.skills-check]`` read from the checked tree's ``pyproject.toml``, with command-line overrides."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ..inputs import inside, read_text
from ..model import ConfigError, Project, SetupError
from ..problems import LEAVES_ROOT, problem

DEFAULTS: dict[str, str] = {
    "docs": "docs",
    "launcher": "scripts/reinforcement_learning/train_multigpu.py",
    "trainer": "scripts/reinforcement_learning/train.py",
}


# This repository's conventions a tree can adopt (``adopt = [...]``); the rules that encode them
# (rules/common.py ``adopted``) report only where adopted.
CONVENTIONS = ("options-table", "nccl-list", "skill-metadata")


# Every profile a tree may name in ``profiles`` (rules/registry.py PROFILES; tests/test_checker_config.py
# holds the two equal: the loader may not import the rules).
PROFILE_NAMES = ("spec", "claude", "links", "drift", "isaaclab", "routing")
SECTION = "skills-check"
TOOL_KEYS = ("script", "module", "forwards", "also", "runs_other")  # of one [tool.skills-check.tools] entry


def _is_paths(value: Any) -> bool:
    return isinstance(value, str) or (
        isinstance(value, list) and bool(value) and all(isinstance(v, str) for v in value)
    )


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# key -> (test of its value, what it must be): every key [tool.skills-check] knows; any other key is an error
KEYS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "skills": (_is_paths, "a folder or glob, or a non-empty list of them"),
    "docs": (lambda v: isinstance(v, str), "a string path"),
    "launcher": (lambda v: isinstance(v, str), "a string path"),
    "trainer": (lambda v: isinstance(v, str), "a string path"),
    "multi_gpu_doc": (lambda v: isinstance(v, str), "a string path"),
    "profiles": (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "a list of profile names"),
    "adopt": (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "a list of conventions"),
    "tools": (lambda v: isinstance(v, dict), "a table: command words = script path, or a table"),
    "per-file-ignores": (lambda v: isinstance(v, dict), 'a table: "glob" = ["CODE", ...]'),
    "routing_threshold": (_is_number, "a number"),
}


def nearest(word: str, valid: Iterable[str]) -> str | None:
    """The valid name closest to ``word`` (the same name with ``_`` for ``-`` first), or None."""
    valid = list(valid)
    for other in (word.replace("_", "-"), word.replace("-", "_"), word.lower()):
        if other in valid:
            return other
    import difflib  # only for a name that is not valid: a check of a good setting never loads it

    close = difflib.get_close_matches(word, valid, n=1, cutoff=0.6)
    return close[0] if close else None


def unknown_name(what: str, word: str, valid: Iterable[str]) -> str:
    """``unknown WHAT `word`; did you mean `nearest`? (valid: ...)``: the words of a config or flag error."""
    valid = list(valid)
    near = nearest(word, valid)
    hint = f"; did you mean `{near}`?" if near else ""
    return f"unknown {what} `{word}`{hint} (valid: {', '.join(valid)})"


_SEG = r"""(?:"[^"]*"|'[^']*'|[A-Za-z0-9_-]+)"""
_HEADER = re.compile(rf"^\s*\[\[?\s*({_SEG}(?:\s*\.\s*{_SEG})*)\s*\]\]?\s*(?:#.*)?$")
_KEYLINE = re.compile(rf"^\s*({_SEG}(?:\s*\.\s*{_SEG})*)\s*=")


def _segments(dotted: str) -> tuple[str, ...]:
    return tuple(s.strip("\"'") for s in re.findall(_SEG, dotted))


def locate(text: str, *path: str) -> int:
    """The 1-based line where the TOML key ``path`` (e.g. ``"tool", "skills-check", "docs"``) is set: its
    ``key = ...`` line or its table's header; failing that, the line of the longest prefix of ``path``
    found, else 1."""
    first = _key_index(text)
    for n in range(len(path), 0, -1):
        line = first.get(path[:n])
        if line is not None:
            return line
    return 1


@functools.lru_cache(maxsize=4)
def _key_index(text: str) -> dict[tuple[str, ...], int]:
    """Every prefix of every key path set in the TOML ``text`` (a header's table, a ``key =`` line's table plus
    key) -> the first line that sets it or something under it (``locate`` asks for dozens of keys per check)."""
    first: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    for i, line in enumerate(text.split("\n"), start=1):
        header = _HEADER.match(line)
        if header:
            table = _segments(header.group(1))
            full = table
        else:
            key = _KEYLINE.match(line)
            if key is None:
                continue
            full = table + _segments(key.group(1))
        for n in range(1, len(full) + 1):
            first.setdefault(full[:n], i)
    return first


def _key_line(text: str, key: str) -> int:
    """The line of ``[tool.skills-check] key`` in pyproject.toml's text (the section's line, or 1, when not found)."""
    return locate(text, "tool", SECTION, key)


def _near(name: str, section: str) -> bool:
    """Whether ``name`` is a near miss of ``section`` (difflib's ratio at least 0.85)."""
    import difflib  # for a tree whose pyproject.toml has [tool] tables only: most checked trees never load it

    return difflib.SequenceMatcher(None, name, section).ratio() >= 0.85


def _check_sections(tool: dict[str, Any], text: str) -> None:
    """A ``[tool.X]`` table whose name is a near miss of ``skills-check`` (``skill-check``, ``skills_check``) is
    an error, not a table silently ignored."""
    for name in tool:
        squashed = re.sub(r"[^a-z0-9]", "", name.lower())
        if name != SECTION and (squashed == "skillscheck" or _near(name.lower(), SECTION)):
            raise ConfigError(
                f"unknown section [tool.{name}]; did you mean [tool.{SECTION}]? (the checker reads only [tool.{SECTION}])",
                line=locate(text, "tool", name),
                key=f"tool.{name}",
            )


def _check_key(key: str, value: Any, text: str) -> None:
    """One ``[tool.skills-check]`` key: known, of the right type, with known values. Raises ConfigError."""
    line = _key_line(text, key)
    where = f"[tool.{SECTION}]"
    if key not in KEYS:
        raise ConfigError(f"{where} {unknown_name('key', key, sorted(KEYS))}", line=line, key=key)
    test, what = KEYS[key]
    if not test(value):
        raise ConfigError(f"{where} {key} must be {what}, not {type(value).__name__}", line=line, key=key)
    if key == "profiles":
        for name in value:
            if name not in PROFILE_NAMES:
                raise ConfigError(
                    f"{where} profiles: {unknown_name('profile', name, PROFILE_NAMES)}", line=line, key=key
                )
    if key == "adopt":
        for name in value:
            if name not in CONVENTIONS:
                raise ConfigError(f"{where} adopt: {unknown_name('convention', name, CONVENTIONS)}", line=line, key=key)
    if key == "tools":
        _check_tools(value, text)
    if key == "per-file-ignores":
        for glob, codes in value.items():
            if not isinstance(codes, list) or not codes or not all(isinstance(c, str) and c.strip() for c in codes):
                raise ConfigError(
                    f"[tool.{SECTION}.per-file-ignores] {glob!r} must be a non-empty list of codes",
                    line=locate(text, "tool", SECTION, key, glob),
                    key=key,
                )


def load_config(root: Path, overrides: dict[str, str | None] | None = None) -> dict[str, Any]:
    """DEFAULTS, updated from pyproject's [tool.skills-check], then from non-None ``overrides``.

    ``config["_lines"]`` maps each key set in pyproject.toml to its line (for findings about it). Strict: an
    unknown key, section or profile, or a value of the wrong type, raises ConfigError (one line, the nearest
    valid name).
    """
    config: dict[str, Any] = dict(DEFAULTS)
    lines: dict[str, int] = {}
    if (root / "pyproject.toml").exists() or (root / "pyproject.toml").is_symlink():
        text, problems = read_text(root, "pyproject.toml")
        if text is None:
            raise SetupError(f"pyproject.toml:{problems[0].loc.line}: {problems[0].message}")
        import tomllib  # with its datetime parsing, only for a tree that has a pyproject.toml

        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise SetupError(f"pyproject.toml: does not parse: {exc}") from exc
        tool = data.get("tool", {})
        if not isinstance(tool, dict):
            raise ConfigError(
                f"`tool` must be a table, not {type(tool).__name__}", line=locate(text, "tool"), key="tool"
            )
        _check_sections(tool, text)
        table = tool.get(SECTION, {})
        if not isinstance(table, dict):
            raise ConfigError(f"[tool.{SECTION}] must be a table", line=locate(text, "tool", SECTION), key=SECTION)
        for key, value in table.items():
            _check_key(key, value, text)
            config[key] = value
            lines[key] = _key_line(text, key)
        ignores = table.get("per-file-ignores") or {}
        config["_glob_lines"] = {glob: locate(text, "tool", SECTION, "per-file-ignores", glob) for glob in ignores}
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
    line = _key_line(text, "tools")

    def bad(why: str) -> ConfigError:
        return ConfigError(f"[tool.skills-check.tools] {why}", line=line, key="tools")

    if not isinstance(value, dict):
        raise bad("must be a table: command words = script path, or a table with script or module")
    for words, entry in value.items():
        if not words.split():
            raise bad("has an empty command")
        if isinstance(entry, str):
            continue
        if not isinstance(entry, dict):
            raise bad(f"{words!r} must be a script path or a table")
        unknown = sorted(set(entry) - set(TOOL_KEYS))
        if unknown:
            raise bad(f"{words!r}: {unknown_name('key', unknown[0], TOOL_KEYS)}")
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


def _config_path_ok(root: Path, config: dict[str, Any], key: str, project: Project) -> bool:
    """Whether a configured path stays inside the root; else an IN006 finding where it was set."""
    why = inside(root, str(config[key]))
    if why is None:
        return True
    line = config.get("_lines", {}).get(key)
    where = ("pyproject.toml", line) if line else (str(config[key]) or ".", 1)
    origin = "[tool.skills-check]" if line else "--"
    project.problems.append(
        problem(LEAVES_ROOT, where[0], where[1], 1, f"{origin}{key} = {config[key]!r} {why}; not read")
    )
    return False
