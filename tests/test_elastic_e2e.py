"""An elastic job (``--nnodes 1:2``, c10d rendezvous) loses a node and finishes on the one left (issue 47).

Two real launchers on this machine play two nodes (one CPU rank each, gloo on loopback). Node 0 starts first and
its torchrun agent hosts the c10d store on the rendezvous endpoint (the test waits until the endpoint listens before
starting node 1): the node that disappears is never the store's. Once the run saved ``model_4.pt``, node 1's whole
process group (launcher, agent, rank) is SIGKILLed, as a node that vanishes. Node 0's rank loses its peer, its agent
restarts the group (``--max_restarts``), the next rendezvous round completes with the one node left, and the rank
resumes from the newest checkpoint with the world (and the total number of environments) halved.

``PET_RDZV_CONF`` (torchrun reads it where ``--rdzv_conf`` is not given, as a PyTorchJob sets it) shortens the
c10d keep-alive, so a lost node counts as gone after about 2 s instead of 15, and the last call of each round.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from mgpu_testing import PYTHON, REPO, free_port, kill_group
from mgpu_testing.probe import assert_nothing_left, tagged_env
from mgpu_testing.training import LAUNCHER, TASK

pytestmark = pytest.mark.e2e

MAX_ITERATIONS = 12
RDZV_CONF = "last_call_timeout=15,keep_alive_interval=1,keep_alive_max_attempt=2"
RESUMED = re.compile(r"\[INFO\] restart 1: resumed from (\S+)model_(\d+)\.pt at iteration (\d+)$", re.M)


def _start(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with open(log, "w") as out:  # a file, not a pipe: nobody reads node 1's output while it runs
        return subprocess.Popen(
            cmd,
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _wait(condition, procs: list[subprocess.Popen], what: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if any(p.poll() is not None for p in procs):
            pytest.fail(f"a node ended before {what}")
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {timeout:g} s")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def shrunk(tmp_path_factory: pytest.TempPathFactory) -> dict:
    base = tmp_path_factory.mktemp("elastic")
    logs, port = base / "logs", free_port()
    env, tag = tagged_env(PET_RDZV_CONF=RDZV_CONF)
    cmd = [PYTHON, LAUNCHER, "--nnodes", "1:2", "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}"]
    cmd += ["--rdzv_id", "elastic47", "--max_restarts", "3", "--num_gpus", "1", "--device", "cpu", "--task", TASK]
    cmd += ["--num_envs", "8", "--seed", "3", "--max_iterations", str(MAX_ITERATIONS), "--save_interval", "2"]
    cmd += ["--log_root", str(logs)]
    node0 = _start(cmd, env, base / "node0.log")
    procs = [node0]
    try:
        _wait(lambda: _listening(port), procs, "c10d store on node 0")
        procs.append(_start(cmd, env, base / "node1.log"))
        _wait(lambda: any(logs.glob(f"rsl_rl/{TASK}/*/model_4.pt")), procs, "checkpoint model_4.pt")
        os.killpg(procs[1].pid, signal.SIGKILL)  # node 1 vanishes: launcher, agent and rank at once
        procs[1].wait(timeout=30)
        node0.wait(timeout=300)
    finally:
        for p in procs:
            kill_group(p)
    assert_nothing_left(tag)
    both = (base / "node0.log").read_text() + (base / "node1.log").read_text()
    return {"rc": node0.returncode, "out": (base / "node0.log").read_text(), "both": both, "logs": logs}


@pytest.mark.timeout(600)
def test_the_job_shrinks_to_the_node_left_and_finishes(shrunk: dict) -> None:
    out = shrunk["out"]
    assert shrunk["rc"] == 0, out[-4000:]
    assert "8 envs/rank x 2 rank(s)" in shrunk["both"], shrunk["both"][-4000:]  # both nodes trained together first
    after = out.partition("[INFO] rank 0/1:")[2]  # the restarted group: one rank, the total envs halved
    assert after and "8 envs/rank x 1 rank(s)" in after, out[-4000:]
    assert re.search(r"\[INFO\] rank 0/1: stepped \d+ env-steps", after), out[-4000:]
    assert "Traceback" not in after, out[-4000:]


@pytest.mark.timeout(600)
def test_the_one_node_left_resumes_from_the_newest_checkpoint_in_the_same_folder(shrunk: dict) -> None:
    (folder,) = (shrunk["logs"] / "rsl_rl" / TASK).iterdir()
    (resumed,) = RESUMED.findall(shrunk["out"])
    assert resumed[0] == f"{folder}/" and int(resumed[2]) == int(resumed[1]) + 1 and int(resumed[1]) >= 4, resumed
    assert (folder / f"model_{MAX_ITERATIONS - 1}.pt").is_file()
