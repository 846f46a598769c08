"""The grace period between a stop signal and SIGKILL (``MGPU_LAB_KILL_GRACE_S``), read and checked once.

Its own small module (stdlib only) so the launcher checks the setting before anything starts without
loading the whole supervisor (:mod:`mgpu_lab.job.supervise`).
"""

from __future__ import annotations

import math

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

#: Environment variable holding the grace period, in seconds, between a stop signal and SIGKILL.
GRACE_ENV = "MGPU_LAB_KILL_GRACE_S"
DEFAULT_GRACE_S = 10.0
MAX_GRACE_S = 3600.0


class SuperviseError(Exception):
    """Bad supervision settings (reported by the launcher as a usage error)."""


def grace_from_env(environ: Mapping[str, str]) -> float:
    """The kill grace period from :data:`GRACE_ENV`: a finite number of seconds, 0 to MAX_GRACE_S."""
    raw = environ.get(GRACE_ENV)
    if raw is None:
        return DEFAULT_GRACE_S
    try:
        value = float(raw)
    except ValueError:
        raise SuperviseError(f"{GRACE_ENV}={raw!r}: give a number of seconds") from None
    if not math.isfinite(value) or not 0 <= value <= MAX_GRACE_S:
        raise SuperviseError(f"{GRACE_ENV}={raw!r}: give a number of seconds from 0 to {MAX_GRACE_S:g}")
    return value
