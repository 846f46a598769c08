"""The flight recorder end to end: real ranks dump it, ``mgpu-lab trace`` reads what they wrote.

One rehearsed hang of the built-in trainer (two gloo ranks, ``--rehearse_fault hang:1:2``, ``--hang_timeout 5``;
shared with the quoted-output test through :mod:`mgpu_testing.flight`): every rank leaves its dump in the run
folder before the watchdog stops the job, the report names the folder, and ``mgpu-lab trace`` names rank 1 and
the all_reduce it never posted. One run of a plain torch.distributed script (two gloo ranks) writes healthy dumps
and dumps where the ranks posted different collectives, through the same rank-side writer. The ``--train_script``
job (a DDP script whose rank 1 stops calling collectives) is read in tests/test_any_script_e2e.py, from its
stalled run.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from mgpu_testing.flight import hang_run, posted_dumps

from mgpu_lab.cli import main as mgpu_lab_cli
from mgpu_lab.health.flight_recorder import FOLDER

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def hang(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return hang_run(tmp_path_factory)


@pytest.fixture(scope="module")
def posted(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return posted_dumps(tmp_path_factory)


def trace(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(mgpu_lab_cli, ["trace", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout, result.stderr


def test_a_hang_leaves_one_dump_per_rank_and_the_report_names_the_folder(hang: dict) -> None:
    assert hang["rc"] == 3, hang["err"][-3000:]
    run = Path(hang["run"])
    assert sorted(p.name for p in (run / FOLDER).iterdir()) == ["gloo_rank_0", "gloo_rank_1"]
    assert (
        f"[ERROR] watchdog: flight recorder dumps of 2 rank(s) in {run / FOLDER}; read them with: mgpu-lab trace {run}"
        in hang["err"].splitlines()
    ), hang["err"][-3000:]


def test_trace_names_rank_1_and_the_collective_it_never_posted(hang: dict) -> None:
    code, out, err = trace(hang["run"])
    assert code == 1, out + err
    last = out.splitlines()[-1]
    assert re.fullmatch(
        r"mgpu-lab trace: rank 1 never posted collective #(\d+) \(all_reduce \[\[\d+\]\] \w+\) of process group 0", last
    ), out
    seq = int(re.findall(r"#(\d+)", last)[0])
    assert re.search(
        rf"rank 0 posted #{seq} all_reduce .* \(not completed\), from .*/mgpu_lab/train/\w+\.py:\d+ in \w+", out
    ), out
    assert f"rank 1 never posted it; its last in this group: #{seq - 1} " in out, out
    assert err == ""


def test_trace_latest_finds_the_hang(hang: dict) -> None:
    logs = Path(hang["run"]).parents[2]
    code, out, _ = trace("--log_root", str(logs))
    assert code == 1 and f"in {Path(hang['run']) / FOLDER}" in out.splitlines()[0], out


def test_damaged_real_dumps_are_one_line_and_exit_2(hang: dict, tmp_path: Path) -> None:
    copy = tmp_path / "run"
    shutil.copytree(Path(hang["run"]) / FOLDER, copy / FOLDER)
    dump = copy / FOLDER / "gloo_rank_1"
    dump.write_bytes(dump.read_bytes()[:-40])
    code, out, err = trace(str(copy))
    assert code == 2 and out == "", out
    assert err.splitlines() == [f"mgpu-lab trace: error: {dump}: truncated (the pickle ends early)"]


def test_healthy_dumps_exit_0(posted: dict) -> None:
    code, out, err = trace(posted["healthy"])
    assert code == 0, out + err
    assert "mgpu-lab trace: all 2 ranks agree: 4 collective(s) in 1 process group(s), posted alike" in out, out


def test_a_different_collective_is_named_with_its_frame(posted: dict) -> None:
    code, out, _ = trace(posted["differ"])
    assert code == 1, out
    assert "mgpu-lab trace: rank 1 posted a different collective #5 from the others" in out, out
    assert re.search(r"rank 0 posted #5 all_reduce \[\[8\]\] Float .*post_collectives\.py:\d+ in main", out), out
    assert re.search(r"rank 1 posted #5 broadcast \[\[4\]\] Float .*post_collectives\.py:\d+ in main", out), out
