"""Suite-wide fixtures. Shared helpers live in ``tests/mgpu_testing`` (on pytest's ``pythonpath``)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from mgpu_testing import REPO


def pytest_configure(config: pytest.Config) -> None:
    """Keep every cache the suite (and its subprocesses) would write out of the user's home."""
    cache = Path(tempfile.mkdtemp(prefix="mgpu_lab_test_cache_"))
    os.environ["SKILLS_CHECK_CACHE_DIR"] = str(cache / "skills-check")
    os.environ["XDG_CACHE_HOME"] = str(cache)


@pytest.fixture
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def repo_check():  # noqa: ANN201
    """The checker run once on this repository (project, findings), shared by the checker tests."""
    from mgpu_testing.checker import self_check

    return self_check()
