"""skrl adapter, JAX side (``--rl_library skrl --ml_framework jax``).

skrl's JAX config reads ``JAX_LOCAL_RANK``/``JAX_RANK``/``JAX_WORLD_SIZE``/``JAX_COORDINATOR_ADDR``/
``JAX_COORDINATOR_PORT`` (set by ``python -m skrl.utils.distributed.jax``) and calls
``jax.distributed.initialize`` at import time. On CPU, jax 0.10 runs cross-process collectives over
gloo by default, so skrl's own broadcast (``multihost_utils.broadcast_one_to_all``) and gradient
all-reduce (``pmap``/``psum``) work unchanged across CPU processes. The adapter only keeps
torchrun's variables away from skrl's torch config during the import (see ``skrl.import_skrl``),
wraps the torch task for JAX (arrays cross through NumPy), and writes checkpoints atomically.

Checkpoints are MessagePack (``agent_<timestep>.msgpack``, see :mod:`mgpu_lab.runs.checkpoint`), not
skrl's default pickles: a pickle can run code when loaded, MessagePack cannot. Each module is still
stored as skrl stores it (``flax.serialization.to_bytes``), so the contents are skrl's own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mgpu_lab.health.rank_progress import StepClock
from mgpu_lab.runs import checkpoint as mcheckpoint
from mgpu_lab.train import dist as mdist
from mgpu_lab.train.adapters.skrl_common import EpisodeStats, ToyWrapperBase, write_agent_checkpoint
from mgpu_lab.train.config import UsageError
from mgpu_lab.train.dist import DistContext

#: file name suffix of this adapter's checkpoints (``checkpoints/agent_<timestep><suffix>``)
CHECKPOINT_SUFFIX = mcheckpoint.JAX_SUFFIX


def _jax_classes() -> tuple[type, type, type]:
    import flax  # jax, flax, skrl's JAX side: only for --ml_framework jax
    import jax.experimental.multihost_utils  # noqa: F401 - skrl's broadcast uses it as an attribute, unimported
    import jax.numpy as jnp
    import numpy as np
    import torch
    from skrl.agents.jax.ppo import PPO
    from skrl.envs.wrappers.jax import Wrapper
    from skrl.utils.runner.jax import Runner

    def to_jax(t: torch.Tensor) -> Any:
        return jnp.asarray(t.detach().contiguous().cpu().numpy())

    class ToyEnvWrapperJax(ToyWrapperBase, Wrapper):
        """skrl's JAX env interface over a built-in torch task (torch -> NumPy -> JAX each step)."""

        def __init__(self, env: Any, stats: EpisodeStats, clock: StepClock | None = None) -> None:
            super().__init__(env, stats, clock)
            self._torch_device = env.device

        def reset(self):
            if self._obs is None:
                self._obs = to_jax(self._env.reset())
            return self._obs, {}

        def step(self, actions):
            if self._clock is not None:
                self._clock.tick(self._env.num_envs)
            act = torch.as_tensor(np.array(actions), device=self._torch_device)
            obs, reward, terminated, truncated, extras = self._env.step(act)
            self._obs = to_jax(obs)
            infos = {"episode": {k: float(v) for k, v in self._stats.add(extras).items()}}
            return (
                self._obs,
                to_jax(reward.view(-1, 1)),
                to_jax(terminated.view(-1, 1).to(torch.int8)),
                to_jax(truncated.view(-1, 1).to(torch.int8)),
                infos,
            )

    def save_msgpack(modules: dict[str, bytes], path: Path) -> None:
        data = mcheckpoint.encode_msgpack(modules)
        mdist.atomic_write(path, lambda f: f.write(data))

    class AtomicPPOJax(PPO):
        """skrl's JAX PPO, with checkpoints written through temp file + os.replace."""

        last_checkpoint: str | None = None
        timestep_offset = 0  # a resumed run names its checkpoints by the whole run's timestep

        def write_checkpoint(self, *, timestep: int, timesteps: int) -> None:
            write_agent_checkpoint(
                self, timestep + self.timestep_offset, CHECKPOINT_SUFFIX, save_msgpack, flax.serialization.to_bytes
            )

        def load(self, path: str) -> None:
            """skrl's JAX Agent.load (model parameters), reading MessagePack instead of unpickling."""
            for name, data in check_checkpoint(path).items():
                module = self.checkpoint_modules.get(name)
                if module is not None and hasattr(module, "state_dict"):
                    params = flax.serialization.from_bytes(module.state_dict.params, data)
                    module.state_dict = module.state_dict.replace(params=params)

    class MgpuRunnerJax(Runner):
        def _component(self, name: str):
            if name.lower() == "ppo":
                return AtomicPPOJax
            return super()._component(name)

    return ToyEnvWrapperJax, AtomicPPOJax, MgpuRunnerJax


def check_checkpoint(path: str) -> dict[str, bytes]:
    """The modules of a skrl JAX PPO checkpoint (:func:`mgpu_lab.runs.checkpoint.read_skrl_jax`)."""
    return mcheckpoint.read_skrl_jax(path)


def policy_tensors(model: Any) -> list[Any]:
    """A JAX model's parameters as CPU torch tensors, in pytree order (for the digest)."""
    import jax  # jax, numpy, torch: only for --ml_framework jax
    import numpy as np
    import torch

    return [torch.from_numpy(np.array(leaf)) for leaf in jax.tree.leaves(model.state_dict.params)]


class JaxBackend:
    """skrl with ``--ml_framework jax`` (launched by skrl's JAX launcher)."""

    framework = "jax"
    suffix = CHECKPOINT_SUFFIX

    def check_checkpoint(self, path: str) -> object:
        return check_checkpoint(path)

    def classes(self, skrl_mod: Any) -> tuple[type, type, type]:
        return _jax_classes()

    def verify(self, skrl_mod: Any, ctx: DistContext) -> None:
        conf = skrl_mod.config.jax
        if ctx.distributed and (conf.world_size != ctx.world_size or conf.rank != ctx.rank):
            raise UsageError(
                f"skrl's JAX config sees rank {conf.rank}/{conf.world_size}, the launcher "
                f"{ctx.rank}/{ctx.world_size}; launch with mgpu-lab train_multigpu --ml_framework jax"
            )

    def params(self, agent: Any) -> list[Any]:
        return policy_tensors(agent.policy) + policy_tensors(agent.value)

    def world_steps(self, skrl_mod: Any, env_steps: int) -> int | None:
        if not skrl_mod.config.jax.is_distributed:
            return env_steps
        import jax  # jax: as above

        total = sum_over_processes(env_steps)  # no torch process group here: JAX's own collective
        jax.distributed.shutdown()  # every process leaves together (a barrier), so none is left waiting
        return total


def sum_over_processes(value: int) -> int:
    """Sum a non-negative integer over every JAX process (int32 pieces: JAX has no int64 without x64 mode)."""
    import numpy as np  # numpy, jax: as above
    from jax.experimental import multihost_utils

    base = 1 << 30
    pieces = np.array([value // base, value % base], dtype=np.int32)
    gathered = np.asarray(multihost_utils.process_allgather(pieces)).reshape(-1, 2).astype(np.int64)
    return int(gathered[:, 0].sum()) * base + int(gathered[:, 1].sum())
