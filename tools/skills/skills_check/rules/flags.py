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

from collections.abc import Iterator
from dataclasses import dataclass

from ..model import ArgSpec, Finding, Loc, Option, Project
from .commands import Invocation, lookup, takes_value, usable
from .common import cached, finding
from .registry import RuleFunc, rule
from .shell import Word
from .written import (
    NUMBER_RE,
    PLACEHOLDER_VALUE_RE,
    TOOL_TIE_RE,
    Written,
    all_invocations,
    invocation_table,
    written_commands,
)


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
        pairs, distinct = invocation_table(project)
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
