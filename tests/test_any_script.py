"""``--train_script`` / ``-m`` in-process: the command, what is skipped and refused; the rank entry, the collective
tracker (a one-rank gloo group in this process, DDP included), timing windows and the straggler verdict."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from mgpu_testing import REPO, free_port, loopback_env
from mgpu_testing.docs import load_script

from mgpu_lab.health import heartbeat, rank_entry, timing
from mgpu_lab.health.rank_progress import Fault, parse_faults
from mgpu_lab.launch import any_script, launcher

LAUNCHER = REPO / "scripts" / "reinforcement_learning" / "train_multigpu.py"
TRAIN = str(REPO / "scripts" / "reinforcement_learning" / "train.py")
SCRIPT = load_script(LAUNCHER, "_mgpu_launcher_any_script")
DDP_SCRIPT = REPO / "tests" / "fixtures" / "any_script" / "ddp_train.py"


def command(*args: str) -> list[str]:
    cfg = launcher.make_config(SCRIPT.build_parser(), ["--dry_run", *args], train_script=TRAIN, environ=loopback_env())
    return launcher.build_command(cfg)


def refusal(capsys: pytest.CaptureFixture, *args: str) -> str:
    code = launcher.main(SCRIPT.build_parser(), list(args), train_script=TRAIN, environ=loopback_env())
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, (code, out, err)
    return err.strip()


# --- the launcher ------------------------------------------------------------------------------------------


def test_a_script_gets_every_unknown_argument_unchanged_through_the_rank_entry(tmp_path: Path) -> None:
    cmd = command(
        "--train_script",
        str(DDP_SCRIPT),
        "--num_gpus",
        "2",
        "--device",
        "cpu",
        "--job_log_root",
        str(tmp_path),
        "--task",
        "Not-A-Task",
        "--steps",
        "3",
    )
    tail = cmd[cmd.index(any_script.ENTRY) :]
    assert tail == [
        any_script.ENTRY,
        "--job_root",
        str(tmp_path),
        str(DDP_SCRIPT),
        "--device",
        "cpu",
        "--task",
        "Not-A-Task",
        "--steps",
        "3",
    ]  # train.py's checks skipped: its task list does not apply
    assert "--rl_library" not in cmd and "--distributed" not in cmd
    assert Path(any_script.ENTRY).is_file()


def test_a_module_runs_as_with_python_m(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "my_project").mkdir()
    (tmp_path / "my_project" / "__init__.py").write_text("")
    (tmp_path / "my_project" / "train.py").write_text("")
    monkeypatch.chdir(tmp_path)  # found as the ranks' python -m finds it: the working folder first
    cmd = command("-m", "my_project.train", "--num_gpus", "2", "--device", "cpu", "--lr", "3e-4")
    assert cmd[cmd.index(any_script.ENTRY) + 3 :] == ["-m", "my_project.train", "--device", "cpu", "--lr", "3e-4"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--continue_run", "latest"], "--continue_run with ddp_train.py: the launcher knows where train.py keeps"),
        (["--continue_run=latest"], "--continue_run with ddp_train.py:"),
        (["--checkpoint", "latest"], "--checkpoint latest with ddp_train.py: the launcher cannot know where"),
    ],
)
def test_what_depends_on_train_pys_run_layout_is_refused(capsys, args: list[str], expected: str) -> None:
    err = refusal(capsys, "--train_script", str(DDP_SCRIPT), "--num_gpus", "2", "--device", "cpu", *args)
    assert err.startswith(f"mgpu-lab train_multigpu: error: {expected}"), err


def test_a_checkpoint_file_goes_to_the_script(tmp_path: Path) -> None:
    cmd = command(
        "--train_script", str(DDP_SCRIPT), "--num_gpus", "2", "--device", "cpu", "--checkpoint", "model_100.pt"
    )
    assert cmd[-2:] == ["--checkpoint", "model_100.pt"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--train_script", "no/such/script.py"], "--train_script no/such/script.py: no such file"),
        (["--train_script", str(DDP_SCRIPT), "-m", "x.y"], "--train_script and -m/--train_module both name the script"),
        (["-m", "not a module"], "-m not a module: not a module name"),
    ],
)
def test_bad_script_options_are_refused_in_one_line(capsys, args: list[str], expected: str) -> None:
    err = refusal(capsys, *args, "--num_gpus", "2", "--device", "cpu")
    assert err.startswith(f"mgpu-lab train_multigpu: error: {expected}"), err


def test_help_says_which_options_apply_to_a_foreign_script() -> None:
    text = SCRIPT.build_parser().format_help()
    assert "Every launcher option applies except --rl_library" in " ".join(text.split())
    assert "not passed to a --train_script" in " ".join(text.split())


# --- the rank entry ------------------------------------------------------------------------------------------


def test_entry_arguments_and_job_folder_names() -> None:
    assert rank_entry.parse(["--job_root", "r", "s.py", "--x", "1"]) == ("r", "s.py", False, ["--x", "1"])
    assert rank_entry.parse(["-m", "pkg.mod", "-m", "y"]) == (None, "pkg.mod", True, ["-m", "y"])
    assert rank_entry.script_name("/isaac/scripts/reinforcement_learning/rsl_rl/train.py", False) == "rsl_rl_train"
    assert rank_entry.script_name("my_ddp.py", False) == "my_ddp"
    assert rank_entry.script_name("pkg.train.__main__", True) == "train"


def test_a_script_runs_as_main_with_its_own_argv_and_exit_status(tmp_path: Path, monkeypatch) -> None:
    script = tmp_path / "prog.py"
    script.write_text(
        "import sys\nassert __name__ == '__main__'\nprint(sys.argv, sys.path[0])\nsys.exit(int(sys.argv[1]))\n"
    )
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setattr(sys, "path", list(sys.path))
    with pytest.raises(SystemExit) as exc:
        rank_entry.run_target(str(script), False, ["7"])
    assert exc.value.code == 7
    assert sys.argv == [str(script), "7"] and sys.path[0] == str(tmp_path)


# --- the tracker, in a one-rank gloo group -------------------------------------------------------------------


@pytest.fixture()
def group(monkeypatch):
    import torch.distributed as dist

    from mgpu_lab.health.collectives import CollectiveTracker

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    tracker = CollectiveTracker().install()
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        yield tracker
    finally:
        dist.destroy_process_group()
        tracker.uninstall()


def settled(condition, seconds: float = 30.0) -> bool:
    """An async collective counts once its future's callback ran (on gloo's thread): wait for it, with a deadline."""
    import time

    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def test_python_collectives_sync_and_async_are_counted(group) -> None:
    import torch
    import torch.distributed as dist

    t = torch.ones(4)
    dist.all_reduce(t)
    dist.broadcast(t, src=0)
    dist.all_reduce(t, async_op=True).wait()
    assert settled(lambda: group.completed == 3 and group.inside is None), (group.completed, group.inside)
    assert group.wait_seconds() > 0


def test_ddp_gradient_all_reduce_is_counted_without_the_script_knowing(group) -> None:
    import torch
    from torch.nn.parallel import DistributedDataParallel

    model = DistributedDataParallel(torch.nn.Linear(8, 2))
    for _ in range(3):
        model(torch.randn(4, 8)).sum().backward()
    assert settled(lambda: group.completed >= 3 and group.inside is None)  # one bucket (at least) per backward


def test_a_scripts_own_comm_hook_is_kept_and_tracked(group) -> None:
    import torch
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel

    calls = []

    def my_hook(state, bucket):
        calls.append(1)
        return default_hooks.allreduce_hook(state, bucket)

    model = DistributedDataParallel(torch.nn.Linear(8, 2))
    model.register_comm_hook(None, my_hook)
    model(torch.randn(4, 8)).sum().backward()
    assert calls and settled(lambda: group.completed >= 1)


def test_uninstall_restores_torch_distributed(group) -> None:
    import torch.distributed as dist

    assert hasattr(dist.all_reduce, "__wrapped__")
    group.uninstall()
    assert not hasattr(dist.all_reduce, "__mgpu_lab_original__")


# --- timing and the verdict ----------------------------------------------------------------------------------


def windows(rank: int, shares: list[float], collectives: int = 4) -> list[timing.Window]:
    return [timing.Window(rank, "n", i, i, 0.0, 1.0, 1.0 - s, s, collectives) for i, s in enumerate(shares)]


def test_a_rank_persistently_slower_is_named() -> None:
    found = {
        0: windows(0, [0.9, 0.3, 0.35, 0.3, 0.4, 0.3]),
        1: windows(1, [0.2, 0.95, 0.9, 0.97, 0.92, 0.96]),
        2: windows(2, [0.5, 0.3, 0.32, 0.31, 0.3, 0.36]),
    }
    assert timing.verdict(found).slow == 1


def test_no_rank_is_named_when_they_take_turns_or_there_is_too_little() -> None:
    turns = {0: windows(0, [0.5, 0.9, 0.3, 0.9, 0.3, 0.9]), 1: windows(1, [0.5, 0.3, 0.9, 0.3, 0.9, 0.3])}
    assert timing.verdict(turns).slow is None
    short = {0: windows(0, [0.3, 0.3]), 1: windows(1, [0.9, 0.9])}
    assert timing.verdict(short).slow is None and "too little" in timing.verdict(short).reason
    idle = {0: windows(0, [0.3] * 6, collectives=0), 1: windows(1, [0.9] * 6, collectives=0)}
    assert timing.verdict(idle).slow is None  # windows without a collective say nothing of pace


def test_the_log_writes_into_the_run_folder_once_known(tmp_path: Path) -> None:
    class Tracker:
        completed, wait = 0, 0.0

        def wait_seconds(self) -> float:
            return self.wait

    clock = iter([0.0, 1.0, 2.0, 3.0]).__next__
    supervise, run = tmp_path / "sup", tmp_path / "run"
    supervise.mkdir()
    run.mkdir()
    tracker = Tracker()
    log = timing.TimingLog(tracker, 3, "n", str(supervise), clock=clock)
    tracker.completed, tracker.wait = 5, 0.25
    log.close_window(0)  # no run folder yet: kept
    assert not (run / "timing").exists()
    heartbeat.write_run_dir(supervise, run)
    log.close_window(1)
    (first, second) = timing.read(run)[3]
    assert (first.wait_s, first.compute_s, first.collectives) == (0.25, 0.75, 5)
    assert (second.wait_s, second.collectives) == (0.0, 0)


def test_the_slow_fault_parses_with_its_seconds() -> None:
    (fault,) = parse_faults("slow:1:2:0.3")
    assert fault == Fault("slow", 1, 2, seconds=0.3) and "0.3 s per iteration" in fault.describe()
    with pytest.raises(ValueError, match="slow takes seconds"):
        parse_faults("slow:1:2:0")
    assert os.path.basename(any_script.ENTRY) == "rank_entry.py"


def test_timing_without_any_run_is_one_line_exit_2(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from mgpu_lab.cli import main as mgpu_lab_cli

    result = CliRunner().invoke(mgpu_lab_cli, ["timing", "latest", "--log_root", str(tmp_path)])
    assert result.exit_code == 2
    assert (
        result.stderr.startswith("mgpu-lab timing: error: no per-rank timing under")
        and len(result.stderr.splitlines()) == 1
    )


def test_the_watchdog_names_the_scripts_line_not_the_trackers() -> None:
    from mgpu_lab.health.stack_text import Frame, locate

    frames = [
        Frame("/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", 4181, "all_reduce"),
        Frame("/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", 83, "wrapper"),
        Frame("/repo/src/mgpu_lab/health/collectives.py", 137, "collective"),
        Frame("/home/me/train.py", 25, "average_gradients"),
    ]
    assert locate(frames) == ("all_reduce", frames[3])
