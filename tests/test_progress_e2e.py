"""Issue 52, item 1: a rank is training once it makes any progress the launcher sees without the script's help.

Plain PyTorch scripts (tests/fixtures/launcher/step_rank.py) under the launcher's ``--train_script``, with
``--startup_timeout`` and ``--hang_timeout`` of LIMIT seconds and training that outlasts them: optimizer steps are
progress (PyTorch's global step hook), so neither a rank alone with its process group nor two ranks without one is
taken for a start-up stall; the same jobs with a rank stopped before training still end in exit 3 naming it. The
four jobs run at once (each is light), shared by the tests that read them.

Item 4: Ctrl-C while rank 0 waits in an ``all_reduce`` for a rank that never comes: exit 130, one line per rank,
no traceback, nothing left running.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import NamedTuple

import pytest
from mgpu_testing import free_port, kill_group
from mgpu_testing.launcher import (
    alive,
    beats,
    finish,
    fixture_args,
    fixture_env,
    launcher_cmd,
    process_tree,
    start,
    supervise_dirs,
    wait_for_pids,
    wait_until,
)

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the Linux process table"),
]

#: --startup_timeout and --hang_timeout of every job here; a healthy start-up stays well within it: the script's own
#: ``import torch`` counts in it (the rank entry loads no torch of its own), six ranks and four torchruns importing
#: torch at once on two loaded cores took more than 12 s
LIMIT = 25
#: how long the healthy jobs train: past the limit, which the old watchdog enforced from the first beat
TRAIN_S = LIMIT + 6

JOBS = {
    "one_rank_group": ("1", "--group", "--seconds", str(TRAIN_S)),
    "two_ranks_no_group": ("2", "--seconds", str(TRAIN_S)),
    "one_rank_stalled": ("1", "--group", "--stall_rank", "0"),
    "two_ranks_one_stalled": ("2", "--seconds", "1", "--stall_rank", "1"),
}


class Ended(NamedTuple):
    rc: int
    out: str
    err: str


def launch(tmp: Path, name: str, nproc: str, *script_args: str, limit: int = LIMIT):
    folder = tmp / name
    folder.mkdir()
    cmd = launcher_cmd(
        *fixture_args("step_rank.py", folder / "jobs"),
        "--num_gpus",
        nproc,
        "--device",
        "cpu",
        "--master_port",
        str(free_port()),
        "--startup_timeout",
        str(limit),
        "--hang_timeout",
        str(limit),
        *script_args,
    )
    return start(cmd, fixture_env(folder))


@pytest.fixture(scope="module")
def ended(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Ended]:
    base = tmp_path_factory.mktemp("progress")
    procs = {name: launch(base, name, *args) for name, args in JOBS.items()}
    results = {}
    try:
        for name, proc in procs.items():
            out, err = finish(proc, timeout=240)
            results[name] = Ended(proc.returncode, out, err)
    finally:
        for proc in procs.values():
            kill_group(proc)
    return results


@pytest.mark.parametrize("name", ["one_rank_group", "two_ranks_no_group"])
def test_ranks_that_only_take_optimizer_steps_are_training(ended: dict[str, Ended], name: str) -> None:
    job = ended[name]
    assert job.rc == 0, job.err[-3000:]
    assert "[ERROR] watchdog" not in job.err, job.err[-3000:]
    assert "optimizer steps in" in job.out and f"in {TRAIN_S:g} s" in job.out, job.out[-2000:]


def test_a_lone_rank_stopped_before_training_is_still_a_start_up_stall(ended: dict[str, Ended]) -> None:
    job = ended["one_rank_stalled"]
    assert job.rc == 3, job.err[-3000:]
    assert "in start-up (rank 0 had not begun training" in job.err, job.err[-3000:]
    assert "likely culprit: rank 0 (the job's only rank" in job.err, job.err[-3000:]
    assert "Traceback" not in job.err


def test_a_rank_stopped_before_training_beside_one_that_trained_is_named(ended: dict[str, Ended]) -> None:
    job = ended["two_ranks_one_stalled"]
    assert job.rc == 3, job.err[-3000:]
    assert "in start-up (rank 1 had not begun training" in job.err, job.err[-3000:]
    assert "Traceback" not in job.err


def test_ctrl_c_in_a_two_rank_hang_is_quiet(tmp_path: Path) -> None:
    """Rank 0 waits in all_reduce for rank 1, which sleeps instead; one Ctrl-C (SIGINT to the launcher, as a terminal
    sends it): every rank ends with at most one line, the launcher exits 130, nothing is left running."""
    proc = launch(tmp_path, "hang", "2", "--group", "--seconds", "0.2", "--hang_rank", "1", limit=600)
    try:
        wait_for_pids(tmp_path / "hang", 2, proc)
        tree = process_tree(proc.pid)

        def rank0_in_all_reduce() -> bool:
            return any(beats(d).get(0, {}).get("collective") == "all_reduce" for d in supervise_dirs(proc))

        wait_until(rank0_in_all_reduce, proc, "rank 0 waiting in all_reduce")
        os.killpg(proc.pid, signal.SIGINT)
        _, err = finish(proc, timeout=120)
    finally:
        kill_group(proc)
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err, err[-5000:]
    assert "KeyboardInterrupt" not in err, err[-5000:]
    assert "[INFO] rank 0: interrupted (SIGINT), stopping" in err, err[-3000:]
    assert not [pid for pid in tree if alive(pid)], err[-3000:]
