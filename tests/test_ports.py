"""Ports (issue 37 item 3): a single-node job that names no port takes torchrun's --standalone store on a free port,
so two jobs started at once on one machine both train; a port the user names that another process holds is refused
before any rank starts, naming the holder from the kernel's socket table."""

from __future__ import annotations

import os
import re
import socket
import sys
from pathlib import Path

import pytest
from mgpu_testing import REPO, kill_group, loopback_env
from mgpu_testing.docs import load_script
from mgpu_testing.launcher import CPU2, finish, fixture_args, launcher_cmd, start

from mgpu_lab.core import procs
from mgpu_lab.job.config import LaunchConfig
from mgpu_lab.launch import launcher, ports

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc socket table")

SCRIPT = load_script(REPO / "scripts" / "reinforcement_learning" / "train_multigpu.py", "_mgpu_launcher_ports")
TRAIN = str(REPO / "scripts" / "reinforcement_learning" / "train.py")
TORCHRUN_HEAD = [sys.executable, "-m", launcher.TORCHRUN_MODULE]


def held(host: str = "127.0.0.1") -> socket.socket:
    """A real listening socket of this test process on a port the kernel picks."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.bind((host, 0))
    s.listen()
    return s


def launch_line(args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> tuple[int, str]:
    """The launcher's main without its runner (a trap): (exit status, stderr)."""

    def trap(config: LaunchConfig, cmd: list[str]) -> int:
        raise AssertionError(f"the job would have started: {cmd}")

    monkeypatch.setattr(launcher, "run", trap)
    code = launcher.main(SCRIPT.build_parser(), args, train_script=TRAIN, environ={"CUDA_VISIBLE_DEVICES": ""})
    return code, capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- the socket table


def test_a_held_port_is_traced_to_this_process() -> None:
    with held() as s:
        port = s.getsockname()[1]
        entries = ports.sockets_on(port)
        assert entries and entries[0][0] == ports.LISTEN and entries[0][1] == os.getuid()
        assert ports.holder(port) == f"by {procs.name(os.getpid())} (pid {os.getpid()})"


def test_an_ipv6_listener_is_found_in_tcp6() -> None:
    try:
        s = held("::1")
    except OSError:
        pytest.skip("no IPv6 loopback here")
    with s:
        assert ports.holder(s.getsockname()[1]).endswith(f"(pid {os.getpid()})")


def test_a_socket_no_process_of_ours_shows_is_another_users(tmp_path: Path) -> None:
    """A table row whose inode no readable /proc/PID/fd links to: another user's (its uid from the row)."""
    table = tmp_path / "tcp"
    table.write_text(
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 0100007F:7530 00000000:0000 0A 00000000:00000000 00:00000000 00000000  4321        0 999999999 1\n"
    )
    assert ports.sockets_on(30000, (str(table),)) == [("0A", 4321, 999999999)]
    assert ports.holder(30000, (str(table),)) == "by another user's process (uid 4321)"
    assert "does not show" in ports.holder(30001, (str(table),))


# ---------------------------------------------------------------------------------------------- refusals


def test_a_named_master_port_that_is_held_is_refused_naming_its_pid(monkeypatch, capsys) -> None:
    with held() as s:
        port = s.getsockname()[1]
        code, err = launch_line([*CPU2, "--master_port", str(port)], monkeypatch, capsys)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert re.fullmatch(
        rf"mgpu-lab train_multigpu: error: --master_port {port}: already in use on this host, held by "
        rf"{re.escape(str(procs.name(os.getpid())))} \(pid {os.getpid()}\); give a free port with --master_port .*\n",
        err,
    ), err


def test_a_single_nodes_own_rdzv_endpoint_that_is_held_is_refused(monkeypatch, capsys) -> None:
    with held() as s:
        port = s.getsockname()[1]
        code, err = launch_line(
            [*CPU2, "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}"], monkeypatch, capsys
        )
    assert code == 2, err
    assert f"--rdzv_endpoint 127.0.0.1:{port}: already in use on this host, held by" in err
    assert f"(pid {os.getpid()})" in err


def test_a_c10d_endpoint_of_several_nodes_held_by_another_process_is_refused(monkeypatch, capsys) -> None:
    """Issue 52 item 5: the node that would host the c10d store finds its endpoint held by a process that is no
    torchrun of this rendezvous: refused before any rank, naming the holder (the job would wait out its timeout)."""
    with held() as s:
        port = s.getsockname()[1]
        args = [*CPU2, "--nnodes", "2", "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}"]
        code, err = launch_line(args, monkeypatch, capsys)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert f"--rdzv_endpoint 127.0.0.1:{port}: already in use on this host, held by" in err
    assert f"(pid {os.getpid()}); give a free port (the first node to bind the endpoint hosts the c10d store" in err


#: A stand-in for another node's torchrun on this machine: it listens on the endpoint its command line names.
PEER = "import socket, sys; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); print(s.getsockname()[1], flush=True); sys.stdin.read()"


def test_a_c10d_endpoint_held_by_the_same_rendezvous_on_this_machine_is_joined(monkeypatch, capsys) -> None:
    """Two loopback "nodes" share one c10d endpoint: the first node's torchrun hosts the store there, the second
    joins it. The holder is recognised by its command line: torchrun of the very endpoint."""
    import subprocess

    peer = subprocess.Popen(
        [sys.executable, "-c", PEER, "torch.distributed.run", "--rdzv_endpoint", "127.0.0.1:PORT"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert peer.stdout is not None
        port = int(peer.stdout.readline())
        endpoint = f"127.0.0.1:{port}"
        assert not ports.hosts_rendezvous(peer.pid, endpoint)  # its command line names another endpoint ("PORT")
        assert ports.hosts_rendezvous(os.getpid(), endpoint) is False
        # the same stand-in, now naming this endpoint: a peer node's store
        peer.kill()
        peer.wait()
        peer = subprocess.Popen(
            [
                sys.executable,
                "-c",
                PEER.replace("0)", f"{port})"),
                "torch.distributed.run",
                "--rdzv_endpoint",
                endpoint,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert peer.stdout is not None and int(peer.stdout.readline()) == port
        assert ports.hosts_rendezvous(peer.pid, endpoint)
        args = [*CPU2, "--nnodes", "2", "--rdzv_backend", "c10d", "--rdzv_endpoint", endpoint]
        with pytest.raises(AssertionError, match="the job would have started"):
            launch_line(args, monkeypatch, capsys)
    finally:
        peer.kill()
        peer.wait()


# ---------------------------------------------------------------------------------------------- the free port


def dry(*args: str, **environ: str) -> list[str]:
    config = launcher.make_config(
        SCRIPT.build_parser(), ["--dry_run", *args], train_script=TRAIN, environ={"CUDA_VISIBLE_DEVICES": "", **environ}
    )
    cmd = launcher.build_command(config)
    return cmd[: cmd.index(TRAIN)]


def test_one_node_without_a_port_gets_torchruns_standalone_store() -> None:
    assert dry(*CPU2) == [*TORCHRUN_HEAD, "--nproc_per_node", "2", "--standalone", "--local_ranks_filter", "0"]
    assert "--standalone" in dry(*CPU2, "--nnodes", "1")


@pytest.mark.parametrize(
    ("args", "environ"),
    [
        (["--master_port", "29511"], {}),
        (["--master_addr", "127.0.0.1"], {}),
        (["--rdzv_backend", "c10d", "--rdzv_endpoint", "127.0.0.1:29400"], {}),
        (["--nnodes", "2", "--node_rank", "1", "--master_addr", "10.0.0.1", "--master_port", "29511"], {}),
        (["--nnodes", "1:2"], {}),
        ([], {"PET_MASTER_PORT": "29511"}),
        ([], {"PET_NNODES": "2", "PET_RDZV_ENDPOINT": "10.0.0.1:29400", "PET_RDZV_BACKEND": "c10d"}),
    ],
)
def test_a_named_rendezvous_is_kept_as_given(args: list[str], environ: dict[str, str]) -> None:
    assert "--standalone" not in dry(*CPU2, *args, **environ)


def test_the_default_port_held_does_not_stop_a_single_node_job(monkeypatch, capsys) -> None:
    """torchrun's default port 29500 taken (a crashed run's leftover, another user's job): a job naming no port
    is not refused, since its store takes a free port."""
    try:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("", 29500))
        s.listen()
    except OSError:
        s.close()
        s = None  # someone else holds it already: the same situation
    try:
        with pytest.raises(AssertionError, match="the job would have started"):
            launch_line(CPU2, monkeypatch, capsys)
    finally:
        if s is not None:
            s.close()


@pytest.mark.e2e
def test_two_single_node_jobs_started_at_once_both_form_their_worlds(tmp_path: Path) -> None:
    """Two real launchers, two CPU ranks each, no port named, started together: each job's ranks meet in their own
    store (a gloo all-reduce over both ranks: the sum is 1 + 2) and both exit 0. The ranks are the launcher's test
    stand-in (a port is the launcher's and torchrun's business, not the trainer's); the trainer's own 2-rank jobs
    on a free port are the session's healthy runs (tests/mgpu_testing/runs.py)."""
    jobs = []
    for name in ("a", "b"):
        cmd = launcher_cmd(*fixture_args("print_rank.py", tmp_path / name), *CPU2, "--all_reduce")
        jobs.append(start(cmd, loopback_env()))
    results = []
    try:
        for proc in jobs:
            results.append(finish(proc, timeout=400))
    finally:
        for proc in jobs:
            kill_group(proc)
    for proc, (out, err) in zip(jobs, results, strict=True):
        assert proc.returncode == 0, err[-3000:]
        assert "--standalone" in err  # the command line the launcher printed
        assert "[fixture] rank 0/2 all_reduce sum 3" in out, out[-2000:] + err[-2000:]


# ---------------------------------------------------------------------------------------------- nodes that never meet


@pytest.mark.e2e
def test_node_1_alone_names_the_endpoint_and_the_checks(tmp_path: Path) -> None:
    """A real node 1 whose node 0 never comes: after --rdzv_timeout it names where it waited and what to check."""
    with held() as s:  # a port nobody listens on: bound here, never accepted, closed before the launcher connects
        port = s.getsockname()[1]
    args = ["--nnodes", "2", "--node_rank", "1", "--master_addr", "127.0.0.1", "--master_port", str(port)]
    cmd = launcher_cmd(*args, "--num_gpus", "1", "--device", "cpu", "--rdzv_timeout", "3")
    proc = start([*cmd, "--log_root", str(tmp_path)], loopback_env())
    try:
        _, err = finish(proc, timeout=120)
    finally:
        kill_group(proc)
    assert proc.returncode == 4, err[-3000:]
    last = err.rstrip().splitlines()[-1]
    assert f"never arrived: the rendezvous at 127.0.0.1:{port} never answered" in last, last
    assert f"node 0 was started with the same --master_addr 127.0.0.1 --master_port {port} and --nnodes" in last
    assert f"nc -vz 127.0.0.1 {port}" in last and f"node 0's firewall lets TCP port {port} in" in last, last


def test_cpu_ranks_get_one_thread_each_unless_told(monkeypatch, capsys) -> None:
    environ, lines = launcher.cpu_threads({}, on_cpu=True, jax=False)
    assert environ["OMP_NUM_THREADS"] == "1" and lines == [launcher.OMP_LINE]
    assert launcher.cpu_threads({"OMP_NUM_THREADS": "4"}, on_cpu=True, jax=False) == ({"OMP_NUM_THREADS": "4"}, [])
    assert launcher.cpu_threads({}, on_cpu=False, jax=False) == ({}, [])
    config = launcher.make_config(
        SCRIPT.build_parser(),
        ["--dry_run", "--nnodes", "2", "--node_rank", "0", "--master_addr", "127.0.0.1"]
        + ["--master_port", "29511", "--num_gpus", "1", "--device", "cpu"],
        train_script=TRAIN,
        environ={"CUDA_VISIBLE_DEVICES": ""},
    )
    assert config.environ["OMP_NUM_THREADS"] == "1" and launcher.OMP_LINE in config.inferred
