"""The launcher with any training script (``--train_script PATH`` or ``-m MODULE``) instead of train.py.

What changes from the built-in trainer (all decided here, torch-free, before any rank starts):

- the forwarded arguments go to the script unchanged: not checked against train.py's parser, no
  ``--rl_library`` and no ``--distributed`` added; ``--device cpu`` is still forwarded (and still makes the
  ranks CPU processes on gloo);
- what depends on train.py's own run layout is refused in one line: ``--continue_run`` and
  ``--checkpoint latest`` (:func:`check`);
- each rank starts through :mod:`mgpu_lab.health.rank_entry` (:func:`rank_command`), which installs the
  supervision (heartbeats from collectives, the stack dump, timing) and runs the script in-process.

Isaac Lab's own trainer (Isaac Lab 3.0's per-rank worker ``-m isaaclab_rl.entrypoints.multigpu``, or any script
inside its packages: :func:`is_isaaclab`) gets the launcher's ``--rl_library`` when the command line gives it (it is
that trainer's own option), and what it would refuse or silently do wrong is refused here in one line, before any
rank starts (:func:`check_isaaclab`).
"""

from __future__ import annotations

import os
import re

from mgpu_lab.core.errors import UsageError
from mgpu_lab.core.names import LATEST

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
    if checkpoint == LATEST:
        raise UsageError(
            f"--checkpoint latest with {script.name}: the launcher cannot know where this script keeps "
            f"its checkpoints; give the file, or {resume}"
        )


#: The real Isaac Lab's packages (3.0: ``isaaclab``, ``isaaclab_rl``, ``isaaclab_tasks``, ... in one wheel).
_ISAACLAB_PACKAGE = re.compile(r"isaaclab(_\w+)?")


def is_isaaclab(script: Script | None) -> bool:
    """True for Isaac Lab's trainer: a module of an ``isaaclab*`` package, or a script inside one (a folder of that
    name holding ``__init__.py``, as in site-packages or Isaac Lab's source tree); False for none (train.py)."""
    if script is None:
        return False
    if script.module:
        return bool(_ISAACLAB_PACKAGE.fullmatch(script.target.split(".")[0]))
    folder = os.path.dirname(script.target)
    while os.path.dirname(folder) != folder:
        name = os.path.basename(folder)
        if _ISAACLAB_PACKAGE.fullmatch(name) and os.path.isfile(os.path.join(folder, "__init__.py")):
            return True
        folder = os.path.dirname(folder)
    return False


def _override(forwarded: list[str], key: str) -> bool:
    """True when a Hydra-style ``key=value`` override is among the script's arguments."""
    return any(a.startswith(key + "=") for a in forwarded)


def check_isaaclab(
    script: Script, forwarded: list[str], *, ranks: int, cpu_ranks: bool, rl_library: str | None
) -> None:
    """Refuse, in one line each, what Isaac Lab's trainer would refuse on every rank or get silently wrong.

    ``ranks``: the job's world size (every node); ``cpu_ranks``: the ranks are CPU processes (``--device cpu`` or
    ``--num_gpus cpu``); ``rl_library``: the ``--rl_library`` the command line gave, or None.
    """
    if cpu_ranks and ranks > 1:
        raise UsageError(
            f"{ranks} CPU ranks with Isaac Lab's trainer ({script.name}): Isaac Lab refuses distributed training "
            "on the CPU (each rank takes cuda:LOCAL_RANK and rsl_rl joins NCCL); run one CPU rank (--num_gpus 1 "
            "--device cpu) or one rank per CUDA GPU (--num_gpus N without --device cpu)"
        )
    if not cpu_ranks and ranks > 1 and not _given(forwarded, "--distributed"):
        raise UsageError(
            f"{ranks} ranks of Isaac Lab's trainer ({script.name}) without --distributed: every rank would simulate "
            "on cuda:0 (Isaac Lab gives each rank cuda:LOCAL_RANK only with --distributed); add --distributed "
            "(Isaac Lab's own train_multigpu adds it to every rank)"
        )
    if cpu_ranks and rl_library == "rsl_rl" and not _override(forwarded, "agent.device"):
        raise UsageError(
            f"--device cpu with Isaac Lab's trainer ({script.name}): the simulation runs on the CPU but rsl_rl's "
            "agent stays on cuda:0 (its default); add agent.device=cpu (or agent.device=cuda:0 to keep the agent "
            "on a GPU)"
        )


def rank_command(
    script: Script, forwarded: list[str], *, jax: bool, rl_library: str | None = None, run_timestamp: str | None = None
) -> list[str]:
    """What torchrun starts on each rank: the rank entry around the script (skrl's JAX launcher: the script itself,
    since JAX ranks make no torch.distributed collectives to track). ``rl_library`` (the ``--rl_library`` the
    command line gave) goes first to Isaac Lab's trainer, whose own option it is; never to another script.
    ``run_timestamp`` (a job of several ranks) goes last to Isaac Lab's trainer unless the command line gave one,
    as Isaac Lab's own launcher does: each rank names its run folder after it, so all of them share one."""
    if is_isaaclab(script):
        if rl_library is not None:
            forwarded = ["--rl_library", rl_library, *forwarded]
        if run_timestamp is not None and not _given(forwarded, "--run_timestamp"):
            forwarded = [*forwarded, f"--run_timestamp={run_timestamp}"]
    if jax:
        if script.module:
            raise UsageError("-m with skrl's JAX launcher: give --train_script PATH")
        return [script.target, *forwarded]
    target = ["-m", script.target] if script.module else [script.target]
    return [ENTRY, "--job_root", os.path.abspath(script.job_root), *target, *forwarded]
