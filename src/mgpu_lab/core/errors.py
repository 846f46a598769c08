"""The exit statuses of ``mgpu-lab train`` and ``mgpu-lab train_multigpu`` (one contract) and the error that
means "bad input" (stdlib only; the launcher imports it before anything else).

The same table is in ``docs/source/features/multi_gpu.rst`` and the skill's ``reference.md``; a test
compares both with :data:`EXIT_STATUSES`.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_HANG = 3
EXIT_RDZV = 4
#: 128 + N after the launcher got signal N (130 after Ctrl-C, 143 after SIGTERM, 129 after SIGHUP)
EXIT_SIGNAL_BASE = 128

#: status -> what it means: each row of the documented tables starts with these words
EXIT_STATUSES: dict[str, str] = {
    str(EXIT_OK): "done",
    str(EXIT_FAILED): "training failed",
    str(EXIT_USAGE): "refused input",
    str(EXIT_HANG): "hang",
    str(EXIT_RDZV): "rendezvous deadline passed",
    f"{EXIT_SIGNAL_BASE} + N": "signal N",
}


class UsageError(Exception):
    """Bad input the user can fix: one line on stderr and exit status 2, with nothing created."""
