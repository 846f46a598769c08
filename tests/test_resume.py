"""Resuming: a restarted worker group (torchrun --max_restarts) resumes its own run from the newest checkpoint;
``--checkpoint latest``; --max_iterations counts from iteration 0 for every resume.

One real restart (rsl_rl): the injected fault signal:1:K SIGKILLs rank 1 at the first step of iteration K, on the
first attempt only, and torchrun starts a second worker group. K is chosen so that rank 0 has certainly finished
writing the checkpoint the restart must find (rank 1 can only reach iteration K after a collective that rank 0
enters after that save), so the resume point is exact.

For rl_games, skrl and skrl's JAX, the restart's own part (find the job's run folder by the job key rank 0
recorded, resume from its newest checkpoint) runs on the real checkpoints of the session's healthy 2-rank
job (tests/mgpu_testing/runs.py), copied: one trainer told it is restart 1 of that job, as torchrun tells a
restarted worker (TORCHELASTIC_RESTART_COUNT), without a second torchrun group. That trainer runs in pytest's
process (mgpu_testing.training.train_in_process) for rl_games and skrl; skrl's JAX runs in a process of its own,
because JAX reads JAX_PLATFORMS once, when it is first imported, and pytest's process may have imported it
before (flax, to read checkpoints) without it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mgpu_testing import run, seams_env
from mgpu_testing.runs import NUM_ENVS, WITH_HEALTHY_RUN, copy_run
from mgpu_testing.training import (
    DIGEST_ANYWHERE,
    TASK,
    assert_one_line_error,
    assert_one_rank_output,
    single_env,
    supervised_env,
    torchrun_train,
    train_args,
    train_cmd,
    train_in_process,
)

from mgpu_lab.health import heartbeat
from mgpu_lab.runs.checkpoint import load_torch, read_msgpack
from mgpu_lab.runs.resume import JOB_KEY_ENV, JOB_KEY_FILE

pytestmark = pytest.mark.e2e

RESUMED = re.compile(r"\[INFO\] restart 1: resumed from (\S+) at iteration (\d+)$", re.M)
STEPPED = re.compile(r"\[INFO\] rank (\d+)/(\d+): stepped (\d+) env-steps$", re.M)
MAX_ITERATIONS = 7


@pytest.mark.timeout(960)  # longer than the suite's 600 s: the marker wins over the ini value (pytest-timeout)
def test_a_restarted_group_resumes_its_own_run(tmp_path):
    """rsl_rl: rank 1 dies at iteration 4; model_2.pt (iterations 0-2) is saved before iteration 3's update."""
    kill_at, resumed_at, steps_per_iteration = 4, 3, 24
    logs = tmp_path / "logs"
    supervise = tmp_path / "supervise"
    env = seams_env(supervised_env(supervise, MGPU_LAB_JOB_KEY=f"test-{tmp_path.name}"), fault=f"signal:1:{kill_at}")
    proc = run(
        torchrun_train(
            "rsl_rl",
            logs,
            2,
            "--num_envs",
            "8",
            "--max_iterations",
            str(MAX_ITERATIONS),
            "--save_interval",
            "2",
            "--seed",
            "5",
            max_restarts=1,
        ),
        timeout=900,
        env=env,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert f"[FAULT] rank 1: sending itself SIGKILL at iteration {kill_at}" in out

    runs = list((logs / "rsl_rl" / TASK).iterdir())
    assert len(runs) == 1, "a restart must reuse its run folder"
    run_dir = runs[0]
    assert (run_dir / "job_key").read_text() == f"test-{tmp_path.name}"
    resumed = RESUMED.findall(out)
    assert len(resumed) == 1, out[-4000:]
    path, iteration = resumed[0]
    assert Path(path).parent.is_relative_to(run_dir) and int(iteration) == resumed_at

    # the restarted group trained only what was left, on both ranks, and ended in agreement
    per_rank = {rank: int(steps) for rank, world, steps in STEPPED.findall(out)}
    left = (MAX_ITERATIONS - resumed_at) * steps_per_iteration * 8
    assert per_rank == {"0": left, "1": left}, out[-4000:]
    digests = {rank: value for rank, _, value in DIGEST_ANYWHERE.findall(out)}
    assert set(digests) == {"0", "1"} and digests["0"] == digests["1"]
    assert (run_dir / f"model_{MAX_ITERATIONS - 1}.pt").is_file()

    # the supervision files of the restarted group, to the end: every rank beat until done, can dump its
    # stack, rank 0 named the run folder; the SIGKILLed rank 1 recorded no failure (it could not)
    beats = heartbeat.read_beats(supervise)
    assert {r: (b.phase, b.iteration, b.world_size) for r, b in beats.items()} == {
        0: ("done", MAX_ITERATIONS - 1, 2),
        1: ("done", MAX_ITERATIONS - 1, 2),
    }
    assert heartbeat.stack_path(supervise, 0).exists() and heartbeat.stack_path(supervise, 1).exists()
    assert heartbeat.read_run_dir(supervise) == run_dir.resolve()
    assert 1 not in heartbeat.read_failures(supervise)


# library (healthy run), the final checkpoint (glob, relative to the run folder) of MAX_ITERATIONS and how
# to load it, steps per iteration, extra trainer arguments, extra environment, whether it runs in this process
RESTARTS = [
    ("rl_games", f"nn/last_*_ep_{MAX_ITERATIONS}_rew_*.pth", lambda p: load_torch(p, "rl_games"), 16, (), {}, True),
    ("skrl", f"checkpoints/agent_{16 * MAX_ITERATIONS}.pt", lambda p: load_torch(p, "skrl"), 16, (), {}, True),
    (
        "skrl-jax",
        f"checkpoints/agent_{16 * MAX_ITERATIONS}.msgpack",
        read_msgpack,
        16,
        ("--ml_framework", "jax"),
        {"JAX_PLATFORMS": "cpu"},
        False,
    ),
]


@pytest.mark.timeout(WITH_HEALTHY_RUN)
@pytest.mark.parametrize(
    "library,final,load,steps_per_iteration,args,extra_env,in_process", RESTARTS, ids=[r[0] for r in RESTARTS]
)
def test_a_restart_finds_its_jobs_run_and_resumes_from_its_newest_checkpoint(
    tmp_path, healthy_run, library, final, load, steps_per_iteration, args, extra_env, in_process
):
    """Also the library's training in one process (world size 1): its lines, a loadable last checkpoint, no
    temp file left (a fresh start is the healthy run's)."""
    healthy = healthy_run(library)
    logs = tmp_path / "logs"
    run_dir = copy_run(healthy, logs)
    key = (run_dir / JOB_KEY_FILE).read_text(encoding="utf-8").strip()
    assert key, "rank 0 of the launcher's job records the job key in its run folder"
    given = (
        *args,
        "--task",
        TASK,
        "--num_envs",
        str(NUM_ENVS),
        "--max_iterations",
        str(MAX_ITERATIONS),
        "--save_interval",
        "2",
    )
    env = single_env(TORCHELASTIC_RESTART_COUNT="1", **{JOB_KEY_ENV: key}, **extra_env)
    if in_process:
        proc = train_in_process(train_args(healthy.rl_library, logs, *given), env)
    else:
        proc = run(train_cmd(healthy.rl_library, logs, *given), timeout=500, env=env)
    out = proc.stdout + proc.stderr
    assert_one_rank_output(proc, anchored=in_process)  # exit 0; synchronized, timed, counted over 1 rank, a digest
    assert [p.name for p in (logs / healthy.rl_library / TASK).iterdir()] == [run_dir.name], (
        "a restart must reuse its run folder"
    )
    (resumed,) = RESUMED.findall(out)
    path, iteration = resumed
    assert Path(path).parent.is_relative_to(run_dir) and int(iteration) == healthy.iterations  # the newest
    left = (MAX_ITERATIONS - healthy.iterations) * steps_per_iteration * NUM_ENVS
    assert STEPPED.findall(out) == [("0", "1", str(left))]
    found = list(run_dir.glob(final))
    assert len(found) == 1, sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*"))
    load(found[0])
    assert not list(run_dir.rglob(".*.tmp")), "temp files left behind"


@pytest.mark.timeout(WITH_HEALTHY_RUN)
def test_checkpoint_latest_refusals(tmp_path, healthy_run):
    """Nothing to resume, or nothing left to train: one line, nothing written. A resume from ``latest`` (path
    and iteration exact) is tests/test_skill_commands.py's, in the CPU forms of the documented commands."""
    logs = tmp_path / "logs"
    common = train_args("rsl_rl", logs, "--num_envs", "8")  # in this process (mgpu_testing.training.train_in_process)
    assert_one_line_error(
        train_in_process([*common, "--checkpoint", "latest"], single_env()),
        "--checkpoint latest: no rsl_rl checkpoint of Toy-Cartpole-v0 under",
    )
    assert not logs.exists(), "a refused run writes nothing"

    healthy = healthy_run("rsl_rl")  # its newest checkpoint holds iterations 0 .. N-1
    done = healthy.iterations
    first = copy_run(healthy, logs)
    proc = train_in_process([*common, "--checkpoint", "latest", "--max_iterations", str(done)], single_env())
    assert_one_line_error(proc, f"already at iteration {done} and --max_iterations {done} counts from iteration 0")
    assert list((logs / "rsl_rl" / TASK).iterdir()) == [first], "a refused run writes nothing"
