"""Hostile command lines for train.py: every bad input is one line on stderr, exit 2, and nothing written.
In-process: train.py's parser and the trainer's ``main`` (the refusals all come before training).

Threats covered here:

- seeds outside what every library accepts: ``--seed -1`` (skrl, rl_games crashed), ``2**32`` and
  ``2**64`` (NumPy's seeding crashed rsl_rl, skrl, rl_games), and a seed whose rank offset overflows;
- ``--num_envs 10**9``: refused up front from a memory estimate, naming what fits (it ran out of
  memory after 41 s);
- a 300-character ``--run_name`` (file name too long), and run names that are not a folder name
  (``a/b``, ``..``, control characters);
- ``--log_root`` that is a regular file, that lies under a file, or that is read-only;
- argparse errors (typos, bad numbers): one line with a pointer to ``--help``, not the usage block.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from mgpu_testing.training import assert_one_line_error, single_env, train_in_process


def train(
    tmp_path: Path, library: str, *args: str, env: dict[str, str] | None = None, log_root: Path | None = None
) -> subprocess.CompletedProcess:
    """In-process (every case here is refused before training); ``env`` supplies rank variables, if any."""
    root = log_root if log_root is not None else tmp_path / "logs"
    return train_in_process(
        [
            "--rl_library",
            library,
            "--device",
            "cpu",
            "--num_envs",
            "4",
            "--max_iterations",
            "1",
            *args,
            "--log_root",
            str(root),
        ],
        env,
    )


def nothing_written(tmp_path: Path) -> bool:
    return not (tmp_path / "logs").exists() or not [p for p in (tmp_path / "logs").rglob("*") if p.is_file()]


@pytest.mark.parametrize(
    ("library", "seed"),
    [
        ("skrl", "-1"),
        ("rl_games", "-1"),
        ("rsl_rl", str(2**32)),
        ("skrl", str(2**32)),
        ("rl_games", str(2**64)),
    ],
)
def test_seed_outside_numpy_range(tmp_path, library, seed):
    proc = train(tmp_path, library, "--seed", seed)
    assert_one_line_error(proc, "--seed must be between 0 and 4294967295")
    assert nothing_written(tmp_path)


def test_seed_plus_rank_offset_must_stay_in_range(tmp_path):
    env = single_env()
    env.update(LOCAL_RANK="0", RANK="0", WORLD_SIZE="4")  # rank 0 of 4, as torchrun would set
    proc = train(tmp_path, "rsl_rl", "--seed", str(2**32 - 2), "--distributed", env=env)
    assert_one_line_error(proc, "between 0 and 4294967292 (rank R seeds with seed + R, and 4 ranks")


def test_huge_num_envs_is_refused_up_front_with_what_fits(tmp_path):
    proc = train(tmp_path, "rsl_rl", "--num_envs", str(10**9))
    assert_one_line_error(proc, "--num_envs 1000000000 needs at least")
    assert "use at most" in proc.stderr
    assert nothing_written(tmp_path)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("x" * 300, "at most 200"),
        ("a/b", "not a plain folder name"),
        ("..", "not a plain folder name"),
        ("tab\there", "not a plain folder name"),
    ],
)
def test_run_names_that_cannot_be_a_folder(tmp_path, name, expected):
    assert_one_line_error(train(tmp_path, "rsl_rl", "--run_name", name), expected)
    assert not (tmp_path / "logs").exists()


@pytest.mark.parametrize("library", ["rsl_rl", "rl_games", "skrl"])
def test_log_root_is_a_file(tmp_path, library):
    blocker = tmp_path / "logs"
    blocker.write_text("not a folder")
    assert_one_line_error(train(tmp_path, library, log_root=blocker), "is a file")
    assert_one_line_error(train(tmp_path, library, log_root=blocker / "sub"), "is a file")
    assert blocker.read_text() == "not a folder"


@pytest.fixture
def read_only_dir(tmp_path):
    """A folder this process cannot write: chmod for a normal user; for root (who ignores modes) a read-only tmpfs."""
    path = tmp_path / "ro"
    path.mkdir()
    if os.geteuid() != 0:
        path.chmod(0o555)
        yield path
        path.chmod(0o755)
        return
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(path)], capture_output=True, timeout=30
    )
    if mounted.returncode != 0:
        pytest.skip(f"running as root without mount permission: {mounted.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], capture_output=True, timeout=30)


@pytest.mark.parametrize("library", ["rsl_rl", "rl_games", "skrl"])
def test_log_root_is_read_only(tmp_path, library, read_only_dir):
    proc = train(tmp_path, library, log_root=read_only_dir / "logs")
    assert_one_line_error(proc, f"cannot create folders in {read_only_dir}")
    assert not list(read_only_dir.iterdir())


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--nun_gpus", "2"], "unrecognized arguments: --nun_gpus 2"),
        (["--num_envs", "many"], "argument --num_envs: invalid int value: 'many'"),
        (["--seed", "1e3"], "argument --seed: invalid int value"),
    ],
)
def test_argparse_errors_are_one_line_with_a_help_pointer(tmp_path, args, expected):
    proc = train(tmp_path, "rsl_rl", *args)
    assert_one_line_error(proc, expected)
    assert proc.stderr.startswith("mgpu-lab train: error: ") and proc.stderr.rstrip().endswith("(see --help)")
