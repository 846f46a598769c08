"""The suite's clock (tests/mgpu_testing/suite_clock.py): a run ends with the CPU its tests and their processes spent,
per file and per test, the costliest first. Run here on a small suite of its own (pytester, in this process)."""

from __future__ import annotations

import re

import pytest

SUITE = """
import subprocess
import sys


def test_spends_in_a_child():
    subprocess.run([sys.executable, "-c", "sum(i * i for i in range(3_000_000))"], check=True)


def test_spends_nothing():
    pass
"""


def test_the_clock_counts_child_processes_and_orders_the_costliest_first(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_costs=SUITE, test_cheap="def test_cheap():\n    pass\n")
    result = pytester.runpytest_inprocess(
        "-p", "mgpu_testing.suite_clock", "-p", "no:cacheprovider", "-p", "no:asyncio"
    )
    result.assert_outcomes(passed=3)
    out = result.stdout.str()
    assert re.search(r"^wall \d+ s, CPU \d+ s in tests \([\d.]+ cores busy on average\)$", out, re.M), out
    files = re.findall(r"^ +([\d.]+) s  (test_\w+\.py)$", out, re.M)
    assert [name for _, name in files] == ["test_costs.py", "test_cheap.py"], out
    assert float(files[0][0]) >= 0.1, out  # the child's CPU, reaped by the test that started it
    tests = re.findall(r"^ +([\d.]+) s  (test_\w+\.py::\w+)$", out, re.M)
    assert tests[0][1] == "test_costs.py::test_spends_in_a_child", out


def test_the_clock_states_the_tests_cpu_in_units_of_a_reference_statement(pytester: pytest.Pytester) -> None:
    """The machine's speed drifts: the summary also gives a fresh interpreter's CPU for the reference statement
    (measured after the tests) and the tests' CPU in those units; a reference that fails says so."""
    pytester.makepyfile(test_costs=SUITE)
    plugins = ("-p", "mgpu_testing.suite_clock", "-p", "no:cacheprovider", "-p", "no:asyncio")
    spin = "sum(i * i for i in range(1_500_000))"
    out = pytester.runpytest_inprocess(*plugins, "-o", f"suite_clock_reference={spin}").stdout.str()
    found = re.search(rf"^this machine now: `{re.escape(spin)}` in a fresh interpreter costs ([\d.]+) CPU-s; "
                      r"the tests' CPU is (\d+) of those$", out, re.M)  # fmt: skip
    assert found and float(found[1]) >= 0.05, out
    failing = pytester.runpytest_inprocess(*plugins, "-o", "suite_clock_reference=raise SystemExit(3)").stdout.str()
    assert re.search(r"^this machine now: `raise SystemExit\(3\)` failed$", failing, re.M), failing
    plain = pytester.runpytest_inprocess(*plugins).stdout.str()
    assert "this machine now" not in plain, plain
