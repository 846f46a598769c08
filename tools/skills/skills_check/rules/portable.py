"""SK116-SK117, SK214, SK216-SK217: what any skill repository is held to.

From the Agent Skills specification and Claude Code's documented skill behaviour: the name is the folder's, the
tools named in `allowed-tools` exist, shell snippets survive Claude Code's argument substitution, paths are not
one user's.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator

from ..model import Finding, Fix, Project, Skill, TextEdit
from .common import finding, skill_docs
from .frontmatter import NAME_RE, _key_line, _skills_with_frontmatter, alias_points_to
from .registry import rule

# Claude Code's built-in tool names (its tools reference, code.claude.com/docs/en/tools-reference), with the
# names older releases used (Task, MultiEdit, NotebookRead, BashOutput, KillShell, SlashCommand, LS).
CLAUDE_CODE_TOOLS = frozenset(
    {
        "Agent",
        "AskUserQuestion",
        "Bash",
        "BashOutput",
        "CronCreate",
        "CronDelete",
        "CronList",
        "Edit",
        "EnterPlanMode",
        "EnterWorktree",
        "ExitPlanMode",
        "ExitWorktree",
        "Glob",
        "Grep",
        "KillShell",
        "LS",
        "ListMcpResourcesTool",
        "LSP",
        "MultiEdit",
        "NotebookEdit",
        "NotebookRead",
        "PowerShell",
        "Read",
        "ReadMcpResourceTool",
        "SendMessage",
        "Skill",
        "SlashCommand",
        "Task",
        "TaskCreate",
        "TaskGet",
        "TaskList",
        "TaskOutput",
        "TaskStop",
        "TaskUpdate",
        "TodoWrite",
        "ToolSearch",
        "WebFetch",
        "WebSearch",
        "Write",
    }
)
# `Tool(specifier)` (Bash(git diff:*), Read(./docs/**), WebFetch(domain:example.com)) or an MCP tool
# `mcp__server` / `mcp__server__tool` (any server or tool name; `*` allowed).
TOOL_RE = re.compile(r"^(?P<tool>[A-Za-z][A-Za-z0-9]*)(?:\((?P<spec>.*)\))?$", re.DOTALL)
MCP_RE = re.compile(r"^mcp__[A-Za-z0-9_.-]+(?:__[A-Za-z0-9_.*-]+)?$")


@rule(
    "SK116",
    "name-folder",
    profile="spec",
    cites="Agent Skills specification (agentskills.io/specification): `name` must match the name of the skill's "
    "parent directory",
    fixable=True,
)
def name_folder(project: Project) -> Iterator[Finding]:
    """`name` equals the name of the folder agents load the skill from (the skill folder, or a link to it).

    A skill is loaded from a folder whose name is its `name`: the skill's own folder, or a discovery link
    to it (`.agents/skills/<name>` -> the folder) in the tree. The fix (to review) writes the folder's name
    into `name`; renaming the folder is the other way out.
    """
    linked: dict[str, set[str]] = {}
    for link, target in project.dir_links.items():
        linked.setdefault(target, set()).add(posixpath.basename(link))
    for skill, fm in _skills_with_frontmatter(project):
        name = fm.get("name")
        folder = posixpath.basename(skill.dir) if skill.dir else project.root.name
        if (
            not isinstance(name, str)
            or name == folder
            or name in linked.get(skill.dir, ())
            or alias_points_to(project, name, skill)
        ):  # a link, or a Windows checkout's one-line file
            continue
        line = _key_line(skill, "name")
        fix = None
        if NAME_RE.match(folder) and len(folder) <= 64 and "name" in skill.skill_md.frontmatter_lines:
            fix = Fix(
                f"set `name` to the folder's name {folder!r}",
                (TextEdit(skill.skill_md.path, line, line, (f"name: {folder}",)),),
            )
        yield finding(
            name_folder,
            f"`name` {name!r} is not the skill folder's name {folder!r}: agents load a skill "
            "by its folder (rename one of them, or link the folder under its name)",
            skill.skill_md.path,
            line,
            fix=fix,
        )


def tool_entries(value: object) -> list[str] | None:
    """`allowed-tools` as a list of entries: a YAML list, or a string split on commas or spaces outside
    parentheses (None when it is neither)."""
    if isinstance(value, list):
        return [str(v).strip() for v in value if str(v).strip()]
    if not isinstance(value, str):
        return None
    out, depth, word = [], 0, ""
    for ch in value:
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and (ch == "," or ch.isspace()):
            if word.strip():
                out.append(word.strip())
            word = ""
        else:
            word += ch
    if word.strip():
        out.append(word.strip())
    return out


def unknown_tool(entry: str) -> str | None:
    """Why ``entry`` names no tool Claude Code knows (None when it does)."""
    if MCP_RE.match(entry):
        return None
    m = TOOL_RE.match(entry)
    if m is None:
        return "is not a tool name, `Tool(pattern)` or `mcp__server__tool`"
    if m.group("tool") in CLAUDE_CODE_TOOLS:
        return None
    return "is not a Claude Code tool"


@rule(
    "SK117",
    "allowed-tools",
    severity="warning",
    profile="claude",
    cites="Claude Code skills (code.claude.com/docs/en/skills, allowed-tools) and tools reference "
    "(code.claude.com/docs/en/tools-reference): the tool names permission rules use",
    fixable=True,
)
def allowed_tools(project: Project) -> Iterator[Finding]:
    """Each `allowed-tools` entry names a Claude Code tool, a `Tool(pattern)` rule, or an MCP tool.

    Entries are Claude Code's tool names (`Read`, `Bash`, `WebFetch` ...), a permission rule on one
    (`Bash(git diff:*)`), or an MCP tool (`mcp__server` or `mcp__server__tool`); an entry outside them
    grants nothing. Where the entry is a known tool in the wrong case (`bash`), the fix writes its name.
    """
    for skill, fm in _skills_with_frontmatter(project):
        if "allowed-tools" not in fm:
            continue
        entries = tool_entries(fm["allowed-tools"])
        line = _key_line(skill, "allowed-tools")
        if entries is None:
            yield finding(
                allowed_tools,
                "`allowed-tools` must be a string of tool names or a list of them",
                skill.skill_md.path,
                line,
            )
            continue
        by_lower = {t.lower(): t for t in CLAUDE_CODE_TOOLS}
        wrong = [(entry, unknown_tool(entry), TOOL_RE.match(entry)) for entry in entries]
        wrong = [(e, why, m) for e, why, m in wrong if why is not None]
        right = {
            e: by_lower[m.group("tool").lower()] + e[len(m.group("tool")) :]
            for e, _, m in wrong
            if m and m.group("tool").lower() in by_lower
        }
        edit = _case_edit(skill, line, right)  # one edit for the line, shared by its findings (applied once)
        for entry, why, _ in wrong:
            hint = f" (did you mean {right[entry]!r}?)" if entry in right else ""
            fix = Fix(f"write the tool's name {right[entry]!r}", (edit,)) if entry in right and edit else None
            yield finding(
                allowed_tools, f"`allowed-tools` entry {entry!r} {why}{hint}", skill.skill_md.path, line, fix=fix
            )


def _case_edit(skill: Skill, line: int, right: dict[str, str]) -> TextEdit | None:
    """The frontmatter line ``line`` with every wrongly cased entry written right (None when one is not on it)."""
    lines = skill.skill_md.text.split("\n")
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    for old, new in right.items():
        if old not in text:
            return None
        text = text.replace(old, new, 1)
    return TextEdit(skill.skill_md.path, line, line, (text,)) if right else None


SHELL_LANGS = frozenset({"bash", "sh", "shell", "zsh", "console", "shell-session", "ksh", "fish"})
# Claude Code substitutes $ARGUMENTS, $ARGUMENTS[N] and $N in a skill's content before the model reads it.
ARG_RE = re.compile(r"\$(?:ARGUMENTS(?:\[\d+\])?|\d+)(?![\w\[])")
# an amount of money, not a placeholder: an escaped dollar (\$45.2B, as LaTeX and shells write a literal one),
# or digits with a decimal or thousands part ($0.30, $1,200) or more than one digit ($150/hr: a shell reads
# $15 as $1 then 5, so no script writes it)
_MONEY_RE = re.compile(r"\\\$\d|\$\d+[.,]\d|\$\d\d")


@rule(
    "SK214",
    "argument-placeholder",
    severity="warning",
    profile="claude",
    cites="Claude Code skills (code.claude.com/docs/en/skills, string substitutions): $ARGUMENTS, "
    "$ARGUMENTS[N] and $N in a skill's content are replaced by the invocation's arguments",
)
def argument_placeholder(project: Project) -> Iterator[Finding]:
    """A code block in SKILL.md holds no `$1`, `$0` or `$ARGUMENTS`: Claude Code replaces them first.

    When a skill is invoked, Claude Code replaces `$ARGUMENTS`, `$ARGUMENTS[N]` and `$N` in SKILL.md with
    the invocation's arguments (or nothing) before the model reads the text, so a shell function's `$1`
    arrives as something else. The substitution happens wherever the text is, so every fence is read,
    whatever its language (or none). Use a named variable, or `${1}` where the substitution is not wanted.
    """
    for skill in project.skills:
        doc = skill.skill_md
        if not doc.readable:
            continue
        for code in doc.code:
            if code.kind != "block":
                continue
            for i, text in enumerate(code.text.split("\n")):
                for m in ARG_RE.finditer(text):
                    if _MONEY_RE.match(text, max(0, m.start() - 1)) or _MONEY_RE.match(text, m.start()):
                        continue
                    yield finding(
                        argument_placeholder,
                        f"`{m.group(0)}` in a code block is replaced by Claude Code with the "
                        "skill's arguments before the model reads it: use a named variable or `${...}`",
                        doc.path,
                        code.line + i,
                        m.start() + 1,
                    )


# A user's own folder written into a skill: C:\Users\<name>\..., /home/<name>/..., /Users/<name>/... (macOS
# spells it with a capital U: a lower-case /users/<id>/ is a web route), WSL's /mnt/c/Users/<name>/... (a
# placeholder such as <name>, $USER, ~, a route parameter (:id, {id}, digits) or a generic name is not one).
USER_PATH_RE = re.compile(
    r"(?<![\w$])(?:(?i:[a-z]:\\{1,2}users\\{1,2})(?P<win>[^\\\s`'\"<>$%{}]+)\\|"
    r"(?i:/mnt/[a-z]/users/)(?P<wsl>[^/\s`'\"<>$%{}:]+)/|"
    r"(?<![\w$/])(?:/home/(?P<home>[^/\s`'\"<>$%{}:]+)/|/Users/(?P<mac>[^/\s`'\"<>$%{}:]+)/))"
)
# names that are no one person's: placeholders, and the fixed accounts of CI runners, cloud images and
# development containers (the same on every machine that runs the image)
GENERIC_USERS = frozenset(
    {"user", "username", "you", "me", "name", "runner", "ubuntu", "root", "public", "default", "shared", "guest",
     "dev", "developer", "admin", "test", "example", "vscode", "node", "codespace", "codespaces", "gitpod", "coder",
     "jovyan", "linuxbrew", "ec2-user", "app", "vagrant", "builder"}
)  # fmt: skip
#: what to write instead, by the kind of home folder
_HOME_HINTS = {
    "win": "write it relative to the skill, from %USERPROFILE%, or as a placeholder (C:\\Users\\<user>\\...)",
    "wsl": "write it relative to the skill, or as a placeholder (/mnt/c/Users/<user>/...)",
    "home": "write it relative to the skill, from $HOME (~), or as a placeholder (/home/<user>/...)",
    "mac": "write it relative to the skill, from $HOME (~), or as a placeholder (/Users/<user>/...)",
}


def _user_paths(text: str) -> Iterator[tuple[int, int, str, str]]:
    """(line, column, path, kind) of each home folder of a named person in ``text``."""
    if "/home/" not in text:  # the pattern's fixed words absent: nothing to search
        low = text.lower()
        if "users\\" not in low and "/users/" not in low:
            return
    # one search of the whole text (no match spans a line: every part of the pattern stops at white space)
    for m in USER_PATH_RE.finditer(text):
        kind = next(k for k in ("win", "wsl", "home", "mac") if m.group(k))
        name = m.group(kind)
        if name.lower() not in GENERIC_USERS and not name.startswith("...") and not name.isdigit():
            start = m.start()
            yield text.count("\n", 0, start) + 1, start - text.rfind("\n", 0, start), m.group(0), kind


@rule(
    "SK216",
    "user-path",
    severity="warning",
    profile="spec",
    cites="Agent Skills specification (agentskills.io/specification, file references): paths are relative "
    "to the skill root, so a skill works wherever it is installed",
)
def user_path(project: Project) -> Iterator[Finding]:
    """A skill and its scripts hold no path inside one person's home folder (`C:\\Users\\ana\\...`, `/home/ana/...`).

    A skill is installed on other machines, by other users: a path inside the author's home folder exists
    nowhere else. Write it relative to the skill (`scripts/run.py`), from an environment variable
    (`$HOME`, `%USERPROFILE%`), or as a placeholder (`/home/<user>/...`).
    """
    for skill in project.skills:
        docs = [d for d in skill_docs(skill) if d.readable]
        for doc in docs:
            for line, col, text, kind in _user_paths(doc.text):
                yield finding(
                    user_path, f"`{text}` is inside one user's home folder: {_HOME_HINTS[kind]}", doc.path, line, col
                )
        for path, text in sorted(skill.script_texts.items()):
            for line, col, found, kind in _user_paths(text):
                yield finding(
                    user_path, f"`{found}` is inside one user's home folder: {_HOME_HINTS[kind]}", path, line, col
                )


@rule(
    "SK217",
    "agent-tools",
    severity="warning",
    profile="claude",
    cites="Claude Code subagents (code.claude.com/docs/en/sub-agents, tools) and tools reference "
    "(code.claude.com/docs/en/tools-reference): a subagent's `tools` names Claude Code tools",
)
def agent_tools(project: Project) -> Iterator[Finding]:
    """Each entry of a subagent file's `tools:` list names a Claude Code tool or an MCP tool.

    A subagent (`.claude/agents/<name>.md`, a plugin's `agents/<name>.md`) gets only the tools its
    `tools:` frontmatter lists; an entry that names no tool (`Shell`, `Browser`) grants nothing.
    """
    for path, doc in sorted(project.agent_files.items()):
        fm = doc.frontmatter if isinstance(doc.frontmatter, dict) else {}
        if "tools" not in fm:
            continue
        entries = tool_entries(fm["tools"]) or []
        lines = doc.text.split("\n")
        line = next((i for i, text in enumerate(lines, start=1) if text.startswith("tools:")), 1)
        for entry in entries:
            why = unknown_tool(entry)
            if why is not None:
                yield finding(agent_tools, f"`tools` entry {entry!r} {why}", path, line)
