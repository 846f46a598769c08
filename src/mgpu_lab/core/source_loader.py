"""Run one Python file as a module of its own, without its package's ``__init__`` (stdlib only).

The launcher uses it for ``train.py``'s parser, and the trainer's checks for the task catalog
(:func:`mgpu_lab.train.checks.task_catalog`), which a ``--dry_run`` must get without numpy and gymnasium.
``importlib.util`` is avoided on purpose: its contextlib import costs start-up time.
"""

from __future__ import annotations

import sys
import types
from importlib.machinery import SourceFileLoader


def load_source(name: str, path: str) -> types.ModuleType:
    """The module that ``path`` defines, cached in ``sys.modules`` under ``name``."""
    module = sys.modules.get(name)
    if module is not None and getattr(module, "__file__", None) == path:
        return module
    module = types.ModuleType(name)
    module.__file__ = path
    SourceFileLoader(name, path).exec_module(module)
    sys.modules[name] = module
    return module
