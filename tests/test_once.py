"""mgpu_testing.once: the suite's shared runs are computed once per session and read back by every other caller."""

from __future__ import annotations

from pathlib import Path

import pytest
from mgpu_testing.once import once


def test_the_first_caller_computes_and_the_others_read_its_record(tmp_path_factory: pytest.TempPathFactory) -> None:
    calls: list[Path] = []

    def compute(folder: Path) -> dict[str, str]:
        calls.append(folder)
        (folder / "made").write_text("x")
        return {"folder": str(folder)}

    first = once(tmp_path_factory, "once-test", compute)
    second = once(tmp_path_factory, "once-test", compute)
    assert len(calls) == 1 and first == second == {"folder": str(calls[0])}
    assert calls[0].name.startswith("once-test-") and (calls[0] / "made").read_text() == "x"


def test_a_failed_try_records_nothing_and_the_next_caller_tries_in_a_fresh_folder(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    folders: list[Path] = []

    def failing(folder: Path) -> None:
        folders.append(folder)
        (folder / "half").write_text("x")
        raise RuntimeError("the run failed to start")

    with pytest.raises(RuntimeError):
        once(tmp_path_factory, "once-retry", failing)
    got = once(tmp_path_factory, "once-retry", lambda folder: folders.append(folder) or sorted(folder.iterdir()))
    assert got == [] and len(folders) == 2 and folders[0] != folders[1]
