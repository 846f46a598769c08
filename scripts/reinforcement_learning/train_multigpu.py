#!/usr/bin/env python3
"""Launch ``train.py`` on several GPUs or nodes through torchrun (or skrl's JAX launcher).

Run it as ``uv run isaaclab train_multigpu [LAUNCHER OPTIONS] [TRAINING ARGS]``. The launcher's own
options are listed by ``--help``; every other argument is passed to ``train.py`` unchanged, and
``--distributed`` is added once. The module is import-light on purpose: it never imports torch, so
``--dry_run`` and every rejection answer at once.

Layout: one argparse definition (:func:`build_parser`), one command builder (:func:`build_command`),
one runner (:func:`run_job`) that supervises the job and its signals.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import signal
import sys
import time

TYPE_CHECKING = False  # typing, dataclasses and pathlib stay unimported: --dry_run must start fast
if TYPE_CHECKING:
    import subprocess
    from typing import NoReturn, Sequence

#: Environment variable that replaces the trainer script (used by the tests to launch small fixtures).
TRAIN_SCRIPT_ENV = "MGPU_LAB_TRAIN_SCRIPT"
#: Environment variable holding the grace period, in seconds, between forwarding an interrupt and SIGKILL.
GRACE_ENV = "MGPU_LAB_KILL_GRACE_S"
DEFAULT_GRACE_S = 10.0

TRAIN_SCRIPT = os.path.join(os.path.dirname(os.path.realpath(__file__)), "train.py")
TORCHRUN_MODULE = "torch.distributed.run"
JAX_LAUNCHER_MODULE = "skrl.utils.distributed.jax"
JAX_DEFAULT_COORDINATOR = "127.0.0.1:5000"  # skrl's own default

#: Launcher options that only torchrun understands (skrl's JAX launcher has no equivalent).
TORCHRUN_ONLY = (
    "master_addr", "master_port", "rdzv_backend", "rdzv_endpoint", "rdzv_id", "max_restarts",
    "monitor_interval", "start_method", "role", "tee", "redirects", "local_ranks_filter", "log_dir",
    "log_all_ranks",
)

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

Arguments after a '--' go to train.py untouched. Output: by default only local rank 0 of each node
reaches the console (torchrun --local_ranks_filter 0).

signals: the job runs in its own process group. The first Ctrl-C (SIGINT) or SIGTERM is forwarded
to it; if the job has not stopped after a grace period (MGPU_LAB_KILL_GRACE_S, default 10 s),
every process of the job is killed. A second Ctrl-C kills at once. The exit status is the job's
(128 + N when it ended by signal N).

skrl JAX: skrl's launcher does not report its workers' exit codes. This launcher sets
TORCHELASTIC_ERROR_FILE for the ranks, so a rank that dies of an uncaught exception (train.py's
entry point is wrapped in torch's elastic `record`) still makes the launcher exit 1; a rank that
exits non-zero without an exception is not detected there.

testing: MGPU_LAB_TRAIN_SCRIPT=PATH launches PATH instead of train.py (for the test suite).
"""


class UsageError(Exception):
    """Bad launcher input: reported as one line on stderr with exit status 2."""


def _usage_error(message: str) -> NoReturn:
    """argparse's error hook: one line on stderr, exit 2, no usage block."""
    print(f"isaaclab train_multigpu: error: {message} (see --help)", file=sys.stderr)
    sys.exit(2)


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
    """The launcher's options. Every unknown argument is forwarded to train.py."""
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

    parser.add_argument(
        "--rl_library", choices=["rsl_rl", "rl_games", "skrl"], default="rsl_rl",
        help="RL library that train.py trains with (default: rsl_rl).",
    )
    parser.add_argument(
        "--num_gpus", "--nproc_per_node", dest="num_gpus", default="gpu", metavar="N|gpu|cpu|auto",
        help=(
            "Ranks per node: an integer, 'gpu' (every visible GPU), 'cpu' (one rank per CPU core) or "
            "'auto' (GPUs if any, else CPU cores). An integer must not exceed the visible GPUs, "
            "unless train.py gets --device cpu, which runs the ranks as CPU processes on gloo "
            "(default: gpu)."
        ),
    )
    # multi-node and rendezvous (torchrun)
    parser.add_argument(
        "--nnodes", default="1", metavar="N|MIN:MAX",
        help="Number of nodes, or an elastic range MIN:MAX (default: 1).",
    )
    parser.add_argument(
        "--node_rank", type=int, default=0,
        help="Rank of this node, 0 to nnodes-1; used by the static rendezvous (default: 0).",
    )
    parser.add_argument(
        "--master_addr", default=None,
        help="Address of node 0 for the static rendezvous (torchrun's default: 127.0.0.1).",
    )
    parser.add_argument(
        "--master_port", type=int, default=None,
        help="Free port on node 0 for the static rendezvous (torchrun's default: 29500; "
             "give another when two jobs share a machine).",
    )
    parser.add_argument(
        "--rdzv_backend", default=None,
        help="Rendezvous backend, e.g. c10d for a dynamic rendezvous (torchrun's default: static).",
    )
    parser.add_argument(
        "--rdzv_endpoint", default=None, metavar="HOST:PORT",
        help="Rendezvous endpoint for --rdzv_backend c10d (c10d's default port: 29400).",
    )
    parser.add_argument(
        "--rdzv_id", default=None,
        help="Job id shared by every node of one c10d rendezvous.",
    )
    # worker supervision (torchrun)
    parser.add_argument(
        "--max_restarts", type=int, default=0,
        help="Restarts of the whole worker group after a failure before giving up (default: 0).",
    )
    parser.add_argument(
        "--monitor_interval", type=float, default=None, metavar="SECONDS",
        help="How often torchrun checks its workers (torchrun's default: 0.1).",
    )
    parser.add_argument(
        "--start_method", choices=["spawn", "fork", "forkserver"], default=None,
        help="Multiprocessing start method of the workers (torchrun's default: spawn).",
    )
    parser.add_argument(
        "--role", default=None,
        help="User-defined role name of the workers (torchrun's default: default).",
    )
    # output (torchrun)
    parser.add_argument(
        "--tee", default=None, metavar="0|1|2|3|MAP",
        help="Copy worker output to per-rank log files and the console: 1 stdout, 2 stderr, 3 both, "
             "or a per-rank map such as 0:1,1:3.",
    )
    parser.add_argument(
        "--redirects", default=None, metavar="0|1|2|3|MAP",
        help="Send worker output to per-rank log files only (same values as --tee).",
    )
    parser.add_argument(
        "--local_ranks_filter", default=None, metavar="RANKS",
        help="Comma-separated local ranks whose output reaches the console (launcher default: 0).",
    )
    parser.add_argument(
        "--log_dir", default=None,
        help="Directory for torchrun's per-rank log files and error files "
             "(<log_dir>/<run_id>_*/attempt_<k>/<local_rank>/).",
    )
    parser.add_argument(
        "--log_all_ranks", action="store_true",
        help="Show every local rank on the console instead of local rank 0 only.",
    )
    # skrl JAX
    parser.add_argument(
        "--coordinator_address", default=None, metavar="HOST:PORT",
        help="JAX coordinator (process 0) for --rl_library skrl --ml_framework jax "
             "(skrl's default: 127.0.0.1:5000).",
    )
    parser.add_argument(
        "--dry_run", action="store_true",
        help="Print the resolved command, shell-quoted, and exit without running it.",
    )
    return parser


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


# --------------------------------------------------------------------------------------------------
# the command builder
# --------------------------------------------------------------------------------------------------

class Launch:
    """What to run: the command, whether it goes through skrl's JAX launcher, and whether only to print it."""

    def __init__(self, cmd: list[str], *, jax: bool = False, dry_run: bool = False) -> None:
        self.cmd = cmd
        self.jax = jax
        self.dry_run = dry_run


def _explicit_dests(argv: Sequence[str]) -> set[str]:
    """The launcher options written on the command line (not left at their defaults)."""
    probe = build_parser()
    for action in probe._actions:
        action.default = argparse.SUPPRESS
    namespace, _ = probe.parse_known_args(list(argv))
    return set(vars(namespace))


def _check_nnodes(value: str, *, jax: bool) -> None:
    m = re.fullmatch(r"(\d+)(?::(\d+))?", value)
    if not m or int(m.group(1)) < 1 or (m.group(2) is not None and int(m.group(2)) < int(m.group(1))):
        raise UsageError(f"--nnodes {value}: give a node count such as 2, or a range MIN:MAX such as 1:4")
    if jax and m.group(2) is not None:
        raise UsageError(f"--nnodes {value}: skrl's JAX launcher takes a fixed node count, such as --nnodes 2")


def _check_log_spec(flag: str, value: str | None) -> None:
    if value is not None and not re.fullmatch(r"[0-3]|\d+:[0-3](,\d+:[0-3])*", value):
        raise UsageError(f"{flag} {value}: give 0 (none), 1 (stdout), 2 (stderr), 3 (both) or a map like 0:1,1:3")


def _resolve_ranks(value: str, device: str | None, *, jax: bool) -> str:
    """Validate --num_gpus against the visible devices and return the value torchrun/skrl gets."""
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
    if not re.fullmatch(r"-?\d+", value):
        raise UsageError(f"--num_gpus {value}: expected an integer, gpu, cpu or auto")
    n = int(value)
    if n < 1:
        raise UsageError(f"--num_gpus {value}: give at least 1 rank")
    if not on_cpu:
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


def build_command(argv: Sequence[str]) -> Launch:
    """Parse the launcher's arguments and build the command to run (raises UsageError)."""
    args, forwarded = build_parser().parse_known_args(list(argv))
    if "--" in forwarded:  # the separator argparse stopped at; train.py must not see it
        forwarded.remove("--")

    framework = forwarded_value(forwarded, "--ml_framework")
    jax = args.rl_library == "skrl" and framework == "jax"
    device = forwarded_value(forwarded, "--device")

    if not jax and args.coordinator_address is not None:
        raise UsageError(
            "--coordinator_address is for skrl's JAX launcher only: add --rl_library skrl --ml_framework jax, "
            "or use --master_addr/--rdzv_endpoint with torchrun"
        )
    if jax:
        explicit = _explicit_dests(argv)
        used = [name for name in TORCHRUN_ONLY if name in explicit]
        if used:
            flags = ", ".join(f"--{name}" for name in used)
            raise UsageError(
                f"{flags}: torchrun-only, not accepted by skrl's JAX launcher; it takes --nnodes, --node_rank, "
                "--num_gpus and --coordinator_address"
            )
    _check_nnodes(args.nnodes, jax=jax)
    if args.node_rank < 0:
        raise UsageError(f"--node_rank {args.node_rank}: give a node rank from 0 to nnodes-1")
    max_nodes = int(args.nnodes.split(":")[-1])
    if args.node_rank >= max_nodes:
        raise UsageError(f"--node_rank {args.node_rank}: out of range for --nnodes {args.nnodes}; use 0 to {max_nodes - 1}")
    if args.master_port is not None and not 0 < args.master_port < 65536:
        raise UsageError(f"--master_port {args.master_port}: give a TCP port from 1 to 65535")
    if args.max_restarts < 0:
        raise UsageError(f"--max_restarts {args.max_restarts}: give 0 or more")
    if args.monitor_interval is not None and args.monitor_interval <= 0:
        raise UsageError(f"--monitor_interval {args.monitor_interval}: give a positive number of seconds")
    _check_log_spec("--tee", args.tee)
    _check_log_spec("--redirects", args.redirects)
    if args.local_ranks_filter is not None and not re.fullmatch(r"\d+(,\d+)*", args.local_ranks_filter):
        raise UsageError(f"--local_ranks_filter {args.local_ranks_filter}: give local ranks like 0 or 0,1")
    if args.log_all_ranks and args.local_ranks_filter is not None:
        raise UsageError("--log_all_ranks and --local_ranks_filter contradict each other: give only one")
    if args.coordinator_address is not None and not re.fullmatch(r"[^:\s]+:\d{1,5}", args.coordinator_address):
        raise UsageError(f"--coordinator_address {args.coordinator_address}: give HOST:PORT, such as 10.0.0.1:5000")
    if jax and max_nodes > 1 and args.coordinator_address is None:
        raise UsageError(f"--nnodes {args.nnodes} with JAX: give --coordinator_address HOST:PORT of node 0")

    nproc = _resolve_ranks(args.num_gpus, device, jax=jax)
    script = os.environ.get(TRAIN_SCRIPT_ENV) or str(TRAIN_SCRIPT)
    trainer = [os.path.realpath(script), "--rl_library", args.rl_library, *forwarded]
    if "--distributed" not in forwarded:
        trainer.append("--distributed")

    if jax:
        cmd = [
            sys.executable, "-m", JAX_LAUNCHER_MODULE,
            "--nnodes", args.nnodes, "--nproc_per_node", nproc, "--node_rank", str(args.node_rank),
            "--coordinator_address", args.coordinator_address or JAX_DEFAULT_COORDINATOR,
            *trainer,
        ]
        return Launch(cmd, jax=True, dry_run=args.dry_run)

    cmd = [sys.executable, "-m", TORCHRUN_MODULE, "--nnodes", args.nnodes, "--nproc_per_node", nproc]
    if args.nnodes != "1":
        cmd += ["--node_rank", str(args.node_rank)]
    for name in ("master_addr", "master_port", "rdzv_backend", "rdzv_endpoint", "rdzv_id"):
        value = getattr(args, name)
        if value is not None:
            cmd += [f"--{name}", str(value)]
    if args.max_restarts:
        cmd += ["--max_restarts", str(args.max_restarts)]
    for name in ("monitor_interval", "start_method", "role", "tee", "redirects", "log_dir"):
        value = getattr(args, name)
        if value is not None:
            cmd += [f"--{name}", str(value)]
    if args.local_ranks_filter is not None:
        cmd += ["--local_ranks_filter", args.local_ranks_filter]
    elif not args.log_all_ranks:
        cmd += ["--local_ranks_filter", "0"]
    return Launch(cmd + trainer, dry_run=args.dry_run)


# --------------------------------------------------------------------------------------------------
# the runner
# --------------------------------------------------------------------------------------------------

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def _prctl():
    """libc's prctl on Linux, else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def _process_table() -> dict[int, int]:
    """pid -> parent pid for every live (non-zombie) process, read from /proc; {} without /proc."""
    table: dict[int, int] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return table
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                data = fh.read()
        except OSError:
            continue
        fields = data[data.rfind(b")") + 2:].split()
        if len(fields) > 1 and fields[0] not in (b"Z", b"X"):
            table[int(name)] = int(fields[1])
    return table


def descendants(root: int) -> list[int]:
    """Live processes below ``root`` (any session or process group), parents first."""
    children: dict[int, list[int]] = {}
    for pid, ppid in _process_table().items():
        children.setdefault(ppid, []).append(pid)
    found, queue = [], list(children.get(root, []))
    while queue:
        pid = queue.pop(0)
        found.append(pid)
        queue.extend(children.get(pid, []))
    return found


def _signal_pids(pids: Sequence[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _reap() -> None:
    """Collect exit statuses of children (orphans handed to this subreaper included)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


class _Supervisor:
    """Forward the first interrupt to the job's group, escalate to SIGKILL, kill at once on the second."""

    def __init__(self, grace_s: float) -> None:
        self.pid: int | None = None  # the job's main process, once started
        self.grace_s = grace_s
        self.signum: int | None = None  # the first stop signal sent to the job
        self.interrupted = False  # True when that signal came from outside (user, scheduler)

    def started(self, pid: int) -> None:
        """The job runs now; pass on an interrupt that came while it was starting."""
        self.pid = pid
        if self.signum is not None:
            self._forward(self.signum)

    def _forward(self, signum: int) -> None:
        if self.pid is not None:
            try:
                os.killpg(self.pid, signum)
            except (ProcessLookupError, PermissionError):
                pass
        signal.setitimer(signal.ITIMER_REAL, max(self.grace_s, 0.001))

    def kill_all(self) -> None:
        """SIGKILL the job's process group and every process below the launcher."""
        if self.pid is not None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for _ in range(3):  # processes may fork while we kill; a few sweeps catch them
            pids = descendants(os.getpid())
            if not pids:
                break
            _signal_pids(pids, signal.SIGKILL)

    def stop(self, signum: int) -> None:
        """Ask the job to stop with ``signum``; SIGKILL everything after the grace period."""
        self.signum = signum
        self._forward(signum)

    def on_signal(self, signum: int, frame: object) -> None:
        if not self.interrupted:
            self.interrupted = True
            print(
                f"[INFO] launcher: {signal.Signals(signum).name} received, stopping the job "
                f"(again to kill at once; killing in {self.grace_s:g} s otherwise)",
                file=sys.stderr, flush=True,
            )
            self.stop(signum)
        else:
            print("[INFO] launcher: second interrupt, killing the job", file=sys.stderr, flush=True)
            self.kill_all()

    def on_alarm(self, signum: int, frame: object) -> None:
        print(f"[WARN] launcher: job still running {self.grace_s:g} s after the interrupt, killing it",
              file=sys.stderr, flush=True)
        self.kill_all()


def _grace_s() -> float:
    raw = os.environ.get(GRACE_ENV)
    if raw is None:
        return DEFAULT_GRACE_S
    try:
        value = float(raw)
    except ValueError:
        raise UsageError(f"{GRACE_ENV}={raw!r}: give a number of seconds") from None
    if value < 0:
        raise UsageError(f"{GRACE_ENV}={raw!r}: give 0 or more seconds")
    return value


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


def _wait(proc: subprocess.Popen[bytes], supervisor: _Supervisor, error_file: str | None) -> int:
    """Wait for the job. Under skrl's JAX launcher, also watch the ranks' error file: that launcher neither
    stops the other ranks when one fails nor reports the failure, so the first error stops the job."""
    if error_file is None:
        return proc.wait()
    import subprocess

    while True:
        try:
            return proc.wait(timeout=0.25)
        except subprocess.TimeoutExpired:
            pass
        if supervisor.signum is None and os.path.exists(error_file):
            print("[ERROR] launcher: a JAX rank failed; stopping the other ranks", file=sys.stderr, flush=True)
            supervisor.stop(signal.SIGTERM)


def _clean_up(supervisor: _Supervisor, grace: float) -> None:
    """After the job's main process ended: stop whatever it left behind, then reap."""
    leftovers = descendants(os.getpid())
    if leftovers:
        _signal_pids(leftovers, signal.SIGTERM)
        deadline = time.monotonic() + min(grace, 3.0)
        while leftovers and time.monotonic() < deadline:
            time.sleep(0.05)
            _reap()
            leftovers = descendants(os.getpid())
        supervisor.kill_all()
    _reap()


def run_job(launch: Launch) -> int:
    """Run the job in its own session, supervise signals, leave no process behind; return its status."""
    import subprocess
    import tempfile

    grace = _grace_s()
    prctl = _prctl()
    if prctl is not None:
        prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # orphaned workers come back to us, not to init

    launcher_pid = os.getpid()

    def child_setup() -> None:  # runs in the child before exec
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)  # launcher killed -> job told to stop
            if os.getppid() != launcher_pid:
                os._exit(1)

    env = dict(os.environ)
    tmpdir = None
    error_file = None
    if launch.jax and "TORCHELASTIC_ERROR_FILE" not in env:
        tmpdir = tempfile.TemporaryDirectory(prefix="mgpu_lab_jax_")
        error_file = os.path.join(tmpdir.name, "error.json")
        env["TORCHELASTIC_ERROR_FILE"] = error_file

    print(f"[INFO] launcher: {shlex.join(launch.cmd)}", file=sys.stderr, flush=True)
    supervisor = _Supervisor(grace)
    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGALRM)
    previous = {sig: signal.getsignal(sig) for sig in handled}
    for sig in handled[:-1]:
        signal.signal(sig, supervisor.on_signal)
    signal.signal(signal.SIGALRM, supervisor.on_alarm)
    try:
        try:
            proc = subprocess.Popen(launch.cmd, env=env, start_new_session=True, preexec_fn=child_setup)
        except OSError as exc:
            print(f"isaaclab train_multigpu: error: cannot start {launch.cmd[0]}: {exc}", file=sys.stderr)
            return 2
        supervisor.started(proc.pid)
        try:
            rc = _wait(proc, supervisor, error_file)
        finally:
            _clean_up(supervisor, grace)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    if rc < 0:
        rc = 128 - rc
    if error_file is not None:
        failure = _jax_failure(error_file)
        if failure is not None:
            print(f"[ERROR] launcher: a JAX rank failed:\n{failure}", file=sys.stderr, flush=True)
            if not supervisor.interrupted:
                rc = 1
        tmpdir.cleanup()
    if rc == 0 and supervisor.interrupted:
        rc = 128 + supervisor.signum
    return rc


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        launch = build_command(argv)
        if launch.dry_run:
            print(shlex.join(launch.cmd))
            return 0
        return run_job(launch)
    except UsageError as exc:
        print(f"isaaclab train_multigpu: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
