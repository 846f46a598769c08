"""skills_check: checks agent skills (SKILL.md), RST docs and argparse launchers against each other.

Arranged by concern: ``parsers`` (Markdown, RST, argparse read statically), ``loader`` (the tree ->
``model.Project``), ``rules`` (one function per rule, grouped by profile), ``output`` (text, JSON, GitHub,
SARIF), ``adoption`` (inline suppressions, baseline), ``caches`` (parse and result caches), ``lsp`` (the
language server). Importing this package imports nothing else: ``cli.entry`` is the command.
"""
