"""Issue 49, item 1: the launch record is type-checked at no start-up cost. ``Frozen`` carries
``typing.dataclass_transform`` for the type checker only, so mypy (run here in-process on a small file) reports a
misspelt field and a wrongly typed one, while the launcher's start-up still imports neither ``typing`` nor
``dataclasses``."""

from __future__ import annotations

from pathlib import Path

from mgpu_testing import PYTHON, REPO, run
from mypy import api

from mgpu_lab.job.config import LaunchConfig, SchedulerEnv

PROBE = """\
from mgpu_lab.job.config import LaunchConfig, SchedulerEnv

LaunchConfig(rl_librar="rsl_rl", nproc=5)
SchedulerEnv(nnodes="2").nnodes = "3"
SchedulerEnv(nnodes="2", rdzv_id=None)
"""


def test_mypy_reports_a_misspelt_and_a_mistyped_field(tmp_path: Path, monkeypatch) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE, encoding="utf-8")
    monkeypatch.setenv("MYPYPATH", str(REPO / "src"))
    out, err, status = api.run(
        [str(probe), "--config-file", "", "--cache-dir", "/dev/null", "--no-error-summary", "--hide-error-context"]
    )
    errors = sorted(line.split(": error: ", 1)[1] for line in out.splitlines() if ": error: " in line)
    assert status == 1, (out, err)
    assert errors == [
        'Argument "nproc" to "LaunchConfig" has incompatible type "int"; expected "str | None"  [arg-type]',
        'Property "nnodes" defined in "SchedulerEnv" is read-only  [misc]',
        'Unexpected keyword argument "rl_librar" for "LaunchConfig"; did you mean "rl_library"?  [call-arg]',
    ], out  # line 5, a record built right, is no error


def test_at_run_time_the_records_stay_frozen_and_keyword_checked() -> None:
    env = SchedulerEnv(nnodes="2")
    assert (env.nnodes, env.nodes, env.port) == ("2", "2", "29500")
    for bad in (lambda: SchedulerEnv(nnode="2"), lambda: LaunchConfig(rl_library="skrl")):
        try:
            bad()
        except TypeError as exc:
            assert "unknown fields" in str(exc) and "missing fields" in str(exc)
        else:
            raise AssertionError("an unknown or missing field was taken")
    try:
        env.nnodes = "3"  # type: ignore[misc]
    except AttributeError:
        pass
    else:
        raise AssertionError("a frozen record was changed")


def test_the_record_s_module_imports_neither_typing_nor_dataclasses() -> None:
    """The reason for the hand-made base: the launcher's --dry_run never pays for these imports (what importing the
    module adds counts: a tool loaded first, such as coverage's subprocess hook, may bring typing)."""
    code = (
        "import sys; before = set(sys.modules); import mgpu_lab.job.config; added = set(sys.modules) - before; "
        "print(sorted(m for m in ('typing', 'dataclasses', 'inspect') if m in added))"
    )
    proc = run([PYTHON, "-c", code], timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", (proc.stdout, proc.stderr)
