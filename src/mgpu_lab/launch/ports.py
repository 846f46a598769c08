"""Which TCP port a job's rendezvous takes, and who holds one that is taken (stdlib only, Linux's ``/proc``).

- A single-node job that names no port gets torchrun's ``--standalone`` rendezvous: torchrun's store binds a free
  port the kernel picks (``localhost:0``), so two jobs started at once on one machine never collide and no port is
  probed ahead of time (nothing can take it in between).
- A port the user names and this node must bind (node 0 of a static rendezvous, or a single node's own endpoint)
  is tried before any rank starts; when it is taken, :func:`holder` says what holds it, from the kernel's socket
  table: ``/proc/net/tcp`` and ``tcp6`` map the port to a socket inode and its owner's uid, and the process whose
  ``/proc/PID/fd`` links to ``socket:[INODE]`` is named with its pid. Another user's file descriptors are
  unreadable to a non-root user: that holder is "another user's process".
"""

from __future__ import annotations

import errno
import itertools
import os
import socket

from mgpu_lab.core import procs

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

#: /proc/net/tcp's state of a listening socket (include/net/tcp_states.h: TCP_LISTEN = 10).
LISTEN = "0A"
TCP_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")


def local_host(host: str) -> bool:
    """Is ``host`` (as written in an endpoint, brackets allowed) this machine by a name the launcher can tell
    without a lookup?"""
    return host.strip("[]") in ("127.0.0.1", "localhost", "::1", "0.0.0.0", procs.node_name())


def bind_error(port: int) -> int | None:
    """The errno of binding ``port`` on every address the way torch's TCPStore does (SO_REUSEADDR), or None when
    it is free now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("", port))
        except OSError as exc:
            return exc.errno or errno.EADDRINUSE
    return None


def sockets_on(port: int, tables: tuple[str, ...] = TCP_TABLES) -> list[tuple[str, int, int]]:
    """``(state, uid, inode)`` of every TCP socket bound to local ``port`` in the kernel's tables, listening sockets
    first (a connection's inode 0, TIME_WAIT, belongs to no process and is left out)."""
    found = []
    for table in tables:
        try:
            with open(table, encoding="ascii", errors="replace") as fh:
                rows = fh.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) < 10 or ":" not in fields[1]:
                continue
            try:
                local_port, uid, inode = int(fields[1].rsplit(":", 1)[1], 16), int(fields[7]), int(fields[9])
            except ValueError:
                continue
            if local_port == port and inode:
                found.append((fields[3], uid, inode))
    return sorted(found, key=lambda entry: entry[0] != LISTEN)


def holder(port: int, tables: tuple[str, ...] = TCP_TABLES) -> str:
    """What holds ``port``: ``python3 (pid 4242)``, ``another user's process (uid 1001)``, or what can be said when the
    kernel's table does not show it (another network namespace, no ``/proc``)."""
    entries = sockets_on(port, tables)
    if not entries:
        return "by a process this machine's socket table does not show (another network namespace?)"
    owners = procs.socket_owners({inode for _, _, inode in entries})
    for _, _, inode in entries:
        pid = owners.get(inode)
        if pid is not None:
            return f"by {procs.name(pid) or 'a process'} (pid {pid})"
    uid = entries[0][1]
    mine = uid == os.getuid()
    return "by a process of this user that cannot be read" if mine else f"by another user's process (uid {uid})"


def holder_pid(port: int, tables: tuple[str, ...] = TCP_TABLES) -> int | None:
    """The process listening on ``port`` (another user's cannot be read: None)."""
    entries = [entry for entry in sockets_on(port, tables) if entry[0] == LISTEN]
    owners = procs.socket_owners({inode for _, _, inode in entries})
    return next((owners[inode] for _, _, inode in entries if inode in owners), None)


def hosts_rendezvous(pid: int, endpoint: str) -> bool:
    """Is ``pid`` torchrun serving the c10d store of this very endpoint (another node of the same job on this
    machine, which bound it first)?"""
    words = procs.cmdline(pid)
    named = any(w == f"--rdzv_endpoint={endpoint}".encode() for w in words) or any(
        a == b"--rdzv_endpoint" and b == endpoint.encode() for a, b in itertools.pairwise(words)
    )
    return named and b"torch.distributed.run" in words


def refuse_taken(flag: str, port: int, fix: str, *, shared_with: Callable[[int], bool] | None = None) -> str | None:
    """The one-line refusal when ``port`` cannot be bound here, naming its holder; None when it is free, or held by
    a process ``shared_with`` accepts (the same job's rendezvous, hosted by another node on this machine)."""
    if bind_error(port) != errno.EADDRINUSE:  # free, or a reason torchrun reports in its own words
        return None
    if shared_with is not None:
        pid = holder_pid(port)
        if pid is not None and shared_with(pid):
            return None
    return f"{flag}: already in use on this host, held {holder(port)}; {fix}"
