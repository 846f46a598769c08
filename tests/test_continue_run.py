"""--continue_run's metadata and lock (mgpu_lab.runs.continue_run), in-process; and the live-stack collection with this
test process as a rank."""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mgpu_lab.core import procs
from mgpu_lab.core.errors import UsageError
from mgpu_lab.health import heartbeat, live_stacks
from mgpu_lab.runs import continue_run
from mgpu_lab.train.checks import check_continue_run

LIB, TASK = "rsl_rl", "Toy-Cartpole-v0"


def make_run(
    root: Path, name: str = "2026-01-01_00-00-00", library: str = LIB, task: str = TASK, meta: bool = True
) -> Path:
    run = root / library / task / name
    run.mkdir(parents=True)
    if meta:
        continue_run.write_meta(run, library, task, "torch")
    return run


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def write_lock(
    run: Path,
    *,
    pid: int,
    host: str | None = None,
    key: str = "job-other",
    age: float = 0.0,
    lease: float = continue_run.LEASE_S,
) -> None:
    body = {
        "host": host or socket.gethostname(),
        "pid": pid,
        "job_key": key,
        "launcher_pid": None,
        "lease_s": lease,
        "renewed": time.time() - age,
    }
    (run / continue_run.LOCK_FILE).write_text(json.dumps(body))


def test_meta_round_trip_and_mismatch(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    assert continue_run.read_meta(run) == {"library": LIB, "task": TASK, "ml_framework": "torch"}
    continue_run.check_meta(run, str(run), LIB, TASK, "torch")
    with pytest.raises(UsageError) as exc:
        continue_run.check_meta(run, str(run), "skrl", TASK, "torch")
    text = str(exc.value)
    assert "written with --rl_library rsl_rl --task Toy-Cartpole-v0 (run.json)" in text
    assert "continue it with --rl_library rsl_rl --task Toy-Cartpole-v0" in text
    with pytest.raises(UsageError, match="Toy-Pendulum-SwingUp-v0"):
        continue_run.check_meta(run, str(run), LIB, "Toy-Pendulum-SwingUp-v0", "torch")


def test_skrl_framework_must_match(tmp_path: Path) -> None:
    run = make_run(tmp_path, library="skrl")
    continue_run.write_meta(run, "skrl", TASK, "jax")
    with pytest.raises(UsageError, match="--rl_library skrl --ml_framework jax --task"):
        continue_run.check_meta(run, "latest", "skrl", TASK, "torch")
    continue_run.check_meta(run, "latest", "skrl", TASK, "jax")


def test_folder_without_meta_is_judged_by_its_place(tmp_path: Path) -> None:
    run = make_run(tmp_path, meta=False)
    continue_run.check_meta(run, "latest", LIB, TASK, "torch")
    with pytest.raises(UsageError, match="its place under the log root"):
        continue_run.check_meta(run, "latest", "rl_games", TASK, "torch")


def test_resolve_latest_and_paths(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no run of rsl_rl on Toy-Cartpole-v0"):
        continue_run.resolve("latest", str(tmp_path), LIB, TASK)
    make_run(tmp_path, "2026-01-01_00-00-00")
    newer = make_run(tmp_path, "2026-01-02_00-00-00")
    assert continue_run.resolve("latest", str(tmp_path), LIB, TASK) == newer.resolve()
    with pytest.raises(UsageError, match="no such folder"):
        continue_run.resolve(str(tmp_path / "nope"), str(tmp_path), LIB, TASK)
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match="not a folder"):
        continue_run.resolve(str(tmp_path / "file"), str(tmp_path), LIB, TASK)


def test_no_checkpoint_is_refused(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    with pytest.raises(UsageError, match="has no rsl_rl checkpoint yet"):
        continue_run.resume_point("latest", str(tmp_path), LIB, TASK, "torch", None, lambda d: [])
    (run / "model_4.pt").write_bytes(b"x")
    found = continue_run.resume_point(
        "latest", str(tmp_path), LIB, TASK, "torch", None, lambda d: [(5, d / "model_4.pt")]
    )
    assert found == (run.resolve(), str((run / "model_4.pt").resolve()))


def test_live_lock_refuses_other_jobs_only(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    write_lock(run, pid=os.getpid(), key="job-a")
    with pytest.raises(UsageError) as exc:
        continue_run.check_unlocked(run, "latest", None)
    text = str(exc.value)
    assert f"job job-a (host {socket.gethostname()}, pid {os.getpid()}" in text
    assert "not renewed for 120 s" in text and "wait for it to end or stop it first" in text
    continue_run.check_unlocked(run, "latest", "job-a")  # the same job (a restart) takes it over


def test_stale_locks_never_block(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    write_lock(run, pid=dead_pid())  # a crashed job on this host
    continue_run.check_unlocked(run, "latest", None)
    write_lock(run, pid=os.getpid(), host="elsewhere", age=continue_run.LEASE_S + 1)  # lease run out
    continue_run.check_unlocked(run, "latest", None)
    write_lock(run, pid=os.getpid(), host="elsewhere", age=1)  # another host, renewed: live
    with pytest.raises(UsageError, match="host elsewhere"):
        continue_run.check_unlocked(run, "latest", None)
    (run / continue_run.LOCK_FILE).write_text("{not json")  # unreadable: cannot be honoured
    continue_run.check_unlocked(run, "latest", None)


def test_hold_renews_and_releases(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    held = continue_run.hold(run, "job-me", lease_s=60, renew_s=0.05, environ={continue_run.LAUNCHER_PID_ENV: "77"})
    try:
        first = continue_run.read_lock(run)
        assert first is not None and (first.pid, first.job_key, first.launcher_pid) == (os.getpid(), "job-me", 77)
        end = time.monotonic() + 30
        while continue_run.read_lock(run).renewed == first.renewed:  # the thread renews every 0.05 s
            assert time.monotonic() < end, "the lock was never renewed"
            time.sleep(0.02)
        with pytest.raises(UsageError, match="is being written by job job-me"):
            continue_run.hold(run, "job-other")
    finally:
        held.release()
    assert not (run / continue_run.LOCK_FILE).exists()


def test_release_leaves_another_jobs_lock(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    held = continue_run.hold(run, "job-me", renew_s=3600)
    write_lock(run, pid=os.getpid() + 1, host="elsewhere", key="job-thief")
    held.release()
    assert continue_run.read_lock(run).job_key == "job-thief"


def test_start_writing_records_meta_for_new_folders(tmp_path: Path) -> None:
    run = make_run(tmp_path, meta=False)
    held = continue_run.start_writing(
        run, created=True, library="skrl", task=TASK, ml_framework="jax", job_key=None, value=None
    )
    held.release()
    assert continue_run.read_meta(run) == {"library": "skrl", "task": TASK, "ml_framework": "jax"}


def test_train_checks_refuse_with_checkpoint(tmp_path: Path) -> None:
    args = argparse.Namespace(
        continue_run="latest",
        checkpoint="latest",
        log_root=str(tmp_path),
        rl_library=LIB,
        task=TASK,
        ml_framework="torch",
    )
    with pytest.raises(UsageError, match="--continue_run latest with --checkpoint latest: give one of them"):
        check_continue_run(args, folder=False)


def test_live_stacks_collects_a_responding_and_a_dead_rank(tmp_path: Path, capsys, monkeypatch) -> None:
    """Rank 0 is this process (faulthandler answers the stack signal), rank 1's pid is gone. (A launcher never
    signals itself as a rank: this process stands for a rank of its job here.)"""
    real = procs.not_the_jobs
    monkeypatch.setattr(procs, "not_the_jobs", lambda pid, *a, **k: None if pid == os.getpid() else real(pid, *a, **k))
    sup = tmp_path / "supervise"
    sup.mkdir()
    run = make_run(tmp_path / "logs")
    heartbeat.write_run_dir(sup, run)
    now = time.time()
    heartbeat.write_beat(sup, heartbeat.Beat(0, 0, 2, "n", os.getpid(), 7, "train", now))
    heartbeat.write_beat(sup, heartbeat.Beat(1, 1, 2, "n", dead_pid(), 7, "train", now))
    with open(heartbeat.stack_path(sup, 0), "w", encoding="utf-8") as fh:
        faulthandler.register(heartbeat.STACK_SIGNAL, file=fh, all_threads=True)
        try:
            folder = live_stacks.collect(str(sup), time.monotonic(), stack_wait_s=30)
        finally:
            faulthandler.unregister(heartbeat.STACK_SIGNAL)
    assert folder.parent == run / live_stacks.STACKS_DIR
    assert "test_continue_run.py" in (folder / "stack_rank0.txt").read_text()
    assert "did not answer" in (folder / "stack_rank1.txt").read_text()
    summary = (folder / live_stacks.SUMMARY).read_text().splitlines()
    assert summary[0].startswith("[INFO] stacks: rank 0/2 (node n, pid") and "outside any collective" in summary[0]
    assert summary[1].startswith("[INFO] stacks: rank 1/2") and "not responding" in summary[1]
    assert capsys.readouterr().err.splitlines()[:2] == summary


def test_stacks_request_refusals(tmp_path: Path, capsys) -> None:
    assert live_stacks.request("latest", str(tmp_path), 1) == 2
    assert "no live job writes a run folder" in capsys.readouterr().err
    run = make_run(tmp_path)
    assert live_stacks.request(str(run), str(tmp_path), 1) == 2
    assert "no live job writes to it" in capsys.readouterr().err
    write_lock(run, pid=os.getpid())  # live, but started without the launcher
    assert live_stacks.request("latest", str(tmp_path), 1) == 2
    assert "not started by mgpu-lab train_multigpu" in capsys.readouterr().err
    body = json.loads((run / continue_run.LOCK_FILE).read_text())
    body["launcher_pid"] = dead_pid()  # a pid that is no ancestor of rank 0 is never signalled
    (run / continue_run.LOCK_FILE).write_text(json.dumps(body))
    assert live_stacks.request("latest", str(tmp_path), 1) == 2
    assert "not provably this job's launcher (not running)" in capsys.readouterr().err


#: A stand-in launcher: starts a child with the environment a launcher gives its ranks, prints its pid, waits.
PROVEN_LAUNCHER = """
import os, subprocess, sys
env = dict(os.environ, MGPU_LAB_JOB_KEY=sys.argv[1], MGPU_LAB_LAUNCHER_PID=str(os.getpid()))
child = subprocess.Popen(["sleep", "120"], env=env)
print(child.pid, flush=True)
child.wait()
"""


def test_stacks_never_signals_a_process_a_lock_names_that_is_not_the_jobs(tmp_path: Path, capsys) -> None:
    """Issue 40: a lock naming an unrelated process as rank 0 and launcher (a crafted file, or a stale one whose pid
    was reused) leaves it running; so does one naming a real launcher whose start time is another's."""
    sleep = subprocess.Popen(["sleep", "120"])
    try:
        run = make_run(tmp_path)
        write_lock(run, pid=sleep.pid)
        body = json.loads((run / continue_run.LOCK_FILE).read_text())
        body["launcher_pid"] = sleep.pid
        (run / continue_run.LOCK_FILE).write_text(json.dumps(body))
        assert live_stacks.request(str(run), str(tmp_path), 1) == 2
        assert "stale or foreign; nothing signalled" in capsys.readouterr().err
        assert sleep.poll() is None  # SIGUSR2's default action would have ended it
        # rank 0 a child of a "launcher" (a shell whose command line names train_multigpu), with the start times
        # they recorded: only a match counts
        launcher = subprocess.Popen(["sh", "-c", "sleep 120 & wait", "train_multigpu"], start_new_session=True)
        try:
            deadline = time.monotonic() + 30
            while not (children := [p for p, parent in procs.process_table().items() if parent == launcher.pid]):
                assert time.monotonic() < deadline, "the shell started no child"
                time.sleep(0.01)
            rank0 = children[0]
            started = procs.start_time(launcher.pid)
            assert started is not None
            body.update(pid=rank0, launcher_pid=launcher.pid, launcher_started=started - 1)
            (run / continue_run.LOCK_FILE).write_text(json.dumps(body))
            assert live_stacks.request(str(run), str(tmp_path), 1) == 2
            assert "a reused pid" in capsys.readouterr().err
            body.update(launcher_started=started, started=procs.start_time(rank0))
            (run / continue_run.LOCK_FILE).write_text(json.dumps(body))
            # issue 52: the right start times and a command line naming train_multigpu prove nothing
            assert live_stacks.request(str(run), str(tmp_path), 1) == 2
            assert "was not started by it for job" in capsys.readouterr().err
            assert launcher.poll() is None  # the decoy lives: SIGUSR2's default action would have ended it
        finally:
            os.killpg(launcher.pid, signal.SIGKILL)  # the shell and its sleep
            launcher.wait()
        # a "launcher" whose rank 0 carries what a launcher gives its ranks (the lock's job key, its own pid): proven
        proven = subprocess.Popen(
            [sys.executable, "-c", PROVEN_LAUNCHER, body["job_key"]], stdout=subprocess.PIPE, start_new_session=True
        )
        try:
            assert proven.stdout is not None
            rank0 = int(proven.stdout.readline())
            body.update(
                pid=rank0,
                started=procs.start_time(rank0),
                launcher_pid=proven.pid,
                launcher_started=procs.start_time(proven.pid),
            )
            (run / continue_run.LOCK_FILE).write_text(json.dumps(body))
            with live_stacks.launcher_of(run) as held:
                assert held.pid == proven.pid
        finally:
            os.killpg(proven.pid, signal.SIGKILL)
            proven.wait()
    finally:
        sleep.kill()
        sleep.wait()


# --- the launcher, in-process (made-up GPUs, as in test_launcher_commands) ------------------------------


def _launcher(*args: str, log_root: Path) -> int:
    """The launcher's exit status for ``args`` (its lines stay in capsys)."""
    from mgpu_testing import REPO
    from mgpu_testing.docs import load_script

    from mgpu_lab.launch import launcher
    from mgpu_lab.launch.devices import Inventory, made_up_uuid

    script = load_script(REPO / "scripts" / "reinforcement_learning" / "train_multigpu.py", "_mgpu_launcher_cont")
    eight = Inventory([made_up_uuid(i) for i in range(8)], [], "test inventory")
    train = str(REPO / "scripts" / "reinforcement_learning" / "train.py")
    try:
        code = launcher.main(
            script.build_parser(), [*args, "--log_root", str(log_root)], train_script=train, environ={}, inventory=eight
        )
    except SystemExit as exc:
        code = exc.code
    return code


def test_launcher_dry_run_checks_only_the_form(tmp_path: Path, capsys) -> None:
    """The documented command dry-runs before any run exists; --checkpoint with it is refused even then."""
    doc = ("--num_gpus", "2", "--task", TASK, "--max_iterations", "300", "--continue_run", "latest")
    code = _launcher("--dry_run", *doc, log_root=tmp_path)
    out, err = capsys.readouterr()
    assert code == 0 and "--continue_run latest" in out, err
    code = _launcher("--dry_run", *doc, "--checkpoint", "latest", log_root=tmp_path)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "give one of them" in err[0]
    assert not any(tmp_path.iterdir())  # nothing created


def test_launcher_refuses_before_any_rank_starts(tmp_path: Path, capsys) -> None:
    """Without --dry_run the folder is checked: no run, another library, no checkpoint, a live lock."""
    base = ("--num_gpus", "2", "--task", TASK, "--device", "cpu", "--continue_run", "latest")
    code = _launcher(*base, log_root=tmp_path)
    assert code == 2 and "no run of rsl_rl on Toy-Cartpole-v0" in capsys.readouterr().err
    run = make_run(tmp_path)
    code = _launcher(*base, log_root=tmp_path)
    assert code == 2 and "has no rsl_rl checkpoint yet" in capsys.readouterr().err
    code = _launcher(*base[:-1], str(run), "--rl_library", "skrl", log_root=tmp_path)
    assert code == 2 and "was written with --rl_library rsl_rl" in capsys.readouterr().err
    write_lock(run, pid=os.getpid())
    code = _launcher(*base, log_root=tmp_path)
    assert code == 2 and "is being written by job job-other" in capsys.readouterr().err
    assert sorted(p.name for p in run.iterdir()) == sorted([continue_run.LOCK_FILE, continue_run.META_FILE])
