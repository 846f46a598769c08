"""Issue 38, item 5: ``mgpu-lab play`` checks its input before loading anything (the device, the counts against
the memory they need), and a refusal is exactly one line: what the libraries print while a checkpoint loads
stays off the terminal. In-process: play.py's parser and :func:`mgpu_lab.train.play.main`; loading is a trap
where nothing may load."""

from __future__ import annotations

import logging
import os
import sys
import warnings
from pathlib import Path

import pytest
from mgpu_testing import REPO
from mgpu_testing.docs import load_script

from mgpu_lab.core.errors import UsageError
from mgpu_lab.train import play, play_input

PARSER = load_script(REPO / "scripts" / "reinforcement_learning" / "play.py", "_mgpu_play_hostile").build_parser


def run_play(capfd: pytest.CaptureFixture, *args: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr), both as the terminal sees them (file descriptors included)."""
    try:
        code = play.main(PARSER().parse_args(list(args)))
    except SystemExit as exc:
        code = exc.code
    out, err = capfd.readouterr()
    return code, out, err


def refused(capfd: pytest.CaptureFixture, *args: str) -> str:
    code, out, err = run_play(capfd, *args)
    assert code == 2 and out == "", (code, out, err)
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith("mgpu-lab play: error: "), err
    return err.strip().removeprefix("mgpu-lab play: error: ")


@pytest.fixture
def nothing_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    def trap(*args: object, **kwargs: object) -> None:
        raise AssertionError("play loaded something before refusing its input")

    monkeypatch.setattr(play, "resolve_checkpoint", trap)
    monkeypatch.setattr(play, "_load", trap)


@pytest.mark.parametrize("device", ["", " ", "gpu", "cuda:x", "cuda:-1", "cuda0", "cpu:0", "tpu", "cuda:1:2"])
def test_a_malformed_device_is_refused(device: str, nothing_loads, capfd) -> None:
    line = refused(capfd, "--device", device)
    assert line == f"--device {device!r}: expected cpu, cuda or cuda:N", line


def test_cuda_where_there_is_none_is_refused(nothing_loads, capfd, monkeypatch) -> None:
    from mgpu_lab.train import dist

    monkeypatch.setattr(dist, "cuda_available", lambda: False)
    assert refused(capfd, "--device", "cuda:0") == "--device cuda:0: CUDA is not available here; use --device cpu"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--num_envs", "1000000000"],
            "--num_envs 1000000000 --num_episodes 100: playing Toy-Cartpole-v0 needs at least 426.0 GB on cpu "
            "(426 bytes per env), and 8.0 GB is available; give --num_envs 18779314 or fewer",
        ),
        (
            ["--num_episodes", "2000000000"],
            "--num_envs 64 --num_episodes 2000000000: playing Toy-Cartpole-v0 needs at least 240.0 GB on cpu",
        ),
        (
            ["--num_envs", "1000000000", "--task", "Toy-Pendulum-SwingUp-v0"],
            "--num_envs 1000000000 --num_episodes 100: playing Toy-Pendulum-SwingUp-v0 needs at least 380.0 GB",
        ),
    ],
)
def test_counts_that_cannot_fit_are_refused_with_the_memory_they_need(
    args: list[str], expected: str, nothing_loads, capfd, monkeypatch
) -> None:
    monkeypatch.setattr(play, "available_memory", lambda device: 8 * 10**9)
    line = refused(capfd, "--device", "cpu", *args)
    assert line.startswith(expected), line


def test_this_machines_memory_is_read(nothing_loads, capfd) -> None:
    available = play_input.available_memory("cpu")
    if available is None or available > 400 * 10**9:
        pytest.skip("this machine's free memory cannot be read, or holds a billion envs")
    line = refused(capfd, "--device", "cpu", "--num_envs", "1000000000")
    assert "needs at least 426.0 GB on cpu" in line and "is available" in line, line


def test_counts_that_fit_are_not_refused(capfd, monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(play, "available_memory", lambda device: 8 * 10**9)
    line = refused(capfd, "--device", "cpu", "--num_envs", "1000", "--log_root", str(tmp_path))
    assert line.startswith("--checkpoint latest: no rsl_rl checkpoint"), line  # it got past the counts


def test_what_loading_prints_stays_off_the_terminal_when_it_is_refused(capfd, monkeypatch, tmp_path: Path) -> None:
    """A library's print, warning, log line and C-level write while a checkpoint of another task loads."""
    checkpoint = tmp_path / "model_1.pt"
    checkpoint.write_bytes(b"x")

    def chatty_load(args, path, device):
        print("[skrl:INFO] Seed: 42")
        print("build mlp: 4", file=sys.stderr)
        warnings.warn("torch.jit.script is deprecated", FutureWarning, stacklevel=1)
        logging.getLogger("rsl_rl").warning("observation sets resolved")
        os.write(2, b"[W1204 c10d] a C++ warning\n")
        raise UsageError(f"--checkpoint {path}: does not fit these models (size mismatch)")

    monkeypatch.setattr(play, "_load", chatty_load)
    line = refused(capfd, "--device", "cpu", "--checkpoint", str(checkpoint))
    assert line == f"--checkpoint {checkpoint}: does not fit these models (size mismatch)", line
    print("after")  # the terminal's streams are back
    os.write(1, b"fd after\n")
    assert capfd.readouterr().out == "after\nfd after\n"


def test_what_loading_printed_is_shown_after_an_unforeseen_failure(capfd, monkeypatch, tmp_path: Path) -> None:
    checkpoint = tmp_path / "model_1.pt"
    checkpoint.write_bytes(b"x")

    def broken_load(args, path, device):
        print("the library's own explanation", file=sys.stderr)
        raise KeyError("unforeseen")

    monkeypatch.setattr(play, "_load", broken_load)
    with pytest.raises(KeyError):
        play.main(PARSER().parse_args(["--device", "cpu", "--checkpoint", str(checkpoint)]))
    assert "the library's own explanation" in capfd.readouterr().err


def test_running_out_of_memory_anyway_is_one_line(capfd, monkeypatch, tmp_path: Path) -> None:
    checkpoint = tmp_path / "model_1.pt"
    checkpoint.write_bytes(b"x")

    def too_big(args, path, device):
        raise MemoryError("Unable to allocate 14.9 GiB for an array")

    monkeypatch.setattr(play, "_load", too_big)
    line = refused(capfd, "--device", "cpu", "--checkpoint", str(checkpoint))
    assert line.startswith("--num_envs 64: out of memory on cpu (Unable to allocate 14.9 GiB"), line
