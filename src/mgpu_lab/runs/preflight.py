"""Resume refusals, worded once for the trainer and the launcher (which makes them before any rank starts:
:func:`mgpu_lab.train.checks.check_resume`).

Two inputs that every rank would refuse the same way are refused here first, in one line and exit 2, without a
torchrun banner: ``--checkpoint latest`` with no checkpoint of that library and task under ``--log_root``, and a
checkpoint that already holds ``--max_iterations`` iterations (nothing left to train).

``--max_iterations`` is the run's total, counted from iteration 0: from a checkpoint at iteration 60,
``--max_iterations 100`` trains 40 more. Isaac Lab's own training scripts add ``--max_iterations`` to the iteration
they resume from; the refusal says so, for users who come from them.
"""

from __future__ import annotations

from pathlib import Path

from mgpu_lab.core.errors import UsageError


def no_latest(log_root: str, library: str, task: str, ml_framework: str) -> UsageError:
    """``--checkpoint latest`` found nothing under the log root."""
    framework = f" --ml_framework {ml_framework}" if library == "skrl" else ""
    return UsageError(
        f"--checkpoint latest: no {library}{framework} checkpoint of {task} under "
        f"{Path(log_root).resolve() / library / task}"
    )


def nothing_left(given: str, start_iteration: int, max_iterations: int) -> UsageError:
    """A checkpoint already at (or past) ``--max_iterations``; ``given`` names what was given (ends with ':')."""
    return UsageError(
        f"{given} already at iteration {start_iteration} and --max_iterations {max_iterations} counts from "
        f"iteration 0: nothing left to train (--max_iterations is the run's total, not a count added to the "
        f"resumed iteration as in Isaac Lab's own train.py: give --max_iterations {start_iteration + max_iterations} "
        f"for {max_iterations} more)"
    )
