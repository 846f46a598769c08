"""The ranks of a restarted job agree on one attempt number, one job key, one run folder and one resume point
(:mod:`mgpu_lab.runs.attempt`), whatever torchrun's per-node restart counts say.

In process: every rank is a thread on one real torch store (``HashStore``, the same interface as torchrun's
agent store), so the protocol's waits are real; a rank that never comes is a rank that is never started, and its
deadline passes on a clock the test moves, never on this machine's speed.
"""

from __future__ import annotations

import itertools
import threading

import pytest
import torch.distributed as tdist

from mgpu_lab.runs import attempt
from mgpu_lab.runs.attempt import Attempt, PeersGone


def start_group(store, keys: dict[int, str | None], timeout_s: float = 60.0) -> dict[int, Attempt]:
    """One start of the worker group: every rank in ``keys`` agrees, each in its own thread."""
    results: dict[int, Attempt | BaseException] = {}

    def one(rank: int) -> None:
        try:
            results[rank] = attempt.agree(store, rank, len(keys), keys[rank], timeout_s=timeout_s)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            results[rank] = exc

    threads = [threading.Thread(target=one, args=(r,)) for r in keys]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for value in results.values():
        if isinstance(value, BaseException):
            raise value
    return results  # type: ignore[return-value]


def test_every_start_of_the_group_gets_the_next_number_on_every_rank():
    store = tdist.HashStore()
    keys = {0: "nodes-none-static-10.0.0.1-29500", 1: "nodes-none-static-10.0.0.1-29500", 2: "x", 3: "y"}
    for number in range(3):
        agreed = start_group(store, keys)
        assert {a.number for a in agreed.values()} == {number}


def test_rank_0s_key_and_published_run_folder_are_everyones():
    """Node 1 computed another key (a host name where node 0 has an address): rank 0's is the job's."""
    store = tdist.HashStore()
    first = start_group(store, {0: "key-of-node-0", 1: "key-of-node-1"})
    assert {a.key for a in first.values()} == {"key-of-node-0"} and {a.run_dir for a in first.values()} == {None}
    attempt.publish_run_dir(store, "/shared/logs/rsl_rl/T/RUN")
    again = start_group(store, {0: "key-of-node-0", 1: "key-of-node-1"})
    assert set(again.values()) == {Attempt(1, "key-of-node-0", "/shared/logs/rsl_rl/T/RUN")}


def test_the_others_take_rank_0s_resume_point():
    store = tdist.HashStore()
    agreed = start_group(store, {0: "k", 1: "k"})[1]
    attempt.publish_resume(store, agreed, "/shared/RUN", "/shared/RUN/model_4.pt")
    assert attempt.resume_of(store, agreed, timeout_s=60) == ("/shared/RUN", "/shared/RUN/model_4.pt")


class SteppingClock:
    """A clock that moves ``step`` seconds on every reading."""

    def __init__(self, step: float) -> None:
        self.readings = itertools.count()
        self.step = step

    def __call__(self) -> float:
        return next(self.readings) * self.step


def test_rank_0_waits_for_a_fresh_token_from_every_rank_and_names_who_never_came():
    """After the first start, rank 1's old token is still in the store; a restart in which rank 1 never comes
    (its node gave up) is never taken for a complete one: rank 0 names rank 1 and the deadline."""
    store = tdist.HashStore()
    start_group(store, {0: "k", 1: "k"})
    with pytest.raises(PeersGone) as caught:
        attempt.agree(store, 0, 2, "k", timeout_s=30, clock=SteppingClock(10))
    assert str(caught.value) == (
        "rank(s) 1 of 2 did not start within 30 s of rank 0 (--rdzv_timeout): their node gave up or is gone"
    )


def test_a_rank_whose_rank_0_never_comes_says_so():
    with pytest.raises(PeersGone, match=r"^rank 0 did not start within 30 s of this rank \(--rdzv_timeout\)"):
        attempt.agree(tdist.HashStore(), 1, 2, "k", timeout_s=30, clock=SteppingClock(10))


@pytest.mark.parametrize(("raw", "expected"), [("", 600.0), ("45", 45.0), ("junk", 600.0), ("-3", 600.0)])
def test_the_wait_comes_from_the_launchers_rendezvous_deadline(raw: str, expected: float):
    assert attempt.wait_s({attempt.WAIT_ENV: raw}) == expected
