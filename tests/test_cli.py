"""The `mgpu-lab` click CLI: lists its subcommands and passes arguments through unchanged."""

from __future__ import annotations

import os
import re
import shlex
import shutil
from pathlib import Path

from mgpu_testing import PYTHON, REPO, run

ISAACLAB = shutil.which("mgpu-lab", path=str(Path(os.environ.get("VIRTUAL_ENV", REPO / ".venv")) / "bin")) or "mgpu-lab"


def test_help_lists_exactly_the_subcommands_with_their_help():
    """``mgpu-lab --help`` (the installed console script) lists every subcommand once, with its own help."""
    from mgpu_lab.cli import ENTRY_SCRIPTS, main

    res = run([ISAACLAB, "--help"], timeout=60)
    assert res.returncode == 0, res.stderr
    section = res.stdout.split("Commands:\n", 1)[1]
    listed = re.findall(r"^  (\S+)\s", section, re.M)
    assert listed == sorted(main.commands) and set(ENTRY_SCRIPTS) | {"stacks", "timing", "trace"} == set(listed), listed
    flat = " ".join(section.split())
    for name, (_path, help_text) in ENTRY_SCRIPTS.items():
        assert f"{name} {help_text}" in flat, name


def test_subcommand_help_is_the_scripts_own(tmp_path):
    res = run([ISAACLAB, "train_multigpu", "--help"], timeout=60)
    assert res.returncode == 0, res.stderr
    # argparse usage line of the launcher script, not click's
    assert res.stdout.startswith("usage: ")
    assert "--num_gpus" in res.stdout


def test_arguments_pass_through_unchanged():
    """``mgpu-lab train_multigpu ARGS`` is the launcher with ARGS: the same command as the launcher's own dry run,
    forwarded arguments verbatim and in order."""
    args = ["--num_gpus", "2", "--device", "cpu", "--dry_run", "--task", "Toy-Cartpole-v0", "--seed", "7"]
    res = run([ISAACLAB, "train_multigpu", *args], timeout=60)
    direct = run([PYTHON, str(REPO / "scripts" / "reinforcement_learning" / "train_multigpu.py"), *args], timeout=60)
    assert res.returncode == direct.returncode == 0, res.stderr + direct.stderr
    via_cli = shlex.split(res.stdout.strip().splitlines()[-1])
    assert via_cli == shlex.split(direct.stdout.strip().splitlines()[-1])
    assert via_cli[-9:] == [
        "--rl_library",
        "rsl_rl",
        "--device",
        "cpu",
        "--task",
        "Toy-Cartpole-v0",
        "--seed",
        "7",
        "--distributed",
    ], via_cli


def test_missing_checkout_is_one_line_exit_2(tmp_path):
    env = dict(os.environ, MGPU_LAB_ROOT=str(tmp_path))
    res = run([ISAACLAB, "train", "--help"], timeout=60, env=env)
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert "not found" in res.stderr
