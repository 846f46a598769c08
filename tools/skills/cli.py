#!/usr/bin/env python3
# /// script
# requires-python = ">=3.11"
# dependencies = [
#     "docutils==0.22.4; python_version < '3.13'",
#     "docutils==0.23; python_version >= '3.13'",
#     "markdown-it-py==4.3.0",
#     "markdown-it-pyrs==0.4.0",
#     "mdit-py-plugins==0.7.0",
#     "pathspec==1.1.1",
#     "PyYAML==6.0.4",
# ]
# ///
"""Skill/doc/launcher drift checker: the script entry of the ``skills_check`` package beside it.

    uv run --no-project python tools/skills/cli.py check [--root DIR] [--format text|json|github|sarif]
    uv run --no-project python tools/skills/cli.py explain [CODE]
    uv run --no-project python tools/skills/cli.py route "PROMPT" [--root DIR]

Python puts this script's folder first on ``sys.path`` when it runs it, so ``skills_check`` imports from
beside it; this file adds nothing to ``sys.path``. The header above lists the parsers: when they are not
importable, the package re-runs this script once through ``uv run --no-project --script``.
"""

from skills_check.cli import entry

if __name__ == "__main__":
    entry()
