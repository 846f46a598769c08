"""``mgpu-lab play``: evaluate a trained policy on one device and print the mean and spread of its return.

``scripts/reinforcement_learning/play.py`` owns the argparse definition and calls :func:`main`. Here: the
checkpoint (a file, a run folder, or ``latest``: the newest checkpoint of the newest run, as in training), read
the safe way (:mod:`mgpu_lab.train.policies`); the built-in task on ``--num_envs`` envs seeded with ``--seed``;
the policy's mean action at every step; and the returns of exactly ``--num_episodes`` episodes.

Which episodes count: every env contributes its first ``ceil(K / N)`` episodes, and the first K of those in
(episode number, env) order are kept. Each env's first episodes do not favour short ones the way "the first K
episodes to finish" would. Every episode ends by the task's time limit, so the loop has a fixed bound.
"""

from __future__ import annotations

import math
import signal
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mgpu_lab.core.errors import UsageError
from mgpu_lab.runs.checkpoint import check_library
from mgpu_lab.runs.preflight import no_latest
from mgpu_lab.train import adapters
from mgpu_lab.train.checks import check_checkpoint_path, check_seed, task_catalog
from mgpu_lab.train.config import TrainConfig
from mgpu_lab.train.dist import check_device, log_line
from mgpu_lab.train.play_input import available_memory, check_device_text, check_memory, quiet

TYPE_CHECKING = False
if TYPE_CHECKING:
    from argparse import Namespace


@dataclass(frozen=True)
class PlayResult:
    """The returns of the episodes played (in the order kept) and the checkpoint's training iteration."""

    returns: tuple[float, ...]
    iteration: int

    def summary(self) -> str:
        """``[INFO] return over K episodes: mean M, std S, min A, max B`` (population std)."""
        values = self.returns
        return (
            f"[INFO] return over {len(values)} episodes: mean {statistics.fmean(values):.2f}, "
            f"std {statistics.pstdev(values):.2f}, min {min(values):.2f}, max {max(values):.2f}"
        )


def resolve_checkpoint(value: str, log_root: str, library: str, task: str, ml_framework: str) -> Path:
    """``--checkpoint``: a file, a run folder (its newest checkpoint) or ``latest`` (as in training)."""
    from mgpu_lab.runs import resume  # the run layer (tempfile): only to find a checkpoint, after the checks

    adapter = adapters.load(library)
    cfg = TrainConfig(rl_library=library, task=task, ml_framework=ml_framework)

    def listing(run_dir: Path) -> list[tuple[int, Path]]:
        return adapter.checkpoints(run_dir, cfg)

    if value == resume.LATEST:
        found = resume.latest_checkpoint(log_root, library, task, listing)
        if found is None:
            raise no_latest(log_root, library, task, ml_framework)
        return found[1]
    path = Path(value)
    if path.is_dir():
        found = resume.newest_checkpoint(path, listing)
        if found is None:
            framework = f" --ml_framework {ml_framework}" if library == "skrl" else ""
            raise UsageError(f"--checkpoint {value}: a folder without a {library}{framework} checkpoint")
        return found[1].resolve()
    check_checkpoint_path(value)
    return path.resolve()


def play_episodes(env: Any, act: Any, num_episodes: int) -> list[float]:
    """Run ``act`` on ``env`` until every env finished its share of ``num_episodes``; the kept returns."""
    import torch  # torch: only once the arguments pass

    quota = math.ceil(num_episodes / env.num_envs)
    done = [0] * env.num_envs
    kept: list[tuple[int, int, float]] = []  # (episode number in its env, env, return)
    obs = env.reset()
    for _ in range(quota * env.max_episode_length):  # every episode ends by the time limit
        with torch.inference_mode():
            obs, _, terminated, truncated, extras = env.step(act(obs))
        ended = (terminated | truncated).nonzero(as_tuple=False).squeeze(-1).tolist()
        for env_id, value in zip(ended, extras["episode_return"].tolist()):
            if done[env_id] < quota:
                kept.append((done[env_id], env_id, float(value)))
                done[env_id] += 1
        if min(done) >= quota:
            break
    kept.sort()
    return [value for _, _, value in kept[:num_episodes]]


def play(args: Namespace) -> PlayResult:
    """Load the policy, play the episodes, return what happened (UsageError for refused input)."""
    import torch  # torch: as above

    device = (
        check_device(args.device) if args.device is not None else ("cuda:0" if torch.cuda.is_available() else "cpu")
    )
    device = "cuda:0" if device == "cuda" else device
    check_memory(args.task, args.num_envs, args.num_episodes, device, available_memory(device))
    path = str(resolve_checkpoint(args.checkpoint, args.log_root, args.rl_library, args.task, args.ml_framework))
    try:
        with quiet():  # the libraries' warnings and log lines while the checkpoint and its models load
            env, act, iteration = _load(args, path, device)
        log_line(
            f"[INFO] play: {args.rl_library} policy from {path} (iteration {iteration}) on {args.task}: "
            f"{args.num_envs} envs, device {device}, seed {args.seed}"
        )
        return PlayResult(tuple(play_episodes(env, act, args.num_episodes)), iteration)
    except (MemoryError, torch.OutOfMemoryError) as exc:  # more than the lower bound check_memory knows of
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise UsageError(
            f"--num_envs {args.num_envs}: out of memory on {device} ({first}); give fewer --num_envs"
        ) from None


def _load(args: Namespace, path: str, device: str) -> tuple[Any, Any, int]:
    """(the task's env, the policy, the checkpoint's iteration); UsageError when the checkpoint does not fit."""
    import torch  # torch, the policies, the tasks (gymnasium): as above

    from mgpu_lab.train import policies
    from mgpu_lab.train.tasks import make_env

    check_library(path, args.rl_library, args.ml_framework, args.task)
    cfg = TrainConfig(
        rl_library=args.rl_library,
        task=args.task,
        num_envs=args.num_envs,
        seed=args.seed,
        device=device,
        ml_framework=args.ml_framework,
        log_root=args.log_root,
    )
    iteration = adapters.load(args.rl_library).checkpoint_iteration(path, cfg)
    torch.manual_seed(args.seed)
    env = make_env(args.task, args.num_envs, device, args.seed)
    return env, policies.load(cfg, env, path), iteration


def check_args(args: Namespace) -> None:
    """The torch-free checks (one line each)."""
    catalog = task_catalog()
    if args.task not in catalog.TASKS:
        raise UsageError(f"--task {args.task}: {catalog.unknown_task_message(args.task)}")
    for flag in ("num_envs", "num_episodes"):
        if getattr(args, flag) < 1:
            raise UsageError(f"--{flag} must be >= 1, got {getattr(args, flag)}")
    if args.ml_framework == "jax" and args.rl_library != "skrl":
        raise UsageError(f"--ml_framework jax is for skrl only, not {args.rl_library}")
    check_seed(args.seed, 1)
    check_device_text(args.device)


def main(args: Namespace) -> int:
    """Check, play, print the summary line; the exit status (2 for refused input, one line on stderr)."""
    try:
        check_args(args)
        result = play(args)
    except UsageError as exc:
        sys.stderr.write(f"mgpu-lab play: error: {exc}\n")
        sys.stderr.flush()
        return 2
    except KeyboardInterrupt:  # Ctrl-C: one line and 128 + SIGINT, as the other commands end
        sys.stderr.write("mgpu-lab play: interrupted\n")
        sys.stderr.flush()
        return 128 + signal.SIGINT
    log_line(result.summary())
    return 0
