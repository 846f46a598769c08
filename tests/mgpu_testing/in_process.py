"""Running the trainer inside pytest's process as if it were a process of its own.

A training run changes process-global state that a process of its own would simply lose at exit: the
environment (skrl's ``set_seed`` writes ``PYTHONHASHSEED``), the working folder, signal handlers,
``threading.excepthook`` (:class:`mgpu_lab.train.write_guard.WriteGuard`), torch's settings (rl_games' Runner sets
the thread count, TF32, cuDNN benchmark and print options; skrl's ``set_seed`` the cuDNN flags), the random
generators of torch, NumPy and Python (every library seeds them), and the functions of
``torch.distributed`` that the trainer may wrap (:func:`mgpu_lab.train.dist.store_per_attempt`, the ``skip`` fault).
:class:`ProcessState` saves all of it before a run and puts it back after, so tests stay independent.

What only a process can do is refused up front (:func:`refuse_process_only`): the supervision folder (it
registers a ``faulthandler`` dump on SIGUSR1 with a file that stays open), the stop-in-save switch (SIGSTOP),
and the ``hang`` and ``signal`` faults (they would stop or kill pytest itself). A run that fails a write
(:meth:`WriteGuard.fatal`) or runs out of memory ends its process with ``os._exit``: tests of those paths
start a process.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from mgpu_lab.health.heartbeat import COLLECTIVES

#: torch.distributed attributes the trainer may replace in its process (store_per_attempt, the skip fault)
_DIST_FUNCTIONS = ("init_process_group", *COLLECTIVES)


def refuse_process_only(env: dict[str, str], faults: str = "") -> None:
    """ValueError when ``env`` or ``faults`` ask for something only a process of its own can do (see the module
    docstring); a malformed ``faults`` is parse_faults' ValueError."""
    from mgpu_lab.health.heartbeat import SUPERVISE_DIR_ENV
    from mgpu_lab.health.rank_progress import parse_faults
    from mgpu_testing import SEAMS_ENV

    for name in (SUPERVISE_DIR_ENV, SEAMS_ENV):  # the seams act at a process's start-up
        if env.get(name):
            raise ValueError(f"{name} needs a trainer process of its own, not pytest's")
    if any(f.kind in ("hang", "signal") for f in parse_faults(faults)):
        raise ValueError(f"fault {faults}: hang and signal faults need a trainer process of its own")


def _torch_settings() -> dict[str, Any]:
    import torch

    return {
        "num_threads": torch.get_num_threads(),
        "default_dtype": torch.get_default_dtype(),
        "matmul_precision": torch.get_float32_matmul_precision(),
        "deterministic": (
            torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
        ),
        "cudnn": (torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic, torch.backends.cudnn.allow_tf32),
        "cuda_matmul_tf32": torch.backends.cuda.matmul.allow_tf32,
        "grad_enabled": torch.is_grad_enabled(),
        "print_options": dict(vars(torch._tensor_str.PRINT_OPTS)),
    }


def _set_torch_settings(saved: dict[str, Any]) -> None:
    import torch

    torch.set_num_threads(saved["num_threads"])
    torch.set_default_dtype(saved["default_dtype"])
    torch.set_float32_matmul_precision(saved["matmul_precision"])
    if _torch_settings()["deterministic"] != saved["deterministic"]:  # the call imports torch._dynamo (seconds)
        mode, warn_only = saved["deterministic"]
        torch.use_deterministic_algorithms(mode, warn_only=warn_only)
    (torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic, torch.backends.cudnn.allow_tf32) = saved[
        "cudnn"
    ]
    torch.backends.cuda.matmul.allow_tf32 = saved["cuda_matmul_tf32"]
    torch.set_grad_enabled(saved["grad_enabled"])
    vars(torch._tensor_str.PRINT_OPTS).update(saved["print_options"])


@dataclass
class ProcessState:
    """The process-global state a training run may change, as it was when :meth:`save` ran."""

    environ: dict[str, str]
    cwd: str
    handlers: dict[int, Any]
    thread_hook: Any
    except_hook: Any
    torch: dict[str, Any]
    rng: tuple[Any, Any, Any]
    dist_functions: dict[str, Any]
    threads: set[int] = field(default_factory=set)

    @classmethod
    def save(cls) -> ProcessState:
        import numpy as np
        import torch
        import torch.distributed as tdist

        handlers = {int(s): signal.getsignal(s) for s in signal.valid_signals()}
        return cls(
            environ=dict(os.environ),
            cwd=os.getcwd(),
            handlers=handlers,
            thread_hook=threading.excepthook,
            except_hook=sys.excepthook,
            torch=_torch_settings(),
            rng=(torch.random.get_rng_state(), np.random.get_state(), random.getstate()),
            dist_functions={n: getattr(tdist, n) for n in _DIST_FUNCTIONS if hasattr(tdist, n)},
            threads={t.ident for t in threading.enumerate()},
        )

    def restore(self) -> list[str]:
        """Put everything back; return what the run left behind that cannot be undone here (to fail on)."""
        import numpy as np
        import torch
        import torch.distributed as tdist

        left: list[str] = []
        if tdist.is_available() and tdist.is_initialized():
            tdist.destroy_process_group()
            left.append("a torch.distributed process group")
        os.chdir(self.cwd)
        for number, handler in self.handlers.items():
            if handler is not None and signal.getsignal(number) is not handler:
                signal.signal(number, handler)
        threading.excepthook = self.thread_hook
        sys.excepthook = self.except_hook
        _set_torch_settings(self.torch)
        torch.random.set_rng_state(self.rng[0])
        np.random.set_state(self.rng[1])
        random.setstate(self.rng[2])
        for name, function in self.dist_functions.items():
            setattr(tdist, name, function)
        os.environ.clear()  # last: putting torch's settings back can import parts of torch that set variables
        os.environ.update(self.environ)
        left += [
            f"thread {t.name!r}"
            for t in threading.enumerate()
            if t.ident not in self.threads and t.is_alive() and not t.daemon
        ]
        return left


class HiddenModules:
    """``sys.modules[name] = None`` for each name while active: "not installed" for importlib's finders and for
    ``import``, as in a process without that library; what was there before is put back."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self._saved: dict[str, Any] = {}

    def __enter__(self) -> Self:
        missing = object()
        self._saved = {name: sys.modules.get(name, missing) for name in self.names}
        self._missing = missing
        for name in self.names:
            sys.modules[name] = None  # type: ignore[assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        for name, module in self._saved.items():
            if module is self._missing:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


class LogStreams:
    """While active, logging handlers that write to this process's stdout or stderr write to ``out`` and ``err``
    instead (a library's logger writes to its own process's streams); afterwards every handler that writes to
    ``out`` or ``err`` (including those made during the call, such as a library's on its first import) writes to
    the streams of before again."""

    def __init__(self, out: Any, err: Any) -> None:
        self.out, self.err = out, err
        self._outer = (sys.stdout, sys.stderr)

    @staticmethod
    def _handlers() -> list[Any]:
        import logging

        loggers = [logging.getLogger()] + [
            v for v in logging.Logger.manager.loggerDict.values() if isinstance(v, logging.Logger)
        ]
        return [h for lg in loggers for h in lg.handlers if isinstance(h, logging.StreamHandler)]

    def _swap(self, pairs: dict[int, Any]) -> None:
        for handler in self._handlers():
            target = pairs.get(id(handler.stream))
            if target is not None:
                handler.setStream(target)

    def __enter__(self) -> Self:
        self._outer = (sys.stdout, sys.stderr)
        self._swap({id(self._outer[0]): self.out, id(self._outer[1]): self.err})
        return self

    def __exit__(self, *exc: object) -> None:
        self._swap({id(self.out): self._outer[0], id(self.err): self._outer[1]})


def run_in_process(
    call: Callable[[], Any], env: dict[str, str], *, cwd: Path | str, hide: tuple[str, ...] = ()
) -> tuple[Any, str, str]:
    """``call()`` in this process as if it were a process of its own started in ``cwd`` with environment ``env``
    (the whole environment; ``OMP_NUM_THREADS`` in it sets torch's thread count): (exit status, stdout, stderr).

    ``sys.exit`` inside the call gives its status. Everything :class:`ProcessState` knows, and ``sys.argv``, is put
    back afterwards; what only a process can do is refused first (:func:`refuse_process_only`). Log handlers write
    to the call's streams (:class:`LogStreams`), and warnings are printed to the call's stderr as a fresh process
    would print them (Python's default filters, each once), not collected by pytest, so a one-line check on stderr
    still sees them. ``hide`` names modules that are "not installed" for the call (:class:`HiddenModules`)."""
    import contextlib
    import io
    import warnings

    refuse_process_only(env)
    saved = ProcessState.save()
    argv = list(sys.argv)
    out, err = io.StringIO(), io.StringIO()
    try:
        os.environ.clear()
        os.environ.update(env)
        os.chdir(cwd)
        if env.get("OMP_NUM_THREADS", "").isdigit():
            import torch

            torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
        with (
            LogStreams(out, err),
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
            warnings.catch_warnings(record=True) as caught,
            HiddenModules(hide),
        ):
            warnings.resetwarnings()  # a fresh process's filters: shown once per place, these kinds ignored
            warnings.simplefilter("default")
            for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
                warnings.filterwarnings("ignore", category=category)
            # torch's elastic ``record`` turns faulthandler on for stderr, which a captured stream cannot take
            warnings.filterwarnings("ignore", message="Unable to enable fault handler", category=UserWarning)
            try:
                code = call()
            except SystemExit as exc:  # argparse's own exits (errors, --help), a lost peer, sys.exit
                code = exc.code
            finally:
                for w in caught:
                    err.write(warnings.formatwarning(w.message, w.category, w.filename, w.lineno, w.line))
    finally:
        sys.argv[:] = argv
        left = saved.restore()
    assert not left, f"the in-process call left {', '.join(left)} behind"
    return code, out.getvalue(), err.getvalue()
