"""What skrl's torch and JAX adapters share: skrl's import-time set-up, its Runner configuration, the env
wrapper base, checkpoints in skrl's layout, and the one training loop, :func:`train` (given a backend).

:mod:`mgpu_lab.train.adapters.skrl` (the adapter, and the torch backend) and :mod:`mgpu_lab.train.adapters.skrl_jax`
(the JAX backend) both import this module and nothing of each other's, except that the adapter picks the
JAX backend lazily for ``--ml_framework jax``.
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from mgpu_lab.health.rank_progress import StepClock
from mgpu_lab.runs.resume import resume_line
from mgpu_lab.train import dist as mdist
from mgpu_lab.train.config import TrainConfig, TrainResult, UsageError
from mgpu_lab.train.dist import DistContext
from mgpu_lab.train.returns import episodes_hook

_TORCHRUN_VARS = ("LOCAL_RANK", "RANK", "WORLD_SIZE")
_JAX_VARS = ("JAX_LOCAL_RANK", "JAX_RANK", "JAX_WORLD_SIZE")

#: PPO steps per environment between updates (one "iteration" = this many env steps per env)
ROLLOUTS = 16


def require(framework: str) -> None:
    """Raise the one-line UsageError when skrl (or, for JAX, jax/flax/optax) is not importable."""
    if importlib.util.find_spec("skrl") is None:
        extra = "jax" if framework == "jax" else "skrl"
        raise UsageError(f"skrl is not installed: uv sync --extra {extra}")
    if framework == "jax":
        for mod in ("jax", "flax", "optax"):
            if importlib.util.find_spec(mod) is None:
                raise UsageError(f"skrl --ml_framework jax needs {mod}, which is not installed: uv sync --extra jax")


def check_launcher(ctx: DistContext, framework: str) -> None:
    """Reject a launcher that does not match the framework (each needs its own rendezvous)."""
    if not ctx.distributed:
        return
    has_torchrun = all(v in os.environ for v in _TORCHRUN_VARS)
    has_jax = all(v in os.environ for v in _JAX_VARS)
    if framework == "jax" and not has_jax:
        raise UsageError(
            "skrl --ml_framework jax needs skrl's JAX launcher (JAX_RANK, JAX_WORLD_SIZE, ...), not torchrun: "
            "mgpu-lab train_multigpu --rl_library skrl --ml_framework jax ..."
        )
    if framework == "torch" and not has_torchrun:
        raise UsageError(
            "skrl --ml_framework torch needs torchrun's environment (LOCAL_RANK, RANK, WORLD_SIZE): "
            "mgpu-lab train_multigpu --rl_library skrl ..."
        )


def import_skrl(ctx: DistContext, framework: str = "torch") -> Any:
    """Import skrl so that its import-time distributed set-up matches ``ctx``; return the module.

    CUDA + torch: skrl starts NCCL itself. CPU + torch: skrl is imported with torchrun's variables
    hidden, then the gloo group is started here and ``skrl.config.torch`` is told the real rank.
    JAX: torchrun's variables are hidden (the torch side must stay single-process) and skrl's JAX
    config calls ``jax.distributed.initialize`` itself from the ``JAX_*`` variables.
    """
    if "skrl" in sys.modules:
        import skrl  # skrl: imported once, with torchrun's variables hidden when needed
    else:
        hide = framework == "jax" or (ctx.distributed and not ctx.is_cuda)
        hidden = {k: os.environ.pop(k) for k in _TORCHRUN_VARS if hide and k in os.environ}
        try:
            import skrl  # skrl: as above
        finally:
            os.environ.update(hidden)
    if framework == "torch" and ctx.distributed and ctx.world_size > 1:  # skrl treats world size 1 as local
        import torch.distributed as tdist  # torch: only for a distributed torch run

        conf = skrl.config.torch
        if not tdist.is_initialized():
            if ctx.is_cuda:
                raise RuntimeError("skrl did not start the NCCL process group at import (was skrl imported earlier?)")
            tdist.init_process_group(backend=ctx.backend, rank=ctx.rank, world_size=ctx.world_size)
        # skrl's config keeps these in private fields behind read-only properties
        conf._local_rank, conf._rank, conf._world_size = ctx.local_rank, ctx.rank, ctx.world_size
        conf._is_distributed = ctx.world_size > 1
    if framework == "torch":
        skrl.config.torch.device = ctx.device
    elif not skrl.config.jax.is_distributed:  # skrl defaults to "cuda:0"; JAX may only have a CPU backend
        import jax  # jax: only for --ml_framework jax

        gpu = ctx.is_cuda and any(d.platform == "gpu" for d in jax.devices())
        skrl.config.jax.device = f"cuda:{ctx.local_rank}" if gpu else "cpu"
    return skrl


def runner_cfg(cfg: TrainConfig, *, timesteps: int, checkpoint_interval: int) -> dict[str, Any]:
    """The skrl Runner configuration (the same keys as Isaac Lab's ``skrl_ppo_cfg.yaml``)."""
    log_dir = Path(cfg.log_dir) if cfg.log_dir else Path(cfg.log_root) / "skrl" / cfg.task / "run"
    net = [{"name": "net", "input": "OBSERVATIONS", "layers": [64, 64], "activations": "elu"}]
    return {
        "seed": cfg.seed,  # skrl's set_seed adds the rank in distributed runs
        "models": {
            "separate": True,
            "policy": {
                "class": "GaussianMixin",
                "clip_actions": False,
                "clip_log_std": True,
                "min_log_std": -20.0,
                "max_log_std": 2.0,
                "initial_log_std": 0.0,
                "network": net,
                "output": "ACTIONS",
            },
            "value": {"class": "DeterministicMixin", "clip_actions": False, "network": net, "output": "ONE"},
        },
        "memory": {"class": "RandomMemory", "memory_size": -1},
        "agent": {
            "class": "PPO",
            "rollouts": ROLLOUTS,
            "learning_epochs": 5,
            "mini_batches": 4,
            "discount_factor": 0.99,
            "gae_lambda": 0.95,
            "learning_rate": 1e-3,
            "learning_rate_scheduler": "KLAdaptiveLR",
            "learning_rate_scheduler_kwargs": {"kl_threshold": 0.008},
            "observation_preprocessor": "RunningStandardScaler",
            "observation_preprocessor_kwargs": None,
            "value_preprocessor": "RunningStandardScaler",
            "value_preprocessor_kwargs": None,
            "grad_norm_clip": 1.0,
            "ratio_clip": 0.2,
            "value_clip": 0.2,
            "entropy_loss_scale": 0.0,
            "value_loss_scale": 2.0,
            "kl_threshold": 0.0,
            "rewards_shaper_scale": 0.1,
            "time_limit_bootstrap": False,
            "experiment": {
                "directory": str(log_dir.parent),
                "experiment_name": log_dir.name,
                "write_interval": ROLLOUTS,
                "checkpoint_interval": checkpoint_interval,
            },
        },
        "trainer": {
            "class": "SequentialTrainer",
            "timesteps": timesteps,
            "headless": True,
            "disable_progressbar": True,
            "close_environment_at_exit": False,
            "environment_info": "episode",
        },
    }


def checkpoint_interval(cfg: TrainConfig) -> int:
    """Timesteps between checkpoints: ``--save_interval`` iterations, else about ten per run (the last is added)."""
    return ROLLOUTS * (cfg.save_interval or max(1, math.ceil(cfg.max_iterations / 10)))


class EpisodeStats:
    """Mean return of the episodes that finished in each iteration (for TrainResult.mean_rewards)."""

    def __init__(self, steps_per_iteration: int) -> None:
        self.steps_per_iteration = steps_per_iteration
        self.steps = 0
        self._returns: list[float] = []
        self.mean_rewards: list[float] = []

    def add(self, extras: dict[str, Any]) -> dict[str, Any]:
        """Record one step's finished episodes; return skrl's ``infos["episode"]`` scalars (maybe empty)."""
        rets = extras.get("episode_return")
        out: dict[str, Any] = {}
        if rets is not None and rets.numel():
            self._returns.extend(rets.detach().float().cpu().tolist())
            out["Episode / Return (mean)"] = rets.float().mean()
            lens = extras.get("episode_length")
            if lens is not None and lens.numel():
                out["Episode / Length (mean)"] = lens.float().mean()
        self.steps += 1
        if self.steps % self.steps_per_iteration == 0 and self._returns:
            self.mean_rewards.append(sum(self._returns) / len(self._returns))
            self._returns = []
        return out


class ToyWrapperBase:
    """What the torch and JAX env wrappers share; mixed in before skrl's ``Wrapper`` of either framework."""

    _env: Any  # skrl's Wrapper sets both
    _unwrapped: Any

    def __init__(self, env: Any, stats: EpisodeStats, clock: StepClock | None = None) -> None:
        super().__init__(env)  # type: ignore[call-arg]  # skrl's Wrapper, after this mix-in
        self._stats = stats
        self._clock = clock
        self._obs: Any = None

    @property
    def observation_space(self):  # one env's space, as skrl expects
        return self._unwrapped.single_observation_space

    @property
    def action_space(self):
        return self._unwrapped.single_action_space

    @property
    def state_space(self):
        return None

    def state(self):
        return None

    def render(self, *args, **kwargs):
        return None

    def close(self) -> None:
        self._env.close()


def write_agent_checkpoint(
    agent: Any,
    timestep: int,
    suffix: str,
    save: Callable[[Any, Path], Any],
    encode: Callable[[Any], Any] = lambda value: value,
) -> None:
    """skrl's checkpoint layout (``agent_<timestep>``, ``best_agent`` once), each file written by ``save``.

    ``encode`` turns one module's internal value into what is stored; ``save(obj, path)`` must be atomic.
    """
    folder = Path(agent.experiment_dir) / "checkpoints"
    modules = {name: encode(agent._get_internal_value(m)) for name, m in agent.checkpoint_modules.items()}
    path = folder / f"agent_{timestep}{suffix}"
    save(modules, path)
    agent.last_checkpoint = str(path)
    best = agent.checkpoint_best_modules
    if best["modules"] and not best["saved"]:
        save({k: encode(best["modules"][k]) for k in agent.checkpoint_modules}, folder / f"best_agent{suffix}")
        best["saved"] = True


AGENT_FILE = r"^agent_(\d+)\."


def load_into(agent: Any, path: str, ctx: DistContext, cfg: TrainConfig) -> None:
    """Resume: load a checkpoint into the agent (UsageError when it does not fit the task's models)."""
    try:
        agent.load(path)
    except (RuntimeError, KeyError, ValueError, TypeError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise UsageError(f"--checkpoint {path}: does not fit these models ({first[:160]})") from None
    if mdist.is_rank0(ctx):
        mdist.log_line(resume_line(path, cfg.start_iteration, cfg.restart))


class Backend(Protocol):
    """One of skrl's frameworks, as :func:`train` needs it."""

    framework: str  # "torch" or "jax"
    suffix: str  # checkpoint file name suffix

    def check_checkpoint(self, path: str) -> object:
        """Read a checkpoint the restricted way, or raise a one-line UsageError."""

    def classes(self, skrl_mod: Any) -> tuple[type, type, type]:
        """The env wrapper, agent and runner subclasses (after skrl was imported the right way)."""

    def verify(self, skrl_mod: Any, ctx: DistContext) -> None:
        """UsageError when skrl's own distributed config disagrees with the launcher's."""

    def params(self, agent: Any) -> list[Any]:
        """The policy and value parameters as torch tensors (for the digest)."""

    def world_steps(self, skrl_mod: Any, env_steps: int) -> int | None:
        """Env steps summed over every rank when this backend does it (None: the trainer sums them)."""


def train(cfg: TrainConfig, ctx: DistContext, backend: Backend) -> TrainResult:
    """Train PPO with skrl on a built-in task; see :mod:`mgpu_lab.train.adapters.skrl` for the distributed set-up."""
    require(backend.framework)
    check_launcher(ctx, backend.framework)
    if cfg.checkpoint:
        backend.check_checkpoint(cfg.checkpoint)  # validate before any process group work
    skrl_mod = import_skrl(ctx, backend.framework)
    backend.verify(skrl_mod, ctx)
    from mgpu_lab.train.tasks import make_env  # the tasks (gymnasium, torch): only when training

    Wrapper, _, Runner = backend.classes(skrl_mod)
    stats = EpisodeStats(ROLLOUTS)
    clock = StepClock(ROLLOUTS, cfg.start_iteration, cfg.on_iteration)
    task_env = make_env(cfg.task, cfg.num_envs, ctx.device, mdist.rank_seed(cfg.seed, ctx), episodes_hook(cfg))
    env = Wrapper(task_env, stats, clock)
    timesteps = ROLLOUTS * cfg.remaining_iterations  # --max_iterations counts from 0 over the whole run
    runner = Runner(env, runner_cfg(cfg, timesteps=timesteps, checkpoint_interval=checkpoint_interval(cfg)))
    agent = runner.agent  # skrl's PPO has broadcast the models from rank 0 at construction
    agent.timestep_offset = ROLLOUTS * cfg.start_iteration
    if cfg.checkpoint:
        load_into(agent, cfg.checkpoint, ctx, cfg)  # every rank loads the same file, so they stay identical
    mdist.report_synchronized(ctx)

    start = time.perf_counter()
    runner.run("train")
    seconds = time.perf_counter() - start

    ckpt = None
    if mdist.is_rank0(ctx):
        final = (
            Path(agent.experiment_dir) / "checkpoints" / f"agent_{agent.timestep_offset + timesteps}{backend.suffix}"
        )
        if agent.last_checkpoint != str(final):
            agent.write_checkpoint(timestep=timesteps, timesteps=timesteps)
        ckpt = agent.last_checkpoint
    params = backend.params(agent)
    if cfg.returns is not None:
        cfg.returns.finish()  # the last iteration, before skrl JAX's backend leaves its process group
    world_steps = backend.world_steps(skrl_mod, clock.env_steps)
    return TrainResult(
        env_steps=clock.env_steps,
        iterations=cfg.remaining_iterations,
        params=params,
        checkpoint=ckpt,
        mean_rewards=stats.mean_rewards,
        seconds=seconds,
        world_env_steps=world_steps,
    )
