"""rsl_rl adapter: the library's own ``OnPolicyRunner`` + ``PPO`` on a built-in toy task.

Nothing in rsl_rl is edited or copied. The adapter works from outside:

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

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mgpu_lab.health.rank_progress import StepClock
from mgpu_lab.runs.checkpoint import LIBRARY_KEYS
from mgpu_lab.runs.resume import numbered, resume_line
from mgpu_lab.train.adapters import missing_library
from mgpu_lab.train.config import TrainConfig, TrainResult, UsageError
from mgpu_lab.train.dist import (
    DistContext,
    atomic_torch_save,
    atomic_write,
    is_rank0,
    load_torch_checkpoint,
    log_line,
    normalized_over_ranks,
    rank_seed,
    report_synchronized,
)
from mgpu_lab.train.returns import episodes_hook

try:
    import torch
    from rsl_rl.algorithms import PPO
    from rsl_rl.env import VecEnv
    from rsl_rl.runners import OnPolicyRunner
    from tensordict import TensorDict
except ModuleNotFoundError as exc:  # pragma: no cover - depends on the installed extras
    if (exc.name or "").split(".")[0] in {"rsl_rl", "tensordict", "tensorboard", "git", "onnx"}:
        raise missing_library("rsl_rl", exc.name) from None
    raise

from mgpu_lab.train.tasks import ToyVecEnv, make_env

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
            "class_name": f"{__name__}:SyncReportingPPO",
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


# --- environment ---------------------------------------------------------------------------------


class ToyRslRlEnv(VecEnv):
    """rsl_rl's VecEnv over a toy task; records finished-episode returns per step for the adapter."""

    def __init__(self, env: ToyVecEnv, task: str, clock: StepClock | None = None) -> None:
        self.env = env
        self.clock = clock
        self.num_envs = env.num_envs
        self.num_actions = env.num_actions
        self.max_episode_length = env.max_episode_length
        self.device = env.device
        self.cfg = {
            "task": task,
            "num_envs": env.num_envs,
            "num_obs": env.num_obs,
            "num_actions": env.num_actions,
            "max_episode_length": env.max_episode_length,
        }
        self.steps = 0
        self.finished: list[tuple[int, torch.Tensor]] = []  # (step index, returns of episodes ended there)
        self._obs = self._wrap(env.reset())

    @property
    def episode_length_buf(self) -> torch.Tensor:
        return self.env.episode_length_buf

    @episode_length_buf.setter
    def episode_length_buf(self, value: torch.Tensor) -> None:
        self.env.episode_length_buf = value.to(self.env.episode_length_buf.dtype)

    def _wrap(self, obs: torch.Tensor) -> TensorDict:
        return TensorDict({"policy": obs}, batch_size=[self.num_envs], device=self.device)

    def get_observations(self) -> TensorDict:
        return self._obs

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        if self.clock is not None:
            self.clock.tick(self.num_envs)
        obs, reward, terminated, truncated, extras = self.env.step(actions)
        self._obs = self._wrap(obs)
        if extras["episode_return"].numel():
            self.finished.append((self.steps, extras["episode_return"].detach().to("cpu")))
        self.steps += 1
        dones = (terminated | truncated).to(torch.long)
        return self._obs, reward, dones, {"time_outs": extras["time_outs"]}

    def mean_returns_per_iteration(self, steps_per_iteration: int, iterations: int) -> list[float]:
        """Mean return of the episodes that finished in each iteration (NaN where none finished)."""
        sums = [0.0] * iterations
        counts = [0] * iterations
        for step, returns in self.finished:
            it = min(step // steps_per_iteration, iterations - 1)
            sums[it] += float(returns.sum())
            counts[it] += int(returns.numel())
        return [s / c if c else float("nan") for s, c in zip(sums, counts)]


# --- library subclasses --------------------------------------------------------------------------


class SyncReportingPPO(PPO):
    """rsl_rl's PPO, printing the contract line once its initial broadcast is done, with advantages normalized
    over all ranks."""

    def broadcast_parameters(self) -> None:
        super().broadcast_parameters()
        report_synchronized(_CURRENT_CTX or DistContext())

    def compute_returns(self, obs: TensorDict) -> None:
        super().compute_returns(obs)
        if self.is_multi_gpu and not self.normalize_advantage_per_mini_batch:
            # the library left (A - mean_r) / std_r of this rank's batch; A itself is returns - values
            storage = self.storage
            storage.advantages = normalized_over_ranks(storage.returns - storage.values)


_CURRENT_CTX: DistContext | None = None


class DistributedRunner(OnPolicyRunner):
    """OnPolicyRunner with gloo on CPU, atomic checkpoints and a record of what it saved."""

    def __init__(self, env: VecEnv, train_cfg: dict, log_dir: str | None, device: str, ctx: DistContext) -> None:
        self.ctx = ctx
        self.saved: list[str] = []
        super().__init__(env, train_cfg, log_dir=log_dir, device=device)

    def _configure_multi_gpu(self) -> None:
        ctx = self.ctx
        if not ctx.distributed or ctx.world_size == 1 or ctx.is_cuda:
            # world size 1, or CUDA: the library's own path (NCCL on cuda:LOCAL_RANK)
            super()._configure_multi_gpu()
            return
        # CPU ranks: the same bookkeeping the library does, but with gloo and no CUDA device
        self.gpu_world_size = ctx.world_size
        self.is_distributed = True
        self.gpu_local_rank = ctx.local_rank
        self.gpu_global_rank = ctx.rank
        self.cfg["multi_gpu"] = {"global_rank": ctx.rank, "local_rank": ctx.local_rank, "world_size": ctx.world_size}
        torch.distributed.init_process_group(backend="gloo", rank=ctx.rank, world_size=ctx.world_size)

    def learn(self, num_learning_iterations: int, init_at_random_ep_len: bool = False) -> None:
        if not self.is_distributed:  # nothing to broadcast: a single rank is trivially in sync
            report_synchronized(self.ctx)
        super().learn(num_learning_iterations, init_at_random_ep_len)

    def save(self, path: str, infos: dict | None = None) -> None:
        if not is_rank0(self.ctx):  # only rank 0 writes (the library already guarantees it; be explicit)
            return
        saved = self.alg.save()
        saved["iter"] = self.current_learning_iteration
        saved["infos"] = infos
        atomic_torch_save(saved, path)
        self.saved.append(path)
        self.logger.save_model(path, self.current_learning_iteration)

    def load(
        self, path: str, load_cfg: dict | None = None, strict: bool = True, map_location: str | None = None
    ) -> dict:
        """OnPolicyRunner.load, reading the file without running code from it (rsl_rl's own load unpickles it in full)."""
        loaded = _check_checkpoint(path)
        if self.alg.load(loaded, load_cfg, strict):
            self.current_learning_iteration = loaded["iter"]
        return loaded.get("infos") or {}


# --- entry ---------------------------------------------------------------------------------------


def _check_checkpoint(path: str) -> dict:
    return load_torch_checkpoint(path, *LIBRARY_KEYS["rsl_rl"], "rsl_rl")


def checkpoints(run_dir: Path, cfg: TrainConfig) -> list[tuple[int, Path]]:
    """This run's checkpoints as (completed iterations, path): rsl_rl's ``model_<it>.pt`` holds iterations 0..it."""
    return numbered(run_dir, "model_*.pt", r"^model_(\d+)\.pt$", offset=1)


def checkpoint_iteration(path: str, cfg: TrainConfig) -> int:
    """Completed iterations in an rsl_rl checkpoint (its ``iter`` is the index of the last one it holds)."""
    return int(_check_checkpoint(path).get("iter", -1)) + 1


def _write_params(log_dir: Path, cfg: TrainConfig, train_cfg: dict, ctx: DistContext) -> None:
    import json

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
    global _CURRENT_CTX
    _CURRENT_CTX = ctx
    if cfg.checkpoint:
        _check_checkpoint(cfg.checkpoint)

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
