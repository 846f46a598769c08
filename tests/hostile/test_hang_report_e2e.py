"""Issue 52, items 2 and 6, end to end in a mount namespace of the test's own (``unshare -m``, root):

- the job's records folder and the temp folder live on a 4 MiB tmpfs that the rank fills, then the rank stalls: the
  watchdog's report cannot be written anywhere, and still the summary reaches the console and the launcher exits 3,
  with no traceback;
- every cgroup v2 mount is read-only there: the launcher says in one line that the job runs without a cgroup of its
  own and what that means.
One job answers both (it is the same launch)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from mgpu_testing import REPO, free_port
from mgpu_testing.launcher import fixture_env, launcher_cmd

from mgpu_lab.job import job_cgroup

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mount namespaces are Linux's"),
]

#: Inside the namespace: a small tmpfs for the records and TMPDIR, every cgroup2 mount read-only, then the launcher.
SETUP = """
set -e
mount -t tmpfs -o size=4m tmpfs "$1"
mkdir "$1/tmp" "$1/jobs"
for m in $(findmnt -rn -t cgroup2 -o TARGET); do mount -o remount,bind,ro "$m"; done
shift
exec "$@"
"""


@pytest.fixture(scope="module")
def ended(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess:
    unshare, findmnt = shutil.which("unshare"), shutil.which("findmnt")
    if unshare is None or findmnt is None or subprocess.run([unshare, "-m", "true"], check=False).returncode:
        pytest.skip("no mount namespace can be made here (unshare -m needs root)")
    small = tmp_path_factory.mktemp("small")
    script = REPO / "tests" / "fixtures" / "hostile" / "fill_then_stall.py"
    cmd = launcher_cmd(
        "--train_script",
        str(script),
        "--num_gpus",
        "1",
        "--device",
        "cpu",
        "--master_port",
        str(free_port()),
        "--job_log_root",
        str(small / "jobs"),
        "--startup_timeout",
        "5",
        "--hang_timeout",
        "5",
        str(small / "jobs"),
    )
    env = fixture_env(TMPDIR=str(small / "tmp"))
    return subprocess.run(
        [unshare, "-m", "--propagation", "private", "sh", "-c", SETUP, "sh", str(small), *cmd],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def test_a_hang_whose_report_cannot_be_written_still_prints_the_summary_and_exits_3(
    ended: subprocess.CompletedProcess,
) -> None:
    err = ended.stderr
    assert "[fixture] the disk is full" in ended.stdout, err[-3000:]
    assert ended.returncode == 3, err[-3000:]
    assert "Traceback" not in err, err[-5000:]
    assert "[ERROR] watchdog: no rank made progress for 5 s in start-up" in err, err[-3000:]
    assert "[ERROR] watchdog:   rank 0/1 (node" in err, err[-3000:]  # the summary, on the console
    assert "[WARN] watchdog: the report could not be written to" in err, err[-3000:]
    assert "[ERROR] watchdog: no folder could take the stacks and summary: the lines above are the report" in err
    assert "[ERROR] watchdog: stopping the job (exit 3)" in err.splitlines(), err[-3000:]


def test_a_job_without_a_cgroup_of_its_own_is_told_so(ended: subprocess.CompletedProcess) -> None:
    lines = [line for line in ended.stderr.splitlines() if "without a cgroup of its own" in line]
    assert len(lines) == 1, ended.stderr[-3000:]
    assert lines[0].startswith("[WARN] launcher: the job runs without a cgroup of its own (")
    assert lines[0].endswith(job_cgroup.WITHOUT)
