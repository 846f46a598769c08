"""Issue 38, item 4: ``mgpu-lab timing`` and ``mgpu-lab stacks`` on damaged run folders. The usable windows are
reported with a line naming each file and how many lines were skipped, or one line and exit 2; never a
traceback, never a hang (only regular files are opened, and what is read is bounded). In-process, through the
click command (timing) and :func:`mgpu_lab.health.live_stacks.request` (stacks)."""

from __future__ import annotations

import io
import json
import os
import socket
import threading
import time
from dataclasses import asdict
from pathlib import Path

import pytest
from click.testing import CliRunner

from mgpu_lab.cli import main as mgpu_lab_cli
from mgpu_lab.health import live_stacks, timing
from mgpu_lab.runs import continue_run

GOOD = 6  # windows per rank: enough for a verdict


def window(r: int, n: int, **change: object) -> dict:
    share = 0.9 if r == 1 else 0.3
    w = timing.Window(r, "node0", n, n, 1000.0 + n, 1.0, round(1 - share, 3), share, 4)
    return {**asdict(w), **change}


def run_folder(tmp_path: Path, rank0: bytes | None) -> Path:
    """A run folder: rank 1's file whole, rank 0's file the bytes given (None: left for the test to make)."""
    folder = tmp_path / "run"
    (folder / "timing").mkdir(parents=True)
    lines = [json.dumps(window(1, n)) for n in range(GOOD)]
    (folder / "timing" / "rank1.jsonl").write_text("\n".join(lines) + "\n")
    if rank0 is not None:
        (folder / "timing" / "rank0.jsonl").write_bytes(rank0)
    return folder


def good0(*extra: bytes) -> bytes:
    """Rank 0's good windows with ``extra`` lines among them."""
    lines = [json.dumps(window(0, n)).encode() for n in range(GOOD)]
    return b"\n".join(lines[:3] + list(extra) + lines[3:]) + b"\n"


def timing_cli(folder: Path, seconds: float = 60) -> tuple[int, str, str]:
    """``mgpu-lab timing FOLDER`` in this process, in a thread with a deadline (a hang fails the test)."""
    done: dict[str, object] = {}

    def call() -> None:
        done["result"] = CliRunner().invoke(mgpu_lab_cli, ["timing", str(folder)])

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "mgpu-lab timing hung"
    result = done["result"]
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception  # type: ignore[attr-defined]
    out, err = result.stdout, result.stderr  # type: ignore[attr-defined]
    assert "Traceback" not in out + err
    return result.exit_code, out, err  # type: ignore[attr-defined]


def reported_with_a_note(folder: Path, skipped: int) -> str:
    code, out, err = timing_cli(folder)
    assert code == 0 and err == "", (code, out, err)
    note = f"[WARN] timing: {folder / 'timing' / 'rank0.jsonl'}: {skipped} unusable line(s) skipped, {GOOD} used"
    assert note in out.splitlines(), out
    assert "[WARN] timing: rank 1 is persistently slower than the others" in out, out  # the verdict still stands
    return out


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        (json.dumps(window(0, 99, wall_s="1.0")).encode(), "a string where a number belongs"),
        (json.dumps(window(0, 99, node=5)).encode(), "a number where a name belongs"),
        (json.dumps(window(0, 99, rank=None)).encode(), "null where the rank belongs"),
        (json.dumps(window(0, 99, rank=True)).encode(), "a boolean where the rank belongs"),
        (json.dumps(window(0, 99, wall_s=-1)).encode(), "negative time"),
        (json.dumps(window(0, 99, collectives=1.5)).encode(), "a fraction where a count belongs"),
        (b"null", "null"),
        (b"[1, 2, 3]", "not an object"),
        (b'{"rank": 0, "node": "node0", "wind', "a truncated line"),
        (b"\xff\xfe\x00\x81binary\x00", "binary"),
        (json.dumps(window(0, 99)).encode().replace(b"node0", b"no\x00de0"), "a NUL byte"),
        (b"[" * 200_000, "deep nesting"),
        (b'{"a":' * 50_000 + b"1" + b"}" * 50_000, "deep nesting inside an object"),
        (b"NaN", "not a window"),
        (json.dumps(window(0, 99, wall_s=float("inf"))).encode(), "infinite time"),
    ],
)
def test_an_unusable_line_is_skipped_and_counted(tmp_path: Path, bad: bytes, why: str) -> None:
    reported_with_a_note(run_folder(tmp_path, good0(bad)), 1)


def test_a_newer_writers_extra_fields_are_used(tmp_path: Path) -> None:
    lines = [json.dumps({**window(0, n), "gpu_util": 0.5}).encode() for n in range(GOOD)]
    code, out, _err = timing_cli(run_folder(tmp_path, b"\n".join(lines) + b"\n"))
    assert code == 0 and "unusable" not in out and "rank 1 is persistently slower" in out, out


def test_many_unusable_lines_are_counted(tmp_path: Path) -> None:
    reported_with_a_note(run_folder(tmp_path, good0(b"x", b"{}", b"\0\0\0", b"[" * 100_000)), 4)


@pytest.mark.parametrize("kind", ["empty", "folder", "fifo", "dangling link"])
def test_a_file_that_cannot_be_read_is_named_and_the_rest_reported(tmp_path: Path, kind: str) -> None:
    folder = run_folder(tmp_path, b"" if kind == "empty" else None)
    path = folder / "timing" / "rank0.jsonl"
    if kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)  # opening it for reading would wait for a writer forever
    elif kind == "dangling link":
        path.symlink_to(folder / "nowhere")  # inside the run folder (a link out is never followed: below)
    code, out, err = timing_cli(folder)
    assert code == 0 and err == "", (code, out, err)
    expected = {
        "empty": "empty",
        "folder": "a folder, not a regular file",
        "fifo": "a FIFO, not a regular file",
        "dangling link": "No such file or directory",
    }[kind]
    assert f"[WARN] timing: {path}: {expected}; skipped" in out.splitlines(), out
    assert "[INFO] timing:    1  node0" in out  # rank 1's windows are reported


@pytest.mark.parametrize("content", [b"", b"\0" * 1000, b"garbage\nmore garbage\n", b"[" * 300_000])
def test_nothing_usable_is_one_line_and_exit_2(tmp_path: Path, content: bytes) -> None:
    folder = tmp_path / "run"
    (folder / "timing").mkdir(parents=True)
    (folder / "timing" / "rank0.jsonl").write_bytes(content)
    code, out, err = timing_cli(folder)
    assert code == 2 and out == "", (code, out, err)
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"mgpu-lab timing: error: no usable timing in {folder / 'timing'} (rank0.jsonl: "), err


def test_only_a_fifo_is_one_line_and_exit_2(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    (folder / "timing").mkdir(parents=True)
    os.mkfifo(folder / "timing" / "rank0.jsonl")
    code, out, err = timing_cli(folder)
    assert code == 2 and out == "" and len(err.splitlines()) == 1, (code, out, err)
    assert "rank0.jsonl: a FIFO, not a regular file" in err, err


def test_timing_that_is_a_file_is_no_timing(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "timing").write_text("not a folder")
    code, out, err = timing_cli(folder)
    assert code == 2 and out == "" and len(err.splitlines()) == 1, (code, out, err)
    assert "no per-rank timing" in err


def test_a_file_larger_than_the_bound_is_read_from_its_end_and_said_cut(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(timing, "MAX_FILE_BYTES", 2000)
    lines = [json.dumps(window(0, n)).encode() for n in range(200)]
    folder = run_folder(tmp_path, b"\n".join(lines) + b"\n")
    windows, notes = timing.scan(folder)
    assert windows[0][-1].window == 199 and len(windows[0]) < 200
    assert [(n.path.name, n.cut, n.skipped, n.usable) for n in notes] == [("rank0.jsonl", True, 0, len(windows[0]))]
    code, out, err = timing_cli(folder)
    line = f"[WARN] timing: {folder / 'timing' / 'rank0.jsonl'}: cut: only its last 2000 bytes read, older windows"
    assert code == 0 and err == "" and [x for x in out.splitlines() if x.startswith(line)], (code, out, err)


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every path the bounded reader opens (to show that a link out of the run folder is never opened)."""
    from mgpu_lab.core import safe_read

    paths: list[str] = []
    real_open = os.open

    def recording(path, flags, *args):
        paths.append(os.path.realpath(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(safe_read.os, "open", recording)
    return paths


@pytest.mark.parametrize("how", ["file", "timing folder", "dangling"])
def test_a_link_out_of_the_run_folder_is_one_line_and_never_opened(tmp_path: Path, how: str, opened) -> None:
    outside = tmp_path / "outside"  # holds good windows of a rank 7: read, they would show in the table
    outside.mkdir()
    (outside / "rank7.jsonl").write_text("\n".join(json.dumps(window(7, n)) for n in range(GOOD)) + "\n")
    folder = run_folder(tmp_path, None)
    if how == "timing folder":
        (folder / "timing" / "rank1.jsonl").rename(outside / "rank1.jsonl")
        (folder / "timing").rmdir()
        (folder / "timing").symlink_to(outside)
        shown = [folder / "timing"]
    else:
        target = outside / ("rank7.jsonl" if how == "file" else "gone.jsonl")
        (folder / "timing" / "rank0.jsonl").symlink_to(target)
        shown = [folder / "timing" / "rank0.jsonl"]
    inside = folder / "timing" / "rank2.jsonl"
    if how != "timing folder":  # a link that stays inside the folder is read as its target
        (folder / "copy.jsonl").write_text("\n".join(json.dumps(window(2, n)) for n in range(GOOD)) + "\n")
        inside.symlink_to("../copy.jsonl")
    code, out, err = timing_cli(folder)
    assert not [p for p in opened if p.startswith(str(outside))], opened
    for path in shown:
        why = f"a link out of {folder} (to {os.path.realpath(path)})"
        assert f"[WARN] timing: {path}: {why}; skipped" in out.splitlines() or f"timing: {why})" in err, (out, err)
    assert "   7  node0" not in out
    if how == "timing folder":  # nothing inside the run folder: one line, exit 2
        assert code == 2 and out == "" and len(err.splitlines()) == 1, (code, out, err)
    else:
        assert code == 0 and "[INFO] timing:    1  node0" in out and "[INFO] timing:    2  node0" in out, out


# --- stacks -----------------------------------------------------------------------------------------------------


def lock_bytes(**change: object) -> bytes:
    data = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "job_key": "k",
        "launcher_pid": os.getppid(),
        "lease_s": 60.0,
        "renewed": time.time(),
    }
    return json.dumps({**data, **change}).encode()


def stacks(target: str, log_root: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    done: dict[str, int] = {}

    def call() -> None:
        import contextlib

        with contextlib.redirect_stderr(err):
            done["code"] = live_stacks.request(target, str(log_root), 1, out=out)

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(30)
    assert not thread.is_alive(), "mgpu-lab stacks hung"
    assert "Traceback" not in out.getvalue() + err.getvalue()
    return done["code"], out.getvalue(), err.getvalue()


@pytest.mark.parametrize(
    "lock",
    [
        b"",
        b"\0\0\0",
        b"[" * 200_000,
        b"null",
        lock_bytes(pid="123"),
        lock_bytes(pid=0),
        lock_bytes(pid=-1),
        lock_bytes(pid=True),
        lock_bytes(lease_s="forever"),
        lock_bytes(lease_s=float("nan")),
        lock_bytes(launcher_pid=os.getpid()),  # rank 0 and launcher the same process: this one
        lock_bytes(),  # the launcher named is this test's parent, which is no launcher
        "fifo",
        "folder",
    ],
)
def test_stacks_with_a_damaged_lock_is_one_line_and_exit_2(tmp_path: Path, lock: bytes | str) -> None:
    run = tmp_path / "logs" / "lib" / "task" / "run"
    run.mkdir(parents=True)
    path = run / continue_run.LOCK_FILE
    if lock == "fifo":
        os.mkfifo(path)
    elif lock == "folder":
        path.mkdir()
    else:
        assert isinstance(lock, bytes)
        path.write_bytes(lock)
    for target in (str(run), "latest"):
        code, out, err = stacks(target, tmp_path / "logs")
        assert code == 2 and out == "", (code, out, err)
        assert len(err.splitlines()) == 1 and err.startswith("mgpu-lab stacks: error: "), err


def test_a_summary_that_is_a_fifo_is_no_answer(tmp_path: Path) -> None:
    base = tmp_path / "stacks"
    (base / "a").mkdir(parents=True)
    os.mkfifo(base / "a" / live_stacks.SUMMARY)
    (base / "b").mkdir()
    (base / "b" / live_stacks.SUMMARY).write_bytes(b"[INFO] stacks: rank 0\0\n" + b"x" * 10)
    folder, text = live_stacks._new_summary(base, set())  # type: ignore[misc]
    assert folder == base / "b" and "\0" not in text


def test_stacks_with_a_lock_that_leads_out_of_the_run_folder_is_one_line_and_exit_2(tmp_path: Path, opened) -> None:
    run = tmp_path / "logs" / "lib" / "task" / "run"
    run.mkdir(parents=True)
    outside = tmp_path / "elsewhere.lock"
    outside.write_bytes(lock_bytes())  # a live lock: read, it would aim the signal
    (run / continue_run.LOCK_FILE).symlink_to(outside)
    code, out, err = stacks(str(run), tmp_path / "logs")
    assert code == 2 and out == "" and len(err.splitlines()) == 1, (code, out, err)
    assert f"{continue_run.LOCK_FILE}: a link out of {run} (to {outside}); not read, nothing signalled" in err, err
    assert continue_run.read_lock(run) is None  # every reader of the lock: a link out is no lock
    code, out, err = stacks("latest", tmp_path / "logs")
    assert code == 2 and len(err.splitlines()) == 1 and "no live job" in err, (code, out, err)
    assert str(outside) not in opened


def test_a_summary_that_leads_out_of_the_run_folder_is_one_line_and_no_answer(tmp_path: Path, opened) -> None:
    base = tmp_path / "run" / live_stacks.STACKS_DIR
    (base / "a").mkdir(parents=True)
    outside = tmp_path / "summary.txt"
    outside.write_text("[INFO] stacks: rank 0 (not this run's)\n")
    (base / "a" / live_stacks.SUMMARY).symlink_to(outside)
    out, before = io.StringIO(), set()
    assert live_stacks._new_summary(base, before, out) is None
    assert out.getvalue().splitlines() == [
        f"[WARN] stacks: {base / 'a' / live_stacks.SUMMARY}: a link out of {base.parent} (to {outside}); skipped"
    ]
    (base / "b").mkdir()
    (base / "b" / live_stacks.SUMMARY).write_text("[INFO] stacks: rank 0: in all_reduce\n")
    found = live_stacks._new_summary(base, before, out)
    assert found is not None and found[0] == base / "b" and len(out.getvalue().splitlines()) == 1  # said once
    assert str(outside) not in opened
