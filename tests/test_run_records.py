"""Issue 49, item 2: every record the run folder keeps (timing lines, ``run.json``, the run lock) and the records the
ranks leave in the job's store carry a version, through the one codec writer and reader share
(:mod:`mgpu_lab.core.records`, as the heartbeat does). Each kind is written here by hand as an older version wrote
it (no version: read as it is), as a newer one would (another version: refused in one line naming the file and
the versions; a newer writer's extra fields at this version: read), and damaged. In-process, through the readers
the commands use."""

from __future__ import annotations

import io
import json
import os
import socket
import time
from contextlib import redirect_stderr
from pathlib import Path

import pytest
from click.testing import CliRunner

from mgpu_lab.cli import main as mgpu_lab_cli
from mgpu_lab.core import records
from mgpu_lab.core.errors import UsageError
from mgpu_lab.health import live_stacks, timing
from mgpu_lab.runs import attempt, continue_run
from mgpu_lab.runs.attempt import Attempt

LIB, TASK = "rsl_rl", "Toy-Cartpole-v0"
NEWER = "version 2; this mgpu-lab reads versions 0 to 1 (field 'v'): a newer mgpu-lab wrote it"


def line(**fields: object) -> str:
    return json.dumps(fields)


# --- timing lines ----------------------------------------------------------------------------------------------


def window(rank: int, n: int, **extra: object) -> dict:
    share = 0.9 if rank == 1 else 0.3
    return {
        "rank": rank,
        "node": "node0",
        "window": n,
        "iteration": n,
        "start": 1000.0 + n,
        "wall_s": 1.0,
        "wait_s": round(1 - share, 3),
        "compute_s": share,
        "collectives": 4,
        **extra,
    }


def timing_run(tmp_path: Path, rank0: list[dict]) -> Path:
    """A run folder: rank 1's lines as this version writes them, rank 0's as given (written by hand)."""
    folder = tmp_path / "run"
    (folder / "timing").mkdir(parents=True)
    ours = [timing.CODEC.encode(timing.Window(**window(1, n))).decode() for n in range(6)]
    (folder / "timing" / "rank1.jsonl").write_text("\n".join(ours) + "\n")
    (folder / "timing" / "rank0.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rank0))
    return folder


def timing_cli(folder: Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(mgpu_lab_cli, ["timing", str(folder)])
    return result.exit_code, result.stdout, result.stderr


def test_a_timing_line_carries_its_version_and_older_lines_are_read(tmp_path: Path) -> None:
    folder = timing_run(tmp_path, [window(0, n) for n in range(6)])  # no "v": as the last version wrote them
    first = json.loads((folder / "timing" / "rank1.jsonl").read_text().splitlines()[0])
    assert first[records.VERSION_FIELD] == timing.VERSION == 1
    windows, notes = timing.scan(folder)
    assert notes == [] and [len(windows[r]) for r in (0, 1)] == [6, 6]
    code, out, err = timing_cli(folder)
    assert code == 0 and err == "" and "rank 1 is persistently slower" in out, (code, out, err)


def test_newer_timing_lines_are_named_with_the_versions_and_their_extra_fields_tolerated(tmp_path: Path) -> None:
    rank0 = [window(0, n, v=1, gpu_util=0.5) for n in range(6)] + [window(0, n, v=2) for n in range(6, 9)]
    folder = timing_run(tmp_path, rank0)
    code, out, err = timing_cli(folder)
    assert code == 0 and err == "", (code, out, err)
    note = f"[WARN] timing: {folder / 'timing' / 'rank0.jsonl'}: 6 used; 3 line(s) of another version skipped ({NEWER})"
    assert note in out.splitlines(), out
    assert "rank 1 is persistently slower" in out


def test_a_file_of_newer_timing_lines_only_is_one_line_naming_it_and_the_versions(tmp_path: Path) -> None:
    folder = timing_run(tmp_path, [window(0, n, v=2) for n in range(6)])
    (folder / "timing" / "rank1.jsonl").unlink()
    code, out, err = timing_cli(folder)
    assert code == 2 and out == "" and len(err.splitlines()) == 1, (code, out, err)
    assert f"rank0.jsonl: 6 line(s) of {NEWER}" in err, err


@pytest.mark.parametrize(
    "bad",
    [
        window(0, 9, v="1"),
        window(0, 9, v=None),
        {**window(0, 9, v=1), "rank": -1},
        {"v": 1},
        {**window(0, 9), "node": 3},
    ],
    ids=["version a string", "version null", "negative rank", "no fields", "old with a wrong type"],
)
def test_a_damaged_timing_line_is_counted_as_unusable(tmp_path: Path, bad: dict) -> None:
    folder = timing_run(tmp_path, [window(0, n) for n in range(6)] + [bad])
    code, out, _ = timing_cli(folder)
    expected = f"[WARN] timing: {folder / 'timing' / 'rank0.jsonl'}: 1 unusable line(s) skipped, 6 used"
    assert code == 0 and expected in out.splitlines(), out


# --- run.json --------------------------------------------------------------------------------------------------


def run_folder(root: Path, meta: dict | bytes | None) -> Path:
    run = root / LIB / TASK / "2026-01-01_00-00-00"
    run.mkdir(parents=True)
    if meta is not None:
        data = meta if isinstance(meta, bytes) else json.dumps(meta).encode()
        (run / continue_run.META_FILE).write_bytes(data)
    return run


def test_run_json_carries_its_version_and_an_older_one_is_read(tmp_path: Path) -> None:
    run = run_folder(tmp_path / "a", None)
    continue_run.write_meta(run, LIB, TASK, "torch")
    assert json.loads((run / continue_run.META_FILE).read_text())[records.VERSION_FIELD] == 1
    old = run_folder(tmp_path / "b", {"library": LIB, "task": TASK, "ml_framework": "torch"})  # the last version's
    assert continue_run.read_meta(old) == {"library": LIB, "task": TASK, "ml_framework": "torch"}
    with pytest.raises(UsageError, match=r"written with --rl_library rsl_rl --task Toy-Cartpole-v0 \(run.json\)"):
        continue_run.check_meta(old, str(old), "skrl", TASK, "torch")  # read, so its library is the one compared
    newer = run_folder(tmp_path / "c", {"v": 1, "library": LIB, "task": TASK, "ml_framework": "torch", "seed": 3})
    continue_run.check_meta(newer, str(newer), LIB, TASK, "torch")  # a newer writer's extra field: tolerated


def test_a_newer_run_json_refuses_to_continue_in_one_line_naming_it_and_the_versions(tmp_path: Path) -> None:
    run = run_folder(tmp_path, {"v": 2, "library": LIB, "task": TASK, "ml_framework": "torch"})
    with pytest.raises(UsageError) as exc:
        continue_run.check(str(run), str(tmp_path), LIB, TASK, "torch", None)
    text = str(exc.value)
    assert "\n" not in text and f"cannot read {run / continue_run.META_FILE}: {NEWER}" in text, text
    held = continue_run.start_writing(  # rank 0 never overwrites it
        run, created=False, library=LIB, task=TASK, ml_framework="torch", job_key=None, value=None
    )
    held.release()
    assert json.loads((run / continue_run.META_FILE).read_text())["v"] == 2


@pytest.mark.parametrize(
    "damaged",
    [b"{not json", b"[]", json.dumps({"v": 1, "library": 5, "task": TASK}).encode(), json.dumps({"v": 1}).encode()],
    ids=["garbage", "not an object", "a number for the library", "no fields"],
)
def test_a_damaged_run_json_is_judged_by_the_folder_s_place(tmp_path: Path, damaged: bytes) -> None:
    run = run_folder(tmp_path, damaged)
    assert continue_run.read_meta(run) is None
    continue_run.check_meta(run, str(run), LIB, TASK, "torch")
    with pytest.raises(UsageError, match="its place under the log root"):
        continue_run.check_meta(run, str(run), "skrl", TASK, "torch")


# --- run.lock --------------------------------------------------------------------------------------------------


def lock(**change: object) -> dict:
    body = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "job_key": "job-other",
        "launcher_pid": None,
        "lease_s": 120.0,
        "renewed": time.time(),
    }
    return {**body, **change}


def test_the_lock_carries_its_version_and_an_older_live_one_is_honoured(tmp_path: Path) -> None:
    run = run_folder(tmp_path, None)
    held = continue_run.hold(run, "job-me", renew_s=3600)
    try:
        assert json.loads((run / continue_run.LOCK_FILE).read_text())[records.VERSION_FIELD] == 1
    finally:
        held.release()
    (run / continue_run.LOCK_FILE).write_text(json.dumps(lock()))  # the last version's: no "v"
    with pytest.raises(UsageError, match="is being written by job job-other"):
        continue_run.check_unlocked(run, str(run), "job-me")
    (run / continue_run.LOCK_FILE).write_text(json.dumps(lock(v=1, gpu="a100")))  # a newer writer's field
    assert continue_run.read_lock(run).job_key == "job-other"  # type: ignore[union-attr]


def test_a_newer_lock_is_never_taken_for_none(tmp_path: Path) -> None:
    """A lock of another version may be a newer mgpu-lab's live job: the launcher refuses to write beside it and
    ``mgpu-lab stacks`` signals nothing, each in one line naming the file and the versions."""
    run = run_folder(tmp_path, None)
    path = run / continue_run.LOCK_FILE
    path.write_text(json.dumps(lock(v=2)))
    with pytest.raises(UsageError) as exc:
        continue_run.check_unlocked(run, str(run), "job-me")
    assert "\n" not in str(exc.value) and f"cannot read {path}: {NEWER}" in str(exc.value)
    with pytest.raises(UsageError):
        continue_run.hold(run, "job-me", renew_s=3600)
    assert json.loads(path.read_text())["v"] == 2  # left as it was
    err = io.StringIO()
    with redirect_stderr(err):
        assert live_stacks.request(str(run), str(tmp_path), 1, out=io.StringIO()) == 2
    assert err.getvalue() == f"mgpu-lab stacks: error: {path}: {NEWER}; nothing signalled\n"


@pytest.mark.parametrize(
    "damaged",
    [lock(v=1, pid="123"), lock(v=1, lease_s=float("inf")), lock(v="one"), {"v": 1, "host": "h"}],
    ids=["a string pid", "an endless lease", "a version that is no number", "fields missing"],
)
def test_a_damaged_lock_counts_as_none(tmp_path: Path, damaged: dict) -> None:
    run = run_folder(tmp_path, None)
    (run / continue_run.LOCK_FILE).write_text(json.dumps(damaged))
    assert continue_run.read_lock(run) is None
    continue_run.check_unlocked(run, str(run), "job-me")


# --- the job's store -------------------------------------------------------------------------------------------


class Store:
    """A store as torch's behaves (set/get/add/check), where every answer to a token is ``answer``."""

    def __init__(self, answer: bytes | None = None) -> None:
        self.data: dict[str, bytes] = {}
        self.answer = answer

    def set(self, key: str, value: str | bytes) -> None:
        self.data[key] = value.encode() if isinstance(value, str) else value

    def _answered(self, key: str) -> bool:
        return self.answer is not None and key.startswith(f"{attempt.PREFIX}answer/")

    def get(self, key: str) -> bytes:
        return self.answer if self._answered(key) else self.data[key]  # type: ignore[return-value]

    def add(self, key: str, amount: int) -> int:
        value = int(self.data.get(key, b"0")) + amount
        self.data[key] = str(value).encode()
        return value

    def check(self, keys: list[str]) -> bool:
        return all(k in self.data or self._answered(k) for k in keys)


def test_the_store_s_records_carry_their_version_and_older_ones_are_read() -> None:
    store = Store()
    agreed = attempt.agree(store, 0, 1, "key", timeout_s=5)
    [answer] = [v for k, v in store.data.items() if k.startswith(f"{attempt.PREFIX}answer/")]
    assert json.loads(answer) == {"v": 1, "attempt": 0, "key": "key", "run_dir": None}
    attempt.publish_resume(store, agreed, "/logs/run", "/logs/run/model_5.pt")
    assert json.loads(store.data[f"{attempt.PREFIX}resume/0"])["v"] == 1
    assert attempt.resume_of(store, agreed, timeout_s=5) == ("/logs/run", "/logs/run/model_5.pt")
    old = Store(line(attempt=3, key="k", run_dir="/r").encode())  # the last version's: no "v"
    assert attempt.agree(old, 1, 2, "mine", timeout_s=5) == Attempt(3, "k", "/r")
    old.set(f"{attempt.PREFIX}resume/3", line(run_dir="/r", checkpoint=None))
    assert attempt.resume_of(old, Attempt(3, "k", "/r"), timeout_s=5) == ("/r", None)
    newer = Store(line(v=1, attempt=2, key=None, run_dir=None, seed=7).encode())  # a newer writer's extra field
    assert attempt.agree(newer, 1, 2, "mine", timeout_s=5) == Attempt(2, None, None)


@pytest.mark.parametrize(
    ("record", "why"),
    [
        (line(v=2, attempt=1), f"of {NEWER}; run the same mgpu-lab on every node"),
        (line(v=1, attempt="1"), "an unusable mgpu_lab/agree/answer/"),
        ("{trunc", "not JSON: truncated or garbage"),
        (line(v=1, key="k"), "field 'attempt' missing"),
    ],
    ids=["newer", "a string attempt", "garbage", "no attempt"],
)
def test_an_unusable_store_record_stops_the_rank_with_one_line_naming_it(record: str, why: str) -> None:
    with pytest.raises(attempt.UnusableRecord) as exc:
        attempt.agree(Store(record.encode()), 1, 2, "mine", timeout_s=5)
    text = str(exc.value)
    assert "\n" not in text and text.startswith("the job's store holds ") and why in text, text
    assert "answer/" in text and "(attempt answer)" in text
    store = Store()
    store.set(f"{attempt.PREFIX}resume/4", record)
    with pytest.raises(attempt.UnusableRecord, match=r"resume/4 \(resume point\)"):
        attempt.resume_of(store, Attempt(4, None, None), timeout_s=5)


# --- the codec itself ------------------------------------------------------------------------------------------


def test_an_older_version_is_converted_and_the_versions_read_are_said() -> None:
    """A kind whose version 2 renamed a field reads version 1 through its conversion; versions it does not read
    (and a record without one, where the kind never had unversioned records) are refused naming the versions."""
    codec = records.Codec(
        "example",
        3,
        {"name": records.text, "size": records.count},
        dict,
        older={1: lambda old: {**old, "name": old.get("title")}, 2: None},
        reader="tool",
    )
    assert codec.decode(codec.encode({"name": "a", "size": 1})) == {"name": "a", "size": 1}
    assert codec.decode(line(v=1, title="b", size=2)) == {"name": "b", "size": 2}
    assert codec.decode(line(v=2, name="c", size=3, extra=[1])) == {"name": "c", "size": 3}
    for data, said in [
        (line(v=4, name="d", size=4), "version 4; this tool reads versions 1 to 3 (field 'v'): a newer tool wrote it"),
        (line(v=0, name="d", size=4), "version 0; this tool reads versions 1 to 3 (field 'v')"),
        (line(name="d", size=4), "no version; this tool reads versions 1 to 3 (field 'v')"),
    ]:
        with pytest.raises(records.OtherVersion) as exc:
            codec.decode(data)
        assert str(exc.value) == said
    with pytest.raises(records.Unreadable, match="field 'v': True is not a version number"):
        codec.decode(line(v=True, name="d", size=4))
    with pytest.raises(records.Unreadable, match="field 'size': -1 is negative"):
        codec.decode(line(v=3, name="d", size=-1))
