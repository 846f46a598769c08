"""The checked tree -> ``Project``: skills, RST docs, argparse specs, discovery aliases, config.

Paths come from ``pyproject.toml`` ``[tool.skills-check]`` (keys ``skills``, ``docs``, ``launcher``,
``trainer``), overridden by command-line flags. The tools whose command lines are checked come from its
``tools`` table: command words -> the script or module whose argparse defines them, e.g.

    [tool.skills-check.tools]
    "mgpu-lab train" = "scripts/reinforcement_learning/train.py"
    "mgpu-lab train_multigpu" = { script = "scripts/reinforcement_learning/train_multigpu.py",
                                  forwards = "mgpu-lab train", also = ["python -m mgpu_lab.cli train_multigpu"] }

``module = "pkg.cli.train"`` names a module instead of a script (found at ``pkg/cli/train.py``, under
``src/`` or ``source/*/`` too); ``forwards`` names the tool that gets the flags this one does not know. Files that cannot be read become findings; only a
missing root or an unreadable ``pyproject.toml`` stops the check (``SetupError``, exit 2).

Split by what it loads: ``config`` (the settings), ``documents`` (Markdown, RST, skills, evals.json),
``tools`` (argparse specs), ``project`` (the whole tree).
"""

from .config import CONVENTIONS, DEFAULTS, SetupError, load_config
from .documents import import_parse_rst, load_evals, load_markdown, load_rst, load_rst_documents, resolve_includes
from .project import all_problems, begin_load, load_project
from .tools import load_argspec

__all__ = [
    "CONVENTIONS",
    "DEFAULTS",
    "SetupError",
    "all_problems",
    "begin_load",
    "import_parse_rst",
    "load_argspec",
    "load_config",
    "load_evals",
    "load_markdown",
    "load_project",
    "load_rst",
    "load_rst_documents",
    "resolve_includes",
]
