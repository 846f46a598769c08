"""The suite's own clock (issue 51): what each test file cost in CPU, printed at the end of every run.

Wall time per test (``--durations``) hides what limits this suite on a small machine: the cores. Every test phase
(setup, call, teardown) is measured in CPU seconds, this process's and its reaped children's (a real job's
torchrun, launcher and ranks are all reaped below the test that started them), and the figure travels in the
test's report (``user_properties``), so under xdist the controller adds up what every worker measured. The summary
names the suite's CPU total beside its wall time and the files that cost most, so a slow addition shows in the
next run's output. A shared run (a session fixture computed once under a file lock) counts in the test that
started it. Only the printout depends on this plugin, never a result.
"""

from __future__ import annotations

import resource
import time
from collections import Counter
from collections.abc import Generator

import pytest

_KEY = "cpu_s"
_SHOWN = 10


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

    def __init__(self) -> None:
        self.began = time.monotonic()
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
        write(f"the {_SHOWN} test files that cost most CPU:")
        for name, seconds in self.files.most_common(_SHOWN):
            write(f"{seconds:8.1f} s  {name}")
        write(f"the {_SHOWN} tests that cost most CPU (a shared run counts in the test that started it):")
        for name, seconds in self.tests.most_common(_SHOWN):
            write(f"{seconds:8.1f} s  {name}")


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist) prints the summary
        config.pluginmanager.register(SuiteClock(), "suite-clock")
