"""A full disk during a run: one line, exit 1, checkpoints intact, never a freeze.

Threats covered here:

- the TensorBoard writer thread dies with ENOSPC (rl_games' tensorboardX thread then froze both ranks
  at epoch 99 forever; rsl_rl and skrl use tensorboard's writer thread): the run ends with one line
  naming the disk and the path, exit 1: tensorboard's thread through skrl, tensorboardX's through the
  reported case (rl_games, 2 ranks through the launcher; one process where no tmpfs can be mounted);
  rsl_rl's run on a full disk is the checkpoint case below (its next write fails, whichever thread makes it);
- a checkpoint write fails in the training thread: the same one line; the checkpoints written before
  are intact and no temp file is left.

The disk fills at a deterministic point: once the run's file of interest exists (the TensorBoard event
file, or the second checkpoint), the test fills the disk. Where the test can mount a 4 MiB tmpfs
(root, or mount permission), it writes a filler file until the tmpfs is full: a real ENOSPC. Elsewhere
it lowers the trainer's RLIMIT_FSIZE to 1 byte with prlimit (SIGXFSZ ignored), so every later write
that grows a file fails with EFBIG ("File too large"): the same failure paths, another errno. Either
way the next write of the run fails, whichever thread makes it.
"""

from __future__ import annotations

import errno
import resource
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from mgpu_testing import PYTHON, REPO, kill_group
from mgpu_testing.training import LAUNCHER, TASK, single_env, torchrun_rendezvous, train_cmd

from mgpu_lab.runs.checkpoint import load_torch

pytestmark = pytest.mark.e2e

TIMEOUT = 300


@dataclass
class Disk:
    """Where the run logs, and how the test makes its writes fail."""

    root: Path
    tmpfs: bool

    @property
    def failure(self) -> str:
        """The start of the one line the trainer prints, and the system's reason in it."""
        return "disk full: writing " if self.tmpfs else "write failed: writing "

    @property
    def reason(self) -> str:
        return "No space left on device" if self.tmpfs else "File too large"

    def fill(self, proc: subprocess.Popen) -> None:
        if not self.tmpfs:  # every write that grows a regular file now fails with EFBIG
            resource.prlimit(proc.pid, resource.RLIMIT_FSIZE, (1, 1))
            return
        chunk = b"\0" * 65536
        with open(self.root / "filler", "wb", buffering=0) as fh:
            while chunk:
                try:
                    fh.write(chunk)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC
                    chunk = chunk[: len(chunk) // 2]


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB tmpfs where the test may mount one, else a plain folder (the RLIMIT_FSIZE fallback)."""
    path = tmp_path / "disk"
    path.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(path)], capture_output=True, timeout=30
    )
    try:
        yield Disk(path, mounted.returncode == 0)
    finally:
        if mounted.returncode == 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


def ignore_sigxfsz() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write over RLIMIT_FSIZE then fails with EFBIG


def wait_for_glob(root: Path, pattern: str, proc: subprocess.Popen, err: list[str]) -> None:
    """Wait until a file matching ``pattern`` exists under ``root`` (the process must stay alive meanwhile)."""
    deadline = time.monotonic() + TIMEOUT
    while not list(root.rglob(pattern)):
        assert proc.poll() is None, "".join(err)[-3000:]
        assert time.monotonic() < deadline, f"no {pattern} within {TIMEOUT} s"
        time.sleep(0.1)


def run_until_full(
    disk: Disk, library: str, wait_for: str, *args: str, cmd: list[str] | None = None
) -> subprocess.CompletedProcess:
    """Start a long run logging on the disk, fill the disk once ``wait_for`` exists, and wait for the run to end.

    stderr is a pipe (drained by a thread), not a file: the RLIMIT_FSIZE fallback limits regular files only.
    """
    cmd = cmd or train_cmd(library, disk.root / "logs", "--num_envs", "4", "--max_iterations", "100000", *args)
    proc = subprocess.Popen(
        cmd,
        cwd=REPO,
        env=single_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=ignore_sigxfsz,
    )
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True)
    reader.start()
    try:
        wait_for_glob(disk.root, wait_for, proc, err)
        disk.fill(proc)
        proc.wait(timeout=TIMEOUT)  # a frozen run fails here
        reader.join(timeout=30)
    finally:
        kill_group(proc)
    return subprocess.CompletedProcess(cmd, proc.returncode, "", "".join(err))


def assert_disk_full_line(proc: subprocess.CompletedProcess, disk: Disk) -> None:
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert len(errors) == 1, proc.stderr[-3000:]
    assert errors[0].startswith(f"error: rank 0: {disk.failure}") and str(disk.root) in errors[0], errors[0]
    assert disk.reason in errors[0]


def test_tensorboard_writer_thread_dies_on_a_full_disk(small_disk):
    """skrl (tensorboard's writer thread, as rsl_rl's): no checkpoint is due (save_interval 100000), only the
    TensorBoard thread writes."""
    proc = run_until_full(small_disk, "skrl", "events.out.tfevents.*", "--save_interval", "100000")
    assert_disk_full_line(proc, small_disk)


def test_checkpoint_write_on_a_full_disk_keeps_earlier_checkpoints(small_disk):
    proc = run_until_full(small_disk, "rsl_rl", "model_1.pt", "--save_interval", "1")
    assert_disk_full_line(proc, small_disk)
    saved = sorted(small_disk.root.rglob("model_*.pt"))
    assert len(saved) >= 2
    for path in saved:
        assert {"actor_state_dict", "iter"} <= set(load_torch(path, "rsl_rl"))
    assert not list(small_disk.root.rglob(".model_*.tmp")), "a failed save must remove its temp file"


def test_two_rl_games_ranks_end_instead_of_freezing(small_disk):
    """The reported case: rl_games (tensorboardX's writer thread), 2 ranks, the disk fills; both ranks froze
    forever. Now: exit 1, one line. Without a tmpfs, one process (the RLIMIT_FSIZE fallback cannot reach the
    ranks torchrun starts)."""
    if not small_disk.tmpfs:
        proc = run_until_full(small_disk, "rl_games", "events.out.tfevents.*", "--save_interval", "100000")
        assert_disk_full_line(proc, small_disk)
        return
    cmd = [
        PYTHON,
        LAUNCHER,
        "--rl_library",
        "rl_games",
        "--num_gpus",
        "2",
        *torchrun_rendezvous(),
        "--task",
        TASK,
        "--device",
        "cpu",
        "--num_envs",
        "4",
        "--max_iterations",
        "100000",
        "--save_interval",
        "100000",
        "--log_root",
        str(small_disk.root / "logs"),
    ]
    proc = run_until_full(small_disk, "rl_games", "events.out.tfevents.*", cmd=cmd)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "error: rank 0: disk full: writing under " in proc.stderr
    # rank 1 either notices the lost peer first ("error: rank 1: another rank left the job (...)") or is
    # stopped by torchrun before it does: both are fine, a traceback is not
    assert "[rank0]: Traceback" not in proc.stderr and "[rank1]: Traceback" not in proc.stderr, proc.stderr[-3000:]
