"""``mgpu-lab trace``'s reader in-process, on dumps of torch's shape built here (the real ones, written by real ranks,
are read by tests/test_trace_e2e.py): loading never runs code, each unusable file is one line, the ranks are lined
up by process group and sequence number, and the exit status says agree (0), mismatch (1) or unusable (2)."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

from click.testing import CliRunner
from mgpu_testing.training import OpensMarker

from mgpu_lab.cli import main as mgpu_lab_cli

CALLER = {"filename": "/work/my_train.py", "line": 42, "name": "step"}
MACHINERY = [
    {"filename": "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", "line": 1, "name": "x"},
    {"filename": "/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", "line": 2, "name": "wrapper"},
    {"filename": "/repo/src/mgpu_lab/health/collectives.py", "line": 3, "name": "tracked"},
]


def entry(seq: int, op: str = "all_reduce", sizes: list | None = None, group: str = "0", **extra: object) -> dict:
    """One entry as torch's gloo recorder writes it."""
    record = {
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "is_p2p": False,
        "profiling_name": f"gloo:{op}",
        "process_group": (group, "default_pg" if group == "0" else f"group {group}"),
        "input_sizes": sizes if sizes is not None else [[8]],
        "input_dtypes": ["Float"],
        "state": "scheduled",
        "retired": True,
        "time_created_ns": 1000 * seq + (500 if group != "0" else 0),
        "frames": [*MACHINERY, CALLER],
    }
    record.update(extra)
    return record


def dump(entries: list[dict], completed: dict[str, int] | None = None) -> dict:
    """A rank's dump; ``completed`` (group -> its last completed collective) also retires the entries up to it."""
    status = {g: {"last_completed_collective": n, "last_enqueued_collective": n} for g, n in (completed or {}).items()}
    for record in entries:
        group = record.get("process_group", ("",))[0]  # a damaged entry may lack it
        if completed and group in completed:
            record["retired"] = record["collective_seq_id"] <= completed[group]
    return {"version": "2.10", "pg_config": {"": {"name": "", "desc": "", "ranks": "[0, 1]"}}, "entries": entries,
            "pg_status": status}  # fmt: skip


def write(folder: Path, records: dict[int, dict | bytes], prefix: str = "gloo_rank_") -> Path:
    (folder / "flight_recorder").mkdir(parents=True, exist_ok=True)
    for rank, record in records.items():
        data = record if isinstance(record, bytes) else pickle.dumps(record)
        (folder / "flight_recorder" / f"{prefix}{rank}").write_bytes(data)
    return folder


def cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(mgpu_lab_cli, ["trace", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout, result.stderr


def test_agreeing_ranks_exit_0(tmp_path: Path) -> None:
    ranks = {r: dump([entry(s) for s in range(1, 6)], {"0": 5}) for r in (0, 1)}
    code, out, err = cli(str(write(tmp_path, ranks)))
    assert code == 0, out + err
    assert "mgpu-lab trace: all 2 ranks agree: 5 collective(s) in 1 process group(s), posted alike" in out
    assert err == ""


def test_a_rank_that_never_posted_is_named_with_the_frames_that_posted(tmp_path: Path) -> None:
    rank0 = dump([entry(s) for s in range(1, 5)], {"0": 3})
    rank1 = dump([entry(s) for s in range(1, 4)], {"0": 3})
    code, out, _ = cli(str(write(tmp_path, {0: rank0, 1: rank1})))
    assert code == 1, out
    lines = out.splitlines()
    assert (
        "mgpu-lab trace:   rank 0 posted #4 all_reduce [[8]] Float (not completed), from /work/my_train.py:42 in step"
        in lines
    )
    assert lines[-2].startswith("mgpu-lab trace:   rank 1 never posted it; its last in this group: #3 all_reduce")
    assert lines[-1] == "mgpu-lab trace: rank 1 never posted collective #4 (all_reduce [[8]] Float) of process group 0"


def last_line_of(rank0: dict, rank1: dict, folder: Path) -> str:
    """What the reader says of rank 1's last collective when rank 0 posted one more (#3) than rank 1."""
    code, out, _ = cli(str(write(folder, {0: rank0, 1: rank1})))
    assert code == 1, out
    (line,) = [x for x in out.splitlines() if "rank 1 never posted it" in x]
    return line


def test_an_entry_retired_is_completed_whatever_the_group_number_says(tmp_path: Path) -> None:
    """gloo's two worker threads each write the group's last completed number after their own work: the thread that
    finished #1 can write after the one that finished #2 (seen in a CI run: rank 1's #157 retired, the number 156)."""
    rank0 = dump([entry(1), entry(2), entry(3, retired=False)])
    stale = dump([entry(1), entry(2)], {"0": 1})
    stale["entries"][1]["retired"] = True  # #2 finished; its thread wrote the number before #1's did
    assert "#2 all_reduce [[8]] Float (completed)" in last_line_of(rank0, stale, tmp_path / "behind")
    ahead = dump([entry(1), entry(2)], {"0": 2})
    ahead["entries"][1]["retired"] = False  # the number can run ahead of an async collective still in flight
    assert "#2 all_reduce [[8]] Float (not completed)" in last_line_of(rank0, ahead, tmp_path / "ahead")


def test_the_state_where_a_dump_has_no_retired_flag_or_says_completed(tmp_path: Path) -> None:
    """Without the flag (older dumps) the group's number decides; an entry whose own state says completed (NCCL's,
    read from its events when dumping) is completed even before the backend retired it."""
    rank0 = dump([entry(1), entry(2), entry(3, retired=False)])
    plain = dump([entry(1), entry(2)])
    for record in plain["entries"]:
        del record["retired"]
    plain["pg_status"] = {"0": {"last_completed_collective": 2}}
    assert "#2 all_reduce [[8]] Float (completed)" in last_line_of(rank0, plain, tmp_path / "number")
    plain["pg_status"] = {"0": {"last_completed_collective": 1}}
    assert "#2 all_reduce [[8]] Float (not completed)" in last_line_of(rank0, plain, tmp_path / "behind")
    nccl = dump([entry(1), entry(2, retired=False, state="completed")])
    assert "#2 all_reduce [[8]] Float (completed)" in last_line_of(rank0, nccl, tmp_path / "events")


def test_another_operation_or_size_is_a_mismatch(tmp_path: Path) -> None:
    common = [entry(1), entry(2)]
    ranks = {0: dump([*common, entry(3)]), 1: dump([*common, entry(3, "broadcast")]), 2: dump([*common, entry(3)])}
    code, out, _ = cli(str(write(tmp_path / "op", ranks)))
    assert code == 1 and "rank 1 posted a different collective #3 from the others" in out, out
    ranks = {0: dump([*common, entry(3)]), 1: dump([*common, entry(3, sizes=[[4]])])}
    code, out, _ = cli(str(write(tmp_path / "size", ranks)))
    assert code == 1 and "rank 1 posted a different collective #3" in out and "[[4]]" in out, out


def test_groups_are_lined_up_apart_and_the_first_mismatch_in_time_wins(tmp_path: Path) -> None:
    """Group 5 goes wrong at its #2, posted before the default group's #3 went wrong."""
    rank0 = dump([entry(1), entry(1, group="5"), entry(2, group="5"), entry(2), entry(3)])
    rank1 = dump([entry(1), entry(1, group="5"), entry(2)])
    code, out, _ = cli(str(write(tmp_path, {0: rank0, 1: rank1})))
    assert code == 1, out
    assert "first mismatch: process group 5 (group 5), collective #2" in out


def test_a_wrapped_ring_buffer_is_compared_from_what_every_rank_still_holds(tmp_path: Path) -> None:
    ranks = {0: dump([entry(s) for s in range(6, 11)]), 1: dump([entry(s) for s in range(3, 11)])}
    code, out, _ = cli(str(write(tmp_path, ranks)))
    assert code == 0, out


def test_point_to_point_entries_are_not_compared(tmp_path: Path) -> None:
    ranks = {0: dump([entry(1), entry(0, "send", is_p2p=True)]), 1: dump([entry(1), entry(0, "recv", is_p2p=True)])}
    code, out, _ = cli(str(write(tmp_path, ranks)))
    assert code == 0, out


def test_loading_never_runs_code(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    crafted = pickle.dumps({"version": "2.10", "entries": [OpensMarker(marker)]})
    code, out, err = cli(str(write(tmp_path, {0: dump([entry(1)]), 1: crafted})))
    assert not marker.exists()
    assert code == 2 and out == "", out
    (line,) = err.splitlines()
    assert line.endswith("gloo_rank_1: names the Python global io.open (loading it would run code; refused)")


def test_damaged_dumps_are_one_line_each_and_exit_2(tmp_path: Path) -> None:
    good = pickle.dumps(dump([entry(s) for s in range(1, 4)]))
    cases = {
        "truncated (the pickle ends early)": good[: len(good) // 2],
        "empty (the rank was stopped while writing it?)": b"",
        "not a flight recorder dump (no list of entries)": pickle.dumps({"entries": "x"}),
        "an entry has no collective_seq_id or profiling_name": pickle.dumps(dump([{"profiling_name": "gloo:x"}])),
        "flight recorder format 3.0; this reader knows 2.x": pickle.dumps({**dump([entry(1)]), "version": "3.0"}),
    }
    for n, (why, data) in enumerate(cases.items()):
        code, out, err = cli(str(write(tmp_path / str(n), {0: good, 1: data})))
        assert code == 2 and out == "", (why, out)
        (line,) = err.splitlines()
        assert line.startswith("mgpu-lab trace: error: ") and line.endswith(f"gloo_rank_1: {why}"), (why, line)


def test_a_missing_rank_is_one_line(tmp_path: Path) -> None:
    agreeing = dump([entry(1), entry(2)])
    code, out, err = cli(str(write(tmp_path / "agree", {0: agreeing, 2: agreeing})))
    assert code == 2 and out == "", out
    assert err.splitlines() == [
        f"mgpu-lab trace: error: {tmp_path}/agree/flight_recorder/gloo_rank_1: missing (rank 1 was gone or did not "
        "answer)"
    ]
    differing = {0: dump([entry(1), entry(2)]), 2: dump([entry(1)])}  # a mismatch is still a mismatch
    code, out, err = cli(str(write(tmp_path / "differ", differing)))
    assert code == 1 and "rank 2 never posted collective #2" in out, out
    assert err.startswith("mgpu-lab trace: warning: ") and "gloo_rank_1: missing" in err


def test_torch_json_dumps_are_read_too(tmp_path: Path) -> None:
    records = {r: dump([entry(s) for s in range(1, 4 - r)]) for r in (0, 1)}
    code, out, _ = cli(str(write(tmp_path, {r: json.dumps(d).encode() for r, d in records.items()})))
    assert code == 1 and "rank 1 never posted collective #3" in out, out


def test_latest_and_unusable_targets(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    old = write(logs / "rsl_rl" / "Toy" / "old", {r: dump([entry(1)]) for r in (0, 1)})
    new = write(logs / "rsl_rl" / "Toy" / "new", {0: dump([entry(1), entry(2)]), 1: dump([entry(1)])})
    os.utime(old / "flight_recorder", (1, 1))
    code, out, _ = cli("--log_root", str(logs))
    assert code == 1 and f"dumps of rank 0, 1 in {new / 'flight_recorder'}" in out, out
    code, out, err = cli("--log_root", str(tmp_path / "nowhere"))
    assert code == 2 and err.startswith("mgpu-lab trace: error: no run with flight recorder dumps under "), err
    code, out, err = cli(str(tmp_path))
    assert code == 2 and err.splitlines() == [
        f"mgpu-lab trace: error: no flight recorder dumps in {tmp_path} (the launcher has every rank write one into "
        "<run>/flight_recorder/ when a job hangs or fails)"
    ]
    code, out, err = cli(str(write(tmp_path / "one", {0: dump([entry(1)])})))
    assert code == 2 and "one rank's dump only" in err, err
