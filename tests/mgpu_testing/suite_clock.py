"""The suite's own clock (issue 51): what each test file cost in CPU, printed at the end of every run.

Wall time per test (``--durations``) hides what limits this suite on a small machine: the cores. Every test phase
(setup, call, teardown) is measured in CPU seconds, this process's and its reaped children's (a real job's
torchrun, launcher and ranks are all reaped below the test that started them), and the figure travels in the
test's report (``user_properties``), so under xdist the controller adds up what every worker measured. The summary
names the suite's CPU total beside its wall time and the files that cost most, so a slow addition shows in the
next run's output. A shared run (a session fixture computed once under a file lock) counts in the test that
started it. Only the printout depends on this plugin, never a result.

A small machine's speed drifts (a virtual machine's by 10% or more within an hour), so the same suite costs more CPU
seconds at one hour than at another. The ``suite_clock_reference`` ini option names a statement (this project's:
``import torch``, what most of the suite's processes start with); after the tests it runs in a fresh
interpreter (the least of two run at once), and the summary gives its CPU seconds and the tests' CPU in those units,
which compare across runs.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from collections import Counter
from collections.abc import Generator

import pytest

_KEY = "cpu_s"
_SHOWN = 10
_REFERENCE = "suite_clock_reference"


def _cpu_now() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _measured(item: pytest.Item) -> Generator[None, None, None]:
    began = _cpu_now()
    yield
    item.user_properties.append((_KEY, _cpu_now() - began))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    return (yield from _measured(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    return (yield from _measured(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    return (yield from _measured(item))


class SuiteClock:
    """Adds up the CPU seconds that the reports carry, per file and per test (controller or lone process)."""

    def __init__(self, reference: str) -> None:
        self.began = time.monotonic()
        self.reference = reference
        self.files: Counter[str] = Counter()
        self.tests: Counter[str] = Counter()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # the list grows phase by phase, so each report's own figure is its last entry
        spent = [value for key, value in report.user_properties if key == _KEY]
        if spent:
            self.files[report.nodeid.split("::")[0]] += spent[-1]
            self.tests[report.nodeid] += spent[-1]

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.files:
            return
        wall = time.monotonic() - self.began
        total = sum(self.files.values())
        write = terminalreporter.write_line
        terminalreporter.section("suite clock (CPU seconds, the tests' own and their processes')")
        write(f"wall {wall:.0f} s, CPU {total:.0f} s in tests ({total / wall:.2f} cores busy on average)")
        if self.reference:
            unit = reference_cpu(self.reference)
            write(
                f"this machine now: `{self.reference}` in a fresh interpreter costs {unit:.2f} CPU-s; the tests' CPU "
                f"is {total / unit:.0f} of those"
                if unit > 0
                else f"this machine now: `{self.reference}` failed"
            )
        write(f"the {_SHOWN} test files that cost most CPU:")
        for name, seconds in self.files.most_common(_SHOWN):
            write(f"{seconds:8.1f} s  {name}")
        write(f"the {_SHOWN} tests that cost most CPU (a shared run counts in the test that started it):")
        for name, seconds in self.tests.most_common(_SHOWN):
            write(f"{seconds:8.1f} s  {name}")


def reference_cpu(statement: str, samples: int = 2) -> float:
    """The CPU seconds (user and system) a fresh interpreter spends running ``statement``: the least of ``samples``
    interpreters run at once (a single one varies by 15% on a small virtual machine); 0 where one fails."""
    quiet = [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_WRONLY, 0) for fd in (1, 2)]
    argv = [sys.executable, "-c", statement]
    pids = [os.posix_spawn(sys.executable, argv, os.environ, file_actions=quiet) for _ in range(samples)]
    spent = []
    for pid in pids:
        _, status, usage = os.wait4(pid, 0)
        spent.append(usage.ru_utime + usage.ru_stime if os.waitstatus_to_exitcode(status) == 0 else 0.0)
    return min(spent)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        _REFERENCE, "a Python statement whose CPU in a fresh interpreter the suite clock reports (none: not run)"
    )


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist) prints the summary
        config.pluginmanager.register(SuiteClock(str(config.getini(_REFERENCE) or "")), "suite-clock")
