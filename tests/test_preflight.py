"""Refusals the launcher makes before any rank starts (mgpu_lab.train.checks.check_resume, worded in mgpu_lab.runs.preflight), and the /dev/shm estimate's
rank count without --num_gpus (mgpu_lab.launch.shm_ranks).

The launcher runs in this process with its own parser (tests/test_launcher_commands.py's helpers): exit 2 with
one line and nothing on stdout means no torchrun was started (it would print its banner and the ranks' lines).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mgpu_testing import PYTHON, REPO, run
from mgpu_testing.output_lines import NOTHING_LEFT
from mgpu_testing.runs import WITH_HEALTHY_RUN, copy_run
from mgpu_testing.training import TASK, single_env
from test_launcher_commands import config, reject

from mgpu_lab.launch.shm_ranks import ranks_on_node, slurm_per_node
from mgpu_lab.runs.preflight import nothing_left

LAUNCHER = str(REPO / "scripts" / "reinforcement_learning" / "train_multigpu.py")


def test_latest_without_a_checkpoint_is_refused_before_any_rank(tmp_path: Path, capsys) -> None:
    logs = tmp_path / "logs"
    line = reject(
        "--num_gpus", "2", "--device", "cpu", "--checkpoint", "latest", "--log_root", str(logs), capsys=capsys
    )
    assert line == (
        f"mgpu-lab train_multigpu: error: --checkpoint latest: no rsl_rl checkpoint of {TASK} under "
        f"{logs.resolve() / 'rsl_rl' / TASK}"
    )
    assert not logs.exists()


def test_a_dry_run_leaves_latest_to_the_job(tmp_path: Path) -> None:
    """Like --continue_run's folder, `latest` is looked up when the job runs: a dry run prints the command."""
    cfg = config(
        "--dry_run", "--num_gpus", "2", "--device", "cpu", "--checkpoint", "latest", "--log_root", str(tmp_path)
    )
    assert "--checkpoint" in cfg.forwarded


def test_the_refusal_says_max_iterations_is_the_runs_total() -> None:
    assert str(nothing_left("--checkpoint c.pt:", 100, 100)) == (
        "--checkpoint c.pt: already at iteration 100 and --max_iterations 100 counts from iteration 0: nothing left "
        "to train (--max_iterations is the run's total, not a count added to the resumed iteration as in Isaac "
        "Lab's own train.py: give --max_iterations 200 for 100 more)"
    )


@pytest.mark.e2e
@pytest.mark.timeout(WITH_HEALTHY_RUN)
@pytest.mark.parametrize("how", ["latest", "path"])
def test_nothing_left_to_train_is_refused_before_any_rank(how: str, tmp_path: Path, healthy_run, capsys) -> None:
    healthy = healthy_run("rsl_rl")
    logs = tmp_path / "logs"
    run_dir = copy_run(healthy, logs)
    newest = run_dir / f"model_{healthy.iterations - 1}.pt"  # rsl_rl's model_<i>.pt holds iterations 0..i
    given = "latest" if how == "latest" else str(newest)
    line = reject(
        "--num_gpus",
        "2",
        "--device",
        "cpu",
        "--checkpoint",
        given,
        "--log_root",
        str(logs),
        "--max_iterations",
        str(healthy.iterations),
        capsys=capsys,
    )
    n = healthy.iterations
    assert line == (
        f"mgpu-lab train_multigpu: error: --checkpoint {newest.resolve()}: already at iteration {n} and "
        f"--max_iterations {n} counts from iteration 0: nothing left to train (--max_iterations is the "
        f"run's total, not a count added to the resumed iteration as in Isaac Lab's own train.py: give "
        f"--max_iterations {2 * n} for {n} more)"
    )
    assert NOTHING_LEFT.real.fullmatch(line), "the docs quote this line through the same template"
    assert [p.name for p in (logs / "rsl_rl" / TASK).iterdir()] == [run_dir.name], "nothing written"


@pytest.mark.e2e
def test_the_command_prints_one_line_and_no_torchrun_banner(tmp_path: Path) -> None:
    proc = run(
        [PYTHON, LAUNCHER, "--num_gpus", "2", "--device", "cpu", "--checkpoint", "latest", "--log_root", str(tmp_path)],
        timeout=300,
        env=single_env(),
    )
    assert proc.returncode == 2 and proc.stdout == "", proc
    assert proc.stderr.splitlines() == [
        f"mgpu-lab train_multigpu: error: --checkpoint latest: no rsl_rl checkpoint of {TASK} under "
        f"{tmp_path.resolve() / 'rsl_rl' / TASK}"
    ]


# ------------------------------------------------------------------------------------------- /dev/shm


def shm_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of a launch whose /dev/shm is ``tmp_path`` with Docker's 64 MiB free (see ``small_shm``)."""
    return dict(extra)


@pytest.fixture(autouse=True)
def small_shm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Docker's default /dev/shm (64 MiB free) at ``tmp_path``, through shm_warning's own parameters."""
    import functools

    from mgpu_lab.launch import shm_ranks

    monkeypatch.setattr(
        shm_ranks, "shm_warning", functools.partial(shm_ranks.shm_warning, path=str(tmp_path), free_bytes=64 << 20)
    )


def test_a_pytorchjob_without_num_gpus_is_warned_about_dockers_shm(tmp_path: Path) -> None:
    """PET_NPROC_PER_NODE=4 in 64 MiB: the PyTorchJob's ranks count, as they do with --num_gpus 4."""
    cfg = config("--dry_run", gpus="0,1,2,3", **shm_env(tmp_path, PET_NPROC_PER_NODE="4"))
    (warning,) = [line for line in cfg.inferred if line.startswith("[WARN]")]
    assert "less than the 74 MiB NCCL needs for 4 rank(s) on this node" in warning


def test_slurms_tasks_per_node_count_when_num_gpus_is_not_given(tmp_path: Path) -> None:
    cfg = config("--dry_run", gpus="0,1", **shm_env(tmp_path, SLURM_JOB_ID="7", SLURM_NTASKS_PER_NODE="4"))
    assert any("for 4 rank(s) on this node" in line for line in cfg.inferred), cfg.inferred
    given = config(
        "--dry_run", "--num_gpus", "2", gpus="0,1", **shm_env(tmp_path, SLURM_JOB_ID="7", SLURM_NTASKS_PER_NODE="4")
    )
    assert not any(line.startswith("[WARN]") for line in given.inferred), "--num_gpus 2 fits in 64 MiB"


@pytest.mark.parametrize(
    ("nproc", "environ", "visible", "ranks"),
    [
        ("3", {}, 8, 3),  # --num_gpus, or the PyTorchJob's PET_NPROC_PER_NODE as the launch configuration read it
        ("4", {}, 8, 4),
        ("gpu", {}, 2, 2),
        ("cpu", {}, 2, 0),
        (None, {}, 2, 2),  # neither: one rank per visible GPU
        ("gpu", {"SLURM_TASKS_PER_NODE": "4(x2)"}, 2, 4),
        ("gpu", {"SLURM_GPUS_ON_NODE": "8"}, 0, 8),
        ("auto", {}, 2, 2),
    ],
)
def test_ranks_on_node(nproc: str | None, environ: dict[str, str], visible: int, ranks: int) -> None:
    assert ranks_on_node(nproc, environ, lambda: visible) == ranks


def test_slurm_per_node_reads_slurms_notation() -> None:
    assert slurm_per_node({"SLURM_TASKS_PER_NODE": "2(x3),1"}) == 2
    assert slurm_per_node({}) == 0
