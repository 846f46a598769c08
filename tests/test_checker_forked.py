"""Jobs shared with a forked child from the two ends of a list (``skills_check/forked.py``) and the rules phase
that uses it: the results are those of one process, in order, whoever ran each job, and a child that dies,
stalls or sends anything else costs only its help. Also the collector's threshold a check runs under."""

from __future__ import annotations

import gc
import os
import select
import threading
from pathlib import Path
from typing import Any

import pytest
from mgpu_testing.checker import misbehave
from skills_check import checking, cli, forked, runner, session
from skills_check.loader import load_project, prefetch
from skills_check.model import Finding, Loc
from skills_check.rules import load as load_rules
from test_checker_prefetch import _odd_skills, _tree


@pytest.fixture(autouse=True)
def _single_threaded(monkeypatch: pytest.MonkeyPatch) -> None:
    """As in test_checker_prefetch.py: the count the fork guard reads is that of a ``check`` process."""
    monkeypatch.setattr(forked, "threads", lambda: 1)


# as in test_checker_prefetch.py: JAX, where an earlier test in this process imported it, warns at each fork
pytestmark = pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning")


def _finding(n: int) -> list[Finding]:
    return [Finding("SK100", f"job {n}", Loc(f"f{n}.md", n, 1))]


def _who(n: int) -> list[Finding]:
    """The job's finding, saying which process ran it."""
    return [Finding("SK100", f"job {n} in {os.getpid()}", Loc(f"f{n}.md", n, 1))]


def test_the_results_are_in_order_and_the_child_ran_the_last_jobs() -> None:
    """The two meet between jobs 0 and 1 whatever their speeds: this process, on job 0 (claimed before it runs
    it), waits until the child is on job 1, and the child waits there until this process has got that far."""
    parent = os.getpid()
    at_one, go = os.pipe(), os.pipe()

    def run(n: int) -> list[Finding]:
        if n == 1 and os.getpid() != parent:
            os.write(at_one[1], b"1")
            assert select.select([go[0]], [], [], 60)[0]
        if n == 0 and os.getpid() == parent:
            assert select.select([at_one[0]], [], [], 60)[0]
            os.write(go[1], b"1")
        return _who(n)

    try:
        got = forked.from_both_ends(list(range(40)), run)
    finally:
        for fd in (*at_one, *go):
            os.close(fd)
    assert [f[0].message.split(" in ")[0] for f in got] == [f"job {n}" for n in range(40)]
    pids = [int(f[0].message.rsplit(" ", 1)[1]) for f in got]
    assert pids[0] == parent and len(set(pids[1:])) == 1 and pids[1] != parent


@pytest.mark.parametrize("action", ["die", "stall", "unpackable", "garble"])
def test_a_child_that_fails_costs_only_its_help(monkeypatch: pytest.MonkeyPatch, action: str) -> None:
    parent = os.getpid()
    monkeypatch.setattr(forked, "DEADLINE", 1.0)

    def run(n: int) -> Any:
        wrong = misbehave(action) if os.getpid() != parent else None
        return wrong if wrong is not None else _finding(n)

    if action == "garble":
        real = forked.send
        monkeypatch.setattr(
            forked, "send", lambda fd, record: os.write(fd, forked.LENGTH.pack(2) + b"\xff\xfe")
            if isinstance(record, tuple) else real(fd, record)
        )  # fmt: skip
    assert forked.from_both_ends(list(range(12)), run) == [_finding(n) for n in range(12)]


def test_one_process_a_single_job_or_threads_fork_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    real = forked._fork
    monkeypatch.setattr(forked, "_fork", lambda *a: calls.append(a) or real(*a))
    assert forked.from_both_ends([1, 2, 3], _finding, processes=1) == [_finding(n) for n in (1, 2, 3)]
    assert forked.from_both_ends([5], _finding) == [_finding(5)]
    monkeypatch.setattr(forked, "threads", lambda: 2)
    assert forked.from_both_ends([1, 2], _finding) == [_finding(1), _finding(2)]
    assert not calls


def test_the_thread_count_sees_every_thread_of_the_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.undo()  # the real count
    before = forked.threads()
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert forked.threads() == before + 1
        assert not forked.may_fork(2)
    finally:
        stop.set()
        thread.join()


def test_every_child_is_reaped_and_its_frontier_unmapped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    frontiers: list[forked.Frontier] = []
    real = forked.Frontier
    monkeypatch.setattr(forked, "Frontier", lambda *a: frontiers.append(real(*a)) or frontiers[-1])
    monkeypatch.setattr(prefetch, "Frontier", forked.Frontier)
    pids: list[int] = []

    def run(n: int) -> list[Finding]:
        return _who(n)

    for _ in range(3):
        got = forked.from_both_ends(list(range(30)), run)
        pids += [int(f[0].message.rsplit(" ", 1)[1]) for f in got if not f[0].message.endswith(str(os.getpid()))]
    load_project(_tree(tmp_path, skills=prefetch.MIN_SHARED_SKILLS), {}, use_cache=False, jobs=2)  # the worker's
    forked.reap()  # those still exiting (each call reaps the ones that have exited; none waits for the others)
    assert not forked._EXITING
    for pid in set(pids):
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    assert len(frontiers) == 4 and all(f.map.closed for f in frontiers)


def test_the_rules_shared_with_a_child_find_what_one_process_finds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _tree(tmp_path, skills=30, pages=3)
    _odd_skills(root)
    project = load_project(root, {}, use_cache=False)
    rules = load_rules(None)
    alone = runner.run_rules(project, rules)
    assert {f.code for f in alone} >= {"DR301", "IN040", "IN008"}
    forks: list[Any] = []
    real = forked._fork
    monkeypatch.setattr(forked, "_fork", lambda *a: forks.append(real(*a)) or forks[-1])
    assert runner.run_rules(project, rules, jobs=2) == alone  # under SHARED_RULES_CHARS: one process
    assert not forks
    monkeypatch.setattr(runner, "SHARED_RULES_CHARS", 0)
    assert runner.run_rules(project, rules, jobs=2) == alone
    assert len(forks) == 1 and forks[0] is not None


def test_a_check_raises_the_collectors_threshold_while_it_runs_and_restores_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _tree(tmp_path, skills=2, pages=1)
    seen: list[tuple[int, ...]] = []
    real = runner.run_rules
    # the check session runs the rules (session.py holds runner.run_rules by name)
    monkeypatch.setattr(session, "run_rules", lambda *a, **k: seen.append(gc.get_threshold()) or real(*a, **k))
    before = gc.get_threshold()
    assert cli.main(["check", "--root", str(root), "--no-cache"]) == 1  # the guide's --stepz flag
    assert seen == [checking.GC_THRESHOLD]
    assert gc.get_threshold() == before


def test_the_process_reaps_its_helpers_before_it_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """``cli._leave`` ends the check's process at once, but not before it has waited for the helpers it ended
    (none is left to the system, and their time counts in the process's own): here a helper still running when
    the check ends, which exits once this process lets it."""
    hold_r, hold_w = os.pipe()
    started = forked.spawn(lambda fd: (os.close(hold_w), os.read(hold_r, 1)))
    assert started is not None
    pid, fd = started
    forked._EXITING.append(pid)  # ended as far as the check knows, not reaped yet
    os.close(hold_w)
    os.close(hold_r)
    os.close(fd)
    ended: list[int] = []
    monkeypatch.setattr(cli.os, "_exit", lambda status: ended.append(status))
    cli._leave(0)
    assert ended == [0] and not forked._EXITING
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reaped by _leave
