"""Every ``isaaclab train_multigpu`` / ``isaaclab train`` example in the skills and docs must be true.

The examples are collected from the files themselves (markdown fences and inline code in
``skills/**/*.md``; code blocks, literal blocks and inline literals in ``docs/**/*.rst``), so a new
example is tested without anyone listing it. Launcher examples run with ``--dry_run`` (exit 0);
trainer examples are parsed by ``train.py``'s own ``build_parser()``.

The code is read with the checker's own parsers (``tools/skills``), so both see the same snippets.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest
from mgpu_testing import PYTHON, REPO, loopback_env, run
from mgpu_testing.docs import LAUNCHER, PROBE, TRAINER, load_script, rel


#: enough visible devices for every GPU-count check in the examples (the launcher never touches them)
EIGHT_GPUS = "0,1,2,3,4,5,6,7"

SHELL_STOPS = {"|", "||", "&&", ";", "&", ">", ">>", "<", "2>", "2>&1"}


# --------------------------------------------------------------------------- documents


@dataclass(frozen=True)
class Snippet:
    """A piece of code found in a document: a code block or an inline literal."""

    path: str  # repository-relative
    line: int
    text: str
    kind: str  # "block" | "inline"


def skill_markdown_files() -> list[Path]:
    """The skills' markdown, plus the README (its commands are the first a user runs)."""
    return sorted(p for p in (REPO / "skills").rglob("*.md") if p.is_file()) + [REPO / "README.md"]


def doc_rst_files() -> list[Path]:
    return sorted(p for p in (REPO / "docs").rglob("*.rst") if p.is_file() and "_build" not in p.parts)


# The checker's own parsers (markdown-it-py; docutils with Sphinx stand-ins; tools/skills is on pytest's
# pythonpath) find the code: one reading of the documents for the checker and for these tests.
from parse_markdown import parse_markdown
from parse_rst import parse_rst


def _snippets(doc) -> list[Snippet]:
    assert not doc.problems, [f.message for f in doc.problems]
    return [Snippet(doc.path, c.line, c.text, c.kind) for c in doc.code]


def markdown_snippets(path: Path) -> list[Snippet]:
    return _snippets(parse_markdown(rel(path), path.read_text(encoding="utf-8")))


def rst_snippets(path: Path) -> list[Snippet]:
    return _snippets(parse_rst(rel(path), path.read_text(encoding="utf-8")))


def all_snippets() -> list[Snippet]:
    out: list[Snippet] = []
    for p in skill_markdown_files():
        out.extend(markdown_snippets(p))
    for p in doc_rst_files():
        out.extend(rst_snippets(p))
    return out


# --------------------------------------------------------------------------- commands


@dataclass(frozen=True)
class Command:
    sub: str  # "train_multigpu" | "train" | "probe"
    args: tuple[str, ...]
    where: str  # path:line
    source: str  # the line as written (continuations joined)

    @property
    def id(self) -> str:
        return f"{self.where}:{' '.join(self.args)[:60]}"


def logical_lines(text: str) -> list[tuple[int, str]]:
    """Lines with backslash continuations joined; (offset of the first line, text)."""
    out: list[tuple[int, str]] = []
    buf: list[str] = []
    start = 0
    for i, raw in enumerate(text.splitlines()):
        if not buf:
            start = i
        stripped = raw.rstrip()
        if stripped.endswith("\\"):
            buf.append(stripped[:-1])
            continue
        buf.append(stripped)
        out.append((start, " ".join(part.strip() for part in buf)))
        buf = []
    if buf:
        out.append((start, " ".join(part.strip() for part in buf)))
    return out


_ISAACLAB = re.compile(r"\bisaaclab\s+train(_multigpu)?\b")


def commands_in(snippet: Snippet) -> list[Command]:
    """``isaaclab train[_multigpu]`` commands and NCCL-probe invocations in one snippet."""
    out: list[Command] = []
    for offset, line in logical_lines(snippet.text):
        if line.lstrip().startswith("#"):
            continue
        if not (_ISAACLAB.search(line) or "nccl_probe.py" in line):
            continue
        where = f"{snippet.path}:{snippet.line + offset}"
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError as exc:  # unbalanced quotes: a broken example
            out.append(Command("unparsable", (str(exc),), where, line))
            continue
        for i, tok in enumerate(tokens):
            sub = None
            if tok == "isaaclab" and i + 1 < len(tokens) and tokens[i + 1] in ("train", "train_multigpu"):
                sub, rest = tokens[i + 1], tokens[i + 2:]
            elif tok.endswith("nccl_probe.py"):
                sub, rest = "probe", tokens[i + 1:]
            if sub is None:
                continue
            args: list[str] = []
            for arg in rest:
                if arg in SHELL_STOPS:
                    break
                args.append(arg)
            out.append(Command(sub, tuple(args), where, line))
            break
    return out


def collect_commands() -> list[Command]:
    seen: set[tuple[str, tuple[str, ...], str]] = set()
    out: list[Command] = []
    for snip in all_snippets():
        for cmd in commands_in(snip):
            key = (cmd.sub, cmd.args, cmd.where)
            if key not in seen:
                seen.add(key)
                out.append(cmd)
    return out


COMMANDS = collect_commands()
LAUNCHER_CMDS = [c for c in COMMANDS if c.sub == "train_multigpu"]
TRAINER_CMDS = [c for c in COMMANDS if c.sub == "train"]
PROBE_CMDS = [c for c in COMMANDS if c.sub == "probe"]


# --------------------------------------------------------------------------- tests


def test_collection_finds_examples() -> None:
    """The collector must see the examples; zero found means it is broken, not that all is well."""
    assert LAUNCHER_CMDS, "no `isaaclab train_multigpu` command found in skills/ or docs/"
    assert TRAINER_CMDS, "no `isaaclab train` command found in skills/ or docs/"
    files = {c.where.rsplit(":", 1)[0] for c in LAUNCHER_CMDS}
    assert "skills/user/train-multi-gpu/reference.md" in files
    assert "docs/source/features/multi_gpu.rst" in files
    assert not [c for c in COMMANDS if c.sub == "unparsable"], [c for c in COMMANDS if c.sub == "unparsable"]


def test_collector_joins_continuations_and_strips_prefixes() -> None:
    snip = Snippet("x.md", 1, "# comment isaaclab train_multigpu --bogus\n"
                   "NCCL_DEBUG=INFO uv run isaaclab train_multigpu \\\n  --num_gpus 2 \\\n  --task T | tee out\n"
                   "uv run isaaclab train --seed 3  # trailing comment\n", "block")
    cmds = commands_in(snip)
    assert [(c.sub, c.args) for c in cmds] == [
        ("train_multigpu", ("--num_gpus", "2", "--task", "T")),
        ("train", ("--seed", "3")),
    ]
    assert cmds[0].where == "x.md:2" and cmds[1].where == "x.md:5"


@pytest.fixture(scope="module")
def trainer_parser():
    assert TRAINER.is_file(), f"{rel(TRAINER)} is missing"
    return load_script(TRAINER, "_mgpu_docs_train_script").build_parser()


@pytest.fixture(scope="module")
def launcher_parser():
    assert LAUNCHER.is_file(), f"{rel(LAUNCHER)} is missing"
    return load_script(LAUNCHER, "_mgpu_docs_launcher_script").build_parser()


def check_training_args(args: list[str], cmd: Command, parser, capsys) -> None:
    """train.py's own parser accepts ``args``, and the task named is a built-in one."""
    from mgpu_lab.tasks.catalog import TASKS

    try:
        ns = parser.parse_args(args)
    except SystemExit as exc:
        pytest.fail(f"{cmd.where}: `{cmd.source}` is rejected by train.py's parser (exit {exc.code}): "
                    f"{capsys.readouterr().err.strip()}")
    assert ns.task in TASKS, f"{cmd.where}: unknown task {ns.task!r}; built-in: {sorted(TASKS)}"


@pytest.mark.parametrize("cmd", LAUNCHER_CMDS, ids=lambda c: c.id)
def test_launcher_example_dry_runs(cmd: Command, launcher_parser, trainer_parser, capsys) -> None:
    assert LAUNCHER.is_file(), f"{rel(LAUNCHER)} is missing"
    env = loopback_env(CUDA_VISIBLE_DEVICES=EIGHT_GPUS)
    proc = run([PYTHON, str(LAUNCHER), "--dry_run", *cmd.args], timeout=60, env=env)
    assert proc.returncode == 0, (
        f"{cmd.where}: `{cmd.source}` failed with --dry_run (exit {proc.returncode}):\n{proc.stderr[-2000:]}"
    )
    assert "train.py" in proc.stdout, proc.stdout
    assert "Traceback" not in proc.stderr
    if {"-h", "--help"} & set(cmd.args):
        return  # a pointer to the help text, not a training command
    # what the launcher forwards must be valid for train.py too (--dry_run does not run it)
    launch_ns, forwarded = launcher_parser.parse_known_args(list(cmd.args))
    forwarded = [a for a in forwarded if a != "--"]
    check_training_args(["--rl_library", launch_ns.rl_library, *forwarded, "--distributed"], cmd,
                        trainer_parser, capsys)


@pytest.mark.parametrize("cmd", TRAINER_CMDS, ids=lambda c: c.id)
def test_trainer_example_parses(cmd: Command, trainer_parser, capsys) -> None:
    check_training_args(list(cmd.args), cmd, trainer_parser, capsys)


@pytest.fixture(scope="module")
def probe_module() -> ModuleType:
    assert PROBE.is_file(), f"{rel(PROBE)} is missing"
    return load_script(PROBE, "_mgpu_docs_nccl_probe")


@pytest.mark.parametrize("cmd", PROBE_CMDS, ids=lambda c: c.id)
def test_probe_example_parses(cmd: Command, probe_module: ModuleType, capsys) -> None:
    """Probe invocations are accepted by the probe's own parser and its own post-parse checks."""
    try:
        probe_module.validate(probe_module.build_parser().parse_args(list(cmd.args)))
    except (SystemExit, probe_module.UsageError) as exc:
        pytest.fail(f"{cmd.where}: `{cmd.source}` is rejected by the probe's parser: {exc} "
                    f"{capsys.readouterr().err.strip()}")
