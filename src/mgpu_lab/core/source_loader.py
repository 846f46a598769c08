"""Run one Python file as a module of its own, without its package's ``__init__`` (stdlib only).

The launcher uses it for ``train.py``'s parser and for the task catalog: ``mgpu_lab.train.tasks``'s ``__init__``
registers the tasks with gymnasium (numpy, about a second), which a ``--dry_run`` must not pay for.
``importlib.util`` is avoided on purpose: its contextlib import costs start-up time.
"""

from __future__ import annotations

import sys
import types


def load_source(name: str, path: str) -> types.ModuleType:
    """The module that ``path`` defines, cached in ``sys.modules`` under ``name``."""
    module = sys.modules.get(name)
    if module is not None and getattr(module, "__file__", None) == path:
        return module
    from importlib.machinery import SourceFileLoader

    module = types.ModuleType(name)
    module.__file__ = path
    SourceFileLoader(name, path).exec_module(module)
    sys.modules[name] = module
    return module


def task_catalog() -> types.ModuleType:
    """``mgpu_lab.train.tasks.catalog``: the package's own when it is imported already, else the file on its own."""
    if "mgpu_lab.train.tasks" in sys.modules:
        import mgpu_lab.train.tasks.catalog

        return mgpu_lab.train.tasks.catalog
    import os

    import mgpu_lab

    return load_source("_mgpu_lab_task_catalog", os.path.join(os.path.dirname(mgpu_lab.__file__), "train",
                                                               "tasks", "catalog.py"))
