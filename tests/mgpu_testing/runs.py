"""The suite's shared healthy runs: one real 2-rank CPU job per library, trained once per session.

A 2-rank job costs a torchrun (or skrl JAX launcher), two rank processes and two imports of the RL
library: tens of CPU-seconds. Every assertion that needs a healthy run (per-rank device and step
lines, the summed throughput, equal parameters on both ranks, rank 0's only run folder, loadable
checkpoints, the CPU form of a documented command) reads the session's one run of that library,
through the ``healthy_run`` fixture (``tests/conftest.py``). Tests never change its folders: one that
needs to (a resume, a restart) copies the run folder first (:func:`copy_run`).

Each run is the CPU form of a documented command shape (see ``tests/test_skill_commands.py``): for the
torch libraries ``mgpu-lab train_multigpu --rl_library L --num_gpus 2 --task Toy-Cartpole-v0`` on one
node; for skrl's JAX the two-node form (``--nnodes 2 --node_rank N --coordinator_address ...``, one
process per node), which is the only JAX launcher shape the docs write.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from mgpu_testing import PYTHON, REPO, free_port, kill_group
from mgpu_testing.training import LAUNCHER, TASK, single_env

#: shape of every healthy run: iterations, environments per rank, seed; a checkpoint every iteration
ITERATIONS = {"rsl_rl": 3, "rl_games": 3, "skrl": 3, "skrl-jax": 1}  # JIT compiling makes JAX the slowest
NUM_ENVS = 8
SEED = 5
LIBRARIES = tuple(ITERATIONS)
#: hard limit for a healthy run (torch, the RL library and torchrun start in every process; JAX compiles)
TIMEOUT = {"rsl_rl": 420, "rl_games": 420, "skrl": 420, "skrl-jax": 600}
#: per-test limit (pytest-timeout marker) for a test that may be the first to ask for a healthy run and then
#: runs a process of its own: above the suite's 600 s, which the marker overrides
WITH_HEALTHY_RUN = 1200


@dataclass(frozen=True)
class HealthyRun:
    """What one healthy 2-rank job left: every node's exit status and output, and its logs."""

    library: str  # rsl_rl | rl_games | skrl | skrl-jax
    argvs: tuple[tuple[str, ...], ...]  # one launcher per node
    returncodes: tuple[int, ...]
    out: str  # every node's stdout and stderr, in node order
    log_root: Path

    @property
    def rl_library(self) -> str:
        return self.library.split("-")[0]

    @property
    def iterations(self) -> int:
        return ITERATIONS[self.library]

    @property
    def task_root(self) -> Path:
        return self.log_root / self.rl_library / TASK

    @property
    def run_dir(self) -> Path:
        """Rank 0's run folder: the only one (only rank 0 writes)."""
        (run_dir,) = self.task_root.iterdir()
        return run_dir

    @classmethod
    def from_record(cls, record: dict) -> HealthyRun:
        """The run from its JSON record (:func:`mgpu_testing.once.once`)."""
        return cls(
            record["library"],
            tuple(tuple(argv) for argv in record["argvs"]),
            tuple(record["returncodes"]),
            record["out"],
            Path(record["log_root"]),
        )

    def assert_ok(self) -> HealthyRun:
        for argv, rc in zip(self.argvs, self.returncodes):
            assert rc == 0, f"the healthy {self.library} run failed (exit {rc}): {' '.join(argv)}\n{self.out[-4000:]}"
        return self


def argvs_for(library: str, log_root: Path) -> list[list[str]]:
    """The launcher command(s) of ``library``'s healthy run: every rank's lines on the console."""
    rl_library, _, framework = library.partition("-")
    common = [
        "--rl_library",
        rl_library,
        "--task",
        TASK,
        "--device",
        "cpu",
        "--num_envs",
        str(NUM_ENVS),
        "--max_iterations",
        str(ITERATIONS[library]),
        "--save_interval",
        "1",
        "--seed",
        str(SEED),
        "--log_root",
        str(log_root),
    ]
    port = str(free_port())
    if framework == "jax":  # skrl's JAX launcher prints every rank's lines anyway (and has no --log_all_ranks)
        return [
            [
                PYTHON,
                str(LAUNCHER),
                "--ml_framework",
                "jax",
                *common,
                "--nnodes",
                "2",
                "--node_rank",
                str(node),
                "--num_gpus",
                "1",
                "--coordinator_address",
                f"127.0.0.1:{port}",
            ]
            for node in (0, 1)
        ]
    return [
        [
            PYTHON,
            str(LAUNCHER),
            *common,
            "--num_gpus",
            "2",
            "--log_all_ranks",
            "--master_addr",
            "127.0.0.1",
            "--master_port",
            port,
        ]
    ]


def run_nodes(argvs: list[list[str]], env: dict[str, str], *, timeout: float) -> list[subprocess.CompletedProcess]:
    """Start every node's command at once (each in its own session, stderr into stdout), wait for all within
    one deadline, and leave no process behind. A node still running at the deadline is killed (exit -9)."""
    import time

    procs = [
        subprocess.Popen(
            argv,
            cwd=REPO,
            env=env,
            text=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        for argv in argvs
    ]
    deadline = time.monotonic() + timeout
    results = []
    try:
        for argv, proc in zip(argvs, procs):
            try:
                out, _ = proc.communicate(timeout=max(deadline - time.monotonic(), 1))
            except subprocess.TimeoutExpired:
                for other in procs:
                    kill_group(other)
                out, _ = proc.communicate()
                out += f"\n[test] timed out after {timeout} s\n"
            results.append(subprocess.CompletedProcess(argv, proc.returncode, out, ""))
    finally:
        for proc in procs:
            kill_group(proc)
    return results


def train_two_ranks(library: str, log_root: Path) -> HealthyRun:
    """Run ``library``'s healthy 2-rank job under ``log_root`` (not checked: see :meth:`HealthyRun.assert_ok`)."""
    assert library in ITERATIONS, library
    argvs = argvs_for(library, log_root)
    env = single_env(JAX_PLATFORMS="cpu") if library.endswith("jax") else single_env()
    results = run_nodes(argvs, env, timeout=TIMEOUT[library])
    return HealthyRun(
        library,
        tuple(tuple(a) for a in argvs),
        tuple(r.returncode for r in results),
        "".join(r.stdout for r in results),
        log_root,
    )


def copy_run(run: HealthyRun, log_root: Path) -> Path:
    """Copy the run folder of ``run`` (checkpoints, the ``job_key`` its rank 0 recorded) under ``log_root``, in
    the same library/task layout; the copy's path. For tests that resume or restart from a real run."""
    target = log_root / run.rl_library / TASK / run.run_dir.name
    shutil.copytree(run.run_dir, target)
    return target
