"""The one description of a launch: built once from argv by :func:`mgpu_lab.launch.launcher.make_config`, then
passed whole to the command builder (:func:`mgpu_lab.launch.launcher.build_command`) and to the runner
(:func:`mgpu_lab.job.monitor.run_job`). Nothing copies its fields into another record.

It lives here, in the job layer, because both the launcher (above) and the runner (here) read it; it imports
nothing of either. Everything in it is already validated; what is derived from several inputs (``on_cpu``,
``hosts_store``, the kill grace) is computed once, by the launcher, and stored.
"""

from __future__ import annotations

from dataclasses import dataclass, field

TYPE_CHECKING = False  # typing stays unimported: --dry_run must start fast
if TYPE_CHECKING:
    from collections.abc import Mapping

DEFAULT_RDZV_TIMEOUT_S = 600.0  # torchrun's own join timeout (static and c10d)


@dataclass(frozen=True)
class LaunchConfig:
    """One validated launch. ``None`` means "not given" (torchrun's ``PET_*`` environment then applies)."""

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
    #: seconds between SIGTERM and SIGKILL when the job is stopped (MGPU_LAB_KILL_GRACE_S)
    grace_s: float
    dry_run: bool
    #: the launcher's environment (the ranks inherit it; PET_* and SLURM_* were read from it)
    environ: Mapping[str, str] = field(repr=False)
    #: what cluster detection filled in and the /dev/shm warning: lines for stderr (--dry_run included)
    inferred: tuple[str, ...] = ()
    #: what every rank runs for another training script (``--train_script``/``-m``: this package's rank entry
    #: around it); None: this project's train.py, with ``--rl_library`` and ``--distributed``
    foreign_argv: tuple[str, ...] | None = None

    @property
    def rdzv_timeout(self) -> float:
        """The rendezvous deadline in seconds."""
        return self.rdzv_timeout_given if self.rdzv_timeout_given is not None else DEFAULT_RDZV_TIMEOUT_S
