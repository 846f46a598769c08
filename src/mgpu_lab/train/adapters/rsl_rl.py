"""rsl_rl adapter: the library's own ``OnPolicyRunner`` + ``PPO`` on a built-in toy task.

Nothing in rsl_rl is edited or copied. The adapter works from outside, with subclasses that live in
:mod:`mgpu_lab.train.adapters.rsl_rl_runner` (imported by :func:`train`: this module, which the launcher's checks
read for checkpoints before any rank starts, imports no RL library):

- ``ToyRslRlEnv`` implements ``rsl_rl.env.VecEnv`` over a toy task (TensorDict observations).
- ``DistributedRunner`` subclasses ``OnPolicyRunner``:
  ``_configure_multi_gpu`` keeps the library's NCCL path on CUDA and, on CPU, sets the same fields
  but initialises gloo (rsl_rl itself insists on ``cuda:LOCAL_RANK`` and NCCL);
  ``save`` writes checkpoints atomically (temp file + fsync + os.replace).
- ``SyncReportingPPO`` subclasses ``PPO`` to print the contract line right after the library's own
  initial parameter broadcast, and to normalize advantages over every rank's rollout together: the library
  normalizes each rank's own (``PPO.compute_returns``), so 2 ranks x 32 envs would not be the algorithm that
  1 rank x 64 envs is, and with few envs per rank it learns measurably worse
  (``benchmarks/bench_fair_comparison.py``).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mgpu_lab.health.rank_progress import StepClock
from mgpu_lab.runs.resume import numbered, resume_line
from mgpu_lab.train.adapters.rsl_rl_checkpoint import check_checkpoint
from mgpu_lab.train.config import TrainConfig, TrainResult, UsageError
from mgpu_lab.train.dist import DistContext, atomic_write, is_rank0, log_line, rank_seed
from mgpu_lab.train.returns import episodes_hook

# --- hyperparameters -----------------------------------------------------------------------------


@dataclass(frozen=True)
class RslRlTaskCfg:
    """Per-task PPO settings (small networks: these tasks have 3-4 observations)."""

    num_steps_per_env: int = 24
    hidden_dims: tuple[int, ...] = (32, 32)
    learning_rate: float = 1e-3
    num_learning_epochs: int = 5
    num_mini_batches: int = 4
    entropy_coef: float = 0.005
    gamma: float = 0.99
    lam: float = 0.95
    init_std: float = 1.0
    save_interval: int = 50


TASK_CFGS: dict[str, RslRlTaskCfg] = {
    "Toy-Cartpole-v0": RslRlTaskCfg(),
    "Toy-Pendulum-SwingUp-v0": RslRlTaskCfg(
        num_steps_per_env=32, hidden_dims=(64, 64), gamma=0.98, entropy_coef=0.0, num_mini_batches=4, save_interval=100
    ),
}


def runner_cfg(task: str, cfg: TrainConfig) -> dict[str, Any]:
    """The ``train_cfg`` dict OnPolicyRunner expects (rsl_rl 5.x layout)."""
    t = TASK_CFGS.get(task, RslRlTaskCfg())
    model = {
        "class_name": "MLPModel",
        "hidden_dims": list(t.hidden_dims),
        "activation": "elu",
        "obs_normalization": True,
    }
    return {
        "seed": cfg.seed,
        "num_steps_per_env": t.num_steps_per_env,
        "save_interval": cfg.save_interval or t.save_interval,
        "run_name": cfg.run_name or "",
        # resumed (a restart or --continue_run, in the same folder): TensorBoard drops the steps from here on
        # that an earlier job logged after its last checkpoint (purge_step), so the folder shows one curve
        "logger": "tensorboard"
        if not cfg.start_iteration
        else {
            "class_name": "torch.utils.tensorboard:SummaryWriter",
            "flush_secs": 10,
            "purge_step": cfg.start_iteration,
        },
        "check_for_nan": True,
        "obs_groups": {"actor": ["policy"], "critic": ["policy"]},
        "actor": {**model, "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": t.init_std}},
        "critic": dict(model),
        "algorithm": {
            "class_name": "mgpu_lab.train.adapters.rsl_rl_runner:SyncReportingPPO",
            "learning_rate": t.learning_rate,
            "num_learning_epochs": t.num_learning_epochs,
            "num_mini_batches": t.num_mini_batches,
            "clip_param": 0.2,
            "gamma": t.gamma,
            "lam": t.lam,
            "value_loss_coef": 1.0,
            "entropy_coef": t.entropy_coef,
            "max_grad_norm": 1.0,
            "use_clipped_value_loss": True,
            "schedule": "adaptive",
            "desired_kl": 0.01,
        },
    }


# --- entry ---------------------------------------------------------------------------------------


def checkpoints(run_dir: Path, cfg: TrainConfig) -> list[tuple[int, Path]]:
    """This run's checkpoints as (completed iterations, path): rsl_rl's ``model_<it>.pt`` holds iterations 0..it."""
    return numbered(run_dir, "model_*.pt", r"^model_(\d+)\.pt$", offset=1)


def checkpoint_iteration(path: str, cfg: TrainConfig) -> int:
    """Completed iterations in an rsl_rl checkpoint (its ``iter`` is the index of the last one it holds)."""
    return int(check_checkpoint(path).get("iter", -1)) + 1


def _write_params(log_dir: Path, cfg: TrainConfig, train_cfg: dict, ctx: DistContext) -> None:
    body = {
        "train": {k: v for k, v in vars(cfg).items() if k != "extra"},
        "rsl_rl": train_cfg,
        "world_size": ctx.world_size,
        "backend": ctx.backend,
    }
    text = json.dumps(body, indent=2, default=str).encode()
    atomic_write(log_dir / "params" / "config.json", lambda f: f.write(text))


def train(cfg: TrainConfig, ctx: DistContext) -> TrainResult:
    """Train ``cfg.task`` with rsl_rl's OnPolicyRunner and PPO; return what happened on this rank."""
    import torch  # torch, rsl_rl, the tasks: only when training

    from mgpu_lab.train.adapters.rsl_rl_runner import DistributedRunner, ToyRslRlEnv, use_context
    from mgpu_lab.train.tasks import make_env

    use_context(ctx, all_ranks_advantages=cfg.advantage_norm == "all_ranks")
    if cfg.checkpoint:
        check_checkpoint(cfg.checkpoint)

    seed = rank_seed(cfg.seed, ctx)
    torch.manual_seed(seed)
    train_cfg = runner_cfg(cfg.task, cfg)
    steps_per_it = train_cfg["num_steps_per_env"]
    clock = StepClock(steps_per_it, cfg.start_iteration, cfg.on_iteration)
    env = ToyRslRlEnv(make_env(cfg.task, cfg.num_envs, ctx.device, seed, episodes_hook(cfg)), cfg.task, clock)
    log_dir = cfg.log_dir if (is_rank0(ctx) and cfg.log_dir) else None
    runner = DistributedRunner(env, train_cfg, log_dir=log_dir, device=ctx.device, ctx=ctx)
    if log_dir:
        _write_params(Path(log_dir), cfg, train_cfg, ctx)

    if cfg.checkpoint:
        try:
            runner.load(cfg.checkpoint, map_location=ctx.device)
        except (RuntimeError, KeyError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise UsageError(f"--checkpoint {cfg.checkpoint}: does not fit {cfg.task} ({first[:160]})") from None
        # rsl_rl stores the index of the last iteration done and would redo it: continue after it instead
        runner.current_learning_iteration = cfg.start_iteration
        if is_rank0(ctx):
            log_line(resume_line(cfg.checkpoint, cfg.start_iteration, cfg.restart))

    iterations = cfg.remaining_iterations  # --max_iterations counts from 0 over the whole run
    start = time.perf_counter()
    runner.learn(num_learning_iterations=iterations, init_at_random_ep_len=False)
    seconds = time.perf_counter() - start

    alg = runner.alg
    params = [t for model in (alg.get_policy(), alg._raw_critic) for t in model.state_dict().values()]
    return TrainResult(
        env_steps=clock.env_steps,
        iterations=iterations,
        params=params,
        checkpoint=runner.saved[-1] if runner.saved else None,
        mean_rewards=env.mean_returns_per_iteration(steps_per_it, iterations),
        seconds=seconds,
    )
