"""Injected faults (the suite's seam, tests/mgpu_testing/seams) on a real 2-rank CPU job (plain torchrun, gloo,
rsl_rl): ``skip`` does what it says, and the rank files the launcher's watchdog reads (beats, stacks, run folder)
show it; a fault the trainer cannot honour is one line.

The other kinds each have their one real end-to-end test where their consequence is checked: ``hang`` in
tests/test_watchdog.py::test_real_trainer_hang_is_named, ``raise`` in
tests/test_failure_report_e2e.py::test_a_failing_rank_ends_with_the_launchers_report, ``signal`` (SIGKILL) in
tests/test_resume.py::test_a_restarted_group_resumes_its_own_run; their grammar and timing (before the
iteration's beat, first attempt only) in tests/test_rank_progress.py, in-process.

Waits are for events (a fault's own log line, a stack dump naming a frame), each with a deadline; the
hung job is killed by the test and the process table is checked for leftovers."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from mgpu_testing import REPO, seams_env
from mgpu_testing.training import (
    assert_one_line_error,
    single_env,
    stop_job,
    supervised_env,
    torchrun_train,
    train_in_process,
    wait_for,
)

from mgpu_lab.health import heartbeat

ARGS = ("--num_envs", "8", "--max_iterations", "6", "--save_interval", "100")


def start(tmp_path: Path, fault: str) -> tuple[subprocess.Popen, Path, Path]:
    supervise = tmp_path / "supervise"
    log = tmp_path / "job.log"
    with open(log, "w") as out:  # a file, not a pipe: a hung job can never block on it
        proc = subprocess.Popen(
            torchrun_train("rsl_rl", tmp_path / "logs", 2, *ARGS),
            cwd=REPO,
            env=seams_env(supervised_env(supervise), fault=fault),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    return proc, supervise, log


def stack_of(supervise: Path, rank: int, needle: str) -> str | None:
    """Ask every rank for its stack the way the launcher's watchdog does (:meth:`Watchdog.diagnose`: the signal,
    then the dump each rank wrote, waited for) and return ``rank``'s if it contains ``needle``."""
    from mgpu_lab.health.watchdog import Watchdog

    report = Watchdog(supervise, 0, 0).diagnose(time.monotonic())
    st = next((st for st in report.ranks if st.rank == rank), None)
    return st.stack if st is not None and st.responding and needle in st.stack else None


@pytest.mark.e2e
def test_skip_leaves_rank0_blocked_in_a_collective(tmp_path):
    fault, marker, rank1_frame = "skip:1:2", "[FAULT] rank 1 skipped all_reduce, now before", "collective"
    proc, supervise, log = start(tmp_path, fault)
    try:
        wait_for(lambda: marker in log.read_text(), 300, marker, proc, log)
        # rank 0 ends up inside torch.distributed's all_reduce, waiting for rank 1
        rank0 = wait_for(
            lambda: stack_of(supervise, 0, "distributed_c10d.py"), 120, "rank 0 blocked inside a collective", proc, log
        )
        assert "all_reduce" in rank0
        rank1 = wait_for(lambda: stack_of(supervise, 1, rank1_frame), 30, "rank 1's stack", proc, log)
        assert "distributed_c10d.py" not in rank1  # the culprit waits outside any collective
        beats = heartbeat.read_beats(supervise)
        assert beats[0].iteration == 2 and beats[0].phase == "train"
        assert beats[1].iteration == 2 and beats[1].phase == "train"  # skip acts after the iteration's beat
        assert heartbeat.read_run_dir(supervise).parent == (tmp_path / "logs" / "rsl_rl" / "Toy-Cartpole-v0")
        assert proc.poll() is None, "the job must still be stuck"
    finally:
        stop_job(proc, supervise)


def test_a_fault_the_trainer_cannot_honour_is_one_line(tmp_path):
    """train.py's parser and the trainer in this process: skip under JAX is refused before torch is needed."""
    argv = ["--device", "cpu", "--rl_library", "skrl", "--ml_framework", "jax", "--log_root", str(tmp_path / "logs")]
    assert_one_line_error(
        train_in_process(argv, single_env(), faults="skip:0:1"), "skip acts on torch.distributed collectives"
    )
    assert not (tmp_path / "logs").exists()
