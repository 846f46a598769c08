"""The launcher's hang watchdog and first-failure report, end to end: real torchrun, gloo ranks on loopback.

The ranks are ``tests/fixtures/launcher/beat_rank.py``, which speaks the supervision protocol
(``mgpu_lab.health.heartbeat``) and misbehaves deterministically on ``--fault KIND:RANK:ITER``. Its ranks beat from
the moment the group formed and while they wait for the test, so the only stretch without a beat is the
fault's: a short ``--hang_timeout`` cannot fire early, however loaded the machine. The real trainer beats
before its library's set-up; that stretch is start-up, under ``--startup_timeout`` (left at its long default),
so its hang test needs a ``--hang_timeout`` long only relative to a healthy training iteration, and waits for
the launcher's verdict, not for a clock. Each run has a hard timeout; after each, the process table must hold
nothing of the job. The rule itself (which limit applies when) is tested in-process on fake beat folders.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from mgpu_testing import free_port, kill_group, loopback_env, seams_env
from mgpu_testing.launcher import (
    CPU2,
    alive,
    beats,
    finish,
    fixture_args,
    fixture_env,
    kept_torchrun_text,
    launcher_cmd,
    process_tree,
    start,
    supervise_dirs,
    torchrun_log_lines,
    wait_until,
)

from mgpu_lab.core import procs
from mgpu_lab.health import heartbeat
from mgpu_lab.health.culprit import RankState, blame
from mgpu_lab.health.hang_report import Limit, limits
from mgpu_lab.health.heartbeat import Beat
from mgpu_lab.health.stack_text import Frame, locate, main_thread, parse_threads
from mgpu_lab.health.watchdog import Watchdog

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the Linux process table")
e2e = pytest.mark.e2e
FIXTURE = "beat_rank.py"


def run_fault(
    tmp_path: Path,
    fault: str,
    *extra: str,
    timeout: float = 180,
    between: Callable[[subprocess.Popen], None] | None = None,
) -> tuple[int, str, str, list[int]]:
    """Launch 2 ranks with one fault; return (exit status, stdout, stderr, every process the job had).
    ``between(proc)`` runs once the fault has been let go, before waiting for the launcher's end."""
    cmd = launcher_cmd(
        *fixture_args(FIXTURE, tmp_path / "jobs"),
        *CPU2,
        "--master_port",
        str(free_port()),
        "--log_all_ranks",
        "--fault",
        fault,
        "--iterations",
        "6",
        "--run_dir",
        str(tmp_path / "run"),
        "--go_file",
        str(tmp_path / "go"),
        *extra,
    )
    proc = start(cmd, fixture_env())
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
    assert (
        "[ERROR] watchdog: no rank made progress for 3 s in training (training limit 3 s, --hang_timeout); "
        "asking every rank for its stack" in err
    )
    folder = tmp_path / "run" / "watchdog"
    assert f"stacks and summary in {folder}" in err
    assert "in hang" in (folder / "stack_rank1.txt").read_text()
    assert "in all_reduce" in (folder / "stack_rank0.txt").read_text()
    summary = (folder / "summary.txt").read_text().splitlines()
    assert summary and all(line in err for line in summary)
    assert "likely culprit: rank 1" in summary[-1]
    # torchrun's shutdown noise stays out, kept in the file the launcher names; only the launcher's lines follow
    after = err[err.index("[ERROR] watchdog: stopping the job (exit 3)\n") :].splitlines()[1:]
    assert all(line.startswith(("[WARN] launcher: ", "[INFO] launcher: ")) for line in after), after
    assert after[-1].startswith("[INFO] launcher: torchrun's own log lines: "), after
    assert torchrun_log_lines(err) == [] and "closing signal" in Path(after[-1].rsplit(" ", 1)[1]).read_text()


@e2e
@linux_only
def test_a_rank_whose_beat_record_is_unusable_is_named_and_the_watchdog_fires(tmp_path: Path) -> None:
    """Rank 1 replaces its beat with one whose pid is a string (the launcher once crashed on it), then hangs: the
    watchdog names the record in one line, counts it as no progress and fires within its training limit."""
    rc, _, err, _ = run_fault(tmp_path, "badbeat:1:2", "--hang_timeout", "3")
    assert rc == 3, err[-3000:]
    notice = re.findall(
        r"^\[WARN\] watchdog: rank 1: unusable record (\S+/beat\.1) \((.*)\); counted as no progress$", err, re.M
    )
    assert len(notice) == 1 and notice[0][1].startswith("field 'pid': '"), err[-3000:]
    where = watchdog_lines(err)
    assert where[1].startswith("unusable record (field 'pid'"), where
    assert where[0].startswith("waiting in all_reduce"), where
    assert "in training (training limit 3 s, --hang_timeout)" in err and "Traceback" not in err


@e2e
@linux_only
def test_frozen_rank_is_reported_not_responding(tmp_path: Path) -> None:
    """SIGSTOP: the rank cannot answer the stack request; it is found stopped, and the job still ends (the
    stopped rank killed, since it cannot take SIGTERM: the test's process-table check proves it went)."""
    rc, _, err, _ = run_fault(tmp_path, "stop:1:2", "--hang_timeout", "3")
    assert rc == 3, err[-3000:]
    where = watchdog_lines(err)
    assert where[1] == "not responding (stopped by a signal: SIGSTOP, or a debugger holds it)", where
    assert where[0].startswith("waiting in all_reduce"), where
    assert "likely culprit: rank 1" in err
    assert re.search(
        r"\[ERROR\] watchdog: rank 1 \(pid \d+\) is stopped and cannot take SIGTERM: killing it\n"
        r"\[ERROR\] watchdog: stopping the job \(exit 3\)",
        err,
    ), err[-3000:]
    assert "did not answer" in (tmp_path / "run" / "watchdog" / "stack_rank1.txt").read_text()


@e2e
@linux_only
def test_a_rank_stopped_before_its_first_beat_is_named(tmp_path: Path) -> None:
    """The real trainer, 2 ranks; rank 1 freezes (SIGSTOP, a test seam) before it ever beats, rank 0 beats and
    waits for it: rank 1 is listed (found by its LOCAL_RANK in the process table), named the culprit, and killed
    (it cannot take SIGTERM)."""
    cmd = launcher_cmd(
        *CPU2,
        "--master_port",
        str(free_port()),
        "--task",
        "Toy-Cartpole-v0",
        "--num_envs",
        "8",
        "--max_iterations",
        "3",
        "--log_root",
        str(tmp_path / "logs"),
        "--startup_timeout",
        "3",
        "--hang_timeout",
        "3",
    )
    proc = start(cmd, seams_env(loopback_env(), stop_before_beat=1))
    try:
        _, err = finish(proc, timeout=180)
    finally:
        kill_group(proc)
    assert proc.returncode == 3, err[-3000:]
    assert re.search(
        r"\[ERROR\] watchdog:   rank 1 never reported: stopped or stuck before its first beat; stopped by a signal: "
        r"SIGSTOP, or a debugger holds it \(pid \d+\)",
        err,
    ), err[-3000:]
    assert re.fullmatch(r"outside any collective, at .*attempt\.py:\d+ in \w+", watchdog_lines(err)[0]), err[-3000:]
    assert "[ERROR] watchdog: likely culprit: rank 1 (the launcher started it and it never reported)" in err
    assert re.search(r"\[ERROR\] watchdog: rank 1 \(pid \d+\) is stopped and cannot take SIGTERM: killing it", err)


@e2e
@linux_only
def test_a_restart_is_not_taken_for_a_hang(tmp_path: Path) -> None:
    """While torchrun restarts the group, every beat belongs to a dead worker: no hang, however long that takes.

    The restarted ranks are held before their first beat (``--hold_restart``) until the gap since the faulty
    rank died has lasted twice the timeout: a watchdog that took the dead attempt's beats for a stalled job
    fires in that gap. The restarted workers' own start (importing torch) is part of the gap; the test only
    tops it up to twice the timeout."""
    hold = tmp_path / "release"
    timeout = 3.0

    def hold_the_restart(proc: subprocess.Popen) -> None:
        faulty = beats(supervise_dirs(proc)[0])[1]["pid"]  # the first attempt's: a restarted rank beats only later
        wait_until(lambda: not alive(faulty), proc, "the faulty rank gone")
        dead_since = time.monotonic()  # no earlier than its death: the gap measured from here is never too long
        wait_until(lambda: all(Path(f"{hold}.rank{r}").exists() for r in (0, 1)), proc, "the restarted ranks held")
        time.sleep(max(0.0, dead_since + 2 * timeout - time.monotonic()))  # a gap of at least twice --hang_timeout
        hold.touch()

    rc, out, err, _ = run_fault(
        tmp_path,
        "kill:1:2",
        "--hang_timeout",
        str(timeout),
        "--max_restarts",
        "1",
        "--hold_restart",
        str(hold),
        between=hold_the_restart,
    )
    assert rc == 0, err[-3000:]
    assert "[ERROR] watchdog" not in err, err[-3000:]  # (the bare word can be in a path: a checkout named so)
    assert torchrun_log_lines(err) == [], err[-3000:]  # the restart is said in the launcher's words instead
    assert err.count("[WARN] launcher: a rank's process was replaced: torchrun restarted the worker group") == 1, err
    # the restarted group ran to the end, on both ranks
    assert sorted(re.findall(r"\[fixture\] rank (\d)/2 attempt 1 done", out)) == ["0", "1"], out[-3000:]


@e2e
@linux_only
def test_real_trainer_hang_is_named(tmp_path: Path) -> None:
    """train.py with the injected fault hang:1:3 (the suite's seam): rank 1 waits forever outside any collective at iteration 3.

    The hang is certain (the rank never returns), so ``--hang_timeout`` only has to outlast every healthy
    stretch between two training iterations (a tenth of a second here with 8 envs; 10 s leaves a wide margin
    for a loaded machine). The library's set-up after the first beat is start-up, under the default
    ``--startup_timeout``. The test waits for the launcher's verdict, which must name the training limit."""
    env = seams_env(loopback_env(), fault="hang:1:3")
    cmd = launcher_cmd(
        *CPU2,
        "--master_port",
        str(free_port()),
        "--hang_timeout",
        "10",
        "--num_envs",
        "8",
        "--max_iterations",
        "6",
        "--log_root",
        str(tmp_path / "logs"),
    )
    proc = start(cmd, env)
    try:
        wait_until(
            lambda: bool(supervise_dirs(proc)) and len(beats(supervise_dirs(proc)[0])) == 2, proc, "both ranks beat"
        )
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
    assert "no rank made progress for 10 s in training (training limit 10 s, --hang_timeout)" in err
    folders = list((tmp_path / "logs").glob("rsl_rl/*/*/watchdog"))
    assert len(folders) == 1 and {p.name for p in folders[0].iterdir()} == {
        "stack_rank0.txt",
        "stack_rank1.txt",
        "summary.txt",
    }


# ---------------------------------------------------------------------------------------------- failures


@e2e
@linux_only
def test_first_failing_rank_is_named_even_when_torchrun_blames_another(tmp_path: Path) -> None:
    rc, _, err, _ = run_fault(tmp_path, "raise:1:2")
    assert rc == 1, err[-3000:]
    kept = kept_torchrun_text(err)
    root = kept[kept.index("Root Cause") :]
    assert re.search(r"rank\s*:\s*0 \(local_rank: 0\)", root), root  # torchrun blames rank 0 ...
    assert torchrun_log_lines(err) == [], err[-3000:]  # its "failed (exitcode ...)" and SIGTERM lines stay out
    last = err.rstrip().splitlines()[-2:]
    assert re.fullmatch(
        r"\[ERROR\] launcher: first failure: rank 1/2 on node \S+ \(pid \d+\): "
        r"RuntimeError: injected fault at iteration 2",
        last[0],
    ), last  # ... the launcher names rank 1
    assert last[1].startswith('[ERROR] launcher: torchrun\'s "Root Cause" names rank 0'), last


@e2e
@linux_only
def test_rank_killed_by_a_signal_is_named_with_it(tmp_path: Path) -> None:
    rc, _, err, _ = run_fault(tmp_path, "kill:1:2")
    assert rc == 1, err[-3000:]
    assert re.search(r"\[ERROR\] launcher: first failure: rank 1/2 on node \S+ \(pid \d+\): killed by SIGKILL", err), (
        err[-3000:]
    )


# ---------------------------------------------------------------------------------------------- the rules


def beat_as(folder: Path, rank: int, phase: str, iteration: int = -1, pid: int | None = None) -> None:
    """Leave rank ``rank``'s heartbeat in ``folder``, as a rank would (its process: this one unless given)."""
    heartbeat.write_beat(
        folder, Beat(rank, rank, 2, "n", os.getpid() if pid is None else pid, iteration, phase, time.time())
    )


def gone_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    child = subprocess.Popen([sys.executable, "-c", ""])
    child.wait()
    return child.pid


def test_start_up_has_its_own_longer_limit(tmp_path: Path) -> None:
    """While a rank has not begun training, only the start-up limit fires, and the watchdog says so."""
    dog = Watchdog(tmp_path, 10, 600)
    beat_as(tmp_path, 0, "train", 0)
    beat_as(tmp_path, 1, "start")
    assert not dog.check(0.0)  # the first beats: progress
    assert not dog.check(10.0) and not dog.check(599.0)  # past --hang_timeout: rank 1 is still starting
    assert dog.check(600.0)
    assert dog.fired == Limit("start-up", 600, "--startup_timeout") and dog.starting == [1]


def test_training_limit_applies_once_every_rank_trains(tmp_path: Path) -> None:
    dog = Watchdog(tmp_path, 10, 600)
    beat_as(tmp_path, 0, "start")
    beat_as(tmp_path, 1, "start")
    assert not dog.check(0.0)
    beat_as(tmp_path, 0, "train", 0)
    beat_as(tmp_path, 1, "train", 0)
    assert not dog.check(500.0)  # progress: start-up is over, the training clock starts here
    assert not dog.check(509.0)
    assert dog.check(510.0)
    assert dog.fired == Limit("training", 10, "--hang_timeout") and dog.starting == []


def test_a_restarted_group_is_in_start_up_again(tmp_path: Path) -> None:
    """A rank's process gone resets the clock once; while no live rank trains, torchrun restarts the group, which
    is start-up: only the start-up limit fires, and the new attempt's ranks start up under it too."""
    dog = Watchdog(tmp_path, 10, 600)
    dead = gone_pid()
    beat_as(tmp_path, 0, "train", 3, pid=dead)
    beat_as(tmp_path, 1, "train", 2, pid=dead)
    assert not dog.check(0.0)
    assert not any(dog.check(t) for t in (10.0, 100.0, 609.0))  # torchrun restarts the group: start-up
    beat_as(tmp_path, 0, "start")
    assert not dog.check(1001.0)  # the new attempt's first beat: progress
    assert not dog.check(1500.0)  # rank 1's beat is still the dead worker's: start-up
    beat_as(tmp_path, 1, "start")
    assert not dog.check(2001.0) and not dog.check(2011.0)  # both live and starting: --hang_timeout is not it
    assert dog.check(2601.0) and dog.fired is not None and dog.fired.stage == "start-up"


def test_a_record_naming_a_dead_pid_cannot_hold_the_clock(tmp_path: Path, other_rank: int) -> None:
    """A beat naming a process that is gone, beside a live rank that trains: the clock restarts once, then the
    training limit fires, and the report says the pid is not running."""
    dog = Watchdog(tmp_path, 10, 600)
    dead = gone_pid()
    beat_as(tmp_path, 0, "train", 3, pid=other_rank)
    beat_as(tmp_path, 1, "train", 3, pid=dead)
    assert not dog.check(0.0)
    assert not dog.check(1.0)  # the dead pid, first seen: the clock starts again (torchrun may be restarting)
    assert not dog.check(10.0)
    assert dog.check(11.0) and dog.fired == Limit("training", 10, "--hang_timeout")
    report = dog.diagnose(11.0, stack_wait_s=0.0)
    place = {st.rank: st.place() for st in report.ranks}
    assert place[1] == f"not responding (pid {dead}, named by its beat record, is not running)"
    assert 1 in report.culprits


@pytest.fixture
def other_rank() -> Iterator[int]:
    """A live process standing in for a healthy rank (it ignores the stack signal: the test process must not get it)."""
    code = "import signal, time; signal.signal(signal.SIGUSR1, signal.SIG_IGN); print(flush=True); time.sleep(120)"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline()  # the handler is in place
    yield proc.pid
    proc.kill()
    proc.wait()


HEALTHY = {"rank": 1, "local_rank": 1, "world_size": 2, "node": "n", "iteration": 3, "phase": "train", "time": 1.0}


def _json(**fields: object) -> bytes:
    import json

    return json.dumps(fields).encode()


#: (what a rank's beat file holds, the reason the watchdog names) -- issue 38's cases
UNUSABLE = {
    "garbage": (b"\x00\xffnot json at all", "not JSON: truncated or garbage"),
    "truncated": (_json(v=1, **HEALTHY, pid=1)[:40], "not JSON: truncated or garbage"),
    "empty": (b"", "empty"),
    "not an object": (b"[1, 2, 3]", "a JSON list, not an object"),
    "unknown version": (_json(v=99, **HEALTHY, pid=1), "version 99; this launcher reads version 1 (field 'v')"),
    "no version": (_json(**HEALTHY, pid=1), "no version; this launcher reads version 1 (field 'v')"),
    "missing field": (_json(v=1, **{k: v for k, v in HEALTHY.items() if k != "phase"}, pid=1), "field 'phase' missing"),
    "pid 0": (_json(v=1, **HEALTHY, pid=0), "field 'pid': 0 is not a process id"),
    "string pid": (_json(v=1, **HEALTHY, pid="123"), "field 'pid': '123' is not an integer"),
    "unknown phase": (_json(v=1, **{**HEALTHY, "phase": "warp"}, pid=1), "field 'phase': 'warp' is not one of"),
    "another rank's": (_json(v=1, **{**HEALTHY, "rank": 0}, pid=1), "it names rank 0"),
}


@pytest.mark.parametrize("case", sorted(UNUSABLE))
def test_an_unusable_record_is_named_and_counts_as_no_progress(tmp_path: Path, case: str, other_rank: int) -> None:
    """Beside a healthy rank: the watchdog names the bad record once (rank and file), still sees both ranks,
    and fires within its training limit: the bad record never holds the clock back."""
    data, reason = UNUSABLE[case]
    dog = Watchdog(tmp_path, 10, 600)
    beat_as(tmp_path, 0, "train", 3, pid=other_rank)
    heartbeat.beat_path(tmp_path, 1).write_bytes(data)
    assert not dog.check(0.0)
    [notice] = dog.notices()
    assert notice.startswith(f"[WARN] watchdog: rank 1: unusable record {heartbeat.beat_path(tmp_path, 1)} (")
    assert reason in notice and notice.endswith("; counted as no progress")
    heartbeat.beat_path(tmp_path, 1).write_bytes(data + b" ")  # it changes: still no progress
    assert not dog.check(9.0) and dog.notices() == []  # named once
    assert dog.check(10.0) and dog.fired == Limit("training", 10, "--hang_timeout")
    report = dog.diagnose(10.0, stack_wait_s=0.0)
    assert [st.rank for st in report.ranks] == [0, 1]  # the watchdog still sees every rank
    lines = report.summary_lines()
    [bad] = [line for line in lines if "rank 1/2" in line]
    assert bad.startswith(
        f"[ERROR] watchdog:   rank 1/2 (record {heartbeat.beat_path(tmp_path, 1)}): unusable record ("
    )
    assert 1 in report.culprits


def test_every_record_garbage_still_fires(tmp_path: Path) -> None:
    dog = Watchdog(tmp_path, 10, 600)
    for rank in (0, 1):
        heartbeat.beat_path(tmp_path, rank).write_bytes(b"garbage")
    assert not dog.check(0.0)
    assert len(dog.notices()) == 2
    assert dog.check(10.0)
    report = dog.diagnose(10.0, stack_wait_s=0.0)
    assert [st.rank for st in report.ranks] == [0, 1] and report.culprits == [0, 1]
    assert all("/?" in line for line in report.summary_lines()[1:3])  # no usable beat says the world size


def test_a_newer_writers_extra_field_is_tolerated(tmp_path: Path) -> None:
    dog = Watchdog(tmp_path, 10, 600)
    beat_as(tmp_path, 0, "train", 3)
    heartbeat.beat_path(tmp_path, 1).write_bytes(_json(v=1, **HEALTHY, pid=os.getpid(), gpu_temp_c=71))
    assert sorted(dog.beats()) == [0, 1] and dog.notices() == []
    assert dog.beats()[1].phase is heartbeat.Phase.TRAIN


def test_every_record_kind_round_trips_through_the_one_definition(tmp_path: Path) -> None:
    """Beat, failure and run folder: built and read through heartbeat's encode/decode, each with the version."""
    import json

    beat = Beat(0, 0, 2, "n", os.getpid(), 3, heartbeat.Phase.TRAIN, 1.0, "all_reduce")
    failure = heartbeat.Failure(0, 0, "n", os.getpid(), heartbeat.FailureKind.REFUSED, "bad --seed", 2.0)
    heartbeat.write_beat(tmp_path, beat)
    heartbeat.write_failure(tmp_path, failure)
    heartbeat.write_run_dir(tmp_path, tmp_path)
    for name in ("beat.0", "failure.0", heartbeat.RUN_DIR_FILE):
        assert json.loads((tmp_path / name).read_text())[heartbeat.VERSION_FIELD] == heartbeat.VERSION
    assert heartbeat.read_beats(tmp_path) == {0: beat}
    assert heartbeat.read_failures(tmp_path) == {0: failure}
    assert heartbeat.read_run_dir(tmp_path) == tmp_path.resolve()
    (tmp_path / "failure.1").write_text("{}")
    assert heartbeat.scan_failures(tmp_path)[1][1].reason.startswith("no version")
    (tmp_path / heartbeat.RUN_DIR_FILE).write_text(str(tmp_path))  # the unversioned form: not read
    assert heartbeat.read_run_dir(tmp_path) is None


@pytest.mark.parametrize(
    ("hang", "startup", "training", "start_up"),
    [
        (300, 1200, Limit("training", 300, "--hang_timeout"), Limit("start-up", 1200, "--startup_timeout")),
        (3600, 1200, Limit("training", 3600, "--hang_timeout"), Limit("start-up", 3600, "--hang_timeout")),
        (300, 0, Limit("training", 300, "--hang_timeout"), None),
        (0, 1200, None, None),
    ],
)
def test_limits_from_the_options(hang: float, startup: float, training: Limit | None, start_up: Limit | None) -> None:
    """The start-up limit is never shorter than the training one (and then names --hang_timeout, the option to
    raise); 0 leaves start-up unwatched; --hang_timeout 0 turns the whole watchdog off."""
    assert limits(hang, startup) == (training, start_up)


def test_off_limits_never_fire(tmp_path: Path) -> None:
    beat_as(tmp_path, 0, "start")
    unwatched_start = Watchdog(tmp_path, 10, 0)
    off = Watchdog(tmp_path, 0, 600)
    assert not unwatched_start.check(0.0) and not off.check(0.0)
    assert not unwatched_start.check(1e6) and not off.check(1e6)
    beat_as(tmp_path, 0, "train", 0)
    assert not unwatched_start.check(1e6) and unwatched_start.check(1e6 + 10)  # training is still watched
    assert not off.check(1e6) and not off.check(1e7)


def test_report_says_which_limit_fired(tmp_path: Path) -> None:
    dog = Watchdog(tmp_path, 10, 600)
    beat_as(tmp_path, 0, "train", 0)
    beat_as(tmp_path, 1, "start")
    dog.check(0.0)
    assert dog.check(600.0)
    stopped = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        os.kill(stopped.pid, signal.SIGSTOP)
        wait_until(lambda: procs.stopped(stopped.pid), stopped, "the child stopped")
        beat_as(tmp_path, 0, "done", 0)  # out of the stack request (it would go to this very process)
        beat_as(tmp_path, 1, "start", pid=stopped.pid)
        report = dog.diagnose(600.0, stack_wait_s=30)  # a stopped rank is known at once; no wait
    finally:
        stopped.kill()
        stopped.wait()
    first = report.summary_lines()[0]
    assert first.startswith(
        "[ERROR] watchdog: no rank made progress for 600 s in start-up (rank 1 had not begun "
        "training; start-up limit 600 s, --startup_timeout: raise it"
    ), first
    place = {st.rank: st.place() for st in report.ranks}
    assert place[1] == "not responding (stopped by a signal: SIGSTOP, or a debugger holds it)", place
    assert report.culprits == [1], report


def state(
    rank: int, iteration: int, collective: str | None, responding: bool = True, line: int = 1, world: int = 3
) -> RankState:
    beat = Beat(rank, rank, world, "n", 100 + rank, iteration, "train", 0.0)
    return RankState(rank, beat, responding=responding, collective=collective, where=Frame("t.py", line, "f"))


@pytest.mark.parametrize(
    ("states", "culprits", "why"),
    [
        ([state(0, 4, "all_reduce"), state(1, 4, None), state(2, 4, "all_reduce")], [1], "wait in all_reduce"),
        (
            [state(0, 4, "all_reduce"), state(1, 4, None, responding=False), state(2, 4, "all_reduce")],
            [1],
            "wait in all_reduce",
        ),
        ([state(0, 4, None), state(1, 4, None, responding=False), state(2, 4, None)], [1], "did not answer"),
        ([state(0, 5, "broadcast"), state(1, 4, "all_reduce"), state(2, 5, "broadcast")], [1], "behind"),
        (
            [state(0, 4, "all_reduce", line=7), state(1, 4, "all_reduce", line=9), state(2, 4, "all_reduce", line=7)],
            [1],
            "different collective",
        ),
        ([state(0, 4, "all_reduce"), state(1, 4, "all_reduce"), state(2, 4, "all_reduce")], [], "every rank waits"),
        ([state(0, 4, None), state(1, 4, None), state(2, 4, None)], [], "every rank is outside any collective"),
        # a job of one rank (seen on a GPU machine: `--num_gpus 1 --rehearse_fault hang:0:3`): that rank, not "no
        # single culprit"; this node's one rank of a larger world is not the job's only rank
        ([state(0, 4, None, world=1)], [0], "the job's only rank; it is outside any collective"),
        ([state(0, 4, "all_reduce", world=1)], [0], "the job's only rank; it waits in all_reduce, which never"),
        # this node's one rank of a larger world, outside any collective: the other node's ranks wait for it
        ([state(0, 4, None, world=2)], [0], "outside any collective while the job's 2 ranks span several nodes"),
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
        '  File "/repo/src/mgpu_lab/train/adapters/rsl_rl.py", line 120 in _reduce_grads\n'
        '  File "/repo/scripts/train.py", line 200 in <module>\n'
    )
    threads = parse_threads(text)
    assert len(threads) == 2
    collective, caller = locate(main_thread(threads))
    assert collective == "all_reduce"
    assert caller == Frame("/repo/src/mgpu_lab/train/adapters/rsl_rl.py", 120, "_reduce_grads")


def test_a_helper_thread_cut_at_faulthandlers_frame_limit_is_not_taken_for_the_script() -> None:
    """A helper thread deep in an import when the stacks are asked for: faulthandler prints its 100 innermost frames
    and ``...``, so its threading bootstrap is missing. The script's thread, whole, is the one located."""
    importing = "".join(
        f'  File "<frozen importlib._bootstrap>", line {241 + i} in _call_with_frames_removed\n' for i in range(100)
    )
    text = (
        "Thread 0x00007f0000000001 (most recent call first):\n"
        '  File "<frozen importlib._bootstrap_external>", line 729 in _compile_bytecode\n'
        f"{importing}  ...\n"
        "\n"
        "Current thread 0x00007f0000000002 (most recent call first):\n"
        '  File "/repo/tests/fixtures/launcher/beat_rank.py", line 49 in hang\n'
        '  File "/repo/tests/fixtures/launcher/beat_rank.py", line 102 in main\n'
        '  File "/repo/tests/fixtures/launcher/beat_rank.py", line 140 in <module>\n'
    )
    threads = parse_threads(text)
    assert [t.cut for t in threads] == [True, False]
    assert locate(main_thread(threads)) == (None, Frame("/repo/tests/fixtures/launcher/beat_rank.py", 49, "hang"))
    assert main_thread(threads[:1]) == threads[0]  # no whole thread: the cut one still says something


def test_the_main_thread_named_by_the_stack_file_is_the_one_located() -> None:
    """A helper thread caught mid-import when the stacks were asked for, listed first (the newest thread) and without
    its threading bootstrap: by shape alone it passes for the script's thread (a hang report once named
    ``<frozen importlib._bootstrap>`` as where both ranks were). The id on the stack file's first line decides."""
    text = (
        "Thread 0x00007f0000000001 (most recent call first):\n"
        '  File "<frozen importlib._bootstrap>", line 241 in _call_with_frames_removed\n'
        '  File "<frozen importlib._bootstrap>", line 558 in _init_module_attrs\n'
        "\n"
        "Current thread 0x00007F0000000002 (most recent call first):\n"
        '  File "/repo/tests/fixtures/launcher/beat_rank.py", line 49 in hang\n'
        '  File "/repo/tests/fixtures/launcher/beat_rank.py", line 140 in <module>\n'
    )
    threads = parse_threads(text)
    assert [t.ident for t in threads] == ["0x00007f0000000001", "0x00007f0000000002"]
    assert main_thread(threads) == threads[0]  # the shape alone is fooled
    assert locate(main_thread(threads, "0x00007f0000000002")) == (
        None,
        Frame("/repo/tests/fixtures/launcher/beat_rank.py", 49, "hang"),
    )
    assert main_thread(threads, "0x00007f00000000ff") == threads[0]  # an id the dump lacks: the shape, as before


def test_the_stack_files_first_line_is_read_back(tmp_path: Path) -> None:
    path = tmp_path / "stack.0"
    path.write_text(heartbeat.main_thread_line(0x7F0000000002) + "Thread 0x00007f0000000002 (most recent ...)\n")
    assert heartbeat.read_main_thread(path) == "0x00007f0000000002"
    path.write_text("Current thread 0x00007f0000000002 (most recent call first):\n")  # a rank that wrote no line
    assert heartbeat.read_main_thread(path) is None
    assert heartbeat.read_main_thread(tmp_path / "missing") is None


# ---------------------------------------------------------------------------------------------- whose processes


def sleeper() -> subprocess.Popen:
    return subprocess.Popen(["sleep", "120"])


def test_a_beat_naming_a_process_outside_the_job_leaves_it_running(tmp_path: Path) -> None:
    """The watchdog's launcher is ``root``; a beat names a process that is not below it (a crafted or stale record):
    it is never signalled (SIGUSR1's default action would end it) and the report says so."""
    launcher, unrelated = sleeper(), sleeper()
    try:
        dog = Watchdog(tmp_path, 10, 600, root=launcher.pid)
        beat_as(tmp_path, 0, "train", 3, pid=unrelated.pid)
        assert not dog.check(0.0) and dog.check(10.0)
        report = dog.diagnose(10.0, stack_wait_s=0.0)
        assert unrelated.poll() is None  # still running: never signalled
        assert report.ranks[0].place() == (
            f"not signalled: pid {unrelated.pid}, named by its beat record, is no process of this job "
            "(a stale or foreign record)"
        )
    finally:
        for proc in (launcher, unrelated):
            proc.kill()
            proc.wait()


def test_a_beat_naming_a_reused_pid_leaves_that_process_running(tmp_path: Path, other_rank: int) -> None:
    """The pid is this launcher's child, but not the process that wrote the beat (another start time)."""
    reused = sleeper()
    try:
        started = procs.start_time(reused.pid)
        assert started is not None
        heartbeat.write_beat(tmp_path, Beat(0, 0, 2, "n", reused.pid, 3, "train", time.time(), None, started - 1))
        beat_as(tmp_path, 1, "train", 3, pid=other_rank)
        dog = Watchdog(tmp_path, 10, 600)
        assert not dog.check(0.0)
        assert not dog.check(1.0)  # not the process that beat: gone, as far as the clock goes (once)
        assert dog.check(11.0)
        report = dog.diagnose(11.0, stack_wait_s=0.0)
        assert reused.poll() is None
        assert "a reused pid: another process, started at another time" in report.ranks[0].place()
        assert "(a stale or foreign record)" in report.ranks[0].place()
    finally:
        reused.kill()
        reused.wait()


def test_a_beat_carries_its_process_start_time(tmp_path: Path) -> None:
    from mgpu_lab.health.rank_progress import Supervision

    Supervision(str(tmp_path), 0, 0, 1).beat(2, heartbeat.Phase.TRAIN)
    assert heartbeat.read_beats(tmp_path)[0].started == procs.start_time(os.getpid())
