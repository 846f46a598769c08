"""Issue 52, item 2: every signal goes to the process that was proven to be the job's, held by a pidfd; the hang path
cannot fail (a rank gone between the look and the signal is noted; a report that cannot be written degrades).

The pid reuse is real: in a PID namespace of its own (``unshare``, root) a child writes ``ns_last_pid`` so that the
next process gets the pid of one that just exited, and checks that a signal sent through the old hold never reaches
the new process (its blocked signal would show as pending at once, as a control send shows).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from mgpu_testing import PYTHON, REPO

from mgpu_lab.core import held, procs
from mgpu_lab.health import heartbeat
from mgpu_lab.health.culprit import RankState
from mgpu_lab.health.hang_report import Report, write_report
from mgpu_lab.health.heartbeat import Beat
from mgpu_lab.health.watchdog import Watchdog

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pidfds and /proc are Linux's")

#: Run as PID 1 of a new PID namespace: hold a process, let it exit, give its pid to a new one, signal the hold.
REUSE = r"""
import os, signal, subprocess, sys
from mgpu_lab.core import held

BLOCKED = "import signal, sys; signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1}); print(flush=True); sys.stdin.read()"

def pending(pid):
    with open(f"/proc/{pid}/status") as fh:
        masks = {k: int(v, 16) for k, v in (line.split(":") for line in fh if line.startswith(("SigPnd", "ShdPnd")))}
    return any(mask >> (signal.SIGUSR1 - 1) & 1 for mask in masks.values())

first = subprocess.Popen([sys.executable, "-c", BLOCKED], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
first.stdout.readline()
hold = held.hold(first.pid)
assert not isinstance(hold, str), hold
first.kill(); first.wait()
with open("/proc/sys/kernel/ns_last_pid", "w") as fh:
    fh.write(str(first.pid - 1))
second = subprocess.Popen([sys.executable, "-c", BLOCKED], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
second.stdout.readline()
print("same pid:", second.pid == first.pid)
print("sent through the hold:", hold.send(signal.SIGUSR1), "gone:", hold.gone)
print("pending after the hold's send:", pending(second.pid))
os.kill(second.pid, signal.SIGUSR1)  # the control: what a plain kill by pid would have done
print("pending after a kill by pid:", pending(second.pid))
second.kill(); second.wait()
"""


def test_a_pid_that_changed_hands_is_never_signalled_through_its_hold() -> None:
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "-p", "-f", "--mount-proc", "true"], check=False).returncode:
        pytest.skip("no PID namespace can be made here (unshare needs root)")
    done = subprocess.run(
        [unshare, "-p", "-f", "--mount-proc", PYTHON, "-c", REUSE],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "same pid: True",
        "sent through the hold: False gone: True",
        "pending after the hold's send: False",
        "pending after a kill by pid: True",
    ], done.stdout + done.stderr


def test_a_hold_refuses_what_its_proof_or_start_time_rejects() -> None:
    child = subprocess.Popen(["sleep", "120"])
    try:
        started = procs.start_time(child.pid)
        assert started is not None
        assert held.hold(child.pid, started=started - 1) == "a reused pid: another process, started at another time"
        assert held.hold(child.pid, proof=lambda pid: "not ours") == "not ours"
        assert held.hold(1) == "not a process id"
        with held.hold(child.pid, started=started) as hold:  # type: ignore[union-attr]
            assert hold.send(signal.SIGTERM)
        assert child.wait(timeout=30) == -signal.SIGTERM
        assert held.hold(child.pid) == "not running"  # reaped: nothing to hold
        assert not held.send(child.pid, signal.SIGTERM)
    finally:
        child.kill()
        child.wait()


def test_a_rank_that_exits_between_the_look_and_the_signal_is_noted_not_raised(tmp_path: Path) -> None:
    """The watchdog holds a rank proven to be the job's; it exits before the stack signal: the report says it is
    gone, nothing raises, and the other rank is still asked."""
    ranks = [subprocess.Popen(["sleep", "120"]) for _ in range(2)]
    try:
        for r, proc in enumerate(ranks):
            started = procs.start_time(proc.pid)
            heartbeat.write_beat(tmp_path, Beat(r, r, 2, "n", proc.pid, 3, "train", time.time(), None, started))

        def hold_then_lose(pid: int, **kwargs: object) -> held.Held | str:
            found = held.hold(pid, **kwargs)  # type: ignore[arg-type]
            if pid == ranks[0].pid:  # proven, held; then it exits before the signal
                ranks[0].kill()
                ranks[0].wait()
            return found

        dog = Watchdog(tmp_path, 10, 600, hold=hold_then_lose)
        assert not dog.check(0.0) and dog.check(10.0)
        report = dog.diagnose(10.0, stack_wait_s=0.0)
        first, second = report.ranks
        assert first.gone and not first.responding
        assert first.place() == f"not responding (pid {ranks[0].pid}, named by its beat record, is not running)"
        assert ranks[1].wait(timeout=30) == -heartbeat.STACK_SIGNAL  # asked (sleep dies of SIGUSR1's default action)
        assert not second.foreign
    finally:
        for proc in ranks:
            proc.kill()
            proc.wait()


def _report() -> Report:
    beat = Beat(0, 0, 1, "n", 4242, 3, heartbeat.Phase.TRAIN, 0.0)
    return Report(12.0, [RankState(0, beat, responding=False)], [0], "the job's only rank")


def test_a_report_whose_run_folder_cannot_be_written_goes_to_a_temp_folder(tmp_path: Path) -> None:
    blocker = tmp_path / "run"
    blocker.write_text("a file where the run folder should be")
    report = _report()
    folder = write_report(report, blocker)
    assert folder is not None and folder.parent == Path(tempfile.gettempdir())
    assert (folder / "summary.txt").read_text().splitlines() == report.summary_lines()
    shutil.rmtree(folder)


def test_a_report_no_folder_can_take_is_none_and_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setattr(tempfile, "tempdir", str(blocker))  # no temp folder can be made under a file either
    full = tmp_path / "run"
    (full / "watchdog").mkdir(parents=True)
    (full / "watchdog" / "summary.txt").mkdir()  # a path that is a folder: the write fails
    report = _report()
    assert write_report(report, full) is None
    assert report.folder is None and report.files == []
    assert len(report.unwritten) == 1 and str(full / "watchdog") in report.unwritten[0]
