"""DR3xx: every --flag written in skills and docs belongs to the tool the command line runs.

Scope (so the checker never cries wolf): flags are judged only
- in command lines of known tools (``python <script of the tree>.py``, the tools ``[tool.skills-check]
  tools`` configures, ``torchrun`` and ``python -m torch.distributed.run``, skrl's JAX launcher), in code
  blocks and inline code; and
- where the tree has a launcher and a trainer (the house layout, e.g. this repository's ``mgpu-lab
  train_multigpu``), in bare inline code that starts with ``--`` (e.g. `--num_gpus`), which must belong
  to the launcher, the trainer, torchrun or skrl's JAX launcher, or to a tool the same file runs in a
  command line, where the text ties it to one of those tools: its line names one of them, or the flag
  is a near miss of one of their options (a likely typo). A bare flag of another program
  (``--verbose``, ``--ipc=host`` next to ``docker run``) is not judged.
When the launcher's or the trainer's options cannot be read (a foreign layout, e.g. a ``train.py``
that dispatches to per-library scripts), bare flags are not judged at all (the summary says so).
Flags of other programs (``nvidia-smi --query-gpu=...``, ``uv run --no-project``, ``git``) are not
judged; neither are Python, YAML or JSON code blocks. Lines under a "Known failure modes:" label in
skill markdown are wrong on purpose and are skipped. Placeholders (``<dir>``, ``$VAR``, ``N``,
``...``) are never invalid values.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property

from ..model import ArgSpec, Code, Finding, Loc, MarkdownDoc, Option, Project, RstDoc, Skill
from .commands import Invocation, invocations, lookup, takes_value, usable
from .common import all_skill_docs, cached, code_items_of, finding, negative_lines_of, rst_docs
from .registry import RuleFunc, rule
from .shell import Word, place, relative_command_lines

NOT_SHELL = frozenset(
    {
        "python",
        "py",
        "python3",
        "pycon",
        "yaml",
        "yml",
        "json",
        "jsonc",
        "toml",
        "ini",
        "cfg",
        "rst",
        "md",
        "markdown",
        "diff",
        "c",
        "cpp",
        "cuda",
        "xml",
        "html",
        "javascript",
        "js",
    }
)
YAML = frozenset({"yaml", "yml"})
YAML_ITEM_RE = re.compile(r"^\s*-\s+(?=[^\s\[{\"'#])")  # a plain list item (a Kubernetes ``args:`` entry)
PLACEHOLDER_VALUE_RE = re.compile(r"^(?:<[^<>]+>|\$\{?\w+\}?|[A-Z][A-Z0-9_]*|\.\.\.|…|\{[^{}]*\}|\[[^\[\]]*\])$")
NUMBER_RE = re.compile(r"^-\d+(?:\.\d+)?$")
# words on a line that tie a bare `--flag` to a tool whose options the checker knows
TOOL_TIE_RE = re.compile(
    r"launcher|trainer|train_multigpu|train\.py|mgpu-lab train|torchrun|torch\.distributed\.run"
    r"|\bskrl\b",
    re.IGNORECASE,
)


class _Lines:
    """A document's lines, split when a written command's columns are first asked for (for a finding)."""

    def __init__(self, doc: MarkdownDoc | RstDoc) -> None:
        self.doc = doc

    @cached_property
    def all(self) -> list[str]:
        return self.doc.text.split("\n")


@dataclass
class Written:
    """A command line or bare flag span found in a document.

    ``rel`` holds its words as :func:`shell.relative_command_lines` gives them (shared by every place the same
    text is written): positions relative to the code's text. ``words`` and :meth:`at` give file positions, worked
    out (with the code's column per line) only where a rule asks for them.
    """

    doc: MarkdownDoc | RstDoc
    skill: Skill | None
    rel: tuple[Word, ...]
    inline: bool
    key: tuple[str, bool | None, int]  # (the tokenised text, prompts_only, which simple command): one per text
    code: Code
    lines: _Lines  # the document's lines (for the code's columns)

    @cached_property
    def cols(self) -> list[int]:
        return _content_cols(self.doc, self.code, self.lines.all)

    def at(self, word: Word) -> tuple[int, int]:
        """The file (line, column) of one of ``rel``'s words (or of a word an invocation made from them)."""
        return place(word, self.code.line, self.cols)

    @cached_property
    def words(self) -> list[Word]:
        """The words with their file positions (what :func:`shell.command_lines` gives for this code)."""
        return [Word(w.text, *self.at(w), op=w.op) for w in self.rel]


def _content_cols(doc: MarkdownDoc | RstDoc, code: Code, lines: list[str]) -> list[int]:
    """Per physical line of ``code``, the 1-based file column where its text starts (``lines``: the doc's)."""
    out = []
    for i, part in enumerate(code.text.split("\n")):
        n = code.line - 1 + i
        src = lines[n] if 0 <= n < len(lines) else ""
        start = code.col - 1 if code.kind == "inline" and i == 0 else 0
        probe = part.strip()[:40]
        idx = src.find(probe, start) if probe else -1
        if idx >= 0:
            idx -= len(part) - len(part.lstrip())
        out.append(idx + 1 if idx >= 0 else (code.col if i == 0 else 1))
    return out


def _documents(project: Project) -> Iterator[tuple[MarkdownDoc | RstDoc, Skill | None]]:
    for skill, doc in all_skill_docs(project):
        yield doc, skill
    for rst in rst_docs(project):
        yield rst, None


def _reads_every_command(project: Project) -> bool:
    """Whether the bare-flag rule runs (it reads the flags of every command written, not only the known tools')."""
    return project.torchrun is not None and usable(project.launcher) and usable(project.trainer)


def _may_run_tool(project: Project) -> tuple[re.Pattern[str], tuple[str, ...]] | None:
    """A pattern (with the words it is made of) that every code text that can run a known tool matches (a program word ``invocations`` knows:
    Python, torchrun, Isaac Lab's script, a configured tool's first word), or None where every command is read.

    Splitting a text into shell words is most of what this rule set costs on a large collection, and most
    code (output, other programs' commands) runs none of them: such text is not split."""
    if _reads_every_command(project):
        return None
    names = {"python", "py", "torchrun", "isaaclab"}
    for tool in project.tools.values():
        for words in (tool.words, *tool.also):
            if words:
                names.add(words[0].rsplit("/", 1)[-1])
    alternatives = "|".join(sorted(map(re.escape, names), key=len, reverse=True))
    # the words as plain text first (a substring test is much quicker than the pattern on most code)
    return re.compile(rf"(?<![\w.-])(?:{alternatives})"), tuple(sorted(names))


def written_commands(project: Project) -> list[Written]:
    """Every simple command in code blocks and inline code of the skills and RST docs (where only known tools'
    commands are read: those of the code texts that may run one, see ``_may_run_tool``)."""

    def make() -> list[Written]:
        out: list[Written] = []
        may_run = _may_run_tool(project)
        for doc, skill in _documents(project):
            negative = negative_lines_of(project, doc)
            lines = _Lines(doc)
            for code in code_items_of(project, doc):
                if code.line in negative:
                    continue  # a known failure mode: wrong on purpose
                if code.kind == "inline":
                    text, prompts_only, inline = code.text.rstrip("\n").replace("\n", " "), False, True
                else:
                    lang = (code.lang or "").lower() if code.kind == "block" else ""
                    if lang in NOT_SHELL and lang not in YAML:
                        continue
                    text, prompts_only, inline = code.text.rstrip("\n"), None, False
                    if lang in YAML:
                        text = _yaml_items(text)
                if may_run is not None and not (any(w in text for w in may_run[1]) and may_run[0].search(text)):
                    continue
                for k, ws in enumerate(relative_command_lines(text, prompts_only)):
                    out.append(Written(doc, skill, ws, inline, (text, prompts_only, k), code, lines))
        return out

    return cached(project, "written-commands", make)


def _yaml_items(text: str) -> str:
    """A YAML block's plain list items as command lines (marker blanked, columns kept); other lines empty."""
    out = []
    for line in text.split("\n"):
        m = YAML_ITEM_RE.match(line)
        out.append(" " * m.end() + line[m.end() :] if m else "")
    return "\n".join(out)


def all_invocations(project: Project) -> list[tuple[Written, Invocation]]:
    """Each known tool a written command runs. The invocation's words are ``w.rel``'s (place them with ``w.at``):
    one command text in one folder is looked up once, however often it is written."""
    return _invocation_table(project)[0]


def _invocation_table(project: Project) -> tuple[list[tuple[Written, Invocation]], list[Invocation]]:
    """``all_invocations``, and each distinct invocation once."""

    def make() -> tuple[list[tuple[Written, Invocation]], list[Invocation]]:
        memo: dict[tuple[tuple[str, bool | None, int], tuple[str, ...]], list[Invocation]] = {}
        out: list[tuple[Written, Invocation]] = []
        for w in written_commands(project):
            key = (w.key, (w.skill.dir,) if w.skill is not None else ())
            found = memo.get(key)
            if found is None:
                found = memo[key] = list(invocations(project, list(w.rel), key[1]))
            for inv in found:
                out.append((w, inv))
        return out, [inv for found in memo.values() for inv in found]

    return cached(project, "invocations", make)


def _truth(spec: ArgSpec, opt: Option | None = None) -> Loc:
    """Where an option is defined, or (no option) where the spec's first option is."""
    if opt is None:
        opt = min(spec.options, key=lambda o: o.line, default=None)
    return Loc(spec.path, opt.line if opt else 1, opt.col if opt else 1)


def _suggest(flag: str, specs: list[ArgSpec]) -> str:
    names = [f for s in specs for f in s.by_flag() if f.startswith("-")]
    import difflib

    close = difflib.get_close_matches(flag, names, n=1, cutoff=0.75)
    return f"; did you mean {close[0]}?" if close else ""


def _is_placeholder(value: str) -> bool:
    return bool(PLACEHOLDER_VALUE_RE.match(value)) or "<" in value or "$" in value


def _looks_like_option(text: str) -> bool:
    return text.startswith("-") and text != "-" and not NUMBER_RE.match(text)


@dataclass
class Problem:
    rule: RuleFunc
    word: Word
    message: str
    truth: Loc | None


def _tool_name(inv: Invocation) -> str:
    if inv.tool.startswith("script:"):
        return inv.tool.split(":", 1)[1]
    return {"torchrun": "torchrun", "jax": "skrl's JAX launcher"}.get(inv.tool, inv.tool)


def _options_of(specs: list[ArgSpec], shown: int = 6) -> str:
    """The options the specs define, as a short list leading a message's parenthesis ("its options: --a, --b; "),
    or nothing for a tool with many (its truth and the suggestion say enough)."""
    flags = sorted({max(o.flags, key=len) for spec in specs for o in spec.options if o.flags[0].startswith("-")})
    if not flags or len(flags) > shown:
        return ""
    return f"its options: {', '.join(flags)}; "


def check_invocation(inv: Invocation) -> Iterator[Problem]:
    """Unknown flags, missing values and invalid choices in one tool's arguments."""
    specs = inv.specs
    if not specs or not all(usable(s) for s in specs):
        return
    where = " or ".join(s.path for s in specs)
    args = inv.args
    i = 0
    while i < len(args):
        word = args[i]
        text = word.text
        i += 1
        if text == "--":
            if inv.after_dashdash:
                specs = inv.after_dashdash
                where = " or ".join(s.path for s in specs)
                continue
            break
        flag, eq, inline_value = text.partition("=")
        if not _looks_like_option(text) or _is_placeholder(flag):
            continue
        if not flag.startswith("--") and len(flag) > 2:
            found = lookup(specs, flag[:2])  # -b8: a short option with its value attached
            if found and takes_value(found[0]):
                flag, eq, inline_value = flag[:2], "=", flag[2:]
        if "*" in flag:
            continue  # a family such as --rdzv_* in prose
        found = lookup(specs, flag)
        if found is None:
            yield Problem(
                unknown_flag,
                word,
                f"{flag} is not an option of {_tool_name(inv)}{_suggest(flag, specs)} "
                f"({_options_of(specs)}truth: {where})",
                _truth(specs[0]),
            )
            continue
        opt, spec = found
        if not takes_value(opt):
            if eq:
                yield Problem(
                    flag_value, word, f"{flag} takes no value (truth: {spec.path}:{opt.line})", _truth(spec, opt)
                )
            continue
        values: list[Word] = []
        if eq:
            values = [Word(inline_value, word.line, word.col + len(flag) + 1)]
        elif opt.nargs in (None, "?") or isinstance(opt.nargs, int):
            want = opt.nargs if isinstance(opt.nargs, int) else 1
            while (
                len(values) < want and i < len(args) and not _looks_like_option(args[i].text) and args[i].text != "--"
            ):
                values.append(args[i])
                i += 1
            if len(values) < want and opt.nargs != "?":
                yield Problem(
                    flag_value, word, f"{flag} needs a value (truth: {spec.path}:{opt.line})", _truth(spec, opt)
                )
                continue
        else:  # "*", "+", or a non-literal nargs
            while i < len(args) and not _looks_like_option(args[i].text) and args[i].text != "--":
                values.append(args[i])
                i += 1
            if opt.nargs == "+" and not values:
                yield Problem(
                    flag_value,
                    word,
                    f"{flag} needs at least one value (truth: {spec.path}:{opt.line})",
                    _truth(spec, opt),
                )
                continue
        if opt.choices:
            yield from _bad_choices(flag, opt, spec, values)


def _bad_choices(flag: str, opt: Option, spec: ArgSpec, values: list[Word]) -> Iterator[Problem]:
    """The values given to ``flag`` (an option with choices) that are none of its choices."""
    allowed = [str(c) for c in opt.choices or ()]
    for value in values:
        for item in _choice_items(value.text):
            if item not in allowed:
                yield Problem(
                    flag_choice,
                    value,
                    f"{flag} {item!r} is not a valid choice ({', '.join(allowed)}; truth: {spec.path}:{opt.line})",
                    _truth(spec, opt),
                )


def _choice_items(value: str) -> list[str]:
    """The values a written choice stands for: ``{a,b}`` lists several; placeholders stand for none."""
    if value.startswith("{") and value.endswith("}"):
        return [v.strip() for v in value[1:-1].split(",") if v.strip()]
    if _is_placeholder(value):
        return []
    return [value]


def _problems(project: Project) -> list[tuple[Written, Problem]]:
    def make() -> list[tuple[Written, Problem]]:
        pairs, distinct = _invocation_table(project)
        # each invocation checked once: it is shared by the places its command is written
        found = {id(inv): problems for inv in distinct if (problems := list(check_invocation(inv)))}
        if not found:
            return []
        return [(w, p) for w, inv in pairs for p in found.get(id(inv), ())]

    return cached(project, "flag-problems", make)


def _emit(project: Project, rule: RuleFunc) -> Iterator[Finding]:
    for w, p in _problems(project):
        if p.rule is rule:
            line, col = w.at(p.word)
            yield finding(rule, p.message, w.doc.path, line, col, truth=p.truth)


@rule(
    "DR301",
    "unknown-flag",
    profile="drift",
    cites="Python argparse (docs.python.org/3/library/argparse.html): a command line holds the options, values and choices its parser defines",
)
def unknown_flag(project: Project) -> Iterator[Finding]:
    """A flag in a command line of a known tool is one of that tool's options (or of the tool it forwards to).

    In a command of a known tool (a script of the tree run with Python, a configured tool, torchrun),
    every flag is one of its options (argparse prefix matching honoured where `allow_abbrev` is on). A
    tool that forwards what it does not know to another (`forwards` in `[tool.skills-check] tools`, as a
    launcher forwards to its trainer) takes the other's flags too; after a lone `--`, only the other's.
    """
    yield from _emit(project, unknown_flag)


@rule(
    "DR302",
    "flag-value",
    profile="drift",
    cites="Python argparse (docs.python.org/3/library/argparse.html): a command line holds the options, values and choices its parser defines",
)
def flag_value(project: Project) -> Iterator[Finding]:
    """A flag that takes a value is given one, and a switch is given none.

    `--num_gpus` at the end of a line is a finding; so is `--switch=value`.
    """
    yield from _emit(project, flag_value)


@rule(
    "DR303",
    "flag-choice",
    profile="drift",
    cites="Python argparse (docs.python.org/3/library/argparse.html): a command line holds the options, values and choices its parser defines",
)
def flag_choice(project: Project) -> Iterator[Finding]:
    """A value given to a flag with choices (`--rl_library`, `--start_method` ...) is one of them.

    `--rl_library foo` is a finding; `{a,b}` stands for each of a and b.
    """
    yield from _emit(project, flag_choice)


def _bare_scope(project: Project) -> dict[str, set[str]]:
    """Per document: the flags a bare `--flag` span may name there."""

    def make() -> dict[str, set[str]]:
        base: set[str] = set()
        for spec in (
            project.launcher,
            project.trainer,
            project.torchrun,
            project.jax_launcher,
            *(t.spec for t in project.tools.values()),
        ):
            if spec is not None and usable(spec):
                base |= set(spec.by_flag())
        per_doc: dict[str, set[str]] = {}
        known = {id(w) for w, _ in all_invocations(project)}
        for w in written_commands(project):
            flags = per_doc.setdefault(w.doc.path, set(base))
            if id(w) not in known and w.rel and not w.rel[0].text.startswith("-"):
                # another program's command line (uv, pip ...): its flags are its own business
                flags.update(x.text.split("=", 1)[0] for x in w.rel if x.text.startswith("--"))
        for w, inv in all_invocations(project):
            for spec in inv.specs:
                per_doc.setdefault(w.doc.path, set(base)).update(spec.by_flag())
        per_doc[""] = base
        return per_doc

    return cached(project, "bare-scope", make)


def _options_table_lines(project: Project) -> set[tuple[str, int]]:
    from .options import options_table

    found = options_table(project)
    if found is None:
        return set()
    doc, table, col = found
    return {(doc.path, row[col].line) for row in table.rows if col < len(row)}


@rule(
    "DR304",
    "bare-flag",
    profile="drift",
    cites="this repository's design (DESIGN.md, Sources of truth): every --flag written in skills and docs",
)
def bare_flag(project: Project) -> Iterator[Finding]:
    """An inline code span starting with `--` names an option of the launcher, the trainer, torchrun or skrl's JAX launcher (or of a tool the same file runs).

    A tool the same file runs in a command line counts: the probe's `--bisect` next to a probe command,
    `--no-project` next to `uv run --no-project ...`. `--rdzv_*` matches a family. torchrun's and skrl's
    options come from the spec kept with the checker. Flags in the options table's first column are
    DR2xx's.
    """
    if project.torchrun is None:
        return  # without torch its options are unknown: judging bare flags would cry wolf
    if not usable(project.launcher) or not usable(project.trainer):
        return  # a tool whose options cannot be read: its flags are not judged (the loader notes it)
    scope = _bare_scope(project)
    lines_of: dict[str, list[str]] = {}
    skip = _options_table_lines(project)
    names = sorted(scope[""])
    for w in written_commands(project):
        if not w.inline or not w.rel or not w.rel[0].text.startswith("--"):
            continue
        if (w.doc.path, w.code.line + w.rel[0].line) in skip:
            continue
        allowed = scope.get(w.doc.path, scope[""])
        for word in w.words:
            if not word.text.startswith("--") or word.text == "--":
                continue
            flag = word.text.split("=", 1)[0]
            if "*" in flag:
                prefix = flag.split("*", 1)[0]
                if any(f.startswith(prefix) for f in allowed):
                    continue
            elif flag in allowed:
                continue
            import difflib

            close = difflib.get_close_matches(flag, names, n=1, cutoff=0.75)
            src = lines_of.setdefault(w.doc.path, w.doc.text.split("\n"))
            line_text = src[word.line - 1] if 0 < word.line <= len(src) else ""
            if not close and not TOOL_TIE_RE.search(line_text):
                continue  # nothing ties it to a known tool: another program's flag
            hint = f"; did you mean {close[0]}?" if close else ""
            where = project.launcher.path if project.launcher else "the launcher"
            yield finding(
                bare_flag,
                f"{flag} is not an option of the launcher, the trainer or torchrun{hint} (truth: {where})",
                w.doc.path,
                word.line,
                word.col,
                truth=Loc(where, 1, 1) if project.launcher else None,
            )


@rule(
    "DR305",
    "script-path",
    profile="drift",
    cites="a command line runs only when the script it names exists (the tree is its source of truth)",
)
def script_path(project: Project) -> Iterator[Finding]:
    """A repository script a command line runs (`python scripts/x.py`, `torchrun skills/.../x.py`) exists."""
    for w, inv in all_invocations(project):
        if inv.tool == "missing-script" and inv.program is not None:
            line, col = w.at(inv.program)
            yield finding(
                script_path, f"{inv.program.text} does not exist (the command runs it)", w.doc.path, line, col
            )
