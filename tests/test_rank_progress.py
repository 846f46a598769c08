"""mgpu_lab.health.rank_progress and mgpu_lab.runs.resume in this process: the fault switch's grammar, the step clock,
heartbeat/stack/failure files, and how a run's checkpoints and job folder are found (no training here)."""

from __future__ import annotations

import faulthandler
import os
import signal
import threading
from pathlib import Path

import pytest

from mgpu_lab.health import heartbeat, rank_progress
from mgpu_lab.health.rank_progress import Fault, StepClock, parse_faults
from mgpu_lab.health.stack_text import main_thread, parse_threads
from mgpu_lab.runs import resume
from mgpu_lab.train.dist import DistContext, device_warning

# --- injected faults ----------------------------------------------------------------------------------


def test_fault_grammar():
    assert parse_faults(None) == () and parse_faults("  ") == ()
    assert parse_faults("hang:1:3, raise:0:2,skip:1:0,signal:1:4:SIGTERM,signal:0:1:2,signal:2:5") == (
        Fault("hang", 1, 3),
        Fault("raise", 0, 2),
        Fault("skip", 1, 0),
        Fault("signal", 1, 4, int(signal.SIGTERM)),
        Fault("signal", 0, 1, int(signal.SIGINT)),
        Fault("signal", 2, 5, int(signal.SIGKILL)),
    )
    assert parse_faults("signal:0:1:term")[0].signum == int(signal.SIGTERM)


@pytest.mark.parametrize(
    "text",
    [
        "hang",
        "hang:1",
        "crash:1:2",
        "hang:-1:2",
        "hang:1:x",
        "hang:1:2:9",
        "signal:1:2:SIGNOPE",
        "signal:1:2:999",
        "hang:1:2,",
        "raise:1:2:3:4",
    ],
)
def test_bad_fault_entries_are_one_line_errors(text):
    with pytest.raises(ValueError) as info:
        parse_faults(text)
    message = str(info.value)
    assert message.startswith("fault: bad entry") and "\n" not in message


def test_faults_fire_on_the_first_attempt_only(tmp_path):
    faults = parse_faults("raise:0:1")
    first = rank_progress.from_env(0, 0, 1, faults, environ={})
    with pytest.raises(RuntimeError, match="injected fault: raise at iteration 1 on rank 0"):
        for it in range(3):
            first.on_iteration(it)
    assert first.iteration == 0  # the faulty iteration was never reached
    restarted = rank_progress.from_env(0, 0, 1, faults, environ={"TORCHELASTIC_RESTART_COUNT": "1"})
    for it in range(3):
        restarted.on_iteration(it)
    other_rank = rank_progress.from_env(1, 1, 2, faults, environ={})
    for it in range(3):
        other_rank.on_iteration(it)


def test_a_resumed_run_fires_at_the_first_iteration_past_iter():
    progress = rank_progress.from_env(0, 0, 1, parse_faults("raise:0:3"), environ={})
    with pytest.raises(RuntimeError, match="at iteration 5"):
        progress.on_iteration(5)


# --- the step clock ------------------------------------------------------------------------------------


def test_step_clock_calls_the_hook_at_each_iterations_first_step():
    seen: list[tuple[int, int]] = []
    clock = StepClock(3, start_iteration=4)
    clock.on_iteration = lambda it: seen.append((it, clock.batches))
    for _ in range(7):
        clock.tick(10)
    assert seen == [(4, 0), (5, 3), (6, 6)]
    assert (clock.batches, clock.env_steps) == (7, 70)
    with pytest.raises(ValueError):
        StepClock(0)


# --- supervision files ---------------------------------------------------------------------------------


def test_beats_failure_run_dir_and_stack_dump(tmp_path):
    env = {heartbeat.SUPERVISE_DIR_ENV: str(tmp_path)}
    progress = rank_progress.from_env(3, 1, 4, (), environ=env)
    try:
        progress.start()
        beats = heartbeat.read_beats(tmp_path)
        assert list(beats) == [3] and (beats[3].phase, beats[3].iteration, beats[3].world_size) == ("start", -1, 4)
        progress.on_iteration(0)
        progress.on_iteration(1)
        beat = heartbeat.read_beats(tmp_path)[3]
        assert (beat.phase, beat.iteration, beat.local_rank, beat.pid) == ("train", 1, 1, os.getpid())
        helper = threading.Thread(target=threading.Event().wait, args=(30,), daemon=True)  # listed before main
        helper.start()
        os.kill(os.getpid(), heartbeat.STACK_SIGNAL)  # faulthandler writes synchronously in the handler
        path = heartbeat.stack_path(tmp_path, 3)
        stack = path.read_text()
        assert "test_beats_failure_run_dir_and_stack_dump" in stack
        # the first line names the main thread by the id the dump gives it: the watchdog reads that thread
        main = heartbeat.read_main_thread(path)
        assert stack.splitlines()[0] == f"# main thread {main}" and main == f"0x{threading.main_thread().ident:016x}"
        threads = parse_threads(stack)
        assert len(threads) >= 2 and threads[0].ident == f"0x{helper.ident:016x}"
        frames = main_thread(threads, main)
        assert frames[0].func == "test_beats_failure_run_dir_and_stack_dump", frames[:3]
        progress.done()
        assert heartbeat.read_beats(tmp_path)[3].phase == "done"
    finally:
        faulthandler.unregister(heartbeat.STACK_SIGNAL)
    progress.failed(RuntimeError("boom\nsecond line"))
    progress.failed(ValueError("later"))  # the first failure is the one that counts
    failure = heartbeat.read_failures(tmp_path)[3]
    assert (failure.kind, failure.detail) == ("exception", "RuntimeError: boom")
    progress.run_dir(tmp_path / "run")  # rank 3: not rank 0, writes nothing
    assert heartbeat.read_run_dir(tmp_path) is None
    rank_progress.from_env(0, 0, 4, (), environ=env).run_dir(tmp_path / "run")
    assert heartbeat.read_run_dir(tmp_path) == (tmp_path / "run").resolve()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "temp files left behind"


def test_without_the_folder_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    progress = rank_progress.from_env(0, 0, 1, (), environ={})
    progress.start()
    progress.on_iteration(0)
    progress.done()
    progress.failed(RuntimeError("x"))
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="not a folder"):
        rank_progress.from_env(0, 0, 1, (), environ={heartbeat.SUPERVISE_DIR_ENV: str(tmp_path / "missing")})


def test_cuda_rank_on_the_wrong_device_is_warned():
    ctx = DistContext(True, 1, 1, 2, "cuda:1", "nccl")
    assert device_warning(ctx, 1) is None
    line = device_warning(ctx, 0)
    assert line.startswith("[WARN] rank 1/2: running on cuda:0, not cuda:1") and "\n" not in line
    assert device_warning(DistContext(True, 1, 1, 2, "cpu", "gloo"), 0) is None


# --- resume: runs, job keys, checkpoints ---------------------------------------------------------------


def _run(root: Path, name: str, *checkpoints: str, key: str | None = None) -> Path:
    run = root / "rsl_rl" / "Toy-Cartpole-v0" / name
    run.mkdir(parents=True)
    for ckpt in checkpoints:
        (run / ckpt).write_bytes(b"x")
    if key is not None:
        resume.record_job_key(run, key)
    return run


def _listing(run_dir: Path) -> list[tuple[int, Path]]:
    return resume.numbered(run_dir, "model_*.pt", r"^model_(\d+)\.pt$", offset=1)


def test_latest_checkpoint_of_the_newest_run(tmp_path):
    assert resume.latest_checkpoint(tmp_path, "rsl_rl", "Toy-Cartpole-v0", _listing) is None
    _run(tmp_path, "2026-01-01_10-00-00", "model_0.pt", "model_9.pt")
    newer = _run(tmp_path, "2026-01-02_10-00-00_demo", "model_2.pt", "model_10.pt", "model_x.pt")
    _run(tmp_path, "2026-01-03_10-00-00")  # newest run, but it never saved
    it, path = resume.latest_checkpoint(tmp_path, "rsl_rl", "Toy-Cartpole-v0", _listing)
    assert (it, path) == (11, (newer / "model_10.pt").resolve())
    assert resume.latest_checkpoint(tmp_path, "rsl_rl", "Toy-Pendulum-SwingUp-v0", _listing) is None


def test_a_restart_finds_its_jobs_run_folder(tmp_path):
    mine = _run(tmp_path, "2026-01-01_10-00-00", key="job-42")
    _run(tmp_path, "2026-01-02_10-00-00", key="job-43")
    assert resume.find_job_run(tmp_path, "rsl_rl", "Toy-Cartpole-v0", "job-42") == mine.resolve()
    assert resume.find_job_run(tmp_path, "rsl_rl", "Toy-Cartpole-v0", "job-44") is None
    assert resume.restart_count({}) == 0 and resume.restart_count({"TORCHELASTIC_RESTART_COUNT": "2"}) == 2
    with pytest.raises(ValueError):
        resume.restart_count({"TORCHELASTIC_RESTART_COUNT": "-1"})
    assert resume.job_key({"MGPU_LAB_JOB_KEY": " k "}) == "k" and resume.job_key({}) is None
    assert resume.resume_line("/a/model_4.pt", 5, 0) == "[INFO] resumed from /a/model_4.pt at iteration 5"
    assert resume.resume_line("/a/model_4.pt", 5, 2) == "[INFO] restart 2: resumed from /a/model_4.pt at iteration 5"
