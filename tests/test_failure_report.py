"""The launcher's own failure report and the routing of the job's stderr, called in-process.

The report is built from the ranks' failure records (:mod:`mgpu_lab.health.heartbeat`) and torchrun's summary; the
router keeps torchrun's ``ChildFailedError`` traceback off the terminal. Real runs are in
``tests/test_failure_report_e2e.py``.
"""

from __future__ import annotations

import signal

from mgpu_lab.health import failures, heartbeat
from mgpu_lab.health.failures import Exit
from mgpu_lab.job.stderr_route import StderrRouter

REFUSAL = "--distributed: no CUDA device is usable here (CUDA_VISIBLE_DEVICES=0,1); ranks train on the CPU only"
GLOO = (
    "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:561] Connection closed by peer "
    "[127.0.0.1]:49364. This is typically caused by a remote worker crashing."
)


def record(rank: int, detail: str, t: float, kind: str = heartbeat.EXCEPTION) -> heartbeat.Failure:
    return heartbeat.Failure(rank, rank, "node-a", 100 + rank, kind, detail, t)


def beat(rank: int, world: int = 2) -> heartbeat.Beat:
    return heartbeat.Beat(rank, rank, world, "node-a", 100 + rank, 3, "train", 1.0)


def build(records, exits=None, beats=None, world=None, root=None) -> failures.Report:
    found = failures.report(records, exits or {}, beats or {}, {}, set(), world, root)
    assert found is not None
    return found


# ---------------------------------------------------------------------------------------------- refusals


def test_every_rank_refusing_the_same_input_is_said_once_with_exit_2() -> None:
    got = build(
        {0: record(0, REFUSAL, 5.0, heartbeat.REFUSED), 1: record(1, REFUSAL, 5.1, heartbeat.REFUSED)},
        {0: Exit(0, "node-a", 100, 2), 1: Exit(1, "node-a", 101, 2)},
    )
    assert got.lines == [f"mgpu-lab train_multigpu: error: all 2 ranks refused: {REFUSAL}"]
    assert (got.exit_status, got.refused) == (2, True)
    assert "consequence" not in got.lines[0]  # no rank caused anything: both refused


def test_a_refusal_while_torchrun_stopped_the_other_rank_is_one_line_and_exit_2() -> None:
    """The first rank to refuse ends the job; torchrun stops the other before it gets to the same check."""
    got = build(
        {0: record(0, REFUSAL, 5.0, heartbeat.REFUSED)},
        {0: Exit(0, "node-a", 100, 2), 1: Exit(1, "node-a", 101, -signal.SIGTERM)},
    )
    assert got.lines == [
        f"mgpu-lab train_multigpu: error: 1 of 2 ranks refused: {REFUSAL} "
        "(torchrun stopped the other rank before it checked)"
    ]
    assert (got.exit_status, got.refused) == (2, True)


def test_a_refusal_beside_a_rank_killed_otherwise_is_a_failure_listing_every_rank() -> None:
    """Only ranks torchrun stopped fold into a refusal's one line; a rank killed by something else is a failure."""
    got = build(
        {0: record(0, REFUSAL, 5.0, heartbeat.REFUSED)},
        {0: Exit(0, "node-a", 100, 2), 1: Exit(1, "node-a", 101, -signal.SIGTERM), 2: Exit(2, "node-a", 102, -9)},
        world=3,
    )
    assert (got.exit_status, got.refused) == (1, False)
    assert got.lines[0] == "[ERROR] launcher: 3 rank(s) failed of 3:"
    assert got.lines[3].endswith("rank 2/3 on node node-a (pid 102): killed by SIGKILL (no Python exception)")


def test_different_refusals_are_listed_rank_by_rank() -> None:
    got = build(
        {
            0: record(0, "--checkpoint a: no such file", 5.0, heartbeat.REFUSED),
            1: record(1, "--checkpoint a: not a file", 5.0, heartbeat.REFUSED),
        },
        world=2,
    )
    assert got.exit_status == 2 and len(got.lines) == 3
    assert "no such file" in got.lines[1] and "not a file" in got.lines[2]


# ---------------------------------------------------------------------------------------------- failures


def test_a_failure_names_every_rank_its_node_and_line_and_what_came_first() -> None:
    got = build(
        {1: record(1, "RuntimeError: injected fault", 5.0), 0: record(0, GLOO, 5.2)},
        {0: Exit(0, "node-a", 100, 1), 1: Exit(1, "node-a", 101, 1)},
        {0: beat(0), 1: beat(1)},
        world=2,
        root=1,
    )
    assert (got.exit_status, got.refused) == (1, False)
    assert got.lines == [
        "[ERROR] launcher: 2 rank(s) failed of 2:",
        "[ERROR] launcher:   rank 0/2 on node node-a (pid 100): its collective lost a peer "
        "(Connection closed by peer [127.0.0.1]:49364) (a consequence)",
        "[ERROR] launcher:   rank 1/2 on node node-a (pid 101): RuntimeError: injected fault <- first",
        "[ERROR] launcher: first failure: rank 1/2 on node node-a (pid 101): RuntimeError: injected fault",
    ]


def test_torchruns_blame_is_a_consequence_only_for_a_lost_peer() -> None:
    exits = {0: Exit(0, "node-a", 100, 1), 1: Exit(1, "node-a", 101, 1)}
    lost = build({1: record(1, "RuntimeError: first", 5.0), 0: record(0, GLOO, 5.2)}, exits, world=2, root=0)
    assert lost.lines[-1].endswith("names rank 0, which failed after rank 1 (a consequence, not the cause)")
    own = build(
        {1: record(1, "RuntimeError: first", 5.0), 0: record(0, "ValueError: its own", 5.2)}, exits, world=2, root=0
    )
    assert own.lines[-1].endswith("names rank 0, which failed after rank 1")
    assert "<- first" in own.lines[2] and "consequence" not in own.lines[1]


def test_a_rank_killed_by_a_signal_counts_from_when_it_was_last_alive() -> None:
    beats = {0: beat(0), 1: heartbeat.Beat(1, 1, 2, "node-b", 101, 2, "train", 0.5)}
    got = build(
        {0: record(0, GLOO, 5.0)}, {0: Exit(0, "node-a", 100, 1), 1: Exit(1, "node-b", 101, -9)}, beats, world=2
    )
    assert got.lines[-1] == (
        "[ERROR] launcher: first failure: rank 1/2 on node node-b (pid 101): killed by SIGKILL (no Python exception)"
    )


def test_peer_detail_keeps_the_short_part() -> None:
    assert failures.peer_detail(GLOO.partition(": ")[2]) == "Connection closed by peer [127.0.0.1]:49364"
    assert failures.lost_peer(GLOO) and not failures.lost_peer("RuntimeError: injected fault")


# ---------------------------------------------------------------------------------------------- stderr routing

TORCHRUN_TB = (
    b"Traceback (most recent call last):\n"
    b'  File "<frozen runpy>", line 198, in _run_module_as_main\n'
    b'  File "/v/torch/distributed/run.py", line 1142, in <module>\n'
    b"torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
    b"====\nRoot Cause (first observed failure):\n"
)
RANK_TB = (
    b"Traceback (most recent call last):\n"
    b'  File "/repo/scripts/reinforcement_learning/train.py", line 108, in <module>\n'
    b"RuntimeError: boom\n"
)


def routed(*chunks: bytes) -> tuple[bytes, bytes]:
    shown: list[bytes] = []
    router = StderrRouter(shown.append)
    for chunk in chunks:
        router.feed(chunk)
    router.close()
    return b"".join(shown), bytes(router.diverted)


def test_torchruns_traceback_is_diverted_and_everything_before_it_shown() -> None:
    before = b"[rank0]:error: rank 0: another rank left the job\nW1203 torch/distributed/... SIGTERM\n"
    shown, kept = routed(before + TORCHRUN_TB)
    assert shown == before
    assert kept == TORCHRUN_TB


def test_the_split_does_not_depend_on_chunk_boundaries() -> None:
    data = b"line one\n" + RANK_TB + b"partial" + b" line\n" + TORCHRUN_TB
    whole = routed(data)
    bytewise = routed(*[data[i : i + 1] for i in range(len(data))])
    assert whole == bytewise == (b"line one\n" + RANK_TB + b"partial line\n", TORCHRUN_TB)


def test_a_ranks_own_traceback_stays_on_the_terminal() -> None:
    shown, kept = routed(RANK_TB)
    assert (shown, kept) == (RANK_TB, b"")


def test_text_without_a_line_end_goes_out_at_once_unless_it_may_start_a_traceback() -> None:
    shown: list[bytes] = []
    router = StderrRouter(shown.append)
    router.feed(b"progress 10%")
    assert shown == [b"progress 10%"]
    router.feed(b"\rprogress 20%\nTrace")
    assert b"".join(shown) == b"progress 10%\rprogress 20%\n"
    router.close()  # the job ended: what was held back was no traceback
    assert b"".join(shown).endswith(b"Trace")


def test_a_lost_peer_is_never_first_while_a_rank_died_on_its_own() -> None:
    """Rank 1 was SIGKILLed; the launcher still saw its process (not yet reaped) after rank 0's collective
    broke: rank 0's earlier record is a consequence, rank 1 comes first."""
    exits = {0: Exit(0, "node-a", 100, 1), 1: Exit(1, "node-a", 101, -signal.SIGKILL)}
    got = failures.report({0: record(0, GLOO, 5.0)}, exits, {0: beat(0), 1: beat(1)}, {1: 5.4}, set(), 2, 0)
    assert got is not None and got.exit_status == 1
    first = [line for line in got.lines if line.startswith(failures.FIRST_FAILURE)]
    assert first == [
        f"{failures.FIRST_FAILURE} rank 1/2 on node node-a (pid 101): killed by SIGKILL (no Python exception)"
    ]
    assert any("rank 0/2" in line and line.endswith("(a consequence)") for line in got.lines)


def test_a_lost_peer_alone_is_still_named() -> None:
    """With nothing else to blame, the rank that saw its peer go is reported (the report never goes empty)."""
    event = failures.first_failure({0: record(0, GLOO, 5.0)}, {}, {}, {}, set())
    assert event is not None and event.rank == 0


# torchrun's failed exit barrier on a node whose ranks all finished (pytorch/pytorch#69520), as torch 2.x prints it:
# the TCPStore client's C++ warning with its native frames and an empty line, then the agent's logged record
STORE_WARNING = (
    b"[W1204 13:53:55.580000000 TCPStore.cpp:138] [c10d] recvValueWithTimeout failed on SocketImpl(fd=3, "
    b"addr=[::ffff:127.0.0.1]:42082, remote=[::ffff:127.0.0.1]:36667): Failed to recv, got 0 bytes. Connection "
    b"was likely closed. Did the remote server shutdown or crash?\n"
    b"Exception raised from recvBytes at /pytorch/torch/csrc/distributed/c10d/Utils.hpp:786 (most recent call first):\n"
    b"frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x9d (0x7f174835c13d in libc10.so)\n"
    b"<omitting python frames>\n"
    b"frame #20: _start + 0x21 (0x5650b2396081 in python)\n"
    b"\n"
)
HEADER = b"E1204 13:53:55.589000 4959 .venv/lib/python3.11/site-packages/torch/distributed/elastic/agent/server/api.py:1007] "
BARRIER_RECORD = b"".join(
    HEADER + line + b"\n"
    for line in (
        b"Error waiting on exit barrier. Elapsed: 0.031 seconds",
        b"Traceback (most recent call last):",
        b'  File ".../torch/distributed/elastic/agent/server/api.py", line 993, in _exit_barrier',
        b"    store_util.barrier(",
        b"torch.distributed.DistNetworkError: Failed to recv, got 0 bytes. Connection was likely closed.",
    )
)


def test_a_failed_exit_barrier_becomes_one_warning_line() -> None:
    before, after = b"[INFO] train: done\n", b"I1204 13:53:55.600000 4959 api.py:1020] Local worker group finished\n"
    data = before + STORE_WARNING + BARRIER_RECORD + after
    whole = routed(data)
    assert whole == routed(*[data[i : i + 1] for i in range(len(data))])  # whatever the chunks
    shown, kept = whole
    assert kept == b""  # not torchrun's failure text: the job did not fail
    lines = shown.decode().splitlines()
    assert lines[0] == before.decode().strip()  # torchrun's own log line after it is kept, not shown
    (note,) = lines[1:]
    assert note.startswith("[WARN] launcher: every rank on this node finished; then torchrun's exit barrier")
    assert "(DistNetworkError: Failed to recv, got 0 bytes. Connection was likely closed.)" in note
    assert "pytorch/pytorch#69520" in note and "Traceback" not in shown.decode()


def test_an_exit_barrier_record_at_the_very_end_is_replaced_too() -> None:
    shown, _ = routed(BARRIER_RECORD)  # no store warning (a barrier timeout), and the job's stderr ends with it
    assert shown.decode().count("\n") == 1 and "exit barrier" in shown.decode() and b"Traceback" not in shown


def test_a_store_warning_of_anything_else_is_shown_whole() -> None:
    other = b"[W1204 13:53:55.600000000 ProcessGroupGloo.cpp:1] gloo warning\n"
    for data in (STORE_WARNING + other, STORE_WARNING + RANK_TB, STORE_WARNING):
        assert routed(data) == (data, b"")
    shown, kept = routed(STORE_WARNING + TORCHRUN_TB)  # the warning, then torchrun's own failure traceback
    assert (shown, kept) == (STORE_WARNING, TORCHRUN_TB)


def test_the_docs_quote_the_warning_as_the_launcher_prints_it() -> None:
    from mgpu_testing import REPO

    from mgpu_lab.job.stderr_route import barrier_note

    printed = barrier_note(BARRIER_RECORD).decode()
    quoted = "[WARN] launcher: every rank on this node finished; then torchrun's exit barrier, its wait for the other nodes, failed ("
    assert printed.startswith(quoted)
    for doc in ("skills/user/train-multi-gpu/reference.md", "docs/source/features/multi_gpu.rst"):
        text = " ".join((REPO / doc).read_text(encoding="utf-8").split())  # lines joined as a reader sees them
        assert quoted + "...)" in text, doc


def test_a_store_warning_nothing_follows_is_shown_once_held_long_enough() -> None:
    """The monitor's tick releases a complete store warning after WARNING_HOLD_S: a hang's last warning is not
    held until the job ends."""
    from mgpu_lab.job.stderr_route import WARNING_HOLD_S

    now = [100.0]
    shown: list[bytes] = []
    router = StderrRouter(shown.append, clock=lambda: now[0])
    router.feed(STORE_WARNING)
    router.release_stale()
    assert shown == []  # just ended: torchrun's record may follow
    now[0] += WARNING_HOLD_S
    router.release_stale()
    assert b"".join(shown) == STORE_WARNING
    router.feed(BARRIER_RECORD)  # a record after all: still one line, the warning not shown twice
    router.close()
    assert b"".join(shown).count(b"TCPStore") == 1 and b"".join(shown).count(b"exit barrier") == 1


# ------------------------------------------------------------------------------------- a script's sys.exit


def recorded_exit(tmp_path, code: object, *, own_script: bool) -> heartbeat.Failure:
    """What a rank records for ``sys.exit(code)``: through :class:`Supervision` into its folder and back."""
    from mgpu_lab.health.rank_progress import Supervision

    tmp_path.mkdir(exist_ok=True)
    Supervision(str(tmp_path), 0, 0, 2).record_failure(SystemExit(code), own_script=own_script)
    return heartbeat.read_failures(tmp_path)[0]


def test_a_users_script_exiting_non_zero_is_reported_with_its_status(tmp_path) -> None:
    got = build({0: recorded_exit(tmp_path, 3, own_script=False)}, {0: Exit(0, "node-a", 100, 3)})
    text = "\n".join(got.lines)
    assert "exited with status 3" in text, text
    assert "usage error" not in text


def test_a_users_script_exiting_2_is_not_called_a_usage_error(tmp_path) -> None:
    detail = recorded_exit(tmp_path, 2, own_script=False).detail
    assert detail == "exited with status 2"


def test_only_the_projects_own_trainer_exiting_2_is_a_usage_error(tmp_path) -> None:
    assert "a usage error" in recorded_exit(tmp_path / "two", 2, own_script=True).detail
    assert recorded_exit(tmp_path / "three", 3, own_script=True).detail == "exited with status 3"


def test_a_message_given_to_sys_exit_is_kept_with_status_1(tmp_path) -> None:
    assert recorded_exit(tmp_path, "no data here", own_script=False).detail == "exited with status 1 (no data here)"
