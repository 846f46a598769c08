"""skrl adapter: PPO from skrl 2.x (``--ml_framework torch``, or ``jax`` via ``skrl_jax``).

What skrl does on its own, and how this adapter works with it from outside:

- ``import skrl`` builds ``skrl.config``; when ``WORLD_SIZE > 1`` its torch part calls
  ``init_process_group("nccl")`` and ``torch.cuda.set_device(LOCAL_RANK)`` right there, at import.
  On CUDA that is what we want, so the adapter lets skrl do it. On CPU NCCL cannot start ("nccl2
  requires at least one CUDA device"), and a process group made beforehand makes skrl's own call
  fail ("initialize the default process group twice"). So on CPU the adapter imports skrl with
  torchrun's three variables hidden, starts the gloo group itself, and then gives ``skrl.config.torch``
  the real rank, world size and device. From then on skrl's own code paths run unchanged: PPO
  broadcasts the models from rank 0 at construction and all-reduces gradients after each backward,
  ``set_seed`` offsets the seed by rank, and only rank 0 writes TensorBoard data and checkpoints.
- The built-in task is wrapped in a ``skrl.envs.wrappers.torch.Wrapper`` subclass, and the agent is
  a PPO subclass whose checkpoints are written atomically (temp file + ``os.replace``).

This module is the adapter (:class:`mgpu_lab.train.adapters.Adapter`) and the torch backend; the shared loop is
:func:`mgpu_lab.train.adapters.skrl_common.train`, the JAX backend :mod:`mgpu_lab.train.adapters.skrl_jax`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mgpu_lab.runs.checkpoint import LIBRARY_KEYS
from mgpu_lab.runs.resume import numbered
from mgpu_lab.train import dist as mdist
from mgpu_lab.train.adapters import skrl_common
from mgpu_lab.train.adapters.skrl_common import ROLLOUTS, ToyWrapperBase, write_agent_checkpoint
from mgpu_lab.train.adapters.skrl_jax import JaxBackend
from mgpu_lab.train.config import TrainConfig, TrainResult, UsageError
from mgpu_lab.train.dist import DistContext


def _torch_classes(skrl_mod: Any) -> tuple[type, type, type]:
    """Build the wrapper, agent and runner subclasses (after skrl is imported the right way)."""
    from skrl.agents.torch.ppo import PPO  # skrl: only when the library is used
    from skrl.envs.wrappers.torch import Wrapper
    from skrl.utils.runner.torch import Runner

    class ToyEnvWrapper(ToyWrapperBase, Wrapper):
        """skrl's single-agent env interface over a built-in batched task (tensors stay on its device)."""

        def reset(self):
            if self._obs is None:  # vectorized envs reset themselves; skrl calls reset once
                self._obs = self._env.reset()
            return self._obs, {}

        def step(self, actions):
            if self._clock is not None:
                self._clock.tick(self._env.num_envs)
            obs, reward, terminated, truncated, extras = self._env.step(actions)
            self._obs = obs
            infos = dict(extras)
            infos["episode"] = self._stats.add(extras)
            return obs, reward.view(-1, 1), terminated.view(-1, 1), truncated.view(-1, 1), infos

    class AtomicPPO(PPO):
        """skrl's PPO, with checkpoints written through temp file + os.replace."""

        last_checkpoint: str | None = None
        timestep_offset = 0  # a resumed run names its checkpoints by the whole run's timestep

        def write_checkpoint(self, *, timestep: int, timesteps: int) -> None:
            write_agent_checkpoint(self, timestep + self.timestep_offset, ".pt", mdist.atomic_torch_save)

        def load(self, path: str) -> None:
            """skrl's Agent.load, reading the file without running code from it (skrl's own load unpickles it in full)."""
            for name, data in load_torch_checkpoint(path).items():
                module = self.checkpoint_modules.get(name)
                if module is None:
                    continue  # skrl skips (and warns about) modules this agent does not have
                module.load_state_dict(data)
                if hasattr(module, "eval"):
                    module.eval()

    class MgpuRunner(Runner):
        """skrl's Runner, building the atomic-checkpoint PPO for ``agent.class: PPO``."""

        def _component(self, name: str):
            if name.lower() == "ppo":
                return AtomicPPO
            return super()._component(name)

    return ToyEnvWrapper, AtomicPPO, MgpuRunner


def load_torch_checkpoint(path: str) -> dict[str, Any]:
    """Load a skrl torch checkpoint on CPU, or raise a one-line UsageError."""
    return mdist.load_torch_checkpoint(path, *LIBRARY_KEYS["skrl"], "skrl")


class TorchBackend:
    """skrl with ``--ml_framework torch``."""

    framework = "torch"
    suffix = ".pt"

    def check_checkpoint(self, path: str) -> object:
        return load_torch_checkpoint(path)

    def classes(self, skrl_mod: Any) -> tuple[type, type, type]:
        return _torch_classes(skrl_mod)

    def verify(self, skrl_mod: Any, ctx: DistContext) -> None:
        pass  # skrl_common.import_skrl gave skrl's torch config the launcher's ranks

    def params(self, agent: Any) -> list[Any]:
        return [p.detach().clone() for m in (agent.policy, agent.value) for p in m.parameters()]

    def world_steps(self, skrl_mod: Any, env_steps: int) -> int | None:
        return None  # the trainer sums over the torch process group


def backend(cfg: TrainConfig) -> skrl_common.Backend:
    """The backend of ``cfg.ml_framework`` (the JAX one is imported only when asked for)."""
    framework = cfg.ml_framework or "torch"
    if framework == "jax":
        return JaxBackend()
    if framework != "torch":
        raise UsageError(f"--ml_framework {framework!r}: expected torch or jax")
    return TorchBackend()


def checkpoints(run_dir: Path, cfg: TrainConfig) -> list[tuple[int, Path]]:
    """This run's checkpoints as (completed iterations, path): skrl's ``checkpoints/agent_<timestep><suffix>``."""
    return numbered(run_dir, f"checkpoints/agent_*{backend(cfg).suffix}", skrl_common.AGENT_FILE, scale=ROLLOUTS)


def checkpoint_iteration(path: str, cfg: TrainConfig) -> int:
    """Completed iterations of a skrl checkpoint, from its name ``agent_<timestep>`` (other names: 0)."""
    backend(cfg).check_checkpoint(path)
    found = numbered(Path(path).parent, Path(path).name, skrl_common.AGENT_FILE, scale=ROLLOUTS)
    return found[0][0] if found else 0


def train(cfg: TrainConfig, ctx: DistContext) -> TrainResult:
    """Train PPO with skrl on a built-in task; see the module docstring for the distributed set-up."""
    return skrl_common.train(cfg, ctx, backend(cfg))
