"""``cli.py check``: one check from its parsed flags to its printed report. The check session (session.py) chooses,
loads, runs and suppresses; this module adds what only the command line does: the warm replay of an unchanged
tree, the baseline, ``--fix`` and ``--add-suppressions`` with their re-check, and the report on stdout (one JSON
object with ``--format json`` whatever the outcome)."""

from __future__ import annotations

import argparse
import gc
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:  # the session imports the rules and parsers: a warm replay never loads them
    from collections import Counter

    from .adoption.suppress import Hidden
    from .caches.results import ResultCache
    from .loader.prefetch import Prefetched
    from .model import Finding, Project
    from .output.report import Summary
    from .session import Ignores, Session


def _split(codes: str) -> list[str]:
    return [c.strip() for c in codes.replace(" ", ",").split(",") if c.strip()]


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


def check(args: argparse.Namespace) -> int:
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
    if refused(root):
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


def refused(root: Path) -> bool:
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
