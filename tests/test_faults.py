"""MGPU_LAB_FAULT on real 2-rank CPU jobs (plain torchrun, gloo, rsl_rl): each fault kind does what it says,
and the rank files the launcher's watchdog reads (beats, stacks, failures, run folder) show it.

Waits are for events (a fault's own log line, a stack dump naming a frame), each with a deadline; the
hung jobs are killed by the test and the process table is checked for leftovers."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from mgpu_testing import PYTHON, REPO, run
from mgpu_testing.training import (TRAIN, assert_one_line_error, job_processes, single_env, stop_job, supervised_env,
                                   torchrun_train, wait_for)

from mgpu_lab import heartbeat

ARGS = ("--num_envs", "8", "--max_iterations", "6", "--save_interval", "100")


def start(tmp_path: Path, fault: str) -> tuple[subprocess.Popen, Path, Path]:
    supervise = tmp_path / "supervise"
    log = tmp_path / "job.log"
    with open(log, "w") as out:  # a file, not a pipe: a hung job can never block on it
        proc = subprocess.Popen(torchrun_train("rsl_rl", tmp_path / "logs", 2, *ARGS), cwd=REPO,
                                env=supervised_env(supervise, MGPU_LAB_FAULT=fault), stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    return proc, supervise, log


def stack_of(supervise: Path, rank: int, needle: str) -> str | None:
    """Ask ``rank`` for its stacks (the launcher's signal) and return them once they contain ``needle``."""
    beat = heartbeat.read_beats(supervise).get(rank)
    if beat is None:
        return None
    path = heartbeat.stack_path(supervise, rank)
    path.write_text("")  # forget earlier dumps (faulthandler keeps writing at its own offset)
    os.kill(beat.pid, heartbeat.STACK_SIGNAL)
    text = path.read_text()
    return text if needle in text else None


@pytest.mark.parametrize("fault,marker,rank1_frame", [
    ("hang:1:2", "[FAULT] rank 1: injected hang at iteration 2: waiting forever", "wait_forever"),
    ("skip:1:2", "[FAULT] rank 1 skipped all_reduce, now before", "collective"),
])
def test_hang_and_skip_leave_rank0_blocked_in_a_collective(tmp_path, fault, marker, rank1_frame):
    proc, supervise, log = start(tmp_path, fault)
    try:
        wait_for(lambda: marker in log.read_text(), 300, marker, proc, log)
        # rank 0 ends up inside torch.distributed's all_reduce, waiting for rank 1
        rank0 = wait_for(lambda: stack_of(supervise, 0, "distributed_c10d.py"), 120,
                         "rank 0 blocked inside a collective", proc, log)
        assert "all_reduce" in rank0
        rank1 = wait_for(lambda: stack_of(supervise, 1, rank1_frame), 30, "rank 1's stack", proc, log)
        assert "distributed_c10d.py" not in rank1  # the culprit waits outside any collective
        beats = heartbeat.read_beats(supervise)
        assert beats[0].iteration == 2 and beats[0].phase == "train"
        expected = 1 if fault.startswith("hang") else 2  # hang fires before the iteration's beat; skip after
        assert beats[1].iteration == expected and beats[1].phase == "train"
        assert heartbeat.read_run_dir(supervise).parent == (tmp_path / "logs" / "rsl_rl" / "Toy-Cartpole-v0")
        assert proc.poll() is None, "the job must still be stuck"
    finally:
        stop_job(proc, supervise)


def test_a_raising_rank_records_its_failure(tmp_path):
    supervise = tmp_path / "supervise"
    proc = run(torchrun_train("rsl_rl", tmp_path / "logs", 2, *ARGS), timeout=400,
               env=supervised_env(supervise, MGPU_LAB_FAULT="raise:1:2"))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "RuntimeError: injected fault: raise at iteration 2 on rank 1 (MGPU_LAB_FAULT)" in out
    failures = heartbeat.read_failures(supervise)
    assert failures[1].detail == "RuntimeError: injected fault: raise at iteration 2 on rank 1 (MGPU_LAB_FAULT)"
    if 0 in failures:  # rank 0 may fail too (gloo: "connection closed by peer"), but only after rank 1
        assert failures[0].time >= failures[1].time, failures
    assert heartbeat.read_beats(supervise)[1].iteration == 1
    assert not job_processes(supervise)


def test_a_rank_killed_by_a_signal_stops_beating(tmp_path):
    supervise = tmp_path / "supervise"
    proc = run(torchrun_train("rsl_rl", tmp_path / "logs", 2, *ARGS), timeout=400,
               env=supervised_env(supervise, MGPU_LAB_FAULT="signal:1:2"))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "[FAULT] rank 1: sending itself SIGKILL at iteration 2 (MGPU_LAB_FAULT)" in out
    assert f"Signal {int(signal.SIGKILL)} (SIGKILL)" in out  # torchrun's own account of rank 1
    assert 1 not in heartbeat.read_failures(supervise)  # a SIGKILLed rank writes nothing (rank 0 may, later)
    beats = heartbeat.read_beats(supervise)
    assert beats[1].iteration == 1 and beats[1].phase == "train"
    assert not job_processes(supervise)


@pytest.mark.parametrize("fault,args,expected", [
    ("crash:1:2", (), "MGPU_LAB_FAULT: bad entry 'crash:1:2': expected KIND:RANK:ITER[:ARG]"),
    ("skip:0:1", ("--rl_library", "skrl", "--ml_framework", "jax"), "skip acts on torch.distributed collectives"),
])
def test_a_bad_fault_switch_is_one_line(tmp_path, fault, args, expected):
    cmd = [PYTHON, TRAIN, "--device", "cpu", *args, "--log_root", str(tmp_path / "logs")]
    assert_one_line_error(run(cmd, timeout=120, env=single_env(MGPU_LAB_FAULT=fault)), expected)
    assert not (tmp_path / "logs").exists()
