"""Flight recorder runs shared by the session (:func:`mgpu_testing.once.once`): the rehearsed hang of the built-in
trainer that tests/test_trace_e2e.py checks and the docs quote (tests/test_quoted_outputs.py, ``<hang-run>``), and
the dumps a plain torch.distributed script writes through the rank side's own writer (healthy ones, and ones where
the ranks posted different collectives)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mgpu_testing import PYTHON, REPO, free_port, run
from mgpu_testing.once import once
from mgpu_testing.probe import assert_nothing_left, tagged_env
from mgpu_testing.training import LAUNCHER, TASK

#: The rehearsed hang: rank 1 waits forever at iteration 2; the watchdog fires after 5 s without progress.
HANG = ["--rehearse_fault", "hang:1:2", "--hang_timeout", "5"]
#: The script that posts collectives on two gloo ranks and dumps through mgpu_lab.health.flight_recorder.
POSTER = REPO / "tests" / "fixtures" / "trace" / "post_collectives.py"


def _hang(folder: Path) -> dict:
    env, tag = tagged_env()
    cmd = [PYTHON, LAUNCHER, "--num_gpus", "2", "--device", "cpu", "--task", TASK, "--num_envs", "8"]
    cmd += ["--max_iterations", "6", "--master_port", str(free_port()), "--log_root", str(folder / "logs"), *HANG]
    proc = run(cmd, timeout=300, env=env, cwd=folder)
    assert_nothing_left(tag)
    (run_dir,) = (folder / "logs" / "rsl_rl" / TASK).iterdir()
    return {"rc": proc.returncode, "err": proc.stderr, "run": str(run_dir)}


def hang_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """{"rc", "err", "run"}: the launcher's exit status and stderr, and the run folder of the rehearsed hang."""
    return once(tmp_path_factory, "trace-hang", _hang)


def _posted(folder: Path) -> dict:
    env, tag = tagged_env(PYTHONPATH=str(REPO / "src"))
    cmd = [PYTHON, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port())]
    proc = run([*cmd, str(POSTER), str(folder)], timeout=180, env=env, cwd=folder)
    assert_nothing_left(tag)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"healthy": str(folder / "healthy"), "differ": str(folder / "differ")}


def posted_dumps(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """{"healthy", "differ"}: folders of two gloo ranks' dumps, alike, and with a different 5th collective."""
    return once(tmp_path_factory, "trace-posted", _posted)
