"""What the skills and docs say about play, the all-ranks return and the resume refusal, run and matched.

- Every ``mgpu-lab play`` command written in skills/ and docs/ (found with the checker's own parsers, as
  tests/test_skill_commands.py finds the training commands) plays for real in its CPU form, against a copy of the
  session's healthy 2-rank run of its library.
- Every quoted line of these outputs matches the template that the real output matches in tests/test_play.py,
  tests/test_all_ranks_returns.py and tests/test_preflight.py (tests/mgpu_testing/output_lines.py).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from mgpu_testing import PYTHON, run
from mgpu_testing.output_lines import PLAY_HEADER, PLAY_SUMMARY, TEMPLATES, lines_matching
from mgpu_testing.runs import WITH_HEALTHY_RUN, copy_run
from mgpu_testing.training import TASK, single_env
from test_play import PARSER
from test_skill_commands import SHELL_STOPS, all_snippets, logical_lines

from mgpu_lab.train import play

PLAY = re.compile(r"\bmgpu-lab\s+play\b")
SNIPPETS = all_snippets()


def documented_play_commands() -> list[tuple[str, tuple[str, ...]]]:
    """(path:line, the arguments after ``mgpu-lab play``) for every play command in the skills and docs."""
    found: dict[tuple[str, ...], str] = {}
    for snip in SNIPPETS:
        for offset, text in logical_lines(snip.text):
            if text.lstrip().startswith("#") or not PLAY.search(text):
                continue
            tokens = shlex.split(text, comments=True)
            start = next(i for i, tok in enumerate(tokens) if tok == "play" and tokens[i - 1] == "mgpu-lab") + 1
            args: list[str] = []
            for tok in tokens[start:]:
                if tok in SHELL_STOPS:
                    break
                args.append(tok)
            found.setdefault(tuple(args), f"{snip.path}:{snip.line + offset}")  # one run per distinct command
    return [(where, args) for args, where in found.items()]


COMMANDS = documented_play_commands()


def option(args: list[str], name: str, default: str | None = None) -> str | None:
    return args[args.index(name) + 1] if name in args else default


def cpu_form(args: tuple[str, ...], log_root: Path, run_dir: Path) -> list[str]:
    """The command on CPU, a few envs and episodes, logging under ``log_root``; a ``RUN`` placeholder in
    --checkpoint becomes the copied run folder."""
    out: list[str] = []
    skip = False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg in ("--device", "--num_envs", "--num_episodes", "--log_root", "--checkpoint"):
            skip = True
            continue
        out.append(arg)
    checkpoint = option(list(args), "--checkpoint", "latest")
    if "RUN" in checkpoint:
        checkpoint = str(run_dir)
    episodes = min(int(option(list(args), "--num_episodes", "100")), 8)
    envs = min(int(option(list(args), "--num_envs", "64")), 8)
    return [
        *out,
        "--device",
        "cpu",
        "--num_envs",
        str(envs),
        "--num_episodes",
        str(episodes),
        "--log_root",
        str(log_root),
        "--checkpoint",
        checkpoint,
    ]


def test_the_docs_show_play_and_quote_each_line() -> None:
    assert len(COMMANDS) >= 4, COMMANDS
    files = {where.rsplit(":", 1)[0] for where, _ in COMMANDS}
    assert {"skills/user/train-multi-gpu/reference.md", "docs/source/features/multi_gpu.rst"} <= files


def quoted_lines(marker: str) -> list[tuple[str, str]]:
    """(path:line, text) of every line of a code block or inline literal that contains ``marker``."""
    out = []
    for snip in SNIPPETS:
        for offset, text in enumerate(snip.text.splitlines()):
            if marker in text:
                out.append((f"{snip.path}:{snip.line + offset}", text.strip()))
    return out


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda t: t.marker.strip(" :(["))
def test_every_quoted_line_has_the_printed_form(template) -> None:
    quotes = quoted_lines(template.marker)
    assert quotes, f"no quote of {template.text!r} found: the scan is broken or the docs lost it"
    wrong = [(where, text) for where, text in quotes if not template.quoted.fullmatch(text)]
    assert not wrong, wrong


@pytest.mark.e2e
@pytest.mark.timeout(WITH_HEALTHY_RUN)
@pytest.mark.parametrize(("where", "args"), COMMANDS, ids=[w for w, _ in COMMANDS])
def test_documented_play_command_plays_in_its_cpu_form(
    where: str, args: tuple[str, ...], tmp_path: Path, healthy_run, capsys
) -> None:
    if "--help" in args:  # the help itself: argparse prints it and exits 0
        with pytest.raises(SystemExit) as exited:
            PARSER().parse_args(list(args))
        assert exited.value.code == 0 and "--num_episodes" in capsys.readouterr().out
        return
    library = option(list(args), "--rl_library", "rsl_rl")
    jax = option(list(args), "--ml_framework") == "jax"
    assert option(list(args), "--task", TASK) == TASK, f"{where}: the healthy runs train {TASK}"
    logs = tmp_path / "logs"
    run_dir = copy_run(healthy_run(f"{library}-jax" if jax else library), logs)
    argv = cpu_form(args, logs, run_dir)
    if jax:  # JAX stays out of pytest's process
        proc = run([PYTHON, "-m", "mgpu_lab.cli", "play", *argv], timeout=300, env=single_env(JAX_PLATFORMS="cpu"))
        code, out = proc.returncode, proc.stdout + proc.stderr
    else:
        code = play.main(PARSER().parse_args(argv))
        out = capsys.readouterr().out
    assert code == 0, f"{where}: {argv}\n{out[-3000:]}"
    (header,) = lines_matching(PLAY_HEADER, out)
    assert header[0] == library and Path(header[1]).is_relative_to(run_dir), header
    (summary,) = lines_matching(PLAY_SUMMARY, out)
    assert summary[0] == option(argv, "--num_episodes")
