"""The one description of a launch: built once from argv by :func:`mgpu_lab.launch.launcher.make_config`, then
passed whole to the command builder (:func:`mgpu_lab.launch.launcher.build_command`) and to the runner
(:func:`mgpu_lab.job.monitor.run_job`). Nothing copies its fields into another record.

It lives here, in the job layer, because both the launcher (above) and the runner (here) read it; it imports
nothing of either. Everything in it is already validated; what is derived from several inputs (``on_cpu``,
``hosts_store``, the kill grace) is computed once, by the launcher, and stored.

The records here are :class:`Frozen`, not dataclasses: importing ``dataclasses`` (and ``inspect`` with it) would
cost ``--dry_run`` more than everything else it does. The type checker still checks them as dataclasses: for it,
``Frozen`` carries ``typing.dataclass_transform`` (keyword-only, frozen), so a misspelt or mistyped field is an
error; at run time that decorator is a no-op defined here, and ``typing`` stays unimported.
"""

from __future__ import annotations

from mgpu_lab.core.names import JOB_KEY_ENV

TYPE_CHECKING = False  # typing stays unimported: --dry_run must start fast
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import ClassVar, dataclass_transform
else:

    def dataclass_transform(**_: object) -> Callable[[type], type]:
        """Only the type checker reads this decorator: at run time the class is left as it is."""
        return lambda cls: cls


DEFAULT_RDZV_TIMEOUT_S = 600.0  # torchrun's own join timeout (static and c10d)


@dataclass_transform(kw_only_default=True, frozen_default=True, eq_default=True)
class Frozen:
    """An immutable record: its class's annotations are its fields, class attributes their defaults; built with
    keywords only (an unknown or missing field is a TypeError; a misspelt or mistyped one is also a type checker's
    error). Equal when every field is; ``_hidden`` fields stay out of its repr."""

    _hidden: ClassVar[tuple[str, ...]] = ()

    def __init__(self, **values: object) -> None:
        fields = type(self).__annotations__
        unknown = sorted(set(values) - set(fields))
        missing = sorted(n for n in fields if n not in values and not hasattr(type(self), n))
        if unknown or missing:
            raise TypeError(f"{type(self).__name__}: unknown fields {unknown}, missing fields {missing}")
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: cannot set {name}")

    def _values(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in type(self).__annotations__}

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self._values() == other._values()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self._values().items() if k not in self._hidden)
        return f"{type(self).__name__}({shown})"


class SchedulerEnv(Frozen):
    """What the launcher uses of torchrun's own ``PET_*`` variables (a Kubernetes PyTorchJob sets them), SLURM's job
    id and the job key, read once from the environment when the launch is parsed (:func:`read_scheduler_env`);
    None: not set. Nothing downstream reads these variables again. Each default is here, once (torchrun's own)."""

    nproc_per_node: str | None = None
    nnodes: str | None = None
    master_addr: str | None = None
    master_port: str | None = None
    rdzv_backend: str | None = None
    rdzv_endpoint: str | None = None
    rdzv_id: str | None = None
    slurm_job_id: str | None = None
    job_key: str | None = None

    @property
    def ranks_per_node(self) -> str:
        return self.nproc_per_node or "1"

    @property
    def nodes(self) -> str:
        return self.nnodes or "1"

    @property
    def backend(self) -> str:
        return self.rdzv_backend or "static"

    @property
    def address(self) -> str:
        return self.master_addr or "127.0.0.1"

    @property
    def port(self) -> str:
        return self.master_port or "29500"


#: SchedulerEnv's fields and the variables they come from (the first set wins).
_VARIABLES = {
    "nproc_per_node": ("PET_NPROC_PER_NODE",),
    "nnodes": ("PET_NNODES",),
    "master_addr": ("PET_MASTER_ADDR",),
    "master_port": ("PET_MASTER_PORT",),
    "rdzv_backend": ("PET_RDZV_BACKEND",),
    "rdzv_endpoint": ("PET_RDZV_ENDPOINT",),
    "rdzv_id": ("PET_RDZV_ID",),
    "slurm_job_id": ("SLURM_JOB_ID", "SLURM_JOBID"),
    "job_key": (JOB_KEY_ENV,),
}


def variable_of(field: str) -> str:
    """The environment variable a :class:`SchedulerEnv` field comes from (for messages that name it)."""
    return _VARIABLES[field][0]


def scheduler_around(environ: Mapping[str, str]) -> bool:
    """Does a scheduler's environment (SLURM's, or torchrun's own PET_*) say anything to infer from?"""
    return any(name.startswith(("SLURM_", "PET_")) for name in environ)


def read_scheduler_env(environ: Mapping[str, str]) -> SchedulerEnv:
    """The one read of torchrun's, SLURM's and the launcher's job variables (blank counts as not set)."""
    values = {}
    for name, variables in _VARIABLES.items():
        values[name] = next((environ[v].strip() for v in variables if environ.get(v, "").strip()), None)
    return SchedulerEnv(**values)


class LaunchConfig(Frozen):
    """One validated launch. ``None`` means "not given" (torchrun's ``PET_*`` environment, in ``scheduler``, then
    applies)."""

    rl_library: str
    #: the arguments train.py gets, as given (a leading ``--`` dropped)
    forwarded: tuple[str, ...]
    #: the real path of the script every rank runs
    train_script: str
    #: skrl with ``--ml_framework jax``: skrl's JAX launcher instead of torchrun
    jax: bool
    #: the forwarded ``--device``
    device: str | None
    #: the ranks are CPU processes on gloo (``--device cpu``)
    on_cpu: bool
    #: the rank count torchrun (or skrl) gets; None: not passed (a PyTorchJob's PET_NPROC_PER_NODE applies)
    nproc: str | None
    nnodes: str | None
    node_rank: int | None
    master_addr: str | None
    master_port: int | None
    rdzv_backend: str | None
    rdzv_endpoint: str | None
    rdzv_id: str | None
    #: ``--rdzv_timeout`` as given (None: torchrun's default, :data:`DEFAULT_RDZV_TIMEOUT_S`)
    rdzv_timeout_given: float | None
    hang_timeout: float
    startup_timeout: float
    log_dir: str | None
    log_all_ranks: bool
    local_ranks_filter: str | None
    coordinator_address: str | None
    #: the torchrun options passed on as given, ``(name, value)`` in the parser's order, only those given
    torchrun_options: tuple[tuple[str, object], ...]
    #: this node hosts torchrun's static rendezvous store (node 0 on a local master address)
    hosts_store: bool
    #: one node, no rendezvous named: torchrun's ``--standalone`` store on a port the kernel picks
    standalone: bool = False
    #: seconds between SIGTERM and SIGKILL when the job is stopped (MGPU_LAB_KILL_GRACE_S)
    grace_s: float
    dry_run: bool
    #: the launcher's environment (the ranks inherit it; read only through ``scheduler``, folded at parse time)
    environ: Mapping[str, str]
    #: torchrun's PET_*, SLURM's job id and the job key, read once when the launch was parsed
    scheduler: SchedulerEnv = SchedulerEnv()
    #: what cluster detection filled in and the /dev/shm warning: lines for stderr (--dry_run included)
    inferred: tuple[str, ...] = ()
    #: what every rank runs for another training script (``--train_script``/``-m``: this package's rank entry
    #: around it); None: this project's train.py, with ``--rl_library`` and ``--distributed``
    foreign_argv: tuple[str, ...] | None = None

    _hidden = ("environ",)

    @property
    def rdzv_timeout(self) -> float:
        """The rendezvous deadline in seconds."""
        return self.rdzv_timeout_given if self.rdzv_timeout_given is not None else DEFAULT_RDZV_TIMEOUT_S
