"""Test support shared by the suite (imported through pytest's ``pythonpath``; never a test module):
repository paths, free loopback ports, and subprocesses that never outlive a test."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable


#: where :func:`free_port` looks: below Linux's ephemeral range (32768-60999 by default), which the kernel hands to
#: every outgoing connection (gloo's pairs, the stores' clients) and to ``bind(0)``; a port chosen there could be taken
#: by some other test's connection before torchrun binds it (a suite under load lost a run to that). Each xdist worker
#: searches its own slice, so two workers never offer the same port.
PORT_RANGE = (20000, 32000)
_given: set[int] = set()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, outside the ephemeral range, never offered twice by this
    process."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    low, high = PORT_RANGE
    width = (high - low) // 16
    start = low + (index % 16) * width
    for port in range(start, start + width):
        if port in _given:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _given.add(port)
        return port
    raise RuntimeError(f"no free port in {start}-{start + width - 1}")


def loopback_env(**extra: str) -> dict[str, str]:
    """The environment for distributed runs on this machine: loopback only, quiet, CPU threads capped."""
    env = dict(os.environ)
    env.update(
        MASTER_ADDR="127.0.0.1",
        GLOO_SOCKET_IFNAME="lo",
        OMP_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
        CUDA_VISIBLE_DEVICES="",
    )
    env.update(extra)
    return env


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL a process started with start_new_session=True and everything in its group."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover
        pass


def run(
    cmd: list[str],
    *,
    timeout: float,
    env: dict[str, str] | None = None,
    cwd: Path | str = REPO,
    input: str | None = None,
) -> subprocess.CompletedProcess:
    """Run a command in its own session with a hard timeout; on timeout kill its whole group and fail."""
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env if env is not None else loopback_env(),
        text=True,
        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(input=input, timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        out, err = proc.communicate()
        pytest.fail(f"timed out after {timeout}s: {cmd}\n--- stdout\n{out[-4000:]}\n--- stderr\n{err[-4000:]}")
    finally:
        kill_group(proc)  # no stray grandchildren
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


#: the folder whose sitecustomize.py injects the suite's seams into a process a test starts
SEAMS_DIR = Path(__file__).resolve().parent / "seams"
#: the variable that sitecustomize.py reads (the product reads none of the suite's switches)
SEAMS_ENV = "MGPU_TESTING_SEAMS"


def seams_env(env: dict[str, str], **seams: object) -> dict[str, str]:
    """``env`` for a process that gets ``seams`` (see :mod:`mgpu_testing.seams.sitecustomize`): ``gpus=N`` made-up
        GPUs, ``shm_path``/``shm_free`` for /dev/shm, ``run_stamp``, ``stop_in_save``/``stop_in_save_name``, ``fault``
    (``KIND:RANK:ITER[:ARG],...`` for every rank's trainer)."""
    import json

    out = dict(env)
    out["PYTHONPATH"] = os.pathsep.join(p for p in (str(SEAMS_DIR), env.get("PYTHONPATH", "")) if p)
    out[SEAMS_ENV] = json.dumps(seams)
    return out
