"""The `isaaclab` click CLI: lists its subcommands and passes arguments through unchanged."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from mgpu_testing import REPO, run

ISAACLAB = shutil.which("isaaclab", path=str(Path(os.environ.get("VIRTUAL_ENV", REPO / ".venv")) / "bin")) or "isaaclab"


def test_help_lists_subcommands():
    res = run([ISAACLAB, "--help"], timeout=60)
    assert res.returncode == 0, res.stderr
    assert "train_multigpu" in res.stdout
    assert "\n  train " in res.stdout


def test_subcommand_help_is_the_scripts_own(tmp_path):
    res = run([ISAACLAB, "train_multigpu", "--help"], timeout=60)
    assert res.returncode == 0, res.stderr
    # argparse usage line of the launcher script, not click's
    assert res.stdout.startswith("usage: ")
    assert "--num_gpus" in res.stdout


def test_arguments_pass_through_unchanged():
    # --dry_run prints the resolved command: the forwarded arguments appear verbatim, in order.
    res = run([ISAACLAB, "train_multigpu", "--num_gpus", "2", "--device", "cpu", "--dry_run",
               "--task", "Toy-Cartpole-v0", "--seed", "7"], timeout=60)
    assert res.returncode == 0, res.stderr
    assert "--device cpu --task Toy-Cartpole-v0 --seed 7" in res.stdout


def test_missing_checkout_is_one_line_exit_2(tmp_path):
    env = dict(os.environ, MGPU_LAB_ROOT=str(tmp_path))
    res = run([ISAACLAB, "train", "--help"], timeout=60, env=env)
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert "not found" in res.stderr
