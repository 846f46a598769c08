"""rl_games adapter: continuous A2C/PPO (``a2c_continuous``) from rl-games 1.6.5, through its Runner.

What rl_games does on its own with ``multi_gpu: True``, and how this adapter works with it:

- ``A2CBase.__init__`` reads ``LOCAL_RANK``/``RANK``/``WORLD_SIZE``, calls
  ``init_process_group("nccl")`` and forces the device to ``cuda:LOCAL_RANK``; ``train()`` calls
  ``torch.cuda.set_device(local_rank)``, broadcasts the model from rank 0, and from then on
  all-reduces gradients and KL, and broadcasts the learning rate and the stop flag. On CUDA the
  adapter leaves all of that to rl_games.
- On CPU that set-up cannot work (no NCCL, no CUDA device). There the adapter starts the gloo group
  itself, builds the agent with ``multi_gpu`` off (so the constructor neither starts NCCL nor moves
  to CUDA), and then turns rl_games' multi-GPU mode on for the training loop: the same rank fields,
  the same rank-0-only printing, logging and adaptive learning rate that rl_games sets for itself.
  ``local_rank`` becomes -1 so ``train()``'s ``torch.cuda.set_device`` call is the documented no-op.
  Every collective in the loop is rl_games' own, now running over gloo.
- The built-in task is registered as an rl_games vecenv type; the agent subclass writes its
  checkpoints atomically and prints the sync line after rl_games' own broadcast.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from mgpu_lab.health.rank_progress import StepClock
from mgpu_lab.runs.checkpoint import LIBRARY_KEYS
from mgpu_lab.runs.resume import numbered, resume_line
from mgpu_lab.train import dist as mdist
from mgpu_lab.train.config import TrainConfig, TrainResult, UsageError
from mgpu_lab.train.dist import DistContext
from mgpu_lab.train.returns import episodes_hook

#: env steps per environment between updates (one "epoch" = one iteration)
HORIZON = 16
VECENV_TYPE = "MGPU_LAB_TOY"
ENV_NAME = "mgpu_lab_toy"


def require() -> None:
    if importlib.util.find_spec("rl_games") is None:
        raise UsageError("rl_games is not installed: uv sync --extra rl-games")


def load_checkpoint(path: str) -> dict[str, Any]:
    """Read an rl_games checkpoint on CPU, or raise a one-line UsageError."""
    return mdist.load_torch_checkpoint(path, *LIBRARY_KEYS["rl_games"], "rl_games")


def checkpoints(run_dir: Path, cfg: TrainConfig) -> list[tuple[int, Path]]:
    """This run's checkpoints as (completed iterations, path): rl_games' ``nn/last_<name>_ep_<epoch>_rew_*.pth``."""
    return numbered(run_dir, "nn/last_*_ep_*.pth", r"_ep_(\d+)_rew_")


def checkpoint_iteration(path: str, cfg: TrainConfig) -> int:
    """Completed iterations (rl_games epochs) in an rl_games checkpoint."""
    return int(load_checkpoint(path)["epoch"])


def params_for(
    cfg: TrainConfig, ctx: DistContext, *, native_multi_gpu: bool, max_epochs: int, train_dir: str, experiment: str
) -> dict[str, Any]:
    """The rl_games ``params`` (the same layout as Isaac Lab's ``rl_games_ppo_cfg.yaml``)."""
    batch = HORIZON * cfg.num_envs
    minibatch = batch // 4 if batch % 4 == 0 else batch
    return {
        # with multi_gpu on, rl_games' Runner adds the rank itself
        "seed": cfg.seed if native_multi_gpu else mdist.rank_seed(cfg.seed, ctx),
        "algo": {"name": "a2c_continuous"},
        "model": {"name": "continuous_a2c_logstd"},
        "network": {
            "name": "actor_critic",
            "separate": False,
            "space": {
                "continuous": {
                    "mu_activation": "None",
                    "sigma_activation": "None",
                    "mu_init": {"name": "default"},
                    "sigma_init": {"name": "const_initializer", "val": 0},
                    "fixed_sigma": True,
                }
            },
            "mlp": {
                "units": [64, 64],
                "activation": "elu",
                "d2rl": False,
                "initializer": {"name": "default"},
                "regularizer": {"name": "None"},
            },
        },
        "config": {
            "name": "toy_ppo",
            "full_experiment_name": experiment,
            "train_dir": train_dir,
            "env_name": ENV_NAME,
            "device": ctx.device,
            "device_name": ctx.device,
            "multi_gpu": native_multi_gpu,
            "ppo": True,
            "mixed_precision": False,
            "torch_compile": False,
            "normalize_input": True,
            "normalize_value": True,
            "value_bootstrap": True,
            "num_actors": cfg.num_envs,
            "reward_shaper": {"scale_value": 0.1},
            "normalize_advantage": True,
            "gamma": 0.99,
            "tau": 0.95,
            "learning_rate": 1e-3,
            "lr_schedule": "adaptive",
            "kl_threshold": 0.008,
            "max_epochs": max_epochs,
            "save_best_after": max_epochs + 1,  # keep the run folder small: periodic + final saves only
            "save_frequency": cfg.save_interval or max(1, (cfg.max_iterations + 9) // 10),
            "grad_norm": 1.0,
            "entropy_coef": 0.0,
            "truncate_grads": True,
            "e_clip": 0.2,
            "horizon_length": HORIZON,
            "minibatch_size": minibatch,
            "mini_epochs": 5,
            "critic_coef": 4,
            "clip_value": True,
            "seq_length": 4,
            "bounds_loss_coef": 0.0001,
        },
    }


def _vecenv_class(clock: StepClock) -> type:
    """rl_games' vecenv over a built-in task (rl_games is imported here, not at module load)."""
    import torch  # torch, rl_games: only when the library is used
    from rl_games.common.ivecenv import IVecEnv

    class ToyVecEnvForRlGames(IVecEnv):
        """rl_games' vecenv interface over a built-in batched task (tensors stay on the task's device)."""

        def __init__(self, env: Any) -> None:
            self.env = env

        def step(self, actions):
            clock.tick(self.env.num_envs)
            obs, reward, terminated, truncated, extras = self.env.step(actions)
            dones = (terminated | truncated).to(torch.long)
            return {"obs": obs}, reward, dones, extras

        def reset(self):
            return {"obs": self.env.reset()}

        def get_number_of_agents(self) -> int:
            return 1

        def get_env_info(self) -> dict[str, Any]:
            return {
                "observation_space": self.env.single_observation_space,
                "action_space": self.env.single_action_space,
                "state_space": None,
                "agents": 1,
                "value_size": 1,
            }

    return ToyVecEnvForRlGames


def _observer_class() -> type:
    from rl_games.common.algo_observer import DefaultAlgoObserver  # rl_games: only when the library is used

    class EpisodeObserver(DefaultAlgoObserver):
        """rl_games' default observer, also keeping each epoch's mean episode return."""

        def __init__(self) -> None:
            super().__init__()
            self._returns: list[float] = []
            self.mean_rewards: list[float] = []

        def process_infos(self, infos, done_indices):
            rets = infos.get("episode_return") if isinstance(infos, dict) else None
            if rets is not None and rets.numel():
                self._returns.extend(rets.float().cpu().tolist())
            super().process_infos(infos, done_indices)

        def end_epoch(self) -> None:
            if self._returns:
                self.mean_rewards.append(sum(self._returns) / len(self._returns))
                self._returns = []

    return EpisodeObserver


def _agent_class(ctx: DistContext, manual_dist: bool) -> type:
    from rl_games.algos_torch.a2c_continuous import A2CAgent  # rl_games: as above

    class MgpuA2CAgent(A2CAgent):
        """rl_games' continuous A2C/PPO with atomic checkpoints, the sync line, and gloo on CPU."""

        def __init__(self, base_name: str, params: dict[str, Any]) -> None:
            config = params["config"]
            self._scratch: str | None = None
            if ctx.distributed and ctx.rank != 0:
                # rl_games' constructor creates the run folders on every rank: give the others a
                # throw-away folder, so only rank 0 writes under the log root
                self._scratch = tempfile.mkdtemp(prefix="mgpu_rl_games_rank")
                config["train_dir"] = self._scratch
                if manual_dist:  # what rl_games sets for non-zero ranks itself in multi-GPU mode
                    config["print_stats"] = False
                    config["lr_schedule"] = None
            super().__init__(base_name, params)
            if manual_dist:
                self.multi_gpu = True
                self.global_rank, self.world_size = ctx.rank, ctx.world_size
                self.local_rank = -1  # torch.cuda.set_device(-1) is a no-op; train() calls it unconditionally
                if ctx.rank != 0 and self.writer is not None:  # type: ignore[has-type]
                    self.writer.close()  # type: ignore[has-type]
                    self.writer = None
            self.trained_epochs = 0
            self.loop_start: float | None = None
            self.last_checkpoint: str | None = None

        def update_epoch(self):
            # the first call comes right after rl_games' own parameter broadcast in train()
            if self.trained_epochs == 0:
                mdist.report_synchronized(ctx)
                self.loop_start = time.perf_counter()  # the training loop proper starts here
            else:
                self.algo_observer.end_epoch()
            self.trained_epochs += 1
            return super().update_epoch()

        def save(self, fn):
            path = fn + ".pth"
            mdist.atomic_torch_save(self.get_full_state_weights(), path)
            self.last_checkpoint = path

        def restore(self, fn, set_epoch=True):
            # rl_games' own restore unpickles the file in full (code and all): read it as plain tensors instead
            self.set_full_state_weights(load_checkpoint(fn), set_epoch=set_epoch)

        def cleanup(self) -> None:
            self.algo_observer.end_epoch()
            if self._scratch:
                shutil.rmtree(self._scratch, ignore_errors=True)

    return MgpuA2CAgent


def _classes(ctx: DistContext, manual_dist: bool, clock: StepClock) -> tuple[type, type, type]:
    """Build the vecenv, observer and agent subclasses (rl_games is imported here, not at module load)."""
    return _vecenv_class(clock), _observer_class(), _agent_class(ctx, manual_dist)


def train(cfg: TrainConfig, ctx: DistContext) -> TrainResult:
    """Train rl_games' continuous PPO on a built-in task; see the module docstring for multi-GPU."""
    require()
    if cfg.checkpoint:
        load_checkpoint(cfg.checkpoint)  # validate before any process group work
    if ctx.distributed and not all(v in os.environ for v in ("LOCAL_RANK", "RANK", "WORLD_SIZE")):
        raise UsageError(
            "rl_games needs torchrun's environment (LOCAL_RANK, RANK, WORLD_SIZE): "
            "mgpu-lab train_multigpu --rl_library rl_games ..."
        )
    native = ctx.distributed and ctx.is_cuda  # rl_games starts NCCL on cuda:LOCAL_RANK itself
    manual = ctx.distributed and not ctx.is_cuda

    import torch.distributed as tdist  # torch, rl_games, the tasks: only when training
    from rl_games.common import env_configurations, vecenv
    from rl_games.torch_runner import Runner

    from mgpu_lab.train.tasks import make_env

    if manual and not tdist.is_initialized():
        tdist.init_process_group(backend=ctx.backend, rank=ctx.rank, world_size=ctx.world_size)

    clock = StepClock(HORIZON, cfg.start_iteration, cfg.on_iteration)
    VecEnv, Observer, Agent = _classes(ctx, manual, clock)
    env = make_env(cfg.task, cfg.num_envs, ctx.device, mdist.rank_seed(cfg.seed, ctx), episodes_hook(cfg))
    vecenv.register(VECENV_TYPE, lambda config_name, num_actors, **kwargs: VecEnv(env))
    env_configurations.register(ENV_NAME, {"vecenv_type": VECENV_TYPE, "env_creator": lambda **kwargs: env})

    log_dir = Path(cfg.log_dir) if cfg.log_dir else Path(cfg.log_root) / "rl_games" / cfg.task / "run"
    max_epochs = cfg.max_iterations  # counted from 0 over the whole run; a restored agent continues at its epoch
    params = params_for(
        cfg, ctx, native_multi_gpu=native, max_epochs=max_epochs, train_dir=str(log_dir.parent), experiment=log_dir.name
    )

    observer = Observer()
    runner = Runner(observer)
    agents: list[Any] = []

    def build(**kwargs: Any) -> Any:
        agent = Agent(**kwargs)
        agents.append(agent)
        if cfg.checkpoint:  # what rl_games' Runner does with args["checkpoint"], with a clear error
            try:
                agent.restore(cfg.checkpoint)
            except (RuntimeError, KeyError, ValueError) as exc:
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                raise UsageError(f"--checkpoint {cfg.checkpoint}: does not fit this task ({first[:160]})") from None
        return agent

    runner.algo_factory.register_builder("a2c_continuous", build)
    runner.load({"params": params})
    if cfg.checkpoint and mdist.is_rank0(ctx):
        mdist.log_line(resume_line(cfg.checkpoint, cfg.start_iteration, cfg.restart))
    try:
        runner.run({"train": True, "play": False, "checkpoint": None, "sigma": None})
    finally:
        for agent in agents:
            agent.cleanup()
    agent = agents[0]
    seconds = time.perf_counter() - agent.loop_start if agent.loop_start is not None else None
    trained = agent.trained_epochs
    params_list = [p.detach().clone() for p in agent.model.parameters()]
    ckpt = agent.last_checkpoint if mdist.is_rank0(ctx) else None
    return TrainResult(
        env_steps=clock.env_steps,
        iterations=trained,
        params=params_list,
        checkpoint=ckpt,
        mean_rewards=observer.mean_rewards,
        seconds=seconds,
    )
