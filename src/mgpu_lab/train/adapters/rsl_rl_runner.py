"""The rsl_rl adapter's subclasses of the library's classes (see :mod:`mgpu_lab.train.adapters.rsl_rl`).

They import rsl_rl (and with it tensordict and torch._dynamo: seconds of start-up) at this module's top, so they
live apart from the adapter's checkpoint functions, which the launcher's checks before any rank call: those
need no RL library. The adapter's ``train`` imports this module.
"""

from __future__ import annotations

from mgpu_lab.health.rank_progress import StepClock
from mgpu_lab.train.adapters import missing_library
from mgpu_lab.train.dist import DistContext, atomic_torch_save, is_rank0, normalized_over_ranks, report_synchronized

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

from mgpu_lab.train.adapters.rsl_rl_checkpoint import check_checkpoint
from mgpu_lab.train.tasks import ToyVecEnv

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
    over all ranks (unless ``--advantage_norm per_rank`` keeps the library's per-rank normalization)."""

    def broadcast_parameters(self) -> None:
        super().broadcast_parameters()
        report_synchronized(_CURRENT_CTX or DistContext())

    def compute_returns(self, obs: TensorDict) -> None:
        super().compute_returns(obs)
        if self.is_multi_gpu and _ALL_RANKS_ADVANTAGES and not self.normalize_advantage_per_mini_batch:
            # the library left (A - mean_r) / std_r of this rank's batch; A itself is returns - values
            storage = self.storage
            storage.advantages = normalized_over_ranks(storage.returns - storage.values)


_CURRENT_CTX: DistContext | None = None
_ALL_RANKS_ADVANTAGES = True


def use_context(ctx: DistContext, all_ranks_advantages: bool = True) -> None:
    """The rank's context and advantage normalization, for :class:`SyncReportingPPO` (rsl_rl builds the
    algorithm itself, so they cannot be passed to it)."""
    global _CURRENT_CTX, _ALL_RANKS_ADVANTAGES
    _CURRENT_CTX = ctx
    _ALL_RANKS_ADVANTAGES = all_ranks_advantages


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
        loaded = check_checkpoint(path)
        if self.alg.load(loaded, load_cfg, strict):
            self.current_learning_iteration = loaded["iter"]
        return loaded.get("infos") or {}
