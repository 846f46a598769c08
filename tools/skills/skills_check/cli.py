"""Skill/doc/launcher drift checker: the command line (the script ``tools/skills/cli.py`` and the installed
``skills-check`` both call ``entry``).

    uv run --no-project python tools/skills/cli.py check [--root DIR] [--format text|json|github|sarif]
        [--select CODES] [--ignore CODES] [--fix] [--strict] [--no-cache] [--jobs N] [--explain CODE]
        [--baseline FILE] [--write-baseline FILE] [--add-suppressions]
    uv run --no-project python tools/skills/cli.py explain [CODE]
    uv run --no-project python tools/skills/cli.py route "PROMPT" [--root DIR]

``[tool.skills-check]`` is strict (loader/config.py): an unknown key, section or profile, or a wrong type, is
one ``pyproject.toml:LINE:`` error naming the nearest valid name, exit 2. ``--add-suppressions`` writes a
suppression for each finding (adoption/add.py); ``--format sarif`` carries fingerprints and rule links.
Without [tool.skills-check] it finds every skill (a folder holding SKILL.md) under the root and runs the
generic profiles (spec, claude, links, and drift wherever its inputs are); the house profiles (isaaclab,
routing) run where the tree lists them.
Exit 0: clean (warnings alone exit 0 unless --strict); 1: findings; 2: usage error or unreadable setup;
3: no skill found (a folder holding SKILL.md), so nothing was checked: never reported as clean.
Parsed files are cached by content digest (see caches/parse.py); ``--no-cache`` parses everything afresh.
A cold check forks a worker that parses the RST pages, skills and scripts meanwhile (loader/prefetch.py), and on
a large tree a process that shares the rules (forked.py); ``--jobs 1`` keeps everything in one process.
When the parsers are not importable, it re-runs itself once through ``uv run --no-project --script``
(the script's PEP 723 header), or says in one line what to run.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path
from typing import NoReturn

from . import checking

HERE = Path(__file__).resolve().parent
# the PEP 723 script beside the package in a checkout (tools/skills/cli.py): what a re-run under uv runs
SCRIPT = HERE.parent / "cli.py"
PARSERS = ("docutils", "markdown_it", "mdit_py_plugins", "yaml", "pathspec")
REEXEC_GUARD = "SKILLS_CHECK_REEXEC"  # set in the re-run child: never re-run twice


def _missing_parsers() -> list[str]:
    missing = []
    for name in PARSERS:
        try:
            if importlib.util.find_spec(name) is None:
                missing.append(name)
        except (ImportError, ValueError):
            missing.append(name)
    return missing


def _bootstrap(argv: list[str], missing: list[str] | None = None) -> int | None:
    """Re-run under uv when parsers are missing; an exit status, or None to go on here."""
    missing = missing or _missing_parsers()
    if not missing:
        return None
    import shutil
    import subprocess

    script = str(SCRIPT)
    hint = f"uv run --no-project --script {script} {' '.join(argv)}".rstrip()
    uv = shutil.which("uv")
    if os.environ.get(REEXEC_GUARD) or uv is None or not SCRIPT.is_file():
        why = (
            "uv is not on PATH"
            if uv is None
            else "the uv environment lacks them too"
            if SCRIPT.is_file()
            else "an installed skills-check lacks its dependencies"
        )
        print(
            f"error: parsers missing ({', '.join(missing)}; {why}): run `{hint}` "
            f"or install docutils markdown-it-py mdit-py-plugins PyYAML pathspec",
            file=sys.stderr,
        )
        return 2
    env = dict(os.environ, **{REEXEC_GUARD: "1"})
    try:
        return subprocess.call([uv, "run", "--no-project", "--script", script, *argv], env=env)
    except OSError as exc:
        print(f"error: could not run uv ({exc}): run `{hint}`", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit 2)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"error: {message} (see --help)\n")


# The literal argparse table stays compact (a few lines an option), as readers and the checker read it.
# fmt: off
def build_parser() -> argparse.ArgumentParser:
    installed = Path(sys.argv[0]).stem == "skills-check"  # the distribution's command, not the script path
    parser = _Parser(prog="skills-check" if installed else "tools/skills/cli.py",
                     description="Check skills, RST docs and launcher for drift.", allow_abbrev=False)
    parser.add_argument("--explain", metavar="CODE", help="print what a rule checks and exit")
    sub = parser.add_subparsers(dest="command")
    check = sub.add_parser("check", help="check the tree", allow_abbrev=False,
                           description="Check the tree. Settings: [tool.skills-check] in its pyproject.toml, strict: "
                                       "an unknown key, profile or section, or a wrong type, is one error naming the "
                                       "nearest valid name (exit 2). Exit 0 clean, 1 findings, 2 usage or setup "
                                       "error, 3 no skill found.")
    check.error = parser.error  # type: ignore[method-assign]
    check.add_argument("--root", default=".", help="checkout to check (default: current directory)")
    check.add_argument("--format", choices=("text", "json", "github", "sarif"), default="text",
                       help="report format (default text; sarif: SARIF 2.1.0 for code scanning, with fingerprints "
                            "that survive lines moving and each rule's link to RULES.md)")
    check.add_argument("--select", default="", help="comma-separated codes or prefixes to report (a prefix such as SK1 names every SK1xx code)")
    check.add_argument("--ignore", default="", help="comma-separated codes or prefixes to leave out")
    check.add_argument("--fix", action="store_true",
                       help="apply the fixes the selected rules' findings carry (the NCCL mirror table from the RST "
                            "list, the launcher options table from argparse, an unused suppression removed), then "
                            "check again")
    check.add_argument("--only-safe", action="store_true",
                       help="with --fix: apply only the fixes marked safe to apply unattended (they copy a source "
                            "of truth and drop nothing a person wrote)")
    check.add_argument("--strict", action="store_true", help="exit 1 on warnings too")
    check.add_argument("--add-suppressions", action="store_true",
                       help="write a suppression with a reason to fill in (TODO) for each finding, then check again: "
                            "a comment above it in Markdown, RST and YAML frontmatter, a [tool.skills-check."
                            "per-file-ignores] entry in pyproject.toml for JSON and other files (see RULES.md, SU0xx); "
                            "--fix later removes the ones that no longer hide anything")
    check.add_argument("--baseline", metavar="FILE", default=None,
                       help="leave out the findings recorded in FILE (see --write-baseline) and say how many matched "
                            "and how many of its entries are gone")
    check.add_argument("--write-baseline", metavar="FILE", default=None,
                       help="record every finding in FILE and report none (with --baseline FILE too: keep only the "
                            "entries that still match, to shrink it as findings are fixed)")
    check.add_argument("--no-cache", action="store_true",
                       help="parse every file afresh (the parse cache lives in ~/.cache/skills-check)")
    check.add_argument("--jobs", type=_jobs, default=None, metavar="N",
                       help="processes that load and check the tree (default: 2 where two or more cores are free "
                            "to this process, else 1): on a tree with RST pages or many skills, a worker process "
                            "parses the pages, loads skills and parses the scripts while the check loads the rest, "
                            "and on a large tree a second one shares the rules; 1 keeps everything in this process; "
                            "more than 2 are not used")
    check.add_argument("--explain", metavar="CODE", dest="explain_check", help="print what a rule checks and exit")
    check.add_argument("--skills", default=None, help="skill folder or glob (overrides [tool.skills-check] skills; "
                       "default: every folder holding SKILL.md under the root)")
    _add_house_layout(check)
    check.add_argument("--profile", default=None, metavar="NAMES",
                       help="comma-separated rule profiles to run (spec, claude, links, drift, isaaclab, routing; "
                            "default: [tool.skills-check] profiles, else spec,claude,links,drift: the drift rules "
                            "compare what they find, such as a script's argparse with the commands written for it; "
                            "codes given to --select run whatever their profile)")
    explain = sub.add_parser("explain", help="print what a rule checks (all rules without CODE)")
    explain.add_argument("code", nargs="?")
    route = sub.add_parser("route", help="rank the skills for a prompt (the routing profile's lexical model) and "
                           "show the words that decided it", allow_abbrev=False)
    route.error = parser.error  # type: ignore[method-assign]
    route.add_argument("prompt", help="what a user might ask")
    route.add_argument("--root", default=".", help="checkout whose skills are ranked (default: current directory)")
    route.add_argument("--skills", default=None, help="skills folder (overrides [tool.skills-check])")
    route.add_argument("--no-cache", action="store_true", help="parse every file afresh")
    rules_cmd = sub.add_parser("rules", help="print RULES.md as generated from the rule registry")
    rules_cmd.add_argument("--write", action="store_true", help="rewrite tools/skills/RULES.md when it differs")
    lsp = sub.add_parser("lsp", help="serve the checker's findings, fixes and rule docs to an editor (LSP on stdio)",
                         allow_abbrev=False)
    lsp.error = parser.error  # type: ignore[method-assign]
    lsp.add_argument("--root", default=None, help="tree to check (default: the editor's workspace folder)")
    lsp.add_argument("--debounce", type=float, default=0.1, metavar="SECONDS",
                     help="quiet time after an edit before checking (default 0.1; open and save check at once)")
    return parser
# fmt: on


def _add_house_layout(check: argparse.ArgumentParser) -> None:
    """``check``'s options for the house layout's paths, in a group of their own (a tree without them skips them)."""
    from .loader.config import DEFAULTS  # the house layout's paths, defined once

    house = check.add_argument_group(
        "house layout",
        "where this repository's Isaac Lab layout keeps its RST docs, launcher and trainer (the drift rules compare "
        "them with the skills); a tree without them skips those comparisons",
    )
    for key, default in DEFAULTS.items():
        house.add_argument(
            f"--{key}",
            default=None,
            metavar="PATH",
            help=f"the {key} (overrides [tool.skills-check] {key}; default {default})",
        )


def _explain(code: str | None) -> int:
    from .runner import load_rules, matches

    rules = load_rules()
    if not code:
        for r in rules:
            print(f"{r.code}  [{r.profile}] {r.name}: {r.summary}")
        return 0
    hits = [r for r in rules if r.code.upper() == code.strip().upper()] or [r for r in rules if matches(r.code, [code])]
    if not hits:
        print(f"error: unknown rule code {code!r} (`cli.py explain` lists them)", file=sys.stderr)
        return 2
    for r in hits:
        print(f"{r.code} ({r.name}, {r.severity})\n\n{r.explanation.strip()}\n")
    return 0


def _rules_md(write: bool) -> int:
    from . import rules_md

    if write:
        changed = rules_md.write()
        print(f"{rules_md.RULES_MD}: {'rewritten' if changed else 'up to date'}")
    else:
        sys.stdout.write(rules_md.render())
    return 0


def _jobs(text: str) -> int:
    """--jobs: a whole number of processes, at least 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of processes, 1 or more, got {text!r}")
    return value


def _route(args: argparse.Namespace) -> int:
    """Print every skill's score for the prompt, best first, with the terms that decided it."""
    from .loader import SetupError, load_project
    from .routing import THRESHOLD, terms
    from .rules.routing import index_of, threshold

    if not args.prompt.strip():
        print("error: the prompt is empty: give the text a user might ask (see --help)", file=sys.stderr)
        return 2
    if checking.refused(Path(args.root)):
        return 2
    try:
        project = load_project(Path(args.root), {"skills": args.skills}, use_cache=not args.no_cache)
    except (SetupError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    index = index_of(project)
    if not index.docs:
        print(f"error: no skill with a name and a description under {project.root}", file=sys.stderr)
        return 2
    limit = threshold(project) if project else THRESHOLD
    print(f"prompt terms: {' '.join(terms(args.prompt)) or '(none)'}")
    ranking = index.rank(args.prompt)
    width = max(len(s.name) for s in ranking)
    for i, s in enumerate(ranking, start=1):
        why = ", ".join(f"{t} {v:.2f}" for t, v in s.deciding(6)) or "no shared term"
        print(f"{i:2d}. {s.name:<{width}}  {s.score:6.2f}  {why}")
    top = ranking[0]
    if top.score < limit:
        print(f"(the top score is under the routing threshold {limit:g}: a should-not case scoring this low passes)")
    print(
        "a lexical stand-in for an agent's choice (BM25 over name and description; see tools/skills/skills_check/routing.py)"
    )
    return 0


def _lsp(args: argparse.Namespace) -> int:
    """The language server (lsp.py); pygls is imported here only, so ``check`` never pays for it."""
    if not 0 <= args.debounce <= 10:
        print(f"error: --debounce {args.debounce} is out of range: give 0 to 10 seconds", file=sys.stderr)
        return 2
    if args.root is not None and not Path(args.root).is_dir():
        print(f"error: --root {args.root}: not a directory", file=sys.stderr)
        return 2
    try:
        from .lsp import app as lsp
    except ImportError as exc:
        if (exc.name or "").split(".")[0] not in ("pygls", "lsprotocol"):
            raise
        print(
            f"error: the language server needs pygls ({exc.name} is not importable): run it in the project "
            "environment, `uv run python tools/skills/cli.py lsp` (the `lsp` extra), or `pip install 'pygls>=2'`",
            file=sys.stderr,
        )
        return 2
    return lsp.main(args.root, args.debounce)


def _guarded(argv: list[str], func, *args) -> int:
    """Run a command; a broken rules package is exit 2, an unusable parser library re-runs under uv."""
    try:
        return func(*args)
    except ImportError as exc:  # a parser present but unusable (e.g. too old): re-run under uv once
        return _bootstrap(argv, [f"import failed: {exc}"]) or 2
    except Exception as exc:
        runner = sys.modules.get(f"{__package__}.runner")  # imported only when rules ran: a warm check never imports it
        if runner is not None and isinstance(exc, runner.RulesError):
            print(f"error: {exc}", file=sys.stderr)
            return 2
        raise


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    status = _bootstrap(argv)
    if status is not None:
        return status
    parser = build_parser()
    args = parser.parse_args(argv)
    code = args.explain or getattr(args, "explain_check", None)
    if code or args.command == "explain":
        return _guarded(argv, _explain, code or getattr(args, "code", None))
    if args.command == "rules":
        return _guarded(argv, _rules_md, args.write)
    if args.command == "route":
        return _guarded(argv, _route, args)
    if args.command == "lsp":
        return _lsp(args)
    if args.command != "check":
        parser.print_usage(sys.stderr)
        print("error: give a command: check, route, explain, rules or lsp", file=sys.stderr)
        return 2
    return _guarded(argv, checking.check, args)


def entry() -> None:
    """The process: the script's ``__main__`` and the installed ``skills-check`` command."""
    try:
        status = main()
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(1)
    _leave(status)


def _leave(status: int) -> NoReturn:
    """End the process once its output is flushed and its forked helpers are reaped, without the interpreter's
    teardown: a check has built a few hundred thousand objects, and freeing them one by one at exit took longer
    than some checks (10-20 ms). Nothing is left to do by then: every file was written, no handler waits at exit
    (coverage's own ``os._exit`` patch still saves what it measured). The helpers, ended already, are waited for
    so that none is left to the system and their time counts in this process's own (as a timer sees it)."""
    try:
        for stream in (sys.stdout, sys.stderr):
            if not stream.closed:  # the language server's protocol library closes stdout on `exit`
                stream.flush()
    except BrokenPipeError:  # the reader went away: as a broken pipe during the check
        status = 1
    forked = sys.modules.get(f"{__package__}.forked")  # loaded only where a check could fork
    if forked is not None:
        forked.reap()
    os._exit(status)


if __name__ == "__main__":
    entry()
