"""rsl_rl through train.py: one process, resume, learning, 2 gloo ranks through the launcher, SIGKILL safety."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import math
from pathlib import Path

import pytest
import torch
from mgpu_testing.training import (
    TASK,
    THROUGHPUT,
    assert_one_rank_output,
    assert_two_rank_output,
    sigkill_while_saving,
    single_env,
    tensorboard_iterations,
    train_args,
    train_in_process,
)

# a dev dependency: a missing one must fail, not skip (found without importing it: collection stays cheap)
assert importlib.util.find_spec("rsl_rl") is not None, "rsl_rl is not installed: uv sync --locked"


def checkpoints(root: Path) -> list[Path]:
    return sorted(root.rglob("model_*.pt"), key=lambda p: int(p.stem.split("_")[1]))


def assert_rsl_rl_checkpoint(path: Path) -> dict:
    loaded = torch.load(path, map_location="cpu", weights_only=True)
    assert {"actor_state_dict", "critic_state_dict", "optimizer_state_dict", "iter"} <= set(loaded)
    return loaded


@pytest.mark.e2e  # in this process (mgpu_testing.training.train_in_process), but two real trainings: seconds
def test_one_process_trains_saves_and_resumes(tmp_path):
    common = train_args("rsl_rl", tmp_path, "--task", TASK, "--num_envs", "16", "--seed", "3")
    out = assert_one_rank_output(
        train_in_process(
            [*common, "--max_iterations", "3", "--save_interval", "1", "--run_name", "first"], single_env()
        )
    )
    assert int(THROUGHPUT.search(out).group(1)) > 0

    run_dirs = list((tmp_path / "rsl_rl" / TASK).iterdir())
    assert len(run_dirs) == 1 and run_dirs[0].name.endswith("_first")
    saved = checkpoints(run_dirs[0])
    assert [p.name for p in saved] == ["model_0.pt", "model_1.pt", "model_2.pt"]
    for path in saved:
        assert_rsl_rl_checkpoint(path)
    assert not list(run_dirs[0].glob(".*.tmp")), "temp files left behind"
    assert (run_dirs[0] / "params" / "config.json").is_file()

    # --max_iterations counts from 0 over the whole run: model_2 holds iterations 0-2, so 5 trains 3 and 4
    proc = train_in_process([*common, "--max_iterations", "5", "--checkpoint", str(saved[-1])], single_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"[INFO] resumed from {saved[-1]} at iteration 3" in proc.stdout
    assert "[INFO] rank 0/1: stepped 768 env-steps" in proc.stdout  # 2 iterations x 24 steps x 16 envs
    resumed = [d for d in (tmp_path / "rsl_rl" / TASK).iterdir() if d != run_dirs[0]]
    assert len(resumed) == 1
    assert [p.name for p in checkpoints(resumed[0])] == ["model_4.pt"]
    assert assert_rsl_rl_checkpoint(checkpoints(resumed[0])[-1])["iter"] == 4


@pytest.mark.e2e  # in this process, but a real library's training: tens of seconds, not the inner loop's
def test_rsl_rl_learns_cartpole():
    """Fixed seed, 15 PPO iterations in this process: late episodes clearly outlast the first ones."""
    from mgpu_lab.train.adapters import rsl_rl as adapter
    from mgpu_lab.train.config import TrainConfig
    from mgpu_lab.train.dist import DistContext

    cfg = TrainConfig(rl_library="rsl_rl", task=TASK, num_envs=64, max_iterations=15, seed=1, device="cpu", log_dir="")
    with contextlib.redirect_stdout(io.StringIO()):
        result = adapter.train(cfg, DistContext())
    rewards = [r for r in result.mean_rewards if not math.isnan(r)]
    assert len(rewards) >= 8, result.mean_rewards
    first, late = rewards[0], sum(rewards[-3:]) / 3
    # a random policy drops the pole in ~20 steps (return ~15); a trained one lasts most of 250 steps
    assert late > max(3 * first, first + 60), (first, late, result.mean_rewards)
    assert result.env_steps == 15 * 24 * 64
    assert result.checkpoint is None  # no log_dir: nothing written


@pytest.mark.e2e
def test_two_gloo_ranks_through_the_launcher(healthy_run):
    """The session's healthy 2-rank job: both ranks synchronized and ended equal, rank 0 alone wrote, and
    every checkpoint of the run loads."""
    run = healthy_run("rsl_rl")
    run_dir = assert_two_rank_output(run.out, run.task_root, anchored=False)
    saved = checkpoints(run_dir)
    assert [p.name for p in saved] == [f"model_{i}.pt" for i in range(run.iterations)]  # --save_interval 1
    for path in saved:
        assert_rsl_rl_checkpoint(path)
    assert tensorboard_iterations(run_dir) == run.iterations


@pytest.mark.e2e
def test_sigkill_while_saving_every_iteration_leaves_loadable_checkpoints(tmp_path):
    sigkill_while_saving("rsl_rl", tmp_path, "model_*.pt", assert_rsl_rl_checkpoint, stop_at="model_3.pt", deadline=240)


def _second_rank(monkeypatch, other: torch.Tensor) -> None:
    """torch.distributed.all_reduce as seen by rank 0 of two, rank 1 holding the raw advantages ``other``."""
    from mgpu_lab.train.dist import moments

    monkeypatch.setattr(torch.distributed, "all_reduce", lambda tensor, op=None: tensor.add_(moments(other)))


def test_advantages_are_normalized_over_every_ranks_rollout_together(monkeypatch):
    """rsl_rl normalizes each rank's advantages alone; the adapter's PPO normalizes them over all ranks, so N
    ranks x E/N envs are the algorithm 1 rank x E envs is (benchmarks/bench_fair_comparison.py measures it)."""
    from mgpu_lab.train.adapters import rsl_rl as adapter
    from mgpu_lab.train.adapters import rsl_rl_runner
    from mgpu_lab.train.config import TrainConfig
    from mgpu_lab.train.dist import DistContext
    from mgpu_lab.train.tasks import make_env

    cfg = TrainConfig(rl_library="rsl_rl", task=TASK, num_envs=8, seed=1, device="cpu", log_dir="")
    env = rsl_rl_runner.ToyRslRlEnv(make_env(TASK, 8, "cpu", 1), TASK)
    alg = rsl_rl_runner.DistributedRunner(env, adapter.runner_cfg(TASK, cfg), None, "cpu", DistContext()).alg
    storage = alg.storage
    generator = torch.Generator().manual_seed(0)
    storage.rewards.copy_(torch.rand(storage.rewards.shape, generator=generator))
    storage.values.copy_(torch.rand(storage.values.shape, generator=generator))
    other = torch.randn(500, generator=generator, dtype=torch.float64) * 3 + 2  # far from this rank's own
    alg.is_multi_gpu = True  # rank 0 of two, as the library's multi-GPU configuration marks it
    _second_rank(monkeypatch, other)

    alg.compute_returns(env.get_observations())

    raw = storage.returns - storage.values
    together = torch.cat([raw.reshape(-1).to(torch.float64), other])
    expected = (raw - together.mean()) / (together.std() + 1e-8)
    assert torch.allclose(storage.advantages, expected.to(raw.dtype), atol=1e-5)
    alone = (raw - raw.mean()) / (raw.std() + 1e-8)  # what the library alone leaves
    assert not torch.allclose(storage.advantages, alone, atol=1e-2)


def test_advantage_norm_per_rank_keeps_the_library_s_own_normalization(monkeypatch):
    """``--advantage_norm per_rank``: the adapter's PPO leaves rsl_rl's per-rank normalization, as Isaac Lab's
    own trainer (rsl_rl as shipped) does, and asks no other rank for anything."""
    from mgpu_lab.train.adapters import rsl_rl as adapter
    from mgpu_lab.train.adapters import rsl_rl_runner
    from mgpu_lab.train.config import TrainConfig
    from mgpu_lab.train.dist import DistContext
    from mgpu_lab.train.tasks import make_env

    cfg = TrainConfig(rl_library="rsl_rl", task=TASK, num_envs=8, seed=1, device="cpu", advantage_norm="per_rank")
    monkeypatch.setattr(rsl_rl_runner, "_ALL_RANKS_ADVANTAGES", True)  # restored after the test
    rsl_rl_runner.use_context(DistContext(), all_ranks_advantages=cfg.advantage_norm == "all_ranks")
    env = rsl_rl_runner.ToyRslRlEnv(make_env(TASK, 8, "cpu", 1), TASK)
    alg = rsl_rl_runner.DistributedRunner(env, adapter.runner_cfg(TASK, cfg), None, "cpu", DistContext()).alg
    generator = torch.Generator().manual_seed(0)
    alg.storage.rewards.copy_(torch.rand(alg.storage.rewards.shape, generator=generator))
    alg.storage.values.copy_(torch.rand(alg.storage.values.shape, generator=generator))
    alg.is_multi_gpu = True

    def no_collective(tensor, op=None):
        raise AssertionError("per_rank normalization must not all_reduce")

    monkeypatch.setattr(torch.distributed, "all_reduce", no_collective)
    alg.compute_returns(env.get_observations())

    raw = alg.storage.returns - alg.storage.values
    assert torch.allclose(alg.storage.advantages, (raw - raw.mean()) / (raw.std() + 1e-8), atol=1e-5)


def test_advantage_norm_is_refused_for_other_libraries():
    """rl_games and skrl always normalize per rank: the option is rsl_rl's, refused in one line elsewhere."""
    from mgpu_testing.docs import TRAINER, load_script

    from mgpu_lab.core.errors import UsageError
    from mgpu_lab.train.checks import check_args

    parser = load_script(TRAINER, "_mgpu_test_rsl_rl_train_script").build_parser()
    args = parser.parse_args(["--rl_library", "rl_games", "--advantage_norm", "per_rank"])
    with pytest.raises(UsageError, match="--advantage_norm is for rsl_rl only"):
        check_args(args, 1)


def test_one_rank_normalizes_its_advantages_as_the_library_does(monkeypatch):
    """The all-ranks normalization over one rank is the library's own formula (mean and unbiased std)."""
    from mgpu_lab.train.dist import normalized_over_ranks

    values = torch.tensor([[1.0, 4.0], [2.0, 9.0]])
    monkeypatch.setattr(torch.distributed, "all_reduce", lambda tensor, op=None: tensor)  # one rank's own sum
    got = normalized_over_ranks(values)
    assert torch.allclose(got, (values - values.mean()) / (values.std() + 1e-8))
