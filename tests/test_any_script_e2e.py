"""The launcher supervising training scripts it did not write: ``--train_script``, real torchrun, 2 gloo ranks.

The scripts (tests/fixtures/any_script/) are plain torch.distributed programs that import nothing of this
project: ``ddp_train.py`` trains a DistributedDataParallel model (its gradient all-reduce runs from C++),
``allreduce_train.py`` averages gradients itself with ``all_reduce``. For each, three shared runs:

- healthy: trains until the test lets it finish, rank 1 held slow by the script itself (a sleep before each
  step: the fault, not a wait); while it runs, ``mgpu-lab stacks latest`` and ``mgpu-lab timing latest``;
- stalled: rank 1 stops calling collectives; the watchdog names it within --hang_timeout, with its stack, exit 3;
- raised: rank 1 raises; the launcher's report names it, torchrun's traceback stays off the terminal.

The stalled and raised runs are the DDP script's only: the rank entry around any script tracks collectives and
writes the error record the same way for both scripts, and with DDP the other rank is left inside the C++
all-reduce (reached through the communication hook), the harder case of the two. A rank waiting in a Python-level
``all_reduce`` for a stalled peer is named by tests/test_watchdog.py (the built-in trainer and the beat fixture,
through the same tracker's wrappers).

Every run has a hard timeout and, afterwards, none of its processes may be left.
"""

from __future__ import annotations

import io
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner
from mgpu_testing import REPO, free_port, kill_group, loopback_env
from mgpu_testing.launcher import CPU2, alive, beats, finish, launcher_cmd, process_tree, supervise_dirs, wait_until

from mgpu_lab.cli import main as mgpu_lab_cli
from mgpu_lab.health import live_stacks, timing

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the Linux process table"),
]

SCRIPTS = ["ddp_train.py", "allreduce_train.py"]
FIXTURES = REPO / "tests" / "fixtures" / "any_script"


@dataclass
class Job:
    rc: int
    out: str
    err: str
    tree: list[int]
    root: Path  # --job_log_root
    stacks: str = ""
    timing: str = ""

    @property
    def records(self) -> Path:
        (folder,) = (self.root / "train_multigpu").glob("*/*")
        return folder


def start_job(script: str, root: Path, *args: str, hang_timeout: str = "60"):
    import subprocess

    cmd = launcher_cmd(
        "--train_script",
        str(FIXTURES / script),
        *CPU2,
        "--master_port",
        str(free_port()),
        "--job_log_root",
        str(root),
        "--hang_timeout",
        hang_timeout,
        *args,
    )
    return subprocess.Popen(
        cmd,
        cwd=root.parent,
        env=loopback_env(),
        text=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def wait_training(proc) -> list[int]:
    """Both ranks completed a collective (beat phase "train"); return the job's processes then."""

    def training() -> bool:
        folders = supervise_dirs(proc)
        return bool(folders) and sum(b["phase"] == "train" for b in beats(folders[0]).values()) == 2

    wait_until(training, proc, "both ranks trained")
    return process_tree(proc.pid)


def run_to_end(script: str, root: Path, *args: str, hang_timeout: str = "60") -> Job:
    """Run a job whose fault waits for a go file: let it go once both ranks train and the test knows every
    process of the job."""
    go = root.parent / "go"
    proc = start_job(script, root, *args, "--go", str(go), hang_timeout=hang_timeout)
    try:
        tree = wait_training(proc)
        go.touch()
        out, err = finish(proc, timeout=240)
    finally:
        kill_group(proc)
    return Job(proc.returncode, out, err, tree, root)


def training_windows(root: Path) -> int:
    """The fewest timing windows with a collective in them, over both ranks (0 until both ranks wrote some)."""
    found = timing.find_run("latest", str(root))
    windows = timing.read(found) if found is not None else {}
    return min((sum(1 for w in ws if w.collectives) for ws in windows.values()), default=0) if len(windows) == 2 else 0


@pytest.fixture(scope="module", params=SCRIPTS)
def healthy(request, tmp_path_factory) -> Job:
    """Rank 1 slow; stacks asked while it trains, timing read once each rank closed 6 windows; then it ends."""
    base = tmp_path_factory.mktemp("healthy")
    go = base / "go"
    proc = start_job(request.param, base / "jobs", "--until", str(go), "--slow_rank", "1", "--slow_s", "0.1")
    try:
        tree = wait_training(proc)
        out = io.StringIO()
        assert live_stacks.request("latest", str(base / "jobs"), 60, out=out) == 0
        wait_until(lambda: training_windows(base / "jobs") >= timing.MIN_WINDOWS + 2, proc, "timing windows")
        result = CliRunner().invoke(mgpu_lab_cli, ["timing", "latest", "--log_root", str(base / "jobs")])
        go.touch()
        stdout, stderr = finish(proc, timeout=240)
    finally:
        kill_group(proc)
    return Job(proc.returncode, stdout, stderr, tree, base / "jobs", out.getvalue(), result.output)


@pytest.fixture(scope="module", params=SCRIPTS[:1])
def stalled(request, tmp_path_factory) -> Job:
    root = tmp_path_factory.mktemp("stalled") / "jobs"
    # --hang_timeout outlasts every healthy stretch of a loaded machine (a first step's lazy imports); the stall
    # itself is certain, so the test only waits longer for the verdict
    return run_to_end(request.param, root, "--steps", "1000", "--stall_rank", "1", hang_timeout="20")


@pytest.fixture(scope="module", params=SCRIPTS[:1])
def raised(request, tmp_path_factory) -> Job:
    root = tmp_path_factory.mktemp("raised") / "jobs"
    return run_to_end(request.param, root, "--steps", "1000", "--raise_rank", "1")


def nothing_left(job: Job) -> None:
    assert not [pid for pid in job.tree if alive(pid)], job.err[-3000:]


def test_a_foreign_script_trains_and_exits_0(healthy: Job) -> None:
    assert healthy.rc == 0, healthy.err[-3000:]
    assert re.search(r"rank 0: .*\d+ steps", healthy.out), healthy.out[-2000:]
    assert "--rl_library" not in healthy.err and "--distributed" not in healthy.err  # its arguments, unchanged
    nothing_left(healthy)


def test_stacks_of_a_running_foreign_script_show_every_rank_and_the_job_goes_on(healthy: Job) -> None:
    ranks = re.findall(r"\[INFO\] stacks: rank (\d)/2 \(", healthy.stacks)
    assert sorted(ranks) == ["0", "1"], healthy.stacks
    folder = Path(re.search(r"stacks and summary in (\S+)", healthy.stacks)[1])
    assert folder.parent.parent == healthy.records
    assert all((folder / f"stack_rank{r}.txt").read_text().strip() for r in (0, 1))
    assert healthy.rc == 0  # it went on to the end


def test_a_rank_held_slow_is_named(healthy: Job) -> None:
    assert "[WARN] timing: rank 1 is persistently slower than the others" in healthy.timing, healthy.timing
    assert "nvidia-smi" in healthy.timing
    assert sorted(int(r) for r in re.findall(r"\[INFO\] timing:\s+(\d)\s", healthy.timing)) == [0, 1]


def test_a_rank_that_stops_calling_collectives_is_named_with_its_stack(stalled: Job) -> None:
    assert stalled.rc == 3, stalled.err[-3000:]
    assert "[ERROR] watchdog: likely culprit: rank 1 (the other rank(s) wait in" in stalled.err, stalled.err[-3000:]
    lines = {int(m[1]): m[2] for m in re.finditer(r"\[ERROR\] watchdog:   rank (\d)/2 \([^)]*\): (.*)", stalled.err)}
    assert lines[0].startswith("waiting in all_reduce"), lines
    assert re.match(r"outside any collective, at .*_train\.py:\d+ in ", lines[1]), lines
    stack = (stalled.records / "watchdog" / "stack_rank1.txt").read_text()
    assert "_train.py" in stack and "sleep" not in stack.splitlines()[0]
    nothing_left(stalled)


def test_a_rank_that_raises_is_named_by_the_launchers_report(raised: Job) -> None:
    assert raised.rc == 1, raised.err[-3000:]
    # torchrun's own traceback stays off the terminal (rank 0's own, a consequence, may be shown: it is the rank's)
    assert "ChildFailedError" not in raised.err and "Root Cause" not in raised.err, raised.err[-3000:]
    assert "torch/distributed/run.py" not in raised.err, raised.err[-3000:]
    assert re.search(
        r"\[ERROR\] launcher: first failure: rank 1\b.*(ValueError: bad batch|RuntimeError: rank 1: loss)", raised.err
    ), raised.err[-3000:]
    nothing_left(raised)


def test_trace_of_the_stalled_script_names_rank_1_and_the_collective_it_never_posted(stalled: Job) -> None:
    """Issue 47: the watchdog had both ranks dump their flight recorder into the job's records folder; the DDP
    gradient all-reduce rank 0 posted is the collective rank 1 never posted."""
    folder = stalled.records / "flight_recorder"
    assert sorted(p.name for p in folder.iterdir()) == ["gloo_rank_0", "gloo_rank_1"], stalled.err[-3000:]
    assert f"flight recorder dumps of 2 rank(s) in {folder}" in stalled.err, stalled.err[-3000:]
    result = CliRunner().invoke(mgpu_lab_cli, ["trace", str(stalled.records)])
    assert result.exit_code == 1, result.output
    assert re.search(r"rank 0 posted #\d+ all_reduce .*, from .*ddp_train\.py:\d+ in main$", result.stdout, re.M), (
        result.stdout  # the script's own line (its backward pass), not torch's autograd running DDP's hooks
    )
    last = result.stdout.splitlines()[-1]
    assert re.fullmatch(
        r"mgpu-lab trace: rank 1 never posted collective #\d+ \(all_reduce .*\) of process group 0", last
    ), result.stdout


def test_trace_of_the_stalled_scripts_damaged_dump_is_one_line(stalled: Job, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "records" / "flight_recorder"
    shutil.copytree(stalled.records / "flight_recorder", copy)
    (copy / "gloo_rank_0").write_bytes((copy / "gloo_rank_0").read_bytes()[:100])
    result = CliRunner().invoke(mgpu_lab_cli, ["trace", str(copy.parent)])
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert result.stderr.splitlines() == [
        f"mgpu-lab trace: error: {copy / 'gloo_rank_0'}: truncated (the pickle ends early)"
    ]


def test_a_failed_rank_has_the_live_ranks_dump_before_the_job_stops(raised: Job) -> None:
    """Issue 47: rank 1 raised; before it exited, every rank of the node still alive dumped, and the report names
    where."""
    folder = raised.records / "flight_recorder"
    assert sorted(p.name for p in folder.iterdir()) == ["gloo_rank_0", "gloo_rank_1"], raised.err[-3000:]
    assert f"[ERROR] launcher: flight recorder dumps of rank 0, 1 in {folder}; read them with: mgpu-lab trace" in (
        raised.err
    ), raised.err[-3000:]
