"""skrl's JAX PPO through train.py: one process with resume, and 2 CPU processes through skrl's JAX launcher.

jax 0.10 runs cross-process collectives on CPU over gloo, so skrl's own broadcast and gradient
all-reduce work between two CPU processes here. JIT compilation makes these the slowest trainer
tests, so they run one or two iterations only.
"""

from __future__ import annotations

import os
import pickle
import re
from pathlib import Path

import pytest

from conftest import PYTHON, REPO, free_port, loopback_env, run

import skrl  # noqa: F401  (a dev dependency: a missing one must fail, not skip)
import jax  # noqa: F401  (a dev dependency: a missing one must fail, not skip)
import flax  # noqa: F401  (a dev dependency: a missing one must fail, not skip)

TRAIN = str(REPO / "scripts" / "reinforcement_learning" / "train.py")
LAUNCHER = str(REPO / "scripts" / "reinforcement_learning" / "train_multigpu.py")
DIGEST = re.compile(r"^\[INFO\] rank (\d+)/(\d+): parameter digest ([0-9a-f]{64})$", re.M)
SYNC = re.compile(r"^\[INFO\] rank (\d+)/(\d+): parameters synchronized$", re.M)
TIME = re.compile(r"^\[INFO\] training time: [0-9.]+ s$", re.M)
THROUGHPUT = re.compile(r"^\[INFO\] throughput: (\d+) env-steps/s over (\d+) rank\(s\)$", re.M)
TASK = "Toy-Cartpole-v0"


def jax_env() -> dict[str, str]:
    env = loopback_env(JAX_PLATFORMS="cpu")
    for name in ("LOCAL_RANK", "RANK", "WORLD_SIZE", "JAX_LOCAL_RANK", "JAX_RANK", "JAX_WORLD_SIZE"):
        env.pop(name, None)
    return env


def jax_checkpoints(run_dir: Path) -> list[Path]:
    return sorted(run_dir.glob("checkpoints/agent_*.pickle"), key=lambda p: int(p.stem.split("_")[1]))


def assert_jax_checkpoint(path: Path) -> dict:
    with open(path, "rb") as f:
        data = pickle.load(f)
    assert {"policy", "value"} <= set(data) and all(isinstance(v, bytes) for v in data.values())
    return data


def test_one_process_trains_saves_and_resumes(tmp_path):
    common = [PYTHON, TRAIN, "--rl_library", "skrl", "--ml_framework", "jax", "--task", TASK, "--device", "cpu",
              "--num_envs", "8", "--seed", "3", "--log_root", str(tmp_path)]
    proc = run([*common, "--max_iterations", "1", "--run_name", "first"], timeout=500, env=jax_env())
    out = proc.stdout
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert SYNC.findall(out) == [("0", "1")]
    assert TIME.search(out) and THROUGHPUT.search(out).group(2) == "1"
    assert len(DIGEST.findall(out)) == 1
    run_dir = next((tmp_path / "skrl" / TASK).iterdir())
    saved = jax_checkpoints(run_dir)
    assert [p.name for p in saved] == ["agent_16.pickle"]
    assert_jax_checkpoint(saved[0])
    assert not list(run_dir.rglob(".*.tmp")), "temp files left behind"

    proc = run([*common, "--max_iterations", "1", "--checkpoint", str(saved[0]), "--run_name", "again"],
               timeout=500, env=jax_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"[INFO] resumed from {saved[0]}" in proc.stdout


def test_two_cpu_processes_through_the_jax_launcher(tmp_path):
    cmd = [PYTHON, LAUNCHER, "--rl_library", "skrl", "--ml_framework", "jax", "--num_gpus", "2",
           "--coordinator_address", f"127.0.0.1:{free_port()}",
           "--task", TASK, "--device", "cpu", "--num_envs", "8", "--max_iterations", "1", "--seed", "5",
           "--log_root", str(tmp_path)]
    proc = run(cmd, timeout=600, env=jax_env())
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert sorted(SYNC.findall(out)) == [("0", "2"), ("1", "2")], out[-4000:]
    assert len(TIME.findall(out)) == 1
    throughput = THROUGHPUT.findall(out)
    assert len(throughput) == 1 and throughput[0][1] == "2"
    digests = dict((rank, digest) for rank, _, digest in DIGEST.findall(out))
    assert set(digests) == {"0", "1"}, out[-4000:]
    assert digests["0"] == digests["1"], "ranks ended with different parameters"
    run_dirs = list((tmp_path / "skrl" / TASK).iterdir())
    assert len(run_dirs) == 1, "only rank 0 may write logs"
    assert_jax_checkpoint(jax_checkpoints(run_dirs[0])[-1])


def test_jax_under_torchrun_is_refused_in_one_line(tmp_path):
    env = jax_env()
    env.update(LOCAL_RANK="0", RANK="0", WORLD_SIZE="1", MASTER_PORT=str(free_port()))
    proc = run([PYTHON, TRAIN, "--rl_library", "skrl", "--ml_framework", "jax", "--device", "cpu",
                "--num_envs", "2", "--max_iterations", "1", "--distributed", "--log_root", str(tmp_path)],
               timeout=300, env=env)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "skrl's JAX launcher" in lines[0], proc.stderr
    assert not os.path.exists(tmp_path / "skrl")
