"""skrl (torch PPO) through train.py: one process (in pytest's, see mgpu_testing.training.train_in_process), 2 gloo
ranks through the launcher, bad input (in-process too: nothing of the library is imported before the refusal)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch
from mgpu_testing.training import (
    TASK,
    assert_one_line_error,
    assert_one_rank_output,
    assert_two_rank_output,
    sigkill_while_saving,
    single_env,
    tensorboard_iterations,
    train_args,
    train_in_process,
)

from mgpu_lab.runs.checkpoint import load_torch

# a dev dependency: a missing one must fail, not skip (found without importing it: collection stays cheap)
assert importlib.util.find_spec("skrl") is not None, "skrl is not installed: uv sync --locked"


def skrl_checkpoints(run_dir: Path) -> list[Path]:
    return sorted(run_dir.glob("checkpoints/agent_*.pt"), key=lambda p: int(p.stem.split("_")[1]))


def assert_skrl_checkpoint(path: Path) -> dict:
    data = load_torch(path, "skrl")  # weights_only=True with the library's allow-list
    assert {"policy", "value", "optimizer"} <= set(data), sorted(data)
    return data


@pytest.mark.e2e  # in this process, but a real library's training: seconds, not the inner loop's
def test_one_process_trains_and_saves(tmp_path):
    """Resuming a skrl checkpoint in one process is tests/test_resume.py's (on the healthy run's)."""
    common = train_args("skrl", tmp_path, "--task", TASK, "--num_envs", "8", "--seed", "3")
    assert_one_rank_output(
        train_in_process(
            [*common, "--max_iterations", "2", "--save_interval", "1", "--run_name", "first"], single_env()
        )
    )

    run_dirs = list((tmp_path / "skrl" / TASK).iterdir())
    assert len(run_dirs) == 1 and run_dirs[0].name.endswith("_first")
    saved = skrl_checkpoints(run_dirs[0])
    assert [p.name for p in saved] == ["agent_16.pt", "agent_32.pt"]  # 16 rollout steps per iteration
    for path in saved:
        assert_skrl_checkpoint(path)
    assert not list(run_dirs[0].rglob(".*.tmp")), "temp files left behind"
    assert list(run_dirs[0].glob("events.out.tfevents.*")), "no TensorBoard log on rank 0"


@pytest.mark.e2e
def test_two_gloo_ranks_through_the_launcher(healthy_run):
    """The session's healthy 2-rank job: both ranks synchronized and ended equal, rank 0 alone wrote, and
    its checkpoints load, named by the whole run's timestep (16 rollout steps per iteration)."""
    run = healthy_run("skrl")
    run_dir = assert_two_rank_output(run.out, run.task_root, anchored=False)
    saved = skrl_checkpoints(run_dir)
    assert [p.name for p in saved] == [f"agent_{16 * (i + 1)}.pt" for i in range(run.iterations)]
    for path in saved:
        assert_skrl_checkpoint(path)
    assert tensorboard_iterations(run_dir) == run.iterations


def test_checkpoint_of_another_library_is_one_line(tmp_path):
    other = tmp_path / "model_3.pt"
    torch.save({"actor_state_dict": {}, "critic_state_dict": {}, "iter": 3}, other)
    proc = train_in_process(
        train_args("skrl", tmp_path, "--num_envs", "4", "--max_iterations", "1", "--checkpoint", str(other)),
        single_env(),
    )
    assert_one_line_error(proc, "not a skrl PPO checkpoint")
    assert not (tmp_path / "skrl").exists(), "a refused run writes nothing"


@pytest.mark.parametrize(
    ("library", "framework", "blocked", "expected"),
    [
        ("skrl", "torch", "skrl", "skrl is not installed: uv sync --extra skrl"),
        ("skrl", "jax", "flax", "uv sync --extra jax"),
        ("rl_games", "torch", "rl_games", "rl_games is not installed: uv sync --extra rl-games"),
    ],
)
def test_missing_library_names_the_extra(tmp_path, library, framework, blocked, expected):
    # hidden for the call (sys.modules[name] = None): "not installed" for importlib's finders and for import
    proc = train_in_process(
        train_args(library, tmp_path, "--ml_framework", framework, "--num_envs", "2", "--max_iterations", "1"),
        single_env(),
        hide=(blocked,),
    )
    assert_one_line_error(proc, expected)
    assert not (tmp_path / library).exists()


@pytest.mark.e2e
def test_sigkill_while_saving_every_iteration_leaves_loadable_checkpoints(tmp_path):
    sigkill_while_saving(
        "skrl", tmp_path, "agent_*.pt", assert_skrl_checkpoint, stop_at="agent_64.pt", final_pattern="*.pt"
    )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-x", "-q"]))
