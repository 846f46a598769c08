"""One attempt number, one job key and one resume point for every rank of a restarted job, on every node.

torchrun counts restarts per node: ``TORCHELASTIC_RESTART_COUNT`` is ``max_restarts`` less the restarts that
node's agent has left, and an agent that restarts its workers because another node re-joined the rendezvous
(c10d) does not count that restart. So after a rank dies on one node of a two-node job, the nodes disagree on
the count, and anything derived from it (the store namespace of the new process group, "is this a restart?")
disagrees too. With the static rendezvous each node restarts on its own, with nothing to line the nodes up.

Here the ranks of one attempt agree through the store every worker of the job already shares (torchrun's agent
store at ``MASTER_ADDR:MASTER_PORT``, which lives as long as the job): every rank leaves a fresh token
(``arrive/<rank>``); global rank 0 waits until every rank's token is new (not one it answered before), takes the
next attempt number from a counter, and answers each token with the attempt, the job key (rank 0's, the one its
run folder records) and the run folder an earlier attempt's rank 0 published. Then rank 0 publishes the
checkpoint it resumes from (:func:`publish_resume`) and the others take exactly that one (:func:`resume_of`).

Every wait has a deadline (the launcher's ``--rdzv_timeout``): past it, :class:`PeersGone` says that the other
ranks never came back (their node gave up or is gone). Stdlib only; the store is torch's (duck-typed here).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from mgpu_lab.core import records

#: Everything this protocol keeps in the job's store is under this prefix.
PREFIX = "mgpu_lab/agree/"
#: The launcher's rendezvous deadline in seconds, passed to the ranks: how long a rank waits for its peers.
WAIT_ENV = "MGPU_LAB_PEER_WAIT_S"
DEFAULT_WAIT_S = 600.0
_POLL_S = 0.05


class Store(Protocol):
    """The part of ``torch.distributed.Store`` used here."""

    def set(self, key: str, value: str | bytes) -> None: ...
    def get(self, key: str) -> bytes: ...
    def add(self, key: str, amount: int) -> int: ...
    def check(self, keys: list[str]) -> bool: ...


class PeersGone(RuntimeError):
    """The other ranks of the job did not come back within the deadline."""


@dataclass(frozen=True)
class Attempt:
    """What every rank of one attempt agreed on."""

    number: int  # 0: the job's first start; K: its K-th restart (the same on every node)
    key: str | None  # the job key every rank uses to find the run folder (rank 0's)
    run_dir: str | None  # the run folder rank 0 of an earlier attempt published, if any


class UnusableRecord(RuntimeError):
    """A record in the job's store that this rank cannot use: damaged, or of another version (the nodes run
    different versions of mgpu-lab)."""


#: the store's two records, one schema each for the rank that writes and the ranks that read (version 0: written
#: before they carried a version, the same fields)
ANSWER = records.Codec(
    "attempt answer",
    1,
    {"attempt": records.count, "key": records.optional(records.text), "run_dir": records.optional(records.text)},
    lambda attempt, key, run_dir: Attempt(attempt, key, run_dir),
    older={0: None},
    unversioned=True,
)
RESUME = records.Codec(
    "resume point",
    1,
    {"run_dir": records.optional(records.text), "checkpoint": records.optional(records.text)},
    lambda run_dir, checkpoint: (run_dir, checkpoint),
    older={0: None},
    unversioned=True,
)


def _decoded(codec: records.Codec, key: str, raw: bytes):
    """The record under ``key`` in the store; UnusableRecord naming the key and why (the versions, for another)."""
    try:
        return codec.decode(raw)
    except records.OtherVersion as exc:
        raise UnusableRecord(
            f"the job's store holds {key} ({codec.name}) of {exc}; run the same mgpu-lab on every node"
        ) from None
    except records.Unreadable as exc:
        raise UnusableRecord(f"the job's store holds an unusable {key} ({codec.name}): {exc}") from None


def wait_s(environ: dict[str, str] | os._Environ = os.environ) -> float:
    raw = environ.get(WAIT_ENV, "").strip()
    try:
        value = float(raw) if raw else DEFAULT_WAIT_S
    except ValueError:
        value = DEFAULT_WAIT_S
    return value if value > 0 else DEFAULT_WAIT_S


def _wait_for(store: Store, key: str, deadline: float, why: Callable[[], str], clock: Callable[[], float]) -> bytes:
    while not store.check([key]):
        if clock() >= deadline:
            raise PeersGone(why())
        time.sleep(_POLL_S)
    return store.get(key)


def _token() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{os.urandom(4).hex()}"


def agree(
    store: Store,
    rank: int,
    world_size: int,
    key: str | None,
    *,
    timeout_s: float,
    clock: Callable[[], float] = time.monotonic,
) -> Attempt:
    """This rank's :class:`Attempt`, the same on every rank of this start of the worker group (PeersGone after
    ``timeout_s`` without the others)."""
    token = _token()
    deadline = clock() + timeout_s
    store.set(f"{PREFIX}arrive/{rank}", token)
    if rank == 0:
        tokens = _fresh_tokens(store, world_size, deadline, timeout_s, clock)
        number = store.add(f"{PREFIX}attempts", 1) - 1
        if number == 0 or not store.check([f"{PREFIX}key"]):
            store.set(f"{PREFIX}key", key or "")
        agreed_key = store.get(f"{PREFIX}key").decode() or None
        run_dir = store.get(f"{PREFIX}run_dir").decode() if store.check([f"{PREFIX}run_dir"]) else None
        answer = ANSWER.encode({"attempt": number, "key": agreed_key, "run_dir": run_dir})
        for r, t in enumerate(tokens):
            store.set(f"{PREFIX}seen/{r}", t)
            store.set(f"{PREFIX}answer/{t}", answer)
    answer_key = f"{PREFIX}answer/{token}"
    raw = _wait_for(
        store,
        answer_key,
        deadline,
        lambda: (
            f"rank 0 did not start within {timeout_s:g} s of this rank (--rdzv_timeout): its node gave up or is gone"
        ),
        clock,
    )
    return _decoded(ANSWER, answer_key, raw)


def _fresh_tokens(
    store: Store, world_size: int, deadline: float, timeout_s: float, clock: Callable[[], float]
) -> list[str]:
    """Rank 0: every rank's token of this attempt (one that no earlier attempt's rank 0 answered)."""
    tokens: list[str] = []
    for r in range(world_size):
        while True:
            arrive, seen = f"{PREFIX}arrive/{r}", f"{PREFIX}seen/{r}"
            if store.check([arrive]):
                token = store.get(arrive).decode()
                if not store.check([seen]) or store.get(seen).decode() != token:
                    tokens.append(token)
                    break
            if clock() >= deadline:
                missing = ", ".join(str(m) for m in range(r, world_size))
                raise PeersGone(
                    f"rank(s) {missing} of {world_size} did not start within {timeout_s:g} s of rank 0 "
                    "(--rdzv_timeout): their node gave up or is gone"
                )
            time.sleep(_POLL_S)
    return tokens


def publish_run_dir(store: Store, run_dir: str) -> None:
    """Rank 0: the run folder of this job, for the ranks of every later attempt."""
    store.set(f"{PREFIX}run_dir", run_dir)


def publish_resume(store: Store, attempt: Attempt, run_dir: str | None, checkpoint: str | None) -> None:
    """Rank 0: the run folder and the checkpoint this attempt resumes from (None: a new folder, from iteration 0)."""
    store.set(f"{PREFIX}resume/{attempt.number}", RESUME.encode({"run_dir": run_dir, "checkpoint": checkpoint}))


def resume_of(store: Store, attempt: Attempt, *, timeout_s: float) -> tuple[str | None, str | None]:
    """Every rank but 0: (run folder, checkpoint) that rank 0 resumes this attempt from."""
    key = f"{PREFIX}resume/{attempt.number}"
    raw = _wait_for(
        store,
        key,
        time.monotonic() + timeout_s,
        lambda: f"rank 0 did not say where attempt {attempt.number} resumes within {timeout_s:g} s (--rdzv_timeout)",
        time.monotonic,
    )
    return _decoded(RESUME, key, raw)
