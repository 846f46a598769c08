"""The monitor's words about the rendezvous: where it is, which node this is, who never came. Stdlib only.

The deadline itself is :class:`mgpu_lab.job.checks.RendezvousDeadline`; these functions only describe the
job from its :class:`~mgpu_lab.job.config.LaunchConfig` (and torchrun's ``PET_*`` environment, folded into it).
"""

from __future__ import annotations

import socket

from mgpu_lab.core import procs

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Collection

    from mgpu_lab.job.config import LaunchConfig


#: Where torchrun's ``--standalone`` store listens (the launcher's choice for one node that names no port).
STANDALONE_WHERE = "localhost:<a free port> (--standalone)"


def endpoint(config: LaunchConfig) -> str:
    """``BACKEND HOST:PORT`` of the rendezvous."""
    env = config.scheduler
    if config.standalone:
        return f"c10d {STANDALONE_WHERE}"
    if config.rdzv_endpoint:
        return f"{config.rdzv_backend or 'static'} {config.rdzv_endpoint}"
    if env.rdzv_endpoint and config.master_addr is None:
        return f"{env.backend} {env.rdzv_endpoint}"
    host = config.master_addr or env.address
    port = config.master_port or env.port
    return f"static {host}:{port}"


def nodes(config: LaunchConfig) -> str:
    return config.nnodes or config.scheduler.nodes


def node(config: LaunchConfig) -> str:
    rank = config.node_rank
    rank_text = f"node_rank {rank}" if rank is not None else "node_rank assigned at the rendezvous"
    return f"{procs.node_name()}, {rank_text}"


def waiting(config: LaunchConfig, left_s: float) -> str:
    """The line said while this node waits for the others."""
    return (
        f"[INFO] launcher: waiting for the rendezvous at {endpoint(config)}: this node ({node(config)}) is "
        f"in; expecting {nodes(config)} node(s); {left_s:.0f} s left (--rdzv_timeout)"
    )


def answers(host: str, port: str) -> bool:
    """Does anything accept a TCP connection at ``host:port`` (within a second)?"""
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=1.0):
            return True
    except (OSError, ValueError):
        return False


def missing(config: LaunchConfig, joined: Collection[int] = ()) -> str:
    """Why the deadline passed: the other nodes never joined, or the rendezvous never answered; on a single node,
    which of its ranks never joined (``joined``: the ranks whose beat the launcher has)."""
    where = STANDALONE_WHERE if config.standalone else endpoint(config).split()[-1]
    if nodes(config) == "1":
        return (
            f"rendezvous deadline passed after {config.rdzv_timeout:g} s (--rdzv_timeout): never arrived: "
            f"{absent_ranks(config, joined)} on this node ({node(config)}): torchrun's rendezvous at {where} "
            "never completed, so it never started them"
        )
    host, _, port = where.rpartition(":")
    # a node that only connects: did the endpoint answer at all?
    answered = config.hosts_store or answers(host, port or "29400")
    what = (
        f"the other node(s) of {nodes(config)} expected never joined at {where}"
        if answered
        else f"the rendezvous at {where} never answered, so no other node could join ({nodes(config)} node(s) expected)"
    )
    return (
        f"rendezvous deadline passed after {config.rdzv_timeout:g} s (--rdzv_timeout): "
        f"never arrived: {what}; this node ({node(config)}) was ready; {_checks(config, host, port or '29400')}"
    )


def _checks(config: LaunchConfig, host: str, port: str) -> str:
    """What to check when nodes never met: the same endpoint on every node, reachable through the firewall."""
    static = endpoint(config).startswith("static ")
    same = f"--master_addr {host} --master_port {port}" if static else f"--rdzv_endpoint {host}:{port}"
    if config.hosts_store:
        return (
            f"check that every other node was started with {same} and the same --nnodes, and reaches this node "
            f"(from there: nc -vz {host} {port}; a firewall here must let TCP port {port} in)"
        )
    return (
        f"check: node 0 was started with the same {same} and --nnodes; this node reaches it (nc -vz {host} {port}); "
        f"node 0's firewall lets TCP port {port} in; node 0's log says it hosts the rendezvous there"
    )


def absent_ranks(config: LaunchConfig, joined: Collection[int]) -> str:
    """``rank(s) 0-1 of 2`` (those without a beat), or ``the ranks`` when the rank count is not a number."""
    count = config.nproc or config.scheduler.ranks_per_node
    if not count.isdigit():  # torchrun's "gpu", "cpu", "auto": the count is torchrun's to find
        return "the ranks (none joined)" if not joined else f"the ranks other than {_spans(sorted(joined))}"
    absent = [r for r in range(int(count)) if r not in joined]
    return f"rank(s) {_spans(absent)} of {count} never joined"


def _spans(ranks: list[int]) -> str:
    """``0-3, 5``: runs of consecutive ranks."""
    spans: list[list[int]] = []
    for r in ranks:
        if spans and r == spans[-1][1] + 1:
            spans[-1][1] = r
        else:
            spans.append([r, r])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


#: What torchrun's own text holds when its rendezvous after a restart ended without the other nodes: it ran out of
#: time (a node is gone: killed, or its machine lost), or another node closed it (it gave up: no restart left).
LOST_AFTER_RESTART = {b"RendezvousTimeoutError": "timed out", b"RendezvousClosedError": "closed"}


def lost_after_restart(torchrun_text: bytes) -> str | None:
    """How torchrun's rendezvous after a restart ended without the other nodes ("timed out", "closed"), else None."""
    return next((how for marker, how in LOST_AFTER_RESTART.items() if marker in torchrun_text), None)


def gave_up(config: LaunchConfig, how: str) -> str:
    """The verdict when torchrun's rendezvous after a restart ended without the job's other node(s): the c10d form
    of the line a rank of the static form records."""
    if how == "closed":
        why = "they closed the rendezvous after a restart (no restart left there)"
    else:
        why = (
            f"waited {config.rdzv_timeout:g} s for them in the rendezvous after a restart (--rdzv_timeout): they are "
            "gone, or stopped"
        )
    return f"mgpu-lab train_multigpu: error: the job's other node(s) gave up: this node ({node(config)}) {why}; this node stops too"
