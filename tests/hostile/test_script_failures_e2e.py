"""Issue 38, item 1: what only a rank can find (an import inside the script; a rank's ``sys.exit(3)`` while
another waits in a barrier) ends in the launcher's report: the right rank first, its own error line, no
traceback on the terminal (torchrun's report in the run folder keeps it), nothing left running. Real torchrun,
2 gloo ranks; one run per case."""

from __future__ import annotations

import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from mgpu_testing import REPO, free_port, kill_group
from mgpu_testing.launcher import CPU2, finish, fixture_env, launcher_cmd, processes_with_env, start

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the Linux process table"),
]

FIXTURES = REPO / "tests" / "fixtures" / "hostile"


@dataclass
class Run:
    rc: int
    out: str
    err: str
    tag: str
    root: Path


def run(script: str, root: Path) -> Run:
    tag = f"{script}-{os.getpid()}-{time.monotonic_ns()}"
    proc = start(
        launcher_cmd(
            "--train_script",
            str(FIXTURES / script),
            *CPU2,
            "--master_port",
            str(free_port()),
            "--job_log_root",
            str(root),
            "--hang_timeout",
            "60",
        ),
        fixture_env(MGPU_LAB_TEST_TAG=tag),  # every process of the job inherits it
    )
    try:
        out, err = finish(proc, timeout=180)
    finally:
        kill_group(proc)
    return Run(proc.returncode, out, err, tag, root)


@pytest.fixture(scope="module", params=["import_error.py", "exit_in_barrier.py"])
def failed(request, tmp_path_factory) -> tuple[str, Run]:
    return request.param, run(request.param, tmp_path_factory.mktemp("failed") / "jobs")


def test_the_report_names_the_rank_that_failed_first_with_its_own_line(failed: tuple[str, Run]) -> None:
    script, job = failed
    assert job.rc == 1, job.err[-3000:]
    terminal = job.out + job.err
    assert "Traceback" not in terminal and "ChildFailedError" not in terminal, terminal[-3000:]
    first = re.search(r"\[ERROR\] launcher: first failure: rank (\d)/2 [^:]*: (.*)", job.err)
    assert first is not None, job.err[-3000:]
    assert first[1] == "1", job.err[-3000:]
    expected = "No module named 'mgpu_lab_no_such_module_38'" if script == "import_error.py" else "status 3"
    assert expected in first[2], first[2]
    ranks = re.findall(r"\[ERROR\] launcher:   rank (\d)/2 .*", job.err)
    assert sorted(ranks) in (["0", "1"], ["1"]), job.err[-3000:]
    assert "<- first" in re.search(r"\[ERROR\] launcher:   rank 1/2 .*", job.err)[0]
    # the rank's traceback is kept in the run folder, and the report says where
    kept = Path(re.search(r"each failed rank's traceback: (\S+)", job.err)[1])
    assert kept.is_file() and "Traceback" in kept.read_text(), job.err[-3000:]
    # nothing but the launcher's and the ranks' one-line messages (and torchrun's own log lines)
    for line in terminal.splitlines():
        assert not line.startswith(("[rank0]:  ", "  File ")), line


def test_nothing_is_left_running(failed: tuple[str, Run]) -> None:
    _, job = failed
    assert processes_with_env("MGPU_LAB_TEST_TAG", job.tag) == []
