"""The rank-side collective tracker: which collective a rank is in, how many it completed, how long it waited.

A training rank installs one :class:`CollectiveTracker` before its training code runs. It sees both kinds of
collectives a training script makes, without the script knowing:

- the Python-level ones (``torch.distributed.all_reduce`` and every other name in
  :data:`mgpu_lab.health.heartbeat.COLLECTIVES`; rsl_rl, rl_games and skrl call these): each is replaced by a
  wrapper that notes the call and its completion. A call with ``async_op=True`` completes when its work's
  future does;
- DDP's gradient all-reduce, which runs from C++ and never passes through those functions. On the CPU (gloo)
  every ``DistributedDataParallel`` gets, at its first forward, the stock all-reduce communication hook
  (``default_hooks.allreduce_hook``, the same reduction DDP does by default), wrapped so that each bucket's
  all-reduce is tracked as an ``async_op`` call. On CUDA a Python hook would cost a small policy network a
  measurable share of its step, so DDP keeps its stock C++ reduction there and its buckets are seen through the
  process group's own counter (:meth:`CollectiveTracker.progress`: the default group's sequence number, which
  every collective of the group advances, C++ ones included). A script that registers its own hook keeps it,
  tracked like ours.

Progress is :meth:`progress` (collectives completed, or the default group's sequence number where that is
further) and :attr:`inside` (the one the rank is in now, or None): read by the heartbeat writer from another
thread. Wait time: on CPU (gloo) the wall time a collective takes is the time the rank waits for its peers;
overlapping asynchronous ones count once. On CUDA the call returns once NCCL has queued its kernel, so the time
comes from CUDA events recorded around one call in :data:`CUDA_SAMPLE_EVERY` (weighted by that many) on the
current stream and read only once the GPU passed them (``Event.query``): no synchronisation is added, and the
per-call cost is a counter. :meth:`wait_seconds` returns what is known so far.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
import time
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from mgpu_lab.health import heartbeat

_ORIGINAL = "__mgpu_lab_original__"
#: On CUDA, one collective in this many gets a pair of timing events (its span counts for all of them).
CUDA_SAMPLE_EVERY = 8


def _first_tensor(args: tuple, kwargs: dict) -> Any:
    """The tensor a collective works on (its first tensor argument), or None."""
    for value in (*args, *kwargs.values()):
        if hasattr(value, "is_cuda"):
            return value
        if isinstance(value, (list, tuple)) and value and hasattr(value[0], "is_cuda"):
            return value[0]
    return None


class _CudaSpans:
    """CUDA event pairs around collectives, turned into seconds once the GPU has passed both events."""

    def __init__(self) -> None:
        self.pending: list[tuple[Any, Any, int]] = []
        self.lock = threading.Lock()

    def start(self) -> Any:
        import torch  # torch: this module loads without it (the launcher side reads its path)

        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def end(self, start: Any, weight: int = 1) -> None:
        import torch  # torch: as above

        event = torch.cuda.Event(enable_timing=True)
        event.record()
        with self.lock:
            self.pending.append((start, event, weight))

    def harvest(self) -> float:
        """Seconds of every span the GPU has finished (the others stay pending); never blocks."""
        with self.lock:
            pending, self.pending = self.pending, []
        done, seconds = [], 0.0
        for start, end, weight in pending:
            if end.query():
                seconds += weight * start.elapsed_time(end) / 1000.0
            else:
                done.append((start, end, weight))
        with self.lock:
            self.pending[:0] = done
        return seconds


class CollectiveTracker:
    """Wraps this process's torch.distributed collectives and DDP's gradient all-reduce (see the module text)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.completed = 0  # collectives completed (synchronous calls, and async work whose future completed)
        self.inside: str | None = None  # the collective this rank waits in now (None: outside any)
        self._sync_wait = 0.0  # seconds inside synchronous CPU collectives
        self._async_wait = 0.0  # seconds with at least one asynchronous collective in flight (union)
        self._in_flight = 0
        self._in_flight_since = 0.0
        self._label: str | None = None  # what an async call is named in a beat (set by the DDP hook)
        self._lock = threading.Lock()  # async completions arrive on the backend's threads
        self._cuda = _CudaSpans()
        self._cuda_wait = 0.0
        self._cuda_possible = False  # set at install: without CUDA no call looks for a CUDA tensor
        self._cuda_calls = 0  # CUDA collectives seen (one in CUDA_SAMPLE_EVERY is timed)
        self._group: Any = None  # the default process group, once one exists (its sequence number is progress)
        self._restore: list[tuple[Any, str, Any]] = []
        #: optimizer steps this process took (any ``torch.optim`` optimizer): progress without any collective (one rank,
        #: ranks without a process group, a script that reduces nothing)
        self.steps = 0
        self._step_hook: Any = None

    # --- installing ----------------------------------------------------------------------------------
    def install_with_torch(self) -> CollectiveTracker:
        """Install once the process has torch: now if it is loaded, else the moment the script's first ``import
        torch`` finishes (before the script's next statement, so nothing it binds escapes the wrappers). A script
        that never imports torch never loads it here: the rank entry costs it no torch import (about two
        CPU-seconds and a few hundred MB a rank)."""
        if "torch" in sys.modules:
            return self.install()
        sys.meta_path.insert(0, _AfterImport("torch", self.install))
        return self

    @property
    def installed(self) -> bool:
        return self._step_hook is not None

    def install(self) -> CollectiveTracker:
        """Wrap every collective of ``torch.distributed`` and hook DDP (imports torch)."""
        import torch  # torch: only when a rank installs the tracker
        import torch.distributed as tdist
        from torch.nn.parallel import DistributedDataParallel as DDP
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._cuda_possible = torch.cuda.is_available()
        for name in heartbeat.COLLECTIVES:
            original = getattr(tdist, name, None)
            if original is not None and not hasattr(original, _ORIGINAL):
                self._patch(tdist, name, self._wrap(name, original))
        self._patch(DDP, "forward", self._ddp_forward(DDP.forward))
        self._patch(DDP, "register_comm_hook", self._ddp_register(DDP.register_comm_hook))
        self._patch(DDP, "_register_builtin_comm_hook", self._ddp_builtin(DDP._register_builtin_comm_hook))
        self._step_hook = register_optimizer_step_post_hook(self._stepped)
        return self

    def _stepped(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """PyTorch's global hook after every optimizer's ``step``: one more step of progress (a counter, no more)."""
        self.steps += 1

    def _patch(self, owner: Any, name: str, replacement: Any) -> None:
        self._restore.append((owner, name, owner.__dict__.get(name, getattr(owner, name))))
        setattr(owner, name, replacement)

    def uninstall(self) -> None:
        for owner, name, original in reversed(self._restore):
            setattr(owner, name, original)
        self._restore.clear()
        if self._step_hook is not None:
            self._step_hook.remove()
            self._step_hook = None

    # --- python-level collectives --------------------------------------------------------------------
    def _wrap(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        tracker = self

        def collective(*args: Any, **kwargs: Any) -> Any:
            cuda = tracker._cuda_possible and tracker._on_cuda(args, kwargs)
            if kwargs and kwargs.get("async_op"):
                return tracker._call_async(tracker._label or name, original, args, kwargs, cuda)
            tracker.inside = name
            start = tracker._cuda_sample() if cuda else None
            began = tracker.clock()
            try:
                return original(*args, **kwargs)
            finally:
                if start is not None:
                    tracker._cuda.end(start, CUDA_SAMPLE_EVERY)
                elif not cuda:
                    tracker._sync_wait += tracker.clock() - began
                tracker.completed += 1
                tracker.inside = None

        collective.__name__ = name
        collective.__wrapped__ = original  # type: ignore[attr-defined]
        setattr(collective, _ORIGINAL, original)
        return collective

    def _on_cuda(self, args: tuple, kwargs: dict) -> bool:
        tensor = _first_tensor(args, kwargs)
        return tensor is not None and tensor.is_cuda

    def _cuda_sample(self) -> Any:
        """A start event for one CUDA call in CUDA_SAMPLE_EVERY, else None (the others cost a counter)."""
        self._cuda_calls += 1
        return self._cuda.start() if self._cuda_calls % CUDA_SAMPLE_EVERY == 1 else None

    def progress(self) -> int:
        """Collectives this rank took part in so far: those completed through the wrapped functions, or the default
        group's sequence number where that is further (DDP's C++ reduction on CUDA advances only that)."""
        group = self._group
        if group is None:
            if not self.installed:  # no torch in this process (yet): nothing but what the wrappers counted
                return self.completed
            import torch.distributed as tdist  # torch: as above

            if not tdist.is_initialized():
                return self.completed
            group = self._group = tdist.distributed_c10d._get_default_group()
        try:
            return max(self.completed, int(group._get_sequence_number_for_group()))
        except (RuntimeError, AttributeError):  # destroyed, or a backend without the counter
            return self.completed

    def _call_async(self, name: str, original: Callable[..., Any], args: tuple, kwargs: dict, cuda: bool) -> Any:
        start = self._cuda_sample() if cuda else None
        with self._lock:
            if self._in_flight == 0:
                self._in_flight_since = self.clock()
            self._in_flight += 1
            self.inside = name
        work = original(*args, **kwargs)
        if work is None:  # not a member of the group: nothing in flight
            self._finish_async(None, cuda)
            return work
        work.get_future().then(lambda fut: self._finish_async(start, cuda))
        return work

    def _finish_async(self, start: Any, cuda: bool) -> None:
        """A future's callback (any thread): never raises, whatever the future holds. The bookkeeping runs whatever
        the timing did: a failed end event must not leave a false "inside" in every later beat."""
        try:
            if start is not None:  # the callback's stream waits for the collective: the event marks its end
                self._cuda.end(start, CUDA_SAMPLE_EVERY)
        except Exception:  # noqa: BLE001 - a tracker must never break the training it watches; the span is lost
            pass
        finally:
            with self._lock:
                self._in_flight -= 1
                self.completed += 1
                if self._in_flight == 0:
                    if not cuda:
                        self._async_wait += self.clock() - self._in_flight_since
                    self.inside = None

    # --- DDP -------------------------------------------------------------------------------------------
    def _ddp_forward(self, forward: Callable[..., Any]) -> Callable[..., Any]:
        def tracked_forward(module: Any, *args: Any, **kwargs: Any) -> Any:
            if not getattr(module, "_mgpu_lab_hooked", False):
                module._mgpu_lab_hooked = True
                if (
                    getattr(module, "device_type", "cpu") != "cuda"
                ):  # on CUDA the stock C++ reduction stays: progress() sees it
                    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks  # torch: as above

                    module.register_comm_hook(module.process_group, default_hooks.allreduce_hook)
            return forward(module, *args, **kwargs)

        tracked_forward.__wrapped__ = forward  # type: ignore[attr-defined]
        return tracked_forward

    def _ddp_register(self, register: Callable[..., Any]) -> Callable[..., Any]:
        tracker = self

        def tracked_register(module: Any, state: Any, hook: Callable[..., Any]) -> Any:
            module._mgpu_lab_hooked = True  # the script's own hook (or ours): track it, register nothing else

            def labelled(hook_state, bucket):
                tracker._label = heartbeat.DDP_ALLREDUCE
                try:
                    return hook(hook_state, bucket)
                finally:
                    tracker._label = None

            labelled.__name__ = getattr(hook, "__name__", "hook")
            labelled.__qualname__ = getattr(hook, "__qualname__", labelled.__name__)
            return register(module, state, labelled)

        tracked_register.__wrapped__ = register  # type: ignore[attr-defined]
        return tracked_register

    @staticmethod
    def _ddp_builtin(register: Callable[..., Any]) -> Callable[..., Any]:
        def builtin(module: Any, comm_hook_type: Any) -> Any:
            module._mgpu_lab_hooked = True  # a C++ hook the script chose: its buckets go untracked (documented)
            return register(module, comm_hook_type)

        builtin.__wrapped__ = register  # type: ignore[attr-defined]
        return builtin

    # --- reading -----------------------------------------------------------------------------------------
    def wait_seconds(self) -> float:
        """Seconds spent waiting in collectives so far (CUDA spans once the GPU has passed them)."""
        self._cuda_wait += self._cuda.harvest()
        with self._lock:
            return self._sync_wait + self._async_wait + self._cuda_wait


class _AfterImport(importlib.abc.MetaPathFinder):
    """A one-shot import hook: the first import of ``name`` runs as usual, then ``callback`` runs (then, and only then:
    a module that never loads never calls it). It leaves ``sys.meta_path`` on that first import."""

    def __init__(self, name: str, callback: Callable[[], object]) -> None:
        self.name, self.callback = name, callback

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)  # the finders that would have found it
        loader = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run_module = loader.exec_module
        callback = self.callback

        def exec_then_call(module: ModuleType) -> None:
            run_module(module)
            callback()

        loader.exec_module = exec_then_call  # type: ignore[method-assign]  # this spec's own loader object
        return spec
