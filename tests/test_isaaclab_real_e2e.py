"""The launcher supervising the REAL Isaac Lab 3.0 trainer on the CPU: one rank (Isaac Lab refuses distributed CPU
training), its per-rank worker ``-m isaaclab_rl.entrypoints.multigpu``, the real Isaac-Cartpole-Direct on Warp's CPU
backend (Newton's MuJoCo-Warp), the robot and ground loaded from an offline asset root built from the wheel's own
test stages (tests/isaaclab_real/build_assets.py).

Needs the Isaac Lab venv (``bash tests/isaaclab_real/setup_env.sh``): skipped without it, a failure under CI=true.
Three real jobs, each shared by the tests that read it:

- trained: 3 iterations to the end, exit 0, the run folder where Isaac Lab puts it (``logs/rsl_rl/<experiment>/
  <time>`` under the working directory);
- broken: the robot's USD removed from the asset root; the launcher's one-line report names the file, quickly;
- live: a long run; ``python -m mgpu_lab.cli stacks`` while it trains shows Isaac Lab's frames, then SIGINT (Ctrl-C):
  exit 130 and no process of the job left.

Isaac Lab's own command beside this one: tests/test_isaaclab_side_by_side_e2e.py.
Every wait is for an event (a log line, an exit) with a deadline, never a sleep tuned to this machine.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest
from mgpu_testing import kill_group, run
from mgpu_testing.isaaclab_real import (
    CARTPOLE,
    DEADLINE_S,
    ROBOT,
    TRAINER,
    Job,
    Real,
    interrupt,
    job,
    make_real,
    start,
)
from mgpu_testing.launcher import alive, beats, process_tree, processes_with_env, supervise_dirs

from mgpu_lab.core import procs
from mgpu_lab.job.supervise import JOB_TAG_ENV

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.isaaclab,
    # a shared job's set-up counts in the first test that asks for it: Warp compiles its kernels there
    pytest.mark.timeout(1800),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the Linux process table"),
]


def launch(python: Path, *args: str, limits: float = 0.0) -> list[str]:
    """``mgpu-lab train_multigpu`` (as ``python -m mgpu_lab.cli``: the same command, whatever its console script is named) on
    Isaac Lab's per-rank trainer, one CPU rank, every Isaac Lab option after ``-m`` unchanged; ``limits``: the
    launcher's --startup_timeout and --hang_timeout (0: its defaults)."""
    head = [str(python), "-m", "mgpu_lab.cli", "train_multigpu", "--num_gpus", "1", "--device", "cpu"]
    if limits:
        head += ["--startup_timeout", f"{limits:g}", "--hang_timeout", f"{limits:g}"]
    return [*head, "-m", TRAINER, "--rl_library", "rsl_rl", *CARTPOLE, *args, "agent.device=cpu"]


def test_the_documented_cpu_command_is_the_one_trained() -> None:
    """The skill's and the docs' CPU command for Isaac Lab's trainer is, word for word, what ``trained`` runs."""
    import shlex

    from mgpu_testing import REPO

    ours = ["mgpu-lab", *launch(Path("python"), "--max_iterations", "3")[3:]]
    for doc in ("skills/user/train-multi-gpu/reference.md", "docs/source/features/multi_gpu.rst"):
        lines = (REPO / doc).read_text(encoding="utf-8").splitlines()
        quoted = [shlex.split(line.strip()) for line in lines if "--device cpu -m isaaclab_rl" in line]
        assert ours in quoted, (doc, quoted)


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Real:
    return make_real(tmp_path_factory, "launcher")


@pytest.fixture(scope="module")
def trained(real: Real) -> Job:
    return job(real, "trained", launch(real.python, "--max_iterations", "3"))


@pytest.fixture(scope="module")
def broken(real: Real, trained: Job) -> Job:  # after `trained`: Warp's kernels are compiled
    assets = real.base / "broken-assets"
    shutil.copytree(real.assets, assets)
    (assets / ROBOT).unlink()
    return job(real, "broken", launch(real.python, "--max_iterations", "3"), assets)


@pytest.fixture(scope="module")
def live(real: Real, trained: Job) -> Job:
    """A long run under a short start-up and training limit: it must outlive them (issue 52: a lone rank of Isaac
    Lab's trainer makes no collective; its optimizer steps are its progress), then stacks, then Ctrl-C.

    The limit is the whole `trained` job (its start-up, three iterations and its end, on this machine now) plus 10 s,
    so a healthy start-up fits in it; the run goes on until the limit has passed since it started."""
    limit = math.ceil(trained.seconds) + 10
    cwd = real.base / "live"
    cwd.mkdir()
    out_file = real.base / "live.out"
    began = time.monotonic()
    proc = start(launch(real.python, "--max_iterations", "100000", limits=limit), cwd, real.env(), out_file)
    try:
        deadline = time.monotonic() + DEADLINE_S
        while not (
            re.search(r"Learning iteration [1-9]\d*/100000", out_file.read_text(errors="replace"))
            and time.monotonic() - began > limit + 5
        ):
            if proc.poll() is not None or time.monotonic() > deadline:
                kill_group(proc)
                pytest.fail(f"ended before Ctrl-C (exit {proc.returncode})\n{proc.stderr.read()[-3000:]}")
            time.sleep(0.1)
        stacks = run(
            [str(real.python), "-m", "mgpu_lab.cli", "stacks", "latest", "--log_root", "logs", "--timeout", "60"],
            timeout=120,
            env=real.env(),
            cwd=cwd,
        )
        folder = re.search(r"stacks and summary in (\S+)", stacks.stdout)
        files = "".join(p.read_text() for p in sorted(Path(folder[1]).glob("stack_rank*.txt"))) if folder else ""
        tree = process_tree(proc.pid)
        tags = {procs.env_value(pid, JOB_TAG_ENV) for pid in tree} - {None, ""}
        interrupt(proc)
        try:
            _, err = proc.communicate(timeout=120)
        except Exception:
            kill_group(proc)
            raise
        tagged = [pid for tag in tags for pid in processes_with_env(JOB_TAG_ENV, str(tag))]
        return Job(
            proc.returncode,
            out_file.read_text(errors="replace"),
            err,
            cwd,
            time.monotonic() - began,
            tree,
            tagged,
            stacks.stdout + stacks.stderr,
            files,
            limit,
        )
    finally:
        kill_group(proc)


def test_real_cartpole_trains_to_its_last_iteration_under_the_launcher(trained: Job) -> None:
    assert trained.rc == 0, trained.err[-3000:]
    assert re.search(r"Learning iteration 2/3\b", trained.out), trained.out[-3000:]
    assert f"-m {TRAINER} --rl_library rsl_rl --device cpu --task Isaac-Cartpole-Direct" in trained.err
    (folder,) = (trained.cwd / "logs" / "rsl_rl" / "cartpole_direct").iterdir()  # Isaac Lab's run folder
    assert re.fullmatch(r"\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d", folder.name), folder
    assert (folder / "model_2.pt").is_file() and (folder / "params" / "agent.yaml").is_file()
    assert (trained.cwd / "logs" / "train_multigpu" / "multigpu").is_dir()  # the launcher's records beside it


def test_a_missing_asset_ends_in_one_line_naming_the_file_quickly(broken: Job, trained: Job) -> None:
    assert broken.rc == 1, broken.err[-3000:]
    missing = f"broken-assets/{ROBOT}"
    reports = [line for line in broken.err.splitlines() if line.startswith("[ERROR] launcher:")]
    (first,) = [line for line in reports if "first failure" in line]
    assert re.fullmatch(
        rf"\[ERROR\] launcher: first failure: rank 0/1 on node \S+ \(pid \d+\): FileNotFoundError: "
        rf"Unable to resolve the file: \S+/{re.escape(missing)}",
        first,
    ), reports
    assert not [line for line in reports if "rank(s) failed" in line], reports  # one rank: one line, not a list
    assert broken.err.rstrip().splitlines()[-1] == first  # the last word on the terminal
    # torchrun's own traceback stays off the terminal (the rank's own is the rank's output)
    assert "ChildFailedError" not in broken.err and "torch/distributed/run.py" not in broken.err
    # the local asset root: no wait for a remote server (offline, Isaac Lab waits about 50 s before failing)
    assert broken.seconds < trained.seconds, (broken.seconds, trained.seconds)


def test_a_lone_real_rank_outlives_short_limits_while_it_trains(live: Job) -> None:
    """Issue 52: the run lasted past its --startup_timeout and --hang_timeout; only Ctrl-C ended it."""
    assert live.limit and live.seconds > live.limit + 5, (live.seconds, live.limit)
    assert live.rc == 130, live.err[-3000:]
    assert "[ERROR] watchdog" not in live.err, live.err[-3000:]


@pytest.fixture(scope="module")
def stalled(real: Real, trained: Job) -> Job:
    """The same command under a 5 s limit, its rank stopped (SIGSTOP) right after its first beat, before training."""
    cwd = real.base / "stalled"
    cwd.mkdir()
    out_file = real.base / "stalled.out"
    began = time.monotonic()
    proc = start(launch(real.python, "--max_iterations", "3", limits=5), cwd, real.env(), out_file)
    try:
        deadline = time.monotonic() + DEADLINE_S
        rank = None
        while rank is None:
            found = [d for d in supervise_dirs(proc) if (d / "beat.0").is_file()]
            rank = beats(found[0]).get(0, {}).get("pid") if found else None
            if proc.poll() is not None or time.monotonic() > deadline:
                kill_group(proc)
                pytest.fail(f"no first beat (exit {proc.returncode})\n{proc.stderr.read()[-3000:]}")
            time.sleep(0.05)
        os.kill(rank, signal.SIGSTOP)
        _, err = proc.communicate(timeout=300)
    finally:
        kill_group(proc)
    return Job(proc.returncode, out_file.read_text(errors="replace"), err, cwd, time.monotonic() - began)


def test_a_real_rank_stopped_before_training_is_still_a_start_up_stall(stalled: Job) -> None:
    assert stalled.rc == 3, stalled.err[-3000:]
    assert "in start-up (rank 0 had not begun training" in stalled.err, stalled.err[-3000:]
    assert "not responding (stopped by a signal: SIGSTOP, or a debugger holds it)" in stalled.err
    assert "Traceback" not in stalled.err


def test_stacks_of_the_live_real_rank_show_isaac_labs_frames(live: Job) -> None:
    assert re.search(r"\[INFO\] stacks: rank 0/1 \(", live.stacks), live.stacks
    assert re.search(r"site-packages/isaaclab\w*/", live.stack_files), live.stack_files[-3000:]
    assert "isaaclab_rl/entrypoints/multigpu.py" in live.stack_files


def test_ctrl_c_stops_the_real_job_and_leaves_nothing_running(live: Job) -> None:
    assert live.rc == 130, live.err[-3000:]
    assert live.tree, "the job's processes were seen"
    assert not [pid for pid in live.tree if alive(pid)], live.err[-3000:]
    assert not [pid for pid in live.tagged if alive(pid)], live.err[-3000:]
    assert "ChildFailedError" not in live.err
