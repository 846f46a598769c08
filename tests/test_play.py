"""``mgpu-lab play``: a checkpoint of every library, trained on 2 ranks, evaluated on one device.

Play runs in this process (play.py's own parser and :func:`mgpu_lab.train.play.main`), except skrl JAX and the
CLI's pass-through, which run as commands. The checkpoints are the session's healthy 2-rank runs
(tests/mgpu_testing/runs.py), copied, never trained again. Every ``mgpu-lab play`` command written in the skills
and docs runs here in its CPU form, and the lines the docs quote are matched against real output.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from mgpu_testing import PYTHON, REPO, run
from mgpu_testing.docs import load_script
from mgpu_testing.output_lines import PLAY_HEADER, PLAY_SUMMARY, lines_matching
from mgpu_testing.runs import WITH_HEALTHY_RUN, copy_run
from mgpu_testing.training import TASK, single_env

from mgpu_lab.train import play
from mgpu_lab.train.tasks import make_env

SCRIPT = REPO / "scripts" / "reinforcement_learning" / "play.py"
PARSER = load_script(SCRIPT, "_mgpu_play_under_test").build_parser


def header_lines(text: str) -> list[tuple[str, ...]]:
    return lines_matching(PLAY_HEADER, text)


def summary_lines(text: str) -> list[tuple[str, ...]]:
    return lines_matching(PLAY_SUMMARY, text)


def play_in_process(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str, str]:
    """play.py's parser and main in this process: (exit status, stdout, stderr)."""
    try:
        code = play.main(PARSER().parse_args(list(args)))
    except SystemExit as exc:  # argparse's own refusals (the script's one-line hook)
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def assert_refused(result: tuple[int, str, str], expected: str) -> None:
    code, out, err = result
    assert code == 2 and out == "", result
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mgpu-lab play: error: ") and expected in lines[0], err


def files_under(root: Path) -> set[tuple[str, int]]:
    return {(str(p.relative_to(root)), p.stat().st_mtime_ns) for p in root.rglob("*")}


# ------------------------------------------------------------------------------------------ in this process


def test_each_env_plays_its_share_and_the_first_k_count() -> None:
    """6 episodes on 4 envs: every env's first two episodes are played, the first 6 in (episode, env) order kept."""
    env = make_env(TASK, 4, "cpu", seed=3)
    returns = play.play_episodes(env, lambda obs: torch.zeros(obs.shape[0], 1), 6)
    assert len(returns) == 6
    again = play.play_episodes(make_env(TASK, 4, "cpu", seed=3), lambda obs: torch.zeros(obs.shape[0], 1), 6)
    assert returns == again
    first_round = play.play_episodes(make_env(TASK, 4, "cpu", seed=3), lambda obs: torch.zeros(obs.shape[0], 1), 4)
    assert returns[:4] == first_round, "the first episode of every env comes first"


def test_the_summary_line_is_mean_and_population_spread() -> None:
    summary = play.PlayResult((1.0, 3.0), 7).summary()
    assert summary == "[INFO] return over 2 episodes: mean 2.00, std 1.00, min 1.00, max 3.00"
    assert summary_lines(summary) == [("2", "2.00", "1.00", "1.00", "3.00")]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--num_episodes", "0"], "--num_episodes must be >= 1, got 0"),
        (["--num_envs", "-1"], "--num_envs must be >= 1, got -1"),
        (["--task", "Toy-Cartpol-v0"], "did you mean Toy-Cartpole-v0?"),
        (["--ml_framework", "jax"], "--ml_framework jax is for skrl only, not rsl_rl"),
        (["--seed", "-1"], "--seed must be between 0 and"),
        (["--checkpoint", "/no/such/file.pt"], "--checkpoint /no/such/file.pt: no such file"),
        (["--rl_library", "sb3"], "argument --rl_library: invalid choice"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], expected: str, tmp_path: Path, capsys) -> None:
    assert_refused(play_in_process(capsys, "--device", "cpu", "--log_root", str(tmp_path), *args), expected)
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_ends_with_one_line_and_130(tmp_path: Path, capsys, monkeypatch) -> None:
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(play, "play", interrupted)
    code, out, err = play_in_process(capsys, "--device", "cpu", "--log_root", str(tmp_path))
    assert (code, out, err) == (130, "", "mgpu-lab play: interrupted\n")


def test_latest_without_a_checkpoint_is_refused_with_trainings_words(tmp_path: Path, capsys) -> None:
    assert_refused(
        play_in_process(capsys, "--device", "cpu", "--log_root", str(tmp_path / "logs")),
        f"--checkpoint latest: no rsl_rl checkpoint of {TASK} under {tmp_path / 'logs' / 'rsl_rl' / TASK}",
    )
    assert not (tmp_path / "logs").exists()


# ------------------------------------------------------------------------------------------ real checkpoints


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    return tmp_path / "logs"


@pytest.mark.e2e
@pytest.mark.timeout(WITH_HEALTHY_RUN)
@pytest.mark.parametrize("library", ["rsl_rl", "rl_games", "skrl"])
def test_a_two_rank_checkpoint_plays_the_same_numbers_twice(library: str, logs: Path, healthy_run, capsys) -> None:
    healthy = healthy_run(library)
    run_dir = copy_run(healthy, logs)
    before = files_under(logs)
    common = (
        "--rl_library",
        library,
        "--device",
        "cpu",
        "--num_envs",
        "8",
        "--num_episodes",
        "12",
        "--log_root",
        str(logs),
    )
    first = play_in_process(capsys, *common, "--seed", "3")
    assert first[0] == 0, first
    (header,) = header_lines(first[1])
    assert header[0] == library and Path(header[1]).is_relative_to(run_dir) and int(header[2]) == healthy.iterations
    (summary,) = summary_lines(first[1])
    assert int(summary[0]) == 12 and float(summary[3]) <= float(summary[1]) <= float(summary[4])
    second = play_in_process(capsys, *common, "--seed", "3", "--checkpoint", str(run_dir))  # a run folder
    assert summary_lines(second[1]) == [summary], "the same seed plays the same episodes"
    by_file = play_in_process(capsys, *common, "--seed", "3", "--checkpoint", header[1])
    assert summary_lines(by_file[1]) == [summary]
    assert files_under(logs) == before, "play writes nothing"


@pytest.mark.e2e
@pytest.mark.timeout(WITH_HEALTHY_RUN)
def test_a_checkpoint_of_another_library_is_refused(logs: Path, healthy_run, capsys) -> None:
    run_dir = copy_run(healthy_run("rsl_rl"), logs)
    newest = max(run_dir.glob("model_*.pt"), key=lambda p: int(p.stem.split("_")[1]))
    assert_refused(
        play_in_process(capsys, "--rl_library", "rl_games", "--device", "cpu", "--checkpoint", str(newest)),
        "rsl_rl wrote it; give --rl_library rsl_rl",
    )
    assert_refused(
        play_in_process(capsys, "--rl_library", "rl_games", "--device", "cpu", "--checkpoint", str(run_dir)),
        "a folder without a rl_games checkpoint",
    )


@pytest.mark.e2e
@pytest.mark.timeout(WITH_HEALTHY_RUN)
def test_skrl_jax_plays_through_the_cli_twice_alike(logs: Path, healthy_run) -> None:
    copy_run(healthy_run("skrl-jax"), logs)
    cmd = [
        PYTHON,
        "-m",
        "mgpu_lab.cli",
        "play",
        "--rl_library",
        "skrl",
        "--ml_framework",
        "jax",
        "--device",
        "cpu",
        "--num_envs",
        "8",
        "--num_episodes",
        "8",
        "--log_root",
        str(logs),
    ]
    outs = [run(cmd, timeout=300, env=single_env(JAX_PLATFORMS="cpu")) for _ in range(2)]
    assert [p.returncode for p in outs] == [0, 0], outs[0].stderr[-3000:]
    assert summary_lines(outs[0].stdout) == summary_lines(outs[1].stdout) != []
    assert ".msgpack" in header_lines(outs[0].stdout)[0][1]


@pytest.mark.e2e
@pytest.mark.timeout(WITH_HEALTHY_RUN)
@pytest.mark.parametrize("library", ["rsl_rl", "rl_games", "skrl"])
def test_a_checkpoint_of_another_task_is_one_line(library: str, logs: Path, healthy_run, capfd) -> None:
    """Issue 38: the libraries' warnings and log lines while it loads stay off the terminal."""
    run_dir = copy_run(healthy_run(library), logs)
    code = play.main(
        PARSER().parse_args(
            [
                "--rl_library",
                library,
                "--task",
                "Toy-Pendulum-SwingUp-v0",
                "--device",
                "cpu",
                "--checkpoint",
                str(run_dir),
            ]
        )
    )
    out, err = capfd.readouterr()
    assert code == 2 and out == "", (code, out, err)
    assert len(err.splitlines()) == 1 and "does not fit these models" in err, err
