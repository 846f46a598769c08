"""A culprit on every node (issue 37 item 2): the verdicts in process, on made-up ranks and one real process.

- a rank the launcher started that never beat is listed ("rank 1 never reported: stopped or stuck before its first
  beat"), found in the process table by its ``LOCAL_RANK`` and the job's supervision folder, never signalled;
- on a job that spans nodes, a node whose every rank is outside any collective names its own ranks;
- a rank whose collective lost a peer on another node is a consequence on every node, and the report says which
  node to look at.

The launcher wiring (a real job, real stopped rank; a real two-node failure) is in tests/test_watchdog.py and
tests/test_multinode_restart_e2e.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mgpu_lab.core import procs
from mgpu_lab.health import failures, heartbeat
from mgpu_lab.health.culprit import RankState, blame
from mgpu_lab.health.hang_report import Report
from mgpu_lab.health.heartbeat import Beat, Failure
from mgpu_lab.health.stack_text import Frame
from mgpu_lab.health.watchdog import Watchdog

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the Linux process table")


def state(rank: int, iteration: int, collective: str | None, *, world: int) -> RankState:
    beat = Beat(rank, rank, world, "node-a", 100 + rank, iteration, "train", 0.0)
    return RankState(rank, beat, collective=collective, where=Frame("train.py", 7, "step"))


# ------------------------------------------------------------------------------- a node of a job on several nodes


def test_a_nodes_only_rank_outside_any_collective_is_the_culprit_when_the_job_spans_nodes():
    culprits, why = blame([state(1, 11, None, world=2)], local_ranks=1)
    assert culprits == [1]
    assert (
        why
        == "outside any collective while the job's 2 ranks span several nodes: the ranks on the other node(s) wait for this node"
    )


def test_every_rank_of_a_node_outside_any_collective_is_named():
    culprits, _ = blame([state(4, 9, None, world=8), state(5, 9, None, world=8)], local_ranks=2)
    assert culprits == [4, 5]


def test_a_node_whose_ranks_all_wait_points_at_the_other_nodes():
    culprits, why = blame([state(0, 12, "all_reduce", world=2)], local_ranks=1)
    assert culprits == [] and why.startswith("every rank of this node waits in all_reduce: look at the other node")


def test_one_node_of_ranks_at_the_same_place_still_has_no_single_culprit():
    """A rank that finished is not watched: it does not make a one-node job look like one on several nodes."""
    culprits, why = blame([state(1, 3, None, world=2)], local_ranks=2)
    assert culprits == [] and why == "every rank is outside any collective at the same iteration"


# ------------------------------------------------------------------------------- a rank that never beat


def test_a_rank_that_never_beat_is_named_as_the_one_the_others_wait_for():
    waiting = RankState(0, Beat(0, 0, 2, "node-a", 100, -1, "start", 0.0), collective="init_process_group")
    silent = RankState(1, None, responding=False, stopped=True, silent_pid=4242)
    culprits, why = blame([waiting, silent], local_ranks=2)
    assert culprits == [1] and why == "the other rank(s) wait in init_process_group for it"
    lines = Report(30.0, [waiting, silent], culprits, why).summary_lines()
    assert (
        "[ERROR] watchdog:   rank 1 never reported: stopped or stuck before its first beat; stopped by a signal: "
        "SIGSTOP, or a debugger holds it (pid 4242)"
    ) in lines
    assert lines[-1] == "[ERROR] watchdog: likely culprit: rank 1 (the other rank(s) wait in init_process_group for it)"
    assert "py-spy dump --pid 4242" in silent.stack_text()


@linux_only
def test_the_watchdog_finds_a_started_rank_without_a_beat_in_the_process_table(tmp_path: Path):
    """A real process below this one (the launcher here), of this job's supervision folder, local rank 1, stopped
    before it beat: listed, stopped, and never signalled (it is still there, still stopped)."""
    env = dict(os.environ, LOCAL_RANK="1", RANK="1", **{heartbeat.SUPERVISE_DIR_ENV: str(tmp_path)})
    other = dict(env, **{heartbeat.SUPERVISE_DIR_ENV: str(tmp_path / "another-job")})
    rank1 = subprocess.Popen(["sleep", "120"], env=env)
    stranger = subprocess.Popen(["sleep", "120"], env=other)  # local rank 1 of another job: not ours
    try:
        os.kill(rank1.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 30  # the stop is delivered when the kernel next schedules it: wait for it
        while not procs.stopped(rank1.pid):
            assert time.monotonic() < deadline, f"pid {rank1.pid} never showed as stopped"
            time.sleep(0.01)
        dog = Watchdog(tmp_path, 10, 600, root=os.getpid(), local_ranks=2)
        beat0 = Beat(0, 0, 2, "node-a", os.getpid(), -1, "start", 0.0)
        found = dog.silent_ranks({0: beat0})
        assert [(st.rank, st.silent_pid, st.stopped) for st in found] == [(1, rank1.pid, True)]
        assert dog.silent_ranks({0: beat0, 1: Beat(1, 1, 2, "node-a", rank1.pid, -1, "start", 0.0)}) == []
        assert Watchdog(tmp_path, 10, 600, root=os.getpid()).silent_ranks({0: beat0}) == []  # count unknown
        assert rank1.poll() is None
    finally:
        for proc in (rank1, stranger):
            proc.kill()
            proc.wait()


# ------------------------------------------------------------------------------- a peer lost on another node


def lost(rank: int, node: str = "node-a") -> Failure:
    detail = (
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Read error [10.0.0.2]:40213: "
        "Connection reset by peer"
    )
    return Failure(rank, rank, node, 300 + rank, heartbeat.EXCEPTION, detail, 5.0)


def test_the_survivor_of_a_peer_lost_on_another_node_is_a_consequence_and_points_there():
    beats = {0: Beat(0, 0, 2, "node-a", 300, 11, "train", 4.0)}
    report = failures.report({0: lost(0)}, {}, beats, {}, set(), 2, 0, local_ranks=1)
    assert report is not None and report.exit_status == 1
    assert report.lines == [
        "[ERROR] launcher: rank 0/2 on node node-a (pid 300): its collective lost a peer (Connection reset by peer) "
        "(a consequence)",
        "[ERROR] launcher: no rank of this node failed first: the first failure is on another node; look at the "
        "report of the node running rank(s) 1 (the lost peer: 10.0.0.2)",
    ]
    assert not any(line.startswith(failures.FIRST_FAILURE) for line in report.lines)


def test_every_rank_of_the_survivor_node_is_a_consequence():
    beats = {r: Beat(r, r - 2, 4, "node-b", 300 + r, 7, "train", 4.0) for r in (2, 3)}
    report = failures.report({2: lost(2, "node-b"), 3: lost(3, "node-b")}, {}, beats, {}, set(), 4, 2, local_ranks=2)
    assert report is not None
    assert [line.endswith("(a consequence)") for line in report.lines[:-1]] == [True, True]
    assert "look at the report of the node running rank(s) 0, 1 (the lost peer: 10.0.0.2)" in report.lines[-1]


def test_on_one_node_a_rank_that_failed_on_its_own_is_still_the_first_failure():
    beats = {r: Beat(r, r, 2, "node-a", 300 + r, 3, "train", 1.0) for r in (0, 1)}
    own = Failure(1, 1, "node-a", 301, heartbeat.EXCEPTION, "ValueError: bad batch", 2.0)
    report = failures.report({0: lost(0), 1: own}, {}, beats, {}, set(), 2, None, local_ranks=2)
    assert report is not None
    assert report.lines[-1].startswith(f"{failures.FIRST_FAILURE} rank 1/2 on node node-a (pid 301): ValueError")


def test_a_rank_that_never_beat_and_no_rank_waits_is_still_named():
    outside = RankState(0, Beat(0, 0, 2, "node-a", 100, -1, "start", 0.0), where=Frame("attempt.py", 80, "_wait_for"))
    silent = RankState(1, None, responding=False, stopped=True, silent_pid=4242)
    assert blame([outside, silent], local_ranks=2) == ([1], "the launcher started it and it never reported")


@linux_only
def test_a_silent_rank_is_asked_for_its_stack_only_when_it_handles_the_signal(tmp_path: Path):
    """One rank set its stack dump up (a Python process with faulthandler on the stack signal), one did not (the
    signal's default action would end it): only the first is marked as one that can answer."""
    env = dict(os.environ, **{heartbeat.SUPERVISE_DIR_ENV: str(tmp_path)})
    code = (
        "import faulthandler, signal, sys, time; faulthandler.register(signal.SIGUSR1); "
        "print('ready', flush=True); time.sleep(120)"
    )
    ready = subprocess.Popen(
        [sys.executable, "-c", code], env=dict(env, LOCAL_RANK="0", RANK="0"), stdout=subprocess.PIPE, text=True
    )
    bare = subprocess.Popen(["sleep", "120"], env=dict(env, LOCAL_RANK="1", RANK="1"))
    try:
        assert ready.stdout is not None and ready.stdout.readline() == "ready\n"
        found = Watchdog(tmp_path, 10, 600, root=os.getpid(), local_ranks=2).silent_ranks({})
        assert [(st.rank, st.silent_pid, st.responding) for st in found] == [
            (0, ready.pid, True),
            (1, bare.pid, False),
        ]
    finally:
        for proc in (ready, bare):
            proc.kill()
            proc.wait()


def test_a_node_whose_ranks_are_failing_already_is_not_a_hang_of_theirs():
    """Node 1's watchdog stopped its stuck rank; node 0's rank lost its peer and is still exiting when node 0's
    watchdog fires: no culprit here, the report points at the other node."""
    failing = state(0, 3, None, world=2)
    failing.failed = "RuntimeError: [pair.cc:534] Read error [127.0.0.1]:36736: Connection closed by peer"
    culprits, why = blame([failing], local_ranks=1)
    assert culprits == [] and why.startswith("every rank of this node failed because its collective lost a peer")
    assert failing.place().startswith("failed already, not exited yet: RuntimeError")
    own = state(0, 3, None, world=2)
    own.failed = "ValueError: bad batch"
    assert blame([own], local_ranks=1) == ([0], "it failed and has not exited")
