"""Through the launcher on 2 CPU ranks, one job's life: every rank's stack while it runs (mgpu-lab stacks), the
refusal of a second job that would write to its run, then SIGTERM, and continuing the SIGTERM'd run in its own
folder (--continue_run latest).

The job waits on the suite's seam ``stop_in_save`` (rank 0 writes a marker and stops itself inside the save of a
named checkpoint; :mod:`mgpu_testing.seams.sitecustomize`), never on a sleep. That a job asked for its stacks
trains on to its end is tests/test_any_script_e2e.py's (the same rank-side handler, around any script).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from mgpu_testing import PYTHON, REPO, kill_group, run, seams_env
from mgpu_testing.training import LAUNCHER, TASK, is_stopped, single_env, torchrun_rendezvous, wait_for, wait_for_file

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux signals")]

TIMEOUT = 240


def launcher_cmd(log_root: Path, *args: str) -> list[str]:
    return [
        PYTHON,
        LAUNCHER,
        "--num_gpus",
        "2",
        *torchrun_rendezvous(),
        "--rl_library",
        "rsl_rl",
        "--task",
        TASK,
        "--device",
        "cpu",
        "--num_envs",
        "8",
        "--save_interval",
        "1",
        "--log_root",
        str(log_root),
        *args,
    ]


def start_stopping_in_save(
    log_root: Path, tmp_path: Path, stop_at: str, *args: str, **env: str
) -> tuple[subprocess.Popen, Path, Path]:
    """Start a job whose rank 0 stops inside the save of ``stop_at``; wait until it has stopped there."""
    marker = tmp_path / "stopped.json"
    log = tmp_path / "first.log"
    proc = subprocess.Popen(
        launcher_cmd(log_root, *args),
        cwd=REPO,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=seams_env(single_env(**env), stop_in_save=str(marker), stop_in_save_name=stop_at),
    )
    wait_for_file(marker, proc, TIMEOUT, log)
    rank0 = json.loads(marker.read_text())["pid"]
    wait_for(lambda: is_stopped(rank0), 30, "rank 0 stopped in the save", proc, log)
    return proc, log, Path(json.loads(marker.read_text())["target"])


def purge_steps(events: Path) -> list[int]:
    """Steps at which an events file tells TensorBoard to drop earlier files' later steps (SessionLog START)."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.compat.proto.event_pb2 import SessionLog

    return [
        e.step
        for e in EventFileLoader(str(events)).Load()
        if e.HasField("session_log") and e.session_log.status == SessionLog.START
    ]


def test_continue_a_sigtermed_run_in_its_own_folder(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    first, log, target = start_stopping_in_save(
        logs, tmp_path, "model_2.pt", "--max_iterations", "100000", MGPU_LAB_KILL_GRACE_S="2"
    )
    run_dir = target.parent
    try:
        assert_stacks_of_the_live_job(logs, run_dir)
        # a second job against the live one: refused before any rank starts, nothing created
        second = run(
            launcher_cmd(logs, "--max_iterations", "6", "--continue_run", "latest"), timeout=TIMEOUT, env=single_env()
        )
        assert second.returncode == 2, second.stderr[-3000:]
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1 and f"--continue_run latest: {run_dir} is being written by job" in lines[0], lines
        assert "Traceback" not in second.stderr and "launcher: python" not in second.stderr  # no rank started
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=TIMEOUT) == 128 + signal.SIGTERM, log.read_text()[-3000:]
    finally:
        kill_group(first)
    text = log.read_text()
    assert "[INFO] stacks: rank 1/2" in text and "(the job goes on)" in text  # the launcher's terminal too
    assert sorted(p.name for p in (logs / "rsl_rl" / TASK).iterdir()) == [run_dir.name]
    assert (run_dir / "model_1.pt").is_file() and not (run_dir / "model_2.pt").exists()
    events_before = set(run_dir.glob("events.out.tfevents.*"))

    # the first job's lock is stale (its rank 0 is dead): continue in the same folder
    third = run(
        launcher_cmd(logs, "--max_iterations", "4", "--continue_run", "latest"), timeout=TIMEOUT, env=single_env()
    )
    out = third.stdout + third.stderr
    assert third.returncode == 0, out[-4000:]
    assert f"[INFO] continuing {run_dir} at iteration 2 (from {run_dir / 'model_1.pt'})" in out
    assert f"[INFO] checkpoint: {run_dir / 'model_3.pt'}" in out
    assert sorted(p.name for p in (logs / "rsl_rl" / TASK).iterdir()) == [run_dir.name]
    assert (run_dir / "model_2.pt").is_file() and (run_dir / "model_3.pt").is_file()
    (events,) = set(run_dir.glob("events.out.tfevents.*")) - events_before  # TensorBoard goes on in the folder
    assert purge_steps(events) == [2]  # and drops what the killed job logged from iteration 2 on
    assert json.loads((run_dir / "run.json").read_text())["library"] == "rsl_rl"
    assert not (run_dir / "run.lock").exists()  # released at the end


def assert_stacks_of_the_live_job(logs: Path, run_dir: Path) -> None:
    """``mgpu-lab stacks latest`` on the job whose rank 0 is stopped in a save: rank 0 cannot answer, rank 1 does."""
    asked = run(
        [PYTHON, "-m", "mgpu_lab.cli", "stacks", "latest", "--log_root", str(logs), "--timeout", "120"],
        timeout=TIMEOUT,
        env=single_env(),
    )
    assert asked.returncode == 0, asked.stdout + asked.stderr
    summary = [ln for ln in asked.stdout.splitlines() if ln.startswith("[INFO] stacks: rank ")]
    assert len(summary) == 2, asked.stdout
    assert summary[0].startswith("[INFO] stacks: rank 0/2") and "not responding" in summary[0]  # stopped in save
    assert summary[1].startswith("[INFO] stacks: rank 1/2") and (
        "waiting in " in summary[1] or "outside any collective" in summary[1]
    ), summary
    (folder,) = (run_dir / "stacks").iterdir()
    assert "train.py" in (folder / "stack_rank1.txt").read_text()
    assert "did not answer" in (folder / "stack_rank0.txt").read_text()
    assert (folder / "summary.txt").read_text().splitlines() == summary
