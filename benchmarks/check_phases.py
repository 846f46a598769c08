"""Where one check's CPU time goes, phase by phase, on a tree: each phase's seconds and its share of the whole
(printed, never asserted). Issue 48 asked to find where the time goes before making the checker faster; this
script keeps that view at hand.

The check runs in this process as ``check --no-cache --jobs 1`` does (no forked helper: each phase is the work
itself), with the process's imports timed first. Phases are measured by wrapping the functions that do them, so
a nested phase (the frontmatter, read while a document is built) is shown under its parent as well.

    uv run --frozen python benchmarks/check_phases.py DIR [--rules 12]
"""

from __future__ import annotations

import argparse
import collections
import gc
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

STARTED = time.process_time()

from skills_check import runner  # imported after the clock started: the imports are a phase
from skills_check.loader import documents, project
from skills_check.output.report import Summary, render
from skills_check.parsers import markdown, markdown_parts, markdown_rs
from skills_check.session import Session

IMPORTED = time.process_time()
SPENT: collections.Counter[str] = collections.Counter()

#: (module, function, phase): the functions whose time is a phase
WRAPPED = [
    (project, "_walk", "walk the tree"),
    (documents, "read_text", "read files (documents and scripts)"),
    (markdown, "quick_read", "markdown: the quick reader's test"),
    (markdown_rs, "_quiet_tree", "markdown: the Rust port's tree"),
    (markdown_rs, "build", "markdown: the document from the tree"),
    (markdown_parts, "read_frontmatter", "  of which frontmatter (YAML)"),
    (markdown, "_token_document", "markdown: markdown-it-py's tokens to the document"),
    (project, "_scripts_and_links", "scripts and links the documents name"),
]


def _timed(func: Callable[..., Any], phase: str) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        start = time.process_time()
        try:
            return func(*args, **kwargs)
        finally:
            SPENT[phase] += time.process_time() - start

    return run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path, help="the tree to check")
    ap.add_argument("--rules", type=int, default=12, help="rules shown, the costliest first (default 12)")
    args = ap.parse_args()
    if not args.root.is_dir():
        ap.error(f"{args.root}: not a folder")
    gc.set_threshold(50_000, 20, 20)  # as the check sets it (checking.GC_THRESHOLD)
    for module, name, phase in WRAPPED:
        setattr(module, name, _timed(getattr(module, name), phase))
    rules: collections.Counter[str] = collections.Counter()
    run_rule = runner._run_rule

    def timed_rule(proj: Any, rule: Any) -> Any:
        start = time.process_time()
        try:
            return run_rule(proj, rule)
        finally:
            rules[f"{rule.code} {rule.name}"] += time.process_time() - start

    runner._run_rule = timed_rule
    phases = _check(args.root)
    total = time.process_time() - STARTED
    print(f"== {args.root.name}: {total:.3f} s of CPU in one process")
    shown = [("imports", IMPORTED - STARTED), *phases.items(), *SPENT.most_common()]
    for phase, spent in sorted(shown, key=lambda p: -p[1]):
        print(f"{spent:7.3f} s  {spent / total:6.1%}  {phase}")
    print(f"the {args.rules} costliest rules of {len(rules)}:")
    for name, spent in rules.most_common(args.rules):
        print(f"{spent:7.3f} s  {spent / total:6.1%}  {name}")
    return 0


def _check(root: Path) -> dict[str, float]:
    """The check's outer phases (settings and rules chosen, tree loaded, rules run, report made): their seconds."""
    out: dict[str, float] = {}
    start = time.process_time()
    session = Session.for_root(
        root, dict.fromkeys(("skills", "docs", "launcher", "trainer")), None, [], [], None, False, 1
    )
    out["settings and rules chosen"] = time.process_time() - start
    start = time.process_time()
    loaded = session.load()
    out["LOAD (all loading, phases below included)"] = time.process_time() - start
    start = time.process_time()
    findings, _ = session.run(loaded)
    out["RUN (rules and suppressions, each rule below)"] = time.process_time() - start
    start = time.process_time()
    render("text", findings, Summary(), session.rules, None, None)
    out["report"] = time.process_time() - start
    return out


if __name__ == "__main__":
    sys.exit(main())
