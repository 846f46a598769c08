"""The rank entry loads torch only when the script does (issue 51: a rank of a script without torch cost about two
CPU-seconds of torch import that the script never used).

Each case is the rank entry run as torchrun runs it (``python .../rank_entry.py SCRIPT``, one process, no
launcher): what a process has imported is a property of that process, so these start one. The hook itself is
checked in this process on a module of its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from mgpu_testing import PYTHON, loopback_env

from mgpu_lab.health import collectives, rank_entry

ENTRY = rank_entry.__file__

REPORT_TORCH = """
import sys
print("torch loaded:", "torch" in sys.modules)
"""

TRACKED_TORCH = """
import sys
import torch
import torch.distributed as dist
from torch.optim.optimizer import _global_optimizer_post_hooks
print("torch loaded:", "torch" in sys.modules)
print("all_reduce wrapped:", hasattr(dist.all_reduce, "__wrapped__"))
print("step hooks:", len(_global_optimizer_post_hooks))
"""

FAILS_WITHOUT_TORCH = """
raise ValueError("no such task")
"""


def entry(tmp_path: Path, source: str, **env: str) -> subprocess.CompletedProcess:
    script = tmp_path / "script.py"
    script.write_text(source, encoding="utf-8")
    return subprocess.run(
        [PYTHON, ENTRY, str(script)], capture_output=True, text=True, timeout=120, env=loopback_env(**env)
    )


def test_a_script_without_torch_runs_without_torch(tmp_path: Path) -> None:
    proc = entry(tmp_path, REPORT_TORCH)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["torch loaded: False"], proc.stdout


def test_a_script_that_imports_torch_is_tracked_from_its_next_statement(tmp_path: Path) -> None:
    proc = entry(tmp_path, TRACKED_TORCH)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["torch loaded: True", "all_reduce wrapped: True", "step hooks: 1"]


def test_a_failure_without_torch_still_reaches_torchruns_error_file(tmp_path: Path) -> None:
    """torch elastic's error handler writes the file torchrun's report reads, as its ``record`` did; the rank says
    the error in one line, pointing at that report."""
    error_file = tmp_path / "error.json"
    error_file.touch()  # torchrun names it; the handler overwrites it
    proc = entry(tmp_path, FAILS_WITHOUT_TORCH, TORCHELASTIC_ERROR_FILE=str(error_file))
    assert proc.returncode == 1, proc.stderr
    record = json.loads(error_file.read_text(encoding="utf-8"))
    assert record["message"]["message"] == "ValueError: no such task"
    assert 'raise ValueError("no such task")' in record["message"]["extraInfo"]["py_callstack"]
    assert "[ERROR] rank 0: ValueError: no such task (its traceback is in torchrun's report" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_hook_runs_after_the_first_import_only_and_then_leaves(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "hooked_mod.py").write_text("import sys\nLOADED_WHEN_CALLED = None\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list[bool] = []

    def callback() -> None:  # the module has run whole when this is called
        seen.append(hasattr(sys.modules["hooked_mod"], "LOADED_WHEN_CALLED"))

    hook = collectives._AfterImport("hooked_mod", callback)
    monkeypatch.setattr(sys, "meta_path", [hook, *sys.meta_path])
    monkeypatch.delitem(sys.modules, "hooked_mod", raising=False)
    import hooked_mod

    assert seen == [True] and hook not in sys.meta_path
    del sys.modules["hooked_mod"]
    import hooked_mod  # noqa: F401, F811  (a second import: the hook is gone)

    assert seen == [True]
