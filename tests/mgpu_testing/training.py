"""Shared pieces of the library trainer tests (rsl_rl, rl_games, skrl torch and JAX).

Commands for train.py and the launcher, train.py in pytest's own process (:func:`train_in_process`, for
refusals and single-process trainings: no interpreter and library imports to pay per run), the environment
of a single process, the checks on the log lines every run prints, and the SIGKILL-while-saving scenario.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mgpu_testing import PYTHON, REPO, free_port, kill_group, loopback_env, seams_env

TRAIN = str(REPO / "scripts" / "reinforcement_learning" / "train.py")
LAUNCHER = str(REPO / "scripts" / "reinforcement_learning" / "train_multigpu.py")
TASK = "Toy-Cartpole-v0"
DIGEST = re.compile(r"^\[INFO\] rank (\d+)/(\d+): parameter digest ([0-9a-f]{64})$", re.M)
SYNC = re.compile(r"^\[INFO\] rank (\d+)/(\d+): parameters synchronized$", re.M)
# Not anchored at line start: another rank's unterminated output may precede a line in the shared pipe.
DIGEST_ANYWHERE = re.compile(r"\[INFO\] rank (\d+)/(\d+): parameter digest ([0-9a-f]{64})$", re.M)
SYNC_ANYWHERE = re.compile(r"\[INFO\] rank (\d+)/(\d+): parameters synchronized$", re.M)
TIME = re.compile(r"^\[INFO\] training time: [0-9.]+ s$", re.M)
THROUGHPUT = re.compile(r"^\[INFO\] throughput: (\d+) env-steps/s over (\d+) rank\(s\)$", re.M)

RANK_VARIABLES = ("LOCAL_RANK", "RANK", "WORLD_SIZE", "JAX_LOCAL_RANK", "JAX_RANK", "JAX_WORLD_SIZE")


def single_env(**extra: str) -> dict[str, str]:
    """The loopback environment (plus ``extra``) without any launcher's rank variables."""
    env = loopback_env(**extra)
    for name in RANK_VARIABLES:
        env.pop(name, None)
    return env


def train_in_process(
    argv: list[str], env: dict[str, str] | None = None, *, hide: tuple[str, ...] = (), faults: str = ""
) -> subprocess.CompletedProcess:
    """train.py's own parser and :func:`mgpu_lab.train.trainer.main`, in this process, as if run as a command in
    the repository with environment ``env``: (exit status, stdout, stderr). ``env`` is the whole environment of
    the call (default: this process's without the launcher's rank variables); ``OMP_NUM_THREADS`` in it sets
    torch's thread count, as it would in a process. ``hide`` names modules that are "not installed" for the call;
    ``faults`` (``KIND:RANK:ITER[:ARG],...``) are passed to the trainer.

    Refusals and whole single-process trainings both run here; what the call changes in the process is put back
    afterwards and what only a process can do is refused (:func:`mgpu_testing.in_process.run_in_process`)."""
    from mgpu_lab.health.rank_progress import parse_faults
    from mgpu_lab.train import trainer
    from mgpu_testing.docs import load_script
    from mgpu_testing.in_process import refuse_process_only, run_in_process

    if env is None:
        env = {k: v for k, v in os.environ.items() if k not in RANK_VARIABLES}
    refuse_process_only(env, faults)
    parser = load_script(Path(TRAIN), "_mgpu_train_in_process").build_parser()
    code, out, err = run_in_process(
        lambda: trainer.main(parser.parse_args(argv), parse_faults(faults)), env, cwd=REPO, hide=hide
    )
    return subprocess.CompletedProcess(argv, code, out, err)


def tensorboard_iterations(run_dir: Path) -> int:
    """How many values the TensorBoard files under ``run_dir`` (rank 0's) hold for the scalar written most often:
    every library writes some scalar once per iteration, so after a run that ended normally this is its iteration
    count, nothing lost when the rank's process left (:mod:`mgpu_lab.core.leave`; rl_games' writer keeps all of it
    buffered until it is finalized)."""
    # tensorboard (the libraries' own dependency): only the tests that read a run's files load it
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    written: Counter[str] = Counter()
    for path in run_dir.rglob("events.out.tfevents.*"):
        for event in EventFileLoader(str(path)).Load():
            written.update(value.tag for value in event.summary.value)
    return max(written.values(), default=0)


def train_args(library: str, log_root: Path, *args: str) -> list[str]:
    """train.py's arguments on CPU for ``library`` logging under ``log_root`` (for :func:`train_in_process`)."""
    return ["--rl_library", library, "--device", "cpu", *args, "--log_root", str(log_root)]


def train_cmd(library: str, log_root: Path, *args: str) -> list[str]:
    """A train.py command on CPU for ``library`` logging under ``log_root``."""
    return [PYTHON, TRAIN, *train_args(library, log_root, *args)]


def patterns(anchored: bool) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """The (sync, digest) line patterns, anchored at line start or not."""
    return (SYNC, DIGEST) if anchored else (SYNC_ANYWHERE, DIGEST_ANYWHERE)


def assert_one_rank_output(proc: subprocess.CompletedProcess, *, anchored: bool = True) -> str:
    """A successful single-process run: one sync line, time, throughput over 1 rank, one digest."""
    sync, digest = patterns(anchored)
    out = proc.stdout
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sync.findall(out) == [("0", "1")]
    assert TIME.search(out) and THROUGHPUT.search(out).group(2) == "1"
    assert len(digest.findall(out)) == 1
    return out


def assert_two_rank_output(out: str, task_root: Path, *, anchored: bool = True) -> Path:
    """Both ranks synchronized and ended equal, rank 0 timed it, and only rank 0 wrote (one run folder)."""
    sync, digest = patterns(anchored)
    assert sorted(sync.findall(out)) == [("0", "2"), ("1", "2")], out[-4000:]
    assert len(TIME.findall(out)) == 1
    throughput = THROUGHPUT.findall(out)
    assert len(throughput) == 1 and throughput[0][1] == "2"
    digests = {rank: value for rank, _, value in digest.findall(out)}
    assert set(digests) == {"0", "1"}, out[-4000:]
    assert digests["0"] == digests["1"], "ranks ended with different parameters"
    run_dirs = list(task_root.iterdir())
    assert len(run_dirs) == 1, "only rank 0 may write logs"
    return run_dirs[0]


def torchrun_rendezvous() -> list[str]:
    """Launcher flags for 2 gloo ranks on a free loopback port, every rank's output kept."""
    return ["--log_all_ranks", "--master_addr", "127.0.0.1", "--master_port", str(free_port())]


def assert_one_line_error(proc: subprocess.CompletedProcess, expected: str) -> None:
    """Exit 2 with a single stderr line containing ``expected`` and no traceback."""
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def wait_for_file(path: Path, proc: subprocess.Popen, deadline: float, log: Path | None = None) -> None:
    """Wait until ``path`` exists (a marker the process writes), failing if the process exits or ``deadline`` s pass."""
    end = time.monotonic() + deadline
    while not path.exists():
        detail = log.read_text()[-3000:] if log is not None and log.exists() else ""
        assert proc.poll() is None, f"exited with {proc.returncode} before writing {path.name}\n{detail}"
        assert time.monotonic() < end, f"no {path.name} within {deadline} s\n{detail}"
        time.sleep(0.05)


def is_stopped(pid: int) -> bool:
    """True when the process is stopped by a signal (state T in /proc/PID/stat)."""
    from mgpu_lab.core import procs

    return procs.stopped(pid)


def sigkill_while_saving(
    library: str,
    tmp_path: Path,
    pattern: str,
    loader: Callable[[Path], Any],
    *,
    stop_at: str,
    deadline: float = 300,
    final_pattern: str | None = None,
) -> None:
    """Train with a checkpoint every iteration, SIGKILL the process group mid-save, load every checkpoint.

    The suite's seam ``stop_in_save`` (:mod:`mgpu_testing.seams.sitecustomize`) stops it with SIGSTOP inside the save of
    the file named ``stop_at`` (an fnmatch pattern), after the temp file is complete and before
    ``os.replace``, and writes a marker naming both files. The test waits for the marker, checks that
    the process is stopped there, kills the group, and requires: the target was never created, the
    temp file is still there but matches no checkpoint pattern, and every file matching
    ``final_pattern`` (default ``pattern``) loads with ``loader`` (which must fail on a torn file),
    at least 3 of them.
    """
    marker = tmp_path / "stopped-in-save.json"
    logs = tmp_path / "logs"
    cmd = train_cmd(library, logs, "--num_envs", "8", "--max_iterations", "100000", "--save_interval", "1")
    env = seams_env(single_env(), stop_in_save=str(marker), stop_in_save_name=stop_at)
    log_path = tmp_path / "stderr.log"
    log = open(log_path, "w+")  # noqa: SIM115 - closed in the finally below; a file, not a pipe: a chatty run cannot block on it
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    try:
        wait_for_file(marker, proc, deadline, log_path)
        stop_end = time.monotonic() + 30  # the marker is written right before the SIGSTOP
        while not is_stopped(proc.pid) and time.monotonic() < stop_end:
            time.sleep(0.01)
        assert is_stopped(proc.pid), "the trainer wrote the marker but did not stop in the save"
        info = json.loads(marker.read_text())
        tmp, target = Path(info["tmp"]), Path(info["target"])
        assert tmp.is_file() and tmp.stat().st_size > 0, "the temp file should be complete at the stop"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        kill_group(proc)
        log.close()
    assert not target.exists(), "killed before os.replace: the checkpoint must not exist"
    assert tmp.exists(), "the temp file of the interrupted save is left behind (and must not count)"
    saved = list(logs.rglob(final_pattern or pattern))
    assert tmp not in saved
    assert len(saved) >= 3, saved
    for path in saved:
        loader(path)


# --- plain torchrun jobs with supervision files (faults, restarts, per-rank lines) --------------------


def torchrun_train(library: str, log_root: Path, nproc: int, *args: str, max_restarts: int = 0) -> list[str]:
    """train.py on ``nproc`` CPU ranks under plain ``python -m torch.distributed.run`` (no launcher):
    a c10d rendezvous on a free loopback port, so restarted worker groups can meet again."""
    return [
        PYTHON,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        str(nproc),
        "--rdzv_backend",
        "c10d",
        "--rdzv_endpoint",
        f"127.0.0.1:{free_port()}",
        "--max_restarts",
        str(max_restarts),
        TRAIN,
        "--rl_library",
        library,
        "--device",
        "cpu",
        "--task",
        TASK,
        *args,
        "--log_root",
        str(log_root),
        "--distributed",
    ]


def supervised_env(supervise_dir: Path, **extra: str) -> dict[str, str]:
    """single_env plus the supervision folder (which also tags every process of the job, see job_processes)."""
    supervise_dir.mkdir(parents=True, exist_ok=True)
    return single_env(MGPU_LAB_SUPERVISE_DIR=str(supervise_dir), **extra)


def job_processes(supervise_dir: Path) -> list[int]:
    """Live processes whose environment names ``supervise_dir`` as their supervision folder."""
    from mgpu_lab.core import procs

    return procs.with_env("MGPU_LAB_SUPERVISE_DIR", str(supervise_dir))


def wait_for(
    condition: Callable[[], Any],
    deadline: float,
    what: str,
    proc: subprocess.Popen | None = None,
    log: Path | None = None,
) -> Any:
    """Poll ``condition`` until it returns something truthy; fail naming ``what`` after ``deadline`` s or when
    ``proc`` ended first."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(0.1)
    tail = log.read_text(errors="replace")[-4000:] if log is not None and log.exists() else ""
    raise AssertionError(f"never happened: {what}\n{tail}")


def stop_job(proc: subprocess.Popen, supervise_dir: Path) -> None:
    """End a torchrun job started by a test: SIGTERM to torchrun (which stops its workers; they run in
    sessions of their own, out of reach of a process-group kill), then SIGKILL whatever is left of it."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass
    kill_group(proc)
    for pid in job_processes(supervise_dir):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    wait_for(lambda: not job_processes(supervise_dir), 30, "every process of the job gone")


class OpensMarker:
    """Unpickling this calls open(path, "w"): the stand-in for any code a crafted checkpoint could run."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))
