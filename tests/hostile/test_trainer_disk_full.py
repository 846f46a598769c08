"""A full disk during a run: one line, exit 1, checkpoints intact, never a freeze.

Threats covered here (on a small tmpfs this test mounts; it needs root or mount permission, and is
skipped otherwise with the reason):

- the TensorBoard writer thread dies with ENOSPC (rl_games' tensorboardX thread then froze both ranks
  at epoch 99 forever; rsl_rl and skrl use tensorboard's writer thread): the run ends with one line
  naming the disk and the path, exit 1, for every library;
- a checkpoint write hits ENOSPC in the training thread: the same one line; the checkpoints written
  before are intact and no temp file is left.

The disk is filled at a deterministic point: after the run's first file of interest exists (the
TensorBoard event file, or the second checkpoint), the test writes a filler file until the tmpfs is
full. The next write of the run fails, whichever thread makes it.
"""

from __future__ import annotations

import errno
import subprocess
import time
from pathlib import Path

import pytest

from mgpu_lab.checkpoint import load_torch
from mgpu_testing import PYTHON, REPO, kill_group
from mgpu_testing.training import LAUNCHER, TASK, single_env, torchrun_rendezvous, train_cmd

TIMEOUT = 300


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB tmpfs (a real file system that fills up with ENOSPC)."""
    path = tmp_path / "disk"
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(path)],
                             capture_output=True, timeout=30)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


def fill(disk: Path) -> None:
    """Write a filler file until the file system is full."""
    chunk = b"\0" * 65536
    with open(disk / "filler", "wb", buffering=0) as fh:
        while True:
            try:
                fh.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                chunk = chunk[: len(chunk) // 2]
                if not chunk:
                    return


def wait_for_glob(root: Path, pattern: str, proc: subprocess.Popen, log: Path) -> None:
    """Wait until a file matching ``pattern`` exists under ``root`` (the process must stay alive meanwhile)."""
    deadline = time.monotonic() + TIMEOUT
    while not list(root.rglob(pattern)):
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, f"no {pattern} within {TIMEOUT} s"
        time.sleep(0.1)


def run_until_full(disk: Path, tmp_path: Path, library: str, wait_for: str, *args: str,
                   cmd: list[str] | None = None) -> subprocess.CompletedProcess:
    """Start a long run logging on ``disk``, fill the disk once ``wait_for`` exists, and wait for the run to end."""
    cmd = cmd or train_cmd(library, disk / "logs", "--num_envs", "4", "--max_iterations", "100000", *args)
    log = tmp_path / "stderr.log"
    with open(log, "w+") as err:
        proc = subprocess.Popen(cmd, cwd=REPO, env=single_env(), stdout=subprocess.DEVNULL, stderr=err,
                                start_new_session=True)
        try:
            wait_for_glob(disk, wait_for, proc, log)
            fill(disk)
            proc.wait(timeout=TIMEOUT)  # a frozen run fails here
        finally:
            kill_group(proc)
    return subprocess.CompletedProcess(cmd, proc.returncode, "", log.read_text())


def assert_disk_full_line(proc: subprocess.CompletedProcess, disk: Path) -> None:
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert len(errors) == 1, proc.stderr[-3000:]
    assert errors[0].startswith("error: rank 0: disk full: writing ") and str(disk) in errors[0], errors[0]
    assert "No space left on device" in errors[0]


@pytest.mark.parametrize("library", ["rsl_rl", "skrl", "rl_games"])
def test_writer_thread_dies_on_a_full_disk(small_disk, tmp_path, library):
    """No checkpoint is due (save_interval 100000, after rsl_rl's first): only the TensorBoard thread writes."""
    proc = run_until_full(small_disk, tmp_path, library, "events.out.tfevents.*", "--save_interval", "100000")
    assert_disk_full_line(proc, small_disk)
    for path in small_disk.rglob("model_*.pt"):  # rsl_rl saves iteration 0
        load_torch(path, "rsl_rl")


def test_checkpoint_write_on_a_full_disk_keeps_earlier_checkpoints(small_disk, tmp_path):
    proc = run_until_full(small_disk, tmp_path, "rsl_rl", "model_1.pt", "--save_interval", "1")
    assert_disk_full_line(proc, small_disk)
    saved = sorted(small_disk.rglob("model_*.pt"))
    assert len(saved) >= 2
    for path in saved:
        assert {"actor_state_dict", "iter"} <= set(load_torch(path, "rsl_rl"))
    assert not list(small_disk.rglob(".model_*.tmp")), "a failed save must remove its temp file"


def test_two_rl_games_ranks_end_instead_of_freezing(small_disk, tmp_path):
    """The reported case: rl_games, 2 ranks, the disk fills; both ranks froze forever. Now: exit 1, one line per rank."""
    cmd = [PYTHON, LAUNCHER, "--rl_library", "rl_games", "--num_gpus", "2", *torchrun_rendezvous(), "--task", TASK,
           "--device", "cpu", "--num_envs", "4", "--max_iterations", "100000", "--save_interval", "100000",
           "--log_root", str(small_disk / "logs")]
    proc = run_until_full(small_disk, tmp_path, "rl_games", "events.out.tfevents.*", cmd=cmd)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "error: rank 0: disk full: writing under " in proc.stderr
    # rank 1 either notices the lost peer first ("error: rank 1: another rank left the job (...)") or is
    # stopped by torchrun before it does: both are fine, a traceback is not
    assert "[rank0]: Traceback" not in proc.stderr and "[rank1]: Traceback" not in proc.stderr, proc.stderr[-3000:]
