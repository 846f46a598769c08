"""Issue 38, item 1: a ``--train_script`` / ``-m`` that cannot start is refused before any rank, in one line with
the reason and the place, exit 2. In-process: the launcher's ``main`` with the entry script's parser, its runner
replaced by a trap (a refusal that slipped through fails the test instead of starting a job)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from mgpu_testing import REPO, free_port, run
from mgpu_testing.docs import load_script

from mgpu_lab.core.errors import UsageError
from mgpu_lab.job.config import LaunchConfig
from mgpu_lab.launch import launcher, script_check

SCRIPT = load_script(REPO / "scripts" / "reinforcement_learning" / "train_multigpu.py", "_mgpu_launcher_preflight")
TRAIN = str(REPO / "scripts" / "reinforcement_learning" / "train.py")
CPU2 = ["--num_gpus", "2", "--device", "cpu"]


def launch(args: list[str], cwd: Path, monkeypatch, capsys, **env: str) -> tuple[int, str, str]:
    started: list[list[str]] = []

    def trap(config: LaunchConfig, cmd: list[str]) -> int:
        started.append(cmd)
        return 0

    monkeypatch.setattr(launcher, "run", trap)
    monkeypatch.chdir(cwd)
    code = launcher.main(
        SCRIPT.build_parser(),
        [*args, *CPU2, "--master_port", str(free_port())],
        train_script=TRAIN,
        environ={"CUDA_VISIBLE_DEVICES": "", **env},
    )
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    if code == 2:
        assert not started and out == "" and len(err.splitlines()) == 1, (out, err)
    return code, out, err.strip()


def refused(args: list[str], cwd: Path, monkeypatch, capsys, **env: str) -> str:
    code, out, err = launch(args, cwd, monkeypatch, capsys, **env)
    assert code == 2, (code, out, err)
    assert err.startswith("mgpu-lab train_multigpu: error: "), err
    return err.removeprefix("mgpu-lab train_multigpu: error: ")


# --- a script file ---------------------------------------------------------------------------------------------


def test_a_missing_file(tmp_path: Path, monkeypatch, capsys) -> None:
    assert (
        refused(["--train_script", "nope.py"], tmp_path, monkeypatch, capsys) == "--train_script nope.py: no such file"
    )


def test_a_folder(tmp_path: Path, monkeypatch, capsys) -> None:
    (tmp_path / "pkg").mkdir()
    line = refused(["--train_script", "pkg"], tmp_path, monkeypatch, capsys)
    assert line == "--train_script pkg: a folder, not a Python script file", line


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_is_never_opened(tmp_path: Path, monkeypatch, capsys) -> None:
    os.mkfifo(tmp_path / "train.py")  # opening it for reading would block until a writer came
    line = refused(["--train_script", "train.py"], tmp_path, monkeypatch, capsys)
    assert line == "--train_script train.py: a FIFO, not a Python script file", line


def test_an_elf_binary(tmp_path: Path, monkeypatch, capsys) -> None:
    binary = shutil.which("true") or sys.executable
    shutil.copy(binary, tmp_path / "train")
    if (tmp_path / "train").read_bytes()[:4] != b"\x7fELF":
        pytest.skip("no ELF binaries on this system")
    line = refused(["--train_script", "train"], tmp_path, monkeypatch, capsys)
    assert line.startswith("--train_script train: an executable binary (ELF), not a Python script"), line


def test_other_binary_data(tmp_path: Path, monkeypatch, capsys) -> None:
    (tmp_path / "data.py").write_bytes(b"import os\n\0\0\x01\x02")
    line = refused(["--train_script", "data.py"], tmp_path, monkeypatch, capsys)
    assert line == "--train_script data.py: binary data (NUL bytes), not a Python script", line


def test_a_syntax_error_names_file_and_line(tmp_path: Path, monkeypatch, capsys) -> None:
    (tmp_path / "train.py").write_text("import os\ndef broken(:\n    pass\n")
    line = refused(["--train_script", "train.py"], tmp_path, monkeypatch, capsys)
    assert line.startswith("--train_script train.py: syntax error at train.py:2: "), line


def test_a_text_file_that_is_not_python(tmp_path: Path, monkeypatch, capsys) -> None:
    (tmp_path / "notes.txt").write_text("Train the robot with four GPUs, then rest.\n")
    line = refused(["--train_script", "notes.txt"], tmp_path, monkeypatch, capsys)
    assert line.startswith("--train_script notes.txt: syntax error at notes.txt:1: "), line
    assert line.endswith("(is it a Python script?)"), line


def test_the_script_is_compiled_never_run(tmp_path: Path, monkeypatch, capsys) -> None:
    marker = tmp_path / "ran"
    (tmp_path / "train.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    code, _, _ = launch(["--train_script", "train.py"], tmp_path, monkeypatch, capsys)
    assert code == 0 and not marker.exists()


# --- a module --------------------------------------------------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """``proj/`` (the working folder) with ``pkg/`` (``sub/`` inside, ``train.py``, ``bad.py``), ``plain.py`` and
    ``nomain/``; every ``__init__`` writes a marker, so an import by the launcher shows."""
    proj = tmp_path / "proj"
    for folder in ("pkg", "pkg/sub", "nomain"):
        (proj / folder).mkdir(parents=True)
        (proj / folder / "__init__.py").write_text(f"open({str(tmp_path / 'imported')!r}, 'w').close()\n")
    (proj / "pkg" / "sub" / "train.py").write_text("print('training')\n")
    (proj / "pkg" / "bad.py").write_text("x = (\n")
    (proj / "pkg" / "__main__.py").write_text("print('main')\n")
    (proj / "plain.py").write_text("print('plain')\n")
    return proj


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        ("no_such_mod_38", "-m no_such_mod_38: no module named 'no_such_mod_38' on the ranks' path"),
        ("pkg.missing", "-m pkg.missing: no module named 'pkg.missing' (searched "),
        ("pkg.sub.missing", "-m pkg.sub.missing: no module named 'pkg.sub.missing' (searched "),
        ("plain.inner", "-m plain.inner: plain is a module, not a package; 'inner' cannot be in it"),
        ("nomain", "-m nomain: a package without __main__.py"),
        ("pkg.bad", "-m pkg.bad: syntax error at bad.py:1: "),
        ("mgpu_lab.no_such_submodule", "-m mgpu_lab.no_such_submodule: no module named 'mgpu_lab.no_such_submodule'"),
    ],
)
def test_a_module_that_cannot_be_found(tree: Path, module: str, expected: str, monkeypatch, capsys) -> None:
    line = refused(["-m", module], tree, monkeypatch, capsys)
    assert line.startswith(expected), line
    assert not (tree.parent / "imported").exists()  # the parent packages were searched, never imported


@pytest.mark.parametrize("module", ["pkg", "pkg.sub.train", "plain", "json.tool", "torch.distributed.run"])
def test_modules_that_exist_start(tree: Path, module: str, monkeypatch, capsys) -> None:
    before = set(sys.modules)
    code, _, err = launch(["-m", module], tree, monkeypatch, capsys)
    assert code == 0, err
    assert not (tree.parent / "imported").exists()
    assert not {m for m in set(sys.modules) - before if m.startswith(("pkg", "plain", "json.tool"))}


def test_pythonpath_given_to_the_ranks_is_searched(tree: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert refused(["-m", "pkg.sub.train"], elsewhere, monkeypatch, capsys).startswith("-m pkg.sub.train: no module")
    code, _, err = launch(["-m", "pkg.sub.train"], elsewhere, monkeypatch, capsys, PYTHONPATH=str(tree))
    assert code == 0, err


def test_a_package_that_extends_its_path_is_left_to_the_ranks(tree: Path) -> None:
    (tree / "pkg" / "__init__.py").write_text("__path__ = __import__('pkgutil').extend_path(__path__, __name__)\n")
    script_check.module("pkg.elsewhere.train", {}, cwd=str(tree))  # not refused: only running it can tell


SHADOW = """import importlib.util, os, sys
_spec = importlib.util.spec_from_file_location(__name__ + ".sub", os.path.join(os.path.dirname(__file__), "impl.py"))
sys.modules[_spec.name] = importlib.util.module_from_spec(_spec)
"""


def test_a_module_a_plain_module_adds_on_import_starts_as_python_m_runs_it(tree: Path, monkeypatch, capsys) -> None:
    """``python -m os.path`` runs (``os`` is no package; importing it adds ``os.path``), so the launcher takes it;
    a plain module of the working folder that adds a name on import is found the same way, in a child interpreter
    (this process imports nothing of it, nothing named is run); names ``python -m`` cannot run are refused."""
    (tree / "shadow.py").write_text(SHADOW + "sys.modules[__name__ + '.alias'] = importlib.import_module('plain')\n")
    (tree / "impl.py").write_text(f"open({str(tree / 'ran')!r}, 'w').close()\n")
    before = set(sys.modules)
    for module in ("os.path", "shadow.sub"):
        code, _, err = launch(["-m", module], tree, monkeypatch, capsys)
        assert code == 0, (module, err)
    assert not (tree / "ran").exists() and "shadow" not in set(sys.modules) - before
    for module in ("shadow.other", "shadow.alias", "os.path.inner"):  # python -m says no (plain's loader is
        line = refused(["-m", module], tree, monkeypatch, capsys)  # plain's own: it cannot load shadow.alias)
        parent, rest = module.split(".", 1)
        assert (
            line
            == f"-m {module}: {parent} is a module, not a package; {rest!r} cannot be in it (nor does importing it add one)"
        )


def test_the_launcher_and_python_m_agree_on_names_inside_a_plain_module(tree: Path) -> None:
    """The oracle: the real ``python -m`` in the same folder runs exactly the names the launcher takes."""
    (tree / "shadow.py").write_text(SHADOW)
    (tree / "impl.py").write_text("pass\n")
    for module in ("os.path", "shadow.sub", "shadow.other", "os.path.inner"):
        try:
            script_check.module(module, dict(os.environ), cwd=str(tree))
            taken = True
        except UsageError:
            taken = False
        ran = run([sys.executable, "-m", module], cwd=tree, timeout=60, env=dict(os.environ)).returncode == 0
        assert taken == ran, module
