"""Bisection mode of the probe: verdicts per world size, with the fault tied to an environment setting,
and what a signal to the bisecting probe leaves behind (nothing).

One real rehearsal (module-scoped, five runs) feeds every assertion that needs real runs: both kinds of
verdict, the runs' own output (a corrupted contribution, passing sweeps at world sizes 1 and 2), the
environment each run gets and who warns. The verdict table, the exit status and the warnings are pure
functions of the probe, checked in-process for every case."""

from __future__ import annotations

import re
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from mgpu_testing import PYTHON, REPO, kill_group, run
from mgpu_testing.probe import (
    PROBE,
    ROW,
    SMALL,
    assert_nothing_left,
    check_passing_output,
    leftovers,
    probe_module,
    tagged_env,
)
from mgpu_testing.training import wait_for

CANDIDATE = "NCCL_P2P_DISABLE=1"
REHEARSAL = " (rehearsal: stand-in defect --fault corrupt:1@0 unless NCCL_P2P_DISABLE=1; says nothing about NCCL)"
GLOO_IGNORES = "nccl_probe.py: warning: backend gloo ignores NCCL_* settings: "
GLOO_HINT = "; test NCCL settings with --backend nccl on GPUs"


def verdicts(out: str) -> dict[int, str]:
    return {int(w): v for w, v in re.findall(r"^\[bisect\]   world size (\d+): (.+)$", out, re.M)}


@dataclass(frozen=True)
class Bisection:
    proc: subprocess.CompletedProcess
    logs: Path
    tag: str

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text()


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory: pytest.TempPathFactory) -> Bisection:
    """A rehearsal at world sizes 1 and 2: the stand-in defect corrupts rank 1's first contribution unless
    NCCL_P2P_DISABLE=1 is set, and the candidate is that setting. World size 1 has no rank 1 (passes either
    way); world size 2 fails without it (twice) and passes with it. The shell already sets the candidate
    (the "without" runs must drop it) and NCCL_DEBUG=INFO (which gloo ignores: one warning, from the
    bisector only)."""
    logs = tmp_path_factory.mktemp("rehearsal")
    env, tag = tagged_env(NCCL_P2P_DISABLE="1", NCCL_DEBUG="INFO")
    for var in [
        v
        for v in env
        if v.startswith(("NCCL_", "CUDA_")) and v not in ("NCCL_P2P_DISABLE", "NCCL_DEBUG", "CUDA_VISIBLE_DEVICES")
    ]:
        del env[var]  # the runs' "# settings:" lines hold exactly these two
    cmd = [
        PYTHON,
        str(PROBE),
        "--bisect",
        "--world_sizes",
        "1,2",
        "--candidate",
        CANDIDATE,
        "--fault",
        "corrupt:1",
        "--fault_unless",
        CANDIDATE,
        "--log_dir",
        str(logs),
        *SMALL,
        "--timeout",
        "60",
        "--run_limit",
        "240",
    ]
    return Bisection(run(cmd, timeout=900, env=env), logs, tag)


@pytest.mark.e2e
def test_confirmed_and_not_the_cause(rehearsal: Bisection) -> None:
    proc = rehearsal.proc
    out = proc.stdout + proc.stderr
    assert verdicts(proc.stdout) == {
        1: "passes either way: not the cause" + REHEARSAL,
        2: "fails without, passes with: workaround confirmed" + REHEARSAL,
    }, out
    assert proc.returncode == 0, out
    # progress lines as it goes, one per run, with the failing run's reason: every size without the candidate
    # first, then each failing size again without it and every size with it
    assert len(re.findall(rf"^\[bisect\] world size \d+, with(out)? {CANDIDATE}: running$", proc.stdout, re.M)) == 5
    assert re.findall(
        rf"^\[bisect\] world size (\d+), (with|without) {CANDIDATE}: (passed|FAILED) \(exit (\d):", proc.stdout, re.M
    ) == [
        ("1", "without", "passed", "0"),
        ("2", "without", "FAILED", "1"),
        ("1", "with", "passed", "0"),
        ("2", "without", "FAILED", "1"),
        ("2", "with", "passed", "0"),
    ], out
    assert re.search(
        rf"^\[bisect\] world size 2, without {CANDIDATE}: FAILED \(exit 1: wrong results; [\d.]+ s\): "
        r"2 wrong element\(s\) on rank\(s\) 0,1 \(log: ",
        proc.stdout,
        re.M,
    ), out
    assert sorted(p.name for p in rehearsal.logs.iterdir()) == [
        "world1_with.log",
        "world1_without.log",
        "world2_with.log",
        "world2_without.log",
        "world2_without_rerun.log",
    ]
    assert "verdicts for NCCL_P2P_DISABLE=1:" in proc.stdout
    assert_nothing_left(rehearsal.tag)


@pytest.mark.e2e
def test_runs_get_the_candidate_only_with_it_and_warnings_come_once(rehearsal: Bisection) -> None:
    # NCCL_DEBUG=INFO meets gloo: said once, by the bisector; the --fault_unless variable acts, so it is not
    # named; a rehearsal needs no "cannot apply to NCCL" warning (its verdicts say what they are)
    assert rehearsal.proc.stderr.splitlines() == [
        GLOO_IGNORES + "NCCL_DEBUG=INFO (environment) has no effect here" + GLOO_HINT
    ], rehearsal.proc.stderr
    for name in ("world1_without", "world2_without", "world2_without_rerun"):  # the shell's setting dropped
        log = rehearsal.log(name)
        assert re.search(r"^# settings: NCCL_DEBUG=INFO$", log, re.M), log
        assert "# fault: corrupt:1@0 (armed)" in log
    for name in ("world1_with", "world2_with"):
        log = rehearsal.log(name)
        assert re.search(r"^# settings: NCCL_DEBUG=INFO NCCL_P2P_DISABLE=1$", log, re.M), log
        assert "# fault: corrupt:1@0 (disarmed by --fault_unless)" in log
    for log in rehearsal.logs.iterdir():  # the ranks do not repeat the warning
        assert "warning" not in log.read_text(), log


@pytest.mark.e2e
def test_corrupted_contribution_is_wrong_results(rehearsal: Bisection) -> None:
    """Rank 1 adds 1 to part of its first contribution (all_reduce #0, the first 8-byte warm-up): that
    row counts wrong elements, every later row none; the run fails with exit 1 (wrong results)."""
    for name in ("world2_without", "world2_without_rerun"):
        log = rehearsal.log(name)
        rows = ROW.findall(log)
        assert [int(r[0]) for r in rows] == [8 * 2**i for i in range(14)], log
        assert int(rows[0][5]) > 0 and all(int(r[5]) == 0 for r in rows[1:]), log
        assert "# result: FAILED: wrong results" in log
        assert re.search(r"^rank 1 FAILED: \d+ wrong element", log, re.M), log
        assert "# wrong elements: 2 (seen on rank(s) 0,1)" in log


@pytest.mark.e2e
def test_passing_runs_at_world_sizes_1_and_2(rehearsal: Bisection) -> None:
    for name, world in (("world1_without", 1), ("world1_with", 1), ("world2_with", 2)):
        check_passing_output(rehearsal.log(name), world)


def test_verdict_from_the_runs_and_the_exit_status() -> None:
    """Every verdict --bisect can give, from its runs (first without, rerun without, with), and its exit
    status: 0 only when every verdict is "workaround confirmed" or "not the cause"."""
    probe = probe_module()
    cases = {
        (True, None, True): "passes either way: not the cause",
        (True, None, False): "passes without, fails with: the candidate breaks it",
        (False, False, True): "fails without, passes with: workaround confirmed",
        (False, False, False): "fails either way: not a fix",
        (False, True, True): "fails only some runs without it: flaky, inconclusive",
        (False, True, False): "fails only some runs without it: flaky, inconclusive",
    }
    for runs, expected in cases.items():
        assert probe.verdict(*runs) == expected, runs
    good = [cases[(False, False, True)], cases[(True, None, True)]]
    assert probe.bisect_status(good) == 0
    for bad in (
        "passes without, fails with: the candidate breaks it",
        "fails either way: not a fix",
        "fails only some runs without it: flaky, inconclusive",
    ):
        assert probe.bisect_status([*good, bad]) == 1
    assert "fails either way: not a fix" in probe.EPILOG  # the verdicts the help lists are these
    for verdict in set(cases.values()):
        assert f'"{verdict}"' in probe.EPILOG


def test_warnings_before_any_run() -> None:
    """What the bisector (or --nproc_per_node) warns about before it starts a run, in order."""
    probe = probe_module()

    def warnings(argv: list[str], env: dict[str, str], backend: str = "gloo") -> list[str]:
        return probe.parent_warnings(backend, probe.build_parser().parse_args(argv), env)

    bisect = ["--bisect", "--world_sizes", "1"]
    # on gloo without --fault_unless: the settings gloo ignores, then that the verdicts cannot apply to NCCL
    assert warnings([*bisect, "--candidate", "NCCL_SHM_DISABLE=1"], {"NCCL_DEBUG": "INFO", "PATH": "/bin"}) == [
        GLOO_IGNORES
        + "NCCL_SHM_DISABLE=1 (--candidate), NCCL_DEBUG=INFO (environment) have no effect here"
        + GLOO_HINT,
        "nccl_probe.py: warning: --bisect on backend gloo without --fault_unless runs no NCCL, so its verdicts "
        "cannot apply to NCCL; rehearse with --fault and --fault_unless, or bisect on GPUs with --backend nccl",
    ]
    # a rehearsal whose candidate is the wrong setting (not a fix): the candidate is named once, although
    # the shell sets it too; no "cannot apply" warning
    not_a_fix = [
        *bisect,
        "--candidate",
        "NCCL_P2P_DISABLE=1",
        "--fault",
        "corrupt:0",
        "--fault_unless",
        "PROBE_DEFECT_FIXED=1",
    ]
    assert warnings(not_a_fix, {"NCCL_P2P_DISABLE": "1"}) == [
        GLOO_IGNORES + "NCCL_P2P_DISABLE=1 (--candidate) has no effect here" + GLOO_HINT
    ]
    assert warnings(not_a_fix, {}, backend="nccl") == []  # on NCCL every setting counts
    assert warnings(["--nproc_per_node", "2"], {"NCCL_DEBUG": "INFO"}) == [
        GLOO_IGNORES + "NCCL_DEBUG=INFO (environment) has no effect here" + GLOO_HINT
    ]
    assert warnings(["--nproc_per_node", "2"], {"PATH": "/bin"}) == []


@pytest.mark.e2e
def test_sigterm_during_a_bisection_leaves_nothing_and_exits_143(tmp_path: Path) -> None:
    """SIGTERM reaches the probe while its world-size-2 run hangs in a collective (rank 1 skips it and the
    deadline is 600 s away): the probe stops the run (SIGTERM, SIGKILL after its documented grace), and by
    the time it exits nothing of the run is left. The awaited event is rank 1's own fault line in the run's log."""
    env, tag = tagged_env()
    env.pop("PROBE_DEFECT_FIXED", None)
    cmd = [
        PYTHON,
        str(PROBE),
        "--bisect",
        "--world_sizes",
        "2",
        "--candidate",
        "PROBE_DEFECT_FIXED=1",
        "--fault",
        "skip:1",
        "--fault_unless",
        "PROBE_DEFECT_FIXED=1",
        "--log_dir",
        str(tmp_path),
        "--backend",
        "gloo",
        "-b",
        "8",
        "-e",
        "64",
        "--iters",
        "1",
        "--warmup",
        "0",
        "--timeout",
        "600",
        "--run_limit",
        "900",
    ]
    log = tmp_path / "world2_without.log"
    proc = subprocess.Popen(
        cmd,
        cwd=REPO,
        env=env,
        text=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        wait_for(
            lambda: log.exists() and "leaving all_reduce #0 out" in log.read_text(errors="replace"),
            400,
            "rank 1 of the world-size-2 run skipping all_reduce #0",
            proc,
            log,
        )
        assert len(leftovers(tag)) >= 4  # the probe, torchrun and 2 ranks: the run is really there
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
        gone = leftovers(tag)  # read at once: the probe waits for its run to end before it exits
    finally:
        kill_group(proc)
    assert proc.returncode == 128 + signal.SIGTERM, out + err
    assert err.splitlines()[-1] == "[nccl_probe] interrupted by SIGTERM; runs stopped", err
    assert gone == [], f"left behind: {gone}"
    assert "verdicts for" not in out  # an interrupted bisection gives no verdict


def test_verdict_notes_say_what_a_verdict_is_about() -> None:
    probe = probe_module()
    fault = probe.Fault("skip", 1, 0)
    assert probe.verdict_note("gloo", fault, ("NCCL_P2P_DISABLE", "1")) == (
        " (rehearsal: stand-in defect --fault skip:1@0 unless NCCL_P2P_DISABLE=1; says nothing about NCCL)"
    )
    assert probe.verdict_note("nccl", fault, None) == (
        " (rehearsal: stand-in defect --fault skip:1@0; says nothing about NCCL)"
    )
    assert probe.verdict_note("gloo", None, None) == " (gloo run: cannot apply to NCCL)"
    assert probe.verdict_note("nccl", None, None) == ""  # a real NCCL run: its verdict stands alone
