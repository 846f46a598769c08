"""skrl's JAX PPO through train.py: 2 CPU processes through skrl's JAX launcher (the session's healthy JAX run),
and bad input. One process training and resuming: tests/test_resume.py (the skrl-jax restart).

jax 0.10 runs cross-process collectives on CPU over gloo, so skrl's own broadcast and gradient
all-reduce work between two CPU processes here. JIT compilation makes these the slowest trainer
tests, so they run one or two iterations only.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
from mgpu_testing import free_port
from mgpu_testing.training import (
    assert_one_line_error,
    assert_two_rank_output,
    single_env,
    tensorboard_iterations,
    train_args,
    train_in_process,
)

from mgpu_lab.runs.checkpoint import read_msgpack

# dev dependencies: a missing one must fail, not skip (found without importing them: collection stays cheap)
for _name in ("skrl", "jax", "flax"):
    assert importlib.util.find_spec(_name) is not None, f"{_name} is not installed: uv sync --locked"


def jax_env() -> dict[str, str]:
    return single_env(JAX_PLATFORMS="cpu")


def jax_checkpoints(run_dir: Path) -> list[Path]:
    return sorted(run_dir.glob("checkpoints/agent_*.msgpack"), key=lambda p: int(p.stem.split("_")[1]))


def assert_jax_checkpoint(path: Path) -> dict:
    """A MessagePack checkpoint (never a pickle) holding skrl's flax-serialized modules."""
    data = read_msgpack(path)
    assert {"policy", "value"} <= set(data) and all(isinstance(v, bytes) for v in data.values())
    return data


@pytest.mark.e2e
def test_two_cpu_processes_through_the_jax_launcher(healthy_run):
    """The session's healthy JAX job: two launchers (--nnodes 2, one process each) through skrl's JAX
    launcher; both processes synchronized and ended equal, rank 0 alone wrote a MessagePack checkpoint."""
    run = healthy_run("skrl-jax")
    run_dir = assert_two_rank_output(run.out, run.task_root, anchored=False)
    saved = jax_checkpoints(run_dir)
    assert [p.name for p in saved] == [f"agent_{16 * (i + 1)}.msgpack" for i in range(run.iterations)]
    assert_jax_checkpoint(saved[-1])
    assert tensorboard_iterations(run_dir) == run.iterations


def test_jax_under_torchrun_is_refused_in_one_line(tmp_path):
    """In this process (mgpu_testing.training.train_in_process): refused before skrl or JAX is imported."""
    env = jax_env()
    env.update(LOCAL_RANK="0", RANK="0", WORLD_SIZE="1", MASTER_PORT=str(free_port()))
    proc = train_in_process(
        train_args(
            "skrl", tmp_path, "--ml_framework", "jax", "--num_envs", "2", "--max_iterations", "1", "--distributed"
        ),
        env,
    )
    assert_one_line_error(proc, "skrl's JAX launcher")
    assert not os.path.exists(tmp_path / "skrl")
