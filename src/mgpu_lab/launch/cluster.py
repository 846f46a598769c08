"""Where the launcher's node flags come from on clusters (no torch import).

Before it builds the torchrun (or skrl JAX) command, the launcher asks :func:`infer_nodes`: which node flags does
the scheduler imply? Under a SLURM ``srun`` step with one task per node it fills ``--nnodes``, ``--node_rank`` and a
c10d rendezvous on the step's first node (or, for skrl JAX, ``--coordinator_address``), each with the variables it
came from. Flags the user gave always win. On Kubernetes (a Kubeflow ``PyTorchJob``) there is nothing to infer:
torchrun reads its own ``PET_*`` variables, and the plan only says that it will. (Whether ``/dev/shm`` fits NCCL is
:func:`mgpu_lab.launch.shm_ranks.shm_warning`.)

It is a function of its inputs (the environment is passed in), so the launcher, ``--dry_run`` and the tests see
the same answer. Bad input raises :class:`ClusterError` with a one-line message.
"""

from __future__ import annotations

import re

TYPE_CHECKING = False  # typing stays unimported: the launcher answers --dry_run without start-up cost
if TYPE_CHECKING:
    from collections.abc import Mapping


#: Range of ports derived from a SLURM job id for the rendezvous (below Linux's ephemeral ports, 32768+).
PORT_BASE = 20000
PORT_SPAN = 10000

_SLURM_MARKERS = (
    "SLURM_JOB_ID",
    "SLURM_JOBID",
    "SLURM_STEP_ID",
    "SLURM_STEPID",
    "SLURM_NODEID",
    "SLURM_JOB_NODELIST",
    "SLURM_NODELIST",
    "SLURM_STEP_NODELIST",
    "SLURM_JOB_NUM_NODES",
    "SLURM_NNODES",
    "SLURM_STEP_NUM_NODES",
)
# Each value read from the first variable present: the step's own values first (srun sets them), then the
# job's. Names checked against the srun(1) and sbatch(1) manuals ("OUTPUT ENVIRONMENT VARIABLES").
_JOB_ID = ("SLURM_JOB_ID", "SLURM_JOBID")
_STEP_ID = ("SLURM_STEP_ID", "SLURM_STEPID")
_NUM_NODES = ("SLURM_STEP_NUM_NODES", "SLURM_JOB_NUM_NODES", "SLURM_NNODES")
_NODE_LIST = ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
_NODE_ID = ("SLURM_NODEID",)

#: torchrun options and the PET_* variable torchrun reads when the option is not given.
_PET_OPTIONS = (
    ("nnodes", "PET_NNODES"),
    ("node_rank", "PET_NODE_RANK"),
    ("master_addr", "PET_MASTER_ADDR"),
    ("master_port", "PET_MASTER_PORT"),
    ("rdzv_backend", "PET_RDZV_BACKEND"),
    ("rdzv_endpoint", "PET_RDZV_ENDPOINT"),
    ("rdzv_id", "PET_RDZV_ID"),
    ("max_restarts", "PET_MAX_RESTARTS"),
)
_JAX_NODE_FLAGS = ("nnodes", "node_rank", "coordinator_address")

_NO_SLURM_HINT = "or --no_slurm to ignore SLURM's environment"
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class ClusterError(Exception):
    """A cluster environment the launcher cannot use: one line, reported like a usage error (exit 2)."""


class Inferred:
    """One launcher option filled from the environment, with the variables it came from."""

    __slots__ = ("dest", "sources", "value")

    def __init__(self, dest: str, value: str, sources: tuple[tuple[str, str], ...]) -> None:
        self.dest = dest  # the launcher option's argparse dest, e.g. "nnodes"
        self.value = value  # as it would be written on the command line
        self.sources = sources  # ((VARIABLE, value), ...)

    @property
    def flag(self) -> str:
        return f"--{self.dest}"

    def line(self) -> str:
        """``[INFO] launcher: --nnodes 2 (from SLURM_STEP_NUM_NODES=2)``"""
        origin = ", ".join(f"{name}={value}" for name, value in self.sources)
        return f"[INFO] launcher: {self.flag} {self.value} (from {origin})"

    def __repr__(self) -> str:
        return f"Inferred({self.dest!r}, {self.value!r}, {self.sources!r})"


class NodePlan:
    """What the environment adds to the launcher's node flags, and what to tell the user about it.

    ``inferred``: options to add (never one the user gave), in command-line order. ``notes``: ``[INFO]``
    lines (what was not used, what torchrun reads itself). ``warnings``: ``[WARN]`` lines.
    ``scheduler``: ``"slurm"``, ``"kubernetes"`` or None.
    """

    __slots__ = ("inferred", "notes", "scheduler", "warnings")

    def __init__(
        self,
        scheduler: str | None = None,
        inferred: tuple[Inferred, ...] = (),
        notes: tuple[str, ...] = (),
        warnings: tuple[str, ...] = (),
    ) -> None:
        self.scheduler = scheduler
        self.inferred = inferred
        self.notes = notes
        self.warnings = warnings

    def values(self) -> dict[str, str]:
        """``{dest: value}`` of the inferred options."""
        return {item.dest: item.value for item in self.inferred}

    def argv(self) -> list[str]:
        """The inferred options as launcher arguments, e.g. ``["--nnodes", "2", "--node_rank", "1"]``."""
        out: list[str] = []
        for item in self.inferred:
            out += [item.flag, item.value]
        return out

    def lines(self) -> list[str]:
        """Every line to print on stderr, provenance first, then notes, then warnings."""
        return [item.line() for item in self.inferred] + list(self.notes) + list(self.warnings)

    def __repr__(self) -> str:
        return (
            f"NodePlan(scheduler={self.scheduler!r}, inferred={self.inferred!r}, notes={self.notes!r}, "
            f"warnings={self.warnings!r})"
        )


# --------------------------------------------------------------------------------------------------
# SLURM
# --------------------------------------------------------------------------------------------------


def _first(env: Mapping[str, str], names: tuple[str, ...]) -> tuple[str, str] | None:
    """(name, value) of the first of ``names`` set (non-empty) in ``env``."""
    for name in names:
        value = env.get(name)
        if value is not None and value.strip() != "":
            return name, value.strip()
    return None


def rendezvous_port(job_id: str) -> int:
    """The port every node of a SLURM job derives from its id: 20000-29999, equal on every node."""
    if job_id.isdigit():
        number = int(job_id)
    else:  # not expected from SLURM; still the same on every node (no per-process hash seed)
        import zlib  # only for a job id that is not a number (SLURM's are): --dry_run never loads it

        number = zlib.crc32(job_id.encode())
    return PORT_BASE + number % PORT_SPAN


def _top_level_items(nodelist: str) -> list[str]:
    """The comma-separated items of a host list, commas inside brackets kept (``a[1,3],b`` -> 2 items)."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(nodelist):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(nodelist[start:i])
            start = i + 1
    items.append(nodelist[start:])
    return items


def expand_nodelist(nodelist: str) -> list[str]:
    """SLURM's compressed host list (``gpu[07-08,11]``) as host names, with ClusterShell's NodeSet.

    Each top-level item is expanded on its own so that the hosts keep SLURM's order between items
    (NodeSet sorts what it is given; within one bracket SLURM writes ranges in ascending order anyway).
    Group syntax (``@name``) is not resolved: group resolvers can run configured commands, and SLURM
    never writes groups into its node lists. Raises ClusterError when the list does not expand to host
    names."""
    try:
        from ClusterShell.NodeSet import NOGROUP_RESOLVER, NodeSet, NodeSetException  # heavy: only for a node list
    except ImportError:  # pragma: no cover - a project dependency
        raise ClusterError(
            f"cannot expand the SLURM node list {nodelist!r}: the ClusterShell package is missing (uv sync)"
        ) from None
    try:
        hosts = [host for item in _top_level_items(nodelist) for host in NodeSet(item, resolver=NOGROUP_RESOLVER)]
    except (NodeSetException, ValueError, IndexError) as exc:
        raise ClusterError(f"node list {nodelist!r} does not expand ({exc})") from None
    bad = [h for h in hosts if not _HOST.fullmatch(h)]
    if not hosts or bad:
        what = f"{bad[0]!r} is not a host name" if bad else "no host names"
        raise ClusterError(f"node list {nodelist!r} does not expand to host names ({what})")
    return hosts


def _tasks_per_node(value: str) -> int | None:
    """The largest count in SLURM's tasks-per-node notation (``1(x2)``, ``2,1``); None if unreadable."""
    counts = []
    for part in value.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x\d+\))?\s*", part)
        if not m:
            return None
        counts.append(int(m.group(1)))
    return max(counts) if counts else None


def _nnodes_range(value: str) -> tuple[int, int] | None:
    m = re.fullmatch(r"\s*(\d+)(?::(\d+))?\s*", value)
    if not m:
        return None
    low = int(m.group(1))
    return low, int(m.group(2)) if m.group(2) is not None else low


def _outside_step(job: tuple[str, str], count: tuple[str, str] | None) -> NodePlan:
    """A batch script or salloc shell, not an srun step: this launcher runs on one node only."""
    nodes = int(count[1]) if count and count[1].isdigit() else 1
    if count is not None and nodes > 1:
        return NodePlan(
            "slurm",
            warnings=(
                f"[WARN] launcher: SLURM job {job[1]} has {nodes} nodes ({count[0]}={count[1]}) but this launcher "
                "is not in an srun step, so it trains on this node only; start it on every node with "
                "srun --ntasks-per-node=1 (see the Clusters section of the multi-GPU docs)",
            ),
        )
    return NodePlan(
        "slurm", notes=(f"[INFO] launcher: SLURM job {job[1]} outside an srun step: a single node, nothing inferred",)
    )


def _check_one_task_per_node(env: Mapping[str, str]) -> None:
    tasks = _first(env, ("SLURM_STEP_TASKS_PER_NODE",))
    per_node = _tasks_per_node(tasks[1]) if tasks else None
    local = _first(env, ("SLURM_LOCALID",))
    if (per_node is not None and per_node > 1) or (local is not None and local[1] != "0"):
        shown = (
            f"{tasks[0]}={tasks[1]}"
            if tasks and per_node is not None and per_node > 1
            else f"{local[0]}={local[1]}"
            if local
            else ""
        )
        raise ClusterError(
            f"SLURM started more than one task per node ({shown}); the launcher starts one rank per GPU "
            f"itself, so run one launcher per node: srun --ntasks-per-node=1 ..., {_NO_SLURM_HINT}"
        )


class _Rendezvous:
    """Which rendezvous the given flags choose, and whether SLURM must name its host."""

    def __init__(self, given: Mapping[str, str], jax: bool) -> None:
        self.jax = jax
        self.static = "master_addr" in given or "master_port" in given or given.get("rdzv_backend") == "static"
        self.other_backend = "rdzv_backend" in given and given["rdzv_backend"] not in ("c10d", "static")
        self.needs_host = (
            ("coordinator_address" not in given)
            if jax
            else ("master_addr" not in given)
            if self.static
            else ("rdzv_endpoint" not in given and not self.other_backend)
        )


class _Inference:
    """What SLURM implies, option by option: inferred where not given, a note where the user said otherwise."""

    def __init__(self, given: Mapping[str, str]) -> None:
        self.given = given
        self.inferred: list[Inferred] = []
        self.notes: list[str] = []

    def __call__(self, dest: str, value: str, sources: tuple[tuple[str, str], ...]) -> None:
        if dest not in self.given:
            self.inferred.append(Inferred(dest, value, sources))
        elif str(self.given[dest]) != value:
            origin = ", ".join(f"{name}={val}" for name, val in sources)
            self.notes.append(
                f"[INFO] launcher: --{dest} {self.given[dest]} given (SLURM implies {value}, from {origin})"
            )


def _check_complete(
    env: Mapping[str, str],
    job: tuple[str, str] | None,
    count: tuple[str, str] | None,
    given: Mapping[str, str],
    needs_host: bool,
) -> None:
    needed = {
        "SLURM_JOB_ID": job is None,
        "SLURM_JOB_NUM_NODES": count is None and "nnodes" not in given,
        "SLURM_NODEID": _first(env, _NODE_ID) is None and "node_rank" not in given,
        "SLURM_JOB_NODELIST": _first(env, _NODE_LIST) is None and needs_host,
    }
    missing = [name for name, lacking in needed.items() if lacking]
    if missing:
        shown = ", ".join(f"{name}={env[name].strip()}" for name in _SLURM_MARKERS if env.get(name, "").strip())
        raise ClusterError(
            f"a partial SLURM environment: {shown} but no {' or '.join(missing)}; give the node flags "
            f"yourself, {_NO_SLURM_HINT}"
        )


def _infer_node(
    env: Mapping[str, str], count: tuple[str, str] | None, given: Mapping[str, str], infer: _Inference
) -> int:
    """--nnodes and --node_rank from the step's node count and index; return the node count (0: unknown)."""
    nodes = 0
    if count is not None:
        if not count[1].isdigit() or int(count[1]) < 1:
            raise ClusterError(f"{count[0]}={count[1]}: not a node count; {_NO_SLURM_HINT}")
        nodes = int(count[1])
        wanted = _nnodes_range(str(given["nnodes"])) if "nnodes" in given else None
        if wanted is not None and not wanted[0] <= nodes <= wanted[1]:
            raise ClusterError(
                f"--nnodes {given['nnodes']} disagrees with {count[0]}={count[1]}: this SLURM step runs on "
                f"{nodes} node(s); give --nnodes {nodes} or leave it out, {_NO_SLURM_HINT}"
            )
        infer("nnodes", str(nodes), (count,))
    node_id = _first(env, _NODE_ID)
    if node_id is not None:
        if not node_id[1].isdigit() or (nodes and int(node_id[1]) >= nodes):
            raise ClusterError(f"{node_id[0]}={node_id[1]}: not a node index below {nodes}; {_NO_SLURM_HINT}")
        infer("node_rank", node_id[1], (node_id,))
    return nodes


def _first_host(nodelist: tuple[str, str], count: tuple[str, str] | None, nodes: int, jax: bool) -> str:
    """The step's first node: where node 0 hosts the rendezvous."""
    try:
        hosts = expand_nodelist(nodelist[1])
    except ClusterError as exc:
        raise ClusterError(
            f"{nodelist[0]}: {exc}; give the rendezvous host yourself "
            f"({'--coordinator_address' if jax else '--rdzv_endpoint or --master_addr'}), {_NO_SLURM_HINT}"
        ) from None
    if nodes and len(hosts) != nodes and count is not None:
        raise ClusterError(
            f"{nodelist[0]}={nodelist[1]} names {len(hosts)} node(s) but {count[0]}={count[1]}; {_NO_SLURM_HINT}"
        )
    return hosts[0]


def _slurm_plan(env: Mapping[str, str], given: Mapping[str, str], *, jax: bool) -> NodePlan:
    job = _first(env, _JOB_ID)
    step = _first(env, _STEP_ID)
    count = _first(env, _NUM_NODES)
    if job is None and step is None:
        shown = ", ".join(f"{name}={env[name].strip()}" for name in _SLURM_MARKERS if env.get(name, "").strip())
        raise ClusterError(
            f"a partial SLURM environment: {shown} but no SLURM_JOB_ID; give the node flags yourself, {_NO_SLURM_HINT}"
        )
    if step is None:
        assert job is not None
        return _outside_step(job, count)
    _check_one_task_per_node(env)
    rdzv = _Rendezvous(given, jax)
    _check_complete(env, job, count, given, rdzv.needs_host)
    assert job is not None  # _check_complete refused its absence
    infer = _Inference(given)
    nodes = _infer_node(env, count, given, infer)
    nodelist = _first(env, _NODE_LIST)
    host = _first_host(nodelist, count, nodes, jax) if rdzv.needs_host and nodelist is not None else None
    port = str(rendezvous_port(job[1]))
    host_sources = (nodelist, job) if nodelist is not None else (job,)
    if jax:
        if host is not None:
            infer("coordinator_address", f"{host}:{port}", host_sources)
    elif rdzv.static:
        if host is not None and nodelist is not None:
            infer("master_addr", host, (nodelist,))
        infer("master_port", port, (job,))
    else:
        if not rdzv.other_backend:
            infer("rdzv_backend", "c10d", (step,))
            if host is not None:
                infer("rdzv_endpoint", f"{host}:{port}", host_sources)
        infer("rdzv_id", f"{job[1]}.{step[1]}", (job, step))
    return NodePlan("slurm", tuple(infer.inferred), tuple(infer.notes))


# --------------------------------------------------------------------------------------------------
# Kubernetes (torchrun's PET_* environment)
# --------------------------------------------------------------------------------------------------


def _pet_plan(
    env: Mapping[str, str], given: Mapping[str, str], *, jax: bool, shadowed_by_slurm: set[str]
) -> tuple[list[str], list[str]]:
    """Notes and warnings about torchrun's own PET_* variables (a Kubeflow PyTorchJob sets them)."""
    pets = sorted(name for name in env if name.startswith("PET_") and env[name].strip())
    if not pets:
        return [], []
    shown = ", ".join(f"{name}={env[name].strip()}" for name in pets)
    if jax:
        missing = [f"--{dest}" for dest in _JAX_NODE_FLAGS if dest not in given and dest not in shadowed_by_slurm]
        if not missing:
            return [], []
        return [], [
            f"[WARN] launcher: {shown} set (Kubernetes PyTorchJob?) but skrl's JAX launcher does not read PET_* "
            f"variables; give {', '.join(missing)}"
        ]
    notes = [f"[INFO] launcher: torchrun reads {shown} from the environment (Kubernetes PyTorchJob)"]
    for dest, pet in _PET_OPTIONS:
        if pet in env and env[pet].strip():
            if dest in given:
                notes.append(
                    f"[INFO] launcher: --{dest} {given[dest]} given; torchrun ignores {pet}={env[pet].strip()}"
                )
            elif dest in shadowed_by_slurm:
                notes.append(f"[INFO] launcher: --{dest} from SLURM; torchrun ignores {pet}={env[pet].strip()}")
    return notes, []


def infer_nodes(
    env: Mapping[str, str], given: Mapping[str, object], *, use_slurm: bool = True, jax: bool = False
) -> NodePlan:
    """The node flags the environment implies, for the options the user did not give.

    ``env``: the launcher's environment. ``given``: the launcher options written on the command line,
    by argparse dest (``{"nnodes": "2", "rdzv_endpoint": "h:29400"}``); they always win. ``use_slurm``:
    False for ``--no_slurm``. ``jax``: skrl's JAX launcher (``--coordinator_address`` instead of a
    torchrun rendezvous). Raises ClusterError for a SLURM environment it cannot use.
    """
    given_str = {dest: str(value) for dest, value in given.items() if value is not None}
    has_slurm = any(env.get(name, "").strip() for name in _SLURM_MARKERS)
    plan = NodePlan()
    notes: list[str] = []
    if has_slurm and not use_slurm:
        job = _first(env, _JOB_ID)
        notes.append(
            f"[INFO] launcher: SLURM detection off (--no_slurm); "
            f"{'SLURM_JOB_ID=' + job[1] if job else 'the SLURM_* variables'} not used"
        )
    elif has_slurm:
        plan = _slurm_plan(env, given_str, jax=jax)
    pet_notes, pet_warnings = _pet_plan(env, given_str, jax=jax, shadowed_by_slurm=set(plan.values()))
    scheduler = plan.scheduler or ("kubernetes" if pet_notes or pet_warnings else None)
    return NodePlan(
        scheduler, plan.inferred, tuple(notes) + plan.notes + tuple(pet_notes), plan.warnings + tuple(pet_warnings)
    )
