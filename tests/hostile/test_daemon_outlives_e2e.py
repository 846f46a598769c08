"""Issue 38, item 2: nothing outlives the launcher, daemonized descendants included. A rank double-forks a daemon
into a session of its own with a cleared environment (no job tag, no parent link once the launcher is gone);
the launcher is killed with SIGKILL; the job's own cgroup takes the daemon with it. Where the machine gives the
job no cgroup (no writable cgroup2), that is the documented limit and the test says so by skipping."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest
from mgpu_testing import REPO, free_port, kill_group
from mgpu_testing.launcher import CPU2, alive, fixture_env, launcher_cmd, process_tree, start, wait_until

from mgpu_lab.job import job_cgroup

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the Linux process table"),
]


def cgroup_allowed() -> bool:
    folder, _ = job_cgroup.create(f"probe_{os.getpid()}")
    if folder is None:
        return False
    os.rmdir(folder)
    return True


@pytest.mark.skipif(not cgroup_allowed(), reason="no writable cgroup2 here: the documented limit applies")
def test_a_daemon_with_a_cleared_environment_dies_with_a_killed_launcher(tmp_path: Path) -> None:
    script = REPO / "tests" / "fixtures" / "hostile" / "daemon_rank.py"
    proc = start(
        launcher_cmd(
            "--train_script",
            str(script),
            *CPU2,
            "--master_port",
            str(free_port()),
            "--job_log_root",
            str(tmp_path / "jobs"),
            str(tmp_path),
        ),
        fixture_env(),
    )
    daemon = None
    try:
        pid_file = tmp_path / "daemon.pid"
        wait_until(pid_file.exists, proc, "the daemon started", timeout=120)
        daemon = int(pid_file.read_text())
        tree = process_tree(proc.pid)
        assert daemon in tree  # reparented to the launcher (a subreaper) ...
        assert os.getsid(daemon) != os.getsid(proc.pid)  # ... in a session of its own
        assert b"MGPU_LAB_JOB_TAG" not in Path(f"/proc/{daemon}/environ").read_bytes()  # without the job's tag
        cgroup = next(line[3:] for line in Path(f"/proc/{daemon}/cgroup").read_text().splitlines() if line[:3] == "0::")
        assert Path(cgroup).name.startswith(job_cgroup.PREFIX), cgroup  # born in the job's own cgroup
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)  # not communicate(): a surviving daemon would hold its pipes open
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (alive(daemon) or any(alive(p) for p in tree)):
            time.sleep(0.1)
        assert not alive(daemon), "the daemon outlived the launcher"
        assert not [p for p in tree if alive(p)]
        gone = time.monotonic() + 10
        while time.monotonic() < gone and (Path(job_cgroup._own_cgroup() or "/") / Path(cgroup).name).exists():
            time.sleep(0.1)
        assert not (Path(job_cgroup._own_cgroup() or "/") / Path(cgroup).name).exists()  # removed by its janitor
    finally:
        kill_group(proc)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        if daemon is not None and alive(daemon):
            os.kill(daemon, signal.SIGKILL)
