"""Every output a skill or doc quotes is what the command really prints.

Quotes are marked in the documents with the command that prints them (``output-of`` markers; the format is in
:mod:`mgpu_testing.quoted`), so a new quote is tested as soon as it is marked. Each marked command runs here
through its own entry, as a user's command line reaches it: ``mgpu-lab ...`` through the installed console
script's entry point (:func:`mgpu_lab_entry`; ``train`` and ``train_multigpu`` through their scripts' ``main``),
in this process (:func:`mgpu_testing.in_process.run_in_process`); the NCCL probe, which starts ``torchrun``
itself, as a process. Files the commands read (checkpoints of each library, a crafted file) are made here first.
"""

from __future__ import annotations

import inspect
import pickle
import shlex
import sys
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import torch
from mgpu_testing import PYTHON, REPO, run
from mgpu_testing.docs import PROBE, load_script
from mgpu_testing.flight import hang_run
from mgpu_testing.in_process import run_in_process
from mgpu_testing.quoted import PATH_WORD, Quote, collect, mismatch, placeholders
from mgpu_testing.training import OpensMarker, single_env
from skills_check.loader import load_rst_documents
from skills_check.parsers.markdown import parse_markdown

LIBRARIES = ("rsl_rl", "rl_games", "skrl")


def documents() -> list[Path]:
    skills = sorted(p for p in (REPO / "skills").rglob("*.md") if p.is_file())
    docs = sorted(p for p in (REPO / "docs").rglob("*.rst") if p.is_file() and "_build" not in p.parts)
    return skills + docs


def code_of(path: Path) -> list:
    """The code items of a document, read by the checker's own parsers (as the command tests read them)."""
    rel = path.relative_to(REPO).as_posix()
    if path.suffix == ".md":
        return parse_markdown(rel, path.read_text(encoding="utf-8")).code
    return [c for doc in load_rst_documents(REPO, rel) if doc.path == rel for c in doc.code]


QUOTES, PROBLEMS = collect(documents(), code_of)


def _param(quote: Quote):
    is_probe = shlex.split(quote.command)[1:2] == [PROBE.relative_to(REPO).as_posix()]
    starts_a_job = "hang-run" in placeholders(quote.command)  # the launcher and two ranks, once per session
    return pytest.param(quote, id=quote.id, marks=[pytest.mark.e2e] if is_probe or starts_a_job else [])


# --------------------------------------------------------------------------- the commands, through their entries


def _script_entry(path: Path, args: list[str]) -> Callable[[], object]:
    """An entry script's ``main``: ``main(argv)`` where it takes one, else ``main()`` reading ``sys.argv``."""
    module = load_script(path, f"_mgpu_quoted_{path.stem}")
    if inspect.signature(module.main).parameters:
        return lambda: module.main(args)

    def call() -> object:
        sys.argv[:] = [str(path), *args]  # run_in_process puts sys.argv back
        return module.main()

    return call


def mgpu_lab_entry(args: list[str]) -> Callable[[], object]:
    """``mgpu-lab ARGS`` through the installed console script's entry point. Its subcommands that replace the
    process with an entry script (``ENTRY_SCRIPTS`` beside it: ``train``, ``train_multigpu``) run that script's
    own ``main`` here instead of replacing pytest; every other subcommand runs through the click group itself."""
    (point,) = entry_points(group="console_scripts", name="mgpu-lab")
    main = point.load()
    scripts = getattr(sys.modules[point.module], "ENTRY_SCRIPTS", {})
    assert isinstance(scripts, dict) and {"train", "train_multigpu"} <= set(scripts), (
        f"{point.value}: its module no longer names the subcommands that replace the process (ENTRY_SCRIPTS)"
    )
    if args and args[0] in scripts:
        return _script_entry(REPO / scripts[args[0]][0], args[1:])
    return lambda: main(args, prog_name="mgpu-lab")  # click exits with the command's status


def run_command(command: str, files: dict[str, Path], cwd: Path) -> tuple[object, str]:
    """(exit status, stdout + stderr) of a marker's command, placeholders replaced by ``files``' paths."""
    words = shlex.split(command)
    args = [str(files[w[1:-1]]) if w.startswith("<") and w.endswith(">") else w for w in words]
    if args[0] == "mgpu-lab":
        code, out, err = run_in_process(mgpu_lab_entry(args[1:]), single_env(), cwd=cwd)
    elif args[:2] == ["python", PROBE.relative_to(REPO).as_posix()]:
        proc = run([PYTHON, str(PROBE), *args[2:]], timeout=300, env=single_env(), cwd=cwd)
        code, out, err = proc.returncode, proc.stdout, proc.stderr
    else:
        raise AssertionError(f"no runner for {command!r}: add one to tests/test_quoted_outputs.py")
    text = out + err
    for path in files.values():
        text = text.replace(str(path), PATH_WORD)
    return code, text


# --------------------------------------------------------------------------- the files commands read


def checkpoint_of(library: str, task: str, root: Path) -> Path:
    """Train one iteration of ``library`` on ``task`` on the CPU, through train.py's main(); its checkpoint."""
    args = [
        "--rl_library",
        library,
        "--device",
        "cpu",
        "--task",
        task,
        "--num_envs",
        "4",
        "--max_iterations",
        "1",
        "--log_root",
        str(root),
    ]
    code, out, err = run_in_process(mgpu_lab_entry(["train", *args]), single_env(OMP_NUM_THREADS="1"), cwd=root)
    assert code == 0, err[-3000:]
    lines = [line for line in out.splitlines() if line.startswith("[INFO] checkpoint: ")]
    assert lines, out[-2000:]
    return Path(lines[-1].split(": ", 1)[1])


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """The file a placeholder names, made on first use and shared by the module."""
    root = tmp_path_factory.mktemp("quoted")
    cache: dict[str, Path] = {}

    def make(name: str) -> Path:
        if name not in cache:
            folder = root / name.replace(":", "_")
            folder.mkdir()
            if name == "crafted":
                cache[name] = folder / "model_500.pt"
                torch.save(
                    {
                        "actor_state_dict": OpensMarker(folder / "ran"),
                        "critic_state_dict": {},
                        "model": {},
                        "epoch": 1,
                        "policy": {},
                        "value": {},
                    },
                    cache[name],
                )
            elif name == "empty-dir":
                cache[name] = folder
            elif name == "hang-run":
                cache[name] = Path(hang_run(tmp_path_factory)["run"])
            elif name == "skrl-jax-pickle":
                cache[name] = folder / "agent_500.pickle"
                cache[name].write_bytes(pickle.dumps({"policy": OpensMarker(folder / "ran"), "value": b""}))
            else:
                library, _, task = name.partition(":")
                assert library in LIBRARIES and task, f"unknown placeholder <{name}>"
                cache[name] = checkpoint_of(library, task, folder)
        return cache[name]

    return make


# --------------------------------------------------------------------------- tests


def test_quotes_are_found_and_well_formed() -> None:
    """Zero quotes found means the collector is broken, not that every quote is right."""
    assert not PROBLEMS, PROBLEMS
    where = {q.path for q in QUOTES}
    assert "skills/user/train-multi-gpu/reference.md" in where and "docs/source/features/multi_gpu.rst" in where
    for q in QUOTES:
        assert q.text.strip(), f"{q.id}: empty quote"
        assert q.command.split()[0] in ("mgpu-lab", "python"), f"{q.id}: {q.command!r}"


def test_a_quote_that_is_not_printed_fails() -> None:
    """The matcher is strict: a word changed, or a line of a block missing, is a mismatch; `...` and PATH are not."""
    out = "error: --checkpoint PATH: not an rl_games checkpoint: rsl_rl wrote it\nsecond line\n"
    assert mismatch("not an rl_games checkpoint: rsl_rl wrote it", out, block=False) is None
    assert mismatch("not an rl_games\n  checkpoint: rsl_rl", out, block=False) is None  # wrapped inline
    assert mismatch("--checkpoint PATH: not an ... checkpoint", out, block=False) is None
    assert mismatch("not an rl_games checkpoint: skrl wrote it", out, block=False) is not None
    assert mismatch("error: --checkpoint PATH\nsecond line", out, block=True) is None
    assert mismatch("error: --checkpoint PATH\nthird line", out, block=True) == "third line"
    assert mismatch("rsl_rl wrote it second line", out, block=False) is not None  # one line, not two joined


@pytest.fixture(scope="module")
def printed(made, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], tuple[object, str]]:
    """What a marker's command prints, run once per command for the module (docs and skills quote the same ones)."""
    runs: dict[str, tuple[object, str]] = {}

    def get(command: str) -> tuple[object, str]:
        if command not in runs:
            cwd = tmp_path_factory.mktemp("cwd")
            runs[command] = run_command(command, {name: made(name) for name in placeholders(command)}, cwd)
            assert not [p for p in cwd.rglob("*") if p.is_file()], f"`{command}` left files behind"
        return runs[command]

    return get


@pytest.mark.parametrize("quote", [_param(q) for q in QUOTES])
def test_quoted_output_is_printed(quote: Quote, printed) -> None:
    code, output = printed(quote.command)
    missing = mismatch(quote.text, output, block=quote.kind == "block")
    assert missing is None, (
        f"{quote.id}: `{quote.command}` (exit {code}) does not print {missing!r}; it printed:\n{output[-3000:]}"
    )
    assert quote.exit is None or code == quote.exit, f"{quote.id}: `{quote.command}` exits {code}, not {quote.exit}"


def test_markers_are_read_from_comments_only() -> None:
    """A marker shown as code (how the authoring rules document it) is no marker; a real comment is, inline too."""
    from mgpu_testing.quoted import markers

    md = (
        "Write `<!-- output-of: mgpu-lab train --x -->` before a quote.\n\n"
        "- <!-- output-of (exit 2): mgpu-lab train --y --> a refusal: `error: y`\n"
    )
    assert markers("a.md", md) == [(3, 3, "mgpu-lab train --y", 2)]
    rst = "Intro.\n\n.. output-of: mgpu-lab train --z\n\n- .. output-of (exit 3): python p.py\n\n  ``x``\n"
    assert markers("a.rst", rst) == [(3, 1, "mgpu-lab train --z", None), (5, 3, "python p.py", 3)]
