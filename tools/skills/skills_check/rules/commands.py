"""Which tool a written command line runs, and which argparse spec its flags must satisfy.

Known tools: those ``[tool.skills-check.tools]`` names (this repository's ``mgpu-lab train_multigpu``,
whose unknown flags are forwarded to ``mgpu-lab train``; see loader.py), ``torchrun`` / ``python -m torch.distributed.run`` (torchrun's own
options, then the script's), ``python -m skrl.utils.distributed.jax`` (skrl's JAX launcher, then the
script's), and ``python <repo script>.py`` (that script's argparse, read statically). Wrappers
``uv run``, ``env``, ``sudo``, ``time``, ``nohup``, ``exec``, ``timeout``, ``srun`` (SLURM) and ``VAR=x``
prefixes are looked through. Any other program (``nvidia-smi``, ``git``, ``pip`` ...) is not checked.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..model import ArgSpec, Option, Project
from ..problems import PYTHON_SYNTAX, UNREADABLE
from .common import cached, is_file
from .shell import Word

ENV_ASSIGN_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
PYTHON_RE = re.compile(r"^(?:.*/)?(?:python(?:3(?:\.\d+)?)?|py)$")
UV_VALUE_OPTS = frozenset(
    {
        "--with",
        "-w",
        "--with-editable",
        "--with-requirements",
        "--extra",
        "--group",
        "--only-group",
        "--no-group",
        "--python",
        "-p",
        "--project",
        "--directory",
        "--env-file",
        "--package",
        "--index",
        "--default-index",
        "--index-url",
        "--extra-index-url",
        "--find-links",
        "-f",
        "--exclude-newer",
        "--config-file",
        "--cache-dir",
        "--no-extra",
        "--python-preference",
        "--link-mode",
    }
)
PYTHON_VALUE_OPTS = frozenset({"-W", "-X", "-Q"})
# srun options written with their value as the next word; any other option without ``=`` makes the
# rest of the line unknown (the program is not judged rather than mistaken)
SRUN_VALUE_OPTS = frozenset(
    {
        "-N",
        "--nodes",
        "-n",
        "--ntasks",
        "--ntasks-per-node",
        "-c",
        "--cpus-per-task",
        "-p",
        "--partition",
        "-t",
        "--time",
        "-J",
        "--job-name",
        "-A",
        "--account",
        "-G",
        "--gpus",
        "--gpus-per-node",
        "--gpus-per-task",
        "--gres",
        "-w",
        "--nodelist",
        "-x",
        "--exclude",
        "-o",
        "--output",
        "-e",
        "--error",
        "--mem",
        "--mem-per-cpu",
        "--mem-per-gpu",
        "--export",
        "--mpi",
        "--cpu-bind",
        "--gpu-bind",
        "--distribution",
        "-m",
        "--container-image",
        "--container-mounts",
        "--container-workdir",
        "--container-name",
        "-D",
        "--chdir",
        "-q",
        "--qos",
        "--reservation",
        "-C",
        "--constraint",
    }
)
SRUN_FLAG_OPTS = frozenset(
    {
        "-l",
        "--label",
        "-u",
        "--unbuffered",
        "--exclusive",
        "--overlap",
        "-v",
        "--verbose",
        "-Q",
        "--quiet",
        "--no-container-mount-home",
        "--container-remap-root",
        "-K",
        "--kill-on-bad-exit",
    }
)
WRAPPERS = frozenset({"sudo", "time", "nohup", "exec", "command", "stdbuf", "nice"})
TORCHRUN_MODULES = frozenset({"torch.distributed.run"})
JAX_MODULES = frozenset({"skrl.utils.distributed.jax"})
REPO_SCRIPT_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*/[A-Za-z0-9_./-]+\.py$")


@dataclass
class Invocation:
    """One tool run in a command line, and the words its spec(s) must accept."""

    tool: str  # a configured tool's command words, "torchrun", "jax", "script:<path>", or "missing-script"
    specs: list[ArgSpec]  # looked up in order (launcher, then trainer for forwarded flags)
    args: list[Word]
    after_dashdash: list[ArgSpec] = field(default_factory=list)  # specs for words after a bare "--"
    program: Word | None = None  # the word naming the program (for locations)


def script_spec(project: Project, path: str) -> ArgSpec | None:
    """The argparse spec of the repository script ``path`` (read statically, never imported)."""
    for spec in (project.launcher, project.trainer):
        if spec is not None and spec.path == path:
            return spec

    return project.scripts.get(path)  # every .py a skill or doc names, parsed by the loader


def usable(spec: ArgSpec | None) -> bool:
    """A spec the rules can judge flags against: read without errors and holding options."""
    return (
        spec is not None
        and bool(spec.options)
        and spec.incomplete is None
        and not any(p.code in (UNREADABLE.code, PYTHON_SYNTAX.code) for p in spec.problems)
    )


def resolve_script(project: Project, token: str, base_dirs: tuple[str, ...]) -> str | None:
    """A script path as written -> the repository path of an existing file (repo root, then ``base_dirs``)."""
    if not token.endswith(".py") or token.startswith(("<", "$", "/")) or "*" in token:
        return None
    memo: dict[tuple[str, tuple[str, ...]], str | None] = cached(project, "resolved-scripts", dict)
    key = (token, base_dirs)
    if key not in memo:  # one script is run in many command lines of a skill
        memo[key] = _resolve_script(project, token.removeprefix("./"), base_dirs)
    return memo[key]


def _resolve_script(project: Project, token: str, base_dirs: tuple[str, ...]) -> str | None:
    for base in ("", *base_dirs):
        path = posixpath.normpath(posixpath.join(base, token)) if base else posixpath.normpath(token)
        if is_file(project, path):
            return path
    return None


def _strip_prefixes(ws: list[Word]) -> list[Word]:
    """Drop ``VAR=x`` prefixes and wrappers (``env``, ``sudo``, ``time`` ...) and ``uv run [opts]``."""
    i = 0
    while i < len(ws):
        text = ws[i].text
        if ENV_ASSIGN_RE.match(text):
            i += 1
        elif text == "env":
            i += 1
            while i < len(ws) and (ws[i].text.startswith("-") or ENV_ASSIGN_RE.match(ws[i].text)):
                i += 1
        elif text in WRAPPERS:
            i += 1
            while i < len(ws) and ws[i].text.startswith("-"):
                i += 1
        elif text == "srun":
            i += 1
            while i < len(ws) and ws[i].text.startswith("-"):
                opt = ws[i].text
                i += 1
                if opt == "--":
                    break
                if "=" in opt or opt in SRUN_FLAG_OPTS:
                    continue
                if opt in SRUN_VALUE_OPTS:
                    i += 1
                    continue
                return []  # an option not known here: its value could be mistaken for the program
        elif text == "timeout":
            i += 1
            while i < len(ws) and ws[i].text.startswith("-"):
                i += 1
            i += 1  # the duration
        elif text == "uv" and i + 1 < len(ws) and ws[i + 1].text == "run":
            i += 2
            while i < len(ws) and ws[i].text.startswith("-"):
                opt = ws[i].text
                i += 1
                if opt == "--":
                    break
                if opt in UV_VALUE_OPTS:
                    i += 1
        else:
            break
    return ws[i:]


def _tool(project: Project, key: str, args: list[Word], program: Word) -> Invocation:
    """The run of a configured tool: its own spec, then (for flags it lacks) the spec it forwards to."""
    tool = project.tools[key]
    specs, after = [tool.spec], []
    if any(w.text in tool.runs_other or w.text.split("=", 1)[0] in tool.runs_other for w in args):
        return Invocation(key, specs, _own_words(tool.spec, args), program=program)
    target = project.tools.get(tool.forwards or "")
    if target is not None and target is not tool:
        specs.append(target.spec)
        after = [target.spec]
    return Invocation(key, specs, args, after_dashdash=after, program=program)


def _own_words(spec: ArgSpec, args: list[Word]) -> list[Word]:
    """The words of ``args`` that ``spec``'s own options take (the rest belong to the program a ``runs_other``
    option names: not this tool's to judge)."""
    own, i = [], 0
    while i < len(args):
        text = args[i].text
        if text == "--":
            break
        found = lookup([spec], text.split("=", 1)[0]) if text.startswith("-") else None
        if found is not None:
            own.append(args[i])
            if takes_value(found[0]) and "=" not in text and i + 1 < len(args):
                own.append(args[i + 1])
                i += 1
        i += 1
    return own


def _configured(project: Project, ws: list[Word]) -> Invocation | None:
    """A configured tool whose command words (or another spelling of them) start ``ws``; the longest wins."""
    if not project.tools:
        return None
    first = posixpath.basename(ws[0].text)
    first = "python" if PYTHON_RE.match(first) else first
    texts = [first, *(w.text for w in ws[1:])]
    best: tuple[int, str] | None = None
    for key, tool in project.tools.items():
        for words in (tool.words, *tool.also):
            n = len(words)
            if tuple(texts[:n]) == words and (best is None or n > best[0]):
                best = (n, key)
    if best is None:
        return None
    return _tool(project, best[1], ws[best[0] :], ws[0])


def _for_script(project: Project, path: str, args: list[Word], program: Word) -> Invocation | None:
    for key, tool in project.tools.items():
        if tool.spec.path == path:
            return _tool(project, key, args, program)
    spec = script_spec(project, path)
    if spec is None:
        return None
    return Invocation(f"script:{path}", [spec], args, program=program)


def invocations(project: Project, ws: list[Word], base_dirs: tuple[str, ...] = ()) -> Iterator[Invocation]:
    """The known tools one simple command runs (a launcher runs a script: both are yielded)."""
    ws = _strip_prefixes(ws)
    if not ws:
        return
    program = ws[0]
    name = posixpath.basename(program.text)
    configured = _configured(project, ws)
    if configured is not None:
        yield configured
        return
    if name == "torchrun":
        if project.torchrun is not None:
            yield from _launcher_then_script(project, "torchrun", project.torchrun, ws[1:], base_dirs, program)
        return
    if name in ("isaaclab.sh", "isaaclab.bat") and len(ws) > 2 and ws[1].text in ("-p", "--python"):
        ws = [ws[0], *ws[2:]]
    elif not PYTHON_RE.match(name):
        return
    i = 1
    while i < len(ws) and ws[i].text.startswith("-") and ws[i].text not in ("-m", "-c", "-"):
        i += 2 if ws[i].text in PYTHON_VALUE_OPTS else 1
    if i >= len(ws) or ws[i].text in ("-c", "-"):
        return
    if ws[i].text == "-m":
        if i + 1 >= len(ws):
            return
        module = ws[i + 1].text
        rest = ws[i + 2 :]
        if module in TORCHRUN_MODULES and project.torchrun is not None:
            yield from _launcher_then_script(project, "torchrun", project.torchrun, rest, base_dirs, ws[i + 1])
        elif module in JAX_MODULES and project.jax_launcher is not None:
            yield from _launcher_then_script(project, "jax", project.jax_launcher, rest, base_dirs, ws[i + 1])
        return
    yield from _script(project, ws[i], ws[i + 1 :], base_dirs)


def lookup(specs: list[ArgSpec], flag: str) -> tuple[Option, ArgSpec] | None:
    """The option ``flag`` selects, trying each spec in order (with argparse's prefix matching)."""
    for spec in specs:
        opt = spec.by_flag().get(flag)
        if opt is not None:
            return opt, spec
    for spec in specs:
        if spec.allow_abbrev and flag.startswith("--"):
            hits = {id(o): o for f, o in spec.by_flag().items() if f.startswith(flag) and f.startswith("--")}
            if len(hits) == 1:
                return next(iter(hits.values())), spec
    return None


def takes_value(opt: Option) -> bool:
    return opt.takes_value and opt.nargs not in (0, "0")


def _launcher_then_script(
    project: Project, tool: str, spec: ArgSpec, rest: list[Word], base_dirs: tuple[str, ...], program: Word
) -> Iterator[Invocation]:
    """torchrun/JAX launcher options up to the first positional (the script), then the script's args."""
    i = 0
    while i < len(rest):
        text = rest[i].text
        if text == "--":
            i += 1
            break
        if not text.startswith("-") or text == "-":
            break
        found = lookup([spec], text.split("=", 1)[0])
        opt = found[0] if found else None
        i += 1
        if opt is not None and takes_value(opt) and "=" not in text and opt.nargs not in ("?", "*"):
            i += 1
        elif (
            opt is None
            and "=" not in text
            and i < len(rest)
            and not rest[i].text.startswith("-")
            and not rest[i].text.endswith(".py")
        ):
            i += 1  # an unknown option (reported by DR301): assume it took the value after it
        if opt is not None and opt.dest in ("module", "no_python"):
            # -m / --no-python: the "script" is a module or a program, not a repository file
            yield Invocation(tool, [spec], rest[:i], program=program)
            return
    yield Invocation(tool, [spec], rest[:i], program=program)
    if i < len(rest):
        yield from _script(project, rest[i], rest[i + 1 :], base_dirs)


def _script(project: Project, word: Word, args: list[Word], base_dirs: tuple[str, ...]) -> Iterator[Invocation]:
    """The run of a script named by ``word``; a repository-style path that does not exist is reported."""
    path = resolve_script(project, word.text, base_dirs)
    if path is not None:
        inv = _for_script(project, path, args, word)
        if inv:
            yield inv
    elif (
        REPO_SCRIPT_RE.match(word.text.removeprefix("./"))
        and word.text.removeprefix("./").split("/", 1)[0] in project.paths
    ):  # a path of this tree's layout
        yield Invocation("missing-script", [], [], program=word)
