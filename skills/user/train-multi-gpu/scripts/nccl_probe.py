#!/usr/bin/env python3
"""Standalone all_reduce probe for torch.distributed: NCCL on GPUs, gloo on CPUs.

Checks every all_reduce result, times a size sweep (like nccl-tests' all_reduce_perf) and puts a
deadline on every collective, so a hang ends as exit 3 naming the ranks that did not finish.
Needs only torch and the Python standard library.

One rank per GPU, under torchrun (exit status is torchrun's: 1 on any rank failure):
    torchrun --nproc_per_node 2 nccl_probe.py -b 8 -e 128M -f 2
On this machine, with the probe's own exit status (it starts torchrun on 127.0.0.1 itself):
    python nccl_probe.py --nproc_per_node 2
Confirm a workaround both ways at several world sizes:
    python nccl_probe.py --bisect --world_sizes 2,3,4 --candidate NCCL_P2P_DISABLE=1
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn

EXIT_OK = 0
EXIT_WRONG = 1
EXIT_USAGE = 2
EXIT_DEADLINE = 3
EXIT_ERROR = 4
EXIT_MEANING = {
    EXIT_OK: "ok",
    EXIT_WRONG: "wrong results",
    EXIT_USAGE: "usage error",
    EXIT_DEADLINE: "deadline missed",
    EXIT_ERROR: "a rank failed",
}
STATUS_ENV = "NCCLPROBE_STATUS_DIR"  # set by --nproc_per_node/--bisect for the ranks they start
HEARTBEAT_S = 0.05  # how often a rank posts its position to the side channel
WATCHDOG_GRACE_S = 2.0  # the watchdog acts this long after a deadline the main thread did not act on
INIT_EXTRA_S = 60.0  # start-up (imports, rendezvous, communicator set-up) gets --timeout plus this
HARD_EXIT_S = 20.0  # a failing rank exits at the latest this long after it starts reporting
PREFIX = "[nccl_probe]"
STOP_GRACE_S = 5.0  # after SIGINT/SIGTERM: the run gets SIGTERM, and SIGKILL once this has passed
GONE_DEADLINE_S = 10.0  # how long the probe waits for SIGKILLed processes to vanish before it gives up
MAX_TIMEOUT_S = 86400.0  # one day; longer deadlines overflow torch's millisecond timeouts (1e10 s fails at init)
MAX_RUN_LIMIT_S = 7 * 86400.0
BUFFERS = 3  # float32 buffers of the largest message per rank: source pattern, expected sum, receive
PATTERN = 17  # the data repeats every PATTERN elements (see Probe.run)

VERDICT_CONFIRMED = "fails without, passes with: workaround confirmed"
VERDICT_NOT_CAUSE = "passes either way: not the cause"
VERDICT_NOT_FIX = "fails either way: not a fix"
VERDICT_BREAKS = "passes without, fails with: the candidate breaks it"
VERDICT_FLAKY = "fails only some runs without it: flaky, inconclusive"
VERDICT_GLOO_NOTE = " (gloo run: cannot apply to NCCL)"


def verdict_note(backend: str, fault: Fault | None, fault_unless: tuple[str, str] | None) -> str:
    """What a bisection's verdicts are about, when not a real NCCL run: a stand-in defect, or gloo."""
    if fault is not None:
        unless = f" unless {fault_unless[0]}={fault_unless[1]}" if fault_unless else ""
        return f" (rehearsal: stand-in defect --fault {fault}{unless}; says nothing about NCCL)"
    return VERDICT_GLOO_NOTE if backend == "gloo" else ""


DRIVER_VERSION_FILE = "/proc/driver/nvidia/version"  # the NVIDIA kernel module's own record (Linux)
_DRIVER_RE = re.compile(r"^NVRM version:.*?\s(\d+\.\d+(?:\.\d+)?)\s", re.M)


def driver_version(path: str = DRIVER_VERSION_FILE) -> str:
    """The NVIDIA driver's version from the kernel module's record, or "n/a" (no driver, not Linux)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read(4096)
    except OSError:
        return "n/a"
    m = _DRIVER_RE.search(text)
    return m.group(1) if m else "n/a"


def versions_line(torch: Any, driver_file: str = DRIVER_VERSION_FILE) -> str:
    """The versions that decide whether NCCL works: torch, the CUDA it was built with, the NCCL it bundles, the
    driver. "n/a" for what this build or machine does not have (a CPU-only torch has neither CUDA nor NCCL)."""
    cuda = getattr(torch.version, "cuda", None) or "n/a"
    try:
        nccl = ".".join(str(x) for x in torch.cuda.nccl.version())
    except Exception:  # noqa: BLE001 - a build without NCCL raises (the type differs across versions)
        nccl = "n/a"
    return f"versions: torch {torch.__version__}, CUDA {cuda}, NCCL {nccl}, driver {driver_version(driver_file)}"


_SIZE_RE = re.compile(r"^(\d+)([kmg]?)(?:i?b)?$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}
_SETTING_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=([^\n]*)$")
_FAULT_RE = re.compile(r"^(skip|corrupt|kill):(\d+)(?:@(\d+))?$")
_TIMEOUT_RE = re.compile(r"time[ds]?[ _-]?out|timeout", re.IGNORECASE)


class UsageError(Exception):
    """Bad input: reported as one line and exit 2."""


class _DeadlineMissed(Exception):
    """A collective did not complete before its deadline."""


@dataclass(frozen=True)
class Fault:
    """A deliberate failure, for testing the probe's own failure paths."""

    kind: str  # "skip", "corrupt" or "kill"
    rank: int
    at: int  # the collective's number in the run, counting warm-ups, from 0

    def __str__(self) -> str:
        return f"{self.kind}:{self.rank}@{self.at}"


# ---------------------------------------------------------------------------------------------
# argument parsing


def parse_size(text: str) -> int:
    """A byte count such as 8, 1K, 64K, 128M, 1G (K/M/G are powers of 1024, as in nccl-tests)."""
    m = _SIZE_RE.match(text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (use a byte count such as 8, 1K, 64K, 128M, 1G)")
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


def parse_setting(text: str) -> tuple[str, str]:
    """An environment setting VAR=value."""
    m = _SETTING_RE.match(text)
    if not m:
        raise argparse.ArgumentTypeError(f"malformed setting {text!r}: expected VAR=value, such as NCCL_P2P_DISABLE=1")
    return m.group(1), m.group(2)


def parse_fault(text: str) -> Fault:
    """KIND:RANK[@N] with KIND skip, corrupt or kill."""
    m = _FAULT_RE.match(text.strip())
    if not m:
        raise argparse.ArgumentTypeError(
            f"bad fault {text!r}: expected skip:RANK, corrupt:RANK or kill:RANK, optionally @N (the collective's number)"
        )
    return Fault(m.group(1), int(m.group(2)), int(m.group(3) or 0))


def parse_world_sizes(text: str) -> list[int]:
    """A comma-separated list of world sizes, such as 2,3,4."""
    sizes: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) < 1:
            raise argparse.ArgumentTypeError(f"bad world sizes {text!r}: expected positive integers such as 2,3,4")
        if int(part) not in sizes:
            sizes.append(int(part))
    return sizes


class _OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors become UsageError (one line, exit 2) instead of a usage dump."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


EPILOG = """\
exit status:
  0 every result right; 1 wrong results; 2 usage error; 3 a deadline missed (or a run's hard limit);
  4 a rank failed otherwise (a collective raised an error, a rank crashed).
  Under plain torchrun, torchrun itself exits 1 when any rank fails: read "exitcode" in its
  failure summary, or run "python nccl_probe.py --nproc_per_node N" to get the codes above.

faults (for testing the probe's own failure paths):
  --fault skip:R      rank R leaves the first all_reduce out and stays alive: the others miss
                      their deadline and the probe exits 3 naming rank R.
  --fault corrupt:R   rank R adds 1 to part of its first contribution: exit 1, #wrong > 0.
  --fault kill:R      rank R sends itself SIGKILL before its first all_reduce, like a crashed
                      or OOM-killed rank: exit 4 naming rank R as the one that died.
  Append @N to pick the Nth collective instead of the first (counting warm-ups, from 0).
  A rank outside the world makes the fault a no-op. --fault_unless VAR=VALUE stands in for
  an NCCL defect that a setting works around: the fault fires unless VAR=VALUE is set.

bisection:
  --bisect runs the probe at each --world_sizes size without the --candidate setting, reruns
  each failing size without and with it, runs each passing size with it, and prints a verdict:
    "fails without, passes with: workaround confirmed"
    "passes either way: not the cause"
    "fails either way: not a fix"
    "passes without, fails with: the candidate breaks it"
    "fails only some runs without it: flaky, inconclusive"
  It exits 0 when every verdict is "workaround confirmed" or "not the cause", else 1.
  On gloo (CPU) no NCCL runs, so no NCCL_* setting changes anything: each verdict ends
  "(gloo run: cannot apply to NCCL)". With --fault (a rehearsal), on any backend, each verdict
  ends "(rehearsal: stand-in defect --fault KIND:R@N unless VAR=VALUE; says nothing about NCCL)".

signals:
  On SIGINT or SIGTERM, --nproc_per_node and --bisect send SIGTERM to the run they started, SIGKILL
  whatever of it is left after 5 s (a second signal: at once), wait until none of its processes
  remain, and exit 128+N after signal N (130 after Ctrl-C, 143 after SIGTERM).

memory:
  each rank holds three buffers of the largest message size (-e); sizes that do not fit in the
  free memory of the rank's GPU, or in its share of the host's available memory (gloo), are
  refused up front with the largest -e that fits.

examples:
  torchrun --nproc_per_node 2 nccl_probe.py -b 8 -e 128M -f 2
  python nccl_probe.py --nproc_per_node 2 --backend gloo -b 8 -e 64K
  python nccl_probe.py --bisect --world_sizes 2,3,4 --candidate NCCL_P2P_DISABLE=1
"""


def build_parser() -> argparse.ArgumentParser:
    """The probe's command line: probe options, then the launch and bisection options."""
    parser = _OneLineParser(
        prog="nccl_probe.py",
        description=(
            "Check and time all_reduce across ranks (NCCL on GPUs, gloo on CPUs), with a deadline\n"
            "on every collective. Run it under torchrun, or with --nproc_per_node or --bisect to let\n"
            "it start torchrun on this machine (127.0.0.1)."
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument(
        "--backend",
        choices=["auto", "nccl", "gloo"],
        default="auto",
        help="process-group backend; auto picks nccl when CUDA is available, else gloo (default: auto)",
    )
    parser.add_argument(
        "-b",
        "--min_bytes",
        type=parse_size,
        default="8",
        help="smallest message size, such as 8, 1K, 128M (default: 8)",
    )
    parser.add_argument(
        "-e",
        "--max_bytes",
        type=parse_size,
        default="128M",
        help="largest message size (default: 128M)",
    )
    parser.add_argument(
        "-f",
        "--step_factor",
        type=int,
        default=2,
        help="multiply the size by this factor at each step, at least 2 (default: 2)",
    )
    parser.add_argument("--iters", type=int, default=20, help="timed all_reduce calls per size (default: 20)")
    parser.add_argument(
        "--warmup", type=int, default=5, help="untimed all_reduce calls per size before timing (default: 5)"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        help="deadline in seconds for every collective, at most 86400; a miss ends the probe with exit 3 (default: 30)",
    )
    parser.add_argument(
        "--fault",
        type=parse_fault,
        default=None,
        metavar="KIND:RANK[@N]",
        help="inject a failure to test the probe itself: skip:RANK, corrupt:RANK or kill:RANK (see below)",
    )
    parser.add_argument(
        "--fault_unless",
        type=parse_setting,
        default=None,
        metavar="VAR=VALUE",
        help="the --fault fires unless this setting is in the environment (a stand-in NCCL defect)",
    )
    parser.add_argument(
        "--nproc_per_node",
        type=int,
        default=None,
        metavar="N",
        help="start torchrun on 127.0.0.1 with N ranks and exit with the probe's own status",
    )
    parser.add_argument(
        "--bisect",
        action="store_true",
        help="run the probe at each of --world_sizes without and with --candidate and print verdicts",
    )
    parser.add_argument(
        "--world_sizes",
        type=parse_world_sizes,
        default="2,3,4",
        metavar="N,N,...",
        help="world sizes for --bisect (default: 2,3,4)",
    )
    parser.add_argument(
        "--candidate",
        type=parse_setting,
        default=None,
        metavar="VAR=VALUE",
        help="the workaround setting --bisect tests, such as NCCL_P2P_DISABLE=1",
    )
    parser.add_argument(
        "--run_limit",
        type=float,
        default=300.0,
        help="hard wall-clock limit in seconds for each run started by --nproc_per_node or --bisect, "
        "at most 604800; the run's processes are killed when it is reached (default: 300)",
    )
    parser.add_argument(
        "--log_dir",
        default=None,
        help="where --bisect keeps each run's output (default: a new temporary folder)",
    )
    return parser


def message_sizes(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    """The sweep: float32-aligned sizes from min_bytes, times factor, up to max_bytes."""
    size = max(4, min_bytes - min_bytes % 4)
    sizes: list[int] = []
    while size <= max_bytes:
        sizes.append(size)
        size *= factor
    return sizes


def _fmt_bytes(n: int) -> str:
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def validate(args: argparse.Namespace) -> list[int]:
    """Check what argparse cannot; return the message sizes."""
    if args.max_bytes < 4:
        raise UsageError(f"empty size range: -e {args.max_bytes} is below one float32 (4 bytes)")
    if args.min_bytes > args.max_bytes:
        raise UsageError(f"empty size range: -b {args.min_bytes} is larger than -e {args.max_bytes}")
    if args.step_factor < 2:
        raise UsageError(f"-f/--step_factor must be at least 2, got {args.step_factor}")
    if args.iters < 1:
        raise UsageError(f"--iters must be at least 1, got {args.iters}")
    if args.warmup < 0:
        raise UsageError(f"--warmup must be 0 or more, got {args.warmup}")
    if not 0 < args.timeout <= MAX_TIMEOUT_S:
        raise UsageError(
            f"--timeout must be a positive number of seconds up to {MAX_TIMEOUT_S:g} (one day), got {args.timeout:g}"
        )
    if not 0 < args.run_limit <= MAX_RUN_LIMIT_S:
        raise UsageError(
            f"--run_limit must be a positive number of seconds up to {MAX_RUN_LIMIT_S:g} (one week), "
            f"got {args.run_limit:g}"
        )
    if args.fault_unless is not None and args.fault is None:
        raise UsageError("--fault_unless needs --fault")
    if args.bisect and args.candidate is None:
        raise UsageError("--bisect needs --candidate VAR=VALUE, such as --candidate NCCL_P2P_DISABLE=1")
    if args.candidate is not None and not args.bisect:
        raise UsageError("--candidate needs --bisect")
    if args.bisect and args.nproc_per_node is not None:
        raise UsageError("--bisect takes --world_sizes, not --nproc_per_node")
    if args.nproc_per_node is not None and args.nproc_per_node < 1:
        raise UsageError(f"--nproc_per_node must be at least 1, got {args.nproc_per_node}")
    sizes = message_sizes(args.min_bytes, args.max_bytes, args.step_factor)
    if not sizes:
        raise UsageError(
            f"empty size range: no float32-aligned size between -b {args.min_bytes} and -e {args.max_bytes}"
        )
    return sizes


# ---------------------------------------------------------------------------------------------
# memory: what the sweep allocates, what is free, and the refusal


def buffer_bytes(largest: int) -> int:
    """Bytes one rank allocates for a sweep whose largest message is `largest` bytes: the source
    and expected buffers (the pattern repeated, rounded up to whole periods) and the receive buffer."""
    n = largest // 4
    return 4 * (2 * (-(-n // PATTERN) * PATTERN) + n)


def sweep_buffers(torch: Any, rank: int, world: int, largest: int, device: Any) -> tuple[Any, Any, Any]:
    """This rank's source data, the expected sums and the receive buffer, for messages up to `largest`
    bytes: buffer_bytes(largest) in all. Rank r holds ((j*7 + r*13) mod 17) - 8 at element i, j = i mod 17;
    the sum over ranks is exact in float32, so any wrong element is a transport fault. The pattern is
    repeated, not indexed, so no index buffer (int64: twice the message size) is ever allocated."""
    n = largest // 4
    periods = -(-n // PATTERN)
    mine = torch.tensor([float((j * 7 + rank * 13) % PATTERN - 8) for j in range(PATTERN)], device=device)
    total = torch.tensor(
        [float(sum((j * 7 + r * 13) % PATTERN - 8 for r in range(world))) for j in range(PATTERN)], device=device
    )
    return mine.repeat(periods)[:n], total.repeat(periods)[:n], torch.empty(n, dtype=torch.float32, device=device)


def _size_arg(n: int) -> str:
    """A byte count as an -e value (1G, 512M, 64K, 8)."""
    for unit, scale in (("G", 1024**3), ("M", 1024**2), ("K", 1024)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)


def _human(n: float) -> str:
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def memory_refusal(largest: int, have: int, who: str, detail: str) -> str | None:
    """None when a sweep up to `largest` bytes fits in `have` bytes, else the one-line refusal
    ("... but WHO only HAVE DETAIL; ...")."""
    need = buffer_bytes(largest)
    if need <= have:
        return None
    fit = 4
    while buffer_bytes(fit * 2) <= have:
        fit *= 2
    advice = f"the largest -e that fits is {_size_arg(fit)}" if buffer_bytes(fit) <= have else "not even -e 4 fits"
    return (
        f"not enough memory for -e {_size_arg(largest)}: each rank needs {_human(need)} ({BUFFERS} buffers of "
        f"{_fmt_bytes(largest)}), but {who} only {_human(max(have, 0))}{detail}; {advice}"
    )


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _cgroup_headroom() -> int | None:
    """What this process's memory cgroups (v2 or v1, and their parents) still allow, page cache excluded."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    root = Path("/sys/fs/cgroup")
    # (folder, limit file, usage file, reclaimable key in memory.stat)
    layouts = []
    for line in lines:
        _, controllers, rel = line.split(":", 2) if line.count(":") >= 2 else ("", "-", "")
        if controllers == "":
            layouts.append((root, rel, "memory.max", "memory.current", "inactive_file"))
        elif "memory" in controllers.split(","):
            layouts.append(
                (root / "memory", rel, "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
            )
    best: int | None = None
    for base, rel, limit_name, usage_name, cache_key in layouts:
        folder = base / rel.lstrip("/")
        while True:
            limit, usage = _read_int(folder / limit_name), _read_int(folder / usage_name)
            if limit is not None and usage is not None:
                cache = 0
                try:
                    for stat in (folder / "memory.stat").read_text().splitlines():
                        key, _, value = stat.partition(" ")
                        if key == cache_key:
                            cache = int(value)
                except (OSError, ValueError):
                    pass
                headroom = limit - max(usage - cache, 0)
                best = headroom if best is None else min(best, headroom)
            if folder == base or base not in folder.parents:
                break
            folder = folder.parent
    return best


def host_available() -> int | None:
    """Memory available for new allocations on this host: MemAvailable, capped by the cgroup's limit."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
                break
        else:
            return None
    except (OSError, ValueError, IndexError):
        return None
    headroom = _cgroup_headroom()
    return available if headroom is None else min(available, headroom)


def check_host_memory(sizes: list[int], local_ranks: int) -> None:
    """Refuse (UsageError) a gloo sweep whose buffers cannot fit in this host's available memory."""
    available = host_available()
    if available is None:
        return
    if local_ranks == 1:
        who, detail = "this host has", " available"
    else:
        who, detail = (
            f"each of the {local_ranks} ranks on this host has",
            f" (a share of {_human(available)} available)",
        )
    refusal = memory_refusal(sizes[-1], available // local_ranks, who, detail)
    if refusal:
        raise UsageError(refusal)


def _resolve_backend(requested: str, ranks_on_node: int) -> str:
    """The backend to use, checked against this node's devices (imports torch unless gloo was asked for)."""
    if requested == "gloo":
        return "gloo"
    import torch

    cuda = torch.cuda.is_available()
    if requested == "auto" and not cuda:
        return "gloo"
    if not cuda:
        raise UsageError(
            f"backend nccl needs CUDA, and torch {torch.__version__} sees no GPU here; "
            "use --backend gloo to probe on CPU"
        )
    count = torch.cuda.device_count()
    if ranks_on_node > count:
        raise UsageError(
            f"world size {ranks_on_node} needs {ranks_on_node} GPUs on this node for nccl "
            f"(one per rank), and only {count} visible; use fewer ranks, or --backend gloo"
        )
    return "nccl"


# ---------------------------------------------------------------------------------------------
# a rank (under torchrun)


class _Status:
    """The per-rank result file that --nproc_per_node/--bisect read (nothing under plain torchrun)."""

    def __init__(self, rank: int) -> None:
        folder = os.environ.get(STATUS_ENV)
        self.folder = Path(folder) if folder else None
        self.rank = rank
        self.state: str | None = None  # who ends this rank: "result", "failing" or "stopped"
        self._lock = threading.Lock()

    def claim(self, state: str) -> bool:
        """Take the right to end this rank (the first claim wins); False when another already has it."""
        with self._lock:
            if self.state is not None:
                return False
            self.state = state
            return True

    def write_pid(self) -> None:
        if self.folder is not None:
            (self.folder / f"pid.{self.rank}").write_text(str(os.getpid()))

    def write(
        self,
        code: int,
        summary: str,
        deadline_wall: float | None = None,
        reporter: bool = False,
        stopped: str | None = None,
    ) -> None:
        if self.folder is None:
            return
        data = {
            "rank": self.rank,
            "code": code,
            "summary": summary,
            "deadline_wall": deadline_wall,
            "reporter": reporter,
            "stopped": stopped,
        }
        tmp = self.folder / f".status.{self.rank}.tmp"
        try:
            tmp.write_text(json.dumps(data))
            os.replace(tmp, self.folder / f"status.{self.rank}.json")
        except OSError:
            pass


def _say(line: str, stream: Any = None) -> None:
    """Write one whole line in a single write: ranks share one pipe, and print() writes the newline apart."""
    stream = sys.stdout if stream is None else stream
    stream.write(line + "\n")
    stream.flush()


def _ranks(ranks: list[int]) -> str:
    return ",".join(str(r) for r in ranks) if ranks else "none"


def _stop_on_sigterm(status: _Status) -> None:
    """torchrun stops the surviving ranks with SIGTERM once one rank ends badly. Record that this rank
    was stopped, so the report can tell it from a rank that died on its own (which records nothing).
    The signal reaches a thread through the wakeup fd, so this works while the main thread waits
    inside a collective."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    signal.signal(signal.SIGTERM, lambda *_: None)  # the work happens in the thread below
    signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)

    def watch() -> None:
        while True:
            data = os.read(read_fd, 1)
            if not data:
                return
            if data[0] != signal.SIGTERM:
                continue
            if status.claim("stopped"):
                status.write(128 + signal.SIGTERM, f"rank {status.rank}: stopped by SIGTERM", stopped="SIGTERM")
                _say(f"rank {status.rank} stopped by SIGTERM before it had a result", sys.stderr)
            elif status.state == "failing":
                continue  # the failure report ends the process itself
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(128 + signal.SIGTERM)

    threading.Thread(target=watch, name="nccl_probe_sigterm", daemon=True).start()


def nccl_settings_on_gloo(
    env: dict[str, str] | os._Environ, candidate: tuple[str, str] | None, fault_unless: tuple[str, str] | None
) -> list[str]:
    """NCCL_* settings that a gloo run ignores: the environment's and the --candidate's. The
    --fault_unless variable is left out: it does act, by disarming the stand-in defect."""
    skip = {fault_unless[0]} if fault_unless else set()
    found = []
    if candidate is not None and candidate[0].startswith("NCCL_") and candidate[0] not in skip:
        found.append(f"{candidate[0]}={candidate[1]} (--candidate)")
        skip.add(candidate[0])
    found += [f"{k}={v} (environment)" for k, v in sorted(env.items()) if k.startswith("NCCL_") and k not in skip]
    return found


def gloo_warning(found: list[str]) -> str:
    """The one-line warning for NCCL_* settings that meet a gloo backend."""
    verb = "has" if len(found) == 1 else "have"
    return (
        f"nccl_probe.py: warning: backend gloo ignores NCCL_* settings: {', '.join(found)} {verb} no effect "
        "here; test NCCL settings with --backend nccl on GPUs"
    )


class Probe:
    """One rank: set-up, the sweep with checks and deadlines, and the failure report."""

    def __init__(self, args: argparse.Namespace, sizes: list[int], backend: str, status: _Status) -> None:
        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist
        self.args, self.sizes, self.backend = args, sizes, backend
        self.rank = int(os.environ["RANK"])
        self.world = int(os.environ["WORLD_SIZE"])
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(self.world)))
        self.timeout = float(args.timeout)
        self.cuda = backend == "nccl"
        self.device = torch.device("cuda", self.local_rank) if self.cuda else torch.device("cpu")
        self.status = status
        fault: Fault | None = args.fault
        if fault is not None and args.fault_unless is not None:
            var, value = args.fault_unless
            if os.environ.get(var) == value:
                fault = None
        self.fault = fault if fault is not None and fault.rank == self.rank else None
        run_id = os.environ.get("TORCHELASTIC_RUN_ID", "none")
        restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        self.prefix = f"nccl_probe/{run_id}/{restart}/"
        # where this rank is: 2k+1 inside all_reduce #k, 2k+2 once it finished it
        self.pos = 0
        self.k = -1
        self.in_collective = False
        self.label = "start-up"
        self.budget = 0.0
        self.deadline: float | None = None  # time.monotonic() value
        self.deadline_wall: float | None = None  # time.time() value
        self._fail_lock = threading.Lock()
        self._failing = False
        self.store: Any = None

    # -- deadlines ------------------------------------------------------------------------------

    def arm(self, label: str, seconds: float) -> None:
        self.label, self.budget = label, seconds
        self.deadline_wall = time.time() + seconds
        self.deadline = time.monotonic() + seconds

    def disarm(self) -> None:
        self.deadline = None

    def _watchdog(self) -> None:
        """Backstop: end the process when a deadline passed and the main thread is still stuck."""
        while True:
            time.sleep(0.2)
            deadline = self.deadline
            if deadline is not None and time.monotonic() > deadline + WATCHDOG_GRACE_S:
                self.fail(EXIT_DEADLINE, f"{self.label} did not finish within {self.budget:g} s (watchdog)")

    # -- side channel (torchrun's TCPStore at MASTER_ADDR:MASTER_PORT) --------------------------

    def _client(self, timeout_s: float) -> Any:
        host, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
        if not host or not port:
            return None
        base = self.dist.TCPStore(host, int(port), is_master=False, timeout=timedelta(seconds=timeout_s))
        return self.dist.PrefixStore(self.prefix, base)

    def _heartbeat(self, store: Any) -> None:
        """Post this rank's position whenever it changes, so a peer can tell where it stopped."""
        last = None
        while True:
            pos = self.pos
            if pos != last:
                try:
                    store.set(f"pos/{self.rank}", str(pos))
                except Exception:  # noqa: BLE001 - the side channel is best effort
                    return
                last = pos
            time.sleep(HEARTBEAT_S)

    # -- failure --------------------------------------------------------------------------------

    def fail(self, code: int, reason: str) -> NoReturn:
        """Report (one rank gives the full picture), write the status and end the process."""
        with self._fail_lock:
            first, self._failing = not self._failing, True
        if first and not self.status.claim("failing") and self.status.state == "stopped":
            first = False  # stopped by SIGTERM: that thread records it and ends the process
        if not first:  # another thread of this rank is already reporting; it ends the process
            while True:
                time.sleep(1)
        timer = threading.Timer(HARD_EXIT_S, os._exit, (code,))
        timer.daemon = True
        timer.start()
        lines, summary, reporter = self._diagnose(code, reason)
        for line in lines:
            _say(line, sys.stderr)
        self.status.write(code, summary, self.deadline_wall if code == EXIT_DEADLINE else None, reporter)
        _say(f"rank {self.rank} FAILED: {EXIT_MEANING[code]}")
        sys.stderr.flush()
        os._exit(code)

    def _diagnose(self, code: int, reason: str) -> tuple[list[str], str, bool]:
        """Lines to print, a one-line summary, and whether this rank is the one that reports in full."""
        kind = "DEADLINE MISSED" if code == EXIT_DEADLINE else "ERROR"
        head = f"{PREFIX} {kind} (rank {self.rank}): {reason}"
        if not self.in_collective:
            return [head], f"rank {self.rank}: {reason}", True
        k = self.k
        try:
            store = self._client(5.0)
            if store is None:
                raise RuntimeError("MASTER_ADDR/MASTER_PORT unset")
            store.set(f"failed/{self.rank}", str(k))
            time.sleep(4 * HEARTBEAT_S)  # let the peers' last positions land
            pos: dict[int, int | None] = {}
            for r in range(self.world):
                key = f"pos/{r}"
                pos[r] = int(store.get(key)) if store.check([key]) else None
            reporter = int(store.add("reporters", 1)) == 1
        except Exception as exc:  # noqa: BLE001
            text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            return (
                [head, f"{PREFIX}   side channel unavailable ({text}): cannot tell which ranks arrived"],
                f"rank {self.rank}: {reason}",
                True,
            )
        never = [r for r, p in pos.items() if p is None or p < 2 * k + 1]
        inside = [r for r, p in pos.items() if p == 2 * k + 1]
        unfinished = sorted(never + inside)
        where = []
        for r in never:
            p = pos[r]
            if p is None:
                where.append(f"rank {r} posted no progress")
            elif p == 0:
                where.append(f"rank {r} had not started any all_reduce")
            else:
                last = (p - 1) // 2
                where.append(f"rank {r} last {'finished' if p % 2 == 0 else 'entered'} all_reduce #{last}")
        summary = (
            f"all_reduce #{k} not finished by rank(s) {_ranks(unfinished)}; never entered by rank(s) {_ranks(never)}"
        )
        if not reporter:
            return [f"{PREFIX} rank {self.rank}: {kind.lower()}: {reason}"], summary, False
        lines = [
            head,
            f"{PREFIX}   ranks that did not finish it: {_ranks(unfinished)}",
            f"{PREFIX}   ranks that never entered it: {_ranks(never)}" + (f" ({'; '.join(where)})" if where else ""),
            f"{PREFIX}   ranks waiting inside it: {_ranks(inside)}",
        ]
        return lines, summary, True

    def _skip(self, k: int) -> NoReturn:
        """The skip fault: leave all_reduce #k out and stay alive, like a rank stuck elsewhere."""
        _say(f"rank {self.rank}: fault injected (--fault skip:{self.rank}): leaving all_reduce #{k} out", sys.stderr)
        end = time.monotonic() + self.timeout + 15.0
        store = None
        try:
            store = self._client(5.0)
        except Exception:  # noqa: BLE001
            pass
        while time.monotonic() < end:
            try:
                if store is not None and store.check(["reporters"]):
                    break
            except Exception:  # noqa: BLE001
                break
            time.sleep(0.2)
        if not self.status.claim("failing") and self.status.state == "stopped":
            while True:
                time.sleep(1)
        self.status.write(EXIT_DEADLINE, f"rank {self.rank} skipped all_reduce #{k} (fault injected)")
        _say(f"rank {self.rank} FAILED: fault skip left all_reduce #{k} out")
        sys.stderr.flush()
        os._exit(EXIT_DEADLINE)

    # -- the collective -------------------------------------------------------------------------

    def all_reduce(self, k: int, buf: Any, what: str) -> float:
        """One all_reduce under a deadline; returns its wall time in seconds."""
        if self.fault is not None and self.fault.kind == "skip" and self.fault.at == k:
            self._skip(k)
        if self.fault is not None and self.fault.kind == "kill" and self.fault.at == k:
            _say(
                f"rank {self.rank}: fault injected (--fault kill:{self.rank}): SIGKILL before all_reduce #{k}",
                sys.stderr,
            )
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        self.arm(f"all_reduce #{k} ({what}) did not finish within {self.timeout:g} s", self.timeout)
        self.k, self.in_collective, self.pos = k, True, 2 * k + 1
        try:
            if self.cuda:
                self._gpu_sync()  # the buffer refill is not part of the timing
            t0 = time.perf_counter()
            work = self.dist.all_reduce(buf, async_op=True)
            left = max(self.deadline - time.monotonic(), 0.001) if self.deadline else self.timeout
            if work.wait(timeout=timedelta(seconds=left)) is False:
                raise _DeadlineMissed()
            if self.cuda:
                self._gpu_sync()
            elapsed = time.perf_counter() - t0
        except _DeadlineMissed:
            self.fail(EXIT_DEADLINE, self.label)
        except Exception as exc:  # noqa: BLE001 - any failure of the collective is reported, not raised
            text = " ".join(str(exc).split())[:300] or type(exc).__name__
            late = self.deadline is not None and time.monotonic() >= self.deadline - 0.05
            if late or _TIMEOUT_RE.search(text):
                self.fail(EXIT_DEADLINE, self.label)
            self.fail(EXIT_ERROR, f"all_reduce #{k} ({what}) raised {type(exc).__name__}: {text}")
        self.pos, self.in_collective = 2 * k + 2, False
        self.disarm()
        return elapsed

    def _gpu_sync(self) -> None:
        """Wait for this device's current stream, but never past the deadline."""
        event = self.torch.cuda.Event()
        event.record()
        spins = 0
        while not event.query():
            if self.deadline is not None and time.monotonic() > self.deadline:
                raise _DeadlineMissed()
            spins += 1
            time.sleep(0 if spins < 2000 else 0.001)

    # -- the sweep ------------------------------------------------------------------------------

    def _exchange(self, step: int, nbytes: int, wrong: int) -> list[int]:
        """Every rank posts its wrong count for this size; rank 0 collects them all."""
        if self.store is None:
            return [wrong]
        self.store.set(f"wrong/{step}/{self.rank}", str(wrong))
        if self.rank != 0:
            return [wrong]
        keys = [f"wrong/{step}/{r}" for r in range(self.world)]
        self.arm(f"collecting the results for {_fmt_bytes(nbytes)}", self.timeout)
        try:
            self.store.wait(keys, timedelta(seconds=self.timeout))
        except Exception:  # noqa: BLE001
            missing = [r for r, key in enumerate(keys) if not self.store.check([key])]
            self.fail(
                EXIT_DEADLINE,
                f"rank(s) {_ranks(missing)} did not post results for {_fmt_bytes(nbytes)} within {self.timeout:g} s",
            )
        self.disarm()
        return [int(self.store.get(key)) for key in keys]

    def _check_memory(self) -> None:
        """Refuse (UsageError on every rank, one line from rank 0) a sweep that cannot fit on some rank.
        Every rank measures before any rank allocates, and the ranks share what they found."""
        torch, dist = self.torch, self.dist
        if self.cuda:
            free = int(torch.cuda.mem_get_info(self.device)[0])
        else:
            available = host_available()
            free = -1 if available is None else available // self.local_world
        mine = torch.tensor([free], dtype=torch.int64, device=self.device)
        found = [torch.empty_like(mine) for _ in range(self.world)]
        self.arm(f"the memory check (all_gather) did not finish within {self.timeout:g} s", self.timeout)
        try:
            work = dist.all_gather(found, mine, async_op=True)
            if work.wait(timeout=timedelta(seconds=self.timeout)) is False:
                raise _DeadlineMissed()
        except _DeadlineMissed:
            self.fail(EXIT_DEADLINE, self.label)
        except Exception as exc:  # noqa: BLE001
            self.fail(
                EXIT_ERROR,
                f"the memory check (all_gather) raised {type(exc).__name__}: {' '.join(str(exc).split())[:300]}",
            )
        frees = [int(t.item()) for t in found]  # on a GPU this waits for the all_gather: still under the deadline
        self.disarm()
        short = [r for r, f in enumerate(frees) if 0 <= f < buffer_bytes(self.sizes[-1])]
        if short:
            one = len(short) == 1
            who = f"rank {short[0]} has" if one else f"ranks {_ranks(short)} have"
            if self.cuda:
                where = " free on its GPU" if one else " free on their GPUs"
            else:
                where = (
                    f"{'' if one else ' each'} ({'its' if one else 'their'} share of the host's available "
                    f"memory, split among {self.local_world} local rank(s))"
                )
            raise UsageError(memory_refusal(self.sizes[-1], min(frees[r] for r in short), who, where) or "")

    def _header(self) -> None:
        torch = self.torch
        settings = sorted(
            f"{k}={v}"
            for k, v in os.environ.items()
            if k.startswith(("NCCL_", "CUDA_")) and k != "CUDA_VISIBLE_DEVICES"
        )
        gpu = f", GPU {torch.cuda.get_device_name(self.device)}" if self.cuda else ""
        a = self.args
        print(
            f"# nccl_probe: all_reduce (sum, float32), backend {self.backend}, world size {self.world} "
            f"({self.local_world} per node){gpu}"
        )
        print(f"# {versions_line(torch)}")
        print(
            f"# sizes {_fmt_bytes(self.sizes[0])} to {_fmt_bytes(self.sizes[-1])} (x{a.step_factor}), "
            f"{a.warmup} warm-up + {a.iters} timed calls per size, deadline {self.timeout:g} s per collective"
        )
        print(f"# settings: {' '.join(settings) if settings else '(none)'}")
        ignored = nccl_settings_on_gloo(os.environ, None, a.fault_unless) if self.backend == "gloo" else []
        if ignored and not os.environ.get(STATUS_ENV):
            _say(gloo_warning(ignored), sys.stderr)
        if self.fault is not None or a.fault is not None:
            print(f"# fault: {a.fault} ({'armed' if self.fault or _fault_armed(a) else 'disarmed by --fault_unless'})")
        print("#")
        print(
            f"# {'size(B)':>12} {'count':>11} {'type':>6} {'time(us)':>10} {'algbw(GB/s)':>12} "
            f"{'busbw(GB/s)':>12} {'#wrong':>8}",
            flush=True,
        )

    def run(self) -> int:
        threading.Thread(target=self._watchdog, name="nccl_probe_watchdog", daemon=True).start()
        self._init_group()
        self._start_side_channel()
        self._check_memory()
        if self.rank == 0:
            self._header()
        my_wrong, wrong_by_rank, busbws = self._sweep()
        code = self._report(my_wrong, wrong_by_rank, busbws)
        self._finish(code)
        return code

    def _init_group(self) -> None:
        """init_process_group under the probe's own deadline (a hang there is reported, not waited out)."""
        torch, dist = self.torch, self.dist
        self.arm(
            f"init_process_group did not finish within {self.timeout + INIT_EXTRA_S:g} s", self.timeout + INIT_EXTRA_S
        )
        kwargs: dict[str, Any] = {
            "backend": self.backend,
            "timeout": timedelta(seconds=self.timeout + INIT_EXTRA_S + 30.0),
        }
        if self.cuda:
            torch.cuda.set_device(self.device)
            kwargs["device_id"] = self.device
        try:
            dist.init_process_group(**kwargs)
        except Exception as exc:  # noqa: BLE001
            self.fail(EXIT_ERROR, f"init_process_group failed: {' '.join(str(exc).split())[:300]}")
        self.disarm()

    def _start_side_channel(self) -> None:
        """The store clients that let a hang report name ranks (none: the report cannot)."""
        try:
            self.store = self._client(self.timeout)
            if self.store is not None:
                beat = self._client(self.timeout)
                threading.Thread(target=self._heartbeat, args=(beat,), name="nccl_probe_heartbeat", daemon=True).start()
        except Exception as exc:  # noqa: BLE001
            _say(f"{PREFIX} rank {self.rank}: no side channel ({exc}); a hang report cannot name ranks", sys.stderr)
            self.store = None

    def _sweep(self) -> tuple[int, list[int], list[float]]:
        """Every size of the sweep: (this rank's wrong elements, rank 0's count per rank, rank 0's busbw per size)."""
        src, expected, buf = sweep_buffers(self.torch, self.rank, self.world, self.sizes[-1], self.device)
        factor = 2.0 * (self.world - 1) / self.world
        k = 0
        my_wrong = 0
        wrong_by_rank = [0] * self.world
        busbws: list[float] = []
        for step, nbytes in enumerate(self.sizes):
            n = nbytes // 4
            wrong, times, k = self._one_size(buf[:n], src[:n], expected[:n], nbytes, k)
            my_wrong += wrong
            counts = self._exchange(step, nbytes, wrong)
            if self.rank == 0:
                if len(counts) == self.world:
                    wrong_by_rank = [x + y for x, y in zip(wrong_by_rank, counts)]
                else:
                    wrong_by_rank[0] += wrong
                t = sum(times) / len(times)
                algbw = nbytes / t / 1e9
                busbw = algbw * factor
                busbws.append(busbw)
                print(
                    f"  {nbytes:>12} {n:>11} {'float':>6} {t * 1e6:>10.1f} {algbw:>12.3f} {busbw:>12.3f} "
                    f"{sum(counts):>8}",
                    flush=True,
                )
        return my_wrong, wrong_by_rank, busbws

    def _one_size(self, b: Any, s: Any, e: Any, nbytes: int, k: int) -> tuple[int, list[float], int]:
        """Warm-up and timed all_reduces of one size: (wrong elements, the timed durations, the next call's index)."""
        a = self.args
        times: list[float] = []
        wrong = 0
        for i in range(a.warmup + a.iters):
            b.copy_(s)
            if self.fault is not None and self.fault.kind == "corrupt" and self.fault.at == k:
                b[::97] += 1.0
            phase = f"warm-up {i + 1}/{a.warmup}" if i < a.warmup else f"iteration {i - a.warmup + 1}/{a.iters}"
            dt = self.all_reduce(k, b, f"{_fmt_bytes(nbytes)}, {phase}")
            wrong += int((b != e).sum().item())
            if i >= a.warmup:
                times.append(dt)
            k += 1
        return wrong, times, k

    def _report(self, my_wrong: int, wrong_by_rank: list[int], busbws: list[float]) -> int:
        """Rank 0's summary lines, every rank's own line and status file; the exit code."""
        code = EXIT_WRONG if my_wrong else EXIT_OK
        summary = f"rank {self.rank}: {my_wrong} wrong element(s)"
        if self.rank == 0:
            total_wrong = sum(wrong_by_rank)
            bad = [r for r, c in enumerate(wrong_by_rank) if c]
            print(f"# avg busbw: {sum(busbws) / len(busbws):.3f} GB/s")
            print(f"# wrong elements: {total_wrong}" + (f" (seen on rank(s) {_ranks(bad)})" if bad else ""))
            verdict = "OK" if total_wrong == 0 else "FAILED: wrong results"
            print(f"# result: {verdict}", flush=True)
            if total_wrong:
                code = EXIT_WRONG
            summary = (
                f"{total_wrong} wrong element(s) on rank(s) {_ranks(bad)}"
                if total_wrong
                else f"0 wrong elements; avg busbw {sum(busbws) / len(busbws):.3f} GB/s"
            )
        _say(f"rank {self.rank} ok" if my_wrong == 0 else f"rank {self.rank} FAILED: {my_wrong} wrong element(s)")
        if self.status.claim("result"):
            self.status.write(code, summary)
        return code

    def _finish(self, code: int) -> None:
        """Let rank 0 finish its table before torchrun stops a failing job; tear the group down under a deadline."""
        self.in_collective = False
        if self.store is not None:
            try:
                if self.rank == 0:
                    self.store.set("finished", "1")
                elif code != EXIT_OK:
                    self.store.wait(["finished"], timedelta(seconds=self.timeout))
            except Exception:  # noqa: BLE001
                pass
        self.arm(f"destroy_process_group did not finish within {self.timeout:g} s", self.timeout)
        try:
            self.dist.destroy_process_group()
        except Exception:  # noqa: BLE001 - results are in; a failing teardown does not change them
            pass
        self.disarm()


def _fault_armed(args: argparse.Namespace) -> bool:
    if args.fault is None:
        return False
    if args.fault_unless is None:
        return True
    var, value = args.fault_unless
    return os.environ.get(var) != value


def _whole_lines() -> None:
    """Ranks share one pipe. Unbuffered streams (python -u) write a print's text and its newline
    apart, so lines of different ranks can splice; buffer by line so each line leaves in one write."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if isinstance(getattr(stream, "buffer", None), io.FileIO):
            setattr(
                sys,
                name,
                io.TextIOWrapper(
                    io.BufferedWriter(stream.buffer),
                    encoding=stream.encoding,
                    errors=stream.errors,
                    line_buffering=True,
                ),
            )


def worker(args: argparse.Namespace, sizes: list[int]) -> int:
    """Run as one rank of a torchrun job."""
    _whole_lines()
    status = _Status(int(os.environ["RANK"]))
    status.write_pid()  # before the slow torch import: a hard limit can find it
    _stop_on_sigterm(status)
    try:
        backend = _resolve_backend(args.backend, int(os.environ.get("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"])))
        return Probe(args, sizes, backend, status).run()
    except UsageError as exc:
        text = " ".join(str(exc).split())
        if status.rank == 0:
            _say(f"nccl_probe.py: error: {text}", sys.stderr)
        if status.claim("result"):
            status.write(EXIT_USAGE, text)
        return EXIT_USAGE


# ---------------------------------------------------------------------------------------------
# starting torchrun ourselves: --nproc_per_node and --bisect


@dataclass
class RunResult:
    """What one torchrun run of the probe came to."""

    code: int
    seconds: float
    summary: str
    after_deadline: float | None  # seconds from the first missed deadline to the run's end
    ranks: str = ""  # how each rank ended, such as "0 stopped by SIGTERM, 1 died without a result"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker_argv(args: argparse.Namespace, backend: str) -> list[str]:
    argv = [
        "--backend",
        backend,
        "-b",
        str(args.min_bytes),
        "-e",
        str(args.max_bytes),
        "-f",
        str(args.step_factor),
        "--iters",
        str(args.iters),
        "--warmup",
        str(args.warmup),
        "--timeout",
        repr(float(args.timeout)),
    ]
    if args.fault is not None:
        argv += ["--fault", str(args.fault)]
    if args.fault_unless is not None:
        argv += ["--fault_unless", "=".join(args.fault_unless)]
    return argv


def _descendants(root: int) -> list[int]:
    """All live descendants of a process (Linux /proc; empty elsewhere)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _is_our_rank(pid: int, status_dir: str) -> bool:
    """Whether pid is still a process of this run (guards against a reused pid)."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return f"{STATUS_ENV}={status_dir}".encode() in environ.split(b"\0")


def _run_pids(status_dir: str) -> list[int]:
    """Every live process of a run: torchrun, its ranks and their children all inherit STATUS_ENV=status_dir,
    also once torchrun is gone and they are orphans (a zombie's environment is empty: it is not counted)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    me = os.getpid()
    return [int(e) for e in entries if e.isdigit() and int(e) != me and _is_our_rank(int(e), status_dir)]


def _signal_all(pids: set[int] | list[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


class _Interrupted(Exception):
    """SIGINT or SIGTERM reached the probe while it waited for a run."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class _Stop:
    """SIGINT/SIGTERM for --nproc_per_node and --bisect: always recorded, raised (as _Interrupted) only while
    the probe waits for a run, so starting a run and cleaning one up are never cut in half."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.waiting = False

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._handler)
        signal.signal(signal.SIGINT, self._handler)

    def _handler(self, signum: int, _frame: Any) -> None:
        self.signum = self.signum or signum
        if self.waiting:  # a second signal while _stop_run waits out its grace ends that wait at once
            self.waiting = False
            raise _Interrupted(self.signum)

    def check(self) -> None:
        """Raise _Interrupted if a signal came while nothing waited."""
        if self.signum is not None:
            raise _Interrupted(self.signum)

    def wait(self, proc: subprocess.Popen, timeout: float) -> None:
        """proc.wait(timeout), interruptible by a signal."""
        self.waiting = True
        try:
            self.check()
            proc.wait(timeout=timeout)
        finally:
            self.waiting = False


def _stop_run(proc: subprocess.Popen, status_dir: str, stop: _Stop) -> None:
    """After SIGINT/SIGTERM: SIGTERM to torchrun's group and to every process of the run, then up to
    STOP_GRACE_S for them to end (a second signal ends the wait at once); _kill_run does the rest."""
    alive = proc.poll() is None  # a reaped torchrun's pid may already be another process's
    _signal_all(set(_run_pids(status_dir)) | ({proc.pid} if alive else set()), signal.SIGTERM)
    if alive:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    end = time.monotonic() + STOP_GRACE_S
    stop.waiting = True
    try:
        while time.monotonic() < end and (proc.poll() is None or _run_pids(status_dir)):
            time.sleep(0.05)
    except _Interrupted:
        pass
    finally:
        stop.waiting = False


def _kill_run(proc: subprocess.Popen, status_dir: str) -> None:
    """SIGKILL torchrun, its process group and every process of the run (ranks run in sessions of their own),
    then wait until none is left (at most GONE_DEADLINE_S). torchrun is frozen first, so it cannot start a
    rank between the listing and the kill; ranks orphaned by it are found by their environment. Once torchrun
    has been reaped its pid may belong to another process: then it is neither signalled nor searched."""
    alive = proc.poll() is None
    if alive:
        proc.send_signal(signal.SIGSTOP)
    pids = (set(_descendants(proc.pid)) | {proc.pid} if alive else set()) | set(_run_pids(status_dir))
    for pid_file in Path(status_dir).glob("pid.*"):
        try:
            pid = int(pid_file.read_text())
        except (OSError, ValueError):
            continue
        if _is_our_rank(pid, status_dir):
            pids.add(pid)
            pids.update(_descendants(pid))
    _signal_all(pids, signal.SIGKILL)
    if alive:  # everything of the run in torchrun's group carries the run's environment: found above as well
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        proc.wait(timeout=GONE_DEADLINE_S)
    except subprocess.TimeoutExpired:
        pass
    end = time.monotonic() + GONE_DEADLINE_S
    while True:
        left = _run_pids(status_dir)
        if not left:
            return
        if time.monotonic() > end:
            _say(
                f"nccl_probe.py: warning: process(es) {_ranks(sorted(left))} of a run still alive "
                f"{GONE_DEADLINE_S:g} s after SIGKILL",
                sys.stderr,
            )
            return
        _signal_all(left, signal.SIGKILL)
        time.sleep(0.05)


def _read_statuses(status_dir: str) -> list[dict[str, Any]]:
    statuses = []
    for path in sorted(Path(status_dir).glob("status.*.json")):
        try:
            statuses.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return statuses


def launch(
    args: argparse.Namespace,
    world: int,
    backend: str,
    stop: _Stop,
    *,
    env_set: dict[str, str] | None = None,
    env_unset: tuple[str, ...] = (),
    log_path: Path | None = None,
) -> RunResult:
    """Run the probe under torchrun on 127.0.0.1 with a hard wall-clock limit; clean up every process."""
    status_dir = tempfile.mkdtemp(prefix="nccl_probe_run_")
    cmd = _torchrun_cmd(args, world, backend)
    env = _run_env(backend, status_dir, env_set or {}, env_unset)
    shown = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted((env_set or {}).items()))
    line = f"{PREFIX} running: {shown + ' ' if shown else ''}{shlex.join(cmd)}"
    out = open(log_path, "w", encoding="utf-8") if log_path is not None else None  # noqa: SIM115
    if out is not None:
        out.write(line + "\n")
        out.flush()
    else:
        print(line, flush=True)
    start = time.monotonic()
    timed_out = False
    proc: subprocess.Popen | None = None
    try:
        stop.check()
        proc = subprocess.Popen(
            cmd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT if out is not None else None,
            start_new_session=True,
        )
        try:
            stop.wait(proc, args.run_limit)
        except subprocess.TimeoutExpired:
            timed_out = True
    except _Interrupted:
        if proc is not None:
            _stop_run(proc, status_dir, stop)
        raise
    finally:
        if proc is not None:
            _kill_run(proc, status_dir)
        end_wall = time.time()
        statuses = _read_statuses(status_dir)
        shutil.rmtree(status_dir, ignore_errors=True)
        if out is not None:
            out.close()
    seconds = time.monotonic() - start
    returncode = proc.returncode if proc is not None else None
    return _run_result(args, world, statuses, seconds, end_wall, timed_out, returncode)


def _torchrun_cmd(args: argparse.Namespace, world: int, backend: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "1",
        "--nproc_per_node",
        str(world),
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(_free_port()),
        "--max_restarts",
        "0",
        str(Path(__file__).resolve()),
        *_worker_argv(args, backend),
    ]


def _run_env(backend: str, status_dir: str, env_set: dict[str, str], env_unset: tuple[str, ...]) -> dict[str, str]:
    env = dict(os.environ)
    for var in env_unset:
        env.pop(var, None)
    env.update(env_set)
    env[STATUS_ENV] = status_dir
    env["PYTHONUNBUFFERED"] = "1"
    if backend == "gloo" and sys.platform.startswith("linux"):
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    return env


def _run_result(
    args: argparse.Namespace,
    world: int,
    statuses: list[dict],
    seconds: float,
    end_wall: float,
    timed_out: bool,
    returncode: int | None,
) -> RunResult:
    """What one run's status files (and torchrun's exit) say, as a RunResult."""
    stopped = {int(s["rank"]): str(s["stopped"]) for s in statuses if s.get("stopped")}
    results = [s for s in statuses if not s.get("stopped")]
    codes = {int(s["rank"]): int(s["code"]) for s in results}
    # a rank with no record at all ended without running our code to the end: a signal it did not
    # expect (SIGKILL, the OOM killer) or a crash. It is the one to blame, not the ranks that lost it.
    vanished = sorted(set(range(world)) - set(codes) - set(stopped))
    ranks = ", ".join(
        f"{r} ok"
        if codes.get(r) == EXIT_OK
        else f"{r} exit {codes[r]} ({EXIT_MEANING.get(codes[r], 'failed')})"
        if r in codes
        else f"{r} stopped by {stopped[r]}"
        if r in stopped
        else f"{r} died without a result"
        for r in range(world)
    )
    deadlines = [float(s["deadline_wall"]) for s in results if s.get("deadline_wall")]
    after = end_wall - min(deadlines) if deadlines else None
    if timed_out:
        return RunResult(EXIT_DEADLINE, seconds, f"hard limit of {args.run_limit:g} s reached; killed the run", after)
    if vanished:
        others = [r for r in range(world) if r not in vanished]
        return RunResult(
            EXIT_ERROR,
            seconds,
            f"rank(s) {_ranks(vanished)} died without a result (killed by a signal, "
            f"or crashed); rank(s) {_ranks(others)} only lost their peer",
            after,
            ranks,
        )
    for code in (EXIT_USAGE, EXIT_DEADLINE, EXIT_ERROR, EXIT_WRONG):
        if code in codes.values():
            picked = [s for s in results if int(s["code"]) == code]
            picked.sort(key=lambda s: (not s.get("reporter"), int(s["rank"])))
            return RunResult(code, seconds, str(picked[0]["summary"]), after, ranks)
    if returncode == 0 and len(codes) == world:
        rank0 = [s for s in results if int(s["rank"]) == 0]
        return RunResult(EXIT_OK, seconds, str(rank0[0]["summary"]) if rank0 else "ok", None, ranks)
    return RunResult(
        EXIT_ERROR,
        seconds,
        f"torchrun exited {returncode}; rank(s) {_ranks(sorted(stopped))} were stopped before a result",
        after,
        ranks,
    )


def _parent_backend(args: argparse.Namespace, largest_world: int, sizes: list[int]) -> str:
    """The backend for the runs this process starts; on gloo, refuse sizes the host cannot hold
    and warn about NCCL_* settings, which gloo ignores. All before any run starts."""
    backend = _resolve_backend(args.backend, largest_world)
    if backend == "gloo":
        check_host_memory(sizes, largest_world)
    for line in parent_warnings(backend, args, os.environ):
        _say(line, sys.stderr)
    return backend


def parent_warnings(backend: str, args: argparse.Namespace, env: dict[str, str] | os._Environ) -> list[str]:
    """What --nproc_per_node/--bisect warn about before any run: NCCL_* settings that gloo ignores, and a
    gloo bisection that is no rehearsal either (its verdicts cannot apply to NCCL)."""
    if backend != "gloo":
        return []
    ignored = nccl_settings_on_gloo(env, args.candidate, args.fault_unless)
    lines = [gloo_warning(ignored)] if ignored else []
    if args.bisect and args.fault_unless is None:
        lines.append(
            "nccl_probe.py: warning: --bisect on backend gloo without --fault_unless runs no NCCL, so its "
            "verdicts cannot apply to NCCL; rehearse with --fault and --fault_unless, or bisect on GPUs with "
            "--backend nccl"
        )
    return lines


def verdict(passed_first: bool, passed_rerun: bool | None, passed_with: bool) -> str:
    """One world size's verdict from its runs: the first run without the candidate, the rerun without it
    (only after a failing first run, else None) and the run with it."""
    if passed_first:
        return VERDICT_NOT_CAUSE if passed_with else VERDICT_BREAKS
    if passed_rerun:
        return VERDICT_FLAKY
    return VERDICT_CONFIRMED if passed_with else VERDICT_NOT_FIX


def bisect_status(verdicts: list[str]) -> int:
    """--bisect's exit status: 0 when every verdict is "workaround confirmed" or "not the cause", else 1."""
    return EXIT_OK if all(v in (VERDICT_CONFIRMED, VERDICT_NOT_CAUSE) for v in verdicts) else EXIT_WRONG


def launch_cli(args: argparse.Namespace, sizes: list[int], stop: _Stop) -> int:
    """--nproc_per_node N: one run on this machine, exit with the probe's own status."""
    backend = _parent_backend(args, args.nproc_per_node, sizes)
    result = launch(args, args.nproc_per_node, backend, stop)
    state = "OK" if result.code == EXIT_OK else f"FAILED (exit {result.code}: {EXIT_MEANING[result.code]})"
    print(f"{PREFIX} world size {args.nproc_per_node}, backend {backend}: {state}: {result.summary}", flush=True)
    if result.code != EXIT_OK and result.ranks:
        print(f"{PREFIX} per rank: {result.ranks}", flush=True)
    if result.code == EXIT_DEADLINE and result.after_deadline is not None:
        print(f"{PREFIX} the run ended {result.after_deadline:.2f} s after the first missed deadline", flush=True)
    return result.code


def bisect(args: argparse.Namespace, message_sizes: list[int], stop: _Stop) -> int:
    """--bisect: verdicts per world size for one candidate setting."""
    var, value = args.candidate
    sizes: list[int] = args.world_sizes
    backend = _parent_backend(args, max(sizes), message_sizes)
    # say what the verdicts are about: a stand-in defect (a rehearsal), or a gloo run that runs no NCCL
    note = verdict_note(backend, args.fault, args.fault_unless)
    log_dir = Path(args.log_dir) if args.log_dir else Path(tempfile.mkdtemp(prefix="nccl_probe_bisect_"))
    log_dir.mkdir(parents=True, exist_ok=True)
    setting = f"{var}={value}"
    print(
        f"[bisect] candidate {setting}; world sizes {','.join(map(str, sizes))}; backend {backend}; "
        f"hard limit {args.run_limit:g} s per run; logs in {log_dir}",
        flush=True,
    )

    def one(world: int, with_candidate: bool, tag: str = "") -> bool:
        how = "with" if with_candidate else "without"
        print(f"[bisect] world size {world}, {how} {setting}: running", flush=True)
        log = log_dir / f"world{world}_{how}{tag}.log"
        result = launch(
            args,
            world,
            backend,
            stop,
            env_set={var: value} if with_candidate else None,
            env_unset=() if with_candidate else (var,),
            log_path=log,
        )
        ok = result.code == EXIT_OK
        detail = "" if ok else f": {result.summary} (log: {log})"
        print(
            f"[bisect] world size {world}, {how} {setting}: {'passed' if ok else 'FAILED'} "
            f"(exit {result.code}: {EXIT_MEANING[result.code]}; {result.seconds:.1f} s){detail}",
            flush=True,
        )
        return ok

    first = {w: one(w, False) for w in sizes}
    verdicts: dict[int, str] = {}
    for w in sizes:
        again = None if first[w] else one(w, False, "_rerun")  # a failing size runs once more without it
        verdicts[w] = verdict(first[w], again, one(w, True))
    print(f"[bisect] verdicts for {setting}:", flush=True)
    for w in sizes:
        print(f"[bisect]   world size {w}: {verdicts[w]}{note}", flush=True)
    return bisect_status(list(verdicts.values()))


# ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Parse, then run as a rank (under torchrun), as a launcher (--nproc_per_node) or as a bisector."""
    under_torchrun = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    try:
        args = build_parser().parse_args(argv)
        sizes = validate(args)
        if args.bisect or args.nproc_per_node is not None:
            if under_torchrun:
                raise UsageError(
                    "--bisect and --nproc_per_node start torchrun themselves: run them with python, not under torchrun"
                )
            stop = _Stop()
            stop.install()
            try:
                code = bisect(args, sizes, stop) if args.bisect else launch_cli(args, sizes, stop)
                stop.check()  # a signal after the last run: still the signal's status
                return code
            except _Interrupted as exc:
                print(f"{PREFIX} interrupted by {exc}; runs stopped", file=sys.stderr, flush=True)
                return 128 + exc.signum
        if not under_torchrun:
            raise UsageError(
                "not started by torchrun (RANK/WORLD_SIZE unset): run "
                "'torchrun --nproc_per_node N nccl_probe.py ...' or 'python nccl_probe.py --nproc_per_node N ...'"
            )
        code = worker(args, sizes)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # no interpreter teardown racing the side-channel and backend threads
    except UsageError as exc:
        if os.environ.get("RANK", "0") == "0":
            print(f"nccl_probe.py: error: {' '.join(str(exc).split())}", file=sys.stderr, flush=True)
        if under_torchrun:
            _Status(int(os.environ["RANK"])).write(EXIT_USAGE, " ".join(str(exc).split()))
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
