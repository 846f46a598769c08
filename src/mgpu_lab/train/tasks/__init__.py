"""Built-in toy tasks: small control problems in pure PyTorch, vectorized over batched tensors.

They are NOT Isaac Sim tasks (hence the ``Toy-`` prefix): they exist so the whole distributed
training pipeline (launch, broadcast, gradient all-reduce, rank-0 logging, checkpoints) can be
rehearsed on any machine, CPU or GPU, without a simulator. Importing this package registers them
with gymnasium::

    import gymnasium, mgpu_lab.train.tasks
    env = gymnasium.make("Toy-Cartpole-v0", num_envs=64, device="cpu", seed=0)

The env classes (and torch) are imported on first use, so listing ``TASKS`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

import gymnasium as gym

from mgpu_lab.train.tasks.catalog import TASK_DEFAULTS, TASKS, unknown_task_message

if TYPE_CHECKING:  # pragma: no cover
    from mgpu_lab.train.tasks.base import ToyVecEnv
    from mgpu_lab.train.tasks.cartpole import ToyCartpoleEnv
    from mgpu_lab.train.tasks.pendulum import ToyPendulumSwingUpEnv

#: task id -> "module:Class" (gymnasium entry point)
ENTRY_POINTS: dict[str, str] = {
    "Toy-Cartpole-v0": "mgpu_lab.train.tasks.cartpole:ToyCartpoleEnv",
    "Toy-Pendulum-SwingUp-v0": "mgpu_lab.train.tasks.pendulum:ToyPendulumSwingUpEnv",
}

_LAZY = {
    "ToyVecEnv": "mgpu_lab.train.tasks.base",
    "ToyCartpoleEnv": "mgpu_lab.train.tasks.cartpole",
    "ToyPendulumSwingUpEnv": "mgpu_lab.train.tasks.pendulum",
}


class UnknownTaskError(KeyError):
    """Raised by make_env for an id that is not a built-in task."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


def _load(entry_point: str) -> Any:
    module, _, name = entry_point.partition(":")
    return getattr(importlib.import_module(module), name)


def env_class(task_id: str) -> type[ToyVecEnv]:
    """The env class of a built-in task (its ``num_obs``, ``num_actions``, ...), without making an env."""
    try:
        return _load(ENTRY_POINTS[task_id])
    except KeyError:
        raise UnknownTaskError(unknown_task_message(task_id)) from None


def make_env(task_id: str, num_envs: int, device: str = "cpu", seed: int = 0, on_episodes: Any = None) -> ToyVecEnv:
    """Create ``num_envs`` copies of a built-in task as one batched env on ``device``; ``on_episodes`` (if given)
    is called after each step with the returns of the episodes that ended in it (a non-empty 1-D tensor)."""
    try:
        entry = ENTRY_POINTS[task_id]
    except KeyError:
        raise UnknownTaskError(unknown_task_message(task_id)) from None
    env = _load(entry)(num_envs=num_envs, device=device, seed=seed)
    env.on_episodes = on_episodes
    return env


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _register() -> None:
    for task_id, entry in ENTRY_POINTS.items():
        if task_id not in gym.registry:
            gym.register(
                id=task_id,
                entry_point=entry,
                disable_env_checker=True,  # batched tensors, not the single-env numpy API the checker expects
                order_enforce=False,
            )


_register()

__all__ = [
    "ENTRY_POINTS",
    "TASKS",
    "TASK_DEFAULTS",
    "ToyCartpoleEnv",
    "ToyPendulumSwingUpEnv",
    "ToyVecEnv",
    "UnknownTaskError",
    "env_class",
    "make_env",
    "unknown_task_message",
]
