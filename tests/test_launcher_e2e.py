"""End-to-end launcher runs: real torchrun (and skrl JAX launcher) processes, gloo on CPU, loopback, free ports.

The runs launch small fixture scripts (tests/fixtures/launcher/) through the launcher's ``--train_script`` so that
each case shows one behaviour quickly; the first goes through the user's ``uv run mgpu-lab train_multigpu``.
The real train.py under the launcher is the session's healthy runs' (tests/mgpu_testing/runs.py), checked
in tests/test_rsl_rl.py, test_rl_games.py, test_skrl.py and test_skrl_jax.py. Every subprocess has a hard
timeout and is killed with its process group afterwards.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
from pathlib import Path

import pytest
from mgpu_testing import PYTHON, free_port, kill_group, run
from mgpu_testing.launcher import (
    CPU2,
    LAUNCHER,
    alive,
    finish,
    fixture_args,
    fixture_env,
    process_tree,
    start,
    wait_for_pids,
)

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the Linux process table"),
]


def uv_isaaclab() -> list[str]:
    """The user's command, ``uv run mgpu-lab train_multigpu``, with ``--frozen``: never re-sync the environment."""
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not on PATH")
    return [uv, "run", "--frozen", "--quiet", "mgpu-lab", "train_multigpu"]


# ---------------------------------------------------------------------------------------------- console and logs


def test_two_cpu_ranks_only_local_rank_0_on_console_and_tee_keeps_every_rank(tmp_path: Path) -> None:
    """The user's command: the console shows local rank 0 only, while ``--tee 3 --log_dir`` keeps every rank's
    stdout and stderr in per-rank files."""
    log_dir = tmp_path / "logs"
    cmd = [
        *uv_isaaclab(),
        *fixture_args("print_rank.py", tmp_path / "jobs"),
        *CPU2,
        "--master_port",
        str(free_port()),
        "--task",
        "Toy-Cartpole-v0",
        "--tee",
        "3",
        "--log_dir",
        str(log_dir),
    ]
    proc = run(cmd, timeout=300, env=fixture_env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.glob("rank*.pid")) == ["rank0.pid", "rank1.pid"]  # both ranks ran
    assert "[fixture] rank 0/2 local_rank 0 distributed=False" in proc.stdout  # a script's arguments, unchanged
    assert "argv=--device cpu --task Toy-Cartpole-v0\n" in proc.stdout
    assert "rank 0 stderr line" in proc.stderr
    assert "rank 1/2" not in proc.stdout + proc.stderr and "rank 1 stderr" not in proc.stderr
    for rank in (0, 1):
        stdout_logs = list(log_dir.glob(f"*/attempt_0/{rank}/stdout.log"))
        stderr_logs = list(log_dir.glob(f"*/attempt_0/{rank}/stderr.log"))
        assert len(stdout_logs) == 1 and len(stderr_logs) == 1, sorted(map(str, log_dir.rglob("*")))
        assert f"[fixture] rank {rank}/2" in stdout_logs[0].read_text()
        assert f"rank {rank} stderr line" in stderr_logs[0].read_text()


def test_log_all_ranks_shows_both_ranks(tmp_path: Path) -> None:
    cmd = [
        PYTHON,
        str(LAUNCHER),
        *fixture_args("print_rank.py", tmp_path / "jobs"),
        *CPU2,
        "--master_port",
        str(free_port()),
        "--log_all_ranks",
    ]
    proc = run(cmd, timeout=300, env=fixture_env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "[fixture] rank 0/2" in proc.stdout and "[fixture] rank 1/2" in proc.stdout
    assert "rank 0 stderr line" in proc.stderr and "rank 1 stderr line" in proc.stderr


# ---------------------------------------------------------------------------------------------- multi-node

# Two launchers forming one world (static and c10d rendezvous, one rank each) are the CPU forms of the documented
# two-node commands: tests/test_skill_commands.py::test_example_trains_in_its_cpu_form, whose parameter list
# test_every_documented_shape_is_run keeps complete.


# ---------------------------------------------------------------------------------------------- faults


# A failing torch rank, its name and the job's end with nothing left: tests/test_watchdog.py's
# test_first_failing_rank_is_named_even_when_torchrun_blames_another (the beat fixture, torchrun's kept "Root Cause")
# and tests/test_failure_report_e2e.py's real-trainer run.


def test_failing_jax_rank_is_reported_and_stops_the_others(tmp_path: Path) -> None:
    """skrl's JAX launcher drops its workers' exit codes; the launcher still exits non-zero and stops rank 0."""
    cmd = [
        PYTHON,
        str(LAUNCHER),
        *fixture_args("raise_rank.py", tmp_path / "jobs"),
        "--rl_library",
        "skrl",
        "--ml_framework",
        "jax",
        *CPU2,
        "--coordinator_address",
        f"127.0.0.1:{free_port()}",
    ]
    proc = start(cmd, fixture_env(tmp_path))
    try:
        _, err = finish(proc, timeout=240)  # rank 0 alone would sleep 120 s
    finally:
        kill_group(proc)
    assert proc.returncode == 1, err
    assert "a JAX rank failed" in err and "FixtureFailure: rank 1 fails on purpose" in err
    for pid_file in tmp_path.glob("rank*.pid"):
        assert not alive(int(pid_file.read_text()))


def test_hung_rank_is_killed_after_one_ctrl_c(tmp_path: Path) -> None:
    """Rank 1 ignores SIGINT and SIGTERM; one Ctrl-C plus the escalation still leaves nothing behind."""
    cmd = [
        PYTHON,
        str(LAUNCHER),
        *fixture_args("sleep_rank.py", tmp_path / "jobs"),
        *CPU2,
        "--master_port",
        str(free_port()),
        "--stubborn_rank",
        "1",
    ]
    proc = start(cmd, fixture_env(tmp_path, MGPU_LAB_KILL_GRACE_S="2"))
    try:
        workers = wait_for_pids(tmp_path, 2, proc)
        tree = process_tree(proc.pid)
        assert set(workers) <= set(tree)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = finish(proc, timeout=60)  # torchrun alone would wait 30 s for the stubborn rank
    finally:
        kill_group(proc)
    assert proc.returncode == 130
    assert "killing it" in err
    assert not [pid for pid in tree if alive(pid)], err[-3000:]
