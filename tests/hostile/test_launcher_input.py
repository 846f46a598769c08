"""Hostile input to the launcher (issue 13): every bad value is one line on stderr and exit 2, before anything
starts or is written. Runs are real subprocesses of the launcher; none reaches torchrun."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from mgpu_testing import loopback_env, run
from mgpu_testing.launcher import launcher_cmd

CPU2 = ["--num_gpus", "2", "--device", "cpu"]


def reject(args: list[str], cwd: Path, **env: str) -> str:
    """Run the launcher (no --dry_run) in an empty folder; check exit 2, one line, no traceback, nothing written."""
    full_env = loopback_env(**env)
    full_env.pop("MGPU_LAB_TRAIN_SCRIPT", None)
    proc = run(launcher_cmd(*args), timeout=60, env=full_env, cwd=cwd)
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("isaaclab train_multigpu: error: "), lines[0]
    assert "[INFO] launcher:" not in proc.stderr  # nothing was started
    assert sorted(os.listdir(cwd)) == [], os.listdir(cwd)  # nothing was written
    return lines[0]


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--monitor_interval", "nan"], "--monitor_interval nan"),
        (["--monitor_interval", "inf"], "--monitor_interval inf"),
        (["--monitor_interval", "-1"], "--monitor_interval -1"),
        (["--rdzv_endpoint", "host:notaport"], "--rdzv_endpoint host:notaport"),
        (["--rdzv_endpoint", "host:99999"], "--rdzv_endpoint host:99999"),
        (["--rdzv_endpoint", ""], "--rdzv_endpoint"),
        (["--rdzv_backend", "bogus"], "--rdzv_backend"),
        (["--rdzv_backend", ""], "--rdzv_backend"),
        (["--rdzv_timeout", "nan"], "--rdzv_timeout nan"),
        (["--rdzv_timeout", "0"], "--rdzv_timeout 0"),
        (["--hang_timeout", "-1"], "--hang_timeout -1"),
        (["--hang_timeout", "abc"], "--hang_timeout"),
        (["--hang_timeout", "inf"], "--hang_timeout inf"),
        (["--hang_timeout", "0.05"], "below the monitor interval"),
        (["--hang_timeout", "1", "--monitor_interval", "2"], "below the monitor interval"),
        (["--max_restarts", "-1"], "--max_restarts -1"),
        (["--num_gpus", "1e9"], "--num_gpus 1e9"),
        (["--num_gpus", str(10**30)], "--num_gpus 1000000000"),
        (["--num_gpus", "9" * 5000], "--num_gpus 9999"),
        (["--num_gpus", str(4 * (os.cpu_count() or 1) + 1)], f"at most {4 * (os.cpu_count() or 1)} CPU ranks"),
        (["--nun_gpus", "2"], "train.py: unrecognized arguments: --nun_gpus 2"),
        (["--task", "Nope-v0"], "--task Nope-v0: unknown task 'Nope-v0'"),
        (["--num_envs", "lots"], "train.py: argument --num_envs"),
        (["--", "--help"], "isaaclab train --help"),
    ],
)
def test_bad_values_are_one_line(tmp_path: Path, args: list[str], names: str) -> None:
    device = ["--device", "cpu"] if "--num_gpus" in args else CPU2
    line = reject([*device, *args], tmp_path)
    assert names in line, line


@pytest.mark.parametrize("value", ["nan", "inf", "1e300", "-1", "soon"])
def test_bad_kill_grace_is_refused_before_the_job_starts(tmp_path: Path, value: str) -> None:
    line = reject(CPU2, tmp_path, MGPU_LAB_KILL_GRACE_S=value)
    assert "MGPU_LAB_KILL_GRACE_S" in line


def test_master_port_in_use_on_the_store_host(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        line = reject([*CPU2, "--master_port", str(port)], tmp_path)
    assert f"--master_port {port}: already in use on this host" in line


def test_log_dir_that_is_a_file(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert "exists and is not a folder" in reject([*CPU2, "--log_dir", str(afile)], work)
    assert "is not a folder" in reject([*CPU2, "--log_dir", str(afile / "sub")], work)
    assert afile.read_text() == "x"


def test_log_dir_that_cannot_be_written(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    if os.geteuid() == 0:  # root ignores permission bits; /proc refuses new folders to everyone
        target = "/proc/mgpu_lab_no_such_dir/logs"
    else:
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o555)
        target = str(ro / "logs")
    line = reject([*CPU2, "--log_dir", target], work)
    assert f"--log_dir {target}: cannot be created" in line
    assert not Path(target).exists()
