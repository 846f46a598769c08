"""Real jobs that fail, through the launcher and torchrun (2 CPU ranks on gloo): the terminal shows the
launcher's own report, never torchrun's ``ChildFailedError`` traceback, which is kept in the run folder."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from mgpu_testing import free_port, kill_group, loopback_env, seams_env
from mgpu_testing.launcher import CPU2, finish, fixture_args, launcher_cmd, start

from mgpu_lab.job.monitor import TORCHRUN_KEPT, TORCHRUN_TEXT

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the Linux process table"),
]


def launch(args: list[str], gpus: int | None = None, fault: str | None = None, **env: str) -> tuple[int, str]:
    full = loopback_env(**env)
    seams = {"gpus": gpus, "fault": fault}  # made-up GPUs for the launcher's check; a fault in the ranks
    if any(v is not None for v in seams.values()):
        full = seams_env(full, **{k: v for k, v in seams.items() if v is not None})
    proc = start(launcher_cmd(*args, "--master_port", str(free_port())), full)
    try:
        _, err = finish(proc, timeout=300)
    finally:
        kill_group(proc)
    return proc.returncode, err


def test_a_failing_rank_ends_with_the_launchers_report(tmp_path: Path) -> None:
    """An injected fault (the suite's seam) makes rank 1 raise at iteration 1; rank 0 then loses its peer. The one real-trainer run of a
    raising rank (the fixture's variants are tests/test_watchdog.py's)."""
    rc, err = launch(
        [*CPU2, "--num_envs", "8", "--max_iterations", "4", "--log_root", str(tmp_path / "logs")], fault="raise:1:1"
    )
    assert rc == 1, err[-3000:]
    assert "ChildFailedError" not in err and "Root Cause" not in err, err[-3000:]
    lines = err.rstrip().splitlines()
    report = lines[lines.index(next(x for x in lines if re.match(r"\[ERROR\] launcher: \d rank\(s\) failed", x))) :]
    assert report[0] == "[ERROR] launcher: 2 rank(s) failed of 2:", report
    assert re.fullmatch(
        r"\[ERROR\] launcher:   rank 1/2 on node \S+ \(pid \d+\): RuntimeError: injected fault: "
        r".* <- first",
        report[2],
    ), report
    assert re.fullmatch(
        r"\[ERROR\] launcher:   rank 0/2 on node \S+ \(pid \d+\): (its collective lost a peer "
        r"\(.*\) \(a consequence\)|stopped by torchrun .*)",
        report[1],
    ), report
    (run,) = (tmp_path / "logs" / "rsl_rl" / "Toy-Cartpole-v0").iterdir()
    kept = [x for x in report if x.startswith(TORCHRUN_KEPT)]
    assert kept == [f"{TORCHRUN_KEPT} {run / TORCHRUN_TEXT}"], report
    text = (run / TORCHRUN_TEXT).read_text(encoding="utf-8")
    assert "ChildFailedError" in text and "Root Cause" in text and "injected fault" in text
    # the last line names rank 1 and its exception; only a disagreeing torchrun "Root Cause" may follow it
    first = next(i for i, x in enumerate(report) if x.startswith("[ERROR] launcher: first failure: "))
    assert re.fullmatch(
        r"\[ERROR\] launcher: first failure: rank 1/2 on node \S+ \(pid \d+\): RuntimeError: "
        r"injected fault: .*",
        report[first],
    ), report
    after = report[first + 1 :]
    assert len(after) <= 1 and all(
        x.startswith('[ERROR] launcher: torchrun\'s "Root Cause" names rank 0, which failed after rank 1')
        for x in after
    ), report


def test_every_rank_refusing_the_same_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """Two made-up GPUs pass the launcher's check (the suite's seam); each rank then finds no CUDA device."""
    rc, err = launch(
        ["--num_gpus", "2", "--num_envs", "8", "--log_root", str(tmp_path / "logs")],
        gpus=2,
        CUDA_VISIBLE_DEVICES="0,1",
        TORCH_FR_DUMP_TEMP_FILE=str(tmp_path / "fr"),
        TORCH_NCCL_DEBUG_INFO_PIPE_FILE=str(tmp_path / "fr"),
    )
    assert rc == 2, err[-3000:]
    assert "ChildFailedError" not in err and "Traceback" not in err, err[-3000:]
    refusal = (
        "--distributed: no CUDA device is usable here (CUDA_VISIBLE_DEVICES=0,1); ranks train on the CPU only "
        "with --device cpu"
    )
    # every rank refuses, unless the first refusal ends the job before the other rank checks: torchrun stops it
    assert err.rstrip().splitlines()[-1] in (
        f"mgpu-lab train_multigpu: error: all 2 ranks refused: {refusal}",
        f"mgpu-lab train_multigpu: error: 1 of 2 ranks refused: {refusal} "
        "(torchrun stopped the other rank before it checked)",
    ), err[-3000:]
    assert not [line for line in err.splitlines() if line.startswith("[ERROR] launcher")], err[-3000:]
    assert not (tmp_path / "logs").exists()


@pytest.mark.parametrize("status", [3, 2])
def test_a_users_script_exiting_non_zero_is_reported_with_its_status(tmp_path: Path, status: int) -> None:
    """A user's ``--train_script`` that calls ``sys.exit(status)`` on rank 1: the report says its status, never "a
    usage error" (which only this project's own trainer's exit 2 is)."""
    pids = tmp_path / "pids"
    pids.mkdir()
    rc, err = launch(
        [*CPU2, *fixture_args("exit_rank.py", tmp_path / "jobs")],
        MGPU_LAB_FIXTURE_PID_DIR=str(pids),
        MGPU_LAB_FIXTURE_EXIT=str(status),
    )
    assert rc != 0, err[-3000:]
    assert re.search(rf"rank 1/2 on node \S+ \(pid \d+\): exited with status {status}\b", err), err[-3000:]
    assert "usage error" not in err, err[-3000:]
