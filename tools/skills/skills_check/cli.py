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
import gc
import importlib.util
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn

if TYPE_CHECKING:  # the session imports the rules and parsers: a warm replay never loads them
    from collections import Counter

    from .adoption.suppress import Hidden
    from .caches.results import ResultCache
    from .loader.prefetch import Prefetched
    from .model import Finding, Project
    from .output.report import Summary
    from .session import Ignores, Session

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


def _split(codes: str) -> list[str]:
    return [c.strip() for c in codes.replace(" ", ",").split(",") if c.strip()]


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


def _baseline_args(args: argparse.Namespace, root: Path) -> tuple[Counter[str] | None, Path | None, Path | None]:
    """(recorded fingerprints, --baseline path, --write-baseline path), checked before anything runs."""
    if not (args.baseline or args.write_baseline):
        return None, None, None
    from .adoption.baseline import inside_root, load

    if args.fix and args.write_baseline:
        raise ValueError("--write-baseline records findings and --fix removes them: run one, then the other")
    read = inside_root(root, args.baseline, "--baseline") if args.baseline else None
    write_to = inside_root(root, args.write_baseline, "--write-baseline") if args.write_baseline else None
    return (load(read) if read is not None else None), read, write_to


def _jobs(text: str) -> int:
    """--jobs: a whole number of processes, at least 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of processes, 1 or more, got {text!r}")
    return value


class _Outcome(NamedTuple):
    """A finished check before it is reported: the project it read, what it found, what it hid, the notes."""

    project: Project
    findings: list[Finding]
    hidden: Hidden
    summary: Summary


class _Tee:
    """stderr, remembering what was written (for the JSON of an outcome that has no report)."""

    def __init__(self, stream: Any) -> None:
        self.stream, self.text = stream, []  # type: ignore[var-annotated]

    def write(self, text: str) -> int:
        self.text.append(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


# A check builds a few hundred thousand objects that live until it ends, and makes almost no cyclic garbage:
# collecting every 700 allocations (the default) spends several percent of a check on finding nothing. Raised
# for the check only, and restored after it.
GC_THRESHOLD = (50_000, 20, 20)


def _check(args: argparse.Namespace) -> int:
    """``check``, with the collector's threshold raised (``GC_THRESHOLD``)."""
    saved = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLD)
    try:
        return _check_output(args)
    finally:
        gc.set_threshold(*saved)


def _check_output(args: argparse.Namespace) -> int:
    """``check``; with ``--format json`` stdout holds one JSON object whatever the outcome: a check that
    stops before its report (no skill found, a usage or setup error) writes one saying why, unchecked."""
    if args.format != "json":
        return _check_report(args)
    tee, real = _Tee(sys.stderr), sys.stderr
    sys.stderr = tee
    try:
        rc = _check_report(args)
    finally:
        sys.stderr = real
    if not _REPORTED:
        import json

        why = " ".join("".join(tee.text).split()) or f"stopped with exit status {rc}"
        summary = {"errors": 0, "warnings": 0, "skills": 0, "rst_files": 0, "text": why, "checked": False}
        sys.stdout.write(
            json.dumps({"findings": [], "summary": summary, "notes": [], "fixes": [], "exit": rc}, indent=2)
        )
        sys.stdout.write("\n")
    return rc


_REPORTED: list[bool] = []  # a report (or its warm replay) was written to stdout in this process


def _check_report(args: argparse.Namespace) -> int:
    _REPORTED.clear()
    if not args.root.strip():
        print("error: --root is empty: give the folder to check (see --help)", file=sys.stderr)
        return 2
    clash = [f for f, on in (("--fix", args.fix), ("--baseline", args.baseline), ("--write-baseline",
             args.write_baseline)) if on] if args.add_suppressions else []  # fmt: skip
    if clash:
        print(f"error: --add-suppressions and {clash[0]}: run one, then the other (see --help)", file=sys.stderr)
        return 2
    overrides = {k: getattr(args, k) for k in ("skills", "docs", "launcher", "trainer")}
    root = Path(args.root)
    if _refused(root):
        return 2
    results = None
    try:
        recorded, read, write_to = _baseline_args(args, root)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    writes = args.fix or args.add_suppressions
    if not writes and not args.no_cache and root.is_dir() and read is None and write_to is None:
        results, replayed = _replay(args, root, overrides)
        if replayed is not None:
            return replayed
    from .loader import begin_load

    early = None if writes else begin_load(root, overrides, not args.no_cache, _jobs_wanted(args))
    try:
        return _checked(args, root, overrides, results, (recorded, read, write_to), early)
    finally:
        if early is not None:
            early.close()


def _replay(args: argparse.Namespace, root: Path, overrides: dict[str, str | None]) -> tuple[ResultCache, int | None]:
    """(the result cache, the exit status of the report it replayed, or None when the inputs changed)."""
    from .caches.results import ResultCache  # a warm check: replay the last report when nothing changed

    results = ResultCache(
        root,
        {
            "format": args.format,
            "select": args.select,
            "ignore": args.ignore,
            "profile": args.profile,
            "strict": args.strict,
            **overrides,
        },
    )
    hit = results.lookup()
    if hit is None:
        return results, None
    _REPORTED.append(True)
    sys.stdout.write(hit["stdout"])
    sys.stderr.write(hit["stderr"])
    return results, hit["rc"]


def _jobs_wanted(args: argparse.Namespace) -> int:
    """--jobs, else the default (``forked.default_jobs``)."""
    jobs = getattr(args, "jobs", None)
    if jobs is None:
        from .forked import default_jobs

        jobs = default_jobs()
    return int(jobs)


def _checked(
    args: argparse.Namespace,
    root: Path,
    overrides: dict[str, str | None],
    results: ResultCache | None,
    baseline: tuple[Counter[str] | None, Path | None, Path | None],
    early: Prefetched | None,
) -> int:
    """The check after the replay missed: rules chosen, tree loaded (``early``: a worker already parsing it),
    findings staged against the baseline (``baseline``: what it recorded, where to read and write it), report."""
    recorded, read, write_to = baseline
    from .loader import SetupError
    from .runner import load_rules, unknown_patterns
    from .session import Session

    given = _split(args.profile) if args.profile is not None else None

    select, ignore = _split(args.select), _split(args.ignore)
    rules = None  # loaded for the chosen profiles only (Session.choose), unless codes are named
    if select or ignore:
        rules = load_rules()
        bad = unknown_patterns(select + ignore, rules)
        if bad:
            print(f"error: unknown rule code(s) {', '.join(bad)} (`cli.py explain` lists them)", file=sys.stderr)
            return 2
    lock, lock_errors = _fix_guard(args, root)
    errors: tuple[type[Exception], ...] = (SetupError, OSError, *lock_errors)
    try:
        scope = Session.for_root(root, overrides, given, select, ignore, rules, not args.no_cache, _jobs_wanted(args))
        with lock:  # --fix: one fixer per tree, for the whole read-fix-write cycle
            outcome = _run_check(args, scope, early)
    except errors as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if isinstance(outcome, int):
        return outcome
    if read is not None or write_to is not None:
        from .adoption.baseline import stage

        findings, notes = stage(outcome.project, outcome.findings, read, write_to, recorded)
        outcome.summary.notes += notes
        outcome = outcome._replace(findings=findings)
    return _report(args, scope, outcome, results)


def _refused(root: Path) -> bool:
    """True (after one line on stderr) when ``root`` is ``/`` or on a pseudo filesystem (/proc, /sys)."""
    from .inputs import refused_root

    why = refused_root(root)
    if why:
        print(f"error: --root {root} {why}: give a checkout's folder", file=sys.stderr)
    return why is not None


def _fix_guard(args: argparse.Namespace, root: Path) -> tuple[Any, tuple[type[Exception], ...]]:
    """With --fix or --add-suppressions: this tree's fix lock (a context manager) and the error it raises; else a
    no-op and none."""
    if not (args.fix or args.add_suppressions):
        import contextlib

        return contextlib.nullcontext(), ()
    from .fix import FixError, fix_lock

    return fix_lock(root), (FixError,)


def _run_check(args: argparse.Namespace, scope: Session, early: Prefetched | None = None) -> _Outcome | int:
    """Load (``early``: a worker already parsing the tree), check and (with --fix) fix; an exit status when it
    stops early. Raises SetupError or OSError."""
    from .output.report import Summary

    project = scope.load(early)
    if not project.skills:
        from .discover import NO_SKILLS, no_skill_line

        print(no_skill_line(project), file=sys.stderr)
        return NO_SKILLS
    ignores = scope.ignores(project)
    outcome = _Outcome(project, *scope.run(project, ignores), Summary())
    if args.add_suppressions:
        return _add_suppressions(scope, outcome)
    return _fix(args, scope, ignores, outcome) if args.fix else outcome


def _add_suppressions(scope: Session, outcome: _Outcome) -> _Outcome | int:
    """Write a suppression for each finding (adoption/add.py), then check again; 2 when a write fails."""
    from .adoption.add import plan
    from .fix import FixError, apply_fixes
    from .rules.registry import RULES

    planned = plan(outcome.project, outcome.findings, {r.code for r in RULES if r.whole_file})
    summary = outcome.summary
    try:
        changed, notes = apply_fixes(outcome.project, planned.fixes)
    except FixError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    summary.notes += notes + planned.notes
    summary.notes.append(
        f"--add-suppressions: {planned.added} finding(s) suppressed in {len(changed)} file(s); "
        f"write the reasons (search for `{_reason()}`)"
        if changed
        else "--add-suppressions: nothing to suppress"
    )
    if not changed:
        return outcome
    project = scope.load()  # pyproject.toml may have changed: its per-file ignores are read again
    return _Outcome(project, *scope.run(project), summary)


def _reason() -> str:
    from .adoption.add import REASON

    return REASON


def _fix(args: argparse.Namespace, scope: Session, ignores: Ignores, outcome: _Outcome) -> _Outcome | int:
    """Apply the chosen fixes, then check again (what is left); 2 when a fix is refused."""
    from .fix import FixError, apply_fixes

    summary, findings = outcome.summary, outcome.findings
    try:
        chosen_fixes = [f for f in findings if f.fix is not None and (f.fix.safe or not args.only_safe)]
        summary.fixes, notes = apply_fixes(outcome.project, chosen_fixes)
    except FixError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    summary.notes += notes
    if args.only_safe and len(chosen_fixes) < sum(1 for f in findings if f.fix is not None):
        summary.notes.append("--only-safe: fixes that need review were left (see the findings)")
    if not summary.fixes and not notes:
        summary.notes.append("--fix: nothing to fix")
    if not summary.fixes:
        return outcome
    project = scope.load()
    return _Outcome(project, *scope.run(project, ignores), summary)


def _report(args: argparse.Namespace, scope: Session, outcome: _Outcome, results: ResultCache | None) -> int:
    """Write the report and the notes; store them for a warm replay when ``results`` (a ResultCache) is given."""
    from .output.report import exit_code, render

    project, summary = outcome.project, outcome.summary
    summary.skills, summary.rst = len(project.skills), len(project.rst)
    summary.rule_sets = scope.rule_sets(project)
    drift_notes = project.drift_notes
    absent = [n for n in drift_notes if n.startswith(("no launcher at", "no trainer at"))]
    house = any(
        r.profile == "isaaclab" and (not scope.select or any(r.code.startswith(c) for c in scope.select))
        for r in scope.rules
    )  # the house profile runs (with --select: one of its rules is selected)
    if scope.why == "the defaults" or (len(absent) == 2 and not house):
        # the default launcher and trainer paths are the house layout's: a tree with neither script that has
        # not adopted the house profile is not told they are missing (the rule-set line says what drift found)
        drift_notes = [n for n in drift_notes if n not in absent]
    summary.notes = project.notes + drift_notes + summary.notes + [n for n in (outcome.hidden.note(),) if n]
    out = render(args.format, outcome.findings, summary, scope.rules, *_sarif_extras(args, project, outcome.findings))
    err = "".join(f"note: {note}\n" for note in summary.notes) if args.format not in ("json", "sarif") else ""
    rc = exit_code(outcome.findings, args.strict)
    _REPORTED.append(True)
    sys.stdout.write(out)
    sys.stderr.write(err)
    if results is not None:
        results.store(project, out, err, rc)
    return rc


def _sarif_extras(args: argparse.Namespace, project: Any, findings: list[Any]) -> tuple[Any, Any]:
    """For ``--format sarif``: each finding's fingerprint (the baseline's, stable when lines move) and each
    rule code's section anchor in RULES.md; (None, None) for the other formats."""
    if args.format != "sarif":
        return None, None
    from . import rules_md
    from .adoption.baseline import fingerprint, line_source
    from .output.sarif import fingerprints

    line_of = line_source(project)
    return fingerprints(findings, lambda f: fingerprint(f, line_of)), rules_md.anchors()


def _route(args: argparse.Namespace) -> int:
    """Print every skill's score for the prompt, best first, with the terms that decided it."""
    from .loader import SetupError, load_project
    from .routing import THRESHOLD, terms
    from .rules.routing import index_of, threshold

    if not args.prompt.strip():
        print("error: the prompt is empty: give the text a user might ask (see --help)", file=sys.stderr)
        return 2
    if _refused(Path(args.root)):
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
        from .lsp import server as lsp
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
    return _guarded(argv, _check, args)


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
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:  # the reader went away: as a broken pipe during the check
        status = 1
    forked = sys.modules.get(f"{__package__}.forked")  # loaded only where a check could fork
    if forked is not None:
        forked.reap()
    os._exit(status)


if __name__ == "__main__":
    entry()
