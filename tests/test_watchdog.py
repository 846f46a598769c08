"""The launcher's hang watchdog and first-failure report, end to end: real torchrun, gloo ranks on loopback.

The ranks are ``tests/fixtures/launcher/beat_rank.py``, which speaks the supervision protocol
(``mgpu_lab.heartbeat``) and misbehaves deterministically on ``--fault KIND:RANK:ITER``. Its ranks beat from
the moment the group formed and while they wait for the test, so the only stretch without a beat is the
fault's: a short ``--hang_timeout`` cannot fire early, however loaded the machine. The real trainer beats
before its library's set-up, so its hang test uses a timeout long relative to any healthy stretch, and waits
for the launcher's verdict, not for a clock. Each run has a hard timeout; after each, the process table must
hold nothing of the job.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from mgpu_lab.heartbeat import Beat
from mgpu_lab.watchdog import Frame, RankState, blame, locate, main_thread, parse_threads
from mgpu_testing import free_port, kill_group, loopback_env
from mgpu_testing.launcher import (
    CPU2, alive, beats, finish, fixture_env, kept_torchrun_text, launcher_cmd, process_tree, start, supervise_dirs,
    wait_until,
)

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the Linux process table")
e2e = pytest.mark.e2e
FIXTURE = "beat_rank.py"


def run_fault(tmp_path: Path, fault: str, *extra: str, timeout: float = 180,
              between: Callable[[subprocess.Popen], None] | None = None) -> tuple[int, str, str, list[int]]:
    """Launch 2 ranks with one fault; return (exit status, stdout, stderr, every process the job had).
    ``between(proc)`` runs once the fault has been let go, before waiting for the launcher's end."""
    cmd = launcher_cmd(*CPU2, "--master_port", str(free_port()), "--log_all_ranks", "--fault", fault, "--iterations",
                       "6", "--run_dir", str(tmp_path / "run"), "--go_file", str(tmp_path / "go"), *extra)
    proc = start(cmd, fixture_env(FIXTURE))
    try:
        folders: list[Path] = []

        def training() -> bool:  # both ranks beat in training: the job's processes all exist now
            folders[:] = supervise_dirs(proc)
            return bool(folders) and len([b for b in beats(folders[0]).values() if b["phase"] == "train"]) == 2

        wait_until(training, proc, "both ranks trained")
        tree = process_tree(proc.pid)
        (tmp_path / "go").touch()
        if between is not None:
            between(proc)
        out, err = finish(proc, timeout=timeout)
    finally:
        kill_group(proc)
    assert not [pid for pid in tree if alive(pid)], err[-3000:]
    return proc.returncode, out, err, tree


def watchdog_lines(err: str) -> dict[int, str]:
    return {int(m[1]): m[2] for m in re.finditer(r"\[ERROR\] watchdog:   rank (\d+)/2 \([^)]*\): (.*)", err)}


# ---------------------------------------------------------------------------------------------- hangs

@e2e
@linux_only
def test_rank_hanging_outside_a_collective_is_named(tmp_path: Path) -> None:
    rc, _, err, _ = run_fault(tmp_path, "hang:1:2", "--hang_timeout", "3")
    assert rc == 3, err[-3000:]
    where = watchdog_lines(err)
    assert re.fullmatch(r"waiting in all_reduce, called from .*beat_rank\.py:\d+ in main", where[0]), where
    assert re.fullmatch(r"outside any collective, at .*beat_rank\.py:\d+ in hang", where[1]), where
    assert "[ERROR] watchdog: likely culprit: rank 1 (the other rank(s) wait in all_reduce for it)" in err
    folder = tmp_path / "run" / "watchdog"
    assert f"stacks and summary in {folder}" in err
    assert "in hang" in (folder / "stack_rank1.txt").read_text()
    assert "in all_reduce" in (folder / "stack_rank0.txt").read_text()
    summary = (folder / "summary.txt").read_text().splitlines()
    assert summary and all(line in err for line in summary)
    assert "likely culprit: rank 1" in summary[-1]
    assert err.rstrip().endswith("[ERROR] watchdog: stopping the job (exit 3)")  # torchrun's shutdown noise stays out


@e2e
@linux_only
def test_frozen_rank_is_reported_not_responding(tmp_path: Path) -> None:
    """SIGSTOP: the rank cannot answer the stack request; it is still found, and the job still ends."""
    rc, _, err, _ = run_fault(tmp_path, "stop:1:2", "--hang_timeout", "3")
    assert rc == 3, err[-3000:]
    where = watchdog_lines(err)
    assert where[1].startswith("not responding"), where
    assert where[0].startswith("waiting in all_reduce"), where
    assert "likely culprit: rank 1" in err
    assert "did not answer" in (tmp_path / "run" / "watchdog" / "stack_rank1.txt").read_text()


@e2e
@linux_only
def test_a_restart_is_not_taken_for_a_hang(tmp_path: Path) -> None:
    """While torchrun restarts the group, every beat belongs to a dead worker: no hang, however long that takes.

    The restarted ranks are held before their first beat (``--hold_restart``) until the gap has lasted twice
    the timeout: a watchdog that took the dead attempt's beats for a stalled job fires in that gap."""
    hold = tmp_path / "release"
    timeout = 3.0

    def hold_the_restart(proc: subprocess.Popen) -> None:
        wait_until(lambda: all(Path(f"{hold}.rank{r}").exists() for r in (0, 1)), proc, "the restarted ranks held")
        time.sleep(2 * timeout)  # a gap of at least twice --hang_timeout (load only makes it longer)
        hold.touch()

    rc, out, err, _ = run_fault(tmp_path, "kill:1:2", "--hang_timeout", str(timeout), "--max_restarts", "1",
                                "--hold_restart", str(hold), between=hold_the_restart)
    assert rc == 0, err[-3000:]
    assert "watchdog" not in err, err[-3000:]
    # the restarted group ran to the end, on both ranks
    assert sorted(re.findall(r"\[fixture\] rank (\d)/2 attempt 1 done", out)) == ["0", "1"], out[-3000:]


@e2e
@linux_only
def test_real_trainer_hang_is_named(tmp_path: Path) -> None:
    """train.py with MGPU_LAB_FAULT=hang:1:3: rank 1 waits forever outside any collective at iteration 3.

    The hang is certain (the rank never returns), so the timeout only has to outlast every healthy stretch
    between two beats (the library's set-up after the first beat included): 45 s, and the test waits for
    the launcher's verdict."""
    env = loopback_env(MGPU_LAB_FAULT="hang:1:3")
    env.pop("MGPU_LAB_TRAIN_SCRIPT", None)
    cmd = launcher_cmd(*CPU2, "--master_port", str(free_port()), "--hang_timeout", "45", "--num_envs", "8",
                       "--max_iterations", "6", "--log_root", str(tmp_path / "logs"))
    proc = start(cmd, env)
    try:
        wait_until(lambda: bool(supervise_dirs(proc)) and len(beats(supervise_dirs(proc)[0])) == 2, proc,
                   "both ranks beat")
        tree = process_tree(proc.pid)
        _, err = finish(proc, timeout=300)
    finally:
        kill_group(proc)
    assert proc.returncode == 3, err[-3000:]
    assert not [pid for pid in tree if alive(pid)]
    where = watchdog_lines(err)
    assert where[0].startswith("waiting in all_reduce, called from "), where
    assert where[1].startswith("outside any collective, at ") and "rank_progress.py" in where[1], where
    assert "likely culprit: rank 1 (the other rank(s) wait in all_reduce for it)" in err
    folders = list((tmp_path / "logs").glob("rsl_rl/*/*/watchdog"))
    assert len(folders) == 1 and {p.name for p in folders[0].iterdir()} == {
        "stack_rank0.txt", "stack_rank1.txt", "summary.txt"}


# ---------------------------------------------------------------------------------------------- failures

@e2e
@linux_only
def test_first_failing_rank_is_named_even_when_torchrun_blames_another(tmp_path: Path) -> None:
    rc, _, err, _ = run_fault(tmp_path, "raise:1:2")
    assert rc == 1, err[-3000:]
    kept = kept_torchrun_text(err)
    root = kept[kept.index("Root Cause"):]
    assert re.search(r"rank\s*:\s*0 \(local_rank: 0\)", root), root  # torchrun blames rank 0 ...
    last = err.rstrip().splitlines()[-2:]
    assert re.fullmatch(r"\[ERROR\] launcher: first failure: rank 1/2 on node \S+ \(pid \d+\): "
                        r"RuntimeError: injected fault at iteration 2", last[0]), last  # ... the launcher names rank 1
    assert last[1].startswith("[ERROR] launcher: torchrun's \"Root Cause\" names rank 0"), last


@e2e
@linux_only
def test_rank_killed_by_a_signal_is_named_with_it(tmp_path: Path) -> None:
    rc, _, err, _ = run_fault(tmp_path, "kill:1:2")
    assert rc == 1, err[-3000:]
    assert re.search(r"\[ERROR\] launcher: first failure: rank 1/2 on node \S+ \(pid \d+\): killed by SIGKILL", err), \
        err[-3000:]


# ---------------------------------------------------------------------------------------------- the rules

def state(rank: int, iteration: int, collective: str | None, responding: bool = True, line: int = 1) -> RankState:
    beat = Beat(rank, rank, 3, "n", 100 + rank, iteration, "train", 0.0)
    return RankState(rank, beat, responding=responding, collective=collective, where=Frame("t.py", line, "f"))


@pytest.mark.parametrize(
    ("states", "culprits", "why"),
    [
        ([state(0, 4, "all_reduce"), state(1, 4, None), state(2, 4, "all_reduce")], [1], "wait in all_reduce"),
        ([state(0, 4, "all_reduce"), state(1, 4, None, responding=False), state(2, 4, "all_reduce")], [1],
         "wait in all_reduce"),
        ([state(0, 4, None), state(1, 4, None, responding=False), state(2, 4, None)], [1], "did not answer"),
        ([state(0, 5, "broadcast"), state(1, 4, "all_reduce"), state(2, 5, "broadcast")], [1], "behind"),
        ([state(0, 4, "all_reduce", line=7), state(1, 4, "all_reduce", line=9), state(2, 4, "all_reduce", line=7)],
         [1], "different collective"),
        ([state(0, 4, "all_reduce"), state(1, 4, "all_reduce"), state(2, 4, "all_reduce")], [], "every rank waits"),
    ],
)
def test_culprit_rules(states: list[RankState], culprits: list[int], why: str) -> None:
    found, reason = blame(states)
    assert found == culprits and why in reason, (found, reason)


def test_faulthandler_text_is_located() -> None:
    text = (
        "Thread 0x00007f0000000001 (most recent call first):\n"
        '  File "/usr/lib/python3.11/threading.py", line 320 in wait\n'
        '  File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap\n'
        "\n"
        "Current thread 0x00007f0000000002 (most recent call first):\n"
        '  File "/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 2950 in all_reduce\n'
        '  File "/v/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", line 81 in wrapper\n'
        '  File "/repo/src/mgpu_lab/adapters/rsl_rl.py", line 120 in _reduce_grads\n'
        '  File "/repo/scripts/train.py", line 200 in <module>\n'
    )
    threads = parse_threads(text)
    assert len(threads) == 2
    collective, caller = locate(main_thread(threads))
    assert collective == "all_reduce"
    assert caller == Frame("/repo/src/mgpu_lab/adapters/rsl_rl.py", 120, "_reduce_grads")


@e2e
@linux_only
def test_real_trainer_raising_rank_is_named_last(tmp_path: Path) -> None:
    """train.py with MGPU_LAB_FAULT=raise:1:3: the launcher's last line names rank 1 and the exception."""
    env = loopback_env(MGPU_LAB_FAULT="raise:1:3")
    env.pop("MGPU_LAB_TRAIN_SCRIPT", None)
    proc = start(launcher_cmd(*CPU2, "--master_port", str(free_port()), "--num_envs", "8", "--max_iterations", "6",
                              "--log_root", str(tmp_path / "logs")), env)
    try:
        _, err = finish(proc, timeout=300)
    finally:
        kill_group(proc)
    assert proc.returncode == 1, err[-3000:]
    last = err.rstrip().splitlines()[-1]
    assert re.fullmatch(r"\[ERROR\] launcher: first failure: rank 1/2 on node \S+ \(pid \d+\): RuntimeError: "
                        r"injected fault: .*", last), last
