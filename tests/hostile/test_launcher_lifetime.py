"""Hostile lifetime cases (issue 13): interrupts exit 128 + N; whatever kills the launcher, its job goes with
it; a rendezvous that cannot complete ends at its deadline with one line and exit 4. Real torchrun processes
on loopback; the process table is checked after each case."""

from __future__ import annotations

import fcntl
import os
import re
import select
import signal
import socket
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from mgpu_testing import REPO, free_port, kill_group
from mgpu_testing.launcher import (
    CPU2,
    alive,
    finish,
    fixture_args,
    fixture_env,
    launcher_cmd,
    process_tree,
    start,
    torchrun_log_lines,
    wait_for_pids,
    wait_until,
)

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the Linux process table"),
]


def gone_within(pids: list[int], seconds: float) -> list[int]:
    """The pids still alive after waiting up to ``seconds`` for all of them to end."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_interrupt_exits_128_plus_the_signal(tmp_path: Path, sig: signal.Signals) -> None:
    proc = start(
        launcher_cmd(*fixture_args("sleep_rank.py", tmp_path / "jobs"), *CPU2, "--master_port", str(free_port())),
        fixture_env(tmp_path),
    )
    try:
        workers = wait_for_pids(tmp_path, 2, proc)
        tree = process_tree(proc.pid)
        assert set(workers) <= set(tree)
        os.kill(proc.pid, sig)
        _, err = finish(proc, timeout=60)
    finally:
        kill_group(proc)
    assert proc.returncode == 128 + sig, (proc.returncode, err[-2000:])
    assert f"{sig.name} received, stopping the job" in err
    assert torchrun_log_lines(err) == [], err[-2000:]  # its "Received ... death signal" lines are kept in a file
    assert not [pid for pid in tree if alive(pid)]


def drain(fd: int) -> None:
    """Read whatever the terminal's master side holds (the launcher never blocks on a full terminal)."""
    while select.select([fd], [], [], 0)[0]:
        try:
            if not os.read(fd, 65536):
                return
        except OSError:
            return


def test_a_closing_terminal_ends_the_launcher_with_129_and_its_job(tmp_path: Path) -> None:
    """The launcher runs in its own session with a pseudo-terminal as its controlling terminal (as under an ssh
    login); closing the master side hangs the terminal up: the kernel sends SIGHUP to the session leader, and
    every later write to the terminal fails with EIO."""
    master, slave = os.openpty()

    def controlling_terminal() -> None:  # in the child, after its setsid: the pty becomes its terminal
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen(
        launcher_cmd(*fixture_args("sleep_rank.py", tmp_path / "jobs"), *CPU2, "--master_port", str(free_port())),
        cwd=REPO,
        env=fixture_env(tmp_path),
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
        preexec_fn=controlling_terminal,
    )
    os.close(slave)
    try:
        wait_until(lambda: drain(master) or len(list(tmp_path.glob("rank*.pid"))) == 2, proc, "the ranks started")
        tree = process_tree(proc.pid)
        assert len(tree) >= 3, tree  # torchrun and its two ranks
        os.close(master)  # the terminal closes
        master = -1
        proc.wait(timeout=60)
    finally:
        if master >= 0:
            os.close(master)
        kill_group(proc)
    assert proc.returncode == 128 + signal.SIGHUP, proc.returncode
    assert not gone_within(tree, 10)


def test_sigkill_of_the_launcher_alone_takes_the_job_with_it(tmp_path: Path) -> None:
    """Rank 1 ignores SIGTERM: only the launcher's helper's SIGKILL ends it."""
    proc = start(
        launcher_cmd(
            *fixture_args("sleep_rank.py", tmp_path / "jobs"),
            *CPU2,
            "--master_port",
            str(free_port()),
            "--stubborn_rank",
            "1",
        ),
        fixture_env(tmp_path, MGPU_LAB_KILL_GRACE_S="1"),
    )
    try:
        workers = wait_for_pids(tmp_path, 2, proc)
        tree = process_tree(proc.pid)
        assert set(workers) <= set(tree)
        os.kill(proc.pid, signal.SIGKILL)  # the launcher only, not its group
        proc.wait(timeout=10)
        left = gone_within(tree, 30)
    finally:
        kill_group(proc)
        for pid in tree:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    assert not left


def test_killed_while_waiting_in_the_rendezvous_leaves_nothing(tmp_path: Path) -> None:
    """The second node never comes; torchrun waits in the static rendezvous when the launcher is killed."""
    port = free_port()
    proc = start(
        launcher_cmd(
            *fixture_args("sleep_rank.py", tmp_path / "jobs"),
            *CPU2,
            "--nnodes",
            "2",
            "--node_rank",
            "0",
            "--master_port",
            str(port),
        ),
        fixture_env(tmp_path),
    )
    try:
        wait_until(lambda: listening(port), proc, "torchrun's rendezvous store listening")
        tree = process_tree(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        left = gone_within(tree, 30)
    finally:
        kill_group(proc)
    assert not left
    assert not list(tmp_path.glob("rank*.pid"))  # no worker ever started


def listening(port: int) -> bool:
    """True when something listens on 127.0.0.1:port (read from /proc/net/tcp; nothing connects to it)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":  # 0A: LISTEN
                return True
    return False


def rendezvous_deadline(tmp_path: Path, *args: str) -> str:
    proc = start(
        launcher_cmd(*fixture_args("sleep_rank.py", tmp_path / "jobs"), *CPU2, "--rdzv_timeout", "4", *args),
        fixture_env(tmp_path),
    )
    try:
        wait_until(lambda: bool(process_tree(proc.pid)), proc, "torchrun started")
        tree = process_tree(proc.pid)
        _, err = finish(proc, timeout=60)
    finally:
        kill_group(proc)
    assert proc.returncode == 4, (proc.returncode, err[-3000:])
    assert not [pid for pid in tree if alive(pid)]
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("mgpu-lab train_multigpu: error:")]
    assert len(errors) == 1 and errors[0] == err.rstrip().splitlines()[-1], err[-3000:]
    assert re.search(r"\[INFO\] launcher: waiting for the rendezvous at .*; \d+ s left", err), err[-3000:]
    return errors[0]


def test_static_rendezvous_missing_a_node_ends_at_the_deadline(tmp_path: Path) -> None:
    port = free_port()
    line = rendezvous_deadline(tmp_path, "--nnodes", "2", "--node_rank", "0", "--master_port", str(port))
    assert (
        "rendezvous deadline passed after 4 s (--rdzv_timeout): never arrived: the other node(s) of 2 "
        f"expected never joined at 127.0.0.1:{port}" in line
    ), line


def test_c10d_endpoint_that_never_answers_ends_at_the_deadline(tmp_path: Path) -> None:
    """Another host's endpoint (127.0.0.2, loopback, which the launcher does not take for this machine: no node here
    would host its store) that accepts and never answers: the rendezvous deadline. The same endpoint on this
    host's own address is refused before any rank (tests/test_ports.py)."""
    with socket.socket() as mute:  # accepts connections (the kernel does) and never says a word
        mute.bind(("127.0.0.2", 0))
        mute.listen(16)
        endpoint = f"127.0.0.2:{mute.getsockname()[1]}"
        line = rendezvous_deadline(
            tmp_path, "--nnodes", "2", "--rdzv_backend", "c10d", "--rdzv_endpoint", endpoint, "--rdzv_id", "mute"
        )
    assert "rendezvous deadline passed after 4 s (--rdzv_timeout): never arrived:" in line and endpoint in line, line
