"""Per-rank timing with the built-in trainer: a rank held slow on CPU is named by ``mgpu-lab timing``.

Real launcher, real train.py (rsl_rl), 2 gloo ranks. ``--rehearse_fault slow:1:1:1.0`` makes rank 1 sleep a second
at the start of every iteration from iteration 1 on: the fault itself, deterministic; rank 0 then waits for it
in the update's all-reduce. The test asserts the rank named, never a duration.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from mgpu_testing import free_port, kill_group, loopback_env
from mgpu_testing.launcher import CPU2, finish, launcher_cmd, start

from mgpu_lab.cli import main as mgpu_lab_cli
from mgpu_lab.health import timing

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the Linux process table"),
]


def test_a_rank_held_slow_in_the_built_in_trainer_is_named(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    proc = start(
        launcher_cmd(
            *CPU2,
            "--master_port",
            str(free_port()),
            "--num_envs",
            "8",
            "--max_iterations",
            "7",
            "--log_root",
            str(logs),
            "--rehearse_fault",
            "slow:1:1:1.0",
        ),
        loopback_env(),
    )
    try:
        _, err = finish(proc, timeout=400)
    finally:
        kill_group(proc)
    assert proc.returncode == 0, err[-3000:]
    (run_dir,) = logs.glob("rsl_rl/*/*")
    windows = timing.read(run_dir)
    assert sorted(windows) == [0, 1]
    assert [w.iteration for w in windows[0]] == [None, *range(7)]  # start-up, then one window per iteration
    result = CliRunner().invoke(mgpu_lab_cli, ["timing", "latest", "--log_root", str(logs)])
    assert result.exit_code == 0, result.output
    assert "[WARN] timing: rank 1 is persistently slower than the others" in result.output, result.output
