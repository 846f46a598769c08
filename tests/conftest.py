"""Suite-wide fixtures. Shared helpers live in ``tests/mgpu_testing`` (on pytest's ``pythonpath``).

The expensive real runs (one healthy 2-rank job per library, one two-node restart job per rendezvous form, one
Sphinx build) are session-scoped fixtures here, so every test that needs one shares it: see :mod:`mgpu_testing.runs`
and :mod:`mgpu_testing.restarts`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from mgpu_testing import REPO

#: the suite's CPU clock: each test file's CPU cost, summed over the xdist workers, printed at the end of the run;
#: pytester runs that plugin on a small suite of its own (tests/test_suite_clock.py)
pytest_plugins = ["mgpu_testing.suite_clock", "pytester"]

_SCRATCH = pytest.StashKey[Path]()
_SAVED_ENV = pytest.StashKey[dict[str, str | None]]()
_SCRATCH_VARIABLES = (
    "SKILLS_CHECK_CACHE_DIR",
    "XDG_CACHE_HOME",
    "TMPDIR",
    "OMP_NUM_THREADS",
    "JAX_COMPILATION_CACHE_DIR",
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS",
)


#: the suite's longest test files, longest first (measured: the sum of their tests' durations in a run on 3 xdist
#: workers and 2 cores, from 330 s down to 30 s), handed to the workers first (addopts keeps xdist from reordering
#: them), so that the last minutes run short files on every worker instead of one long file on one; the order within
#: each file is kept. Only the order of the run depends on this list, never a result.
LONG_FILES = (
    # the real Isaac Lab 3.0: the launcher around its per-rank trainer (about 2.5 minutes on one worker with Warp's
    # kernels compiled ahead by setup_env.sh), and beside it on another worker its own `isaaclab train`
    "test_isaaclab_real_e2e.py",
    "test_isaaclab_side_by_side_e2e.py",  # Isaac Lab's own `isaaclab train` and ours, about 1.5 minutes
    "test_skill_commands.py",  # asks for the healthy runs too
    "test_multinode_restart_e2e.py",  # two loopback nodes per job, restarts across them (about 4 minutes)
    "test_elastic_e2e.py",  # two loopback nodes shrink to one (about a minute, mostly waiting)
    "test_progress_e2e.py",  # four plain-script jobs past short limits at once, and a Ctrl-C (about a minute)
    "test_any_script_e2e.py",
    "test_watchdog.py",
    "test_nccl_probe.py",
    "test_resume.py",
    "test_quoted_outputs.py",
    "test_continue_run_e2e.py",
    "test_launcher_lifetime.py",
    "test_trainer_disk_full.py",
    "test_launcher_e2e.py",
    "test_nccl_probe_bisect.py",
    "test_failure_report_e2e.py",
    "test_cluster_e2e.py",
    "test_rsl_rl.py",
    "test_timing_e2e.py",
    "test_checkpoint_docs.py",
    "test_faults.py",
    "test_rl_games.py",
    "test_play.py",
    "test_lsp_incremental.py",  # parses the docs' largest page whole and by sections, edit after edit
    "test_lsp.py",
    "test_oom.py",
)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: two workers more than the cores. Much of the suite waits (a rank's deadline, a hang timeout, a
    rendezvous, another worker's shared run) rather than computes, and the extra workers fill those waits."""
    return (os.cpu_count() or 1) + 2


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist, the long files first (:data:`LONG_FILES`); a stable sort, so each file's tests keep their order."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        rank = {name: i for i, name in enumerate(LONG_FILES)}
        items.sort(key=lambda item: rank.get(item.path.name, len(LONG_FILES)))


def pytest_configure(config: pytest.Config) -> None:
    """One scratch folder for what the suite's subprocesses leave: every cache they would write (never in
    the user's home) and their temp files (TMPDIR: a launcher killed by a test cannot remove its
    supervision folder). pytest's own tmp_path folders are pytest's."""
    scratch = Path(tempfile.mkdtemp(prefix="mgpu_lab_test_"))  # fixes this process's temp folder (cached)
    (scratch / "tmp").mkdir()
    config.stash[_SCRATCH] = scratch
    config.stash[_SAVED_ENV] = {name: os.environ.get(name) for name in _SCRATCH_VARIABLES}
    os.environ["SKILLS_CHECK_CACHE_DIR"] = str(scratch / "cache" / "skills-check")
    os.environ["XDG_CACHE_HOME"] = str(scratch / "cache")
    os.environ["TMPDIR"] = str(scratch / "tmp")  # subprocesses only: tempfile cached this process's folder above
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # several workers share the cores: torch in a worker (in-process trainings) and in the processes it starts
        # uses one thread, so the workers do not oversubscribe the cores (set before anything here imports torch)
        os.environ["OMP_NUM_THREADS"] = "1"
    else:
        # JAX's compilation cache, one for the session (xdist workers inherit it from the controller): skrl's JAX
        # processes compile the same functions, and a cached compile saves about 5 of a process's 13 CPU-seconds.
        # The folder is this session's own (made above, removed at the end), so nothing loaded comes from elsewhere
        os.environ["JAX_COMPILATION_CACHE_DIR"] = str(scratch / "cache" / "jax")
        os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the scratch folder and restore the environment: the suite leaves no temp folder behind."""
    scratch = config.stash.get(_SCRATCH, None)
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)
    for name, value in config.stash.get(_SAVED_ENV, {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(autouse=True)
def _checks_parse_in_this_process(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A check called in this process forks no helper (``--jobs`` defaults to 1): a pytest worker is a large
    process (torch imported), and forking it for every check of a small tree cost the checker's tests 15% more
    CPU than they spend checking. The parsing worker and the rules' child are tested in
    tests/test_checker_prefetch.py and tests/test_checker_forked.py, and every check run as a process of its own
    (the documented commands) keeps the default."""
    if request.node.path.name == "test_checker_prefetch.py":
        return
    from skills_check import forked

    monkeypatch.setattr(forked, "default_jobs", lambda: 1)


@pytest.fixture
def repo() -> Path:
    return REPO


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the checker's base fixture tree (tests/fixtures/checker/base), to edit."""
    from mgpu_testing.checker import make_tree

    return make_tree(tmp_path / "repo")


@pytest.fixture(scope="session")
def repo_check():
    """The checker run once on this repository (project, findings), shared by the checker tests."""
    from mgpu_testing.checker import self_check

    return self_check()


@pytest.fixture(scope="session")
def healthy_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], object]]:
    """``healthy_run(library)``: the one real, healthy 2-rank CPU job of ``library`` this session (see
    :func:`mgpu_testing.runs.train_two_ranks`), run the first time a test asks for it. ``library`` is
    ``rsl_rl``, ``rl_games``, ``skrl`` or ``skrl-jax``. Tests read its output and files; they never write
    into its folders (copy what you change)."""
    import dataclasses

    from mgpu_testing.once import once
    from mgpu_testing.runs import HealthyRun, train_two_ranks

    done: dict[str, HealthyRun] = {}

    def get(library: str) -> HealthyRun:
        if library not in done:  # one run per session, shared by every xdist worker
            record = once(
                tmp_path_factory,
                f"healthy-{library}",
                lambda folder: {**dataclasses.asdict(train_two_ranks(library, folder)), "log_root": str(folder)},
            )
            done[library] = HealthyRun.from_record(record)
        return done[library].assert_ok()  # a failed run fails each test that needs it, and runs once

    yield get


@pytest.fixture(scope="session")
def restarted_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], object]]:
    """``restarted_run(form)``: the one real two-node restart job of rendezvous ``form`` (``c10d`` or ``static``)
    this session (see :mod:`mgpu_testing.restarts`), run the first time a test asks for it, shared by every xdist
    worker. Tests read its output and files; they never write into its folders."""
    from mgpu_testing.once import once
    from mgpu_testing.restarts import RestartedRun, restart_two_nodes

    done: dict[str, RestartedRun] = {}

    def get(form: str) -> RestartedRun:
        if form not in done:
            done[form] = RestartedRun.from_record(
                once(tmp_path_factory, f"restarted-{form}", lambda folder: restart_two_nodes(form, folder))
            )
        return done[form]

    yield get


@pytest.fixture(scope="session")
def sphinx_html(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The one strict (``-W``) Sphinx build of ``docs/`` this session; its HTML folder."""
    from mgpu_testing.docs import build_sphinx
    from mgpu_testing.once import once

    def build(root: Path) -> dict[str, object]:
        proc = build_sphinx(REPO / "docs", root / "html", root / "doctrees")
        return {"returncode": proc.returncode, "stderr": proc.stderr[-4000:], "html": str(root / "html")}

    built = once(tmp_path_factory, "sphinx", build)  # one build per session, shared by every xdist worker
    assert built["returncode"] == 0, f"sphinx-build -W failed:\n{built['stderr']}"
    return Path(built["html"])
