#!/usr/bin/env python3
"""Launch ``train.py`` on several GPUs or nodes through torchrun (or skrl's JAX launcher).

Run it as ``uv run isaaclab train_multigpu [LAUNCHER OPTIONS] [TRAINING ARGS]``. The launcher's own
options are listed by ``--help``; every other argument is checked against ``train.py``'s parser and
passed to it unchanged, and ``--distributed`` is added once. The module is import-light on purpose: it
never imports torch, so ``--dry_run`` and every rejection answer at once.

Layout (data flows one way): argv -> :func:`build_parser` (the one argparse definition; its argument
groups say which options go to torchrun) -> :func:`make_config` (parsed once, validated) ->
:func:`build_command` -> :func:`run_job` (the runner; process supervision lives in
:mod:`mgpu_lab.supervise`, hang detection in :mod:`mgpu_lab.watchdog`, failure reports in
:mod:`mgpu_lab.failures`).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shlex
import sys

# Make the runtime package importable when the script runs from a plain checkout (as train.py does).
_SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__)))), "src")
if os.path.isdir(_SRC) and _SRC not in sys.path:
    sys.path.insert(0, _SRC)

TYPE_CHECKING = False  # typing, dataclasses and pathlib stay unimported: --dry_run must start fast
if TYPE_CHECKING:
    from typing import NoReturn, Sequence

#: Environment variable that replaces the trainer script (used by the tests to launch small fixtures).
TRAIN_SCRIPT_ENV = "MGPU_LAB_TRAIN_SCRIPT"
#: Environment variable naming the job across restarts and nodes (launcher -> ranks).
JOB_KEY_ENV = "MGPU_LAB_JOB_KEY"

TRAIN_SCRIPT = os.path.join(os.path.dirname(os.path.realpath(__file__)), "train.py")
TORCHRUN_MODULE = "torch.distributed.run"
JAX_LAUNCHER_MODULE = "skrl.utils.distributed.jax"
JAX_DEFAULT_COORDINATOR = "127.0.0.1:5000"  # skrl's own default

#: Argument group of the options passed to torchrun as given (``--name value``), only when given.
TORCHRUN_GROUP = "torchrun: rendezvous, workers and output (passed on only when given)"
#: Argument group of torchrun-only options that the launcher itself interprets or maps.
LAUNCHER_TORCHRUN_GROUP = "torchrun: options the launcher interprets"

RDZV_BACKENDS = ["static", "c10d", "etcd", "etcd-v2"]
DEFAULT_RDZV_TIMEOUT_S = 600.0  # torchrun's own join timeout (static and c10d)
TORCHRUN_MONITOR_INTERVAL_S = 0.1  # torchrun's default --monitor_interval
CPU_RANKS_PER_CORE = 4  # CPU ranks beyond this many per core are refused
#: torchrun gets the rendezvous deadline plus this margin: the launcher's own clear report comes first.
RDZV_BACKSTOP_S = 5

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_HANG, EXIT_RDZV = 0, 1, 2, 3, 4

EPILOG = """\
examples:
  # every visible GPU on this machine, rsl_rl
  isaaclab train_multigpu --task Toy-Cartpole-v0 --max_iterations 100

  # two GPUs with skrl; print the command without running it
  isaaclab train_multigpu --num_gpus 2 --rl_library skrl --task Toy-Cartpole-v0 --dry_run

  # rehearse on CPU: two ranks on gloo, no GPU needed
  isaaclab train_multigpu --num_gpus 2 --device cpu --num_envs 64 --max_iterations 2

  # every rank on the console, and per-rank log files under logs/torchrun
  isaaclab train_multigpu --num_gpus 2 --log_all_ranks --tee 3 --log_dir logs/torchrun

  # two nodes, static rendezvous (run on each node with its own --node_rank)
  isaaclab train_multigpu --nnodes 2 --node_rank 0 --num_gpus 8 \\
      --master_addr 10.0.0.1 --master_port 29500 --task Toy-Cartpole-v0

  # two nodes, c10d rendezvous (same command on every node)
  isaaclab train_multigpu --nnodes 2 --num_gpus 8 --rdzv_backend c10d \\
      --rdzv_endpoint 10.0.0.1:29400 --rdzv_id job42 --task Toy-Cartpole-v0

  # skrl with JAX: skrl's own launcher, integer --num_gpus
  isaaclab train_multigpu --rl_library skrl --ml_framework jax --num_gpus 2 \\
      --coordinator_address 127.0.0.1:5000 --task Toy-Cartpole-v0

Arguments after a '--' go to train.py untouched; every other unknown argument is checked against
train.py's own options and the task list before any rank starts. Output: by default only local rank 0
of each node reaches the console (torchrun --local_ranks_filter 0). torchrun options that you do not
give are not passed, so torchrun's own PET_* environment (a Kubernetes PyTorchJob) applies.

watchdog: every rank beats once per training iteration. When no rank has made progress for
--hang_timeout seconds (default 300; 0 turns it off), the launcher asks every rank for its Python
stack, prints where each rank is and the likely culprit, writes the stacks and a summary under
<run folder>/watchdog/, stops the job and exits 3. On CUDA ranks it also turns on PyTorch's NCCL
flight recorder and says where the dumps go.

exit status: 0 success; 1 the job failed (the launcher's last lines name the rank, node and exception
or signal that came first); 2 usage error (nothing started); 3 hang (watchdog); 4 rendezvous deadline
passed (--rdzv_timeout); 128+N after the launcher got signal N (130 after Ctrl-C, 143 after SIGTERM,
129 after SIGHUP).

signals: the job runs in its own process group. The first Ctrl-C (SIGINT), SIGTERM or SIGHUP is
forwarded to it; if the job has not stopped after a grace period (MGPU_LAB_KILL_GRACE_S, default
10 s), every process of the job is killed. A second Ctrl-C kills at once. Whatever ends the launcher
(even SIGKILL), the job's processes go with it.

skrl JAX: skrl's launcher does not report its workers' exit codes. This launcher sets
TORCHELASTIC_ERROR_FILE for the ranks, so a rank that dies of an uncaught exception (train.py's
entry point is wrapped in torch's elastic `record`) still makes the launcher exit 1; a rank that
exits non-zero without an exception is not detected there.

testing: MGPU_LAB_TRAIN_SCRIPT=PATH launches PATH instead of train.py (for the test suite; the
forwarded arguments are then not checked against train.py).
"""


class UsageError(Exception):
    """Bad launcher input: reported as one line on stderr with exit status 2."""


def _usage_error(message: str) -> NoReturn:
    """argparse's error hook: one line on stderr, exit 2, no usage block."""
    print(f"isaaclab train_multigpu: error: {message} (see --help)", file=sys.stderr)
    sys.exit(EXIT_USAGE)


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """argparse's raw-description formatter, sized without importing shutil (a start-up cost)."""

    def __init__(self, prog: str, **kwargs: object) -> None:
        try:
            width = os.get_terminal_size(sys.stdout.fileno()).columns
        except (OSError, ValueError, AttributeError):
            width = int(os.environ["COLUMNS"]) if os.environ.get("COLUMNS", "").isdigit() else 100
        kwargs.setdefault("width", max(width, 60) - 2)
        super().__init__(prog, **kwargs)  # type: ignore[arg-type]


def build_parser() -> argparse.ArgumentParser:
    """The launcher's options. Every unknown argument is forwarded to train.py.

    Defaults of None/False mean "not given": such an option is not passed on. The argument groups say
    where an option goes: :data:`TORCHRUN_GROUP` options are passed to torchrun as given,
    :data:`LAUNCHER_TORCHRUN_GROUP` options are torchrun-only but interpreted by the launcher.
    """
    parser = argparse.ArgumentParser(
        prog="isaaclab train_multigpu",
        description=(
            "Launch scripts/reinforcement_learning/train.py on several GPUs or nodes through torchrun\n"
            "(python -m torch.distributed.run), or through skrl's JAX launcher for\n"
            "--rl_library skrl --ml_framework jax. Options not listed here (--task, --num_envs,\n"
            "--max_iterations, --seed, --device, ...) are passed to train.py unchanged, and\n"
            "--distributed is added for you."
        ),
        epilog=EPILOG,
        formatter_class=_HelpFormatter,
        allow_abbrev=False,
    )
    parser.error = _usage_error  # type: ignore[method-assign]  # one-line errors, exit 2

    job = parser.add_argument_group("job")
    job.add_argument(
        "--rl_library", choices=["rsl_rl", "rl_games", "skrl"], default="rsl_rl",
        help="RL library that train.py trains with (default: rsl_rl).",
    )
    job.add_argument(
        "--num_gpus", "--nproc_per_node", dest="num_gpus", default="gpu", metavar="N|gpu|cpu|auto",
        help=(
            "Ranks per node: an integer, 'gpu' (every visible GPU), 'cpu' (one rank per CPU core) or "
            "'auto' (GPUs if any, else CPU cores). An integer must not exceed the visible GPUs, "
            "unless train.py gets --device cpu, which runs the ranks as CPU processes on gloo "
            f"(at most {CPU_RANKS_PER_CORE} per CPU core) (default: gpu)."
        ),
    )
    job.add_argument(
        "--nnodes", default=None, metavar="N|MIN:MAX",
        help="Number of nodes, or an elastic range MIN:MAX (torchrun's default: 1).",
    )
    job.add_argument(
        "--node_rank", type=int, default=None,
        help="Rank of this node, 0 to nnodes-1; used by the static rendezvous (torchrun's default: 0).",
    )
    job.add_argument(
        "--dry_run", action="store_true",
        help="Print the resolved command, shell-quoted, and exit without running it.",
    )

    run = parser.add_argument_group(TORCHRUN_GROUP)
    run.add_argument(
        "--master_addr", default=None,
        help="Address of node 0 for the static rendezvous (torchrun's default: 127.0.0.1).",
    )
    run.add_argument(
        "--master_port", type=int, default=None,
        help="Free port on node 0 for the static rendezvous (torchrun's default: 29500; "
             "give another when two jobs share a machine).",
    )
    run.add_argument(
        "--rdzv_backend", choices=RDZV_BACKENDS, default=None,
        help="Rendezvous backend, e.g. c10d for a dynamic rendezvous (torchrun's default: static).",
    )
    run.add_argument(
        "--rdzv_endpoint", default=None, metavar="HOST:PORT",
        help="Rendezvous endpoint for --rdzv_backend c10d (c10d's default port: 29400).",
    )
    run.add_argument(
        "--rdzv_id", default=None,
        help="Job id shared by every node of one c10d rendezvous.",
    )
    run.add_argument(
        "--max_restarts", type=int, default=None,
        help="Restarts of the whole worker group after a failure before giving up (torchrun's default: 0). "
             "A restarted group resumes from the run's newest checkpoint.",
    )
    run.add_argument(
        "--monitor_interval", type=float, default=None, metavar="SECONDS",
        help="How often torchrun checks its workers (torchrun's default: 0.1).",
    )
    run.add_argument(
        "--start_method", choices=["spawn", "fork", "forkserver"], default=None,
        help="Multiprocessing start method of the workers (torchrun's default: spawn).",
    )
    run.add_argument(
        "--role", default=None,
        help="User-defined role name of the workers (torchrun's default: default).",
    )
    run.add_argument(
        "--virtual_local_rank", action="store_true",
        help="torchrun's virtual local rank: each worker sees LOCAL_RANK=0 and only its own GPU, as cuda:0.",
    )
    run.add_argument(
        "--tee", default=None, metavar="0|1|2|3|MAP",
        help="Copy worker output to per-rank log files and the console: 1 stdout, 2 stderr, 3 both, "
             "or a per-rank map such as 0:1,1:3.",
    )
    run.add_argument(
        "--redirects", default=None, metavar="0|1|2|3|MAP",
        help="Send worker output to per-rank log files only (same values as --tee).",
    )
    run.add_argument(
        "--log_dir", default=None,
        help="Directory for torchrun's per-rank log files and error files "
             "(<log_dir>/<run_id>_*/attempt_<k>/<local_rank>/).",
    )
    run.add_argument(
        "--local_ranks_filter", default=None, metavar="RANKS",
        help="Comma-separated local ranks whose output reaches the console (launcher default: 0).",
    )

    own = parser.add_argument_group(LAUNCHER_TORCHRUN_GROUP)
    own.add_argument(
        "--log_all_ranks", action="store_true",
        help="Show every local rank on the console instead of local rank 0 only.",
    )
    own.add_argument(
        "--rdzv_timeout", type=float, default=None, metavar="SECONDS",
        help="Deadline for every node to join the rendezvous; while waiting the launcher says who is "
             "missing and how long is left, then exits 4 (default: 600, torchrun's own join timeout).",
    )

    watch = parser.add_argument_group("supervision")
    watch.add_argument(
        "--hang_timeout", type=float, default=300, metavar="SECONDS",
        help="Stop the job and report every rank's stack when no rank made progress for this long; "
             "0 turns the watchdog off; at least the monitor interval (default: 300).",
    )
    watch.add_argument(
        "--no_slurm", action="store_true",
        help="Do not fill --nnodes, --node_rank and the rendezvous from a SLURM job's environment.",
    )

    jax = parser.add_argument_group("skrl JAX")
    jax.add_argument(
        "--coordinator_address", default=None, metavar="HOST:PORT",
        help="JAX coordinator (process 0) for --rl_library skrl --ml_framework jax "
             "(skrl's default: 127.0.0.1:5000).",
    )
    return parser


def group_dests(parser: argparse.ArgumentParser, title: str) -> list[str]:
    """The option names (dests) of one argument group, in definition order."""
    for group in parser._action_groups:
        if group.title == title:
            return [action.dest for action in group._group_actions]
    raise KeyError(title)


# --------------------------------------------------------------------------------------------------
# inspection helpers (no torch)
# --------------------------------------------------------------------------------------------------

def forwarded_value(args: Sequence[str], flag: str) -> str | None:
    """The last value of ``flag`` among forwarded arguments (``--flag V`` or ``--flag=V``)."""
    value = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(flag + "="):
            value = arg[len(flag) + 1:]
    return value


def _cuda_visible_count(spec: str) -> int:
    """Devices named by CUDA_VISIBLE_DEVICES; like CUDA, stop at the first invalid entry."""
    count = 0
    for item in spec.split(","):
        item = item.strip()
        if re.fullmatch(r"\d+", item) or item.startswith(("GPU-", "MIG-")):
            count += 1
        else:
            break
    return count


def visible_gpus() -> tuple[int, str]:
    """(number of visible NVIDIA GPUs, where that number came from), without importing torch."""
    spec = os.environ.get("CUDA_VISIBLE_DEVICES")
    if spec is not None:
        return _cuda_visible_count(spec), f"CUDA_VISIBLE_DEVICES={spec!r}"
    gpus_dir = "/proc/driver/nvidia/gpus"
    if os.path.isdir(gpus_dir):
        try:
            return len(os.listdir(gpus_dir)), gpus_dir
        except OSError:
            pass
    import shutil

    smi = shutil.which("nvidia-smi")
    if smi:
        import subprocess

        try:
            out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=5).stdout
            return sum(1 for line in out.splitlines() if line.startswith("GPU ")), "nvidia-smi -L"
        except (OSError, subprocess.SubprocessError):
            pass
    return 0, "no NVIDIA driver found"


def _check_nnodes(value: str, *, jax: bool) -> None:
    m = re.fullmatch(r"(\d+)(?::(\d+))?", value)
    if not m or int(m.group(1)) < 1 or (m.group(2) is not None and int(m.group(2)) < int(m.group(1))):
        raise UsageError(f"--nnodes {value}: give a node count such as 2, or a range MIN:MAX such as 1:4")
    if jax and m.group(2) is not None:
        raise UsageError(f"--nnodes {value}: skrl's JAX launcher takes a fixed node count, such as --nnodes 2")


def _check_log_spec(flag: str, value: str | None) -> None:
    if value is not None and not re.fullmatch(r"[0-3]|\d+:[0-3](,\d+:[0-3])*", value):
        raise UsageError(f"{flag} {value}: give 0 (none), 1 (stdout), 2 (stderr), 3 (both) or a map like 0:1,1:3")


# --------------------------------------------------------------------------------------------------
# argv -> config (parsed once, validated before anything starts)
# --------------------------------------------------------------------------------------------------

class Config:
    """The launcher's parsed and validated input."""

    def __init__(self, args: argparse.Namespace, forwarded: list[str], *, jax: bool, device: str | None,
                 nproc: str | None, train_script: str, passthrough: list[str], torchrun_only: list[str]) -> None:
        self.args = args
        self.forwarded = forwarded
        self.jax = jax
        self.device = device
        self.nproc = nproc  # None: not passed (torchrun's PET_NPROC_PER_NODE applies)
        self.train_script = train_script
        self.passthrough = passthrough
        self.torchrun_only = torchrun_only
        self.inferred: list[str] = []  # what cluster detection filled in, and from where (for --dry_run)

    @property
    def on_cpu(self) -> bool:
        return self.device is not None and self.device.strip().lower() == "cpu"

    @property
    def rdzv_timeout(self) -> float:
        return self.args.rdzv_timeout if self.args.rdzv_timeout is not None else DEFAULT_RDZV_TIMEOUT_S


def _given(args: argparse.Namespace, dest: str) -> bool:
    value = getattr(args, dest)
    return value is not None and value is not False


def _check_endpoint(flag: str, value: str) -> None:
    m = re.fullmatch(r"(\[[0-9A-Fa-f:.]+\]|[^:\s\[\]]+)(?::(\d{1,5}))?", value)
    if not m or (m.group(2) is not None and int(m.group(2)) > 65535):
        raise UsageError(
            f"{flag} {value}: give HOST or HOST:PORT with a TCP port from 0 to 65535, such as 10.0.0.1:29400")


def _check_seconds(flag: str, value: float | None, *, zero_ok: bool = False) -> None:
    if value is None:
        return
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok) or value > 7 * 24 * 3600:
        least = "0 or more" if zero_ok else "a positive number of"
        raise UsageError(f"--{flag} {value:g}: give {least} seconds, at most a week")


def _check_log_dir(path: str) -> None:
    """The folder must be writable, or creatable in a writable parent. Probed by creating and removing an
    empty temp folder (permission bits alone mislead root and read-only mounts); nothing is left behind."""
    import tempfile

    probe = os.path.abspath(path)
    if os.path.exists(probe) and not os.path.isdir(probe):
        raise UsageError(f"--log_dir {path}: exists and is not a folder")
    parent = probe
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise UsageError(f"--log_dir {path}: cannot be created ({parent} is not a folder)")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".mgpu_lab_probe_", dir=parent))
    except OSError as exc:
        where = "folder is not writable" if parent == probe else f"cannot be created in {parent}"
        raise UsageError(f"--log_dir {path}: {where} ({exc.strerror})") from None


def _hosts_store(args: argparse.Namespace) -> bool:
    """True when this node hosts torchrun's static rendezvous store (node 0 on a local master address)."""
    if args.rdzv_backend not in (None, "static") or args.rdzv_endpoint is not None:
        return False
    if (args.node_rank or 0) != 0:
        return False
    if args.master_addr is None:
        return "PET_MASTER_ADDR" not in os.environ or os.environ["PET_MASTER_ADDR"] in ("127.0.0.1", "localhost")
    return args.master_addr in ("127.0.0.1", "localhost", "::1", "0.0.0.0")


def _check_port_free(port: int) -> None:
    import errno
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as torch's TCPStore does
        try:
            s.bind(("", port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise UsageError(f"--master_port {port}: already in use on this host; give a free port "
                                 "(node 0 hosts the rendezvous there)") from None


def _check_training_args(script: str, rl_library: str, forwarded: list[str]) -> None:
    """Parse the forwarded arguments with train.py's own parser and check the task against the catalog."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_mgpu_lab_train_entry", script)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # train.py imports no torch at module level
    parser = module.build_parser()

    def error(message: str) -> NoReturn:
        raise UsageError(f"train.py: {message} (train.py's options: isaaclab train --help)")

    parser.error = error  # type: ignore[method-assign]
    if any(a in ("-h", "--help") for a in forwarded):
        raise UsageError("--help after '--' goes to train.py: run isaaclab train --help for its options")
    try:
        targs = parser.parse_args(["--rl_library", rl_library, *forwarded])
    except SystemExit:  # an action of train.py's parser that exits (version, help): not a training run
        raise UsageError("train.py's arguments ask it to exit before training; run isaaclab train for that") from None
    from mgpu_lab.tasks.catalog import TASKS, unknown_task_message

    task = getattr(targs, "task", None)
    if task is not None and task not in TASKS:
        raise UsageError(f"--task {task}: {unknown_task_message(task)}")


def _resolve_ranks(value: str, device: str | None, *, jax: bool) -> str:
    """Validate --num_gpus against the visible devices (or CPU cores) and return the value torchrun/skrl gets."""
    on_cpu = device is not None and device.strip().lower() == "cpu"
    if jax and not re.fullmatch(r"\d+", value):
        raise UsageError(
            f"--num_gpus {value}: skrl's JAX launcher needs an integer rank count, such as --num_gpus 2"
        )
    if value in ("gpu", "auto", "cpu"):
        if value == "cpu" and device is not None and not on_cpu:
            raise UsageError(f"--num_gpus cpu starts CPU ranks but train.py gets --device {device}: use --device cpu")
        if value == "gpu":
            count, source = visible_gpus()
            if count == 0:
                raise UsageError(
                    f"--num_gpus gpu: no GPU is visible ({source}); to rehearse on CPU use --device cpu --num_gpus N"
                )
        if value == "cpu" and device is None and visible_gpus()[0] > 0:
            raise UsageError("--num_gpus cpu starts CPU ranks but GPUs are visible: add --device cpu")
        return value
    if not re.fullmatch(r"-?\d{1,9}", value):
        if re.fullmatch(r"-?\d+", value):
            raise UsageError(f"--num_gpus {value[:12]}...: far more ranks than any machine runs")
        raise UsageError(f"--num_gpus {value}: expected an integer, gpu, cpu or auto")
    n = int(value)
    if n < 1:
        raise UsageError(f"--num_gpus {value}: give at least 1 rank")
    if on_cpu:
        cores = os.cpu_count() or 1
        limit = CPU_RANKS_PER_CORE * cores
        if n > limit:
            raise UsageError(f"--num_gpus {n} with --device cpu: at most {limit} CPU ranks here "
                             f"({CPU_RANKS_PER_CORE} per core, {cores} core(s))")
        return str(n)
    count, source = visible_gpus()
    if count == 0:
        raise UsageError(
            f"--num_gpus {n}: no GPU is visible ({source}); to run {n} CPU ranks on gloo add --device cpu"
        )
    if n > count:
        raise UsageError(
            f"--num_gpus {n}: only {count} GPU(s) visible ({source}); use --num_gpus {count} or fewer, "
            "or --device cpu for CPU ranks"
        )
    return str(n)


#: Launcher options that scheduler detection may fill in (when the user did not give them).
NODE_DESTS = ("nnodes", "node_rank", "master_addr", "master_port", "rdzv_backend", "rdzv_endpoint", "rdzv_id",
              "coordinator_address")


def apply_cluster(args: argparse.Namespace, jax: bool) -> list[str]:
    """Fill the node options the user did not give from the scheduler's environment (SLURM, via
    :func:`mgpu_lab.cluster.infer_nodes`; explicit flags always win, --no_slurm turns it off). Returns the
    lines that say what was inferred from which variables (printed on stderr, --dry_run included)."""
    from mgpu_lab.cluster import ClusterError, infer_nodes

    given = {dest: getattr(args, dest) for dest in NODE_DESTS if _given(args, dest)}
    try:
        plan = infer_nodes(os.environ, given, use_slurm=not args.no_slurm, jax=jax)
    except ClusterError as exc:
        raise UsageError(str(exc)) from None
    for dest, value in plan.values().items():
        if dest in given:
            continue
        setattr(args, dest, int(value) if dest in ("node_rank", "master_port") else value)
    return plan.lines()


def shm_lines(config: Config) -> list[str]:
    """The /dev/shm warning before a CUDA launch (gloo CPU ranks do not use /dev/shm)."""
    if config.on_cpu or config.nproc is None:
        return []
    from mgpu_lab.cluster import ClusterError, shm_warning

    ranks = int(config.nproc) if config.nproc.isdigit() else visible_gpus()[0]
    if ranks < 1:
        return []
    try:
        line = shm_warning(ranks, os.environ)
    except ClusterError as exc:
        raise UsageError(str(exc)) from None
    return [line] if line else []


def make_config(argv: Sequence[str]) -> Config:
    """Parse argv once and validate everything that can be validated before anything starts (UsageError)."""
    parser = build_parser()
    args, forwarded = parser.parse_known_args(list(argv))
    if "--" in forwarded:  # the separator argparse stopped at; train.py must not see it
        forwarded.remove("--")
    passthrough = group_dests(parser, TORCHRUN_GROUP)
    torchrun_only = passthrough + group_dests(parser, LAUNCHER_TORCHRUN_GROUP)

    framework = forwarded_value(forwarded, "--ml_framework")
    jax = args.rl_library == "skrl" and framework == "jax"
    device = forwarded_value(forwarded, "--device")

    if not jax and args.coordinator_address is not None:
        raise UsageError(
            "--coordinator_address is for skrl's JAX launcher only: add --rl_library skrl --ml_framework jax, "
            "or use --master_addr/--rdzv_endpoint with torchrun"
        )
    if jax:
        used = [name for name in torchrun_only if _given(args, name)]
        if used:
            flags = ", ".join(f"--{name}" for name in used)
            raise UsageError(
                f"{flags}: torchrun-only, not accepted by skrl's JAX launcher; it takes --nnodes, --node_rank, "
                "--num_gpus and --coordinator_address"
            )
    inferred = apply_cluster(args, jax)
    if args.nnodes is not None:
        _check_nnodes(args.nnodes, jax=jax)
    if args.node_rank is not None:
        max_nodes = int(args.nnodes.split(":")[-1]) if args.nnodes is not None else None
        if args.node_rank < 0:
            raise UsageError(f"--node_rank {args.node_rank}: give a node rank from 0 to nnodes-1")
        if max_nodes is not None and args.node_rank >= max_nodes:
            raise UsageError(
                f"--node_rank {args.node_rank}: out of range for --nnodes {args.nnodes}; use 0 to {max_nodes - 1}")
    if args.master_port is not None and not 0 < args.master_port < 65536:
        raise UsageError(f"--master_port {args.master_port}: give a TCP port from 1 to 65535")
    if args.rdzv_endpoint is not None:
        _check_endpoint("--rdzv_endpoint", args.rdzv_endpoint)
    if args.max_restarts is not None and not 0 <= args.max_restarts <= 1000:
        raise UsageError(f"--max_restarts {args.max_restarts}: give 0 to 1000")
    _check_seconds("monitor_interval", args.monitor_interval)
    _check_seconds("rdzv_timeout", args.rdzv_timeout)
    _check_seconds("hang_timeout", args.hang_timeout, zero_ok=True)
    interval = args.monitor_interval if args.monitor_interval is not None else TORCHRUN_MONITOR_INTERVAL_S
    if 0 < args.hang_timeout < interval:
        raise UsageError(f"--hang_timeout {args.hang_timeout:g}: below the monitor interval ({interval:g} s); "
                         "give at least that, or 0 to turn the watchdog off")
    _check_log_spec("--tee", args.tee)
    _check_log_spec("--redirects", args.redirects)
    if args.local_ranks_filter is not None and not re.fullmatch(r"\d+(,\d+)*", args.local_ranks_filter):
        raise UsageError(f"--local_ranks_filter {args.local_ranks_filter}: give local ranks like 0 or 0,1")
    if args.log_all_ranks and args.local_ranks_filter is not None:
        raise UsageError("--log_all_ranks and --local_ranks_filter contradict each other: give only one")
    if args.coordinator_address is not None:
        if not re.fullmatch(r"[^:\s]+:\d{1,5}", args.coordinator_address) or \
                not 0 < int(args.coordinator_address.rsplit(":", 1)[1]) < 65536:
            raise UsageError(f"--coordinator_address {args.coordinator_address}: give HOST:PORT, such as 10.0.0.1:5000")
    if jax and args.nnodes is not None and int(args.nnodes) > 1 and args.coordinator_address is None:
        raise UsageError(f"--nnodes {args.nnodes} with JAX: give --coordinator_address HOST:PORT of node 0")
    from mgpu_lab.supervise import SuperviseError, grace_from_env

    try:
        grace_from_env(os.environ)
    except SuperviseError as exc:
        raise UsageError(str(exc)) from None

    if args.num_gpus == "gpu" and "PET_NPROC_PER_NODE" in os.environ and not jax:
        nproc = None  # the PyTorchJob's own setting applies
    else:
        nproc = _resolve_ranks(args.num_gpus, device, jax=jax)
    override = os.environ.get(TRAIN_SCRIPT_ENV)
    script = os.path.realpath(override or TRAIN_SCRIPT)
    if not override:
        _check_training_args(script, args.rl_library, forwarded)
    if args.log_dir is not None:
        _check_log_dir(args.log_dir)
    if not args.dry_run and not jax and _hosts_store(args):
        port = args.master_port if args.master_port is not None else int(os.environ.get("PET_MASTER_PORT", "29500"))
        _check_port_free(port)
    config = Config(args, forwarded, jax=jax, device=device, nproc=nproc, train_script=script,
                    passthrough=passthrough, torchrun_only=torchrun_only)
    config.inferred = inferred + shm_lines(config)
    return config


# --------------------------------------------------------------------------------------------------
# config -> command
# --------------------------------------------------------------------------------------------------

class Launch:
    """What to run: the command, whether it goes through skrl's JAX launcher, and whether only to print it."""

    def __init__(self, cmd: list[str], *, jax: bool = False, dry_run: bool = False) -> None:
        self.cmd = cmd
        self.jax = jax
        self.dry_run = dry_run


def build_command(config: Config) -> Launch:
    """The one command builder: torchrun (or skrl's JAX launcher) around train.py."""
    args = config.args
    trainer = [config.train_script, "--rl_library", args.rl_library, *config.forwarded]
    if "--distributed" not in config.forwarded:
        trainer.append("--distributed")

    if config.jax:
        cmd = [
            sys.executable, "-m", JAX_LAUNCHER_MODULE,
            "--nnodes", args.nnodes or "1", "--nproc_per_node", config.nproc or "1",
            "--node_rank", str(args.node_rank or 0),
            "--coordinator_address", args.coordinator_address or JAX_DEFAULT_COORDINATOR,
            *trainer,
        ]
        return Launch(cmd, jax=True, dry_run=args.dry_run)

    cmd = [sys.executable, "-m", TORCHRUN_MODULE]
    if args.nnodes is not None:
        cmd += ["--nnodes", args.nnodes]
    if config.nproc is not None:
        cmd += ["--nproc_per_node", config.nproc]
    if args.node_rank is not None:
        cmd += ["--node_rank", str(args.node_rank)]
    for name in config.passthrough:
        value = getattr(args, name)
        if value is True:
            cmd.append(f"--{name}")
        elif value is not None and value is not False:
            cmd += [f"--{name}", f"{value:g}" if isinstance(value, float) else str(value)]
    if args.rdzv_timeout is not None:
        backend = args.rdzv_backend or os.environ.get("PET_RDZV_BACKEND", "static")
        key = "timeout" if backend == "static" else "join_timeout"
        cmd += ["--rdzv_conf", f"{key}={math.ceil(args.rdzv_timeout) + RDZV_BACKSTOP_S}"]
    if args.local_ranks_filter is None and not args.log_all_ranks:
        cmd += ["--local_ranks_filter", "0"]
    return Launch(cmd + trainer, dry_run=args.dry_run)


# --------------------------------------------------------------------------------------------------
# the runner
# --------------------------------------------------------------------------------------------------

def job_key(config: Config) -> str:
    """A string naming the job across restarts and nodes: the given key, SLURM's job id, the rdzv id, or fresh."""
    if os.environ.get(JOB_KEY_ENV):
        return os.environ[JOB_KEY_ENV]
    if os.environ.get("SLURM_JOB_ID"):
        return f"slurm-{os.environ['SLURM_JOB_ID']}"
    rdzv_id = config.args.rdzv_id or os.environ.get("PET_RDZV_ID")
    if rdzv_id:
        return f"rdzv-{rdzv_id}"
    return f"job-{os.urandom(6).hex()}"


class JobMonitor:
    """Called on every supervision tick: rendezvous deadline, hang watchdog, rank liveness, JAX errors."""

    def __init__(self, config: Config, supervise_dir: str, *, grace_s: float, start: float,
                 error_file: str | None, trace_prefix: str | None) -> None:
        from mgpu_lab.watchdog import Watchdog

        self.config = config
        self.dir = supervise_dir
        self.grace_s = grace_s
        self.start = start
        self.error_file = error_file
        self.trace_prefix = trace_prefix
        self.watchdog = Watchdog(supervise_dir, config.args.hang_timeout)
        self.joined = config.jax  # skrl's JAX launcher has no rendezvous of its own
        self.next_report = start + self._report_every()
        self.outcome: int | None = None  # EXIT_HANG or EXIT_RDZV once the monitor stopped the job
        self.last_alive: dict[int, float] = {}  # rank -> wall time its process was last seen alive
        self.vanished: set[int] = set()  # ranks whose process disappeared while the job ran
        self.tail = bytearray()

    def _report_every(self) -> float:
        return min(30.0, max(1.0, self.config.rdzv_timeout / 10))

    def stderr(self, chunk: bytes) -> None:
        """Copy the job's stderr to ours, keeping a tail to read torchrun's failure summary from."""
        if self.outcome is None:  # once the monitor stopped the job, torchrun's shutdown chatter stays out
            out = sys.stderr.buffer
            out.write(chunk)
            out.flush()
        self.tail += chunk
        del self.tail[:-262144]

    def tick(self, supervisor, now: float) -> None:  # noqa: ANN001 - mgpu_lab.supervise.Supervisor
        import signal
        import time

        from mgpu_lab import heartbeat, supervise

        beats = heartbeat.read_beats(self.dir)
        if not self.joined:
            if beats or self._workers_started(supervisor.pid):
                self.joined = True
                if now - self.start >= self._report_every():
                    print(f"[INFO] launcher: rendezvous complete after {now - self.start:.0f} s",
                          file=sys.stderr, flush=True)
            elif now - self.start >= self.config.rdzv_timeout:
                print(f"isaaclab train_multigpu: error: {self._rdzv_missing()}", file=sys.stderr, flush=True)
                self.outcome = EXIT_RDZV
                supervisor.stop(signal.SIGTERM, grace_s=min(self.grace_s, 3.0))
                return
            elif now >= self.next_report:
                self.next_report = now + self._report_every()
                left = self.config.rdzv_timeout - (now - self.start)
                print(f"[INFO] launcher: waiting for the rendezvous at {self._endpoint()}: this node "
                      f"({self._node()}) is in; expecting {self._nodes()} node(s); {left:.0f} s left "
                      f"(--rdzv_timeout)", file=sys.stderr, flush=True)
        wall = time.time()
        for rank, beat in beats.items():
            if supervise.alive(beat.pid):
                self.last_alive[rank] = wall
                self.vanished.discard(rank)  # a restarted worker took the rank over
            elif rank in self.last_alive:
                self.vanished.add(rank)
        if self.error_file is not None and os.path.exists(self.error_file):
            print("[ERROR] launcher: a JAX rank failed; stopping the other ranks", file=sys.stderr, flush=True)
            supervisor.stop(signal.SIGTERM)
            return
        if self.config.args.hang_timeout > 0 and self.watchdog.check(now):
            self._on_hang(supervisor, now)

    def _workers_started(self, pid: int | None) -> bool:
        """torchrun starts the workers (processes running the training script) only after its rendezvous."""
        from mgpu_lab import supervise

        if pid is None:
            return False
        needle = self.config.train_script.encode()
        for child in supervise.descendants(pid):
            try:
                with open(f"/proc/{child}/cmdline", "rb") as fh:
                    if needle in fh.read().split(b"\0"):
                        return True
            except OSError:
                continue
        return False

    def _on_hang(self, supervisor, now: float) -> None:  # noqa: ANN001
        import signal

        from mgpu_lab import heartbeat
        from mgpu_lab.watchdog import write_report

        print(f"[ERROR] watchdog: no rank made progress for {self.config.args.hang_timeout:g} s "
              "(--hang_timeout); asking every rank for its stack", file=sys.stderr, flush=True)
        self._trigger_nccl_dumps()
        report = self.watchdog.diagnose(now)
        folder = write_report(report, heartbeat.read_run_dir(self.dir))
        for line in report.summary_lines():
            print(line, file=sys.stderr)
        print(f"[ERROR] watchdog: stacks and summary in {folder}", file=sys.stderr)
        if self.trace_prefix is not None:
            print(f"[ERROR] watchdog: NCCL flight recorder dumps (when NCCL wrote any): {self.trace_prefix}<rank>",
                  file=sys.stderr)
        print("[ERROR] watchdog: stopping the job (exit 3)", file=sys.stderr, flush=True)
        self.outcome = EXIT_HANG
        supervisor.stop(signal.SIGTERM, grace_s=min(self.grace_s, 3.0))

    def _trigger_nccl_dumps(self) -> None:
        """Ask each CUDA rank's NCCL flight recorder to dump now, through its debug pipe (best effort)."""
        if self.trace_prefix is None:
            return
        folder = os.path.dirname(self.trace_prefix)
        try:
            names = [n for n in os.listdir(folder) if n.endswith(".pipe")]
        except OSError:
            return
        for name in names:
            try:
                fd = os.open(os.path.join(folder, name), os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                continue
            try:
                os.write(fd, b"1\n")
            except OSError:
                pass
            finally:
                os.close(fd)

    # words for the rendezvous lines
    def _endpoint(self) -> str:
        a = self.config.args
        if a.rdzv_endpoint:
            return f"{a.rdzv_backend or 'static'} {a.rdzv_endpoint}"
        if os.environ.get("PET_RDZV_ENDPOINT") and a.master_addr is None:
            return f"{os.environ.get('PET_RDZV_BACKEND', 'static')} {os.environ['PET_RDZV_ENDPOINT']}"
        host = a.master_addr or os.environ.get("PET_MASTER_ADDR", "127.0.0.1")
        port = a.master_port or os.environ.get("PET_MASTER_PORT", "29500")
        return f"static {host}:{port}"

    def _nodes(self) -> str:
        return self.config.args.nnodes or os.environ.get("PET_NNODES", "1")

    def _node(self) -> str:
        import socket

        rank = self.config.args.node_rank
        rank_text = f"node_rank {rank}" if rank is not None else "node_rank assigned at the rendezvous"
        return f"{socket.gethostname()}, {rank_text}"

    def _rdzv_missing(self) -> str:
        import socket

        endpoint = self._endpoint().split()[-1]
        host, _, port = endpoint.rpartition(":")
        answered = True
        if not _hosts_store(self.config.args):  # a node that only connects: did the endpoint answer at all?
            try:
                with socket.create_connection((host.strip("[]"), int(port or 29400)), timeout=1.0):
                    pass
            except (OSError, ValueError):
                answered = False
        what = (f"the other node(s) of {self._nodes()} expected never joined at {endpoint}" if answered
                else f"the rendezvous at {endpoint} never answered, so no other node could join "
                     f"({self._nodes()} node(s) expected)")
        return (f"rendezvous deadline passed after {self.config.rdzv_timeout:g} s (--rdzv_timeout): "
                f"never arrived: {what}; this node ({self._node()}) was ready")

    def failure_lines(self, world_hint: int | None = None) -> list[str]:
        from mgpu_lab import failures, heartbeat

        exits, root = failures.parse_torchrun_summary(self.tail.decode("utf-8", errors="replace"))
        beats = heartbeat.read_beats(self.dir)
        event = failures.first_failure(heartbeat.read_failures(self.dir), exits, beats, self.last_alive,
                                       self.vanished)
        if event is None:
            return []
        world = next((b.world_size for b in beats.values()), world_hint)
        return failures.report_lines(event, world, root)


def run_job(config: Config, launch: Launch) -> int:
    """Run the job under supervision and a watchdog; return the launcher's exit status."""
    import shutil
    import tempfile
    import time

    from mgpu_lab import heartbeat, supervise

    grace = supervise.grace_from_env(os.environ)
    env = dict(os.environ)
    supervise_dir = tempfile.mkdtemp(prefix="mgpu_lab_supervise_")
    env[heartbeat.SUPERVISE_DIR_ENV] = supervise_dir
    env[JOB_KEY_ENV] = job_key(config)
    tag = os.path.basename(supervise_dir)
    env[supervise.JOB_TAG_ENV] = tag

    trace_prefix = None
    if not config.on_cpu and not config.jax:  # CUDA ranks: PyTorch's NCCL flight recorder for this run
        trace_dir = os.path.join(config.args.log_dir or tempfile.gettempdir(), f"nccl_trace_{env[JOB_KEY_ENV]}")
        trace_prefix = os.path.join(trace_dir, "nccl_trace_rank_")
        env.setdefault("TORCH_NCCL_TRACE_BUFFER_SIZE", "2000")
        env.setdefault("TORCH_NCCL_DUMP_ON_TIMEOUT", "1")
        env.setdefault("TORCH_FR_DUMP_TEMP_FILE", trace_prefix)
        env.setdefault("TORCH_NCCL_DEBUG_INFO_PIPE_FILE", os.path.join(trace_dir, "nccl_trace_rank_"))
        trace_prefix = env["TORCH_FR_DUMP_TEMP_FILE"]
        os.makedirs(os.path.dirname(trace_prefix) or ".", exist_ok=True)
        print(f"[INFO] launcher: NCCL flight recorder on; dumps go to {trace_prefix}<rank>", file=sys.stderr)

    error_file = None
    if launch.jax and "TORCHELASTIC_ERROR_FILE" not in env:
        error_file = os.path.join(supervise_dir, "jax_error.json")
        env["TORCHELASTIC_ERROR_FILE"] = error_file

    print(f"[INFO] launcher: {shlex.join(launch.cmd)}", file=sys.stderr, flush=True)
    janitor = supervise.start_janitor(tag, grace)
    monitor = JobMonitor(config, supervise_dir, grace_s=grace, start=time.monotonic(), error_file=error_file,
                         trace_prefix=trace_prefix)
    try:
        rc, supervisor = supervise.run_supervised(launch.cmd, env, grace_s=grace, tick=monitor.tick,
                                                  stderr_sink=monitor.stderr, tick_s=0.2)
        if monitor.outcome is not None and supervisor.interrupted is None:
            return monitor.outcome
        if supervisor.interrupted is not None or rc == 0:
            return rc
        lines = monitor.failure_lines()
        if error_file is not None:
            failure = _jax_failure(error_file)
            if failure is not None:
                lines.insert(0, f"[ERROR] launcher: a JAX rank failed:\n{failure}")
        for line in lines:
            print(line, file=sys.stderr, flush=True)
        return EXIT_FAILED if rc != EXIT_USAGE else rc
    finally:
        supervise.dismiss_janitor(janitor)
        shutil.rmtree(supervise_dir, ignore_errors=True)


def _jax_failure(error_file: str) -> str | None:
    """The message a failed JAX rank left in its elastic error file, if any."""
    try:
        with open(error_file, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return None
    import json

    try:
        message = json.loads(text)["message"]
        if isinstance(message, dict):
            return f"{message.get('message')}\n{message.get('extraInfo', {}).get('py_callstack', '')}".rstrip()
        return str(message)
    except (ValueError, KeyError, TypeError):
        return text.strip() or "a rank failed"


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        config = make_config(argv)
        launch = build_command(config)
    except UsageError as exc:
        print(f"isaaclab train_multigpu: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for line in config.inferred:
        print(line, file=sys.stderr)
    if launch.dry_run:
        print(shlex.join(launch.cmd))
        return EXIT_OK
    return run_job(config, launch)


if __name__ == "__main__":
    sys.exit(main())
