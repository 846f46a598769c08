"""Shared pieces of the library trainer tests (rsl_rl, rl_games, skrl torch and JAX).

Commands for train.py and the launcher, the environment of a single process, the checks on the
log lines every run prints, and the SIGKILL-while-saving scenario.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mgpu_testing import PYTHON, REPO, free_port, kill_group, loopback_env, run

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


def train_cmd(library: str, log_root: Path, *args: str) -> list[str]:
    """A train.py command on CPU for ``library`` logging under ``log_root``."""
    return [PYTHON, TRAIN, "--rl_library", library, "--device", "cpu", *args, "--log_root", str(log_root)]


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


def run_two_ranks(library: str, tmp_path: Path, extra_args: list[str], *, timeout: float,
                  rendezvous: list[str] | None = None, env: dict[str, str] | None = None,
                  anchored: bool = True) -> Path:
    """Train ``library`` on 2 CPU ranks through the launcher, check the output, return rank 0's run folder.

    ``rendezvous`` defaults to :func:`torchrun_rendezvous`; ``extra_args`` go to the launcher as given.
    """
    cmd = [PYTHON, LAUNCHER, "--rl_library", library, "--num_gpus", "2",
           *(torchrun_rendezvous() if rendezvous is None else rendezvous), *extra_args,
           "--task", TASK, "--device", "cpu", "--log_root", str(tmp_path)]
    proc = run(cmd, timeout=timeout, env=env if env is not None else single_env())
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    return assert_two_rank_output(out, tmp_path / library / TASK, anchored=anchored)


def assert_one_line_error(proc: subprocess.CompletedProcess, expected: str) -> None:
    """Exit 2 with a single stderr line containing ``expected`` and no traceback."""
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def sigkill_while_saving(library: str, tmp_path: Path, pattern: str, loader: Callable[[Path], Any], *,
                         settle: float, deadline: float = 300, final_pattern: str | None = None) -> None:
    """Train with a checkpoint every iteration, SIGKILL the process group mid-save, load every checkpoint.

    Waits (up to ``deadline`` s) for 3 files matching ``pattern`` under ``tmp_path``, sleeps ``settle`` s
    to land inside a save, kills, then requires >= 3 files matching ``final_pattern`` (default
    ``pattern``) and calls ``loader`` on each (it must fail on a torn file).
    """
    cmd = train_cmd(library, tmp_path, "--num_envs", "8", "--max_iterations", "100000", "--save_interval", "1")
    log = open(tmp_path / "stderr.log", "w+")  # a file, not a pipe: a chatty run cannot block on it
    proc = subprocess.Popen(cmd, cwd=REPO, env=single_env(), stdout=subprocess.DEVNULL, stderr=log,
                            start_new_session=True)
    try:
        end = time.monotonic() + deadline
        while time.monotonic() < end and proc.poll() is None and len(list(tmp_path.rglob(pattern))) < 3:
            time.sleep(0.05)
        assert proc.poll() is None, (tmp_path / "stderr.log").read_text()[-3000:]
        assert len(list(tmp_path.rglob(pattern))) >= 3, "no checkpoints within the deadline"
        time.sleep(settle)  # land somewhere inside the save cycle
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        kill_group(proc)
        log.close()
    saved = list(tmp_path.rglob(final_pattern or pattern))
    assert len(saved) >= 3
    for path in saved:
        loader(path)
