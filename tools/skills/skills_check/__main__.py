"""``python -m skills_check``: the command line."""

from .cli import entry

entry()
