"""Completion for the language server: what may be typed where, from the checker's own knowledge.

- in a ``SKILL.md`` frontmatter: its keys (the ones the rules know, each with what it holds and the rules
  that check it), ``name`` from the skill's folder name, ``allowed-tools`` from the known tool names,
  ``audience`` and ``status`` from their allowed values;
- in a ``skills-check:`` comment (markdown, RST, frontmatter): the actions, then the rule codes;
- in a command of a configured tool (``mgpu-lab train_multigpu ...`` in a skill or a doc): the tool's flags,
  read from its argparse, and the flags of the tool it forwards to.

Pure functions over one document's lines (0-based positions in code points; the server converts from the
client's units) and the last check's project; ``lsprotocol`` types out.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Sequence

from lsprotocol import types

from ..adoption.suppress import ACTIONS, PREFIX
from ..model import Option, Project, Tool
from ..rules.registry import Rule

# What each frontmatter key holds, in a line (the rules that check it are added from the registry).
KEY_DOCS: dict[str, str] = {
    "name": "The skill's name: lowercase letters, digits and single hyphens, at most 64 characters; the "
    "Agent Skills specification asks that it be the folder's name.",
    "description": "What the skill does and when to use it, at most 1024 characters: agents pick skills by it.",
    "license": "The license the skill is under: a license name, or the path of a license file in the skill.",
    "compatibility": "What the skill needs to run (a product, system packages, network access), at most 500 "
    "characters.",
    "metadata": "A map of further string keys and values (author, version, ...), for tools that read them.",
    "allowed-tools": "Tools the agent may use without asking while the skill is active, separated by spaces "
    "(experimental in the specification; Claude Code reads it).",
    "audience": "Isaac Lab: who the skill is for, `user` or `developer` (the folder under skills/ says the same).",
    "status": "Isaac Lab: how settled the skill is: `experimental`, `stable` or `deprecated`.",
    "owners": "Isaac Lab: the people or teams who keep the skill true, as a list.",
}
# Tool names Claude Code's permission settings accept (its settings documentation lists them); an
# ``allowed-tools`` entry may narrow one, as ``Bash(git status:*)``.
TOOL_NAMES = (
    "Bash",
    "Edit",
    "Glob",
    "Grep",
    "MultiEdit",
    "NotebookEdit",
    "NotebookRead",
    "Read",
    "Task",
    "TodoWrite",
    "WebFetch",
    "WebSearch",
    "Write",
)

_SUPPRESSION = re.compile(re.escape(PREFIX) + r"\s*(?P<action>[\w-]*)(?P<codes>(?:\s+[\w, ]*)?)$")
_WORD = re.compile(r"[\w-]*$")


def _item(
    label: str,
    kind: types.CompletionItemKind,
    detail: str,
    doc: str,
    line: int,
    start: int,
    end: int,
    sort: str | None = None,
) -> types.CompletionItem:
    rng = types.Range(types.Position(line, start), types.Position(line, end))
    return types.CompletionItem(
        label=label,
        kind=kind,
        detail=detail,
        sort_text=sort,
        documentation=types.MarkupContent(kind=types.MarkupKind.Markdown, value=doc) if doc else None,
        text_edit=types.TextEdit(range=rng, new_text=label),
    )


def _frontmatter_end(lines: Sequence[str]) -> int | None:
    """The 0-based line of the closing ``---`` of a frontmatter block at the top, else None."""
    if not lines or lines[0].rstrip() != "---":
        return None
    return next((i for i in range(1, len(lines)) if lines[i].rstrip() == "---"), None)


def _word(prefix: str) -> str:
    """The word that ends at the cursor (empty when the cursor follows a space)."""
    found = _WORD.search(prefix)
    return found.group(0) if found else ""


def suppression_items(prefix: str, line: int, rules: Iterable[Rule]) -> list[types.CompletionItem] | None:
    """The actions, or the rule codes, inside a ``skills-check:`` comment; None outside one."""
    m = _SUPPRESSION.search(prefix)
    if m is None:
        return None
    start = len(prefix) - len(_word(prefix))
    if not m.group("codes"):
        return [
            _item(a, types.CompletionItemKind.Keyword, "skills-check suppression", "", line, start, len(prefix))
            for a in ACTIONS
        ]
    if m.group("action") not in ACTIONS:
        return []
    named = set(re.split(r"[\s,]+", m.group("codes").upper()))
    return [
        _item(
            r.code,
            types.CompletionItemKind.Value,
            r.name,
            f"**{r.code}** ({r.profile}): {r.summary}",
            line,
            start,
            len(prefix),
        )
        for r in rules
        if r.code not in named
    ]


def _key_doc(key: str, rules: Iterable[Rule]) -> str:
    checked = [r for r in rules if r.func is not None and f"`{key}`" in r.summary]
    out = KEY_DOCS.get(key, "")
    if checked:
        out += "\n\nChecked by:\n\n" + "\n".join(f"- **{r.code}** ({r.name}): {r.summary}" for r in checked)
    return out


def frontmatter_items(
    lines: Sequence[str],
    line: int,
    prefix: str,
    folder: str,
    rules: list[Rule],
    known_keys: Iterable[str],
    values: dict[str, Sequence[str]],
) -> list[types.CompletionItem]:
    """Keys at the start of a top-level line; values after ``name:``, ``allowed-tools:`` and the keys with a
    fixed set of values."""
    word = _word(prefix)
    start = len(prefix) - len(word)
    m = re.match(r"^([\w-]+):\s+(.*)$", prefix)
    if m is None:
        if prefix != word:
            return []
        present = {ln.split(":", 1)[0] for ln in lines if re.match(r"^[\w-]+:", ln)}
        return [
            _item(k, types.CompletionItemKind.Property, "frontmatter key", _key_doc(k, rules), line, start, len(prefix))
            for k in sorted(known_keys)
            if k not in present
        ]
    key, written = m.group(1), m.group(2)
    if key == "name":
        return [
            _item(
                folder,
                types.CompletionItemKind.Value,
                "the skill's folder name",
                KEY_DOCS["name"],
                line,
                start,
                len(prefix),
            )
        ]
    if key == "allowed-tools":
        used = set(re.findall(r"[A-Za-z]+", written))
        return [
            _item(t, types.CompletionItemKind.EnumMember, "tool", "", line, start, len(prefix))
            for t in TOOL_NAMES
            if t not in used
        ]
    return [
        _item(v, types.CompletionItemKind.EnumMember, key, KEY_DOCS.get(key, ""), line, start, len(prefix))
        for v in values.get(key, ())
    ]


def _command_words(lines: Sequence[str], line: int, prefix: str) -> list[str]:
    """The words of the command the cursor is in, backslash-continued lines joined."""
    text = prefix
    i = line - 1
    while i >= 0 and lines[i].rstrip().endswith("\\"):
        text = lines[i].rstrip()[:-1] + " " + text
        i -= 1
    return text.replace("`", " ").split()


def _tool_at(words: list[str], tools: dict[str, Tool]) -> Tool | None:
    """The configured tool whose command words (or another spelling) come last before the cursor."""
    best: tuple[int, int, Tool] | None = None
    for tool in tools.values():
        for spelling in (tool.words, *tool.also):
            n = len(spelling)
            for i in range(len(words) - n, -1, -1):
                if tuple(words[i : i + n]) == spelling:
                    if best is None or (i, n) > best[:2]:
                        best = (i, n, tool)
                    break
    return best[2] if best else None


def _option_doc(opt: Option, tool: str) -> str:
    parts = [opt.help or ""]
    if opt.choices:
        parts.append("choices: " + ", ".join(f"`{c}`" for c in opt.choices))
    if len(opt.flags) > 1:
        parts.append("also: " + ", ".join(f"`{f}`" for f in opt.flags[1:]))
    parts.append(f"(`{tool}`'s argparse)")
    return "\n\n".join(p for p in parts if p)


def flag_items(lines: Sequence[str], line: int, prefix: str, project: Project) -> list[types.CompletionItem]:
    """The flags of the tool whose command the cursor is in, when the word there starts with ``-``."""
    found = re.search(r"[^\s`]*$", prefix)
    word = found.group(0) if found else ""
    if not word.startswith("-"):
        return []
    tool = _tool_at(_command_words(lines, line, prefix[: len(prefix) - len(word)]), project.tools)
    if tool is None:
        return []
    chain, items = [tool], []
    seen: set[str] = set()
    forwarded = project.tools.get(tool.forwards) if tool.forwards else None
    if forwarded is not None:
        chain.append(forwarded)
    start = len(prefix) - len(word)
    for rank, t in enumerate(chain):
        for opt in t.spec.options:
            flag = opt.canonical
            if flag in seen or not flag.startswith("--") or flag in ("--help",):
                continue
            seen.update(opt.flags)
            detail = t.name if rank == 0 else f"{t.name} (forwarded by {tool.name})"
            items.append(
                _item(
                    flag,
                    types.CompletionItemKind.Field,
                    detail,
                    _option_doc(opt, t.name),
                    line,
                    start,
                    len(prefix),
                    sort=f"{rank}{flag}",
                )
            )
    return items


def narrowed(items: list[types.CompletionItem], typed: str) -> list[types.CompletionItem]:
    """The items that match what was typed, best first: those whose label starts with it (case
    sensitively, then not), then those that hold it; within each, the order the items came in (a tool's own
    flags before the flags it forwards, keys in the order they are documented). Each item gets the
    ``sortText`` of its rank and its label as ``filterText``, so a client keeps this order as it filters
    further; an item without a label is never offered."""
    typed_lower = typed.lower()

    def grade(label: str) -> int | None:
        if label.startswith(typed):
            return 0
        if label.lower().startswith(typed_lower):
            return 1
        if typed_lower and typed_lower.lstrip("-") and typed_lower.lstrip("-") in label.lower():
            return 2
        return None

    graded = [(g, i, item) for i, item in enumerate(items) if item.label and (g := grade(item.label)) is not None]
    graded.sort(key=lambda x: (x[0], x[2].sort_text or "", x[1]))
    out = []
    for n, (_, _, item) in enumerate(graded):
        item.sort_text = f"{n:04d}"
        item.filter_text = item.label
        out.append(item)
    return out


def complete(
    rel: str, lines: Sequence[str], line: int, char: int, project: Project, rules: list[Rule]
) -> list[types.CompletionItem]:
    """What may be typed at (``line``, ``char``) of the document ``rel``, narrowed to what the word at the
    cursor starts (``narrowed``)."""
    if line >= len(lines):
        return []
    items = _candidates(rel, lines, line, char, project, rules)
    if not items or not isinstance(items[0].text_edit, types.TextEdit):
        return items
    typed = lines[line][items[0].text_edit.range.start.character : char]
    return narrowed(items, typed)


def _candidates(
    rel: str, lines: Sequence[str], line: int, char: int, project: Project, rules: list[Rule]
) -> list[types.CompletionItem]:
    prefix = lines[line][:char]
    hit = suppression_items(prefix, line, rules)
    if hit is not None:
        return hit
    skill = next((s for s in project.skills if s.skill_md.path == rel), None)
    end = _frontmatter_end(lines)
    if skill is not None and end is not None and 0 < line < end:
        from ..rules.frontmatter import AUDIENCES, KNOWN_KEYS, STATUSES

        return frontmatter_items(
            lines[1:end],
            line,
            prefix,
            posixpath.basename(skill.dir) or project.root.name,  # a lone skill folder: the root's own name
            rules,
            KNOWN_KEYS,
            {"audience": AUDIENCES, "status": STATUSES},
        )
    return flag_items(lines, line, prefix, project)
