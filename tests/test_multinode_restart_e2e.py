"""A rank killed on one node of a two-node job: every node restarts and resumes from the same checkpoint in the
same run folder (issue 37 item 1), with the c10d rendezvous and with the static one.

The session's shared restart job of each form (:mod:`mgpu_testing.restarts`: two real launchers on this machine, one
CPU rank each, rank 1 SIGKILLed at iteration 4 of 6 on the first attempt, ``model_2.pt`` saved before it, so the
resume point is iteration 3), which each test here reads (tests/test_skill_commands.py reads it too).

Then the bound: a node whose peers gave up (node 1 has no restart left) stops by itself once ``--rdzv_timeout``
passed after its restart, with exit 4 and a line that names the bound, instead of waiting for its watchdog.
And the verdicts of issue 37 item 2 that need two nodes: without restarts, the survivor's report points at the
other node; in a two-node hang, the stuck node names its own rank.
"""

from __future__ import annotations

import os
import re
import signal

import pytest
from mgpu_testing import PYTHON, free_port, kill_group
from mgpu_testing.launcher import beats, finish, process_tree, start, supervise_dirs, wait_until
from mgpu_testing.probe import assert_nothing_left, tagged_env
from mgpu_testing.restarts import FORMS, KILL_AT, RESUMED_AT, TRAIN, node_flags, two_nodes
from mgpu_testing.training import DIGEST_ANYWHERE, LAUNCHER, TASK

from mgpu_lab.health.failures import FIRST_FAILURE
from mgpu_lab.launch import ports

pytestmark = pytest.mark.e2e

RESUMED = re.compile(r"\[INFO\] restart 1: resumed from (\S+) at iteration (\d+)$", re.M)
AGREED = re.compile(r"\[INFO\] rank (\d)/2: restart (\d+) of the job \(torchrun's count on this node: (\d+)\)$", re.M)
LOGGING_TO = re.compile(r"^\[INFO\] logging to (\S+)$", re.M)


@pytest.fixture(scope="module", params=FORMS)
def restarted(request, restarted_run):
    run = restarted_run(request.param)
    return run.form, run.logs, run.procs


def everything(procs) -> str:
    return "\n".join(p.stdout + p.stderr for p in procs)


@pytest.mark.timeout(900)
def test_both_nodes_restart_and_finish(restarted):
    _, _, procs = restarted
    for p in procs:
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        assert "Traceback" not in p.stderr, p.stderr[-3000:]
    out = everything(procs)
    assert f"[FAULT] rank 1: sending itself SIGKILL at iteration {KILL_AT}" in out


@pytest.mark.timeout(900)
def test_every_node_resumes_from_the_same_checkpoint_in_the_same_folder(restarted):
    form, logs, procs = restarted
    out = everything(procs)
    folders = list((logs / "rsl_rl" / TASK).iterdir())
    assert len(folders) == 1, f"{form}: a restart must reuse the job's run folder: {folders}"
    assert set(LOGGING_TO.findall(out)) == {str(folders[0])}, out[-4000:]
    resumed = RESUMED.findall(out)
    assert resumed == [(str(folders[0] / f"model_{RESUMED_AT - 1}.pt"), str(RESUMED_AT))], out[-4000:]
    key = (folders[0] / "job_key").read_text(encoding="utf-8")
    expected = r"nodes-t37-c10d-127\.0\.0\.1-\d+" if form == "c10d" else r"nodes-none-static-127\.0\.0\.1-\d+"
    assert re.fullmatch(expected, key), key  # from the rendezvous both nodes were given


@pytest.mark.timeout(900)
def test_the_restart_counts_agree_and_the_weights_end_equal(restarted):
    """Every rank logs the one restart count; with c10d torchrun's own count differs between the nodes (the node
    that only re-joined the rendezvous counts no restart), which is why the ranks agree on their own."""
    _, _, procs = restarted
    agreed = {rank: restart for p in procs for rank, restart, _ in AGREED.findall(p.stdout)}
    assert agreed == {"0": "1", "1": "1"}, [p.stdout[-2000:] for p in procs]
    digests = {rank: d for p in procs for rank, _, d in DIGEST_ANYWHERE.findall(p.stdout)}
    assert set(digests) == {"0", "1"} and digests["0"] == digests["1"], digests


@pytest.mark.timeout(900)
def test_a_node_whose_peers_gave_up_stops_within_the_rendezvous_deadline(tmp_path):
    """Node 1 has no restart left: its launcher reports the killed rank and exits 1; node 0 restarts, its rank
    waits --rdzv_timeout for rank 1, and its launcher stops with exit 4, naming the bound."""
    procs = two_nodes(
        "static", tmp_path / "logs", (3, 0), "--rehearse_fault", f"signal:1:{KILL_AT}", "--rdzv_timeout", "15"
    )
    node0, node1 = procs
    assert node1.returncode == 1, node1.stderr[-3000:]
    assert node0.returncode == 4, node0.stdout[-3000:] + node0.stderr[-3000:]
    last = node0.stderr.strip().splitlines()[-1]
    assert last.startswith("mgpu-lab train_multigpu: error: the job's other node(s) gave up: rank 0 on this node ("), (
        last
    )
    assert "waited 15 s for them after a restart (--rdzv_timeout): rank(s) 1 of 2 did not start within 15 s" in last
    assert "Traceback" not in node0.stderr


@pytest.mark.timeout(900)
def test_a_c10d_node_whose_peer_node_is_killed_stops_at_the_rendezvous_deadline(tmp_path):
    """Issue 52 item 5, the c10d form: node 0 hosts the store; node 1's launcher, torchrun and rank are SIGKILLed
    in training (its last beat at iteration 2; the rehearsed hang at 3 keeps it there), rank 0 waiting for it. Node 0's rank loses its peer,
    its torchrun restarts and waits in its own rendezvous for node 1, which never comes: at torchrun's deadline the
    launcher ends with exit 4 and the line the static form prints, not "no rank of this node failed first" pointing
    at a node that is gone. (30 s: node 1 starts once node 0's store listens, and its start-up under a loaded suite
    must fit in node 0's first rendezvous.)"""
    port = free_port()
    env, tag = tagged_env()
    cmds = [
        [PYTHON, LAUNCHER, *node_flags("c10d", node, port), "--max_restarts", "3", *TRAIN, "--rdzv_timeout", "30"]
        + ["--max_iterations", "50", "--log_root", str(tmp_path / "logs"), "--rehearse_fault", "hang:1:3"]
        for node in (0, 1)
    ]
    node0 = start(cmds[0], env)
    node1 = None
    try:
        wait_until(lambda: any(s[0] == ports.LISTEN for s in ports.sockets_on(port)), node0, "node 0's store")
        node1 = start(cmds[1], env)

        def rank1_hangs() -> bool:
            return any(beats(d).get(1, {}).get("iteration", -1) >= 2 for d in supervise_dirs(node1))

        wait_until(rank1_hangs, node1, "rank 1 at its hang")
        for pid in [node1.pid, *process_tree(node1.pid)]:  # the whole node at once: launcher, torchrun, rank
            os.kill(pid, signal.SIGKILL)
        node1.communicate(timeout=60)
        out, err = finish(node0, timeout=300)
    finally:
        for proc in (node0, node1):
            if proc is not None:
                kill_group(proc)
    assert node0.returncode == 4, out[-3000:] + err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("mgpu-lab train_multigpu: error: the job's other node(s) gave up: this node ("), last
    assert "waited 30 s for them in the rendezvous after a restart (--rdzv_timeout)" in last
    assert "no rank of this node failed first" not in err
    assert "Traceback" not in err
    assert_nothing_left(tag)


@pytest.mark.timeout(900)
def test_without_restarts_the_survivor_points_at_the_other_node(tmp_path):
    """No restart left anywhere: node 1 names its killed rank as the first failure; node 0's rank lost its peer, a
    consequence, and node 0's report says which node to look at instead of calling its own rank the first failure
    (issue 37 item 2)."""
    node0, node1 = two_nodes("static", tmp_path / "logs", (0, 0), "--rehearse_fault", f"signal:1:{KILL_AT}")
    assert node1.returncode == 1, node1.stderr[-3000:]
    assert re.search(rf"{re.escape(FIRST_FAILURE)} rank 1/2 on node \S+ \(pid \d+\): killed by SIGKILL", node1.stderr)
    assert node0.returncode == 1, node0.stderr[-3000:]
    assert re.search(
        r"^\[ERROR\] launcher: rank 0/2 on node \S+ \(pid \d+\): its collective lost a peer \(.+\) \(a consequence\)$",
        node0.stderr,
        re.M,
    ), node0.stderr[-3000:]
    assert (
        "[ERROR] launcher: no rank of this node failed first: the first failure is on another node; look at the "
        "report of the node running rank(s) 1"
    ) in node0.stderr
    assert FIRST_FAILURE not in node0.stderr and "Traceback" not in node0.stderr


@pytest.mark.timeout(900)
def test_the_stuck_node_of_a_two_node_hang_names_its_own_rank(tmp_path):
    """Rank 1 (node 1's only rank) hangs outside any collective at iteration 3 (the rehearsed fault): node 1's
    watchdog names it, not "no single culprit". Node 0's only rank waits in all_reduce: its watchdog says to read the
    other node's report, unless node 1 stopped first, and then its rank lost a peer: a consequence pointing there."""
    node0, node1 = two_nodes(
        "static", tmp_path / "logs", (0, 0), "--rehearse_fault", "hang:1:3", "--hang_timeout", "10"
    )
    assert node1.returncode == 3, node1.stderr[-3000:]
    assert (
        "[ERROR] watchdog: likely culprit: rank 1 (outside any collective while the job's 2 ranks span several "
        "nodes: the ranks on the other node(s) wait for this node)"
    ) in node1.stderr
    assert node0.returncode in (1, 3), node0.stderr[-3000:]
    pointers = (  # its watchdog fired while rank 0 waited, or after it failed and before it exited, or it exited
        "no single culprit (every rank of this node waits in all_reduce: look at the other node(s)' watchdog report",
        "no single culprit (every rank of this node failed because its collective lost a peer: the first failure is "
        "on another node; look at that node's report)",
        "look at the report of the node running rank(s) 1",
    )
    assert any(p in node0.stderr for p in pointers), node0.stderr[-3000:]
    assert "likely culprit: rank 0" not in node0.stderr
