"""What the benchmark scripts share: the repository's paths, a free loopback port and a timed process."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LAUNCHER = REPO / "scripts" / "reinforcement_learning" / "train_multigpu.py"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed_process(cmd: list[str], env: dict[str, str], cwd: Path | None = None) -> tuple[float, float, int]:
    """(wall s, cpu s, exit status) of one fresh process, its output discarded.

    Waited for with ``os.wait4`` (its own rusage, the moment it exits): ``subprocess.run(timeout=...)`` polls
    with sleeps that double up to 50 ms, which rounded every wall time up to its next poll (0.0635 s,
    0.1135 s, 0.2135 s...) and so skewed a ratio by whichever command happened to just miss one."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    killer = threading.Timer(600, proc.kill)
    killer.start()
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        killer.cancel()
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
    return wall, usage.ru_utime + usage.ru_stime, proc.returncode
