"""The launcher with any training script (``--train_script PATH`` or ``-m MODULE``) instead of train.py.

What changes from the built-in trainer (all decided here, torch-free, before any rank starts):

- the forwarded arguments go to the script unchanged: not checked against train.py's parser, no
  ``--rl_library`` and no ``--distributed`` added; ``--device cpu`` is still forwarded (and still makes the
  ranks CPU processes on gloo);
- what depends on train.py's own run layout is refused in one line: ``--continue_run`` and
  ``--checkpoint latest`` (:func:`check`);
- each rank starts through :mod:`mgpu_lab.health.rank_entry` (:func:`rank_command`), which installs the
  supervision (heartbeats from collectives, the stack dump, timing) and runs the script in-process.
"""

from __future__ import annotations

import os

from mgpu_lab.core.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse

#: The rank entry, run by path (see its module text for why not ``-m``).
ENTRY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "health", "rank_entry.py")


class Script:
    """A foreign training script: a file, or a module run as with ``python -m``."""

    def __init__(self, target: str, module: bool, job_root: str) -> None:
        self.target = target  # an absolute path, or a module name
        self.module = module
        self.job_root = job_root

    @property
    def name(self) -> str:
        return self.target if self.module else os.path.basename(self.target)


def from_args(args: argparse.Namespace) -> Script | None:
    """The foreign script the launcher's options name, or None for the built-in train.py (UsageError if bad)."""
    if args.train_script is not None and args.train_module is not None:
        raise UsageError("--train_script and -m/--train_module both name the script: give one")
    if args.train_module is not None:
        if not all(part.isidentifier() for part in args.train_module.split(".")):
            raise UsageError(f"-m {args.train_module}: not a module name (such as my_project.train)")
        return Script(args.train_module, True, args.job_log_root)
    if args.train_script is None:
        return None
    path = os.path.realpath(args.train_script)
    if not os.path.exists(path):  # what else keeps it from starting: mgpu_lab.launch.script_check
        raise UsageError(f"--train_script {args.train_script}: no such file")
    return Script(path, False, args.job_log_root)


def _given(forwarded: list[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in forwarded)


def check(script: Script, forwarded: list[str], checkpoint: str | None) -> None:
    """Refuse what only train.py's own run layout can honour (one line each)."""
    resume = "resume with the script's own options (Isaac Lab's train.py: --resume --load_run RUN [--checkpoint FILE])"
    if _given(forwarded, "--continue_run"):
        raise UsageError(
            f"--continue_run with {script.name}: the launcher knows where train.py keeps its runs, not "
            f"where this script does; {resume}"
        )
    if checkpoint == "latest":
        raise UsageError(
            f"--checkpoint latest with {script.name}: the launcher cannot know where this script keeps "
            f"its checkpoints; give the file, or {resume}"
        )


def rank_command(script: Script, forwarded: list[str], *, jax: bool) -> list[str]:
    """What torchrun starts on each rank: the rank entry around the script (skrl's JAX launcher: the script itself,
    since JAX ranks make no torch.distributed collectives to track)."""
    if jax:
        if script.module:
            raise UsageError("-m with skrl's JAX launcher: give --train_script PATH")
        return [script.target, *forwarded]
    target = ["-m", script.target] if script.module else [script.target]
    return [ENTRY, "--job_root", os.path.abspath(script.job_root), *target, *forwarded]
