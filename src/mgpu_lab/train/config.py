"""Plain data passed between ``train.py`` and the library adapters (no torch import here)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mgpu_lab.core.errors import UsageError  # noqa: F401 - re-exported: the adapters raise it from here


@dataclass
class TrainConfig:
    """What the user asked for, after parsing (the same for every adapter).

    ``num_envs`` is per rank. ``log_dir`` is the run folder (set on every rank, but only rank 0
    writes to it). ``checkpoint`` is a path to resume from, already checked to exist.
    """

    rl_library: str = "rsl_rl"
    task: str = "Toy-Cartpole-v0"
    num_envs: int = 64
    max_iterations: int = 50
    seed: int = 42
    device: str = "cpu"
    distributed: bool = False
    ml_framework: str = "torch"
    # rsl_rl: normalize advantages over every rank together ("all_ranks") or each rank alone ("per_rank", as shipped)
    advantage_norm: str = "all_ranks"
    checkpoint: str | None = None
    run_name: str | None = None
    save_interval: int | None = None  # checkpoint every N iterations; None: the adapter's default
    log_root: str = "logs"
    log_dir: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    # resuming: the completed iterations the checkpoint holds (the run trains max_iterations - start_iteration
    # more), and torchrun's restart count (0: first attempt)
    start_iteration: int = 0
    restart: int = 0
    # called by the adapter's StepClock at the first env step of each iteration (heartbeats, fault switch)
    on_iteration: Callable[[int], None] | None = None
    # the all-ranks episode return (mgpu_lab.train.returns.AllRanksReturns): the task env feeds it finished
    # episodes (make_env's on_episodes=returns.add); None: not tracked
    returns: Any = None

    @property
    def remaining_iterations(self) -> int:
        return self.max_iterations - self.start_iteration

    @property
    def log_path(self) -> Path:
        return Path(self.log_dir)


@dataclass
class TrainResult:
    """What an adapter reports back.

    ``env_steps`` counts environment transitions on this rank (num_envs x steps); ``params`` are the
    policy tensors the digest is computed over; ``checkpoint`` is the last checkpoint rank 0 wrote
    (``None`` on other ranks or when none was written); ``mean_rewards`` is the mean return of the
    episodes that finished in each iteration (optional, for tests and logs).
    """

    env_steps: int
    iterations: int
    params: list[Any]
    checkpoint: str | None = None
    mean_rewards: list[float] = field(default_factory=list)
    seconds: float | None = None  # time spent in the training loop itself; None: train.py times train()
    world_env_steps: int | None = None  # every rank's env_steps summed, when the adapter did it (skrl JAX)
