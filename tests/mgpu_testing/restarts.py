"""Two loopback nodes of one job, and the session's shared restart jobs (one per rendezvous form).

Two real launchers on this machine play two nodes (one CPU rank each, gloo on loopback, ``OMP_NUM_THREADS=1``),
the real train.py (rsl_rl). In the shared restart job, ``--max_restarts 3`` on both nodes and ``--rehearse_fault
signal:1:4`` SIGKILLs rank 1 at the first step of iteration 4, on the first attempt only; with ``--save_interval 2``
rank 0 saved ``model_2.pt`` (iterations 0-2) before it (rank 1 reaches iteration 4 only after a collective of
iteration 3's update, which rank 0 enters after that save), so the resume point is exact: iteration 3. The job's
total is 6 iterations: the restarted group trains 3 of them.

That job is run once per session for each form (c10d, static) through the ``restarted_run`` fixture
(``tests/conftest.py``): tests/test_multinode_restart_e2e.py reads its restart, and tests/test_skill_commands.py
reads it as the CPU form of the documented two-node commands of the same shape (rsl_rl, one rank per node, that
rendezvous): each of its attempts is such a run, and its end is the documented run's end.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from mgpu_lab.launch import ports
from mgpu_testing import PYTHON, free_port
from mgpu_testing.cluster import run_together
from mgpu_testing.probe import assert_nothing_left, tagged_env
from mgpu_testing.training import LAUNCHER, TASK

FORMS = ("c10d", "static")
MAX_ITERATIONS = 6
KILL_AT, RESUMED_AT = 4, 3
TRAIN = ["--num_gpus", "1", "--device", "cpu", "--task", TASK, "--num_envs", "8", "--seed", "3"]
#: the shared job's attempts: the first, then one restart
ATTEMPTS = 2


def node_flags(form: str, node: int, port: int) -> list[str]:
    if form == "c10d":
        return ["--nnodes", "2", "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}", "--rdzv_id", "t37"]
    return ["--nnodes", "2", "--node_rank", str(node), "--master_addr", "127.0.0.1", "--master_port", str(port)]


def two_nodes(
    form: str, logs: Path, restarts: tuple[int, int], *extra: str, store_on_0: bool = False
) -> list[subprocess.CompletedProcess]:
    """Both launchers of one job, run together; their CompletedProcesses, node 0 first. ``store_on_0``: node 1 starts
    once node 0 listens on the endpoint, so node 0 hosts the c10d store (the first to bind it does)."""
    port = free_port()
    env, tag = tagged_env()
    runs = []
    for node in (0, 1):
        cmd = [PYTHON, LAUNCHER, *node_flags(form, node, port), "--max_restarts", str(restarts[node]), *TRAIN]
        cmd += ["--max_iterations", str(MAX_ITERATIONS), "--save_interval", "2", "--log_root", str(logs), *extra]
        runs.append((cmd, env))
    listening = (lambda: any(state == ports.LISTEN for state, _, _ in ports.sockets_on(port))) if store_on_0 else None
    results = run_together(runs, timeout=420, first_ready=listening)
    assert_nothing_left(tag)
    return results


@dataclass(frozen=True)
class RestartedRun:
    """What one shared restart job left: both nodes' commands, exit statuses and output, and its logs."""

    form: str
    argvs: tuple[tuple[str, ...], ...]
    returncodes: tuple[int, ...]
    stdouts: tuple[str, ...]
    stderrs: tuple[str, ...]
    logs: Path

    @property
    def procs(self) -> list[subprocess.CompletedProcess]:
        return [
            subprocess.CompletedProcess(list(a), rc, out, err)
            for a, rc, out, err in zip(self.argvs, self.returncodes, self.stdouts, self.stderrs)
        ]

    @classmethod
    def from_record(cls, record: dict) -> RestartedRun:
        """The run from its JSON record (:func:`mgpu_testing.once.once`)."""
        return cls(
            record["form"],
            tuple(tuple(argv) for argv in record["argvs"]),
            tuple(record["returncodes"]),
            tuple(record["stdouts"]),
            tuple(record["stderrs"]),
            Path(record["logs"]),
        )


def restart_two_nodes(form: str, folder: Path) -> dict:
    """Run the shared restart job of ``form`` with its logs under ``folder``; its JSON record (not checked)."""
    assert form in FORMS, form
    logs = folder / "logs"
    procs = two_nodes(form, logs, (3, 3), "--rehearse_fault", f"signal:1:{KILL_AT}")
    return {
        "form": form,
        "argvs": [list(p.args) for p in procs],
        "returncodes": [p.returncode for p in procs],
        "stdouts": [p.stdout for p in procs],
        "stderrs": [p.stderr for p in procs],
        "logs": str(logs),
    }
