"""The launcher's checks of its own command line: each option on its own, the options together, where the job will
write and listen, and the forwarded training arguments with train.py's own parser and the trainer's checks.

Every check raises :class:`~mgpu_lab.core.errors.UsageError` with one line, before anything is created;
:func:`mgpu_lab.launch.launcher.make_config` calls them. No torch import (a forwarded ``--checkpoint`` or
``--continue_run`` is the exception: reading a checkpoint needs torch's restricted loader).
"""

from __future__ import annotations

import math
import os
import re

from mgpu_lab.core.errors import UsageError
from mgpu_lab.core.names import LATEST
from mgpu_lab.core.source_loader import load_source
from mgpu_lab.job.config import variable_of
from mgpu_lab.train import checks as train_checks

TYPE_CHECKING = False  # typing stays unimported: --dry_run must start fast
if TYPE_CHECKING:
    import argparse

    from mgpu_lab.job.config import SchedulerEnv

#: torchrun's default --monitor_interval (the watchdog's limits may not be shorter).
TORCHRUN_MONITOR_INTERVAL_S = 0.1

# --------------------------------------------------------------------------------------------------
# validators (each raises UsageError with one line)
# --------------------------------------------------------------------------------------------------


def given(args: argparse.Namespace, dest: str) -> bool:
    value = getattr(args, dest)
    return value is not None and value is not False


def check_nnodes(value: str, *, jax: bool) -> None:
    m = re.fullmatch(r"(\d+)(?::(\d+))?", value)
    if not m or int(m.group(1)) < 1 or (m.group(2) is not None and int(m.group(2)) < int(m.group(1))):
        raise UsageError(f"--nnodes {value}: give a node count such as 2, or a range MIN:MAX such as 1:4")
    if jax and m.group(2) is not None:
        raise UsageError(f"--nnodes {value}: skrl's JAX launcher takes a fixed node count, such as --nnodes 2")


def check_log_spec(flag: str, value: str | None) -> None:
    if value is not None and not re.fullmatch(r"[0-3]|\d+:[0-3](,\d+:[0-3])*", value):
        raise UsageError(f"{flag} {value}: give 0 (none), 1 (stdout), 2 (stderr), 3 (both) or a map like 0:1,1:3")


def check_endpoint(flag: str, value: str) -> None:
    m = re.fullmatch(r"(\[[0-9A-Fa-f:.]+\]|[^:\s\[\]]+)(?::(\d{1,5}))?", value)
    if not m or (m.group(2) is not None and int(m.group(2)) > 65535):
        raise UsageError(
            f"{flag} {value}: give HOST or HOST:PORT with a TCP port from 0 to 65535, such as 10.0.0.1:29400"
        )


def check_seconds(flag: str, value: float | None, *, zero_ok: bool = False) -> None:
    if value is None:
        return
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok) or value > 7 * 24 * 3600:
        least = "0 or more" if zero_ok else "a positive number of"
        raise UsageError(f"--{flag} {value:g}: give {least} seconds, at most a week")


def check_log_dir(path: str) -> None:
    """The folder must be writable, or creatable in a writable parent. Probed by creating and removing an
    empty temp folder (permission bits alone mislead root and read-only mounts); nothing is left behind."""
    import tempfile  # tempfile (shutil, random): only for a --log_dir, off --dry_run's usual path

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


def hosts_store(args: argparse.Namespace, env: SchedulerEnv) -> bool:
    """True when this node hosts torchrun's static rendezvous store (node 0 on a local master address)."""
    if args.rdzv_backend not in (None, "static") or args.rdzv_endpoint is not None:
        return False
    if (args.node_rank or 0) != 0:
        return False
    if args.master_addr is None:
        return env.master_addr is None or env.master_addr in ("127.0.0.1", "localhost")
    return args.master_addr in ("127.0.0.1", "localhost", "::1", "0.0.0.0")


def standalone(args: argparse.Namespace, env: SchedulerEnv, jax: bool) -> bool:
    """True for a single-node torchrun job that names no rendezvous (no flag, no scheduler variable): it gets
    torchrun's ``--standalone`` store on a port the kernel picks (:mod:`mgpu_lab.launch.ports`)."""
    named = (args.master_addr, args.master_port, args.rdzv_endpoint, args.rdzv_backend, args.rdzv_id)
    pet = (env.master_addr, env.master_port, env.rdzv_endpoint, env.rdzv_backend, env.rdzv_id)
    if jax or any(value is not None for value in named + pet) or (args.node_rank or 0) != 0:
        return False
    return (args.nnodes or env.nodes).split(":")[-1] == "1"


def check_named_port(args: argparse.Namespace, scheduler: SchedulerEnv, store: bool) -> None:
    """A port this node must bind (node 0's static store; a single node's own --rdzv_endpoint) that another process
    holds is refused, naming the holder."""
    from mgpu_lab.launch import ports  # sockets and /proc: only when a job will bind a port, never for --dry_run

    if store:
        port = args.master_port if args.master_port is not None else int(scheduler.port)
        flag = f"--master_port {port}" if args.master_port is not None else f"torchrun's default port {port}"
        fix = "give a free port with --master_port (node 0 hosts the rendezvous there; every node gives the same)"
        refusal = ports.refuse_taken(flag, port, fix)
    elif args.rdzv_endpoint is not None and (args.nnodes or scheduler.nodes).split(":")[-1] == "1":
        host, _, port_text = args.rdzv_endpoint.rpartition(":")
        if not (ports.local_host(host) and port_text.isdigit() and 0 < int(port_text) < 65536):
            return
        fix = "give a free port, or leave --rdzv_endpoint out on a single node (torchrun then picks a free one)"
        refusal = ports.refuse_taken(f"--rdzv_endpoint {args.rdzv_endpoint}", int(port_text), fix)
    elif args.rdzv_endpoint is not None and (args.rdzv_backend or scheduler.backend) == "c10d":
        host, _, port_text = args.rdzv_endpoint.rpartition(":")
        if not (ports.local_host(host) and port_text.isdigit() and 0 < int(port_text) < 65536):
            return  # another host's endpoint: that node hosts the store
        fix = "give a free port (the first node to bind the endpoint hosts the c10d store; every node gives the same)"
        refusal = ports.refuse_taken(
            f"--rdzv_endpoint {args.rdzv_endpoint}",
            int(port_text),
            fix,
            shared_with=lambda pid: ports.hosts_rendezvous(pid, args.rdzv_endpoint),
        )
    else:
        return
    if refusal is not None:
        raise UsageError(refusal)


def parse_training_args(script: str, rl_library: str, forwarded: list[str]) -> argparse.Namespace:
    """The forwarded arguments parsed by train.py's own parser (UsageError for what it refuses)."""
    if any(a in ("-h", "--help") for a in forwarded):
        raise UsageError("--help after '--' goes to train.py: run mgpu-lab train --help for its options")
    # train.py imports no torch up front
    parser = load_source("_mgpu_lab_train_entry", script).build_parser()

    def error(message: str) -> None:
        raise UsageError(f"train.py: {message} (train.py's options: mgpu-lab train --help)")

    parser.error = error
    try:
        return parser.parse_args(["--rl_library", rl_library, *forwarded, "--distributed"])
    except SystemExit:  # an action of train.py's parser that exits (version, help): not a training run
        raise UsageError("train.py's arguments ask it to exit before training; run mgpu-lab train for that") from None


def check_training_args(targs: argparse.Namespace, ranks: int, dry_run: bool = False) -> None:
    """The trainer's own torch-free checks, with the job's world size, then a checkpoint's library and format."""
    if dry_run and targs.continue_run is not None:  # the folder is checked when the job runs
        train_checks.check_continue_run(targs, folder=False)
        targs = type(targs)(**{**vars(targs), "continue_run": None})
    train_checks.check_args(targs, ranks)
    if targs.checkpoint is not None and targs.checkpoint != LATEST:
        # torch, no RL library: only when a checkpoint is given
        train_checks.check_checkpoint(targs.checkpoint, targs.rl_library, targs.ml_framework, targs.task)
    train_checks.check_resume(targs, dry_run=dry_run)  # latest without a checkpoint, nothing left to train
    if targs.continue_run is not None:  # its folder's newest checkpoint, before any rank starts
        check_continue_run(targs)


def check_continue_run(targs: argparse.Namespace) -> None:
    """Every check of ``--continue_run`` including its newest checkpoint's library and format (imports torch and
    the adapter, which knows the library's checkpoint files)."""
    from mgpu_lab.runs.checkpoint import check_library  # torch, the run layer: only to read a --continue_run
    from mgpu_lab.runs.continue_run import resume_point
    from mgpu_lab.runs.resume import job_key
    from mgpu_lab.train import adapters
    from mgpu_lab.train.config import TrainConfig

    adapter = adapters.load(targs.rl_library)
    cfg = TrainConfig(rl_library=targs.rl_library, task=targs.task, ml_framework=targs.ml_framework)
    _, checkpoint = resume_point(
        targs.continue_run,
        targs.log_root,
        targs.rl_library,
        targs.task,
        targs.ml_framework,
        job_key(),
        lambda d: adapter.checkpoints(d, cfg),
    )
    check_library(checkpoint, targs.rl_library, targs.ml_framework)


def check_node_rank(node_rank: int, nnodes: str | None, implied: str | None) -> None:
    """A node rank from 0 to the node count less one; the count is --nnodes, else torchrun's own (the launch
    configuration's fold of its environment), else 1."""
    if node_rank < 0:
        raise UsageError(f"--node_rank {node_rank}: give a node rank from 0 to nnodes-1")
    count, said = (
        (nnodes, f"--nnodes {nnodes}") if nnodes is not None else (implied, f"{variable_of('nnodes')}={implied}")
    )
    if count is None:
        count, said = "1", "one node (no --nnodes given)"
    top = count.split(":")[-1]
    if top.isdigit() and node_rank >= int(top):
        hint = "give --nnodes N with N above it" if nnodes is None and implied is None else f"use 0 to {int(top) - 1}"
        raise UsageError(f"--node_rank {node_rank}: out of range for {said}; {hint}")


def check_launcher_options(args: argparse.Namespace, jax: bool, implied_nnodes: str | None = None) -> None:
    """The launcher's own options, each on its own (no devices; ``implied_nnodes``: torchrun's node count from its
    environment, as the launch configuration read it)."""
    if args.nnodes is not None:
        check_nnodes(args.nnodes, jax=jax)
    if args.node_rank is not None:
        check_node_rank(args.node_rank, args.nnodes, implied_nnodes)
    if args.master_port is not None and not 0 < args.master_port < 65536:
        raise UsageError(f"--master_port {args.master_port}: give a TCP port from 1 to 65535")
    if args.rdzv_endpoint is not None:
        check_endpoint("--rdzv_endpoint", args.rdzv_endpoint)
    if args.max_restarts is not None and not 0 <= args.max_restarts <= 1000:
        raise UsageError(f"--max_restarts {args.max_restarts}: give 0 to 1000")
    check_seconds("monitor_interval", args.monitor_interval)
    check_seconds("rdzv_timeout", args.rdzv_timeout)
    interval = args.monitor_interval if args.monitor_interval is not None else TORCHRUN_MONITOR_INTERVAL_S
    for name, zero in (("hang_timeout", "turn the watchdog off"), ("startup_timeout", "leave start-up unwatched")):
        value = getattr(args, name)  # the watchdog's limits: checked once per monitor interval
        check_seconds(name, value, zero_ok=True)
        if 0 < value < interval:
            raise UsageError(
                f"--{name} {value:g}: below the monitor interval ({interval:g} s); give at least that, or 0 to {zero}"
            )
    check_log_spec("--tee", args.tee)
    check_log_spec("--redirects", args.redirects)
    if args.local_ranks_filter is not None and not re.fullmatch(r"\d+(,\d+)*", args.local_ranks_filter):
        raise UsageError(f"--local_ranks_filter {args.local_ranks_filter}: give local ranks like 0 or 0,1")
    if args.log_all_ranks and args.local_ranks_filter is not None:
        raise UsageError("--log_all_ranks and --local_ranks_filter contradict each other: give only one")
    if args.coordinator_address is not None and (
        not re.fullmatch(r"[^:\s]+:\d{1,5}", args.coordinator_address)
        or not 0 < int(args.coordinator_address.rsplit(":", 1)[1]) < 65536
    ):
        raise UsageError(f"--coordinator_address {args.coordinator_address}: give HOST:PORT, such as 10.0.0.1:5000")
    if jax and args.nnodes is not None and int(args.nnodes) > 1 and args.coordinator_address is None:
        raise UsageError(f"--nnodes {args.nnodes} with JAX: give --coordinator_address HOST:PORT of node 0")


def check_library_choice(args: argparse.Namespace, jax: bool, torchrun_only: list[str]) -> None:
    """skrl's JAX launcher and torchrun take different options: refuse the ones of the other."""
    if not jax and args.coordinator_address is not None:
        raise UsageError(
            "--coordinator_address is for skrl's JAX launcher only: add --rl_library skrl --ml_framework jax, "
            "or use --master_addr/--rdzv_endpoint with torchrun"
        )
    used = [name for name in torchrun_only if given(args, name)] if jax else []
    if used:
        flags = ", ".join(f"--{name}" for name in used)
        raise UsageError(
            f"{flags}: torchrun-only, not accepted by skrl's JAX launcher; it takes --nnodes, --node_rank, "
            "--num_gpus and --coordinator_address"
        )


def check_outputs(args: argparse.Namespace, scheduler: SchedulerEnv, jax: bool, free_port: bool) -> bool:
    """Check where the job will write (torchrun's --log_dir, a port it must bind; none for ``free_port``, torchrun's
    --standalone); return whether this node hosts the rendezvous store."""
    if args.log_dir is not None:
        check_log_dir(args.log_dir)
    store = hosts_store(args, scheduler)
    if not args.dry_run and not jax and not free_port:
        check_named_port(args, scheduler, store)
    return store
