"""``mgpu-lab play``'s input, checked before anything is loaded, and its loading kept off the terminal.

- :func:`check_device_text`: ``cpu``, ``cuda`` or ``cuda:N`` (torch-free; whether CUDA is there is
  :func:`mgpu_lab.train.dist.check_device`'s part, later);
- :func:`check_memory`: ``--num_envs`` and ``--num_episodes`` against the memory of the device they would
  live on, from a lower bound of what they need (:func:`memory_needed`): a count that cannot fit is refused
  with how much it would need and how much there is, instead of dying in an allocation;
- :func:`quiet`: what the libraries print while a checkpoint and its models load (warnings, log lines,
  banners) is held back; it is dropped when the load is refused (the refusal is the one line) or succeeds,
  and shown after a failure nobody foresaw.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys

from mgpu_lab.core import memcg
from mgpu_lab.core.errors import UsageError
from mgpu_lab.train.resources import host_available

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator

_DEVICE = re.compile(r"cpu|cuda|cuda:\d{1,6}")
#: bytes a kept episode costs in play's bookkeeping (a tuple of episode number, env and return)
EPISODE_BYTES = 120
#: the smallest hidden layers any library's policy here has (one forward pass keeps their activations)
MIN_HIDDEN = (32, 32)


def check_device_text(device: str | None) -> None:
    """Refuse a ``--device`` that names no device (``''``, ``gpu``, ``cuda:x`` ...), before anything loads."""
    if device is not None and _DEVICE.fullmatch(device.strip().lower()) is None:
        raise UsageError(f"--device {device!r}: expected cpu, cuda or cuda:N")


def memory_needed(task: str, num_envs: int, num_episodes: int) -> tuple[int, int]:
    """(bytes, bytes per env): a lower bound of what playing needs. Per env: the task's state, observations
    and actions, the bounds of its observation and action spaces (gymnasium keeps them per env), and one
    forward pass of the smallest policy; per kept episode: its record."""
    from mgpu_lab.train.tasks import env_class  # the tasks (gymnasium): only to size a task's envs

    cls = env_class(task)
    obs, act, state = cls.num_obs, cls.num_actions, cls.state_dim
    per_env = (
        4 * (3 * state + 2 * obs + 2 * act)  # state and a step's new state, observations, actions (float32)
        + 8
        + 4  # episode length (int64) and return (float32)
        + 10 * (obs + act)  # gymnasium Box bounds: low and high (float32), bounded below and above (bool)
        + 4 * (obs + sum(MIN_HIDDEN) + act)  # the policy's activations
    )
    return per_env * num_envs + EPISODE_BYTES * num_episodes, per_env


def available_memory(device: str) -> int | None:
    """Bytes free for play's tensors on ``device`` (None when it cannot be told)."""
    if device == "cpu":
        found = [v for v in (host_available(), memcg.left()) if v is not None]
        return min(found) if found else None
    try:
        import torch  # torch: only for a CUDA device's memory

        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return int(free)
    except (RuntimeError, AssertionError, ValueError):
        return None


def _gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def check_memory(task: str, num_envs: int, num_episodes: int, device: str, available: int | None) -> None:
    """Refuse counts whose lower bound of memory exceeds what ``device`` has free (one line, with both)."""
    needed, per_env = memory_needed(task, num_envs, num_episodes)
    if available is None or needed <= available:
        return
    fits = max((available - EPISODE_BYTES * num_episodes) // per_env, 0)
    hint = f"give --num_envs {fits} or fewer" if fits >= 1 else "give fewer --num_episodes"
    raise UsageError(
        f"--num_envs {num_envs} --num_episodes {num_episodes}: playing {task} needs at least {_gb(needed)} on "
        f"{device} ({per_env} bytes per env), and {_gb(available)} is available; {hint}"
    )


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Hold back what is printed while loading (Python's streams and the process's file descriptors 1 and 2, so
    C++ and handlers bound to the original streams too); drop it on success or refusal, show it otherwise."""
    import logging  # logging, tempfile, warnings: only while a library loads quietly
    import tempfile
    import warnings

    sys.stdout.flush()
    sys.stderr.flush()
    with tempfile.TemporaryFile(mode="w+b") as held:
        saved = [os.dup(1), os.dup(2)]
        text = open(held.fileno(), "w", encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
        ok, logging_off = False, logging.root.manager.disable
        logging.disable(logging.CRITICAL)  # the libraries' loggers, whatever stream their handlers hold
        try:
            os.dup2(held.fileno(), 1)
            os.dup2(held.fileno(), 2)
            with contextlib.redirect_stdout(text), contextlib.redirect_stderr(text), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    yield
                    ok = True
                except (UsageError, MemoryError):  # a refusal, or one play turns into a refusal
                    ok = True
                    raise
                finally:
                    text.flush()
        finally:
            logging.disable(logging_off)
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            text.close()
            if not ok:  # a failure nobody foresaw: what the libraries said may explain it
                held.seek(0)
                sys.stderr.write(held.read().decode("utf-8", "replace"))
                sys.stderr.flush()
