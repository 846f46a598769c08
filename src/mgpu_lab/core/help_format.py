"""The entry scripts' help formatter (argparse's, sized without importing shutil) and their one-line error hook.

argparse builds a formatter for every ``add_argument`` call (to check metavars), and its own formatter
imports shutil to find the terminal width: a start-up cost the launcher's ``--dry_run`` and the
launcher's check of ``train.py``'s arguments would pay on every run.
"""

from __future__ import annotations

import argparse
import os
import sys

from mgpu_lab.core.errors import EXIT_USAGE


class _TerminalWidth:
    """Sets argparse's ``width`` from the terminal (or ``COLUMNS``, else 100) before argparse asks shutil."""

    def __init__(self, prog: str, **kwargs: object) -> None:
        try:
            width = os.get_terminal_size(sys.stdout.fileno()).columns
        except (OSError, ValueError, AttributeError):
            width = int(os.environ["COLUMNS"]) if os.environ.get("COLUMNS", "").isdigit() else 100
        kwargs.setdefault("width", max(width, 60) - 2)
        super().__init__(prog, **kwargs)  # type: ignore[call-arg]


class HelpFormatter(_TerminalWidth, argparse.HelpFormatter):
    """argparse's default formatter (description and epilog re-wrapped)."""


class RawHelpFormatter(_TerminalWidth, argparse.RawDescriptionHelpFormatter):
    """argparse's raw-description formatter (description and epilog kept as written)."""


class OneLineErrors:
    """argparse's error hook for an entry script: ``PROG: error: MESSAGE (see --help)`` on stderr and exit 2
    (:data:`mgpu_lab.core.errors.EXIT_USAGE`), without argparse's usage block."""

    def __init__(self, prog: str) -> None:
        self.prog = prog

    def __call__(self, message: str) -> None:
        sys.stderr.write(f"{self.prog}: error: {message} (see --help)\n")
        sys.stderr.flush()
        raise SystemExit(EXIT_USAGE)
