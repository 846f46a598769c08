"""The all-ranks episode return: one reward number that every world size measures the same way.

Each library logs its own reward: rsl_rl the mean of rank 0's last 100 finished episodes, rl_games and skrl
rank 0's recent episodes too. That is a window on one rank, and with fewer envs per rank it holds older
episodes (fewer finish per iteration), so a 2-rank run looks worse than a 1-rank run of the same total envs.

Here every rank adds up the returns of the episodes that finished in each training iteration (a sum and a
count, kept on the rank's device, so no extra sync per step); at the start of the next iteration (and once at
the end) the two numbers are summed over every rank and rank 0 logs::

    [INFO] iteration 12: all-ranks episode return 171.35 (mean of 96 episodes over 2 rank(s))

The hook-up: the task env calls :meth:`AllRanksReturns.add` with the returns of the episodes that ended in a
step (``TrainConfig.on_episodes``), the adapter's step clock calls :meth:`AllRanksReturns.on_iteration` at
each iteration's first step (chained before the heartbeats), and the trainer calls :meth:`finish` after
training (skrl JAX's adapter calls it before it leaves JAX's process group). Every rank reaches these points
at the same batched step, so the collective lines up on every rank.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

#: the log line's name for the number: never rank 0's window
NAME = "all-ranks episode return"

Reduce = Callable[[list[float]], list[float]]


def line(iteration: int, total: float, count: int, world_size: int) -> str:
    """The log line for one iteration (``n/a`` when no episode ended on any rank)."""
    if count <= 0:
        return f"[INFO] iteration {iteration}: {NAME} n/a (no episode ended on any of {world_size} rank(s))"
    return (
        f"[INFO] iteration {iteration}: {NAME} {total / count:.2f} (mean of {count} episodes over {world_size} rank(s))"
    )


class AllRanksReturns:
    """Per iteration: this rank's sum and count of finished-episode returns, summed over ranks, logged on rank 0.

    ``reduce([sum, count]) -> [sum, count]`` sums over every rank (the identity on one process); ``log`` is
    called on rank 0 only, with :func:`line`'s text; ``device`` is where the per-step sums stay.
    """

    def __init__(self, reduce: Reduce, log: Callable[[str], None] | None, world_size: int, device: str = "cpu") -> None:
        self.reduce = reduce
        self.log = log
        self.world_size = world_size
        self.device = device
        self.means: list[tuple[int, float]] = []  # (iteration, all-ranks mean) on every rank, NaN: none ended
        self._iteration: int | None = None  # the iteration being counted (None before the first step)
        self._acc: Any = None  # torch tensor [sum, count] on device

    def add(self, returns: Any) -> None:
        """Count the returns (a 1-D tensor) of the episodes that ended in one step on this rank."""
        import torch  # torch: only on a torch rank

        if self._acc is None:
            self._acc = torch.zeros(2, dtype=torch.float64, device=self.device)
        self._acc[0] += returns.detach().to(self._acc.device, torch.float64).sum()
        self._acc[1] += returns.numel()

    def on_iteration(self, iteration: int) -> None:
        """The first step of ``iteration``: the previous iteration is complete on this rank: report it."""
        if self._iteration is not None and iteration != self._iteration:
            self._report(self._iteration)
        self._iteration = iteration

    def finish(self) -> None:
        """After the last step: report the last iteration (once; later calls do nothing)."""
        if self._iteration is not None:
            self._report(self._iteration)
            self._iteration = None

    def _report(self, iteration: int) -> None:
        if self._acc is None:
            local = [0.0, 0.0]
        else:
            local = [float(v) for v in self._acc.tolist()]  # one device sync per iteration
            self._acc = None  # a new one next time (it may be an inference tensor: rsl_rl rolls out in inference mode)
        total, count = self.reduce(local)
        self.means.append((iteration, total / count if count else math.nan))
        if self.log is not None:
            self.log(line(iteration, total, round(count), self.world_size))

    def chain(self, then: Callable[[int], None] | None) -> Callable[[int], None]:
        """An ``on_iteration`` hook that reports first, then calls ``then`` (the heartbeats and fault switch)."""

        def on_iteration(iteration: int) -> None:
            self.on_iteration(iteration)
            if then is not None:
                then(iteration)

        return on_iteration


def torch_reduce(device: str) -> Reduce:
    """Sum ``[sum, count]`` over torch.distributed's default group (gloo or NCCL) on ``device``."""

    def reduce(values: list[float]) -> list[float]:
        import torch  # torch: as above
        import torch.distributed as tdist

        if not (tdist.is_available() and tdist.is_initialized()):
            return values  # one process: nothing to sum
        tensor = torch.tensor(values, dtype=torch.float64, device=device)
        tdist.all_reduce(tensor, op=tdist.ReduceOp.SUM)
        return [float(v) for v in tensor.tolist()]

    return reduce


def jax_reduce(values: list[float]) -> list[float]:
    """Sum ``[sum, count]`` over every JAX process (skrl's JAX launcher; float32: JAX's default width)."""
    import jax  # jax, numpy: only on a JAX rank
    import numpy as np

    if jax.process_count() == 1:
        return values
    from jax.experimental import multihost_utils  # jax: as above

    gathered = np.asarray(multihost_utils.process_allgather(np.asarray(values, dtype=np.float32)))
    return [float(v) for v in gathered.reshape(-1, 2).astype(np.float64).sum(axis=0)]


def for_rank(rank: int, world_size: int, device: str, ml_framework: str, log: Callable[[str], None]) -> AllRanksReturns:
    """The tracker a training rank uses: torch's or JAX's collective, logging on rank 0 only."""
    reduce = jax_reduce if ml_framework == "jax" else torch_reduce(device)
    return AllRanksReturns(reduce, log if rank == 0 else None, world_size, device)


def episodes_hook(cfg: Any) -> Callable[[Any], None] | None:
    """What an adapter passes to ``make_env(..., on_episodes=)``: the run's tracker's ``add``, or None."""
    return cfg.returns.add if getattr(cfg, "returns", None) is not None else None
