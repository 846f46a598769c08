"""rl_games (continuous A2C/PPO) through train.py: one process (in pytest's, see
mgpu_testing.training.train_in_process), 2 gloo ranks through the launcher, bad input (in-process too)."""

from __future__ import annotations

import importlib.util
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
assert importlib.util.find_spec("rl_games") is not None, "rl_games is not installed: uv sync --locked"


def rl_games_checkpoints(run_dir: Path) -> list[Path]:
    return sorted(run_dir.glob("nn/*.pth"), key=lambda p: p.stat().st_mtime_ns)


def assert_rl_games_checkpoint(path: Path) -> dict:
    data = load_torch(path, "rl_games")  # weights_only=True with the library's allow-list
    assert {"model", "epoch", "frame", "optimizer"} <= set(data), sorted(data)
    return data


@pytest.mark.e2e  # in this process, but a real library's training: seconds, not the inner loop's
def test_one_process_trains_and_saves(tmp_path):
    """Resuming an rl_games checkpoint in one process is tests/test_resume.py's (on the healthy run's)."""
    common = train_args("rl_games", tmp_path, "--task", TASK, "--num_envs", "8", "--seed", "3")
    assert_one_rank_output(
        train_in_process(
            [*common, "--max_iterations", "2", "--save_interval", "1", "--run_name", "first"], single_env()
        )
    )

    run_dirs = list((tmp_path / "rl_games" / TASK).iterdir())
    assert len(run_dirs) == 1 and run_dirs[0].name.endswith("_first")
    saved = rl_games_checkpoints(run_dirs[0])
    assert saved, "no checkpoint written"
    epochs = [assert_rl_games_checkpoint(p)["epoch"] for p in saved]
    assert max(epochs) == 2 and 1 in epochs  # --save_interval 1 saves every epoch; the last is always saved
    assert not list(run_dirs[0].rglob(".*.tmp")), "temp files left behind"
    assert list(run_dirs[0].glob("summaries/events.out.tfevents.*")), "no TensorBoard log on rank 0"


@pytest.mark.e2e
def test_two_gloo_ranks_through_the_launcher(healthy_run):
    """The session's healthy 2-rank job: both ranks synchronized and ended equal, rank 0 alone wrote, and
    its checkpoints load, the last at the last epoch."""
    run = healthy_run("rl_games")
    run_dir = assert_two_rank_output(run.out, run.task_root, anchored=False)
    assert max(assert_rl_games_checkpoint(p)["epoch"] for p in rl_games_checkpoints(run_dir)) == run.iterations
    assert tensorboard_iterations(run_dir) == run.iterations


def test_checkpoint_of_another_library_is_one_line(tmp_path):
    other = tmp_path / "agent_32.pt"
    torch.save({"policy": {}, "value": {}, "optimizer": {}}, other)
    proc = train_in_process(
        train_args("rl_games", tmp_path, "--num_envs", "4", "--max_iterations", "1", "--checkpoint", str(other)),
        single_env(),
    )
    assert_one_line_error(proc, "not an rl_games checkpoint")
    assert not (tmp_path / "rl_games").exists(), "a refused run writes nothing"


@pytest.mark.e2e
def test_sigkill_while_saving_every_iteration_leaves_loadable_checkpoints(tmp_path):
    sigkill_while_saving("rl_games", tmp_path, "*.pth", assert_rl_games_checkpoint, stop_at="last_*_ep_4_rew_*.pth")
