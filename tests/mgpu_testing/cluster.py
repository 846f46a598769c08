"""Helpers for the cluster tests: a SLURM srun environment, a job id whose derived port is free, and
several launchers run side by side (two "nodes" on this machine) with one hard deadline."""

from __future__ import annotations

import random
import shlex
import socket
import subprocess
import time
from collections.abc import Callable

import pytest

from mgpu_testing import REPO, kill_group

#: Variables of a real cluster that must not leak from the machine running the tests into a fake one.
CLUSTER_PREFIXES = ("SLURM_", "PET_", "SLURMD_")


def srun_env(
    node: int = 1, *, job_id: str = "4242", nodelist: str = "gpu[07-08]", nodes: int = 2, **extra: str | None
) -> dict[str, str]:
    """What srun sets for the one task on node ``node`` of a ``nodes``-node step (srun(1), "OUTPUT
    ENVIRONMENT VARIABLES"), with ``extra`` added; an ``extra`` value of None removes that variable."""
    env = {
        "SLURM_JOB_ID": job_id,
        "SLURM_JOBID": job_id,
        "SLURM_STEP_ID": "0",
        "SLURM_STEPID": "0",
        "SLURM_JOB_NUM_NODES": str(nodes),
        "SLURM_NNODES": str(nodes),
        "SLURM_STEP_NUM_NODES": str(nodes),
        "SLURM_JOB_NODELIST": nodelist,
        "SLURM_NODELIST": nodelist,
        "SLURM_STEP_NODELIST": nodelist,
        "SLURM_NODEID": str(node),
        "SLURM_PROCID": str(node),
        "SLURM_LOCALID": "0",
        "SLURM_STEP_TASKS_PER_NODE": f"1(x{nodes})",
        "SLURM_TASKS_PER_NODE": f"1(x{nodes})",
        "SLURM_NTASKS": str(nodes),
    }
    env.update(extra)
    return {k: v for k, v in env.items() if v is not None}


def without_cluster(env: dict[str, str]) -> dict[str, str]:
    """``env`` less any SLURM_* / PET_* variable (the test machine might itself run under a scheduler)."""
    return {k: v for k, v in env.items() if not k.startswith(CLUSTER_PREFIXES)}


def free_job_id() -> str:
    """A SLURM job id whose derived rendezvous port (mgpu_lab.launch.cluster.rendezvous_port) is free right now."""
    from mgpu_lab.launch.cluster import rendezvous_port

    rng = random.Random()
    for _ in range(500):
        job_id = str(rng.randrange(100_000, 10_000_000))
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", rendezvous_port(job_id)))
            except OSError:
                continue
        return job_id
    pytest.fail("no free port in the launcher's SLURM port range (20000-29999)")


def run_together(
    runs: list[tuple[list[str], dict[str, str]]], *, timeout: float, first_ready: Callable[[], bool] | None = None
) -> list[subprocess.CompletedProcess]:
    """Start every (command, environment) at once, each in its own session (with ``first_ready``: the first alone,
    the others once it holds, as a node that must host the rendezvous comes up first); wait for all within one
    deadline; kill every group afterwards, and fail with everyone's output on timeout."""

    def popen(cmd: list[str], env: dict[str, str]) -> subprocess.Popen:
        return subprocess.Popen(
            cmd,
            cwd=REPO,
            env=env,
            text=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )

    deadline = time.monotonic() + timeout
    procs = [popen(*runs[0])]
    while first_ready is not None and not first_ready():
        if procs[0].poll() is not None or time.monotonic() > deadline:
            kill_group(procs[0])
            pytest.fail(
                f"the first launcher never got ready (exit {procs[0].poll()}):\n{procs[0].communicate()[1][-3000:]}"
            )
        time.sleep(0.05)
    procs += [popen(cmd, env) for cmd, env in runs[1:]]
    results: list[subprocess.CompletedProcess] = []
    try:
        for (cmd, _), proc in zip(runs, procs):
            try:
                out, err = proc.communicate(timeout=max(deadline - time.monotonic(), 1))
            except subprocess.TimeoutExpired:
                for p in procs:
                    kill_group(p)
                shown = "\n".join(
                    f"--- {shlex.join(c)}\n{p.communicate()[1][-3000:]}" for (c, _), p in zip(runs, procs)
                )
                pytest.fail(f"launchers still running after {timeout}s:\n{shown}")
            results.append(subprocess.CompletedProcess(cmd, proc.returncode, out, err))
    finally:
        for p in procs:
            kill_group(p)
    return results


def option(command: str, flag: str) -> str | None:
    """The value after ``flag`` in a dry-run command line (launcher part only, before train.py), or None."""
    tokens = shlex.split(command)
    for i, tok in enumerate(tokens):
        if tok.endswith("train.py"):
            break
        name, eq, value = tok.partition("=")
        if name.startswith("--") and name[2:].replace("-", "_") == flag[2:]:  # torchrun takes either spelling
            if eq:
                return value
            return tokens[i + 1] if i + 1 < len(tokens) else None
    return None


EXAMPLES = REPO / "docs" / "source" / "features" / "examples"


def example_commands(path) -> list[list[str]]:
    """The arguments after ``mgpu-lab train_multigpu`` on each command line of an example file (shell or
    YAML), backslash continuations joined, comments dropped."""
    import re

    text = path.read_text(encoding="utf-8")
    logical, buf = [], []
    for raw in text.splitlines():
        line = raw.rstrip()
        if line.endswith("\\"):
            buf.append(line[:-1])
            continue
        buf.append(line)
        logical.append(" ".join(part.strip() for part in buf))
        buf = []
    out = []
    for line in logical:
        if line.lstrip().startswith("#") or not re.search(r"\bmgpu-lab\s+train_multigpu\b", line):
            continue
        tokens = shlex.split(line, comments=True)
        at = next(
            i for i, tok in enumerate(tokens) if tok == "mgpu-lab" and tokens[i + 1 : i + 2] == ["train_multigpu"]
        )
        out.append(tokens[at + 2 :])
    return out


def sbatch_options(path) -> dict[str, str]:
    """``#SBATCH --name=value`` directives of a batch script, by name."""
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#SBATCH "):
            name, _, value = line[len("#SBATCH ") :].strip().partition("=")
            out[name] = value
    return out
