"""Adapters from the trainer (:mod:`mgpu_lab.train.trainer`) to the real RL libraries.

Each adapter module satisfies :class:`Adapter` (declared once, here) and is imported lazily
(``load(name)``), so a missing library only matters when it is asked for.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from mgpu_lab.train.config import UsageError

if TYPE_CHECKING:  # pragma: no cover
    from pathlib import Path

    from mgpu_lab.train.config import TrainConfig, TrainResult
    from mgpu_lab.train.dist import DistContext


@runtime_checkable
class Adapter(Protocol):
    """What the trainer relies on from an adapter module (every module in :data:`LIBRARIES`)."""

    def train(self, cfg: TrainConfig, ctx: DistContext) -> TrainResult:
        """Train ``cfg.task`` on this rank; raise UsageError for input the library refuses."""

    def checkpoints(self, run_dir: Path, cfg: TrainConfig) -> list[tuple[int, Path]]:
        """The run's checkpoints as (completed iterations, path), for resuming."""

    def checkpoint_iteration(self, path: str, cfg: TrainConfig) -> int:
        """Completed iterations held by a checkpoint (its format already checked)."""


#: --rl_library value -> adapter module (imported on demand)
LIBRARIES: dict[str, str] = {
    "rsl_rl": "mgpu_lab.train.adapters.rsl_rl",
    "rl_games": "mgpu_lab.train.adapters.rl_games",
    "skrl": "mgpu_lab.train.adapters.skrl",
}

#: --rl_library value -> (top-level module the library installs, pyproject extra that installs it)
REQUIREMENTS: dict[str, tuple[str, str]] = {
    "rsl_rl": ("rsl_rl", "rsl-rl"),
    "rl_games": ("rl_games", "rl-games"),
    "skrl": ("skrl", "skrl"),
}


def missing_library(name: str, module: str | None = None, extra: str | None = None) -> UsageError:
    """The UsageError for a library that is not installed, naming the extra to install."""
    mod, ext = REQUIREMENTS.get(name, (name, name))
    detail = f" (module {module!r} not found)" if module and module != mod else ""
    return UsageError(f"{name} is not installed{detail}: uv sync --extra {extra or ext}")


def require(name: str, module: str | None = None, extra: str | None = None) -> None:
    """Raise the missing-library UsageError unless ``module`` (default: the library's) imports."""
    mod, _ = REQUIREMENTS.get(name, (name, name))
    target = module or mod
    if importlib.util.find_spec(target.split(".")[0]) is None:
        raise missing_library(name, target, extra)


def load(name: str) -> Adapter:
    """Import the adapter module for ``name`` (UsageError if unknown or its library is missing)."""
    if name not in LIBRARIES:
        raise UsageError(f"unknown --rl_library {name!r}; choose from {', '.join(LIBRARIES)}")
    require(name)
    try:
        module = importlib.import_module(LIBRARIES[name])
    except ModuleNotFoundError as exc:
        top = (exc.name or "").split(".")[0]
        if top and top != "mgpu_lab":
            raise missing_library(name, exc.name) from None
        raise
    if not isinstance(module, Adapter):  # a programming error, not bad input
        raise TypeError(f"{LIBRARIES[name]} does not satisfy mgpu_lab.train.adapters.Adapter")
    return module
