"""Isaac Lab 3.0 and this project side by side in one venv (``bash tests/isaaclab_real/setup_env.sh``): each one's
command answers ``--help`` (Isaac Lab's ``isaaclab``, this project's ``mgpu-lab``, which must not replace it) and
trains: Isaac Lab's own ``isaaclab train`` on the real Cartpole (CPU, offline assets) and this project's trainer.

A file of its own, apart from tests/test_isaaclab_real_e2e.py, so that the two run on two workers at once. Warp's
kernels for both (``isaaclab train`` compiles backward kernels too, another set than the per-rank trainer's) come
compiled from setup_env.sh; without that cache the first ``isaaclab train`` compiles them, minutes of one core.
Skipped without the venv, a failure under CI=true.
"""

from __future__ import annotations

import re
import sys

import pytest
from mgpu_testing import run
from mgpu_testing.isaaclab_real import CARTPOLE, Real, job, make_real

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.isaaclab,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Isaac Lab 3.0's wheels are for Linux here"),
]


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Real:
    return make_real(tmp_path_factory, "side_by_side")


def test_both_commands_answer_help_in_one_venv(real: Real) -> None:
    isaaclab = str(real.python.parent / "isaaclab")
    theirs = run([isaaclab, "--help"], timeout=120, env=real.env(), cwd=real.base)
    assert theirs.returncode == 0 and "train_multigpu" in theirs.stdout, theirs.stderr[-2000:]
    multigpu = run([isaaclab, "train_multigpu", "--help"], timeout=120, env=real.env(), cwd=real.base)
    assert multigpu.returncode == 0 and "--nproc_per_node" in multigpu.stdout, multigpu.stderr[-2000:]
    assert "stacks" not in theirs.stdout  # Isaac Lab's own command, not ours
    for ours_cmd in ([str(real.python.parent / "mgpu-lab")], [str(real.python), "-m", "mgpu_lab.cli"]):
        ours = run([*ours_cmd, "--help"], timeout=120, env=real.env(), cwd=real.base)
        assert ours.returncode == 0, ours.stderr[-2000:]
        assert all(word in ours.stdout for word in ("train_multigpu", "stacks", "timing")), ours.stdout


def test_both_commands_train_in_one_venv(real: Real) -> None:
    isaaclab = str(real.python.parent / "isaaclab")
    theirs = job(
        real,
        "theirs",
        [isaaclab, "train", "--rl_library", "rsl_rl", *CARTPOLE, "--max_iterations", "1", "--device", "cpu"]
        + ["agent.device=cpu"],
    )
    assert theirs.rc == 0, theirs.err[-3000:]
    assert re.search(r"Learning iteration 0/1\b", theirs.out), theirs.out[-3000:]
    assert list((theirs.cwd / "logs" / "rsl_rl" / "cartpole_direct").iterdir())
    ours = job(
        real,
        "ours",
        [str(real.python), "-m", "mgpu_lab.cli", "train", "--task", "Toy-Cartpole-v0", "--device", "cpu"]
        + ["--num_envs", "16", "--max_iterations", "2"],
    )
    assert ours.rc == 0, ours.err[-3000:]


#: the comparison table's rows marked *run* (docs/source/features/multi_gpu.rst, "Isaac Lab's launcher and this
#: one"): the same request to both launchers, each one's exit status and the words its one line must hold
ROWS = [
    (
        ["--num_gpus", "1", "--device", "cpu", "--rl_library", "rsl_rl", "--task", "Isaac-Cartpole-Direct"],
        (2, "no CUDA devices are visible"),
        (0, ""),
    ),
    (
        ["--num_gpus", "2", "--device", "cpu", "--rl_library", "rsl_rl", "--task", "Isaac-Cartpole-Direct"],
        (2, "no CUDA devices are visible"),
        (2, "Isaac Lab refuses distributed training on the CPU"),
    ),
    (
        ["--num_gpus", "cpu", "--device", "cpu", "--rl_library", "rsl_rl", "--task", "Isaac-Cartpole-Direct"],
        (0, ""),
        (2, "Isaac Lab refuses distributed training on the CPU"),
    ),
    (["--coordinator_address", "127.0.0.1:5000"], (2, "--coordinator_address is only supported"), (2, "JAX")),
]


@pytest.mark.parametrize("row", range(len(ROWS)))
def test_the_comparison_rows_marked_run(real: Real, row: int) -> None:
    """Each row the docs mark *run*: Isaac Lab's ``isaaclab train_multigpu`` and this project's, with --dry_run (what
    they refuse, they refuse before any rank; what they accept, the dry run shows)."""
    args, (their_rc, their_words), (our_rc, our_words) = ROWS[row]
    isaaclab = str(real.python.parent / "isaaclab")
    theirs = run([isaaclab, "train_multigpu", *args, "--dry_run"], timeout=120, env=real.env(), cwd=real.base)
    assert theirs.returncode == their_rc and their_words in theirs.stderr, (theirs.returncode, theirs.stderr[-2000:])
    ours_cmd = [str(real.python), "-m", "mgpu_lab.cli", "train_multigpu", "-m", "isaaclab_rl.entrypoints.multigpu"]
    ours = run([*ours_cmd, *args, "agent.device=cpu", "--dry_run"], timeout=120, env=real.env(), cwd=real.base)
    assert ours.returncode == our_rc and our_words in ours.stderr, (ours.returncode, ours.stderr[-2000:])
    assert "Traceback" not in theirs.stderr + ours.stderr
