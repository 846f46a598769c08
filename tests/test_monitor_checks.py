"""The job monitor's parts, each alone and in-process: its checks (each answers "what happened by now" from
made-up times and inputs), its state machine driven by a recording supervisor, and the NCCL trace folders.
The whole monitor runs end to end in tests/test_watchdog.py, tests/test_launcher_e2e.py and tests/test_cluster_e2e.py.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mgpu_lab.health import heartbeat
from mgpu_lab.health.heartbeat import Beat
from mgpu_lab.health.watchdog import Watchdog
from mgpu_lab.job import checks
from mgpu_lab.job.config import LaunchConfig, read_scheduler_env
from mgpu_lab.job.monitor import RESTARTED, JobEnvironment, JobMonitor, State
from mgpu_lab.job.nccl_trace import DUMP_ENV, PIPE_ENV, NcclTrace


def launch_config(**given: object) -> LaunchConfig:
    values: dict[str, object] = {
        "rl_library": "rsl_rl",
        "forwarded": (),
        "train_script": "/nowhere/train.py",
        "jax": False,
        "device": "cpu",
        "on_cpu": True,
        "nproc": "2",
        "nnodes": None,
        "node_rank": None,
        "master_addr": None,
        "master_port": None,
        "rdzv_backend": None,
        "rdzv_endpoint": None,
        "rdzv_id": None,
        "rdzv_timeout_given": None,
        "hang_timeout": 5.0,
        "startup_timeout": 20.0,
        "log_dir": None,
        "log_all_ranks": False,
        "local_ranks_filter": None,
        "coordinator_address": None,
        "torchrun_options": (),
        "hosts_store": True,
        "grace_s": 1.0,
        "dry_run": False,
        "environ": {},
    }
    values.update(given)
    values.setdefault("scheduler", read_scheduler_env(values["environ"]))  # type: ignore[arg-type]
    return LaunchConfig(**values)  # type: ignore[arg-type]


def beat(rank: int, iteration: int, phase: str = "train", pid: int | None = None) -> Beat:
    return Beat(
        rank=rank,
        local_rank=rank,
        world_size=2,
        pid=os.getpid() if pid is None else pid,
        node="n",
        iteration=iteration,
        phase=phase,
        time=float(iteration),
    )


# ---------------------------------------------------------------------------------------------- the checks


def test_rendezvous_deadline_waits_reports_then_expires() -> None:
    check = checks.RendezvousDeadline(start=100.0, timeout_s=50.0)
    assert check.report_every == 5.0  # a tenth of the deadline
    assert check.poll(101.0, joined=False) is None
    assert check.poll(105.0, joined=False) == checks.WAITING
    assert check.poll(106.0, joined=False) is None  # said once per report_every
    assert check.left(106.0) == 44.0
    assert check.poll(110.0, joined=False) == checks.WAITING
    assert check.poll(150.0, joined=False) == checks.EXPIRED
    assert check.poll(150.0, joined=True) == checks.JOINED  # joining wins over the deadline


@pytest.mark.parametrize(("timeout", "every"), [(5.0, 1.0), (100.0, 10.0), (3600.0, 30.0)])
def test_rendezvous_reports_every_tenth_between_one_and_thirty_seconds(timeout: float, every: float) -> None:
    assert checks.RendezvousDeadline(0.0, timeout).report_every == every


def test_hang_check_follows_the_watchdog_and_is_off_at_zero(tmp_path: Path) -> None:
    heartbeat.write_beat(tmp_path, beat(0, 1))
    heartbeat.write_beat(tmp_path, beat(1, 1))
    on = checks.HangCheck(Watchdog(tmp_path, 5.0, 20.0), 5.0)
    off = checks.HangCheck(Watchdog(tmp_path, 0.0, 20.0), 0.0)
    assert not on.poll(0.0) and not off.poll(0.0)  # the first beats are progress
    assert not on.poll(4.0)
    assert on.poll(5.0) and not off.poll(5.0)


def test_liveness_names_vanished_ranks_and_a_restart_revives_them() -> None:
    living = {10, 11}
    check = checks.Liveness(alive=lambda pid: pid in living)
    beats = {0: beat(0, 1, pid=10), 1: beat(1, 1, pid=11)}
    assert check.poll(beats, 1.0) == set()
    living.discard(11)
    assert check.poll(beats, 2.0) == {1}
    assert check.last_alive == {0: 2.0, 1: 1.0}
    living.add(12)  # a restarted worker beats for rank 1
    assert check.poll({**beats, 1: beat(1, 0, pid=12)}, 3.0) == set()


def test_liveness_ignores_a_rank_never_seen_alive() -> None:
    check = checks.Liveness(alive=lambda pid: False)
    assert check.poll({0: beat(0, 1, pid=99)}, 1.0) == set()


def test_failure_file_is_seen_once_written(tmp_path: Path) -> None:
    path = tmp_path / "jax_error.json"
    assert not checks.FailureFile(None).poll()
    check = checks.FailureFile(str(path))
    assert not check.poll()
    path.write_text("{}")
    assert check.poll()


# ---------------------------------------------------------------------------------------------- the states


class Recorder:
    """The supervisor as the monitor sees it: a pid (none here) and stop(), which records its call."""

    pid = None

    def __init__(self) -> None:
        self.stops: list[tuple[int, float | None]] = []
        self.killed: list[int] = []

    def stop(self, signum: int, grace_s: float | None = None) -> None:
        self.stops.append((signum, grace_s))

    def kill_ranks(self, pids: list[int]) -> None:
        self.killed += pids


def test_monitor_moves_from_rendezvous_to_running_on_the_first_beat(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    monitor = JobMonitor(launch_config(rdzv_timeout_given=20.0), str(tmp_path), start=0.0, error_file=None, trace=None)
    supervisor = Recorder()
    assert monitor.state is State.RENDEZVOUS
    monitor.tick(supervisor, 1.0)
    assert monitor.state is State.RENDEZVOUS
    heartbeat.write_beat(tmp_path, beat(0, 0, "start"))
    monitor.tick(supervisor, 3.0)
    assert monitor.state is State.RUNNING and supervisor.stops == []
    assert "rendezvous complete after 3 s" in capsys.readouterr().err


def test_monitor_stops_the_job_at_the_rendezvous_deadline(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    monitor = JobMonitor(launch_config(rdzv_timeout_given=10.0), str(tmp_path), start=0.0, error_file=None, trace=None)
    supervisor = Recorder()
    monitor.tick(supervisor, 1.0)
    assert "waiting for the rendezvous at static 127.0.0.1:29500" in capsys.readouterr().err
    monitor.tick(supervisor, 10.0)
    assert monitor.state is State.STOPPING and monitor.stopping_for is State.RDZV_TIMEOUT
    assert supervisor.stops == [(signal.SIGTERM, 1.0)]  # the config's grace, under the monitor's cap
    assert monitor.verdict is not None and "rendezvous deadline passed after 10 s" in monitor.verdict
    assert "rank(s) 0-1 of 2 never joined on this node" in monitor.verdict, monitor.verdict
    assert "other node" not in monitor.verdict
    monitor.tick(supervisor, 11.0)  # stopping: nothing more is checked, nothing stopped twice
    assert len(supervisor.stops) == 1


def test_monitor_stops_the_job_on_a_jax_error_file(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    error = tmp_path / "jax_error.json"
    monitor = JobMonitor(launch_config(jax=True), str(tmp_path), start=0.0, error_file=str(error), trace=None)
    supervisor = Recorder()
    assert monitor.state is State.RUNNING  # skrl's JAX launcher has no rendezvous of its own
    monitor.tick(supervisor, 1.0)
    assert supervisor.stops == []
    error.write_text("{}")
    monitor.tick(supervisor, 2.0)
    assert supervisor.stops == [(signal.SIGTERM, None)] and monitor.stopping_for is None  # the ranks' report decides
    assert "a JAX rank failed" in capsys.readouterr().err


def test_monitor_reports_a_hang_and_stops_with_exit_3(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The stuck rank is a stopped process: the watchdog asks no stack of it, and the monitor kills it."""
    rank = subprocess.Popen(["sleep", "120"])
    try:
        os.kill(rank.pid, signal.SIGSTOP)
        os.waitid(os.P_PID, rank.pid, os.WSTOPPED)  # the stop has taken effect (the event, not a sleep)
        (tmp_path / "run").mkdir()
        heartbeat.write_run_dir(tmp_path, tmp_path / "run")
        monitor = JobMonitor(launch_config(hang_timeout=5.0), str(tmp_path), start=0.0, error_file=None, trace=None)
        supervisor = Recorder()
        heartbeat.write_beat(tmp_path, beat(0, 1, pid=rank.pid))
        monitor.tick(supervisor, 1.0)
        assert monitor.state is State.RUNNING and supervisor.stops == []
        monitor.tick(supervisor, 7.0)
        assert monitor.state is State.STOPPING and monitor.stopping_for is State.HUNG
        assert supervisor.stops == [(signal.SIGTERM, 1.0)]
        assert supervisor.killed == [rank.pid]  # the supervisor, the one component that signals ranks, kills it
    finally:
        rank.kill()
        rank.wait()
    err = capsys.readouterr().err
    assert "no rank made progress for 5 s" in err and "stopping the job (exit 3)" in err
    assert f"rank 0 (pid {rank.pid}) is stopped and cannot take SIGTERM: killing it" in err
    assert (tmp_path / "run" / "watchdog").is_dir()


# ---------------------------------------------------------------------------------------------- the trace


def test_trace_defaults_put_dumps_and_pipes_in_one_folder(tmp_path: Path) -> None:
    env: dict[str, str] = {}
    trace = NcclTrace.configure(env, str(tmp_path), "job-1")
    assert env[DUMP_ENV] == env[PIPE_ENV] == str(tmp_path / "nccl_trace_job-1" / "nccl_trace_rank_")
    assert (trace.dump_prefix, trace.pipe_prefix) == (env[DUMP_ENV], env[PIPE_ENV])
    assert (tmp_path / "nccl_trace_job-1").is_dir()


def test_a_user_set_dump_file_does_not_move_the_pipes(tmp_path: Path) -> None:
    """The bug: with TORCH_FR_DUMP_TEMP_FILE set by the user, the monitor listed the dumps' folder for the
    pipes, which the ranks make under TORCH_NCCL_DEBUG_INFO_PIPE_FILE (the launcher's folder): no rank was
    ever asked to dump. Here a FIFO stands where a rank would make its pipe, and must be written to."""
    user = tmp_path / "mine" / "fr_"
    env = {DUMP_ENV: str(user)}
    trace = NcclTrace.configure(env, str(tmp_path / "logs"), "job-2")
    assert trace.dump_prefix == str(user) and user.parent.is_dir()
    pipe = Path(env[PIPE_ENV] + "0.pipe")
    assert pipe.parent != user.parent
    os.mkfifo(pipe)
    reader = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)  # the rank's end
    try:
        assert trace.request_dumps() == 1
        assert os.read(reader, 16) == b"1\n"
    finally:
        os.close(reader)


def test_only_the_jobs_own_pipes_are_asked(tmp_path: Path) -> None:
    env = {PIPE_ENV: str(tmp_path / "p_")}
    trace = NcclTrace.configure(env, str(tmp_path), "k")
    for name in ("p_0.pipe", "p_1.pipe", "other_0.pipe", "p_2"):
        os.mkfifo(tmp_path / name)
    assert [Path(p).name for p in trace.pipes()] == ["p_0.pipe", "p_1.pipe"]
    assert stat.S_ISFIFO(os.stat(trace.pipes()[0]).st_mode)
    assert trace.request_dumps() == 0  # nobody reads them: skipped without blocking


def test_the_job_environment_turns_the_recorder_on_for_cuda_ranks_only(tmp_path: Path) -> None:
    cuda = JobEnvironment(
        launch_config(on_cpu=False, device=None, log_dir=str(tmp_path), environ={"A": "1"}), str(tmp_path / "sup")
    )
    assert cuda.trace is not None and cuda.env["A"] == "1"
    assert cuda.env[PIPE_ENV].startswith(str(tmp_path / f"nccl_trace_{cuda.key}"))
    assert JobEnvironment(launch_config(), str(tmp_path / "sup")).trace is None


def test_job_key_order(tmp_path: Path) -> None:
    def key(**environ: str) -> str:
        return JobEnvironment(launch_config(environ=environ, rdzv_id=None), str(tmp_path / "s")).key

    assert key(MGPU_LAB_JOB_KEY="mine", SLURM_JOB_ID="7") == "mine"
    assert key(SLURM_JOB_ID="7", PET_RDZV_ID="r") == "slurm-7"
    assert key(PET_RDZV_ID="r") == "rdzv-r"
    assert key().startswith("job-") and key() != key()


def test_only_a_process_running_the_script_counts_as_a_started_worker(tmp_path: Path) -> None:
    """A stand-in torchrun names the script in its command line and forks a child that runs no program (its
    command line is the parent's): no worker yet, so the rendezvous deadline still holds (a false "rendezvous
    complete" once left a launcher waiting forever on an endpoint that never answers). Then the child runs a
    program naming the script: a worker."""
    script = str(tmp_path / "train.py")
    forked, go, ran = tmp_path / "forked", tmp_path / "go", tmp_path / "ran"
    worker = f"import time; open({str(ran)!r}, 'w').close(); time.sleep(60)"
    code = (
        "import os, sys, time\n"
        "def wait(path):\n"
        "    while not os.path.exists(path): time.sleep(0.01)\n"
        "if os.fork() == 0:\n"
        f"    open({str(forked)!r}, 'w').close(); wait({str(go)!r})\n"
        f"    os.execv(sys.executable, [sys.executable, '-c', {worker!r}, sys.argv[1]])\n"
        "time.sleep(60)\n"
    )
    torchrun = subprocess.Popen([sys.executable, "-c", code, script], start_new_session=True)
    monitor = JobMonitor(launch_config(train_script=script), str(tmp_path), start=0.0, error_file=None, trace=None)
    try:
        for marker, started in ((forked, False), (ran, True)):
            deadline = time.monotonic() + 30
            while not marker.exists():
                assert torchrun.poll() is None and time.monotonic() < deadline, f"no {marker.name}"
                time.sleep(0.01)
            assert monitor._workers_started(torchrun.pid) is started, marker.name
            go.touch()
    finally:
        os.killpg(torchrun.pid, signal.SIGKILL)
        torchrun.wait()


# ---------------------------------------------------------------------------------------------- terminal states


TORCHRUN_LOG = (
    b"W1204 12:00:00.000000 4959 torch/distributed/elastic/multiprocessing/api.py:900] Sending process 5001 "
    b"closing signal SIGTERM\n"
    b"E1204 12:00:00.100000 4959 torch/distributed/elastic/multiprocessing/api.py:874] failed (exitcode: 1) "
    b"local_rank: 1 (pid: 5002) of binary: /usr/bin/python\n"
    b"I1204 12:00:00.200000 4959 torch/distributed/elastic/agent/server/api.py:700] [default] Worker group FAILED. "
    b"2/3 attempts left; will restart worker group\n"
)


def test_torchruns_log_lines_are_kept_not_shown(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    monitor = JobMonitor(launch_config(), str(tmp_path), start=0.0, error_file=None, trace=None)
    shown: list[bytes] = []
    monitor.router.write = shown.append
    monitor.stderr(b"[rank0]: step 1\n" + TORCHRUN_LOG[:50])
    monitor.stderr(TORCHRUN_LOG[50:] + b"[rank0]: step 2\n")
    assert b"".join(shown) == b"[rank0]: step 1\n[rank0]: step 2\n"
    assert monitor.router.kept() == TORCHRUN_LOG


def test_a_restart_is_said_once_in_the_launchers_words(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """torchrun says it restarted the group only at its INFO level (kept out): the beats' new pids say it."""
    monitor = JobMonitor(launch_config(), str(tmp_path), start=0.0, error_file=None, trace=None)
    supervisor = Recorder()
    for generation, pids in enumerate([(101, 102), (201, 102), (201, 202), (301, 302)]):
        for rank, pid in enumerate(pids):
            heartbeat.write_beat(tmp_path, beat(rank, generation, pid=pid))
        monitor.tick(supervisor, float(generation))
    assert capsys.readouterr().err.count(RESTARTED) == 2  # two restarts, however their ranks beat


class Job:
    """What finish() needs of a JobEnvironment."""

    key = "k"
    error_file = None


@pytest.mark.parametrize(
    ("stopping_for", "interrupted", "rc", "state", "status"),
    [
        (None, None, 0, State.SUCCEEDED, 0),
        (State.HUNG, None, 143, State.HUNG, 3),
        (State.RDZV_TIMEOUT, None, 143, State.RDZV_TIMEOUT, 4),
        (None, signal.SIGINT, 130, State.INTERRUPTED, 130),
        (State.HUNG, signal.SIGTERM, 143, State.INTERRUPTED, 143),  # the user's interrupt wins over the hang
        (None, None, 1, State.FAILED, 1),
    ],
)
def test_the_outcome_is_a_terminal_state_with_its_exit_status(
    tmp_path: Path, stopping_for: State | None, interrupted: int | None, rc: int, state: State, status: int
) -> None:
    monitor = JobMonitor(launch_config(log_dir=str(tmp_path)), str(tmp_path), start=0.0, error_file=None, trace=None)
    monitor.stopping_for = stopping_for
    monitor.verdict = "mgpu-lab train_multigpu: error: rendezvous deadline" if stopping_for else None
    monitor.router.feed(TORCHRUN_LOG)
    outcome = monitor.finish(rc, interrupted, Job())  # type: ignore[arg-type]
    assert outcome.state is state and outcome.exit_status == status and monitor.state is state
    if state is State.SUCCEEDED:
        assert outcome.lines == ()
        return
    kept = [line for line in outcome.lines if "torchrun's own" in line]
    assert len(kept) == 1, outcome.lines  # every other path names the file that keeps torchrun's lines
    assert Path(kept[0].rsplit(" ", 1)[1]).read_bytes().startswith(TORCHRUN_LOG)
    if state is State.RDZV_TIMEOUT:
        assert outcome.lines[-1] == monitor.verdict  # the verdict stays the last line


# ------------------------------------------------------------------------------------- the rendezvous's words


def test_a_single_node_rendezvous_timeout_names_the_ranks_that_never_joined() -> None:
    from mgpu_lab.job import rendezvous

    line = rendezvous.missing(launch_config(nproc="4", rdzv_timeout_given=7.0), joined={1})
    assert line.startswith("rendezvous deadline passed after 7 s (--rdzv_timeout): never arrived: "), line
    assert "rank(s) 0, 2-3 of 4 never joined on this node (" in line, line
    assert "torchrun's rendezvous at 127.0.0.1:29500 never completed" in line, line
    assert "other node" not in line


def test_a_single_node_rank_count_torchrun_finds_is_not_counted() -> None:
    from mgpu_lab.job import rendezvous

    line = rendezvous.missing(launch_config(nproc="gpu"))
    assert "never arrived: the ranks (none joined) on this node" in line and "other node" not in line, line


def test_several_nodes_still_name_the_other_nodes() -> None:
    from mgpu_lab.job import rendezvous

    line = rendezvous.missing(launch_config(nnodes="2", node_rank=0))
    assert "the other node(s) of 2 expected never joined at 127.0.0.1:29500" in line, line


# ---------------------------------------------------------------------------------------------- the flight recorder


def test_the_job_environment_sizes_the_flight_recorder_for_every_backend_unless_the_user_did(tmp_path: Path) -> None:
    from mgpu_lab.health.flight_recorder import BUFFER_ENV, LEGACY_BUFFER_ENV

    assert JobEnvironment(launch_config(), str(tmp_path / "s")).env[BUFFER_ENV] == "2000"  # CPU ranks on gloo too
    for mine, other in (({BUFFER_ENV: "0"}, LEGACY_BUFFER_ENV), ({LEGACY_BUFFER_ENV: "64"}, BUFFER_ENV)):
        env = JobEnvironment(launch_config(environ=mine), str(tmp_path / "s")).env
        assert all(env[k] == v for k, v in mine.items()) and other not in env, env  # what the user set wins


def test_every_listening_rank_dumps_into_the_run_folder_and_the_report_names_it(tmp_path: Path) -> None:
    """The protocol in-process: two ranks' listener threads (their dump replaced by a file write, the seam), one
    request; a FIFO nobody reads (a rank gone) is skipped without blocking."""
    from mgpu_lab.health import flight_recorder

    supervise, run = tmp_path / "sup", tmp_path / "run"
    supervise.mkdir()
    run.mkdir()

    def fake_dump(folder: str, rank: int) -> None:
        (Path(folder) / flight_recorder.dump_name("gloo", rank)).write_bytes(b"dump")

    for rank in (0, 1):
        flight_recorder.Listener(supervise, rank, fake_dump).start()
    os.mkfifo(flight_recorder.pipe_path(supervise, 2))  # rank 2's FIFO, its process gone
    request = flight_recorder.DumpRequest(supervise, run)
    assert sorted(request.asked) == [0, 1]
    folder = run / flight_recorder.FOLDER
    assert request.lines() == [
        f"[ERROR] watchdog: flight recorder dumps of 2 rank(s) in {folder}; read them with: mgpu-lab trace {run}"
    ]
    assert sorted(p.name for p in folder.iterdir()) == ["gloo_rank_0", "gloo_rank_1"]
    assert flight_recorder.found_lines(run) == [
        f"[ERROR] launcher: flight recorder dumps of rank 0, 1 in {folder}; read them with: mgpu-lab trace {run}"
    ]
    assert flight_recorder.found_lines(tmp_path / "elsewhere") == []


def test_no_listening_rank_makes_no_folder(tmp_path: Path) -> None:
    from mgpu_lab.health import flight_recorder

    request = flight_recorder.DumpRequest(tmp_path, tmp_path / "run")
    assert request.asked == [] and request.lines() == [] and not (tmp_path / "run").exists()


def test_each_torch_generation_dumps_what_it_records() -> None:
    """torch 2.8+ dumps every backend through ``_dump_fr_trace``; older torch only NCCL's, through
    ``_dump_nccl_trace``; a backend the installed torch cannot dump is a LookupError (one warning line)."""
    from types import SimpleNamespace

    from mgpu_lab.health.flight_recorder import record_of

    new = SimpleNamespace(_dump_fr_trace=lambda **kw: f"fr:{kw['backend']}".encode())
    old = SimpleNamespace(_dump_nccl_trace=lambda **kw: b"nccl-only")
    assert record_of(new, "gloo") == b"fr:gloo" and record_of(old, "nccl") == b"nccl-only"
    with pytest.raises(LookupError, match="no flight recorder dump for gloo"):
        record_of(old, "gloo")


def test_a_request_of_another_version_is_one_warning_and_no_dump(tmp_path: Path, capfd) -> None:
    """The request is a record of the rank protocol's codec, one a line: a rank never dumps where a request it
    cannot read points, and keeps listening. Requests are lines of one stream, so two that come together (one
    read) are each served."""
    from mgpu_lab.health import flight_recorder, heartbeat

    dumped: list[str] = []
    flight_recorder.Listener(tmp_path, 0, lambda folder, rank: dumped.append(folder)).start()

    def send(data: bytes) -> None:
        fd = os.open(flight_recorder.pipe_path(tmp_path, 0), os.O_WRONLY)  # blocks until the listener reads
        os.write(fd, data)
        os.close(fd)

    (tmp_path / "good").mkdir()
    send(json.dumps({"v": 999, "path": str(tmp_path)}).encode() + b"\n")
    send(heartbeat.encode(heartbeat.RunDir(str(tmp_path / "good"))) + b"\n")
    deadline = time.monotonic() + 30  # the dump follows the second request's read: no sleep tuned to a machine
    while not dumped and time.monotonic() < deadline:
        time.sleep(0.01)
    assert dumped == [str(tmp_path / "good")], dumped
    warning = (
        "[WARN] rank 0: unusable dump request (version 999; this launcher reads version 1 (field 'v'): a newer "
        "launcher wrote it)"
    )
    assert warning in capfd.readouterr().err.splitlines()


def test_a_rank_with_nothing_to_dump_answers_and_a_silent_one_is_named(tmp_path: Path, monkeypatch) -> None:
    """A rank without a process group (a JAX rank, one still starting) answers with no dump: no folder line, no
    wait; a rank that holds its FIFO but never answers (stopped by a signal) is named once the deadline passed."""
    from mgpu_lab.health import flight_recorder

    flight_recorder.Listener(tmp_path, 0, lambda folder, rank: None).start()
    request = flight_recorder.DumpRequest(tmp_path, tmp_path / "run")
    assert request.asked == [0] and request.lines() == [] and request.answered() == {0}

    monkeypatch.setattr(flight_recorder, "DUMP_WAIT_S", 0.2)
    frozen = tmp_path / "frozen"
    frozen.mkdir()
    os.mkfifo(flight_recorder.pipe_path(frozen, 3))
    held = os.open(flight_recorder.pipe_path(frozen, 3), os.O_RDWR)  # a reader that never reads
    try:
        lines = flight_recorder.DumpRequest(frozen, tmp_path / "run").lines()
    finally:
        os.close(held)
    assert lines == ["[WARN] watchdog: rank 3 did not answer the flight recorder request within 0.2 s"]
