"""``[tool.skills-check]`` read from the checked tree's ``pyproject.toml``, with command-line overrides."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..inputs import (
    inside,
    problem,
    read_text,
)
from ..model import Project

DEFAULTS: dict[str, str] = {
    "docs": "docs",
    "launcher": "scripts/reinforcement_learning/train_multigpu.py",
    "trainer": "scripts/reinforcement_learning/train.py",
}


# This repository's conventions a tree can adopt (``adopt = [...]``); the rules that encode them
# (rules/common.py ``adopted``) report only where adopted.
CONVENTIONS = ("options-table", "nccl-list", "skill-metadata")


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
        import tomllib  # with its datetime parsing, only for a tree that has a pyproject.toml

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
