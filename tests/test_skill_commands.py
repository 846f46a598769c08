"""Every ``mgpu-lab train_multigpu`` / ``mgpu-lab train`` example in the skills and docs must be true.

The examples are collected from the files themselves (markdown fences and inline code in
``skills/**/*.md``; code blocks, literal blocks and inline literals in ``docs/**/*.rst``), so a new
example is tested without anyone listing it. Launcher examples run with ``--dry_run`` (exit 0);
trainer examples are parsed by ``train.py``'s own ``build_parser()``.

Then every example trains for real in its CPU form, derived here (see :func:`cpu_form`): ``--device
cpu``, few environments and iterations, CPU ranks on gloo, every address rewritten to a free port on
127.0.0.1, and each node of a multi-node example started as its own launcher on this machine (a ``mgpu-lab
train`` example runs through train.py's main in pytest's process: see :func:`run_cpu_form`). One run
per distinct command *shape* (see :class:`Shape`) keeps the suite's time bounded, and the shapes of the
session's healthy runs (tests/mgpu_testing/runs.py: one node per torch library, two JAX nodes) are those
runs, shared with the library tests rather than trained again; so are rsl_rl's two-node shapes, whose runs are the
session's restart jobs (tests/mgpu_testing/restarts.py: each attempt is such a run, and the job restarts once more
than a CPU form would), shared with tests/test_multinode_restart_e2e.py.

The code is read with the checker's own parsers (``tools/skills``), so both see the same snippets.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType

import pytest
from mgpu_testing import PYTHON, REPO, free_port, loopback_env
from mgpu_testing.docs import LAUNCHER, PROBE, TRAINER, load_script, rel
from mgpu_testing.restarts import ATTEMPTS
from mgpu_testing.runs import WITH_HEALTHY_RUN, HealthyRun, copy_run
from mgpu_testing.runs import run_nodes as run_nodes_together
from mgpu_testing.training import DIGEST_ANYWHERE, SYNC_ANYWHERE, TASK, THROUGHPUT, TIME, single_env

#: enough visible devices for every GPU-count check in the examples (the launcher never touches them)
EIGHT_GPUS = "0,1,2,3,4,5,6,7"

SHELL_STOPS = {"|", "||", "&&", ";", "&", ">", ">>", "<", "2>", "2>&1"}


# --------------------------------------------------------------------------- documents


@dataclass(frozen=True)
class Snippet:
    """A piece of code found in a document: a code block or an inline literal."""

    path: str  # repository-relative
    line: int
    text: str
    kind: str  # "block" | "inline"


def skill_markdown_files() -> list[Path]:
    """The skills' markdown, plus the README (its commands are the first a user runs)."""
    return sorted(p for p in (REPO / "skills").rglob("*.md") if p.is_file()) + [REPO / "README.md"]


def doc_rst_files() -> list[Path]:
    return sorted(p for p in (REPO / "docs").rglob("*.rst") if p.is_file() and "_build" not in p.parts)


# The checker's own parsers (markdown-it-py; docutils with Sphinx stand-ins; tools/skills is on pytest's
# pythonpath) find the code: one reading of the documents for the checker and for these tests.
from skills_check.loader import load_rst_documents
from skills_check.parsers.markdown import parse_markdown


def _snippets(doc) -> list[Snippet]:
    assert not doc.problems, [f.message for f in doc.problems]
    return [Snippet(doc.path, c.line, c.text, c.kind) for c in doc.code]


def markdown_snippets(path: Path) -> list[Snippet]:
    return _snippets(parse_markdown(rel(path), path.read_text(encoding="utf-8")))


def rst_snippets(path: Path) -> list[Snippet]:
    """The page's code and the code of every file it shows with ``literalinclude`` (read by the checker's loader)."""
    return [s for doc in load_rst_documents(REPO, rel(path)) for s in _snippets(doc)]


def all_snippets() -> list[Snippet]:
    out: list[Snippet] = []
    for p in skill_markdown_files():
        out.extend(markdown_snippets(p))
    for p in doc_rst_files():
        out.extend(rst_snippets(p))
    return out


# --------------------------------------------------------------------------- commands


@dataclass(frozen=True)
class Command:
    sub: str  # "train_multigpu" | "train" | "probe"
    args: tuple[str, ...]
    where: str  # path:line
    source: str  # the line as written (continuations joined)

    @property
    def id(self) -> str:
        return f"{self.where}:{' '.join(self.args)[:60]}"


def logical_lines(text: str) -> list[tuple[int, str]]:
    """Lines with backslash continuations joined; (offset of the first line, text)."""
    out: list[tuple[int, str]] = []
    buf: list[str] = []
    start = 0
    for i, raw in enumerate(text.splitlines()):
        if not buf:
            start = i
        stripped = raw.rstrip()
        if stripped.endswith("\\"):
            buf.append(stripped[:-1])
            continue
        buf.append(stripped)
        out.append((start, " ".join(part.strip() for part in buf)))
        buf = []
    if buf:
        out.append((start, " ".join(part.strip() for part in buf)))
    return out


_ISAACLAB = re.compile(r"\bmgpu-lab\s+train(_multigpu)?\b")


def commands_in(snippet: Snippet) -> list[Command]:
    """``mgpu-lab train[_multigpu]`` commands and NCCL-probe invocations in one snippet."""
    out: list[Command] = []
    for offset, line in logical_lines(snippet.text):
        if line.lstrip().startswith("#"):
            continue
        if not (_ISAACLAB.search(line) or "nccl_probe.py" in line):
            continue
        where = f"{snippet.path}:{snippet.line + offset}"
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError as exc:  # unbalanced quotes: a broken example
            out.append(Command("unparsable", (str(exc),), where, line))
            continue
        for i, tok in enumerate(tokens):
            sub = None
            if tok == "mgpu-lab" and i + 1 < len(tokens) and tokens[i + 1] in ("train", "train_multigpu"):
                sub, rest = tokens[i + 1], tokens[i + 2 :]
            elif tok.endswith("nccl_probe.py"):
                sub, rest = "probe", tokens[i + 1 :]
            if sub is None:
                continue
            args: list[str] = []
            for arg in rest:
                if arg in SHELL_STOPS:
                    break
                args.append(arg)
            out.append(Command(sub, tuple(args), where, line))
            break
    return out


def collect_commands() -> list[Command]:
    seen: set[tuple[str, tuple[str, ...], str]] = set()
    out: list[Command] = []
    for snip in all_snippets():
        for cmd in commands_in(snip):
            key = (cmd.sub, cmd.args, cmd.where)
            if key not in seen:
                seen.add(key)
                out.append(cmd)
    return out


COMMANDS = collect_commands()
LAUNCHER_CMDS = [c for c in COMMANDS if c.sub == "train_multigpu"]
TRAINER_CMDS = [c for c in COMMANDS if c.sub == "train"]
PROBE_CMDS = [c for c in COMMANDS if c.sub == "probe"]


# --------------------------------------------------------------------------- tests


def test_collection_finds_examples() -> None:
    """The collector must see the examples; zero found means it is broken, not that all is well."""
    assert LAUNCHER_CMDS, "no `mgpu-lab train_multigpu` command found in skills/ or docs/"
    assert TRAINER_CMDS, "no `mgpu-lab train` command found in skills/ or docs/"
    files = {c.where.rsplit(":", 1)[0] for c in LAUNCHER_CMDS}
    assert "skills/user/train-multi-gpu/reference.md" in files
    assert "docs/source/features/multi_gpu.rst" in files
    assert not [c for c in COMMANDS if c.sub == "unparsable"], [c for c in COMMANDS if c.sub == "unparsable"]


def test_collector_joins_continuations_and_strips_prefixes() -> None:
    snip = Snippet(
        "x.md",
        1,
        "# comment mgpu-lab train_multigpu --bogus\n"
        "NCCL_DEBUG=INFO uv run mgpu-lab train_multigpu \\\n  --num_gpus 2 \\\n  --task T | tee out\n"
        "uv run mgpu-lab train --seed 3  # trailing comment\n",
        "block",
    )
    cmds = commands_in(snip)
    assert [(c.sub, c.args) for c in cmds] == [
        ("train_multigpu", ("--num_gpus", "2", "--task", "T")),
        ("train", ("--seed", "3")),
    ]
    assert cmds[0].where == "x.md:2" and cmds[1].where == "x.md:5"


@pytest.fixture(scope="module")
def trainer_parser():
    assert TRAINER.is_file(), f"{rel(TRAINER)} is missing"
    return load_script(TRAINER, "_mgpu_docs_train_script").build_parser()


@pytest.fixture(scope="module")
def launcher_parser():
    assert LAUNCHER.is_file(), f"{rel(LAUNCHER)} is missing"
    return load_script(LAUNCHER, "_mgpu_docs_launcher_script").build_parser()


def check_training_args(args: list[str], cmd: Command, parser, capsys) -> None:
    """train.py's own parser accepts ``args``, and the task named is a built-in one."""
    from mgpu_lab.train.tasks.catalog import TASKS

    try:
        ns = parser.parse_args(args)
    except SystemExit as exc:
        pytest.fail(
            f"{cmd.where}: `{cmd.source}` is rejected by train.py's parser (exit {exc.code}): "
            f"{capsys.readouterr().err.strip()}"
        )
    assert ns.task in TASKS, f"{cmd.where}: unknown task {ns.task!r}; built-in: {sorted(TASKS)}"


@pytest.mark.parametrize("cmd", LAUNCHER_CMDS, ids=lambda c: c.id)
def test_launcher_example_dry_runs(
    cmd: Command, launcher_parser, trainer_parser, capsys, monkeypatch, tmp_path: Path
) -> None:
    """The launcher's own main, in-process, on eight made-up GPUs (an inventory passed in, as the tests of the
    launcher do); the entry script as a process is tests/test_launcher_e2e.py's and test_cli.py's. Another
    project's script (Isaac Lab's train.py, a user's own) gets a stand-in file where the example says."""
    from mgpu_lab.launch import launcher
    from mgpu_lab.launch.devices import Inventory, made_up_uuid

    script, module = foreign_script(cmd), foreign_module(cmd)
    stand_in = "raise SystemExit('a stand-in: only --dry_run reads this path')\n"
    if script is not None:
        (tmp_path / script).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / script).write_text(stand_in)
    environ = loopback_env(CUDA_VISIBLE_DEVICES=EIGHT_GPUS)
    if module is not None:  # another project's module (Isaac Lab's trainer): a stand-in package tree on the path
        parts = module.split(".")
        for depth in range(1, len(parts)):
            (tmp_path / "modules" / Path(*parts[:depth])).mkdir(parents=True, exist_ok=True)
            (tmp_path / "modules" / Path(*parts[:depth]) / "__init__.py").write_text("")
        (tmp_path / "modules" / Path(*parts[:-1]) / f"{parts[-1]}.py").write_text(stand_in)
        monkeypatch.syspath_prepend(str(tmp_path / "modules"))
        environ["PYTHONPATH"] = str(tmp_path / "modules")
    monkeypatch.chdir(tmp_path if script is not None else REPO)
    eight = Inventory([made_up_uuid(i) for i in range(8)], [], "eight made-up GPUs")
    try:
        code = launcher.main(
            load_script(LAUNCHER, "_mgpu_docs_launcher_script").build_parser(),
            ["--dry_run", *cmd.args],
            train_script=str(TRAINER),
            environ=environ,
            inventory=eight,
        )
    except SystemExit as exc:  # --help, or argparse's own refusal through the script's one-line hook
        code = exc.code
    out, err = capsys.readouterr()
    assert code == 0, f"{cmd.where}: `{cmd.source}` failed with --dry_run (exit {code}):\n{err[-2000:]}"
    assert "Traceback" not in err
    if script is not None:  # the rank entry runs it with its arguments unchanged, nothing added
        _, forwarded = launcher_parser.parse_known_args(list(cmd.args))
        printed = shlex.split(out)
        target = str((tmp_path / script).resolve())
        assert printed[printed.index(target) :] == [target, *forwarded], out
        assert "rank_entry.py" in out
        return
    if module is not None:  # the rank entry runs the module with the example's own arguments, in order
        _, forwarded = launcher_parser.parse_known_args(list(cmd.args))
        printed = [w for w in shlex.split(out) if not w.startswith("--run_timestamp=")]  # Isaac Lab's, added
        assert printed[printed.index(module) - 1] == "-m" and printed[len(printed) - len(forwarded) :] == forwarded, out
        assert "rank_entry.py" in out
        return
    assert "train.py" in out, out
    if {"-h", "--help"} & set(cmd.args):
        return  # a pointer to the help text, not a training command
    # what the launcher forwards must be valid for train.py too (--dry_run does not run it)
    launch_ns, forwarded = launcher_parser.parse_known_args(list(cmd.args))
    forwarded = [a for a in forwarded if a != "--"]
    check_training_args(
        ["--rl_library", launch_ns.rl_library, *forwarded, "--distributed"], cmd, trainer_parser, capsys
    )


def foreign_script(cmd: Command) -> str | None:
    """The ``--train_script`` of a launcher example (another project's script), or None."""
    return option(cmd.args, "--train_script") if cmd.sub == "train_multigpu" else None


def foreign_module(cmd: Command) -> str | None:
    """The ``-m``/``--train_module`` of a launcher example (another project's module), or None."""
    if cmd.sub != "train_multigpu":
        return None
    return option(cmd.args, "-m") or option(cmd.args, "--train_module")


@pytest.mark.parametrize("cmd", TRAINER_CMDS, ids=lambda c: c.id)
def test_trainer_example_parses(cmd: Command, trainer_parser, capsys) -> None:
    check_training_args(list(cmd.args), cmd, trainer_parser, capsys)


@pytest.fixture(scope="module")
def probe_module() -> ModuleType:
    assert PROBE.is_file(), f"{rel(PROBE)} is missing"
    return load_script(PROBE, "_mgpu_docs_nccl_probe")


@pytest.mark.parametrize("cmd", PROBE_CMDS, ids=lambda c: c.id)
def test_probe_example_parses(cmd: Command, probe_module: ModuleType, capsys) -> None:
    """Probe invocations are accepted by the probe's own parser and its own post-parse checks."""
    try:
        probe_module.validate(probe_module.build_parser().parse_args(list(cmd.args)))
    except (SystemExit, probe_module.UsageError) as exc:
        pytest.fail(
            f"{cmd.where}: `{cmd.source}` is rejected by the probe's parser: {exc} {capsys.readouterr().err.strip()}"
        )


# --------------------------------------------------------------------------- CPU forms, run for real
#
# A command's *shape* is what decides which code paths its run exercises: the entry point; for the
# launcher the RL library and framework and the rendezvous (one node; two nodes with the static, c10d
# or JAX-coordinator rendezvous); and whether it resumes from a checkpoint. Values (task, counts, ports,
# seeds, names), console options (--tee, --log_all_ranks, ...) and --max_restarts without a failure do
# not change the path, so commands of one shape train once, as the first of them written in the docs.
# Commands that only print (--dry_run, --help) are the dry-run test's. Covered without a run of their own:
# - a plain shape, by its resume shape (the resumed run trains the same way, after loading);
# - a one-node launcher shape, by a two-node shape of the same library and framework (the two-node CPU
#   form is a world of 2 as well, with the node options on top);
# - the library of `mgpu-lab train`: single-process training per library is each library's own test
#   (tests/test_rsl_rl.py, test_rl_games.py, test_skrl.py, test_skrl_jax.py); here one single-process
#   example runs, and every library's distributed path runs through the launcher.
# Cost: nearly all of it is importing torch and the RL libraries (rl_games.torch_runner alone pulls in
# torch._dynamo). With the docs of issue 11 (7 shapes) three shapes are healthy runs the library tests
# share (rl_games and skrl on one node, skrl's JAX on two), and the one-node rsl_rl resume starts from a
# copy of the healthy rsl_rl run: 5 training runs of this module's own (4 shapes, 1 preparing run) instead of 9.
# Since rsl_rl's two-node shapes (static and c10d) read the shared restart jobs of those forms, 3 of them.

#: options whose value the CPU form replaces or drops (launcher and trainer); multi-node ones are re-added
_REWRITTEN = {
    "--device",
    "--num_envs",
    "--max_iterations",
    "--log_root",
    "--log_dir",
    "--num_gpus",
    "--nproc_per_node",
    "--master_addr",
    "--master_port",
    "--rdzv_endpoint",
    "--coordinator_address",
    "--node_rank",
    "--local_ranks_filter",
    "--checkpoint",
}
_SWITCHES = {"--distributed", "--log_all_ranks", "--dry_run", "--no_slurm", "--virtual_local_rank", "-h", "--help"}
CPU_ENVS = "8"
CPU_ITERATIONS = "2"
CONTINUED = re.compile(r"^\[INFO\] continuing \S+ at iteration \d+ \(from \S+\)$", re.M)
RESUMED = re.compile(r"resumed from \S+ at iteration \d+")
CHECKPOINT_LINE = re.compile(r"^\[INFO\] checkpoint: (\S+)$", re.M)


def option(args: tuple[str, ...] | list[str], name: str) -> str | None:
    """The value of ``name`` (``--x v`` or ``--x=v``) in ``args``; the last one wins, None when absent."""
    value = None
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(name + "="):
            value = arg.split("=", 1)[1]
    return value


def without(args: tuple[str, ...] | list[str], names: set[str]) -> list[str]:
    """``args`` with every option in ``names`` (and its value, unless it is a switch) removed."""
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in names:
            skip = "=" not in arg and name not in _SWITCHES
            continue
        out.append(arg)
    return out


@dataclass(frozen=True)
class Shape:
    """What a command exercises (see the comment above): equal shapes train once."""

    sub: str  # "train_multigpu" | "train"
    library: str  # "*" for `mgpu-lab train` (see above)
    framework: str
    rendezvous: str  # "process" (train), "node", "2 nodes static", "2 nodes c10d", "2 nodes jax"
    resume: bool
    continue_run: bool = False  # --continue_run: resumes into the prepared run's own folder (its own shape)

    def __str__(self) -> str:
        return (
            f"{self.sub}-{self.library}-{self.framework}-{self.rendezvous.replace(' ', '-')}"
            + ("-resume" if self.resume else "")
            + ("-continue" if self.continue_run else "")
        )


def shape_of(cmd: Command) -> Shape | None:
    """The shape of a training command, or None for one that only prints (``--dry_run``, ``--help``)."""
    if cmd.sub not in ("train", "train_multigpu") or {"--dry_run", "-h", "--help"} & set(cmd.args):
        return None
    if foreign_script(cmd) is not None:  # trained by its local equivalents: tests/test_any_script_e2e.py
        return None
    if foreign_module(cmd) is not None:  # Isaac Lab's trainer: tests/test_isaaclab_real_e2e.py trains it for real
        return None
    library = option(cmd.args, "--rl_library") or "rsl_rl"
    framework = option(cmd.args, "--ml_framework") or "torch"
    if cmd.sub == "train":
        library = framework = "*"
        rendezvous = "process"
    else:
        nnodes = option(cmd.args, "--nnodes") or "1"
        several = nnodes != "1"
        if framework == "jax":
            kind = "jax"
        elif option(cmd.args, "--rdzv_backend") == "c10d":
            kind = "c10d"
        else:
            kind = "static"
        rendezvous = f"2 nodes {kind}" if several else "node"
    return Shape(
        cmd.sub,
        library,
        framework,
        rendezvous,
        option(cmd.args, "--checkpoint") is not None,
        option(cmd.args, "--continue_run") is not None,
    )


def cpu_form(cmd: Command, log_root: Path, checkpoint: str | None = None) -> list[list[str]]:
    """The CPU form of ``cmd``: one argv per node, every node on this machine.

    ``--device cpu``, ``--num_envs 8``, ``--max_iterations 2`` (one more when resuming, since it counts
    from 0), logs under ``log_root``; launcher: 2 ranks on one node, 1 rank per node on two nodes (so two
    nodes are one world of 2), addresses on 127.0.0.1 with a free port, every rank's lines on the console
    (torchrun only: skrl's JAX launcher prints every rank anyway and rejects the option). ``checkpoint``
    replaces a documented ``--checkpoint`` path (a placeholder such as ``RUN/model_N.pt``); ``latest``
    stays, and finds the run ``log_root`` already holds.
    """
    shape = shape_of(cmd)
    assert shape is not None, cmd
    args = without(cmd.args, _REWRITTEN)
    resumes = shape.resume or shape.continue_run
    iterations = str(2 * int(CPU_ITERATIONS)) if resumes else CPU_ITERATIONS  # a total, counted from 0
    common = ["--device", "cpu", "--num_envs", CPU_ENVS, "--max_iterations", iterations, "--log_root", str(log_root)]
    if shape.resume:
        written = option(cmd.args, "--checkpoint")
        common += ["--checkpoint", written if written == "latest" or checkpoint is None else checkpoint]
    if shape.sub == "train":
        return [[PYTHON, str(TRAINER), *args, *common]]
    if option(cmd.args, "--log_dir") is not None:
        common += ["--log_dir", str(log_root / "torchrun")]
    if shape.framework != "jax" and "--log_all_ranks" not in args:
        common.append("--log_all_ranks")
    port = str(free_port())
    if shape.rendezvous == "node":
        if shape.framework == "jax":
            place = ["--coordinator_address", f"127.0.0.1:{port}"]
        elif option(cmd.args, "--rdzv_backend") == "c10d":
            place = ["--rdzv_endpoint", f"127.0.0.1:{port}"]
        else:
            place = ["--master_addr", "127.0.0.1", "--master_port", port]
        return [[PYTHON, str(LAUNCHER), *args, "--num_gpus", "2", *place, *common]]
    args = without(args, {"--nnodes"})
    nodes = []
    for node in range(2):
        if shape.rendezvous == "2 nodes jax":
            place = ["--node_rank", str(node), "--coordinator_address", f"127.0.0.1:{port}"]
        elif shape.rendezvous == "2 nodes c10d":
            place = ["--rdzv_endpoint", f"127.0.0.1:{port}"]  # c10d assigns node ranks itself
        else:
            place = ["--node_rank", str(node), "--master_addr", "127.0.0.1", "--master_port", port]
        nodes.append([PYTHON, str(LAUNCHER), *args, "--nnodes", "2", "--num_gpus", "1", *place, *common])
    return nodes


def covered(shape: Shape, picked: set[Shape]) -> bool:
    """Whether a run of some shape in ``picked`` exercises ``shape`` (the rules above)."""
    if shape.continue_run:  # continuing in place is its own code path: only its own shape covers it
        return shape in picked
    if shape in picked or replace(shape, resume=True) in picked:
        return True
    return shape.rendezvous == "node" and any(
        p.sub == shape.sub
        and p.library == shape.library
        and p.framework == shape.framework
        and p.rendezvous.startswith("2 nodes")
        and (p.resume or not shape.resume)
        for p in picked
    )


def first_of_each_shape(commands: list[Command]) -> list[tuple[Shape, Command]]:
    """One command per shape, the first written, less the shapes another chosen shape covers."""
    chosen: dict[Shape, Command] = {}
    for cmd in commands:
        shape = shape_of(cmd)
        if shape is not None and shape not in chosen:
            chosen[shape] = cmd
    for shape in list(chosen):
        if covered(shape, set(chosen) - {shape}):
            del chosen[shape]
    return list(chosen.items())


CPU_RUNS = first_of_each_shape(LAUNCHER_CMDS + TRAINER_CMDS)
#: hard limit for one node of one CPU run (torch, the RL library and torchrun start in every process)
RUN_TIMEOUT = 240


def run_nodes(argvs: list[list[str]], *, timeout: float) -> list[subprocess.CompletedProcess]:
    """Start every node's command at once, wait for all with one deadline, and leave no process behind (a
    node killed at the deadline exits -9, its output saying so)."""
    return run_nodes_together(argvs, single_env(), timeout=timeout)


def torchrun_reports(out: str) -> str:
    """The end of each torchrun report the launcher pointed at in ``out`` (its ranks' tracebacks), for a failure's
    message: the files live in the session's scratch folder, gone once the suite ends."""
    paths = re.findall(r"torchrun's own report, with each failed rank's traceback: (\S+)", out)
    return "".join(f"\n--- {p}:\n{Path(p).read_text(errors='replace')[-3000:]}" for p in paths if Path(p).is_file())


def assert_trained(
    cmd: Command, shape: Shape, nodes: list[tuple[list[str], int]], out: str, *, attempts: int = 1
) -> str:
    """Every node (argv, exit status) exited 0; no traceback in ``out`` (every node's output); every rank
    synchronized (once in each of the job's ``attempts``) and ended with the same parameters; rank 0 timed the run
    and counted every rank."""
    where = f"{cmd.where}: `{cmd.source}` in its CPU form"
    for argv, rc in nodes:
        assert rc == 0, f"{where} exited {rc}: {shlex.join(argv)}\n{out[-4000:]}{torchrun_reports(out)}"
    assert "Traceback" not in out, f"{where}:\n{out[-4000:]}"
    world = 1 if shape.sub == "train" else 2
    ranks = [(str(r), str(world)) for r in range(world)]
    assert sorted(SYNC_ANYWHERE.findall(out)) == sorted(ranks * attempts), (
        f"{where}: not every rank synchronized\n{out[-4000:]}"
    )
    assert len(TIME.findall(out)) == 1, f"{where}:\n{out[-4000:]}"
    assert [w for _, w in THROUGHPUT.findall(out)] == [str(world)], f"{where}:\n{out[-4000:]}"
    digests = {rank: value for rank, _, value in DIGEST_ANYWHERE.findall(out)}
    assert set(digests) == {r for r, _ in ranks}, f"{where}: a rank gave no parameter digest\n{out[-4000:]}"
    assert len(set(digests.values())) == 1, f"{where}: the ranks ended with different parameters"
    return out


def prepare_checkpoint(cmd: Command, log_root: Path) -> str:
    """Train ``cmd``'s library and task for CPU_ITERATIONS in one process under ``log_root``; its last
    checkpoint (a checkpoint from another world size is fine to resume from). Only the documented command is
    under test: this preparing run is pytest's own process (skrl's JAX, which must choose its platform before
    its first import, a process of its own)."""
    from mgpu_testing.training import train_in_process

    keep = [
        a for name in ("--rl_library", "--ml_framework", "--task") if (v := option(cmd.args, name)) for a in (name, v)
    ]
    args = [
        *keep,
        "--device",
        "cpu",
        "--num_envs",
        CPU_ENVS,
        "--max_iterations",
        CPU_ITERATIONS,
        "--log_root",
        str(log_root),
    ]
    if option(cmd.args, "--ml_framework") == "jax":
        (proc,) = run_nodes([[PYTHON, str(TRAINER), *args]], timeout=RUN_TIMEOUT)
    else:
        proc = train_in_process(args, single_env())
    out = proc.stdout + (proc.stderr or "")
    assert proc.returncode == 0, f"{cmd.where}: preparing a checkpoint failed\n{out[-3000:]}"
    written = CHECKPOINT_LINE.findall(proc.stdout)
    assert written, f"{cmd.where}: the preparing run named no checkpoint\n{out[-3000:]}"
    return written[-1]


def healthy_key(cmd: Command) -> str | None:
    """The session's healthy run (tests/mgpu_testing/runs.py) of ``cmd``'s library, framework and task, if any."""
    if (option(cmd.args, "--task") or TASK) != TASK:
        return None
    library = option(cmd.args, "--rl_library") or "rsl_rl"
    return f"{library}-jax" if option(cmd.args, "--ml_framework") == "jax" else library


def is_a_healthy_run(shape: Shape) -> bool:
    """Whether a healthy run is a run of ``shape``: a torch library on one node, skrl's JAX on two nodes
    (tests/mgpu_testing/runs.py), the launcher, no resume and no continuing (a run that goes on in a prepared run's
    folder is its own path: it trains here, from a copy of the healthy run)."""
    return (
        shape.sub == "train_multigpu"
        and not (shape.resume or shape.continue_run)
        and (
            (shape.framework == "torch" and shape.rendezvous == "node")
            or (shape.framework == "jax" and shape.rendezvous == "2 nodes jax")
        )
    )


def restart_form(cmd: Command, shape: Shape) -> str | None:
    """The rendezvous form of the session's shared two-node restart job (tests/mgpu_testing/restarts.py) that is a
    run of ``shape``, if any: rsl_rl (torch) on the task of the healthy runs, two nodes of one rank, no resume. Each
    of its attempts trains as such a command does; it then restarts once, which a documented command may ask for too
    (``--max_restarts``, ``--rehearse_fault``)."""
    if not (
        shape.sub == "train_multigpu"
        and (shape.library, shape.framework) == ("rsl_rl", "torch")
        and shape.rendezvous in ("2 nodes static", "2 nodes c10d")
        and not (shape.resume or shape.continue_run)
        and (option(cmd.args, "--task") or TASK) == TASK
    ):
        return None
    return shape.rendezvous.split()[-1]


def resume_from_healthy(run: HealthyRun, log_root: Path) -> str:
    """Copy ``run``'s run folder under ``log_root``; the copy of its last checkpoint (the one its rank 0 named)."""
    copy = copy_run(run, log_root)
    written = CHECKPOINT_LINE.findall(run.out)
    assert written, f"the healthy {run.library} run named no checkpoint\n{run.out[-3000:]}"
    return str(copy / Path(written[-1]).resolve().relative_to(run.run_dir.resolve()))


def run_cpu_form(cmd: Command, argvs: list[list[str]]) -> list[subprocess.CompletedProcess]:
    """Run a CPU form: an ``mgpu-lab train`` example (one process of train.py) through train.py's parser and the
    trainer's main in this process, as the preparing run does (the entry script as a process is the ranks' of every
    launcher run); skrl's JAX, which must choose its platform before its first import, and the launcher's nodes as
    processes (the process tree is what the launcher runs). Each result's stdout holds its stderr too."""
    if cmd.sub == "train" and option(cmd.args, "--ml_framework") != "jax":
        from mgpu_testing.training import train_in_process

        ((_, _, *args),) = argvs  # [python, train.py, *args]
        proc = train_in_process(args, single_env())
        return [subprocess.CompletedProcess(argvs[0], proc.returncode, proc.stdout + (proc.stderr or ""))]
    return run_nodes(argvs, timeout=RUN_TIMEOUT)


@pytest.mark.e2e
@pytest.mark.timeout(WITH_HEALTHY_RUN)
@pytest.mark.parametrize(("shape", "cmd"), CPU_RUNS, ids=[f"{s}@{c.where}" for s, c in CPU_RUNS])
def test_example_trains_in_its_cpu_form(shape: Shape, cmd: Command, tmp_path: Path, healthy_run, restarted_run) -> None:
    key = healthy_key(cmd)
    if key is not None and is_a_healthy_run(shape):  # this shape's CPU form is that run (values aside)
        run = healthy_run(key)
        assert_trained(cmd, shape, list(zip(map(list, run.argvs), run.returncodes)), run.out)
        assert len(list(run.task_root.iterdir())) == 1, "only rank 0 writes"
        return
    form = restart_form(cmd, shape)
    if form is not None:  # this shape's CPU form is each attempt of that job (values aside)
        restarted = restarted_run(form)
        nodes = [(p.args, p.returncode) for p in restarted.procs]
        assert_trained(cmd, shape, nodes, "".join(p.stdout + p.stderr for p in restarted.procs), attempts=ATTEMPTS)
        assert len(list((restarted.logs / "rsl_rl" / TASK).iterdir())) == 1, "one run folder, rank 0's"
        return
    log_root = tmp_path / "logs"
    task_root = log_root / (option(cmd.args, "--rl_library") or "rsl_rl") / (option(cmd.args, "--task") or TASK)
    checkpoint, resumed_at = None, None
    if shape.resume or shape.continue_run:  # a run of the library and task to go on from: the healthy run's copy
        # where there is one (``--continue_run latest`` finds that copy, the newest run under log_root)
        if key is not None:
            healthy = healthy_run(key)
            checkpoint, resumed_at = resume_from_healthy(healthy, log_root), healthy.iterations
        else:
            checkpoint = prepare_checkpoint(cmd, log_root)
    before = set(task_root.iterdir()) if task_root.is_dir() else set()
    results = run_cpu_form(cmd, cpu_form(cmd, log_root, checkpoint))
    out = assert_trained(cmd, shape, [(r.args, r.returncode) for r in results], "".join(r.stdout for r in results))
    new_runs = set(task_root.iterdir()) - before
    if shape.continue_run:  # the prepared run goes on in its own folder
        assert not new_runs and CONTINUED.search(out), f"{cmd.where}: did not continue in place\n{out[-3000:]}"
        return
    assert len(new_runs) == 1, f"{cmd.where}: expected one new run folder (only rank 0 writes), got {new_runs}"
    if shape.resume:
        assert RESUMED.search(out), f"{cmd.where}: `{cmd.source}` did not say where it resumed from\n{out[-3000:]}"
    if resumed_at is not None:  # from the healthy run's newest checkpoint (``latest`` finds that one too)
        assert f"resumed from {Path(checkpoint).resolve()} at iteration {resumed_at}" in out, out[-3000:]


def test_cpu_form_of_each_shape() -> None:
    """The derivation itself: GPU counts, devices, addresses and placeholders never survive into a CPU form."""
    root = Path("/tmp/x")
    two_nodes = Command(
        "train_multigpu",
        tuple(
            shlex.split(
                "--nnodes 2 --node_rank 1 --master_addr 10.0.0.1 --master_port 29500 --num_gpus 8 --task Toy-Cartpole-v0 "
                "--max_iterations 300 --log_root /shared/logs"
            )
        ),
        "x.md:1",
        "",
    )
    assert shape_of(two_nodes) == Shape("train_multigpu", "rsl_rl", "torch", "2 nodes static", False)
    nodes = cpu_form(two_nodes, root)
    assert len(nodes) == 2
    for rank, argv in enumerate(nodes):
        assert option(argv, "--node_rank") == str(rank) and option(argv, "--master_addr") == "127.0.0.1"
        assert option(argv, "--num_gpus") == "1" and option(argv, "--device") == "cpu"
        assert option(argv, "--max_iterations") == CPU_ITERATIONS and option(argv, "--log_root") == str(root)
        assert "10.0.0.1" not in argv and "/shared/logs" not in argv and argv.count("--nnodes") == 1
    assert option(nodes[0], "--master_port") == option(nodes[1], "--master_port") != "29500"

    jax = Command(
        "train_multigpu",
        tuple(
            shlex.split(
                "--rl_library skrl --ml_framework jax --nnodes 2 --node_rank 0 --num_gpus 8 "
                "--coordinator_address 10.0.0.1:5000 --task Toy-Cartpole-v0"
            )
        ),
        "x.md:2",
        "",
    )
    assert shape_of(jax).rendezvous == "2 nodes jax"
    for argv in cpu_form(jax, root):
        assert option(argv, "--coordinator_address").startswith("127.0.0.1:") and "--log_all_ranks" not in argv

    c10d = Command(
        "train_multigpu",
        tuple(shlex.split("--nnodes 2 --rdzv_backend c10d --rdzv_endpoint 10.0.0.1:29400 --rdzv_id x --num_gpus 8")),
        "x.md:3",
        "",
    )
    nodes = cpu_form(c10d, root)
    assert shape_of(c10d).rendezvous == "2 nodes c10d" and nodes[0] == nodes[1]
    assert option(nodes[0], "--rdzv_endpoint").startswith("127.0.0.1:") and "--node_rank" not in nodes[0]

    resume = Command(
        "train",
        tuple(
            shlex.split(
                "--rl_library rsl_rl --task Toy-Pendulum-SwingUp-v0 --checkpoint logs/rsl_rl/T/RUN/model_N.pt "
                "--max_iterations 100"
            )
        ),
        "x.md:4",
        "",
    )
    (argv,) = cpu_form(resume, root, "/tmp/x/real.pt")
    assert option(argv, "--checkpoint") == "/tmp/x/real.pt" and option(argv, "--max_iterations") == "4"
    latest = replace(resume, args=tuple(without(resume.args, {"--checkpoint"})) + ("--checkpoint", "latest"))
    assert option(cpu_form(latest, root, "/tmp/x/real.pt")[0], "--checkpoint") == "latest"

    # shapes: the dry-run-only forms do not train; a resume shape covers its plain shape; two nodes cover one
    assert shape_of(replace(resume, args=resume.args + ("--help",))) is None
    plain = replace(resume, args=tuple(without(resume.args, {"--checkpoint"})))
    assert [s for s, _ in first_of_each_shape([plain, resume, plain])] == [shape_of(resume)]
    one_jax = replace(jax, args=tuple(without(jax.args, {"--nnodes", "--node_rank"})))
    assert shape_of(one_jax).rendezvous == "node"
    assert [c for _, c in first_of_each_shape([one_jax, jax, two_nodes])] == [jax, two_nodes]
    one_node_resume = replace(two_nodes, args=("--checkpoint", "latest"))
    assert [c for _, c in first_of_each_shape([one_node_resume, two_nodes])] == [one_node_resume, two_nodes]
    rl_games = replace(one_jax, args=("--rl_library", "rl_games"))
    assert [c for _, c in first_of_each_shape([rl_games, jax])] == [rl_games, jax]


def test_every_documented_shape_is_run() -> None:
    """The shapes picked for a real run cover every training command written in the docs."""
    assert CPU_RUNS, "no training command found to run in its CPU form"
    picked = {s for s, _ in CPU_RUNS}
    for cmd in LAUNCHER_CMDS + TRAINER_CMDS:
        shape = shape_of(cmd)
        assert shape is None or covered(shape, picked), cmd
    # the launcher's real multi-node runs of a healthy job are these CPU forms (tests/test_launcher_e2e.py has no
    # run of its own over c10d or a static two-node rendezvous; the restart jobs are those of rsl_rl's two-node
    # shapes): the docs must keep writing every rendezvous kind
    assert {s.rendezvous for s in picked} >= {"process", "node", "2 nodes static", "2 nodes c10d", "2 nodes jax"}, (
        picked
    )
