"""The launcher's runtime: argv -> config (parsed once, validated) -> command -> runner. No torch import.

``scripts/reinforcement_learning/train_multigpu.py`` owns the one argparse definition (``build_parser``,
which the checker reads statically) and calls :func:`main`. Everything after parsing lives here, where the
tests call it in-process:

- :func:`make_config` validates everything that can be known before a rank starts (launcher options,
  devices that exist, the cluster's environment, and the forwarded training arguments with ``train.py``'s
  own parser and the trainer's own checks, the seed against the job's world size, a checkpoint's library
  and format), raising :class:`~mgpu_lab.core.errors.UsageError`; nothing is created on the way.
- :func:`build_command` is the one command builder: torchrun (or skrl's JAX launcher) around train.py.
- :func:`run` hands the job to :mod:`mgpu_lab.job.monitor` (supervision, watchdog, the failure report).

Import-light on purpose: ``--dry_run`` and every rejection answer without importing torch (a forwarded
``--checkpoint`` is the exception: reading it needs torch's restricted loader).
"""

from __future__ import annotations

import math
import os
import re
import shlex
import sys
import time

from mgpu_lab.core.errors import EXIT_OK, EXIT_USAGE, UsageError
from mgpu_lab.job.config import LaunchConfig, read_scheduler_env, scheduler_around
from mgpu_lab.job.kill_grace import SuperviseError, grace_from_env
from mgpu_lab.launch import any_script, argv_checks, script_check

TYPE_CHECKING = False  # typing stays unimported: --dry_run must start fast
if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping, Sequence

    from mgpu_lab.job.config import SchedulerEnv
    from mgpu_lab.launch.any_script import Script
    from mgpu_lab.launch.devices import Inventory

PROG = "mgpu-lab train_multigpu"
TORCHRUN_MODULE = "torch.distributed.run"
JAX_LAUNCHER_MODULE = "skrl.utils.distributed.jax"
JAX_DEFAULT_COORDINATOR = "127.0.0.1:5000"  # skrl's own default

#: Argument group of the options passed to torchrun as given (``--name value``), only when given.
TORCHRUN_GROUP = "torchrun: rendezvous, workers and output (passed on only when given)"
#: Argument group of torchrun-only options that the launcher itself interprets or maps.
LAUNCHER_TORCHRUN_GROUP = "torchrun: options the launcher interprets"

CPU_RANKS_PER_CORE = 4  # CPU ranks beyond this many per core are refused
#: torchrun gets the rendezvous deadline plus this margin: the launcher's own clear report comes first.
RDZV_BACKSTOP_S = 5

#: Launcher options that scheduler detection may fill in (when the user did not give them).
NODE_DESTS = (
    "nnodes",
    "node_rank",
    "master_addr",
    "master_port",
    "rdzv_backend",
    "rdzv_endpoint",
    "rdzv_id",
    "coordinator_address",
)


def group_dests(parser: argparse.ArgumentParser, title: str) -> list[str]:
    """The option names (dests) of one argument group, in definition order."""
    for group in parser._action_groups:
        if group.title == title:
            return [action.dest for action in group._group_actions]
    raise KeyError(title)


def forwarded_value(args: Sequence[str], flag: str) -> str | None:
    """The last value of ``flag`` among forwarded arguments (``--flag V`` or ``--flag=V``)."""
    value = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(flag + "="):
            value = arg[len(flag) + 1 :]
    return value


# --------------------------------------------------------------------------------------------------
# the config
# --------------------------------------------------------------------------------------------------


class Devices:
    """Visible GPUs, read once and only when asked (a CPU-only launch never looks)."""

    def __init__(self, environ: Mapping[str, str], inventory: Inventory | None) -> None:
        self.environ = environ
        self.inventory = inventory
        self._visible: tuple[int, str] | None = None

    def visible(self) -> tuple[int, str]:
        if self._visible is None:
            from mgpu_lab.launch.devices import DeviceError, visible  # only when a check needs GPUs

            try:
                self._visible = visible(self.environ, self.inventory)
            except DeviceError as exc:
                raise UsageError(str(exc)) from None
        return self._visible


def resolve_ranks(
    value: str, device: str | None, on_cpu: bool, devices: Devices, *, jax: bool, cuda_only: bool = False
) -> str:
    """Validate --num_gpus against the visible devices (or CPU cores) and return the value torchrun/skrl gets.

    ``cuda_only``: the ranks run Isaac Lab's trainer, which trains several ranks on CUDA only: where GPUs are
    missing the way out is one CPU rank (what Isaac Lab accepts), never several CPU ranks on gloo."""
    if jax and not re.fullmatch(r"\d+", value):
        raise UsageError(f"--num_gpus {value}: skrl's JAX launcher needs an integer rank count, such as --num_gpus 2")
    if value in ("gpu", "auto", "cpu"):
        if value == "cpu" and device is not None and not on_cpu:
            raise UsageError(f"--num_gpus cpu starts CPU ranks but train.py gets --device {device}: use --device cpu")
        if value == "gpu" and not on_cpu:
            count, source = devices.visible()
            if count == 0:
                raise UsageError(f"--num_gpus gpu: no GPU is visible ({source}); {_cpu_way_out('N', cuda_only)}")
        if value == "gpu" and on_cpu:
            raise UsageError(
                "--num_gpus gpu starts one rank per GPU but train.py gets --device cpu: "
                "give --num_gpus N or --num_gpus cpu"
            )
        if value == "cpu" and device is None and devices.visible()[0] > 0:
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
            raise UsageError(
                f"--num_gpus {n} with --device cpu: at most {limit} CPU ranks here "
                f"({CPU_RANKS_PER_CORE} per core, {cores} core(s))"
            )
        return str(n)
    count, source = devices.visible()
    if count == 0:
        raise UsageError(f"--num_gpus {n}: no GPU is visible ({source}); {_cpu_way_out(str(n), cuda_only)}")
    if n > count:
        other = "" if cuda_only else ", or --device cpu for CPU ranks"
        raise UsageError(
            f"--num_gpus {n}: only {count} GPU(s) visible ({source}); use --num_gpus {count} or fewer{other}"
        )
    return str(n)


def _ranks(
    value: str,
    device: str | None,
    on_cpu: bool,
    devices: Devices,
    env: SchedulerEnv,
    *,
    jax: bool,
    foreign: Script | None,
) -> str | None:
    """The rank count torchrun gets (None: a PyTorchJob's own ``PET_NPROC_PER_NODE`` applies to ``gpu``)."""
    from mgpu_lab.launch import any_script  # as in make_config: only once a --train_script may be there

    if value == "gpu" and env.nproc_per_node is not None and not jax:
        return None
    return resolve_ranks(value, device, on_cpu, devices, jax=jax, cuda_only=any_script.is_isaaclab(foreign))


def _cpu_way_out(n: str, cuda_only: bool) -> str:
    """What a refusal for missing GPUs suggests: CPU ranks on gloo; for Isaac Lab's trainer, only what it accepts."""
    if cuda_only:
        return (
            "Isaac Lab's trainer trains several ranks on CUDA GPUs only: run it where the GPUs are visible, or "
            "rehearse one CPU rank (--num_gpus 1 --device cpu, with agent.device=cpu for rsl_rl)"
        )
    if n == "N":
        return "to rehearse on CPU use --device cpu --num_gpus N"
    return f"to run {n} CPU ranks on gloo add --device cpu"


def world_size(args: argparse.Namespace, nproc: str | None, on_cpu: bool, devices: Devices, env: SchedulerEnv) -> int:
    """The job's largest world size, as far as this node can tell (for the seed's rank offset)."""
    nproc = nproc if nproc is not None else env.ranks_per_node
    if nproc == "cpu" or (nproc == "auto" and on_cpu):
        per_node = os.cpu_count() or 1
    elif nproc in ("gpu", "auto"):
        per_node = max(devices.visible()[0], 1) if not on_cpu else 1
    else:
        per_node = int(nproc) if nproc.isdigit() else 1
    nnodes = args.nnodes or env.nodes
    top = nnodes.split(":")[-1]
    return per_node * (int(top) if top.isdigit() else 1)


def apply_cluster(args: argparse.Namespace, environ: Mapping[str, str], jax: bool) -> list[str]:
    """Fill the node options the user did not give from the scheduler's environment (SLURM, via
    :func:`mgpu_lab.launch.cluster.infer_nodes`; explicit flags always win, --no_slurm turns it off). Returns the
    lines that say what was inferred from which variables (printed on stderr, --dry_run included)."""
    if not scheduler_around(environ):
        return []  # no scheduler around: nothing to infer (and no import to pay for in --dry_run)
    from mgpu_lab.launch.cluster import ClusterError, infer_nodes  # only with a scheduler around

    given = {dest: getattr(args, dest) for dest in NODE_DESTS if argv_checks.given(args, dest)}
    try:
        plan = infer_nodes(environ, given, use_slurm=not args.no_slurm, jax=jax)
    except ClusterError as exc:
        raise UsageError(str(exc)) from None
    for dest, value in plan.values().items():
        if dest in given:
            continue
        setattr(args, dest, int(value) if dest in ("node_rank", "master_port") else value)
    return plan.lines()


def shm_lines(
    nproc: str | None, on_cpu: bool, devices: Devices, environ: Mapping[str, str], env: SchedulerEnv
) -> list[str]:
    """The /dev/shm warning before a CUDA launch (gloo CPU ranks do not use /dev/shm)."""
    if on_cpu:
        return []
    from mgpu_lab.launch import shm_ranks  # only for a CUDA launch: --device cpu's --dry_run skips it

    count = nproc if nproc is not None else env.nproc_per_node
    ranks = shm_ranks.ranks_on_node(count, environ, lambda: devices.visible()[0])
    if ranks < 1:
        return []
    line = shm_ranks.shm_warning(ranks)
    return [line] if line else []


def _library_given(argv: Sequence[str], value: str) -> str | None:
    """The launcher's --rl_library when the command line gave it (before any '--'), else None (the default)."""
    head = list(argv)[: list(argv).index("--")] if "--" in argv else list(argv)
    return value if any(a == "--rl_library" or a.startswith("--rl_library=") for a in head) else None


def _foreign_argv(
    foreign: Script | None, argv: Sequence[str], args: argparse.Namespace, forwarded: list[str], ranks: int, jax: bool
) -> tuple[str, ...] | None:
    """What each rank of a foreign script runs (None for train.py). Isaac Lab's trainer is refused what it would
    refuse (:func:`~mgpu_lab.launch.any_script.check_isaaclab`) and gets the command line's --rl_library."""
    if foreign is None:
        return None
    library = _library_given(argv, args.rl_library)
    if any_script.is_isaaclab(foreign):
        on_cpu = (forwarded_value(forwarded, "--device") or "").strip().lower() == "cpu"
        any_script.check_isaaclab(
            foreign, forwarded, ranks=ranks, cpu_ranks=on_cpu or args.num_gpus == "cpu", rl_library=library
        )
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S") if ranks > 1 else None  # Isaac Lab's run-folder name, one per job
    return tuple(any_script.rank_command(foreign, forwarded, jax=jax, rl_library=library, run_timestamp=stamp))


def _kill_grace(environ: Mapping[str, str]) -> float:
    try:
        return grace_from_env(environ)
    except SuperviseError as exc:
        raise UsageError(str(exc)) from None


#: The line said when the launcher caps the threads of CPU ranks (once, before the job, --dry_run included).
OMP_LINE = (
    "[INFO] launcher: OMP_NUM_THREADS=1 for the CPU ranks (it was not set; torchrun sets it only for several ranks "
    "per node, and ranks of several nodes on one machine would share its cores); set OMP_NUM_THREADS to choose"
)


def cpu_threads(environ: Mapping[str, str], on_cpu: bool, jax: bool) -> tuple[Mapping[str, str], list[str]]:
    """The ranks' environment with ``OMP_NUM_THREADS=1`` for CPU ranks when it is not set, and the line that says so:
    torchrun does the same, but only for several ranks per node, so one-rank "nodes" sharing a machine (the loopback
    rehearsal) would each start a thread per core and crowd each other out."""
    if not on_cpu or jax or "OMP_NUM_THREADS" in environ:
        return environ, []
    return {**environ, "OMP_NUM_THREADS": "1"}, [OMP_LINE]


def _foreign_script(args: argparse.Namespace, forwarded: list[str], environ: Mapping[str, str]) -> Script | None:
    """The script of ``--train_script``/``-m`` (None: train.py), checked before any rank starts: it exists and
    compiles; its forwarded arguments go to it unchecked, but a --checkpoint among them is read as ours would be."""
    foreign = any_script.from_args(args)
    if foreign is not None:
        any_script.check(foreign, forwarded, forwarded_value(forwarded, "--checkpoint"))
        script_check.preflight(foreign.target, foreign.module, args.train_script, environ)
    return foreign


def make_config(
    parser: argparse.ArgumentParser,
    argv: Sequence[str],
    *,
    train_script: str,
    environ: Mapping[str, str] | None = None,
    inventory: Inventory | None = None,
) -> LaunchConfig:
    """Parse argv once and validate everything that can be validated before anything starts (UsageError);
    return the one :class:`~mgpu_lab.job.config.LaunchConfig` of this launch.

    ``environ`` defaults to this process's environment (read here, once); ``inventory`` (the machine's GPUs) is read
    from the driver when a check needs it, unless given."""
    environ = os.environ if environ is None else environ
    args, forwarded = parser.parse_known_args(list(argv))
    if "--" in forwarded:  # the separator argparse stopped at; train.py must not see it
        forwarded.remove("--")
    passthrough = group_dests(parser, TORCHRUN_GROUP)
    foreign = _foreign_script(args, forwarded, environ)
    jax = args.rl_library == "skrl" and forwarded_value(forwarded, "--ml_framework") == "jax"
    device = forwarded_value(forwarded, "--device")
    on_cpu = device is not None and device.strip().lower() == "cpu"
    devices = Devices(environ, inventory)
    scheduler = read_scheduler_env(environ)  # the one read of PET_*, SLURM's job id and the job key

    argv_checks.check_library_choice(args, jax, passthrough + group_dests(parser, LAUNCHER_TORCHRUN_GROUP))
    inferred = apply_cluster(args, environ, jax)
    argv_checks.check_launcher_options(args, jax, None if jax else scheduler.nnodes)
    grace_s = _kill_grace(environ)
    nproc = _ranks(args.num_gpus, device, on_cpu, devices, scheduler, jax=jax, foreign=foreign)
    script = foreign.target if foreign is not None else os.path.realpath(train_script)
    ranks = world_size(args, nproc, on_cpu, devices, scheduler)
    foreign_argv = _foreign_argv(foreign, argv, args, forwarded, ranks, jax)
    if foreign is None:  # train.py: its own parser and the trainer's checks, with the job's world size
        argv_checks.check_training_args(
            argv_checks.parse_training_args(script, args.rl_library, forwarded), ranks, dry_run=args.dry_run
        )
    environ, threads = cpu_threads(environ, on_cpu, jax)
    free_port = argv_checks.standalone(args, scheduler, jax)
    store = argv_checks.check_outputs(args, scheduler, jax, free_port)
    return LaunchConfig(
        rl_library=args.rl_library,
        forwarded=tuple(forwarded),
        train_script=script,
        jax=jax,
        device=device,
        on_cpu=on_cpu,
        nproc=nproc,
        nnodes=args.nnodes,
        node_rank=args.node_rank,
        master_addr=args.master_addr,
        master_port=args.master_port,
        rdzv_backend=args.rdzv_backend,
        rdzv_endpoint=args.rdzv_endpoint,
        rdzv_id=args.rdzv_id,
        rdzv_timeout_given=args.rdzv_timeout,
        hang_timeout=args.hang_timeout,
        startup_timeout=args.startup_timeout,
        log_dir=args.log_dir,
        log_all_ranks=args.log_all_ranks,
        local_ranks_filter=args.local_ranks_filter,
        coordinator_address=args.coordinator_address,
        torchrun_options=tuple((name, getattr(args, name)) for name in passthrough if argv_checks.given(args, name)),
        hosts_store=store,
        standalone=free_port,
        grace_s=grace_s,
        dry_run=args.dry_run,
        environ=environ,
        scheduler=scheduler,
        inferred=tuple(inferred + threads + shm_lines(nproc, on_cpu, devices, environ, scheduler)),
        foreign_argv=foreign_argv,
    )


# --------------------------------------------------------------------------------------------------
# config -> command
# --------------------------------------------------------------------------------------------------


def build_command(config: LaunchConfig) -> list[str]:
    """The one command builder: torchrun (or skrl's JAX launcher) around train.py (or another script)."""
    trainer = [config.train_script, "--rl_library", config.rl_library, *config.forwarded]
    if "--distributed" not in config.forwarded:
        trainer.append("--distributed")
    if config.foreign_argv is not None:
        trainer = list(config.foreign_argv)
    if config.jax:
        return [
            sys.executable,
            "-m",
            JAX_LAUNCHER_MODULE,
            "--nnodes",
            config.nnodes or "1",
            "--nproc_per_node",
            config.nproc or "1",
            "--node_rank",
            str(config.node_rank or 0),
            "--coordinator_address",
            config.coordinator_address or JAX_DEFAULT_COORDINATOR,
            *trainer,
        ]
    cmd = [sys.executable, "-m", TORCHRUN_MODULE]
    if config.nnodes is not None:
        cmd += ["--nnodes", config.nnodes]
    if config.nproc is not None:
        cmd += ["--nproc_per_node", config.nproc]
    if config.standalone:  # one node, no port named: torchrun's store on a free port (two jobs never collide)
        cmd.append("--standalone")
    if config.node_rank is not None:
        cmd += ["--node_rank", str(config.node_rank)]
    for name, value in config.torchrun_options:
        cmd += (
            [f"--{name}"] if value is True else [f"--{name}", f"{value:g}" if isinstance(value, float) else str(value)]
        )
    if config.rdzv_timeout_given is not None:
        backend = "c10d" if config.standalone else config.rdzv_backend or config.scheduler.backend
        key = "timeout" if backend == "static" else "join_timeout"
        cmd += ["--rdzv_conf", f"{key}={math.ceil(config.rdzv_timeout_given) + RDZV_BACKSTOP_S}"]
    if config.local_ranks_filter is None and not config.log_all_ranks:
        cmd += ["--local_ranks_filter", "0"]
    return cmd + trainer


# --------------------------------------------------------------------------------------------------
# the runner
# --------------------------------------------------------------------------------------------------


def run(config: LaunchConfig, cmd: list[str]) -> int:
    """Hand the job to the runner (:mod:`mgpu_lab.job.monitor`; imported only now, --dry_run never pays)."""
    from mgpu_lab.job.monitor import run_job  # the job layer's runner: --dry_run and every refusal never load it

    return run_job(config, cmd)


def main(
    parser: argparse.ArgumentParser,
    argv: Sequence[str],
    *,
    train_script: str,
    environ: Mapping[str, str] | None = None,
    inventory: Inventory | None = None,
) -> int:
    """The launcher: validate, print what was inferred, then print the command (--dry_run) or run it."""
    try:
        config = make_config(parser, argv, train_script=train_script, environ=environ, inventory=inventory)
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    cmd = build_command(config)
    for line in config.inferred:
        print(line, file=sys.stderr)
    if config.dry_run:
        print(shlex.join(cmd))
        return EXIT_OK
    return run(config, cmd)
