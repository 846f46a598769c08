"""Resuming: a restarted worker group (torchrun --max_restarts) resumes its own run from the newest checkpoint,
for every library; ``--checkpoint latest``; --max_iterations counts from iteration 0 for every resume.

A restart is provoked deterministically: MGPU_LAB_FAULT=signal:1:K SIGKILLs rank 1 at the first step of
iteration K, on the first attempt only. K is chosen so that rank 0 has certainly finished writing the
checkpoint the restart must find (rank 1 can only reach iteration K after a collective that rank 0
enters after that save), so the resume point is exact."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mgpu_testing import run
from mgpu_testing.training import (DIGEST_ANYWHERE, TASK, assert_one_line_error, single_env, supervised_env,
                                   torchrun_train, train_cmd)

RESUMED = re.compile(r"\[INFO\] restart 1: resumed from (\S+) at iteration (\d+)$", re.M)
STEPPED = re.compile(r"\[INFO\] rank (\d+)/(\d+): stepped (\d+) env-steps$", re.M)
MAX_ITERATIONS = 7


# library, iteration at which rank 1 dies, iteration the restart resumes at, batched steps per iteration,
# the final checkpoint (glob, relative to the run folder)
CASES = [
    ("rsl_rl", 4, 3, 24, "model_6.pt"),  # model_2.pt (iterations 0-2) is saved before iteration 3's update
    ("rl_games", 5, 4, 16, f"nn/last_*_ep_{MAX_ITERATIONS}_rew_*.pth"),
    ("skrl", 5, 4, 16, f"checkpoints/agent_{16 * MAX_ITERATIONS}.pt"),
]


@pytest.mark.parametrize("library,kill_at,resumed_at,steps_per_iteration,final", CASES)
def test_a_restarted_group_resumes_its_own_run(tmp_path, library, kill_at, resumed_at, steps_per_iteration, final):
    logs = tmp_path / "logs"
    env = supervised_env(tmp_path / "supervise", MGPU_LAB_FAULT=f"signal:1:{kill_at}",
                         MGPU_LAB_JOB_KEY=f"test-{tmp_path.name}")
    proc = run(torchrun_train(library, logs, 2, "--num_envs", "8", "--max_iterations", str(MAX_ITERATIONS),
                              "--save_interval", "2", "--seed", "5", max_restarts=1), timeout=900, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert f"[FAULT] rank 1: sending itself SIGKILL at iteration {kill_at}" in out

    runs = list((logs / library / TASK).iterdir())
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
    assert list(run_dir.glob(final)), sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*"))


def test_skrl_jax_restart_resumes_its_own_run(tmp_path):
    """skrl's JAX launcher never restarts; a restart is what torchrun would do: the same job key, count 1."""
    logs = tmp_path / "logs"
    common = train_cmd("skrl", logs, "--ml_framework", "jax", "--num_envs", "8", "--max_iterations", "3",
                       "--save_interval", "1")
    key = {"MGPU_LAB_JOB_KEY": f"jax-{tmp_path.name}", "JAX_PLATFORMS": "cpu"}
    first = run(common, timeout=500, env=single_env(MGPU_LAB_FAULT="signal:0:2", **key))
    assert first.returncode == -9, (first.stdout + first.stderr)[-3000:]
    second = run(common, timeout=500, env=single_env(TORCHELASTIC_RESTART_COUNT="1", **key))
    out = second.stdout + second.stderr
    assert second.returncode == 0, out[-3000:]
    (run_dir,) = (logs / "skrl" / TASK).iterdir()
    path, iteration = RESUMED.findall(out)[0]
    assert Path(path).parent == run_dir / "checkpoints" and Path(path).name.startswith("agent_32.")
    assert int(iteration) == 2
    assert STEPPED.findall(out) == [("0", "1", str(16 * 8))]  # one iteration left
    assert list(run_dir.glob("checkpoints/agent_48.*"))


def test_checkpoint_latest(tmp_path):
    logs = tmp_path / "logs"
    common = train_cmd("rsl_rl", logs, "--num_envs", "8")
    assert_one_line_error(run([*common, "--checkpoint", "latest"], timeout=300, env=single_env()),
                          "--checkpoint latest: no rsl_rl checkpoint of Toy-Cartpole-v0 under")
    assert not logs.exists(), "a refused run writes nothing"

    assert run([*common, "--max_iterations", "1"], timeout=300, env=single_env()).returncode == 0
    (first,) = (logs / "rsl_rl" / TASK).iterdir()
    proc = run([*common, "--checkpoint", "latest", "--max_iterations", "1"], timeout=300, env=single_env())
    assert_one_line_error(proc, "already at iteration 1 and --max_iterations 1 counts from iteration 0")
    assert list((logs / "rsl_rl" / TASK).iterdir()) == [first], "a refused run writes nothing"

    proc = run([*common, "--checkpoint", "latest", "--max_iterations", "2"], timeout=300, env=single_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"[INFO] resumed from {first / 'model_0.pt'} at iteration 1" in proc.stdout
    assert "[INFO] rank 0/1: stepped 192 env-steps" in proc.stdout  # 1 iteration x 24 steps x 8 envs
