"""Test support for the launcher: run it on fixtures, watch its process tree, wait for deterministic events."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from mgpu_lab.core import procs
from mgpu_testing import PYTHON, REPO, kill_group, loopback_env

LAUNCHER = REPO / "scripts" / "reinforcement_learning" / "train_multigpu.py"
FIXTURES = REPO / "tests" / "fixtures" / "launcher"
CPU2 = ["--num_gpus", "2", "--device", "cpu"]


def launcher_cmd(*args: str) -> list[str]:
    return [PYTHON, str(LAUNCHER), *args]


def fixture_args(script: str, job_root: Path) -> list[str]:
    """Launcher options that start ``tests/fixtures/launcher/<script>`` instead of train.py (the product's own
    ``--train_script``), its records under ``job_root``."""
    return ["--train_script", str(FIXTURES / script), "--job_log_root", str(job_root)]


def fixture_env(pid_dir: Path | None = None, **extra: str) -> dict[str, str]:
    """Loopback env for fixture runs; the fixtures leave ``rank<R>.pid`` files in ``pid_dir``."""
    env = loopback_env(**extra)
    if pid_dir is not None:
        env["MGPU_LAB_FIXTURE_PID_DIR"] = str(pid_dir)
    return env


def alive(pid: int) -> bool:
    """True while ``pid`` is a live process (a zombie counts as dead)."""
    return procs.alive(pid)


def process_tree(root: int) -> list[int]:
    """Every live process below ``root``, whatever its session."""
    return procs.descendants(root)


def processes_with_env(name: str, value: str) -> list[int]:
    """Live processes whose environment holds ``name=value`` (the launcher's job tag finds its whole job)."""
    return procs.with_env(name, value)


def start(cmd: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        cmd,
        cwd=REPO,
        env=env,
        text=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def finish(proc: subprocess.Popen, timeout: float) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        out, err = proc.communicate()
        pytest.fail(f"launcher still running after {timeout}s\n{out[-3000:]}\n{err[-3000:]}")


def wait_until(condition: Callable[[], bool], proc: subprocess.Popen, what: str, timeout: float = 240) -> None:
    """Poll ``condition`` until it holds; fail early (with the launcher's output) if the launcher exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"launcher exited {proc.returncode} before {what}\n{out[-3000:]}\n{err[-3000:]}")
        time.sleep(0.05)
    kill_group(proc)
    pytest.fail(f"timed out waiting for {what}")


def wait_for_pids(pid_dir: Path, ranks: int, proc: subprocess.Popen, timeout: float = 240) -> list[int]:
    """Wait until every rank wrote its pid file (the fixtures' ``rank<R>.pid``); return the pids."""
    wait_until(lambda: len(list(pid_dir.glob("rank*.pid"))) == ranks, proc, "the ranks started", timeout)
    return [int(f.read_text()) for f in sorted(pid_dir.glob("rank*.pid"))]


def supervise_dirs(proc: subprocess.Popen) -> list[Path]:
    """The supervision folder(s) the launcher passed to its job, read from its torchrun's environment."""
    found = {procs.env_value(pid, "MGPU_LAB_SUPERVISE_DIR") for pid in process_tree(proc.pid)}
    return sorted(Path(value) for value in found if value)


def beats(folder: Path) -> dict[int, dict]:
    """The ranks' heartbeats in a supervision folder, by rank (records being replaced are skipped)."""
    out = {}
    for path in folder.glob("beat.*"):
        try:
            out[int(path.suffix[1:])] = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
    return out


def torchrun_log_lines(err: str) -> list[str]:
    """The console lines that are torchrun's own log lines (``W1204 12:00:00.000 ...``): none may reach it."""
    from mgpu_lab.job.stderr_route import TORCHRUN_LOG

    return [line for line in err.splitlines() if TORCHRUN_LOG.match(line.encode())]


def kept_torchrun_text(err: str) -> str:
    """torchrun's own failure text, read from the file the launcher's report names (never on the terminal)."""
    from mgpu_lab.job.monitor import TORCHRUN_KEPT

    assert "ChildFailedError" not in err, err[-3000:]
    (line,) = [line for line in err.splitlines() if line.startswith(TORCHRUN_KEPT)]
    return Path(line[len(TORCHRUN_KEPT) :].strip()).read_text(encoding="utf-8")
