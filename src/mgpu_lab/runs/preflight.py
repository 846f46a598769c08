"""Resume refusals the launcher makes before any rank starts, worded once for the trainer and the launcher.

Two inputs that every rank would refuse the same way are refused here first, in one line and exit 2, without a
torchrun banner: ``--checkpoint latest`` with no checkpoint of that library and task under ``--log_root``, and a
checkpoint that already holds ``--max_iterations`` iterations (nothing left to train).

``--max_iterations`` is the run's total, counted from iteration 0: from a checkpoint at iteration 60,
``--max_iterations 100`` trains 40 more. Isaac Lab's own training scripts add ``--max_iterations`` to the iteration
they resume from; the refusal says so, for users who come from them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mgpu_lab.core.errors import UsageError


def no_latest(log_root: str, library: str, task: str, ml_framework: str) -> UsageError:
    """``--checkpoint latest`` found nothing under the log root."""
    framework = f" --ml_framework {ml_framework}" if library == "skrl" else ""
    return UsageError(f"--checkpoint latest: no {library}{framework} checkpoint of {task} under "
                      f"{Path(log_root).resolve() / library / task}")


def nothing_left(given: str, start_iteration: int, max_iterations: int) -> UsageError:
    """A checkpoint already at (or past) ``--max_iterations``; ``given`` names what was given (ends with ':')."""
    return UsageError(
        f"{given} already at iteration {start_iteration} and --max_iterations {max_iterations} counts from "
        f"iteration 0: nothing left to train (--max_iterations is the run's total, not a count added to the "
        f"resumed iteration as in Isaac Lab's own train.py: give --max_iterations {start_iteration + max_iterations} "
        f"for {max_iterations} more)")


def check_resume(targs: Any, *, dry_run: bool = False) -> str | None:
    """The launcher, before any rank: refuse ``--checkpoint latest`` without a checkpoint, and a checkpoint with
    nothing left to train. Returns the checkpoint that will be loaded (None: none, or not looked up).

    A dry run does not look for ``latest`` (the job finds it when it runs, as it does ``--continue_run``'s
    folder); a given path's iteration is read either way. Imports torch and the RL library's adapter, which
    knows its checkpoint files; only when a checkpoint is given.
    """
    from mgpu_lab.train.checks import LATEST  # torch-free: a dry run without a checkpoint imports nothing heavy

    if targs.checkpoint is None or targs.continue_run is not None or (dry_run and targs.checkpoint == LATEST):
        return None
    from mgpu_lab.runs import resume
    from mgpu_lab.runs.checkpoint import check_library
    from mgpu_lab.train import adapters
    from mgpu_lab.train.config import TrainConfig
    from mgpu_lab.train.tasks.catalog import TASK_DEFAULTS

    defaults = TASK_DEFAULTS.get(targs.task, {})
    cfg = TrainConfig(rl_library=targs.rl_library, task=targs.task, ml_framework=targs.ml_framework,
                      max_iterations=targs.max_iterations or defaults.get("max_iterations", 100))
    adapter = adapters.load(targs.rl_library)
    if targs.checkpoint == LATEST:
        found = resume.latest_checkpoint(targs.log_root, targs.rl_library, targs.task,
                                         lambda run_dir: adapter.checkpoints(run_dir, cfg))
        if found is None:
            raise no_latest(targs.log_root, targs.rl_library, targs.task, targs.ml_framework)
        path = str(found[1])
        check_library(path, targs.rl_library, targs.ml_framework, targs.task)
    else:
        path = str(Path(targs.checkpoint).resolve())
    start = adapter.checkpoint_iteration(path, cfg)
    if start >= cfg.max_iterations:
        raise nothing_left(f"--checkpoint {path}:", start, cfg.max_iterations)
    return path
